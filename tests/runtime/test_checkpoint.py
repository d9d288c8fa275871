"""Checkpoints: atomic saves, resume = an uninterrupted run, Ctrl-C stops cleanly, bad files fail."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from ssgp_ppl.entry import load_entry
from ssgp_ppl.errors import SSGPError
from ssgp_ppl.inference.runners import Schedule, run_svi
from ssgp_ppl.pipeline import fit
from ssgp_ppl.runtime import checkpoint as ckpt_io
from ssgp_ppl.runtime.checkpoint import Checkpoint

STEPS, CHUNK = 600, 100
FP = {"model": "ssgp_svi", "seed": 0}


@pytest.fixture(autouse=True)
def _ctrl_c_as_a_terminal_sends_it():
    """These tests are about Ctrl-C under Python's default SIGINT handler, whatever the worker
    process had installed before them."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture(scope="module")
def problem(pendulum):
    entry = load_entry("ssgp_svi").with_overrides(["m=5"])
    spec = entry.spec(pendulum.n_features)
    model = entry.model(spec)
    return model, entry.guide(spec, model), pendulum.x_train, pendulum.y_train


def _run(problem, checkpoint=None, callback=None, steps=STEPS):
    model, guide, x, y = problem
    return run_svi(model, guide, x, y, Schedule(steps, chunk=CHUNK, min_steps=steps), seed=3,
                   progress=False, checkpoint=checkpoint, callback=callback)


def _interrupt_at(step):
    def callback(done, params):
        if done == step:
            signal.raise_signal(signal.SIGINT)  # what Ctrl-C sends; the runner's handler catches it
    return callback


def test_sigint_then_resume_equals_an_uninterrupted_run(problem, tmp_path):
    full = _run(problem)
    ck = Checkpoint(tmp_path / "ck.npz", every=250, fingerprint=FP)
    before = signal.getsignal(signal.SIGINT)
    part = _run(problem, ck, _interrupt_at(300))
    assert part.interrupted and part.steps == 300 and len(part.losses) == 300
    assert signal.getsignal(signal.SIGINT) is before  # handler restored
    assert part.losses.dtype == full.losses.dtype
    assert not list(tmp_path.glob("*.tmp"))  # saves are atomic: no temporary file left
    resumed = _run(problem, ck._replace(resume=True))
    assert not resumed.interrupted and resumed.steps == STEPS
    np.testing.assert_array_equal(resumed.losses, full.losses)  # the whole trace, bit for bit
    assert resumed.losses.dtype == full.losses.dtype
    for k in full.params:
        np.testing.assert_array_equal(np.asarray(resumed.params[k]), np.asarray(full.params[k]))


def test_without_a_checkpoint_ctrl_c_is_a_keyboard_interrupt(problem):
    """Nothing to resume from: Ctrl-C stops the caller (compare, notebooks) as usual."""
    with pytest.raises(KeyboardInterrupt):
        _run(problem, None, _interrupt_at(200))


def test_resume_of_a_finished_run_returns_it(problem, tmp_path):
    ck = Checkpoint(tmp_path / "ck.npz", every=10**6, fingerprint=FP)
    first = _run(problem, ck, steps=200)
    again = _run(problem, ck._replace(resume=True), steps=200)
    assert again.steps == 200
    np.testing.assert_array_equal(again.losses, first.losses)
    for k in first.params:
        np.testing.assert_array_equal(np.asarray(again.params[k]), np.asarray(first.params[k]))


def test_a_failed_save_keeps_the_previous_checkpoint(problem, tmp_path, monkeypatch):
    ck = Checkpoint(tmp_path / "ck.npz", every=100, fingerprint=FP)
    _run(problem, ck, steps=200)
    before = ckpt_io.load(ck)

    def crash(src, dst):
        raise OSError("disk full")

    from ssgp_ppl.runtime import io as io_mod

    monkeypatch.setattr(io_mod.os, "replace", crash)
    with pytest.raises(SSGPError, match="cannot write .*ck.npz: disk full; the previous file"):
        _run(problem, ck, steps=400)
    monkeypatch.undo()
    after = ckpt_io.load(ck)  # still the complete file of the first run
    assert after.done == before.done == 200
    np.testing.assert_array_equal(after.losses, before.losses)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty"])
def test_corrupt_checkpoint_is_a_clear_error(problem, tmp_path, damage):
    ck = Checkpoint(tmp_path / "ck.npz", fingerprint=FP)
    _run(problem, ck, steps=100)
    raw = ck.path.read_bytes()
    ck.path.write_bytes({"garbage": b"not a checkpoint" * 10, "truncated": raw[: len(raw) // 2],
                         "empty": b""}[damage])
    with pytest.raises(SSGPError, match=r"ck\.npz is corrupt or unreadable.*delete it"):
        _run(problem, ck._replace(resume=True), steps=100)


def test_a_checkpoint_of_the_previous_format_is_refused_with_a_clear_error(problem, tmp_path):
    """Format 1 kept another stop rule's state (per-chunk noise variances): it is refused, saying
    which format this version reads and what to do, never resumed with a wrong monitor."""
    import io
    import json
    import zipfile

    ck = Checkpoint(tmp_path / "ck.npz", fingerprint=FP)
    _run(problem, ck, steps=200)
    with np.load(ck.path) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(arrays["meta"].tobytes().decode())
    arrays["meta"] = np.frombuffer(json.dumps({**meta, "format": 1}).encode(), np.uint8)
    arrays["noise_var"] = arrays.pop("mids")
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    ck.path.write_bytes(buf.getvalue())
    assert zipfile.is_zipfile(ck.path)
    with pytest.raises(SSGPError, match=r"has format 1; this version reads format 2 .*delete the "
                                        r"file to start afresh"):
        _run(problem, ck._replace(resume=True), steps=200)


def test_missing_checkpoint_is_an_error_not_a_fresh_start(problem, tmp_path):
    with pytest.raises(SSGPError, match="no checkpoint at .*nothing to resume"):
        _run(problem, Checkpoint(tmp_path / "none.npz", fingerprint=FP, resume=True))


def test_mismatched_checkpoint_names_what_differs(problem, pendulum, tmp_path):
    ck = Checkpoint(tmp_path / "ck.npz", fingerprint=FP)
    _run(problem, ck, steps=100)
    with pytest.raises(SSGPError, match="another run: seed is 0 there and 1 here"):
        _run(problem, ck._replace(resume=True, fingerprint={**FP, "seed": 1}), steps=100)
    # same fingerprint but another guide: the state arrays do not fit
    entry = load_entry("ssgp_svi").with_overrides(["m=7"])
    spec = entry.spec(pendulum.n_features)
    model = entry.model(spec)
    other = (model, entry.guide(spec, model), pendulum.x_train, pendulum.y_train)
    with pytest.raises(SSGPError, match="another model, guide or precision"):
        _run(other, ck._replace(resume=True), steps=100)


def test_fit_fingerprint_covers_config_data_and_seed(pendulum, tmp_path):
    entry = load_entry("ssgp").with_overrides(["ml.steps=300", "ml.min_steps=300", "m=5"])
    ck = Checkpoint(tmp_path / "ck.npz", every=100)
    res = fit(entry, pendulum, seed=0, progress=False, checkpoint=ck)
    assert res.info.interrupted is False and res.info.steps == 300
    again = fit(entry, pendulum, seed=0, progress=False, checkpoint=ck._replace(resume=True))
    assert again.metrics == res.metrics  # same seed, same metrics (here via the checkpoint)
    for change, key in ((dict(seed=1), "seed"), (dict(entry=entry.with_overrides(["ml.lr=0.02"])),
                                                  "config")):
        kw = {"entry": entry, "seed": 0, **change}
        with pytest.raises(SSGPError, match=f"another run: {key} is"):
            fit(kw.pop("entry"), pendulum, progress=False, checkpoint=ck._replace(resume=True), **kw)
    with pytest.raises(SSGPError, match="another run: data_sha256"):
        sub = pendulum._replace(y_train=pendulum.y_train + 1e-3)
        fit(entry, sub, progress=False, checkpoint=ck._replace(resume=True))
    with pytest.raises(SSGPError, match="method 'nuts' does not checkpoint"):
        fit(load_entry("ssgp_svi"), pendulum, "nuts", checkpoint=ck)


def _cli(*args, **kw):
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    return subprocess.Popen([sys.executable, "-m", "ssgp_ppl.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, **kw)


def test_cli_sigint_writes_metrics_and_resume_finishes_like_an_uninterrupted_run(tmp_path):
    """A subprocess gets Ctrl-C after its first checkpoint: exit 130, valid checkpoint, metrics so
    far; ``fit --resume DIR`` finishes; the result equals an uninterrupted run's."""
    import json

    import xarray as xr

    args = ["fit", "ssgp", "--data", "pendulum", "--steps", "60000", "--set", "ml.min_steps=60000",
            "--set", "m=10", "--checkpoint-every", "500", "--no-progress"]
    run = tmp_path / "run"
    p = _cli(*args, "--out", str(run))
    deadline = time.time() + 120
    while not (run / "checkpoint.npz").exists() and p.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert (run / "checkpoint.npz").exists() and p.poll() is None, p.communicate()
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    assert "stopped by SIGINT at step" in err and f"ssgp-ppl fit --resume {run}" in err
    assert "Traceback" not in err
    rec = json.loads((run / "metrics.json").read_text())
    assert rec["interrupted"] is True and 0 < rec["steps"] < 60000 and np.isfinite(rec["rmse"])
    assert ckpt_io.load(Checkpoint(run / "checkpoint.npz")).done == rec["steps"]  # valid, complete

    p = _cli("fit", "--resume", str(run), "--no-progress")
    _, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    resumed = json.loads((run / "metrics.json").read_text())
    assert resumed["interrupted"] is False and resumed["steps"] == 60000

    p = _cli(*args, "--out", str(tmp_path / "straight"), "--checkpoint-every", "0")
    _, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    straight = json.loads((tmp_path / "straight" / "metrics.json").read_text())
    drop = ("fit_seconds", "predict_seconds")
    assert {k: v for k, v in resumed.items() if k not in drop} == \
        {k: v for k, v in straight.items() if k not in drop}
    a = xr.open_datatree(run / "posterior.nc", engine="h5netcdf")["posterior"]
    b = xr.open_datatree(tmp_path / "straight" / "posterior.nc", engine="h5netcdf")["posterior"]
    for k in b.data_vars:
        np.testing.assert_array_equal(a[k].values, b[k].values)


def test_resume_errors_are_one_line(tmp_path):
    p = _cli("fit", "--resume", str(tmp_path / "nowhere"))
    _, err = p.communicate(timeout=120)
    assert p.returncode == 2 and "run.json not found" in err and len(err.strip().splitlines()) == 1
    (tmp_path / "run.json").write_text("{}")
    for extra, flags in ((["ssgp"], "drop MODEL"), (["--steps", "5", "--seed", "2"],
                                                    "drop --seed, --steps")):
        p = _cli("fit", *extra, "--resume", str(tmp_path))
        _, err = p.communicate(timeout=120)
        assert p.returncode == 2 and "with its own settings; " + flags in err, err
    p = _cli("fit", "--resume", str(tmp_path))
    _, err = p.communicate(timeout=120)
    assert p.returncode == 2 and "run.json is corrupt" in err, err
