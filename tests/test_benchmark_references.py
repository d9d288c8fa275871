"""The pure-JAX references of benchmarks/step_time.py compute the package's own estimators.

For every catalog entry trained by SVI or type-II ML, the hand-written loss (benchmarks/
references.py) and the package's loss (NumPyro's Trace_ELBO or the entry's objective, through the
handlers) agree in value and gradient, in float64, for the same unconstrained parameters, batch
and key (the references replicate NumPyro's key derivations, so the guide draws are the same):
at the initial parameters (which match SVI.init's) and at perturbed ones. Whole runs agree too:
the reference's scan (batch sampler, key stream, ClippedAdam) retraces run_svi's loss trace.
"""

import importlib.util
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ssgp_ppl.entry import load_entry
from ssgp_ppl.inference.partitions import kmeans_partitions
from ssgp_ppl.inference.runners import Batching, Schedule, batch_sampler, run_svi

_path = Path(__file__).resolve().parents[1] / "benchmarks" / "references.py"
_spec = importlib.util.spec_from_file_location("benchmark_references", _path)
refs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(refs)

ENTRIES = ["ssgp", "ssgp_fixed", "ssgp_svi", "svbssgp", "vssgp", "svbssgp_dlm_log",
           "svbssgp_dlm_square", "ssgp_probit", "ssgp_poisson", "ssgp_mixture", "tan_va_svi"]
N, D, M, BATCH = 120, 3, 3, 40


@pytest.fixture(autouse=True)
def _fast_compiles():
    """XLA without most optimisations: these tests compile ~20 small graphs (NumPyro's and the
    references') and run each once or twice, so compile time is all of their time (−40%)."""
    previous = bool(jax.config.read("jax_disable_most_optimizations"))
    jax.config.update("jax_disable_most_optimizations", True)
    try:
        yield
    finally:
        jax.config.update("jax_disable_most_optimizations", previous)


def _data(entry, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N, D))
    f = np.sin(x @ np.array([1.0, -0.5, 0.3]))
    lik = entry.config["model"]["likelihood"]
    if lik == "probit":
        y = (f + 0.3 * rng.standard_normal(N) > 0).astype(float)
    elif lik == "poisson":
        y = rng.poisson(np.exp(f)).astype(float)
    else:
        y = f + 0.2 * rng.standard_normal(N)
    return jnp.asarray(x), jnp.asarray(y)


def _setup(name):
    """Entry (m = 3), data, spec, method, the reference, the package's loss and a sampler."""
    entry = load_entry(name)
    method = next(m for m in entry.methods if m in ("svi", "ml"))
    partitions = None
    sets = [f"m={M}"]
    if method == "svi" and entry.config["model"]["nuisance"] == "marginalized":
        # the references hand-write minibatch ELBOs: the sampled-s form of the model (a collapsed
        # likelihood does not factorise over rows)
        sets += ["model.nuisance=sampled", "inference.svi.noncentred=false",
                 "inference.svi.paths=1"]
    if method == "svi" and not entry.config["partitions"]["per_step"]:
        sets.append(f"inference.svi.batch_size={BATCH}")
    entry = entry.with_overrides(sets)
    x, y = _data(entry)
    if method == "svi" and entry.config["partitions"]["per_step"]:
        partitions = kmeans_partitions(np.asarray(x), N // 10, seed=0, max_size_factor=1.0,
                                       pad_to=10)
        draw, aux = refs.sampler(N, partitions=partitions, per_step=4)
    elif method == "svi":
        draw, aux = refs.sampler(N, batch_size=BATCH)
    else:
        draw, aux = refs.sampler(N)
    spec = entry.spec(D)
    ref = refs.hand_written(entry, spec, method, n_total=N)
    parts = refs.package_parts(entry, spec, method)
    xb, yb, kw = draw(jax.random.PRNGKey(3), x, y, aux)
    pkg = refs.plain_loop(parts.model, parts.guide, parts.loss, xb, yb, kw)
    return entry, method, x, y, ref, pkg, draw, aux, partitions, parts


def _perturb(params, key, size=0.05):
    leaves, tree = jax.tree.flatten(params)
    keys = jax.random.split(key, len(leaves))
    return tree.unflatten([a + size * jax.random.normal(k, a.shape, a.dtype)
                           for a, k in zip(leaves, keys, strict=True)])


def _close(a, b, rtol, what):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    scale = max(np.max(np.abs(b)), 1e-3)
    err = np.max(np.abs(a - b)) / scale if a.size else 0.0
    assert err < rtol, f"{what}: max |Δ| / max |b| = {err:.3g}"


@pytest.mark.parametrize("name", ENTRIES)
def test_hand_written_loss_and_gradient_match_the_package(name, x64):
    """Same parameters, batch and key: the same loss and gradient (float64, 1e-8 relative)."""
    entry, method, x, y, ref, pkg, draw, aux, *_ = _setup(name)
    assert ref.kind == refs.HAND_WRITTEN
    assert set(ref.params) == set(pkg.params)
    for k in ref.params:  # the initial parameters are SVI.init's, in NumPyro's coordinates
        _close(ref.params[k], pkg.params[k], 1e-10, f"{name} initial {k}")
    xb, yb, kw = draw(jax.random.PRNGKey(5), x, y, aux)

    def at(loss):  # kw (n_total, obs_scale, the mask) are constants of the step, as in run_svi
        return jax.jit(jax.value_and_grad(lambda p, k: loss(p, k, xb, yb, kw)))

    f_ref, f_pkg = at(ref.loss), at(pkg.loss)
    for i, params in enumerate([pkg.params, _perturb(pkg.params, jax.random.PRNGKey(7))]):
        key = jax.random.PRNGKey(11 + i)
        v_ref, g_ref = f_ref(params, key)
        v_pkg, g_pkg = f_pkg(params, key)
        assert np.isfinite(float(v_pkg))
        _close(v_ref, v_pkg, 1e-8, f"{name} loss")
        for k in g_pkg:
            _close(g_ref[k], g_pkg[k], 1e-7, f"{name} gradient {k}")


@pytest.mark.parametrize("kind", ["full", "uniform", "partitions"])
def test_sampler_draws_run_svis_batches(kind):
    """The reference's batch sampler is ssgp_ppl.inference.runners.batch_sampler: same rows, same kw."""
    x, y = jnp.arange(2.0 * N).reshape(N, 2), jnp.arange(1.0 * N)
    opts = {"full": {}, "uniform": {"batch_size": BATCH},
            "partitions": {"partitions": kmeans_partitions(np.asarray(x), N // 10, seed=0,
                                                           max_size_factor=1.0, pad_to=10),
                           "per_step": 4}}[kind]
    mine, mine_aux = refs.sampler(N, **opts)
    theirs, their_aux = batch_sampler(N, **opts)
    for seed in range(3):
        key = jax.random.PRNGKey(seed)
        a, b = mine(key, x, y, mine_aux), theirs(key, x, y, their_aux)
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])
        assert set(a[2]) == set(b[2])
        for k in a[2]:
            np.testing.assert_array_equal(a[2][k], b[2][k])


@pytest.mark.parametrize("name", ["vssgp"])
def test_reference_scan_retraces_run_svi(name, x64):
    """Whole runs: the reference's partition sampler, key stream (two guide sites), ClippedAdam
    (clip, bias correction, halving step size) and scan give run_svi's loss trace step for step."""
    entry, method, x, y, ref, _, draw, aux, partitions, parts = _setup(name)
    cfg = entry.settings(method)
    halflife = 3.0  # a short half-life, so the schedule matters within 6 steps
    batch = cfg.get("batch_size") or None
    res = run_svi(parts.model, parts.guide, x, y,
                  Schedule(6, lr=cfg["lr"], lr_halflife=halflife, chunk=3, tol=0.0,
                           min_steps=10**9),
                  batching=Batching(batch, partitions, 4 if partitions else 1), loss=parts.loss,
                  seed=2, progress=False)
    out = refs.run(ref, draw, aux, x, y, steps=6, chunk=3, lr=cfg["lr"], lr_halflife=halflife,
                   seed=2)
    assert out.steps == res.steps == 6
    _close(out.losses, res.losses, 1e-8, f"{name} loss trace")
    assert len(set(np.round(res.losses, 6))) == 6  # the parameters did move
