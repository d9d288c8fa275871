"""Data parallelism of the partition-sampled gradient (ssgp_ppl.runtime.sharding): two host devices
(``--xla_force_host_platform_device_count=2``), two processes under ``jax.distributed``, and NUTS
chains on two devices; each against the single-device run in float64."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

from ssgp_ppl.entry import load_entry
from ssgp_ppl.inference.runners import Batching, Schedule, run_svi

STEPS = 200

# one SVI run of svbssgp on pendulum, float64, a = 1 of its partitions per step; written as npz
RUN = textwrap.dedent("""
    import json, sys
    import jax
    MODE = sys.argv[1]
    if MODE == "distributed":
        jax.distributed.initialize(coordinator_address=sys.argv[3], num_processes=2,
                                   process_id=int(sys.argv[4]), initialization_timeout=120)
    jax.config.update("jax_enable_x64", True)
    import numpy as np
    from ssgp_ppl.entry import load_entry
    from ssgp_ppl.data.datasets import load
    from ssgp_ppl.inference.runners import Batching, Schedule, batch_sampler, run_svi
    from ssgp_ppl.runtime.sharding import row_mesh

    data = load("pendulum")
    entry = load_entry("svbssgp")
    spec = entry.spec(data.n_features)
    model, guide = entry.model(spec), entry.guide(spec, entry.model(spec))
    parts = entry.partitions(data.x_train, seed=0)

    def train(devices=None):
        res = run_svi(model, guide, data.x_train, data.y_train, Schedule(STEPS, chunk=100),
                      batching=Batching(partitions=parts, per_step=1), progress=False,
                      devices=devices)
        return {"loss": res.losses, **{k: np.asarray(v) for k, v in res.params.items()}}

    out = {}
    if MODE == "distributed":
        out["processes"], out["devices"] = jax.process_count(), len(jax.devices())
        np.savez(sys.argv[2] + f"-{jax.process_index()}.npz", **train())
    else:
        one, two = train(devices=1), train(devices=2)
        out["max_diff"] = max(float(np.max(np.abs(one[k] - two[k]))) for k in one)
        # where each device's rows come from: the drawn block split in halves
        mesh = row_mesh(2)
        draw, aux = batch_sampler(data.n_train, partitions=parts, per_step=1, mesh=mesh)
        xb, yb, kw = jax.jit(draw)(jax.random.PRNGKey(0), data.x_train, data.y_train, aux)
        out["shards"] = [list(s.data.shape) for s in xb.addressable_shards]
        out["block"], out["d"] = int(parts.blocks.shape[1]), data.n_features
        xt, yt = jax.numpy.asarray(data.x_train), jax.numpy.asarray(data.y_train)
        lowered = jax.jit(jax.grad(lambda w, k: jax.numpy.sum(draw(k, xt, yt, aux)[0] @ w))).lower(
            jax.numpy.ones(data.n_features), jax.random.PRNGKey(0))
        out["all_reduce"] = "all-reduce" in lowered.compile().as_text()
        # NUTS: two chains, one on each device (numpyro's parallel method: pmap). numpyro's
        # parallel, vectorized and sequential chains draw differently for the same key, so the
        # check is that they ran on both devices, and give the same draws again for the same seed
        from ssgp_ppl.inference.runners import run_nuts
        fixed = load_entry("ssgp_svi").with_overrides(["m=2"])
        small = fixed.model(fixed.spec(data.n_features))
        x, y = data.x_train[:60], data.y_train[:60]
        runs = [run_nuts(small, x, y, warmup=40, samples=40, chains=2, seed=3, progress=False)
                for _ in range(2)]
        out["nuts_method"] = runs[0].chain_method
        draws = [r.get_samples(group_by_chain=True)["signal"] for r in runs]
        out["nuts_shape"] = list(draws[0].shape)
        out["nuts_same"] = bool(np.array_equal(draws[0], draws[1]))
    print(json.dumps(out))
""").replace("STEPS", str(STEPS))


def _python(script, *args, **env):
    """A Python subprocess on the CPU backend (the test is about host devices and processes)."""
    return subprocess.Popen([sys.executable, "-c", script, *map(str, args)],
                            # XLA_FLAGS as given, not inherited: an in-process CLI test on the
                            # same worker sets 4 host devices (cli._setup_jax)
                            env={**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "", **env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(procs, timeout=400) -> list[dict]:
    """Each process's JSON line; a failure or time-out kills them all (no orphan holds the port)."""
    try:
        outs = []
        for proc in procs:
            out, err = proc.communicate(timeout=timeout)
            assert proc.returncode == 0, err[-3000:]
            outs.append(json.loads(out.strip().splitlines()[-1]))
        return outs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def reference(x64, pendulum):
    """The single-device, single-process run (this process, float64)."""
    entry = load_entry("svbssgp")
    spec = entry.spec(pendulum.n_features)
    model = entry.model(spec)
    parts = entry.partitions(pendulum.x_train, seed=0)
    res = run_svi(model, entry.guide(spec, model), pendulum.x_train, pendulum.y_train,
                  Schedule(STEPS, chunk=100), batching=Batching(partitions=parts, per_step=1),
                  progress=False, devices=1)
    return {"loss": res.losses, **{k: np.asarray(v) for k, v in res.params.items()}}


@pytest.fixture(scope="module")
def x64():  # module scope: the reference fixture computes in float64
    previous = bool(jax.config.read("jax_enable_x64"))
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", previous)


def test_two_devices_split_the_step_rows_and_match_one_device(tmp_path):
    [out] = _finish([_python(RUN, "devices", tmp_path / "run",
                             XLA_FLAGS="--xla_force_host_platform_device_count=2")])
    half = out["block"] // 2 + out["block"] % 2  # block columns padded to a multiple of 2
    assert out["shards"] == [[half, out["d"]]] * 2  # each device holds half of the drawn rows
    assert out["all_reduce"]  # the gradient is summed across the devices
    assert out["max_diff"] < 1e-9  # 200 Adam steps: same parameters and losses to rounding
    assert out["nuts_method"] == "parallel" and out["nuts_shape"] == [2, 40] and out["nuts_same"]


def test_training_across_two_processes_matches_one_process(tmp_path, reference):
    address = f"127.0.0.1:{_free_port()}"
    procs = [_python(RUN, "distributed", tmp_path / "run", address, rank) for rank in (0, 1)]
    outs = _finish(procs)
    assert all(o == {"processes": 2, "devices": 2} for o in outs)
    for rank in (0, 1):
        got = np.load(tmp_path / f"run-{rank}.npz")
        for k, v in reference.items():
            np.testing.assert_allclose(got[k], v, rtol=1e-9, atol=1e-9, err_msg=f"rank {rank}: {k}")
