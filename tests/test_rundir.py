"""Run directories: one run at a time (the second is refused with the holder's pid), a finished
run never overwritten without --overwrite, an interrupted one pointed to --resume; SIGTERM and
SIGHUP stop a fit as Ctrl-C does (checkpoint, metrics so far, exit 128 + signal)."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from ssgp_ppl import rundir
from ssgp_ppl.errors import SSGPError


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
    from ssgp_ppl.inference import _graceful_sigint

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
