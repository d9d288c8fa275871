"""Run directories of fit and compare: one run at a time (the second is refused with the holder's
pid), a finished run never overwritten without --overwrite, an interrupted one pointed to
--resume; SIGTERM and SIGHUP stop a fit as Ctrl-C does (checkpoint, metrics so far, exit 128 +
signal) and a comparison too (its finished methods kept, loaded by --resume); a comparison is
staged, so that an interrupted one never sits beside a finished one."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from ssgp_ppl.errors import SSGPError
from ssgp_ppl.runtime import rundir


def test_a_second_run_on_the_same_directory_is_refused_with_the_holders_pid(tmp_path):
    with rundir.hold(tmp_path / "out"):
        with pytest.raises(SSGPError, match=rf"in use by another ssgp-ppl run \(pid {os.getpid()}\)"):
            with rundir.hold(tmp_path / "out"):
                pass
    with rundir.hold(tmp_path / "out"):  # released: free again
        pass


def test_an_existing_run_is_not_overwritten(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    rundir.check_free(out, resume=False, overwrite=False)  # empty
    (out / "run.json").write_text("{}")
    rundir.check_free(out, resume=False, overwrite=False)  # stopped before training
    (out / "checkpoint.npz").write_bytes(b"x")
    with pytest.raises(SSGPError, match="holds an interrupted run: continue it with ssgp-ppl fit "
                                        "--resume"):
        rundir.check_free(out, resume=False, overwrite=False)
    (out / "metrics.json").write_text(json.dumps({"interrupted": True, "steps": 8250}))
    with pytest.raises(SSGPError, match="interrupted run at step 8250"):
        rundir.check_free(out, resume=False, overwrite=False)
    (out / "metrics.json").write_text(json.dumps({"interrupted": False, "steps": 9000}))
    with pytest.raises(SSGPError, match="already holds a run .*--overwrite"):
        rundir.check_free(out, resume=False, overwrite=False)
    rundir.check_free(out, resume=False, overwrite=True)
    rundir.check_free(out, resume=True, overwrite=False)


# the CLI with SIGTERM and SIGHUP at their defaults, whatever the test runner inherited (under
# nohup SIGHUP is inherited ignored, and a fit keeps an ignored signal ignored); set in the child
# itself: a preexec_fn would fork this process, which JAX warns against
_CLI_DEFAULT_SIGNALS = ("import runpy, signal, sys; "
                        "[signal.signal(s, signal.SIG_DFL) for s in (signal.SIGTERM, signal.SIGHUP)]; "
                        "sys.argv = ['ssgp-ppl', *sys.argv[1:]]; "
                        "runpy.run_module('ssgp_ppl.cli', run_name='__main__')")


def _cli(*args):
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    return subprocess.Popen([sys.executable, "-c", _CLI_DEFAULT_SIGNALS, *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


@pytest.mark.parametrize("name", ["SIGTERM", "SIGHUP"])
def test_sigterm_and_sighup_stop_gracefully_and_the_rerun_points_to_resume(tmp_path, name):
    run = tmp_path / "run"
    args = ["fit", "ssgp", "--data", "pendulum", "--steps", "60000", "--set", "ml.min_steps=60000",
            "--set", "m=10", "--checkpoint-every", "500", "--no-progress", "--out", str(run)]
    p = _cli(*args)
    deadline = time.time() + 120
    while not (run / "checkpoint.npz").exists() and p.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert p.poll() is None, p.communicate()
    p.send_signal(getattr(signal, name))
    _, err = p.communicate(timeout=120)
    assert p.returncode == 128 + getattr(signal, name), err
    assert f"stopped by {name} at step" in err and f"--resume {run}" in err
    rec = json.loads((run / "metrics.json").read_text())
    assert rec["interrupted"] is True and 0 < rec["steps"] < 60000
    again = _cli(*args)  # the same command again: refused, pointing to --resume
    _, err = again.communicate(timeout=120)
    assert again.returncode == 2 and f"interrupted run at step {rec['steps']}" in err
    assert json.loads((run / "metrics.json").read_text()) == rec  # untouched


def test_handlers_are_restored_after_a_run_even_an_inherited_ignored_sigint(monkeypatch):
    """SSGP_PPL_HANDLE_SIGINT=1 handles an inherited-ignored SIGINT during the run (a second one
    raises KeyboardInterrupt); afterwards SIGINT is ignored again, and SIGTERM has its own handler."""
    from ssgp_ppl.inference.runners import _graceful_sigint

    def own(num, frame):
        pass

    monkeypatch.setenv("SSGP_PPL_HANDLE_SIGINT", "1")
    before = signal.signal(signal.SIGINT, signal.SIG_IGN), signal.signal(signal.SIGTERM, own)
    try:
        with _graceful_sigint(True) as stop:
            assert signal.getsignal(signal.SIGINT) not in (signal.SIG_IGN, signal.default_int_handler)
            signal.raise_signal(signal.SIGTERM)
            assert stop == {"requested": True, "signal": "SIGTERM"}
            assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # a second one acts
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is own
    finally:
        signal.signal(signal.SIGINT, before[0])
        signal.signal(signal.SIGTERM, before[1])


# compare: a quick comparison whose first method (two SVI paths) is done within seconds and whose
# reference (SMC, then NUTS chains) runs on after it; on a small table of two inputs (120 rows),
# which keeps the report's VI-vs-reference distances few (2 inputs x 21 lags, 12 test rows)
SMALL_SETTINGS = ["--set", "m=5", "--set", "svi.paths=2", "--steps", "200", "--set",
                  "svi.min_steps=0", "--samples", "30", "--chains", "2", "--set",
                  "smc.particles=32", "--set", "smc.mcmc_steps=2", "--set", "smc.warmup=30",
                  "--set", "smc.max_tree_depth=5", "--set", "predictive.samples=60"]


@pytest.fixture(scope="module")
def small_table(tmp_path_factory):
    """A CSV file of 120 rows: two inputs and the target y."""
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.uniform(-2, 2, (120, 2))
    y = np.sin(2 * x[:, 0]) + 0.5 * x[:, 1] + 0.1 * rng.standard_normal(120)
    path = tmp_path_factory.mktemp("table") / "small.csv"
    np.savetxt(path, np.column_stack([x, y]), delimiter=",", header="a,b,y", comments="")
    return path


def _small_compare(table):
    return ["vssgp", "--data", str(table), "--target", "y", *SMALL_SETTINGS]
FINISHED = {"comparison.json": '{"methods": []}', "report.html": "<p>the finished run</p>",
            "posterior_nuts.nc": "its draws"}  # a finished comparison's files, as text


def _stop_after_svi(table, out, *extra, name="SIGTERM"):
    """A compare subprocess on ``out`` stopped by ``name`` once its svi method is finished (kept
    for --resume, or written straight into ``out``); its exit status and stderr."""
    from ssgp_ppl.report import finished_methods

    p = _cli("compare", *_small_compare(table), "--no-progress", "--out", str(out), *extra)
    deadline = time.time() + 400
    while ("svi" not in finished_methods(out) and not (out / "posterior_svi.nc").exists()
           and p.poll() is None and time.time() < deadline):
        time.sleep(0.05)
    assert p.poll() is None, p.communicate()
    p.send_signal(getattr(signal, name))
    _, err = p.communicate(timeout=120)
    return p.returncode, err


def _quick_compare(out, *extra):
    return ["compare", "ssgp", "--data", "pendulum", "--set", "m=5", "--no-progress", "--out",
            str(out), *extra]


def test_a_second_compare_on_the_same_directory_is_refused_with_the_holders_pid(tmp_path, capsys):
    from ssgp_ppl.cli import main

    out = tmp_path / "out"
    first = _cli(*_quick_compare(out, "--steps", "100000", "--set", "ml.min_steps=100000"))
    lock = out / rundir.LOCK
    deadline = time.time() + 120
    while first.poll() is None and time.time() < deadline and not (
            lock.exists() and lock.read_text().strip() == str(first.pid)):
        time.sleep(0.05)
    try:
        assert main(_quick_compare(out, "--steps", "20")) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1, err
        assert f"in use by another ssgp-ppl run (pid {first.pid})" in err, err
        assert not (out / "report.html").exists() and not list(out.glob("posterior_*.nc"))
    finally:
        first.send_signal(signal.SIGHUP)
        _, err = first.communicate(timeout=120)
    # SIGHUP stops it as Ctrl-C does: one line, 128 + the signal, nothing finished to keep
    assert first.returncode == 128 + signal.SIGHUP, err
    assert "ssgp-ppl: stopped by SIGHUP; no method had finished" in err and "Traceback" not in err


def test_a_finished_comparison_is_replaced_only_with_overwrite(tmp_path, capsys):
    from ssgp_ppl.cli import main

    out = tmp_path / "out"
    out.mkdir()
    for name, text in FINISHED.items():
        (out / name).write_text(text)
    assert main(_quick_compare(out, "--steps", "20")) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "already holds a run" in err, err
    assert "give --overwrite to replace it" in err
    assert {name: (out / name).read_text() for name in FINISHED} == FINISHED
    assert main(_quick_compare(out, "--steps", "20", "--overwrite")) == 0
    assert json.loads((out / "comparison.json").read_text())["model"] == "ssgp"
    # the finished run replaced as a whole: its posterior_nuts.nc is gone
    assert sorted(p.name for p in out.iterdir() if p.name != rundir.LOCK) == [
        "comparison.json", "posterior_ml.nc", "report.html", "run.json"]


def test_compare_sigterm_keeps_the_finished_methods_and_resume_does_not_fit_them_again(
        tmp_path, capsys, small_table):
    from ssgp_ppl.cli import main

    out = tmp_path / "out"
    code, err = _stop_after_svi(small_table, out)
    assert code == 128 + signal.SIGTERM, err
    assert (f"ssgp-ppl: stopped by SIGTERM; finished methods kept in {out / rundir.STAGING}: svi; "
            f"continue with: ssgp-ppl compare --resume {out}") in err, err
    assert "Traceback" not in err
    kept = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns)
            for p in (out / rundir.STAGING).glob("posterior_*.nc")}
    assert sorted(kept) == ["posterior_svi-one-path.nc", "posterior_svi.nc"]
    assert not (out / "report.html").exists() and not (out / "comparison.json").exists()
    assert main(["compare", *_small_compare(small_table), "--out", str(out)]) == 2  # the same again
    assert f"interrupted comparison: continue it with ssgp-ppl compare --resume {out}" in \
        capsys.readouterr().err

    p = _cli("compare", "--resume", str(out))
    _, err = p.communicate(timeout=900)
    assert p.returncode == 0, err
    assert "svi: finished by the interrupted run, loading it" in err
    # the same files, moved into place: loaded, not fitted and saved again
    assert {name: ((out / name).stat().st_ino, (out / name).stat().st_mtime_ns)
            for name in kept} == kept
    saved = json.loads((out / "comparison.json").read_text())
    assert [m["method"] for m in saved["methods"]] == ["svi-one-path", "svi", "smc",
                                                       "smc-chains-stacked"]
    assert (out / "report.html").exists() and not (out / rundir.STAGING).exists()


def test_an_interrupted_compare_overwrite_leaves_the_finished_run_whole(tmp_path, small_table):
    """The new run's posteriors wait in the staging directory: never beside the old report."""
    out = tmp_path / "out"
    out.mkdir()
    for name, text in FINISHED.items():
        (out / name).write_text(text)
    code, err = _stop_after_svi(small_table, out, "--overwrite", "--set", "svi.paths=1")
    assert code == 128 + signal.SIGTERM, err
    assert {name: (out / name).read_text() for name in FINISHED} == FINISHED
    assert sorted(p.name for p in out.iterdir()) == sorted([*FINISHED, rundir.LOCK,
                                                            rundir.STAGING])
    assert sorted(p.name for p in (out / rundir.STAGING).glob("posterior_*.nc")) == [
        "posterior_svi.nc"]


def test_compare_resume_refuses_a_comparison_of_other_settings(tmp_path, pendulum, monkeypatch):
    """An interrupted comparison continues only with its own entry, data and seed: anything else
    is one line naming what differs, and the comparison stays resumable."""
    from ssgp_ppl import report
    from ssgp_ppl.entry import load_entry

    entry, data = report.small(load_entry("ssgp"), pendulum)
    entry = entry.with_overrides(["m=5", "ml.steps=20"])

    def stop(*args, **kwargs):  # Ctrl-C once every method is finished, before the report
        raise KeyboardInterrupt

    monkeypatch.setattr(report, "_html", stop)
    with pytest.raises(KeyboardInterrupt):
        report.compare(entry, data, tmp_path, progress=False)
    assert report.finished_methods(tmp_path) == ["ml"]
    for other, key in ((dict(seed=1), "seed"), (dict(entry=entry.with_overrides(["m=6"])), "config"),
                       (dict(entry=load_entry("ssgp_fixed")), "config"),
                       (dict(data=data._replace(y_test=data.y_test + 1)), "test_sha256")):
        kw = {"entry": entry, "data": data, "seed": 0, **other}
        with pytest.raises(SSGPError, match=f"holds a comparison of other settings: {key} is .* "
                                            "there and .* here; give its settings, or --overwrite"):
            report.compare(kw["entry"], kw["data"], tmp_path, seed=kw["seed"], progress=False,
                           resume=True)
    assert report.finished_methods(tmp_path) == ["ml"]
    assert not (tmp_path / "report.html").exists()
