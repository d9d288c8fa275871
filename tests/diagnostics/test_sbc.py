"""Simulation-based calibration: ranks, the uniformity reading (which passes for exact posterior
draws and fails for an over-confident or too wide one), vmapped batches against one-by-one runs,
one compiled program for every batch, the CLI, and resuming."""

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from ssgp_ppl.cli import main
from ssgp_ppl.diagnostics import sbc
from ssgp_ppl.errors import SSGPError

L = 99
TINY = ("m=3", "ncvmp.max_iter=30", "ncvmp.restarts=1")


def _linear_sbc(scale: float, sims: int = 400, seed: int = 3) -> np.ndarray:
    """Ranks (sims, p) of β̃ in a conjugate Bayesian linear model y = Xβ + ε, β ~ N(0, I),
    ε ~ N(0, I): L draws of the exact posterior N(μ, Σ) with their spread times ``scale``."""
    rng = np.random.default_rng(seed)
    n, p = 12, 2
    x = rng.normal(size=(n, p))
    cov = np.linalg.inv(x.T @ x + np.eye(p))
    chol = np.linalg.cholesky(cov)
    out = np.empty((sims, p))
    for i in range(sims):
        beta = rng.normal(size=p)
        y = x @ beta + rng.normal(size=n)
        mean = cov @ x.T @ y
        draws = mean + scale * rng.normal(size=(L, p)) @ chol.T
        out[i] = sbc.ranks(draws, beta, rng)
    return out


def test_exact_posterior_draws_read_calibrated():
    r = _linear_sbc(1.0)
    for j in range(r.shape[1]):
        rd = sbc.reading(r[:, j], L)
        assert rd.verdict.startswith("calibrated") and rd.shape == "calibrated", rd.verdict
        assert rd.chi2_p > 0.05 and rd.outside == 0.0


def test_an_over_confident_posterior_reads_under_dispersed():
    r = _linear_sbc(0.5)
    for j in range(r.shape[1]):
        rd = sbc.reading(r[:, j], L)
        assert rd.shape == "under-dispersed" and "over-confident" in rd.verdict, rd.verdict
        assert rd.chi2_p < 1e-6
        # ranks at both ends: far more than the 2/(L+1) share of the two extreme ranks each
        assert np.mean((r[:, j] == 0) | (r[:, j] == L)) > 0.08


def test_a_too_wide_posterior_reads_over_dispersed_and_a_shifted_one_biased():
    wide = _linear_sbc(2.0)
    assert sbc.reading(wide[:, 0], L).shape == "over-dispersed"
    rng = np.random.default_rng(0)
    truth = rng.normal(size=300)
    high = truth[:, None] + 0.5 + rng.normal(size=(300, L))  # draws above the truth
    r = sbc.ranks(high[..., None], truth[:, None], rng)[:, 0]
    rd = sbc.reading(r, L)
    assert rd.shape == "biased high" and "posterior above the truth" in rd.verdict
    rd = sbc.reading(L - r, L)  # mirrored: the posterior below the truth
    assert rd.shape == "biased low" and "posterior below the truth" in rd.verdict


def test_ranks_count_the_draws_below_and_split_ties():
    rng = np.random.default_rng(1)
    draws = rng.integers(0, 5, size=(50, 20, 3)).astype(float)
    truth = rng.integers(0, 5, size=(50, 3)).astype(float)
    r = sbc.ranks(draws, truth, np.random.default_rng(2))
    for i in range(50):
        for q in range(3):
            below = sum(d < truth[i, q] for d in draws[i, :, q])
            equal = sum(d == truth[i, q] for d in draws[i, :, q])
            assert below <= r[i, q] <= below + equal
    cont = rng.normal(size=(30, 20, 2))
    t = rng.normal(size=(30, 2))
    brute = np.array([[sum(cont[i, k, q] < t[i, q] for k in range(20)) for q in range(2)]
                      for i in range(30)])
    np.testing.assert_array_equal(sbc.ranks(cont, t), brute)
    draws[0, 3, 1] = np.nan
    assert np.isnan(sbc.ranks(draws, truth)[0, 1])


def test_chi2_p_of_uniform_and_piled_ranks():
    flat = np.tile(np.arange(L + 1), 4).astype(float)
    assert sbc.chi2_p(flat, L) == pytest.approx(1.0)
    assert sbc.chi2_p(np.zeros(400), L) < 1e-50


@pytest.fixture(scope="module")
def tan_design():
    return sbc.design("tan_va", "pendulum", rows=12, settings=TINY)


def test_simulations_draw_the_prior_on_the_design_points(tan_design):
    des = tan_design
    assert des.x.shape == (12, 9) and np.all(np.abs(des.x) <= 1.0 + 1e-6)  # minmax inputs
    a, b = sbc.simulate(des, 5, seed=4), sbc.simulate(des, 3, seed=4)
    np.testing.assert_array_equal(a["y"][:3], b["y"])  # simulation i depends on (seed, i) alone
    assert a["y"].shape == (5, 12) and a["nuisance"].shape == (5, 6)
    phase = 2 * np.pi * np.einsum("nd,smd->snm", des.x, a["frequencies"])
    f = (np.cos(phase) * a["nuisance"][:, None, 0::2]).sum(-1) + \
        (np.sin(phase) * a["nuisance"][:, None, 1::2]).sum(-1)
    np.testing.assert_allclose(f, a["f"], rtol=1e-4, atol=1e-4)
    names, q = sbc.quantities(des.spec, des.x, {k: v[:, None] for k, v in a.items()}, a["y"])
    assert q.shape == (5, 1, len(names)) and names[-1] == "log_likelihood"
    # the log-likelihood quantity is log p(y | f, σ_n) of the simulated data
    resid = a["y"] - a["f"]
    ll = (-0.5 * resid**2 / a["noise"][:, None] ** 2 - np.log(a["noise"][:, None])
          - 0.5 * np.log(2 * np.pi)).sum(1)
    np.testing.assert_allclose(q[:, 0, -1], ll, rtol=1e-4)


def test_a_vmapped_batch_equals_its_simulations_one_by_one_and_compiles_once(tan_design):
    des = tan_design
    truth = sbc.simulate(des, 3, seed=1)
    keys = sbc.sim_keys(1, np.arange(3))
    prog = sbc.METHODS["ncvmp"].program(des, 19)
    together = prog(truth["y"], keys)
    again = prog(truth["y"][::-1].copy(), keys[::-1])  # another batch: the same program
    assert prog.compiled() == {"ncvmp": 1, "float64": 1, "draws": 1}
    one = sbc.METHODS["ncvmp"].program(des, 19)
    for i in range(3):
        alone = one(truth["y"][i:i + 1], keys[i:i + 1])
        for k, v in together.sites.items():  # float32: rounding differs under vmap
            np.testing.assert_allclose(v[i], alone.sites[k][0], rtol=5e-3, atol=5e-4)
            np.testing.assert_allclose(again.sites[k][2 - i], v[i], rtol=5e-3, atol=5e-4)
        assert together.y_centre[i] == pytest.approx(truth["y"][i].mean(), rel=1e-5)


def test_ncvmp_fits_are_finished_in_float64_as_continue_x64_finishes_one():
    """A simulation's NCVMP posterior is its float32 fit continued in float64 to the 1e-6 rule
    (ncvmp.continue_x64), then drawn in the run's width: its convergence flag and draws are
    those of the single fit finished alone (the catalog's iteration budget: they converge)."""
    import jax

    from ssgp_ppl.inference import ncvmp
    from ssgp_ppl.inference.methods.ncvmp import NCVMPMethodSettings, spectral_candidates

    des = sbc.design("tan_va", "pendulum", rows=12, settings=("m=3", "ncvmp.restarts=1"))
    truth = sbc.simulate(des, 2, seed=2)
    keys = sbc.sim_keys(2, np.arange(2))
    got = sbc.METHODS["ncvmp"].program(des, 19)(truth["y"], keys)
    s = NCVMPMethodSettings.of(des.entry, "ncvmp")
    prior = ncvmp.tan_prior(des.spec)
    sets = spectral_candidates(des.entry, des.spec, s.restarts)
    x = np.asarray(des.x, np.float32)
    for i in range(2):
        y = np.asarray(truth["y"][i], np.float32) - np.mean(truth["y"][i])
        f32 = jax.tree.map(np.asarray, ncvmp.fit_ncvmp(x, y, sets, prior, s.algorithm_settings()))
        done = ncvmp.continue_x64(x, y, f32, prior, s.algorithm_settings())
        assert bool(got.converged[i]) == bool(done.converged)
        q = ncvmp.sample_q(sbc._draw_keys(keys)[i], done.state, len(y), des.spec.m, prior, 19)
        np.testing.assert_allclose(got.sites["noise"][i], q["noise"], rtol=2e-3)
        np.testing.assert_allclose(got.sites["signal"][i], q["signal"], rtol=2e-3)
    assert got.converged.all()


def test_batches_over_two_worker_processes_give_the_ranks_of_one_process(tmp_path):
    """workers=2: the batches run in two spawned processes (this process compiles nothing of
    them); a batch's ranks depend on its simulations' indices alone, so they equal the
    one-process run's, also when the run is interrupted after a batch and resumed."""
    # 4 batches: the interruption keeps 1 or 2 (both workers' first may finish), and the 2 or 3
    # left still go to two workers (a single batch left would run here)
    kw = dict(sims=8, methods_=["ncvmp"], rows=12, draws=19, settings=TINY, batch=2,
              progress=False, seed=4)
    one = sbc.run("tan_va", "pendulum", **kw)
    sbc._PROGRAMS.clear()

    def stop(b):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sbc.run("tan_va", "pendulum", workers=2, out=tmp_path / "w", callback=stop, **kw)
    kept = np.load(tmp_path / "w" / sbc.CHECKPOINT)["done"]
    assert 1 <= kept.sum() < 3
    two = sbc.run("tan_va", "pendulum", workers=2, out=tmp_path / "w", resume=True, **kw)
    assert not sbc._PROGRAMS  # compiled in the workers
    assert json.loads(two.tree.attrs["compiled_programs"]) == {
        "ncvmp": {"ncvmp": 1, "float64": 1, "draws": 1}}
    np.testing.assert_array_equal(np.asarray(one.tree["ranks"]["rank"]),
                                  np.asarray(two.tree["ranks"]["rank"]))
    np.testing.assert_array_equal(np.asarray(one.tree["status"]["converged"]),
                                  np.asarray(two.tree["status"]["converged"]))
    with pytest.raises(SSGPError, match="workers must be a positive integer"):
        sbc.run("tan_va", "pendulum", workers=0, **kw)


def _proc(pid: int, name: str) -> str:
    try:
        return Path(f"/proc/{pid}/{name}").read_text()
    except OSError:
        return ""


def _running(pid: int) -> bool:
    return "\nState:\tZ" not in (st := _proc(pid, "status")) and bool(st)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads processes in /proc")
def test_workers_end_when_the_run_that_started_them_is_killed():
    """A run killed by SIGKILL (or SIGTERM) runs no cleanup: its workers, busy compiling the
    reference, see their parent gone and end within seconds instead of computing on."""
    code = ("from ssgp_ppl.diagnostics import sbc; sbc.run('svbssgp', 'pendulum', sims=4, "
            "methods_=['reference'], rows=10, draws=9, batch=2, progress=False, workers=2, "
            "settings=('m=2', 'smc.particles=32', 'smc.mcmc_steps=2', 'smc.chains=2', "
            "'smc.warmup=20'))")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    try:
        pinned = len(os.sched_getaffinity(0)) >= 2
        mine = _proc(proc.pid, "status").split("Cpus_allowed_list:")[1].split()[0]
        workers, deadline = [], time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            kids = [int(d.name) for d in Path("/proc").iterdir() if d.name.isdigit()
                    and f"\nPPid:\t{proc.pid}\n" in _proc(int(d.name), "status")]
            workers = [k for k in kids if "spawn_main" in _proc(k, "cmdline")]
            # started: pinned to a core of their own (the start pins them after the watch)
            started = [k for k in workers if not pinned or "Cpus_allowed_list:\t" + mine
                       not in _proc(k, "status")]
            if len(started) == 2:
                break
            time.sleep(0.2)
        assert len(workers) == 2, "the run's two workers did not start"
        if not pinned:
            time.sleep(15)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        end = time.monotonic() + 10 * sbc.PARENT_POLL_SECONDS
        while time.monotonic() < end and any(_running(w) for w in workers):
            time.sleep(0.1)
        assert not any(_running(w) for w in workers), "a worker outlived its run"
    finally:
        if proc.poll() is None:
            proc.kill()


def test_the_reference_batch_is_each_simulations_smc_run_and_compiles_once(x64):
    """The reference (ssgp_ppl.inference.smc's tempered_smc_program, then NUTS chains, over
    the simulations' ỹ in one jit): a simulation's draws depend on its own ỹ and key alone, not on its
    place in the batch or its neighbour (the runner pads every batch to the compiled size, so
    this is the property it relies on; equal to the last bit in float64), a second batch reuses
    the compiled programs, and each simulation has its own posterior (its ỹ read: the draws
    differ between simulations)."""
    des = sbc.design("tan_va", "pendulum", rows=10,
                     settings=("m=2", "smc.particles=32", "smc.mcmc_steps=2",
                               "smc.integration_steps=4", "smc.chains=2", "smc.warmup=20"))
    truth = sbc.simulate(des, 3, seed=3)
    keys = sbc.sim_keys(3, np.arange(3))
    prog = sbc.METHODS["reference"].program(des, 9)
    together = prog(truth["y"][:2], keys[:2])
    order = np.array([2, 0])  # simulation 0 second, beside simulation 2
    moved = prog(truth["y"][order], keys[order])
    assert prog.compiled() == {"smc": 1, "posterior": 1}
    assert not together.failed.any() and together.sites["frequencies"].shape == (2, 9, 2, 9)
    for k, v in together.sites.items():
        np.testing.assert_array_equal(v[0], moved.sites[k][1])
    assert together.converged[0] == moved.converged[1]
    assert not np.allclose(together.sites["noise"][0], together.sites["noise"][1])


def test_entries_with_one_model_share_their_reference_through_a_store(tmp_path):
    """``svbssgp`` and ``svbssgp_collapsed`` differ in their guide alone, so their references
    are one posterior: the batches ``svbssgp``'s run leaves in the store give
    ``svbssgp_collapsed`` the ranks its own reference computes (to the last bit: the identity
    leaves out nothing its program reads), and its timing names the run that computed them. An
    entry with another model (another type-II value, another SMC setting) or a VI method shares
    nothing."""
    settings = ("m=2", "smc.particles=32", "smc.mcmc_steps=2", "smc.integration_steps=4",
                "smc.chains=2", "smc.warmup=20")
    kw = dict(sims=4, methods_=["reference"], rows=10, draws=9, settings=settings, batch=2,
              progress=False, seed=4)
    own = sbc.run("svbssgp_collapsed", "pendulum", **kw)
    store = tmp_path / "store"
    first = sbc.run("svbssgp", "pendulum", store=store, **kw)
    assert len(list(store.glob("reference-*.npz"))) == 2  # one file per batch
    shared = sbc.run("svbssgp_collapsed", "pendulum", store=store, out=tmp_path / "c", **kw)
    for res in (first, shared):
        np.testing.assert_array_equal(np.asarray(res.tree["ranks"]["rank"]),
                                      np.asarray(own.tree["ranks"]["rank"]))
    timing = shared.tree["timing"]
    assert str(timing["computed_by"].sel({"method": "reference"}).values) == "svbssgp"
    assert int(timing["shared_simulations"].sel({"method": "reference"})) == 4
    spent = float(first.tree["timing"]["seconds_per_simulation"].sel({"method": "reference"}))
    assert spent > 0
    assert float(timing["seconds_per_simulation"].sel({"method": "reference"})) == pytest.approx(
        spent, rel=1e-6)  # svbssgp's seconds, not the store's read
    assert json.loads((tmp_path / "c" / sbc.SUMMARY).read_text())["shared"] == {
        "reference": {"simulations": 4, "computed_by": "svbssgp"}}
    assert "shared" not in sbc.to_json(own)
    ident = sbc.METHODS["reference"].identity
    base = ident(sbc.design("svbssgp", rows=10, settings=settings), 9)
    for name in ("svbssgp_dlm_log", "svbssgp_dlm_square", "vssgp_collapsed"):
        assert ident(sbc.design(name, rows=10, settings=settings), 9) == base, name
    for other in (("noise.init=0.4",), ("smc.warmup=30",), ("m=3",)):
        des = sbc.design("svbssgp", rows=10, settings=settings + other)
        assert ident(des, 9) != base, other
    assert ident(sbc.design("svbssgp", rows=12, settings=settings), 9) != base
    assert ident(sbc.design("svbssgp", rows=10, settings=settings), 19) != base
    assert sbc.METHODS["vi"].identity(sbc.design("svbssgp", rows=10, settings=settings), 9) is None


def test_the_reference_identity_holds_what_its_program_reads_and_nothing_else():
    """At SBC's small defaults ``vssgp`` (whose catalog entry asks 500 warm-up steps a chain for
    its full-size data) samples ``svbssgp``'s posterior with ``svbssgp``'s budget, so they share
    a reference; ``smc.runs``, ``smc.pilot`` and a ``smc.samples`` above what L asks for are not
    read by the program and change nothing, a ``smc.samples`` below it does."""
    ident = sbc.METHODS["reference"].identity
    base = ident(sbc.design("svbssgp", rows=10), 99)
    assert ident(sbc.design("vssgp", rows=10), 99) == base
    assert base["smc"]["warmup"] == 100 and base["smc"]["mcmc_steps"] == 10
    assert base["smc"]["per_chain"] == 50  # ⌈2 · 99 / 4⌉
    for same in ("smc.runs=5", "smc.pilot=true", "smc.samples=51"):
        assert ident(sbc.design("svbssgp", rows=10, settings=sbc.SMALL_SETTINGS + (same,)),
                     99) == base, same
    fewer = sbc.design("svbssgp", rows=10, settings=sbc.SMALL_SETTINGS + ("smc.samples=49",))
    assert ident(fewer, 99)["smc"]["per_chain"] == 49
    # a later --set wins over the small defaults
    longer = sbc.design("vssgp", rows=10, settings=sbc.SMALL_SETTINGS + ("smc.warmup=500",))
    assert ident(longer, 99)["smc"]["warmup"] == 500
    # every setting is in the identity or named as not read (collapse: through the spec), so
    # that a setting added later is not left out unseen
    from ssgp_ppl.inference.methods.smc import SMCSettings

    read = set(base["smc"]) - {"per_chain"} | {"samples"}
    assert {f.name for f in dataclasses.fields(SMCSettings)} == read | {"runs", "pilot", "collapse"}


def test_the_reference_reaches_a_high_signal_to_noise_posterior():
    """A simulation whose signal is 54× its noise (``tan_va``, seed 0, simulation 7): the
    tempered particles alone (128 × 20 HMC moves; 1,024 particles alike) stay at a noise
    of ~110 (true 7.8) and a log-likelihood 60 nats below the truth's; NUTS chains from them
    reach the truth: it lies inside the reference's
    central 98% interval of the noise."""
    des = sbc.design("tan_va", "pendulum",
                     settings=sbc.SMALL_SETTINGS + ("smc.particles=64", "smc.mcmc_steps=10",
                                                    "smc.warmup=100"))
    truth = sbc.simulate(des, 8, seed=0)
    assert truth["signal"][7] / truth["noise"][7] > 50
    res = sbc.METHODS["reference"].program(des, 99)(truth["y"][7:8], sbc.sim_keys(0, [7]))
    lo, hi = np.quantile(res.sites["noise"][0], [0.01, 0.99])
    assert lo < truth["noise"][7] < hi, (lo, hi, truth["noise"][7])
    assert hi < 20  # not the particles' ~110


def test_vi_batches_reuse_one_compiled_chunk():
    des = sbc.design("svbssgp", "pendulum", rows=10, settings=("m=2", "svi.steps=50",
                                                               "svi.chunk=25", "svi.min_steps=0"))
    truth = sbc.simulate(des, 4, seed=2)
    prog = sbc.METHODS["vi"].program(des, 9)
    first = prog(truth["y"][:2], sbc.sim_keys(2, np.arange(2)))
    prog(truth["y"][2:], sbc.sim_keys(2, np.arange(2, 4)))
    assert prog.compiled() == {"chunk": 1, "posterior": 1}
    alone = sbc.METHODS["vi"].program(des, 9)(truth["y"][:1], sbc.sim_keys(2, np.arange(1)))
    np.testing.assert_allclose(first.sites["frequencies"][0], alone.sites["frequencies"][0],
                               rtol=1e-3, atol=1e-4)


def test_stacked_vi_batches_fit_each_simulations_paths_in_one_compiled_chunk():
    """vi_stacked: a batch's simulations × K paths as one vmapped fit (each simulation's paths
    started at its screened starts), stacked per simulation: weights on the simplex, L draws,
    and a second batch reuses the compiled chunk, posterior and screen."""
    des = sbc.design("ssgp_svi", "pendulum", rows=10,
                     settings=("m=2", "svi.steps=50", "svi.chunk=25", "svi.min_steps=0",
                               "svi.paths=3"))
    truth = sbc.simulate(des, 4, seed=6)
    prog = sbc.METHODS["vi_stacked"].program(des, 29)  # enough draws for each path's PSIS-LOO
    first = prog(truth["y"][:2], sbc.sim_keys(6, np.arange(2)))
    prog(truth["y"][2:], sbc.sim_keys(6, np.arange(2, 4)))
    assert prog.compiled() == {"chunk": 1, "posterior": 1, "screen": 1}
    assert first.weights.shape == (2, 3) and np.all(first.weights >= 0)
    np.testing.assert_allclose(first.weights.sum(axis=1), 1.0, rtol=1e-6)
    assert first.sites["frequencies"].shape == (2, 29, 2, 9) and not first.failed.any()
    assert np.all(np.isfinite(first.sites["noise"]))


def test_the_small_size_stacks_at_most_two_svi_paths_unless_the_settings_name_them():
    """ssgp_svi's 8 paths become SMALL_PATHS (2) at the small defaults; an explicit svi.paths is kept
    (larger or smaller), also a comparison's own on top of the cap; entries with fewer paths, and
    NCVMP's paths, are left as they are."""
    def paths(name, settings=sbc.SMALL_SETTINGS):
        return sbc.design(name, rows=10, settings=settings).entry.config["inference"]["svi"]["paths"]

    assert sbc.SMALL_PATHS == 2 and paths("ssgp_svi") == 2
    assert paths("ssgp_svi", sbc.SMALL_SETTINGS + ("svi.paths=8",)) == 8
    assert paths("ssgp_svi", sbc.SMALL_SETTINGS + ("inference.svi.paths=3",)) == 3
    assert paths("ssgp_svi", sbc.SMALL_SETTINGS + ("paths=8",)) == 8  # the leaf key alone
    assert paths("svbssgp") == 1
    # a comparison's SBC entry: the cap, then its own overrides on top; design keeps it as given
    from ssgp_ppl.entry import load_entry

    small = sbc.small(load_entry("ssgp_svi"))
    assert small.config["inference"]["svi"]["paths"] == 2
    assert paths(small.with_overrides(["svi.paths=8"]), ()) == 8
    stacked = sbc.design("tan_va_stacked", rows=10).entry.config["inference"]["ncvmp"]["paths"]
    assert stacked == 10


def test_resume_after_an_interruption_gives_the_uninterrupted_result(tmp_path):
    kw = dict(sims=4, methods_=["ncvmp"], rows=12, draws=19, settings=TINY, batch=2,
              progress=False, seed=5)
    whole = sbc.run("tan_va", "pendulum", out=None, **kw)

    def stop(b):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sbc.run("tan_va", "pendulum", out=tmp_path / "b", callback=stop, **kw)
    assert (tmp_path / "b" / sbc.CHECKPOINT).exists()
    with pytest.raises(Exception, match="--resume"):
        sbc.run("tan_va", "pendulum", out=tmp_path / "b", **kw)
    resumed = sbc.run("tan_va", "pendulum", out=tmp_path / "b", resume=True, **kw)
    np.testing.assert_array_equal(np.asarray(whole.tree["ranks"]["rank"]),
                                  np.asarray(resumed.tree["ranks"]["rank"]))
    assert resumed.done == 4
    assert [r["verdict"] for r in whole.summary] == [r["verdict"] for r in resumed.summary]
    report = tmp_path / "report.html"  # compare --sbc: the section goes into the report
    report.write_text("<html><body><h1>comparison</h1></body></html>")
    sbc.add_to_report(report, whole)
    text = report.read_text()
    assert text.index("<h1>comparison") < text.index("Simulation-based calibration") < \
        text.index("data:image/png;base64,") < text.index("</body>")
    quantities = list(whole.tree["ranks"]["quantity"].values)
    assert "4 of 4 simulations" in text and text.count("<tr>") == 1 + len(quantities)
    ok = sum(r["calibrated"] for r in whole.summary)
    assert f"<b>ncvmp</b>: {ok} of {len(quantities)} quantities calibrated" in text
    assert text.count("(χ² p ") == 0  # under 10 simulations there is no χ² test
    shapes = [r["shape"] for r in whole.summary]
    assert sum(text.count(f">{shape}</td>") for shape in set(shapes)) == len(shapes)
    assert "With 4 simulations a reading catches gross miscalibration only" in text
    back = sbc.load(tmp_path / "b")  # what a comparison reads back
    assert [r["verdict"] for r in back.summary] == [r["verdict"] for r in resumed.summary]
    assert back.done == back.sims == 4
    with pytest.raises(Exception, match="another SBC run"):
        sbc.run("tan_va", "pendulum", out=tmp_path / "b", resume=True, **{**kw, "seed": 6})


def test_cli_bad_input_is_one_line_and_a_tiny_run_writes_its_datatree(tmp_path, capsys):
    assert main(["sbc", "ssgp", "--sims", "2", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ssgp-ppl: error:") and "latent" in err[0]
    assert main(["sbc", "tan_va", "--sims", "2", "--methods", "vi", "--out",
                 str(tmp_path / "y")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not apply" in err[0]
    out = tmp_path / "z"
    args = ["sbc", "tan_va", "--sims", "3", "--methods", "ncvmp", "--rows", "12", "--draws",
            "19", "--batch", "2", "--seed", "5", "--no-progress", "--out", str(out)]
    for s in TINY:
        args += ["--set", s]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "ncvmp:" in printed and "log_likelihood" in printed
    dt = xr.open_datatree(out / sbc.TREE)
    r = np.asarray(dt["ranks"]["rank"])
    assert r.shape[:2] == (1, 3) and np.all((r >= 0) & (r <= 19))
    assert dt.attrs["entry"] == "tan_va" and dt.attrs["sims_done"] == 3
    assert (out / sbc.FIGURE).stat().st_size > 1000


def test_cli_stopped_by_sigterm_keeps_its_batches_and_says_how_to_resume(tmp_path):
    """``ssgp-ppl sbc`` under SIGTERM (a scheduler's stop) ends as Ctrl-C ends it: the finished
    batches kept, one line saying where and how to continue, status 128 + 15."""
    out = tmp_path / "run"
    args = [sys.executable, "-m", "ssgp_ppl.cli", "sbc", "tan_va", "--sims", "1000", "--methods",
            "ncvmp", "--rows", "12", "--draws", "9", "--batch", "1", "--no-progress", "--out",
            str(out)]
    for s in TINY:
        args += ["--set", s]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "JAX_PLATFORMS": "cpu"})
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None and not (
                out / sbc.CHECKPOINT).is_file():
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    lines = [ln for ln in err.splitlines() if ln.startswith("ssgp-ppl:")]
    assert lines[-1].startswith("ssgp-ppl: stopped by SIGTERM") and "--resume" in lines[-1]
    with np.load(out / sbc.CHECKPOINT) as z:
        assert 1 <= z["done"].sum() < 1000  # what --resume continues from (tested above)


CHILD_COMPARE_SBC = """
import json, sys
import numpy as np
import ssgp_ppl

out = sys.argv[1]
tiny = ["m=2", "smc.particles=100", "smc.mcmc_steps=2", "smc.integration_steps=4",
        "ncvmp.restarts=1", "ncvmp.max_iter=30"]
cmp = ssgp_ppl.compare("tan_va", data="pendulum", out=out, small=True, steps=30, samples=30,
                       chains=2, settings=tiny, sbc=3, seed=2, progress=False)
res = cmp.sbc
print(json.dumps({"done": res.done, "sims": res.sims, "report": str(cmp.report),
                  "rank": np.asarray(res.tree["ranks"]["rank"]).tolist()}))
"""


def test_compare_with_sbc_exposes_the_result_and_writes_its_section(tmp_path):
    """ssgp_ppl.compare(sbc=N) at tiny size: SBC on the comparison's training inputs (its first
    80 rows at small size, 40 of them the design) with the comparison's overrides on top of SBC's
    small defaults, its section once in the report, and the result on the Comparison, also when
    read back from the folder.

    The comparison runs in a process of its own, as a user's would (a fresh process also
    starts with none of the worker's memory maps, see resources.release_compiled)."""
    import json
    import subprocess
    import sys

    import ssgp_ppl
    from ssgp_ppl.errors import SSGPError

    out = tmp_path / "c"
    proc = subprocess.run([sys.executable, "-c", CHILD_COMPARE_SBC, str(out)],
                          capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["done"] == got["sims"] == 3
    back = ssgp_ppl.load_comparison(out)
    t = back.sbc.tree
    assert (t.attrs["entry"], t.attrs["data"], t.attrs["m"], t.attrs["rows"]) == (
        "tan_va", "pendulum", 2, 40)
    assert list(t["ranks"]["method"].values) == ["ncvmp", "reference"]
    r = np.asarray(t["ranks"]["rank"])
    assert r.shape == (2, 3, len(t["ranks"]["quantity"])) and np.all((r >= 0) & (r <= sbc.DRAWS))
    np.testing.assert_array_equal(np.asarray(got["rank"]), r)  # the result on the Comparison
    text = back.report.read_text()
    assert text.count("<h2>Simulation-based calibration</h2>") == 1
    assert "3 of 3 simulations on 40 design points of pendulum" in text
    assert (out / sbc.COMPARISON_FOLDER / sbc.FIGURE).is_file()
    with pytest.raises(SSGPError, match="sbc must be a positive integer"):
        ssgp_ppl.compare("tan_va", data="pendulum", out=tmp_path / "d", sbc=0)
