"""Catalog: every file in models/ validates and fits on real data; bad entries fail with file and key."""

import math
from pathlib import Path

import numpy as np
import pytest

from ssgp_ppl.data.datasets import load
from ssgp_ppl.entry import BUILTIN_CATALOG, SCHEMA, list_entries, load_entry
from ssgp_ppl.errors import SSGPError
from ssgp_ppl.pipeline import fit

ENTRIES = list_entries()

# The entries' own SVI/ML settings; a short NUTS run (the full reference is the compare report's job).
FAST_NUTS = ["nuts.warmup=150", "nuts.samples=100", "nuts.chains=2"]
# The Wei et al. 2021 / Nguyen & Bonilla 2014 entries (DLM, β-ELBO, mixture, probit, Poisson): 1000 steps
QUICK = ["svi.steps=1000", "svi.min_steps=0"]


def test_catalog_is_not_empty():
    assert {"ssgp", "ssgp_fixed", "ssgp_svi"} <= set(ENTRIES)


@pytest.fixture(scope="module")
def pendulum():
    return load("pendulum", split=0)


def _poisson_baseline_nll(data) -> float:
    """Test NLL of a Poisson with the training mean as its rate (the count model to beat)."""
    from scipy.stats import poisson

    return float(-np.mean(poisson.logpmf(data.y_test, data.y_train.mean())))


@pytest.mark.parametrize("name", ENTRIES)
def test_entry_fits_on_pendulum(name, pendulum):
    """Each entry's own method, on the real pendulum split, beats predicting the mean; probit
    entries classify pendulum's target above its training median, count entries predict BLOG's
    comment counts (1000 rows) better than a constant Poisson rate."""
    entry = load_entry(name)
    method = entry.methods[0]
    data = pendulum
    target = entry.lik.target
    svi = entry.config["inference"]["svi"]
    if svi["objective"] != "elbo" or svi["guide"] == "mixture" or target != "continuous":
        entry = entry.with_overrides(QUICK)  # those entries: a shorter run
    elif method == "svi" and svi["steps"] > 3000:  # sVBSSGP / VSSGP: 3000 of their 10000 steps
        entry = entry.with_overrides(["svi.steps=3000", "svi.min_steps=0"])
    elif method == "ml" and entry.config["inference"]["ml"]["steps"] > 3000:
        # SSGP: 3000 type-II steps; its whole run to the stop rule (38,000-70,000 steps) on this
        # split is test_fit.py's test_ssgp_optimized_pendulum_nmse, the same fit
        entry = entry.with_overrides(["ml.steps=3000"])
    if target != "continuous":
        data = load("pendulum", target_kind="binary") if target == "binary" else \
            load("blog", subsample=1000, target_kind="count")
        res = fit(entry, data, method, seed=0, progress=False)
        if target == "binary":
            assert res.metrics["error_rate"] < 0.35 and res.metrics["nll"] < math.log(2), res.metrics
        else:
            assert res.metrics["nll"] < 0.7 * _poisson_baseline_nll(data), res.metrics
        assert "signal" in res.datatree["posterior"].data_vars
        assert set(np.unique(res.datatree["predictions"]["y_pred"])) <= (
            {0.0, 1.0} if target == "binary" else set(range(100000)))
        return
    if method == "local":  # one local fit per test point: 16 of them, two spectral sets each
        entry = entry.with_overrides(["restarts=2"])
        data = pendulum._replace(x_test=pendulum.x_test[:16], y_test=pendulum.y_test[:16])
    # m = "auto" entries: sized within 20 s at 3000 steps (m <= 100 on pendulum), the pilot included
    res = fit(entry, data, method, seed=0, progress=False, budget=20)
    assert np.all(np.isfinite(res.mean)) and np.all(res.var > 0)
    assert (res.entry.sizing is not None) == (entry.config["model"]["m"] == "auto")
    assert res.metrics["nmse"] < 0.9, res.metrics
    if res.losses is not None:
        k = max(len(res.losses) // 10, 1)
        assert res.losses[-k:].mean() < res.losses[:k].mean()
    if method == "local":
        assert "local_fits" in res.datatree.children
        return
    post = res.datatree["posterior"]
    assert "noise" in post.data_vars and post.sizes["chain"] == 1


@pytest.mark.parametrize("name", ["tan_va_svi"])
def test_entry_nuts_reference(name, pendulum):
    entry = load_entry(name).with_overrides(FAST_NUTS)
    res = fit(entry, pendulum, "nuts", seed=0, progress=False)
    assert res.datatree["posterior"].sizes["chain"] == 2
    assert "y" in res.datatree["log_likelihood"].data_vars
    assert res.metrics["nmse"] < 0.9, res.metrics


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "bad.toml"
    p.write_text(text)
    return p


GOOD = ('description = "x"\n[model]\nm = 5\nfrequencies = "learned"\nnuisance = "marginalized"\n'
        '[inference]\nmethods = ["ml"]\n[model.noise]\nrole = "learned"\n')


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (GOOD.replace("m = 5", "m = 5\nbogus = 1"), ["bad.toml", "model.bogus", "unknown key"]),
        (GOOD.replace("m = 5", 'm = "five"'), ["bad.toml", "model.m", "expected int"]),
        (GOOD.replace("m = 5", "m = 0"), ["bad.toml", "model.m", ">= 1"]),
        (GOOD.replace('role = "learned"', 'role = "guess"'), ["model.noise.role", "guess"]),
        (GOOD.replace('description = "x"\n', ""), ["description", "required"]),
        (GOOD.replace('["ml"]', '["nuts"]'), ["inference.methods", "nuts", "latent"]),
        (GOOD.replace('["ml"]', '["nuts"]').replace('"marginalized"', '"sampled"'),
         ["inference.methods", "nuts", "learned: model.noise"]),
        (GOOD.replace('["ml"]', '["svi"]'), ["inference.methods", "svi", "latent"]),
        (GOOD + "[predictive]\nrule = 'degenerate'\n", ["predictive.rule", "nuisance"]),
        (GOOD.replace("m = 5", "m = 5\nspectral_density = 'rq'"),
         ["bad.toml: model.spectral_density: 'rq' is not one of se, matern12", "cauchy"]),
        # a method's table is checked when the entry lists the method (methods' own check)
        (GOOD.replace('["ml"]', '["ml", "svi"]') + "[inference.svi]\nguide = 'nope'\n",
         ["inference.svi.guide", "nope"]),
        (GOOD + "[model.signal]\nrole = 'prior'\nscale = -1.0\n", ["model.signal.scale", "> 0"]),
        ("description = \n", ["bad.toml", "not valid TOML"]),
        (GOOD + "[predictive]\ngamma = 0.5\n", ["predictive.gamma", "rule = 'local'"]),
        (GOOD.replace("role = \"learned\"", "role = \"prior\"\ndist = \"normal\""),
         ["model.noise.dist", "negative"]),
        (GOOD.replace('"marginalized"', '"sampled"').replace('["ml"]', '["ml", "svi"]')
         + "[inference.svi]\nbatch_size = 10\n[partitions]\nper_step = 2\n", ["batch_size", "per_step"]),
        (GOOD.replace('["ml"]', '["ml", "svi"]').replace('role = "learned"', 'role = "prior"')
         + "[inference.svi]\nobjective = 'dlm_log'\n", ["inference.svi.objective", "sampled"]),
        (GOOD.replace('"marginalized"', '"sampled"').replace('["ml"]', '["svi"]')
         .replace("m = 5", "m = 5\nlikelihood = 'poisson'\nfrequencies = 'prior'", 1)
         .replace('frequencies = "learned"\n', "")
         + "[inference.svi]\nobjective = 'dlm_log'\n[predictive]\nrule = 'degenerate'\n",
         ["inference.svi.gradient", "poisson"]),
        (GOOD.replace("m = 5", "m = 5\nlikelihood = 'probit'"), ["model.nuisance", "probit"]),
        (GOOD.replace('"marginalized"', '"sampled"').replace("m = 5", "m = 5\nlikelihood = 'probit'"),
         ["predictive.rule", "degenerate"]),
        (GOOD.replace("m = 5", "m = 5\nlikelihood = 'student_t'\ndf = 2"), ["model.df", "> 2"]),
        (GOOD + "[inference.svi]\nobjective = 'kl'\n", ["inference.svi.objective", "kl"]),
        (GOOD.replace('frequencies = "learned"', 'frequencies = "prior"').replace('["ml"]', '["svi"]')
         + "[inference.svi]\nguide = 'gaussian_lambda'\nnoncentred = true\n",
         ["inference.svi.noncentred", "a guide of joint_affine, mean_field, or of auto_normal, "
          "auto_mvn, auto_lowrank, auto_delta with a location-scale spectral_density (se, cauchy)"]),
        (GOOD.replace('frequencies = "learned"', 'frequencies = "prior"').replace('["ml"]', '["svi"]')
         .replace("m = 5", "m = 5\nspectral_density = 'matern32'")
         + "[inference.svi]\nguide = 'auto_normal'\nnoncentred = true\n",
         ["inference.svi.noncentred", "location-scale spectral_density (se, cauchy)"]),
        (GOOD.replace('frequencies = "learned"', 'frequencies = "prior"').replace('["ml"]', '["svi"]')
         .replace("m = 5", "m = 5\nspectral_density = 'cauchy'") + "[inference.svi]\nguide = 'mixture'\n",
         ["inference.svi.guide", "'mixture' needs a Gaussian spectral_density (se), not 'cauchy'"]),
    ],
    ids=["unknown-key", "wrong-type", "m-zero", "bad-role", "no-description", "nuts-no-latents",
         "nuts-first-learned",
         "svi-no-latents", "degenerate-marginal", "bad-density", "bad-guide", "neg-scale", "bad-toml",
         "gamma-without-local", "normal-noise-prior", "batch-and-partitions", "dlm-marginalized",
         "exact-poisson", "probit-marginalized", "probit-marginal-rule", "student-df", "bad-objective",
         "noncentred-guide", "noncentred-auto-matern", "mixture-cauchy"],
)
def test_bad_entry_names_file_and_key(tmp_path, text, words):
    with pytest.raises(SSGPError) as err:
        load_entry(_write(tmp_path, text))
    msg = str(err.value)
    assert "\n" not in msg
    for w in words:
        assert w in msg, msg


def test_overrides_short_and_dotted_keys():
    e = load_entry("ssgp_svi")
    e2 = e.with_overrides(["m=7", "svi.lr=0.005", "steps=10", "noise.scale=2"])
    assert e2.config["model"]["m"] == 7
    assert e2.config["inference"]["svi"]["lr"] == 0.005
    assert e2.config["inference"]["svi"]["steps"] == 10  # ambiguous leaf -> the entry's own method
    assert e2.config["model"]["noise"]["scale"] == 2.0
    assert e.config["model"]["m"] == 10  # the original is untouched
    with pytest.raises(SSGPError, match="unknown key 'gamma_x'"):
        e.with_overrides(["gamma_x=1"])
    with pytest.raises(SSGPError, match="model.m"):
        e.with_overrides(["m=-3"])
    with pytest.raises(SSGPError, match="ambiguous"):
        e.with_overrides(["scale=1"])


def test_a_density_is_accepted_for_what_it_can_do():
    """The non-centred auto guide of ssgp_svi takes a location-scale density (cauchy), not
    matern12; NCVMP (tan_va) takes only a Gaussian one; the spec holds the registered object."""
    from ssgp_ppl.model import densities

    e = load_entry("ssgp_svi").with_overrides(["spectral_density=cauchy"])
    assert e.spec(2).density is densities.CAUCHY
    with pytest.raises(SSGPError, match=r"noncentred: .*location-scale spectral_density \(se, "
                                        r"cauchy\)$"):
        load_entry("ssgp_svi").with_overrides(["spectral_density=matern12"])
    with pytest.raises(SSGPError, match=r"tan_va.toml with --set: model.spectral_density: methods "
                                        r"ncvmp/local .* need a Gaussian spectral density .*: se$"):
        load_entry("tan_va").with_overrides(["spectral_density=cauchy"])


def test_unknown_model_lists_known():
    with pytest.raises(SSGPError, match="known: .*ssgp_svi"):
        load_entry("no_such_model")


def _keys(schema, prefix=""):
    for key, f in schema.items():
        yield prefix + key
        if isinstance(f, dict):
            yield from _keys(f, f"{prefix}{key}.")


@pytest.fixture
def user_catalog(tmp_path, monkeypatch):
    """A user catalog: one valid entry, one invalid, one named as a built-in entry."""
    import ssgp_ppl.entry as entry_mod

    monkeypatch.setattr(entry_mod, "_user_catalogs", [])
    d = tmp_path / "mine"
    d.mkdir()
    base = (BUILTIN_CATALOG / "ssgp.toml").read_text()
    (d / "my_ssgp.toml").write_text(base.replace("m = ", "m = 7 #", 1))
    (d / "broken.toml").write_text(base.replace("m = ", "m = -2 #", 1))
    (d / "tan_va.toml").write_text(base)
    (d / "latin1.toml").write_bytes('description = "caf\xe9"\n'.encode("latin-1"))
    return d


@pytest.mark.parametrize("how", ["add_catalog", "env"])
def test_user_catalog_adds_to_builtin_and_skips_invalid_files(user_catalog, monkeypatch, how):
    import ssgp_ppl
    from ssgp_ppl.errors import CatalogWarning

    if how == "env":
        monkeypatch.setenv("SSGP_PPL_MODELS", str(user_catalog))
    else:
        ssgp_ppl.add_catalog(user_catalog)
    builtin = sorted(p.stem for p in BUILTIN_CATALOG.glob("*.toml"))
    with pytest.warns(CatalogWarning) as seen:
        rows = ssgp_ppl.catalog()
    assert sorted(r["name"] for r in rows) == sorted([*builtin, "my_ssgp"])
    assert load_entry("my_ssgp").config["model"]["m"] == 7
    with pytest.raises(SSGPError, match=r"mine/tan_va\.toml: entry 'tan_va' is already defined"):
        load_entry("tan_va")  # the user's file is not silently passed over for the built-in one
    problems = sorted(str(w.message) for w in seen)
    assert len(problems) == 3
    assert any("broken.toml: model.m" in p for p in problems)
    assert any("'tan_va' is already defined" in p for p in problems)
    assert any("latin1.toml: not UTF-8" in p for p in problems)
    with pytest.raises(SSGPError, match=r"broken\.toml: model\.m"):  # refused when used
        load_entry("broken")


def test_missing_catalog_directory_is_one_error(tmp_path, monkeypatch):
    import ssgp_ppl

    with pytest.raises(SSGPError, match="catalog directory not found"):
        ssgp_ppl.add_catalog(tmp_path / "nope")
    monkeypatch.setenv("SSGP_PPL_MODELS", str(tmp_path / "nope"))
    with pytest.raises(SSGPError, match="SSGP_PPL_MODELS: catalog directory not found"):
        list_entries()


def test_every_schema_key_is_documented_in_readme():
    readme = (Path(__file__).resolve().parent.parent / "docs" / "reference" /
              "catalog-format.md").read_text()
    for path in _keys(SCHEMA):
        key = path.rsplit(".", 1)[-1]
        table = f"`[{path}]`"
        assert f"`{key}`" in readme or table in readme, f"README catalog format lacks {path}"
