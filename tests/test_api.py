"""The top-level Python API: ssgp_ppl.fit on arrays, a data set name and a TOML path; predictions
in original units against a float64 reference; catalog(), load() and __version__."""

import warnings
from importlib import metadata
from pathlib import Path

import jax
import numpy as np
import pytest

import ssgp_ppl
from ssgp_ppl import pipeline
from ssgp_ppl.data.datasets import load
from ssgp_ppl.entry import BUILTIN_CATALOG, list_entries, load_entry
from ssgp_ppl.errors import SSGPError

ML = {"ml.steps": 300}
ROOT = Path(__file__).resolve().parent.parent
# type-II SSGP on pendulum at these budgets is over-confident (test coverage of the 90% interval
# 0.39-0.46 of 315 rows, 0.25 of 8 on the small table): the CalibrationWarning is right, and not
# what the tests marked with this check (the warning's own test is
# test_a_fit_whose_intervals_miss_the_test_rows_says_so_in_one_warning_line)
OVERCONFIDENT = pytest.mark.filterwarnings("ignore::ssgp_ppl.errors.CalibrationWarning")


@pytest.fixture(scope="module")
def pendulum():
    return load("pendulum")


def _raw(data):
    return (data.x_scaler.inverse(data.x_train), data.y_scaler.inverse(data.y_train),
            data.x_scaler.inverse(data.x_test), data.y_scaler.inverse(data.y_test))


def _marginal_reference(post, x_raw):
    """SSGP predictive (Lázaro-Gredilla et al. 2010, eq. 7) in numpy float64 from the fitted
    type-II values, mapped back to the original units of y."""
    s = {k: np.asarray(v, np.float64)[0, 0] for k, v in post.sites.items()}
    rule = post.rule
    x, y = np.asarray(rule.x_train, np.float64), np.asarray(rule.y_train, np.float64)
    xs = np.asarray(post.x_scaler.transform(x_raw), np.float64)

    def phi(a):
        z = 2 * np.pi * a @ s["frequencies"].T
        return np.stack([np.cos(z), np.sin(z)], -1).reshape(len(a), -1)

    p, ps = phi(x), phi(xs)
    m = s["frequencies"].shape[0]
    a = p.T @ p + m * s["noise"] ** 2 / s["signal"] ** 2 * np.eye(2 * m)
    mean = ps @ np.linalg.solve(a, p.T @ y)
    var = s["noise"] ** 2 * np.einsum("ij,ji->i", ps, np.linalg.solve(a, ps.T)) + s["noise"] ** 2
    sc, sh = float(post.y_scaler.scale), float(post.y_scaler.mean)
    return mean * sc + sh, var * sc**2


@pytest.mark.parametrize("x64", [False, True], ids=["float32", "float64"])
def test_predict_in_original_units_matches_float64_reference(pendulum, x64):
    x, y, xt, yt = _raw(pendulum)
    with jax.enable_x64(x64):
        post = ssgp_ppl.fit("ssgp", x=x, y=y, settings=ML)
        pred = post.predict(xt)
    mean, var = _marginal_reference(post, xt)
    tol = 1e-9 if x64 else 2e-4
    np.testing.assert_allclose(pred.mean, mean, rtol=tol, atol=tol * np.abs(mean).max())
    np.testing.assert_allclose(pred.var, var, rtol=tol * 10)
    assert post.test is None and post.metrics is None  # arrays without x_test: no test split


@OVERCONFIDENT
def test_fit_on_arrays_equals_fit_on_the_named_split(pendulum):
    x, y, xt, yt = _raw(pendulum)
    from_arrays = ssgp_ppl.fit("ssgp", x=x, y=y, x_test=xt, y_test=yt, settings=ML)
    by_name = ssgp_ppl.fit("ssgp", data="pendulum", settings=ML)
    direct = pipeline.fit(load_entry("ssgp").with_overrides(["ml.steps=300"]), pendulum, progress=False)
    for other in (by_name, direct):
        assert from_arrays.metrics == pytest.approx(other.metrics, rel=1e-6)
    np.testing.assert_allclose(from_arrays.mean, by_name.mean, rtol=1e-6)


@OVERCONFIDENT
def test_fit_takes_a_toml_path_and_a_settings_list(pendulum):
    post = ssgp_ppl.fit(BUILTIN_CATALOG / "ssgp.toml", data="pendulum", settings=["ml.steps=300"])
    ref = ssgp_ppl.fit("ssgp", data="pendulum", settings=ML)
    assert post.metrics == pytest.approx(ref.metrics, rel=1e-6)
    assert post.info.steps == 300


def test_api_errors_are_one_line():
    with pytest.raises(SSGPError, match="needs data="):
        ssgp_ppl.fit("ssgp")
    with pytest.raises(SSGPError, match="either data= or x="):
        ssgp_ppl.fit("ssgp", data="pendulum", x=np.zeros((3, 1)), y=np.zeros(3))
    with pytest.raises(SSGPError, match=r"x must be \(n, d\)"):
        ssgp_ppl.fit("ssgp", x=np.zeros((3, 2)), y=np.zeros(4))
    with pytest.raises(SSGPError, match="non-finite"):
        ssgp_ppl.fit("ssgp", x=np.array([[0.0], [np.nan], [1.0]]), y=np.zeros(3))
    with pytest.raises(SSGPError, match="unknown catalog model"):
        ssgp_ppl.fit("nope", data="pendulum")
    with pytest.raises(SSGPError, match="no such file"):
        ssgp_ppl.load("/nowhere/p.nc")


def test_compare_gives_the_numbers_of_the_named_comparison(tmp_path):
    """ssgp_ppl.compare at small size: the records, summary table and reference verdict that
    report.compare_named (what the CLI runs) writes for the same seed; a short repr; read back
    whole from its folder."""
    import json

    import pandas as pd

    from ssgp_ppl.report import compare_named, summary_rows

    cmp = ssgp_ppl.compare("tan_va", data="autompg", out=tmp_path / "api", small=True, seed=1,
                           progress=False)
    named = compare_named("tan_va", "autompg", tmp_path / "named", small_run=True, seed=1)
    assert cmp.methods == [m["method"] for m in named["methods"]] == [
        "ncvmp", "smc", "smc-chains-stacked"]
    timing = ("fit_seconds", "predict_seconds", "loo_seconds")
    for ours, theirs in zip(cmp.records, named["methods"], strict=True):
        assert {k: v for k, v in ours.items() if k not in timing} == \
            {k: v for k, v in theirs.items() if k not in timing}
        assert 0 < ours["nmse"] < 1 and np.isfinite(ours["mnlp"])
    pd.testing.assert_frame_equal(cmp.table, pd.DataFrame(summary_rows(named)))
    assert cmp.to_dict() == json.loads((tmp_path / "api" / "comparison.json").read_text())
    ref = named["methods"][1]["reference"]
    assert cmp.converged == ref["converged"]
    assert cmp.verdict == ("CONVERGED" if ref["converged"] else
                           "NOT CONVERGED: " + "; ".join(ref["reasons"]))
    assert cmp.reference_label == ("smc" if ref["converged"] else
                                   f"smc (NOT CONVERGED, {ref['modes']} mode"
                                   f"{'s' * (ref['modes'] != 1)})")
    post = cmp.posteriors["ncvmp"]
    assert post.metrics["nmse"] == pytest.approx(named["methods"][0]["nmse"], rel=1e-12)
    assert cmp.report == tmp_path / "api" / "report.html" and cmp.report.is_file()
    text = repr(cmp)
    assert len(text) < 2000 and "tan_va on autompg" in text and cmp.reference_label in text
    again = ssgp_ppl.load_comparison(tmp_path / "api")
    assert again.to_dict() == cmp.to_dict()
    assert again.posteriors["ncvmp"].metrics == post.metrics  # read from its file
    with pytest.raises(SSGPError, match="comparison.json not found"):
        ssgp_ppl.load_comparison(tmp_path)
    with pytest.raises(SSGPError, match="already holds a run"):  # never replaced unasked
        ssgp_ppl.compare("tan_va", data="autompg", out=tmp_path / "api", small=True)


@OVERCONFIDENT
def test_frames_are_the_rows_fit_uses(pendulum):
    from ssgp_ppl.data.datasets import frames

    train, test = frames("pendulum")
    assert train.shape == test.shape == (315, 10)
    assert list(train.columns) == [f"x{i}" for i in range(9)] + ["y"]
    raw = np.loadtxt(ROOT / "ssgp_ppl" / "data" / "bundled" / "pendulum.csv.gz", delimiter=",")
    both = np.concatenate([train.to_numpy(), test.to_numpy()])
    np.testing.assert_allclose(both[np.lexsort(both.T)], raw[np.lexsort(raw.T)], rtol=1e-12)
    post = ssgp_ppl.fit("ssgp", data="pendulum", settings=ML)
    np.testing.assert_allclose(test["y"], pendulum.y_scaler.inverse(pendulum.y_test), rtol=1e-12)
    np.testing.assert_allclose(post.predict(test.drop(columns="y")).mean, post.mean, rtol=1e-5)
    with pytest.raises(SSGPError, match="known data set name"):
        frames("my_data.csv")


def test_fit_takes_spectral_points(pendulum):
    """The entry's own points give its own fit; other points another fit; a wrong shape is one
    error before any fitting."""
    own = load_entry("ssgp_fixed").spec(pendulum.n_features).spectral_points
    base = ssgp_ppl.fit("ssgp_fixed", data="pendulum", settings=ML)
    same = ssgp_ppl.fit("ssgp_fixed", data="pendulum", settings=ML, spectral_points=np.asarray(own))
    other = ssgp_ppl.fit("ssgp_fixed", data="pendulum", settings=ML,
                         spectral_points=np.asarray(own)[::-1] * 1.5)
    assert same.metrics == pytest.approx(base.metrics, rel=1e-6)
    assert abs(other.metrics["mnlp"] - base.metrics["mnlp"]) > 1e-3
    with pytest.raises(SSGPError, match=r"spectral_points must be a finite \(m, d\)"):
        ssgp_ppl.fit("ssgp_fixed", data="pendulum", spectral_points=np.zeros((3, 9)))
    with pytest.raises(SSGPError, match="not to local"):
        ssgp_ppl.fit("tan_local", data="pendulum", spectral_points=np.zeros((20, 9)))
    # with m = "auto" the points given say m: no sizing, the same fit as the entry's own m
    auto = ssgp_ppl.fit("ssgp_fixed", data="pendulum", settings={**ML, "m": "auto"},
                        spectral_points=np.asarray(own))
    assert auto.entry.sizing is None and auto.entry.config["model"]["m"] == own.shape[0]
    assert auto.metrics == pytest.approx(base.metrics, rel=1e-6)


def test_select_beta_on_a_named_data_set_is_the_selection_of_its_rows(pendulum):
    from ssgp_ppl.inference.selection import select_beta

    sel = ssgp_ppl.select_beta("svbssgp_dlm_log", data="pendulum", grid=[1.0, 0.1], steps=20)
    ref = select_beta(load_entry("svbssgp_dlm_log"), pendulum, [1.0, 0.1], steps=20)
    assert sel.grid == [1.0, 0.1] and sel.criterion == "nll" and sel.beta in sel.grid
    np.testing.assert_allclose(sel.scores, ref.scores, rtol=1e-6)
    assert sel.n_inner + sel.n_validation == pendulum.n_train


def test_load_refuses_a_datatree_without_the_state(tmp_path):
    import xarray as xr

    xr.DataTree().to_netcdf(tmp_path / "plain.nc", engine="h5netcdf")
    with pytest.raises(SSGPError, match="not a saved posterior"):
        ssgp_ppl.load(tmp_path / "plain.nc")


def test_catalog_and_version():
    rows = ssgp_ppl.catalog()
    assert [r["name"] for r in rows] == list_entries()
    svi = next(r for r in rows if r["name"] == "ssgp_svi")
    assert svi["guide"] == "auto_mvn" and svi["objective"] == "elbo"
    assert ssgp_ppl.__version__ == metadata.version("ssgp-ppl")
    with pytest.raises(AttributeError):
        ssgp_ppl.no_such_name  # noqa: B018


def test_arrays_without_test_rows_give_a_datatree_and_the_method_checks(pendulum):
    x, y, _, _ = _raw(pendulum)
    post = ssgp_ppl.fit("ssgp_svi", x=x[:60], y=y[:60],
                        settings={"svi.steps": np.int64(50), "svi.paths": 1,
                                  "predictive.samples": 30})
    assert post.test is None and post.metrics is None
    assert {"posterior", "log_likelihood", "sample_stats", "invariants"} <= set(post.datatree.children)
    assert "predictions" not in post.datatree.children
    with pytest.raises(SSGPError, match="ml is Gaussian-only"):
        ssgp_ppl.fit("ssgp_probit", x=x[:60], y=(y[:60] > 0).astype(float), method="ml")
    with pytest.raises(SSGPError, match="binary target"):
        ssgp_ppl.fit("ssgp_probit", x=x[:60], y=y[:60])


@OVERCONFIDENT
def test_predict_reads_dataframe_columns_and_refuses_bad_shapes(pendulum):
    import pandas as pd

    x, y, _, _ = _raw(pendulum)
    df = pd.DataFrame(x[:80])  # integer column labels
    df["target"] = y[:80]
    post = ssgp_ppl.fit("ssgp", data=df, target="target", settings=ML)
    np.testing.assert_array_equal(post.predict(df.iloc[:4]).mean, post.predict(x[:4]).mean)
    named = ssgp_ppl.fit("ssgp", x=pd.DataFrame(x[:80], columns=[f"c{i}" for i in range(9)]),
                         y=pd.Series(y[:80], name="t"), settings=ML)
    frame = pd.DataFrame(x[:3], columns=[f"c{i}" for i in range(9)])
    np.testing.assert_array_equal(named.predict(frame[frame.columns[::-1]]).mean,
                                  named.predict(x[:3]).mean)
    with pytest.raises(SSGPError, match="columns but the model was built for 9"):
        post.predict(x[:4, :3])
    with pytest.raises(SSGPError, match="no rows"):
        post.predict(x[:0])


@OVERCONFIDENT
def test_a_loaded_posterior_keeps_its_test_prediction_and_params(pendulum, tmp_path):
    post = ssgp_ppl.fit("ssgp", data="pendulum", settings=ML)
    back = ssgp_ppl.load(post.save(tmp_path / "p.nc"))
    np.testing.assert_array_equal(back.mean, post.mean)
    np.testing.assert_array_equal(back.test.interval(0.5)[0], post.test.interval(0.5)[0])
    assert set(back.params) == set(post.params)
    for k in post.params:
        np.testing.assert_array_equal(back.params[k], post.params[k])


def test_checkpoint_fingerprint_ignores_the_description_texts(pendulum):
    from ssgp_ppl.entry import CatalogEntry
    from ssgp_ppl.runtime.checkpoint import run_fingerprint

    entry = load_entry("ssgp")
    reworded = CatalogEntry(entry.name, entry.path, {**entry.config, "paper": "another citation",
                                                     "description": "another text"})
    changed = entry.with_overrides(["ml.lr=0.0123"])
    fp = run_fingerprint(entry, pendulum, "ml", 0, None)
    assert run_fingerprint(reworded, pendulum, "ml", 0, None) == fp
    assert run_fingerprint(changed, pendulum, "ml", 0, None)["config"] != fp["config"]


# ------------------------------------------------------------------------ bad inputs, one error
TINY = {"m": 2, "ml.steps": 3}


def _small(n=12, d=2, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    return x, np.sin(x).sum(1) + 0.1 * rng.normal(size=n)


@pytest.fixture(scope="module")
def tiny_post():
    x, y = _small()
    import pandas as pd

    return ssgp_ppl.fit("ssgp", x=pd.DataFrame(x, columns=["a", "b"]), y=y, settings=TINY)


def test_complex_values_a_target_with_arrays_and_non_integer_steps_are_refused():
    x, y = _small()
    for bad in (dict(x=x + 1j), dict(y=y + 0j), dict(x=x.astype(object) + 1j)):
        with pytest.raises(SSGPError, match="complex"):
            ssgp_ppl.fit("ssgp", **{"x": x, "y": y, **bad}, settings=TINY)
    with pytest.raises(SSGPError, match="target= applies to data="):
        ssgp_ppl.fit("ssgp", x=x, y=y, target="y", settings=TINY)
    for steps in (1.5, True, 0, "3"):
        with pytest.raises(SSGPError, match="steps must be a positive integer"):
            ssgp_ppl.fit("ssgp", x=x, y=y, steps=steps, settings=TINY)


def test_a_dataframe_x_gets_the_table_checks_and_options():
    """Text, date, missing and categorical columns of x=DataFrame: the messages of data=; and
    its options (encode=, dates=, dropna=) apply."""
    import pandas as pd

    x, y = _small(n=20)
    frame = pd.DataFrame(x, columns=["a", "b"])
    cases = {"u": (["u", "v"] * 10, r"input column 'u' is not numeric \(categorical, 2 values\); "
                   r"use --encode onehot \(encode='onehot'\)"),
             "cat": (pd.Categorical(["p", "q"] * 10), "input column 'cat' is not numeric"),
             "day": (pd.date_range("2020-01-01", periods=20).astype(str), "'day' holds dates"),
             "na": ([1.0, None] * 10, r"missing values \(column and count: 'na' 10\)")}
    for col, (values, words) in cases.items():
        with pytest.raises(SSGPError, match=words):
            ssgp_ppl.fit("ssgp", x=frame.assign(**{col: values}), y=y, settings=TINY)
    post = ssgp_ppl.fit("ssgp", x=frame.assign(u=["u", "v"] * 10), y=y, encode="onehot",
                        settings=TINY)
    assert post.feature_names == ("a", "b", "u=u", "u=v")
    assert np.isfinite(post.predict(frame.assign(u=["v"] * 20)).mean).all()
    with pytest.raises(SSGPError, match="categories the model never saw: w"):
        post.predict(frame.assign(u=["w"] * 20))


def test_targets_given_as_arrays_get_the_range_and_constant_checks():
    x, y = _small()
    for k in (1e200, 1e-200):
        with pytest.raises(SSGPError, match="standard deviation .* divide the target"):
            ssgp_ppl.fit("ssgp", x=x, y=y * k, x_test=x, y_test=y * k, settings=TINY)
    with pytest.raises(SSGPError, match="target 'y' is constant .* nothing to learn"):
        ssgp_ppl.fit("ssgp", x=x, y=np.full(len(y), 2.0), x_test=x, y_test=y, settings=TINY)


def test_predict_refuses_bad_inputs_naming_row_and_column(tiny_post):
    import pandas as pd

    x, _ = _small()
    for bad in (None, "hello", 3.0, {"a": 1}):
        with pytest.raises(SSGPError, match="predict"):
            tiny_post.predict(bad)
    with pytest.raises(SSGPError, match=r"row 0, column 'b' holds str 'u'"):
        tiny_post.predict(pd.DataFrame({"a": [1.0, 2.0], "b": ["u", "v"]}))
    for seed in (1.5, "a", -1):
        with pytest.raises(SSGPError, match="seed must be an integer"):
            tiny_post.predict(x[:2], seed=seed)
    for value, shown in ((np.nan, "nan"), (np.inf, "inf")):
        bad = x[:4].copy()
        bad[2, 1] = value
        with pytest.raises(SSGPError, match=f"row 2, column 'b' is {shown}"):
            tiny_post.predict(bad)
    with pytest.raises(SSGPError, match="predict's DataFrame has duplicate column names: 'a'"):
        tiny_post.predict(pd.DataFrame([[1.0, 2.0, 3.0]], columns=["a", "b", "a"]))
    with pytest.raises(SSGPError, match=r"row 1, column 'a' is missing"):
        tiny_post.predict(pd.DataFrame({"a": [1.0, None], "b": [0.0, 1.0]}))
    with pytest.raises(SSGPError, match=r"row 0, column 'a' is 1e\+300, .* times .* computes up to"):
        tiny_post.predict(np.array([[1e300, 0.0]]))
    narrow = tiny_post.replace(x_scaler=tiny_post.x_scaler._replace(
        scale=tiny_post.x_scaler.scale * 1e-20))  # 1e300 / 1e-20 overflows float64
    with pytest.raises(SSGPError, match=r"row 0, column 'a' is 1e\+300, more than 1.8e\+308 times "
                       r".* the model computes up to"):
        narrow.predict(np.array([[1e300, 0.0]]))


def test_a_missing_value_names_dropna_only_to_calls_that_take_it(tiny_post):
    """predict takes no dropna: a missing input says every input must be given. fit, compare
    and select_beta take dropna: their message names it, and select_beta accepts it."""
    import pandas as pd

    frame = pd.DataFrame({"a": [1.0, None], "b": [0.0, 1.0]})
    with pytest.raises(SSGPError, match=r"missing values .*; every input must be given \(the "
                       r"first: row 1, column 'a' is missing\)$") as e:
        tiny_post.predict(frame)
    assert "dropna" not in str(e.value)
    with pytest.raises(SSGPError, match=r"row 1, column 'a' is nan\)$") as e:
        tiny_post.predict(frame.to_numpy())
    assert "dropna" not in str(e.value)
    x, y = _small(n=30)
    table = pd.DataFrame(x, columns=["a", "b"]).assign(y=y)
    table.loc[3, "a"] = None
    advice = r"use --dropna \(dropna=True\) to drop those rows \(the first: row 3, column 'a'"
    for call in (ssgp_ppl.fit, ssgp_ppl.compare, ssgp_ppl.select_beta):
        with pytest.raises(SSGPError, match=advice):
            call("svbssgp_dlm_log", data=table)
    with pytest.raises(SSGPError, match="the β grid must hold values >= 0"):  # the rows loaded
        ssgp_ppl.select_beta("svbssgp_dlm_log", data=table, dropna=True, grid=[-1.0])


def test_settings_init_values_and_argument_types_are_checked(tiny_post, tmp_path):
    x, y = _small()
    for value, words in ((1e-300, ">= 1e-06"), (1e300, "<= 1e[+]06"), (0.0, ">= 1e-06")):
        with pytest.raises(SSGPError, match=f"model.noise.init: must be {words}"):
            ssgp_ppl.fit("ssgp", x=x, y=y, settings={**TINY, "noise.init": value})
    with pytest.raises(SSGPError, match="a catalog model is a name"):
        ssgp_ppl.fit(5, x=x, y=y)
    with pytest.raises(SSGPError, match="add_catalog takes a directory path"):
        ssgp_ppl.add_catalog(5)
    with pytest.raises(SSGPError, match="save takes a file path"):
        tiny_post.save(5)
    with pytest.raises(SSGPError, match="settings must be a dict"):
        ssgp_ppl.fit("ssgp", x=x, y=y, settings="m=3")


def test_a_method_listed_twice_in_settings_is_one_error_even_a_million_times():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(20, 1))
    for methods in (["ml", "ml"], ["ml"] * 1_000_000):  # a quadratic check would run for hours
        with pytest.raises(SSGPError, match=r"inference.methods: 'ml' is listed twice"):
            ssgp_ppl.fit("ssgp", x=x, y=np.sin(x[:, 0]), settings={"inference.methods": methods})


def test_settings_are_data_never_toml_text():
    """A text value keeps its backslashes; a key is a dotted name, never read as TOML."""
    x, y = _small()
    with pytest.raises(SSGPError, match=r"'m=5 #' is not a catalog key"):
        ssgp_ppl.fit("ssgp", x=x, y=y, settings={**TINY, "m=5 #": 1})
    with pytest.raises(SSGPError, match=r"model.m: expected int or 'auto', got str '3'"):
        ssgp_ppl.fit("ssgp", x=x, y=y, settings={**TINY, "m": "3"})
    post = ssgp_ppl.fit("ssgp", x=x, y=y, settings={**TINY, "description": "C:\\temp\\new",
                                                   "methods": ("ml",)})
    assert post.entry.description == "C:\\temp\\new" and post.entry.config["model"]["m"] == 2


def test_crafted_encoding_and_rule_states_are_one_error():
    """The pieces of a saved posterior that are read outside ``load`` itself: a hand-made table
    encoding or predictive rule state is one SSGPError, never KeyError or JSONDecodeError."""
    from ssgp_ppl.data.tables import TableEncoding
    from ssgp_ppl.model.predictive import rule_from_state

    for text in ("{", "{}", "[1]", '{"columns": [["a", "weird", []]], "target": "y"}',
                 '{"columns": [["a"]], "target": "y"}', '{"columns": [], "target": 5}'):
        with pytest.raises(SSGPError, match="saved table encoding is corrupt"):
            TableEncoding.from_json(text)
    for arrays, attrs in (({}, {}), ({}, {"rule": "sites"}), ({}, {"rule": "ncvmp"}),
                          ({}, {"rule": "stacked", "paths": 3}), ({}, []), ({}, {"rule": []})):
        with pytest.raises(SSGPError, match="saved predictive rule"):
            rule_from_state(arrays, attrs)


def test_a_fit_whose_intervals_miss_the_test_rows_says_so_in_one_warning_line():
    """Test targets shifted by 5 (the noise sd is 0.1): none in the 90% interval, a
    CalibrationWarning with the coverage and its distance in binomial sds; the true targets fit
    nominal coverage silently."""
    from ssgp_ppl.errors import CalibrationWarning

    x, y = _small(n=120, d=1, seed=1)
    settings = {"m": 5, "ml.steps": 300}
    sds = 0.9 / np.sqrt(0.09 / 40)
    with pytest.warns(CalibrationWarning, match=rf"^ssgp:ml: test coverage of the 90% interval is "
                      rf"0 on 40 rows, {sds:.1f} binomial sds from 0.9 and outside \[0.8, 0.97\]: "
                      r"the predictive intervals are too narrow \(miscalibrated\)$"):
        post = ssgp_ppl.fit("ssgp", x=x[:80], y=y[:80], x_test=x[80:], y_test=y[80:] + 5,
                            settings=settings)
    assert post.metrics["coverage_90"] == 0 and post.datatree.attrs["calibration"].startswith(
        "test coverage of the 90% interval is 0 on 40 rows")
    with warnings.catch_warnings():
        warnings.simplefilter("error", CalibrationWarning)
        post = ssgp_ppl.fit("ssgp", x=x[:80], y=y[:80], x_test=x[80:], y_test=y[80:],
                            settings=settings)
    assert 0.8 <= post.metrics["coverage_90"] <= 1 and "calibration" not in post.datatree.attrs


@OVERCONFIDENT
def test_a_fit_stopped_by_its_budget_says_so_in_one_warning_line():
    """The Python API warns where the CLI's table says it: a fit whose stop rule did not declare
    convergence names how it stopped; a converged one is silent."""
    from ssgp_ppl.errors import ConvergenceWarning

    with pytest.warns(ConvergenceWarning, match=r"^ssgp:ml: stopped by the step budget.* nats per "
                                                r"1,000 steps.*; raise the budget \(steps=\)"):
        post = ssgp_ppl.fit("ssgp", data="pendulum", steps=3000)
    assert post.info.converged is False
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        post = ssgp_ppl.fit("ssgp_fixed", data="autompg")
    assert post.info.converged is True
