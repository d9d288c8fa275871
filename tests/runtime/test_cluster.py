"""The Dask cluster runs (ssgp_ppl.runtime.cluster) against the single-process results, on one local
cluster of 2 worker processes shared by the module: Tan et al. 2016, §6's adaptive-neighbourhood fits in
chunks of test rows, batch prediction in row chunks (``map_rows`` over a predictive rule's
moments: degenerate, marginal and local rules),
benchmark repetitions, a worker's exception, the float width carried to the workers, and the
package without dask."""

import importlib
import os
import sys

import cloudpickle
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ssgp_ppl import pipeline
from ssgp_ppl.data import datasets
from ssgp_ppl.entry import load_entry
from ssgp_ppl.errors import SSGPError
from ssgp_ppl.inference import ncvmp, neighbourhoods
from ssgp_ppl.inference.methods.ncvmp import algorithm_settings
from ssgp_ppl.model.predictive import SiteRule, predict_sites
from ssgp_ppl.runtime import cluster

# the workers cannot import this test module: its functions travel by value
cloudpickle.register_pickle_by_value(sys.modules[__name__])

S = 3  # posterior draws of the cheap sites


@pytest.fixture(scope="module")
def dask_client():
    """One LocalCluster of 2 single-threaded worker processes for the module (no dashboard)."""
    with cluster.client(workers=2) as c:
        yield c


def _sites(entry_name: str, d: int, seed: int = 0) -> dict:
    """S draws of (θ, σ_s, σ_n, s) of a catalog entry's shapes: a posterior stand-in, no fit."""
    m = load_entry(entry_name).spec(d).m
    rng = np.random.default_rng(seed)
    return {"frequencies": jnp.asarray(rng.standard_normal((S, m, d)) * 0.3),  # (S, m, d)
            "signal": jnp.asarray(rng.uniform(0.8, 1.3, S)),
            "noise": jnp.asarray(rng.uniform(0.2, 0.4, S)),
            "nuisance": jnp.asarray(rng.normal(0.0, 0.2, (S, 2 * m)))}  # (S, 2m)


def _bench(seed: int) -> dict:
    """A benchmark repetition stand-in: a seeded JAX draw and the process that made it."""
    return {"seed": seed, "draw": float(jax.random.normal(jax.random.PRNGKey(seed))), "pid": os.getpid()}


def _fail_on_one(item: int) -> int:
    if item == 1:
        raise SSGPError(f"chunk {item} is bad")
    return item


def _float_width(item: int) -> str:
    return str(jnp.asarray(1.0).dtype)


# --------------------------------------------------------------------------- adaptive neighbourhoods


def test_local_fits_over_workers_equal_one_process(dask_client):
    """§6 on 6 pendulum test points, batches of 2 fits, chunks of 2 rows on 2 workers (3 chunks):
    the same LocalResult as one local_predict call, bit for bit (each chunk draws its rows' spectral
    sets through ``offset`` and holds the batches the single run holds)."""
    e = load_entry("tan_local").with_overrides(["restarts=2", "k=20", "m=4", "max_iter=20"])
    data = datasets.load("pendulum", x_scaling=e.config["data"]["x_scaling"])
    x, y, xt = np.asarray(data.x_train), np.asarray(data.y_train), np.asarray(data.x_test[:6])
    prior = ncvmp.tan_prior(e.spec(data.n_features))
    kw = dict(m=4, k=20, settings=algorithm_settings(e), key=jax.random.PRNGKey(0), batch=2)
    want = neighbourhoods.local_predict(x, y, xt, prior, progress=False, **kw)
    part = neighbourhoods.local_predict(x, y, xt[2:4], prior, progress=False, offset=2, **kw)
    got = cluster.local_predict_distributed(x, y, xt, prior, client=dask_client, chunk=2, **kw)
    assert np.all(np.isfinite(want.mean)) and np.all(want.var > 0)
    for name in want._fields:
        np.testing.assert_array_equal(getattr(part, name), getattr(want, name)[2:4], err_msg=name)
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
        assert getattr(got, name).dtype == getattr(want, name).dtype


def test_local_fits_on_threads_keep_the_callers_float64():
    """``jax.enable_x64`` is per thread: the fits' batches on pool threads must still compute in
    the caller's float64 (the Dask task runs inside ``jax.enable_x64``), and equal one thread's."""
    e = load_entry("tan_local").with_overrides(["restarts=1", "k=12", "m=2", "max_iter=5"])
    data = datasets.load("pendulum", x_scaling=e.config["data"]["x_scaling"])
    x, y, xt = np.asarray(data.x_train), np.asarray(data.y_train), np.asarray(data.x_test[:4])
    with jax.enable_x64(True):
        prior = ncvmp.tan_prior(e.spec(data.n_features))
        kw = dict(m=2, k=12, settings=algorithm_settings(e), key=jax.random.PRNGKey(0), batch=1,
                  progress=False)
        two = neighbourhoods.local_predict(x, y, xt, prior, threads=2, **kw)
        one = neighbourhoods.local_predict(x, y, xt, prior, threads=1, **kw)
    assert two.mean.dtype == np.float64 and two.mu_lambda.dtype == np.float64
    for name in two._fields:
        np.testing.assert_array_equal(getattr(two, name), getattr(one, name), err_msg=name)


# --------------------------------------------------------------------------- batch prediction


def _rule(sites, data, rule, gamma=0.0, partitions=None) -> SiteRule:
    """The predictive rule over ``sites`` with ``data``'s training rows (as a fit's posterior holds)."""
    return SiteRule(rule, sites, np.asarray(data.x_train), np.asarray(data.y_train), gamma, partitions)


def _predict_by_chunks(sites, data, rule, size: int, **kw) -> list[np.ndarray]:
    """``predict_sites`` on row chunks of the test split in this process: its per-draw
    (mean_f, var_f), concatenated."""
    parts = [predict_sites(sites, data, rule, x_test=data.x_test[r:r + size], **kw)
             for r in range(0, data.n_test, size)]
    return [np.concatenate([np.asarray(getattr(p, k)) for p in parts], axis=-1)
            for k in ("mean_f", "var_f")]


def _one_call(sites, data, rule, **kw) -> list[np.ndarray]:
    """``predict_sites`` on the whole test split: its per-draw (mean_f, var_f)."""
    p = predict_sites(sites, data, rule, **kw)
    return [np.asarray(p.mean_f), np.asarray(p.var_f)]


def _assert_close_to_one_call(got, want):
    """XLA's CPU code for an array of n* rows is not that for n*' rows (vectorised loops and their
    remainders, batched Cholesky factors of the local rule's used blocks): a row's predictive from a
    chunk differs from the one-call value by rounding alone, measured at most 3 eps of the precision
    in force times the output's largest magnitude (degenerate, marginal and local rules, chunks of 1
    to 106 rows, float32 and float64); 8 eps is the bound."""
    for g, w in zip(got, want, strict=True):
        w = np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype
        eps = np.finfo(jnp.result_type(float)).eps
        np.testing.assert_allclose(g, w, rtol=0, atol=8 * eps * np.abs(w).max())


@pytest.mark.parametrize(("entry_name", "rule", "gamma"),
                         [("vssgp", "degenerate", 0.0), ("ssgp", "marginal", 0.0),
                          ("svbssgp", "local", 0.3)])
def test_batch_prediction_in_chunks_equals_predict(dask_client, pendulum, entry_name, rule, gamma):
    """The pendulum test split (315 rows) in 3 chunks on the workers (``map_rows`` over the rule's
    per-draw moments): bit for bit the chunks ``predict_sites`` gives in this process, and
    ``predict_sites`` on all rows up to rounding; the local rule's chunks use the same 4 k-means
    partitions. ``rule.moments(x, client=)`` (its default chunks) agrees up to rounding too."""
    parts = load_entry("svbssgp").with_overrides(["count=4"]).partitions(
        pendulum.x_train) if rule == "local" else None
    sites = _sites(entry_name, pendulum.n_features)
    size = pendulum.n_test // 3  # 315 = 3 × 105: one program per worker
    r = _rule(sites, pendulum, rule, gamma, parts)
    got = cluster.map_rows(r._f, pendulum.x_test, dask_client, chunk=size)
    assert len(got) == 2 and got[0].shape == (S, pendulum.n_test) and got[1].shape == (S, pendulum.n_test)
    for g, w in zip(got, _predict_by_chunks(sites, pendulum, rule, size, gamma=gamma, partitions=parts),
                    strict=True):
        np.testing.assert_array_equal(g, w)
    one = _one_call(sites, pendulum, rule, gamma=gamma, partitions=parts)
    _assert_close_to_one_call(got, one)
    mom = r.moments(pendulum.x_test, client=dask_client)
    _assert_close_to_one_call((mom.mean_f, mom.var_f), one)
    np.testing.assert_array_equal(mom.noise, np.asarray(sites["noise"]))


def test_batch_prediction_runs_in_the_clients_float64(dask_client, pendulum, x64):
    """With jax_enable_x64 on in the client the workers compute in float64 too, and a later
    float32 task is not affected (the width is the task's, not the worker's)."""
    sites = _sites("ssgp", pendulum.n_features)
    assert sites["noise"].dtype == np.float64
    got = cluster.map_rows(_rule(sites, pendulum, "marginal")._f, pendulum.x_test, dask_client,
                           chunk=105)
    assert got[0].dtype == np.float64
    for g, w in zip(got, _predict_by_chunks(sites, pendulum, "marginal", 105), strict=True):
        np.testing.assert_array_equal(g, w)
    _assert_close_to_one_call(got, _one_call(sites, pendulum, "marginal"))
    assert cluster.map_chunks(_float_width, [0, 1, 2], dask_client) == ["float64"] * 3
    jax.config.update("jax_enable_x64", False)  # the fixture restores True, then the previous value
    assert cluster.map_chunks(_float_width, [0, 1, 2], dask_client) == ["float32"] * 3


def test_fit_with_a_client_predicts_on_the_cluster(dask_client, pendulum):
    """``pipeline.fit(..., client=)`` (the CLI's ``--dask``): the same fit, its test predictions computed on
    the workers; metrics equal the in-process ones up to rounding."""
    entry = load_entry("ssgp").with_overrides(["m=5"])
    here = pipeline.fit(entry, pendulum, "ml", steps=30, progress=False)
    there = pipeline.fit(entry, pendulum, "ml", steps=30, progress=False, client=dask_client)
    for k in ("rmse", "mnlp", "crps", "coverage_90"):
        assert there.metrics[k] == pytest.approx(here.metrics[k], rel=1e-5), k


# --------------------------------------------------------------------------- repetitions, errors


def test_repeat_returns_results_in_seed_order(dask_client):
    seeds = [5, 3, 11, 0, 7, 2]
    got = cluster.repeat(_bench, seeds, dask_client)
    assert [r["seed"] for r in got] == seeds
    assert [{k: r[k] for k in ("seed", "draw")} for r in got] == [
        {k: v for k, v in _bench(s).items() if k != "pid"} for s in seeds]
    assert os.getpid() not in {r["pid"] for r in got}  # computed on the workers


def test_worker_exception_is_raised_as_itself(dask_client):
    with pytest.raises(SSGPError, match="chunk 1 is bad"):
        cluster.map_chunks(_fail_on_one, [0, 1, 2], dask_client)
    assert cluster.map_chunks(_fail_on_one, [0, 2], dask_client) == [0, 2]  # the cluster still works
    assert cluster.map_chunks(_fail_on_one, [], dask_client) == []


def test_bad_chunk_sizes_are_refused(dask_client, pendulum):
    with pytest.raises(SSGPError, match="chunk must be >= 1"):
        cluster.map_rows(_rule(_sites("ssgp", pendulum.n_features), pendulum, "marginal")._f,
                         pendulum.x_test, dask_client, chunk=0)
    with pytest.raises(SSGPError, match="local rule needs partitions"):
        _rule(_sites("ssgp", pendulum.n_features), pendulum, "local").moments(pendulum.x_test,
                                                                               client=dask_client)


# --------------------------------------------------------------------------- without dask


def test_package_imports_without_dask_and_names_the_extra(monkeypatch):
    """With dask missing the module still imports; using a cluster is one SSGPError line."""
    for name in ("distributed", "dask"):
        monkeypatch.setitem(sys.modules, name, None)  # `import distributed` raises ImportError
    monkeypatch.delitem(sys.modules, "ssgp_ppl.runtime.cluster")
    fresh = importlib.import_module("ssgp_ppl.runtime.cluster")
    assert fresh is not cluster
    with pytest.raises(SSGPError, match=r"needs the optional extra: pip install 'ssgp-ppl\[dask\]'"):
        with fresh.client():
            pass
    with pytest.raises(SSGPError, match=r"optional extra"):
        fresh.repeat(_bench, [0])


def _http_sockets(dask_scheduler):
    server = dask_scheduler.http_server
    return [] if server is None else [sock.getsockname()[0] for sock in server._sockets.values()]


def test_local_cluster_listens_on_the_loopback_interface_only(dask_client):
    """The scheduler (unauthenticated, it unpickles tasks), every worker and the scheduler's HTTP
    server of a local cluster bind 127.0.0.1, never all interfaces (0.0.0.0)."""
    info = dask_client.scheduler_info()
    assert dask_client.scheduler.address.startswith("tcp://127.0.0.1:")
    assert info["workers"] and all(a.startswith("tcp://127.0.0.1:") for a in info["workers"])
    hosts = dask_client.run_on_scheduler(_http_sockets)
    assert hosts and set(hosts) == {"127.0.0.1"}, hosts
