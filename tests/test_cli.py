"""The ssgp-ppl command line, end to end on the bundled pendulum data."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import xarray as xr

from ssgp_ppl.cli import main

EXE = [sys.executable, "-m", "ssgp_ppl.cli"]
KEYS = ["model", "method", "dataset", "n_train", "n_test", "m", "rmse", "nmse", "mnlp", "crps",
        "coverage_50", "coverage_90", "nll", "steps", "converged", "improvement_per_1k",
        "improvement_se", "tolerance_per_1k", "stop", "interrupted", "fit_seconds", "predict_seconds"]


def run(*args, env=None, **kw):
    env = {**os.environ, "PYTHONWARNINGS": "error", **(env or {})}
    return subprocess.run([*EXE, *args], capture_output=True, text=True, env=env, timeout=600, **kw)


def test_fit_ssgp_pendulum_end_to_end(tmp_path):
    out = tmp_path / "run"
    r = run("fit", "ssgp", "--data", "pendulum", "--out", str(out), "--set", "ml.steps=800")
    assert r.returncode == 0, r.stderr
    rec = json.loads((out / "metrics.json").read_text())
    # 800 type-II steps leave pendulum's intervals too narrow: the calibration line and key
    assert list(rec) == KEYS[:-2] + ["calibration"] + KEYS[-2:]
    assert rec["coverage_90"] < 0.8 and rec["calibration"].endswith("too narrow (miscalibrated)")
    assert f"ssgp-ppl: warning: ml: {rec['calibration']}\n" in r.stderr
    assert rec["n_train"] == 315 and rec["n_test"] == 315 and rec["method"] == "ml"
    assert 0 < rec["nmse"] < 1
    assert "nmse" in r.stdout and "ssgp" in r.stdout  # the printed table
    # 800 type-II steps: the marginal likelihood still climbs (~16 nats per 1,000 steps at 3,000)
    assert rec["converged"] is False and rec["improvement_per_1k"] > rec["tolerance_per_1k"]
    assert rec["stop"].startswith("stopped by the step budget, objective still improving by")
    assert f"ml: {rec['stop']}" in r.stdout
    dt = xr.open_datatree(out / "posterior.nc", engine="h5netcdf")
    assert dt.attrs["model"] == "ssgp"
    assert dt.attrs["stop"] == rec["stop"] and dt.attrs["converged"] == 0
    assert dt.attrs["improvement_per_1k"] == pytest.approx(rec["improvement_per_1k"])
    assert dt["predictions"]["f_mean"].shape == (1, 1, 315)
    assert np.isfinite(dt["posterior"]["noise"].values).all()


def test_fit_prints_the_precision_warning_once(tmp_path):
    """y = sin 2x + N(0, 1e-4²) in float32: one warning line naming --x64 after the table (under
    PYTHONWARNINGS=error too), and the record in metrics.json."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-3, 3, 2200)
    path = tmp_path / "sine.csv"
    np.savetxt(path, np.column_stack([x, np.sin(2 * x) + 1e-4 * rng.standard_normal(2200)]),
               delimiter=",", header="x,y", comments="")
    out = tmp_path / "run"
    r = run("fit", "ssgp", "--data", str(path), "--out", str(out), "--set", "m=10", "--set",
            "ml.steps=3000", "--no-progress")
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "cannot resolve" in ln]
    assert len(lines) == 1 and lines[0].startswith("ssgp-ppl: warning: ssgp:ml: float32 cannot "
                                                   "resolve this fit"), r.stderr
    assert lines[0].endswith("refit with --x64 (float64)")
    rec = json.loads((out / "metrics.json").read_text())
    assert rec["precision"] in lines[0] and rec["noise_floor"] > 0 and rec["jitter"] == 0.0


def test_fit_prints_the_calibration_warning(tmp_path):
    """Test rows shifted away from the training rows' function: none inside the 90% interval,
    one warning line after the table and the same text in metrics.json."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-3, 3, 100)
    y = np.sin(x) + 0.1 * rng.standard_normal(100)
    for name, rows, shift in (("train.csv", slice(0, 70), 0.0), ("test.csv", slice(70, 100), 5.0)):
        np.savetxt(tmp_path / name, np.column_stack([x[rows], y[rows] + shift]), delimiter=",",
                   header="x,y", comments="")
    out = tmp_path / "run"
    r = run("fit", "ssgp", "--data", str(tmp_path / "train.csv"), "--test",
            str(tmp_path / "test.csv"), "--out", str(out), "--set", "m=5", "--set",
            "ml.steps=300", "--no-progress")
    assert r.returncode == 0, r.stderr
    rec = json.loads((out / "metrics.json").read_text())
    assert rec["coverage_90"] == 0 and "too narrow" in rec["calibration"]
    lines = [ln for ln in r.stderr.splitlines() if "coverage" in ln]
    assert lines == [f"ssgp-ppl: warning: ml: {rec['calibration']}"]


def test_precision_warnings_are_collected_once_and_other_warnings_shown():
    """The CLI's collector: each PrecisionWarning text once, in order; another warning shown once
    after the block (shown inside the recording it would be recorded again, forever)."""
    import warnings

    from ssgp_ppl.cli import _precision_warnings
    from ssgp_ppl.errors import PrecisionWarning

    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        with _precision_warnings() as texts:
            for text in ("a", "b", "a"):
                warnings.warn(text, PrecisionWarning, stacklevel=1)
            warnings.warn("overflow somewhere", RuntimeWarning, stacklevel=1)
    assert texts == ["a", "b"]
    assert [(w.category, str(w.message)) for w in shown] == [(RuntimeWarning, "overflow somewhere")]


def test_models_json():
    r = run("models", "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    names = {row["name"] for row in rows}
    assert {"ssgp", "ssgp_fixed", "ssgp_svi"} <= names
    assert all({"name", "use when", "guide", "objective", "description"} <= set(row) for row in rows)


def test_models_fits_the_terminal_and_says_when_to_use_each_entry():
    """The default table is as wide as the terminal (the widest column cut with "…") and leads
    with when to use each entry; --long adds the objective and the description in full."""
    from ssgp_ppl.entry import BUILTIN_CATALOG, load_entry

    r = run("models", env={"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split()[:3] == ["name", "use", "when"] and "description" not in lines[0]
    assert max(map(len, lines)) <= 80 and any(li.rstrip().endswith("…") or "…" in li for li in lines)
    for p in BUILTIN_CATALOG.glob("*.toml"):
        assert load_entry(p.stem).use_when, p.stem  # every built-in entry says when to use it
    long = run("models", "--long", env={"COLUMNS": "80"}).stdout
    assert "description" in long.splitlines()[0] and max(map(len, long.splitlines())) > 80
    assert load_entry("ssgp").description in long


def test_version():
    from ssgp_ppl import __version__

    r = run("--version")
    assert r.returncode == 0 and r.stdout.split() == ["ssgp-ppl", __version__]


def test_user_catalog_and_relative_paths_resume_from_another_directory(tmp_path):
    """``--catalog DIR`` adds an entry; run.json records the CSV, the catalog and the output as
    absolute paths, so ``fit --resume`` works from any directory."""
    from ssgp_ppl.entry import BUILTIN_CATALOG

    work = tmp_path / "work"
    (work / "cat").mkdir(parents=True)
    (work / "cat" / "small_ssgp.toml").write_text(
        (BUILTIN_CATALOG / "ssgp.toml").read_text().replace("m = 20", "m = 5"))
    (work / "cat" / "broken.toml").write_text("[model\n")
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, (80, 2))
    np.savetxt(work / "d.csv", np.column_stack([x, np.sin(3 * x[:, 0])]), delimiter=",",
               header="a,b,y", comments="")
    r = run("models", "--catalog", "cat", cwd=work)
    assert r.returncode == 0 and "small_ssgp" in r.stdout and "file" in r.stdout.splitlines()[0]
    assert "ssgp-ppl: skipped" in r.stderr and "broken.toml: not valid TOML" in r.stderr
    r = run("fit", "small_ssgp", "--catalog", "cat", "--data", "d.csv", "--steps", "50",
            "--checkpoint-every", "0", "--out", "out", "--no-progress", cwd=work)
    assert r.returncode == 0, r.stderr
    saved = json.loads((work / "out" / "run.json").read_text())
    assert saved["data"] == str(work / "d.csv") and saved["catalog"] == [str(work / "cat")]
    r = run("fit", "broken", "--catalog", "cat", "--data", "d.csv", cwd=work)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "broken.toml" in r.stderr
    first = json.loads((work / "out" / "metrics.json").read_text())
    r = run("fit", "--resume", str(work / "out"), "--no-progress", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    again = json.loads((work / "out" / "metrics.json").read_text())
    assert again["rmse"] == first["rmse"] and again["model"] == "small_ssgp"


def test_filesystem_error_is_one_line_exit_2(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["fit", "ssgp", "--data", "pendulum", "--out", str(blocker / "sub"),
                 "--steps", "5", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("ssgp-ppl: error:"), err


@pytest.mark.parametrize("steps", ["0", "-3", "many"])
def test_steps_must_be_positive(steps, capsys):
    with pytest.raises(SystemExit) as e:
        main(["fit", "ssgp", "--data", "pendulum", "--steps", steps])
    assert e.value.code == 2
    assert "positive integer" in capsys.readouterr().err


@pytest.mark.parametrize("budget", ["0", "-1", "inf", "soon"])
def test_budget_must_be_a_positive_number_of_seconds(budget, capsys):
    with pytest.raises(SystemExit) as e:
        main(["compare", "ssgp", "--data", "pendulum", "--budget", budget])
    assert e.value.code == 2
    assert "number of seconds" in capsys.readouterr().err


def test_fit_sizes_m_auto_prints_and_records_the_choice(tmp_path, capsys, monkeypatch):
    """``--set m=auto``: the choice is one stderr line, and metrics.json, run.json and the DataTree
    carry it (the m chosen within the budget, the pilot's scores of the affordable m); --resume
    keeps that m without sizing again."""
    out = tmp_path / "run"
    assert main(["fit", "ssgp_fixed", "--data", "pendulum", "--set", "m=auto", "--set",
                 "ml.steps=300", "--budget", "1", "--out", str(out), "--no-progress"]) == 0
    err = capsys.readouterr().err
    rec = json.loads((out / "metrics.json").read_text())
    sized = rec["sizing"]
    assert f"ssgp-ppl: ssgp_fixed: m = {rec['m']} sized to the data" in err
    assert rec["m"] == sized["m"] and sized["budget"] == 1.0
    assert all(sized["estimated_seconds"][k] <= 1.0 for k in sized["scores"])
    assert all(sized["estimated_seconds"][k] > 1.0 for k in sized["excluded"])
    best = max(sized["scores"].values())  # the smallest m within 0.01 nats of the best score
    assert sized["scores"][str(rec["m"])] >= best - 0.01
    assert all(v < best - 0.01 for k, v in sized["scores"].items() if int(k) < rec["m"])
    dt = xr.open_datatree(out / "posterior.nc", engine="h5netcdf")
    assert dt.attrs["m"] == rec["m"] and json.loads(dt.attrs["sizing_record"]) == sized
    # --resume keeps the recorded m: no pilot runs again (here it would fail)
    assert json.loads((out / "run.json").read_text())["sizing"] == sized
    from ssgp_ppl.inference import sizing

    def no_pilot(*a, **k):
        raise AssertionError("the pilot ran again on --resume")

    monkeypatch.setattr(sizing, "pilot_scores", no_pilot)
    assert main(["fit", "--resume", str(out), "--no-progress"]) == 0
    assert f"ssgp-ppl: ssgp_fixed: m = {rec['m']} as sized when the run began" in \
        capsys.readouterr().err
    assert json.loads((out / "metrics.json").read_text())["m"] == rec["m"]
    assert main(["fit", "tan_va", "--data", "pendulum", "--set", "m=auto", "--out",
                 str(tmp_path / "tan"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "model.m: 'auto' sizes entries fitted by svi or ml" in err


def test_debug_flag_after_the_subcommand_shows_the_traceback():
    from ssgp_ppl.errors import SSGPError

    with pytest.raises(SSGPError, match="unknown data set"):
        main(["fit", "ssgp", "--data", "nosuchdata", "--debug"])


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["fit", "ssgp", "--data", "nosuchdata"], ["unknown data set", "pendulum"]),
        (["fit", "nosuchmodel", "--data", "pendulum"], ["unknown catalog model", "ssgp"]),
        (["fit", "ssgp", "--data", "pendulum", "--set", "bogus=1"], ["unknown key"]),
        (["fit", "ssgp", "--data", "pendulum", "--set", "m=0"], ["model.m"]),
        (["fit", "ssgp", "--data", "pendulum", "--method", "nuts"],
         ["'nuts' needs latent sites", "this model has none"]),
    ],
    ids=["unknown-data", "unknown-model", "unknown-set-key", "impossible-m", "nuts-on-ml"],
)
def test_bad_input_is_one_line_exit_2(args, words, capsys):
    assert main([*args, "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("ssgp-ppl: error:"), err
    for w in words:
        assert w in err, err


def test_fit_tan_local_autompg_with_progress_bar(tmp_path):
    """`ssgp-ppl fit tan_local --data autompg` (small settings): a progress bar over the local
    fits, metrics in the paper's range, the local_fits group in posterior.nc."""
    out = tmp_path / "run"
    r = run("fit", "tan_local", "--data", "autompg", "--out", str(out), "--set", "k=40",
            "--set", "restarts=2", "--set", "m=10")
    assert r.returncode == 0, r.stderr
    assert "tan_local:local" in r.stderr and "160/160" in r.stderr  # 80 test points × (M₁, M₂)
    rec = json.loads((out / "metrics.json").read_text())
    assert rec["method"] == "local" and rec["n_test"] == 80
    assert rec["nmse"] < 0.25 and rec["mnlp"] < 2.9, rec
    dt = xr.open_datatree(out / "posterior.nc", engine="h5netcdf")
    assert dt["local_fits"]["mu_lambda"].shape == (1, 1, 80, 6)


def test_fit_select_beta_writes_the_grid_and_refits(tmp_path):
    """`fit --select-beta`: Wei et al. 2021's grid [n, n/2, …, 0.01] on a validation split, then the fit."""
    out = tmp_path / "dlm"
    r = run("fit", "svbssgp_dlm_log", "--data", "pendulum", "--out", str(out), "--select-beta",
            "--steps", "100", "--no-progress")
    assert r.returncode == 0, r.stderr
    sel = json.loads((out / "beta_selection.json").read_text())
    assert sel["grid"][0] == sel["n_inner"] == 315 - round(315 * 8 / 75)
    assert sel["grid"][-1] == 0.01 and sel["beta"] in sel["grid"]
    assert all(np.isfinite(sel["scores"])) and sel["criterion"] == "nll"
    assert min(sel["scores"]) == sel["scores"][sel["grid"].index(sel["beta"])]
    rec = json.loads((out / "metrics.json").read_text())
    assert np.isfinite(rec["nll"]) and 0 < rec["nmse"] < 1.2


def test_fit_probit_entry_from_the_cli(tmp_path):
    out = tmp_path / "probit"
    r = run("fit", "ssgp_probit", "--data", "autompg", "--out", str(out), "--steps", "400",
            "--no-progress")
    assert r.returncode == 0, r.stderr
    rec = json.loads((out / "metrics.json").read_text())
    assert rec["error_rate"] < 0.25 and rec["nll"] < np.log(2), rec
    r = run("fit", "ssgp_probit", "--data", "autompg", "--threshold", "1000", "--out", str(out))
    assert r.returncode == 2 and "single class" in r.stderr


def test_x64_flag_computes_in_float64(tmp_path):
    """`--x64`: the whole fit in float64 (posterior draws and predictions are float64; float32
    without the flag)."""
    for flag, dtype in (["--x64"], np.float64), ([], np.float32):
        out = tmp_path / f"run{len(flag)}"
        r = run("fit", "ssgp_svi", "--data", "pendulum", "--out", str(out), *flag, "--set", "m=5",
                "--set", "svi.steps=50", "--set", "svi.min_steps=0", "--set", "samples=10",
                "--set", "svi.paths=1", "--no-progress")
        assert r.returncode == 0, r.stderr
        dt = xr.open_datatree(out / "posterior.nc", engine="h5netcdf")
        assert dt["posterior"]["frequencies"].dtype == dtype
        assert dt["predictions"]["f_mean"].dtype == dtype


@pytest.fixture
def own_catalog(tmp_path, monkeypatch):
    """An empty user catalog directory; the catalogs that main adds are dropped after the test."""
    import ssgp_ppl.entry as entry_mod

    monkeypatch.setattr(entry_mod, "_user_catalogs", [])
    d = tmp_path / "mine"
    d.mkdir()
    return d


def test_a_user_entry_named_like_a_built_in_one_is_an_error_when_used(own_catalog, tmp_path, capsys):
    from ssgp_ppl.entry import BUILTIN_CATALOG

    (own_catalog / "ssgp.toml").write_text((BUILTIN_CATALOG / "ssgp.toml").read_text())
    assert main(["fit", "ssgp", "--catalog", str(own_catalog), "--data", "pendulum", "--steps", "3",
                 "--no-progress", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{own_catalog / 'ssgp.toml'}: entry 'ssgp' is already " \
        f"defined by {BUILTIN_CATALOG / 'ssgp.toml'}; rename the file" in err


def test_models_prints_catalog_text_without_control_characters(own_catalog, capsys):
    """A description's terminal escapes and newline, and a file name's, are shown escaped: they
    cannot set the terminal's title or break the table."""
    from ssgp_ppl.entry import BUILTIN_CATALOG

    text = (BUILTIN_CATALOG / "ssgp.toml").read_text()
    start = text.index("description")
    end = text.index("\n", start)
    (own_catalog / "evil.toml").write_text(
        text[:start] + 'description = "a\\u001b]0;owned\\u0007b\\nc\\u202ed"' + text[end:])
    (own_catalog / "bad\x1b[2J.toml").write_text("[model\n")
    assert main(["models", "--long", "--catalog", str(own_catalog)]) == 0
    out, err = capsys.readouterr()
    for stream in (out, err):
        assert not {"\x1b", "\x07", "\u202e"} & set(stream), stream
    lines = out.splitlines()
    assert len(lines) == 1 + len(list(BUILTIN_CATALOG.glob("*.toml"))) + 1
    assert "a\\x1b]0;owned\\x07b\\nc\\u202ed" in next(li for li in lines if li.startswith("evil"))
    assert err.count("\n") == 1 and "bad\\x1b[2J.toml" in err


def test_a_closed_output_pipe_ends_quietly():
    """``ssgp-ppl models | head``: the reader goes away; no traceback, status 141 (SIGPIPE)."""
    with subprocess.Popen([*EXE, "models"], stdout=subprocess.PIPE, stderr=subprocess.PIPE) as p:
        p.stdout.close()  # before the table is written
        err = p.stderr.read().decode()
        assert p.wait(timeout=300) == 141 and err == "", err


def test_sbc_help_names_the_small_defaults(capsys):
    """The help spells SBC's small defaults out (the parser does not import the SBC module):
    each of ``sbc.SMALL_SETTINGS`` is in it, so the two cannot drift apart."""
    from ssgp_ppl.diagnostics import sbc

    with pytest.raises(SystemExit) as e:
        main(["sbc", "--help"])
    assert e.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for setting in sbc.SMALL_SETTINGS:
        assert setting in text, setting
