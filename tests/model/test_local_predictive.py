"""Tests for the γ-family local test conditional of sVBSSGP (Hoang et al. 2017 Proposition 1, Remark 1, §4.2):
γ = 0 on one partition is SSGP's predictive (Lázaro-Gredilla et al. 2010 eq. 7), γ = 1 is VSSGP's
degenerate conditional, and general γ with k-means partitions against a dense float64 reference;
the LocalData plumbing, per-draw predictives and the catalog's γ key."""

import jax.numpy as jnp
import numpy as np
import pytest

from ssgp_ppl.data.datasets import Scaler
from ssgp_ppl.entry import load_entry
from ssgp_ppl.errors import SSGPError
from ssgp_ppl.inference.partitions import kmeans_partitions
from ssgp_ppl.model import likelihoods
from ssgp_ppl.model import predictive as P
from ssgp_ppl.model.predictive import (
    degenerate_predictive,
    local_conditional,
    local_data,
    marginal_predictive,
    predict_draws,
)

M, SIGNAL, NOISE = 5, 1.3, 0.4
N_TEST = 60


def _freq(m, d, lam=0.5, seed=0):
    """Frequencies r = s λ / 2π from standard normal points (numpy float64)."""
    return np.random.default_rng(seed).standard_normal((m, d)) * lam / (2 * np.pi)


def _phi(x, freq):
    """Dense float64 design matrix (n, 2m), cos/sin interleaved (Hoang et al. 2017, eq. 2)."""
    proj = 2 * np.pi * np.asarray(x, np.float64) @ np.asarray(freq, np.float64).T
    out = np.empty((proj.shape[0], 2 * proj.shape[1]))
    out[:, 0::2], out[:, 1::2] = np.cos(proj), np.sin(proj)
    return out


def _reference(x, y, x_test, parts, freq, s, signal, noise, gamma):
    """Prop. 1 per test point with numpy float64: k = nearest centre (brute force),
    Γ_k = Φ_kᵀΦ_k + (mσ_n²/σ_s²) I, μ = γφᵀs + (1−γ)φᵀΓ_k⁻¹Φ_kᵀy_k, σ² = (1−γ²)σ_n²φᵀΓ_k⁻¹φ."""
    m = freq.shape[0]
    nearest = ((x_test[:, None, :] - parts.centres[None]) ** 2).sum(-1).argmin(1)
    mean, var = np.empty(len(x_test)), np.empty(len(x_test))
    for i, (xs, k) in enumerate(zip(x_test, nearest, strict=True)):
        rows = parts.blocks[k][parts.mask[k]]
        phi_k = _phi(x[rows], freq)
        gam = phi_k.T @ phi_k + m * noise**2 / signal**2 * np.eye(2 * m)
        phi = _phi(xs[None], freq)[0]
        mean[i] = gamma * phi @ s + (1 - gamma) * phi @ np.linalg.solve(gam, phi_k.T @ y[rows])
        var[i] = (1 - gamma**2) * noise**2 * phi @ np.linalg.solve(gam, phi)
    return mean, var


def _local(x, y, x_test, parts, freq, s, gamma, **kw):
    ld = local_data(parts, x_test, gamma)
    return local_conditional(jnp.asarray(x_test), ld.test_block, jnp.asarray(x), jnp.asarray(y),
                             ld.blocks, ld.mask, jnp.asarray(freq), None if s is None else jnp.asarray(s),
                             SIGNAL, NOISE, ld.gamma, **kw)


@pytest.fixture(scope="module")
def problem(pendulum):
    """Pendulum training rows, test inputs, 6 k-means partitions, frequencies θ and a nuisance s."""
    x, y = np.asarray(pendulum.x_train), np.asarray(pendulum.y_train)
    x_test = np.asarray(pendulum.x_test[:N_TEST])
    freq = _freq(M, x.shape[1], seed=1)
    s = np.random.default_rng(2).normal(0, SIGNAL / np.sqrt(M), 2 * M)
    return x, y, x_test, kmeans_partitions(x, 6, seed=0), freq, s


# --------------------------------------------------------------------------- special cases of γ


@pytest.mark.parametrize("with_s", [False, True], ids=["no_s", "with_s"])
def test_gamma0_single_partition_is_ssgp_predictive(x64, problem, with_s):
    """γ = 0 with all rows in one partition is SSGP's predictive given θ (Remark 1): s plays no role."""
    x, y, x_test, _, freq, s = problem
    one = kmeans_partitions(x, 1)
    mean, var = _local(x, y, x_test, one, freq, s if with_s else None, 0.0)
    want_mean, want_var = marginal_predictive(jnp.asarray(x), jnp.asarray(y), jnp.asarray(x_test),
                                              jnp.asarray(freq), SIGNAL, NOISE)
    np.testing.assert_allclose(mean, want_mean, rtol=1e-9, atol=1e-9 * np.abs(want_mean).max())
    np.testing.assert_allclose(var, want_var, rtol=1e-9)
    assert np.all(np.asarray(var) > 0)


def test_gamma1_is_degenerate_predictive(x64, problem):
    """γ = 1: μ = φᵀs and σ² = 0 whatever the local data (VSSGP, Remark 1)."""
    x, y, x_test, parts, freq, s = problem
    mean, var = _local(x, y, x_test, parts, freq, s, 1.0)
    want_mean, want_var = degenerate_predictive(jnp.asarray(x_test), jnp.asarray(freq), jnp.asarray(s))
    np.testing.assert_allclose(mean, want_mean, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(var, want_var)
    np.testing.assert_allclose(mean, _phi(x_test, freq) @ s, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(var, np.zeros(N_TEST))


@pytest.mark.parametrize("gamma", [-0.5, 0.3], ids=["gamma-0.5", "gamma0.3"])
def test_local_conditional_matches_dense_reference(precision, problem, gamma):
    x, y, x_test, parts, freq, s = problem
    assert parts.count >= 5 and len(np.unique(parts.assign(x_test))) >= 3  # several partitions used
    want_mean, want_var = _reference(x, y, x_test, parts, freq, s, SIGNAL, NOISE, gamma)
    mean, var = _local(x, y, x_test, parts, freq, s, gamma)
    assert mean.dtype == precision and var.dtype == precision
    tol = {np.float32: 1e-4, np.float64: 1e-8}[precision]
    np.testing.assert_allclose(mean, want_mean, rtol=tol, atol=tol * np.abs(want_mean).max())
    np.testing.assert_allclose(var, want_var, rtol=tol)


def test_local_conditional_differs_from_global_data(x64, problem):
    """The local rule really uses only X_k: with p > 1 it differs from the all-data γ = 0 predictive."""
    x, y, x_test, parts, freq, _ = problem
    mean, var = _local(x, y, x_test, parts, freq, None, 0.0)
    glob_mean, glob_var = marginal_predictive(jnp.asarray(x), jnp.asarray(y), jnp.asarray(x_test),
                                              jnp.asarray(freq), SIGNAL, NOISE)
    assert np.abs(np.asarray(mean) - np.asarray(glob_mean)).max() > 1e-2
    assert np.all(np.asarray(var) > np.asarray(glob_var))  # fewer data, larger variance


def test_block_and_test_batching_do_not_change_results(x64, problem):
    x, y, x_test, parts, freq, s = problem
    full = _local(x, y, x_test, parts, freq, s, 0.3)
    small = _local(x, y, x_test, parts, freq, s, 0.3, block_batch=2, test_batch=7)
    for a, b in zip(full, small, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


# --------------------------------------------------------------------------- LocalData


def test_local_data_keeps_only_used_blocks(problem):
    x, _, x_test, parts, _, _ = problem
    # test inputs at the centres of partitions 3, 1, 3: only blocks 1 and 3 are kept, in order
    ld = local_data(parts, parts.centres[[3, 1, 3]], 0.25)
    np.testing.assert_array_equal(ld.blocks, parts.blocks[[1, 3]])
    np.testing.assert_array_equal(ld.mask, parts.mask[[1, 3]])
    np.testing.assert_array_equal(ld.test_block, [1, 0, 1])
    assert ld.test_block.dtype == jnp.int32 and ld.gamma == 0.25 and isinstance(ld.gamma, float)
    # general test inputs: kept block of each point = block of its nearest centre
    ld = local_data(parts, x_test, 0.0)
    nearest = ((x_test[:, None, :] - parts.centres[None]) ** 2).sum(-1).argmin(1)
    np.testing.assert_array_equal(np.asarray(ld.blocks)[np.asarray(ld.test_block)], parts.blocks[nearest])
    np.testing.assert_array_equal(np.asarray(ld.mask)[np.asarray(ld.test_block)], parts.mask[nearest])
    assert ld.blocks.shape[0] == len(np.unique(nearest))


@pytest.mark.parametrize("gamma", [-1.5, 1.5, 1.0001, float("nan")], ids=["-1.5", "1.5", "1.0001", "nan"])
def test_local_data_rejects_gamma_outside_unit_interval(problem, gamma):
    _, _, x_test, parts, _, _ = problem
    with pytest.raises(SSGPError, match=r"gamma must be in \[-1, 1\]"):
        local_data(parts, x_test, gamma)


@pytest.mark.parametrize("gamma", [-1.0, 1.0], ids=["-1", "1"])
def test_local_data_accepts_gamma_bounds(problem, gamma):
    _, _, x_test, parts, _, _ = problem
    assert local_data(parts, x_test, gamma).gamma == gamma


# --------------------------------------------------------------------------- per-draw predictives


def test_predict_draws_local_stacks_per_draw_conditionals(x64, problem):
    x, y, x_test, parts, _, _ = problem
    n_draws, d = 4, x.shape[1]
    rng = np.random.default_rng(3)
    sites = {
        "frequencies": np.stack([_freq(M, d, seed=10 + i) for i in range(n_draws)]),
        "nuisance": rng.normal(0, 0.5, (n_draws, 2 * M)),
        "signal": rng.uniform(0.8, 1.5, n_draws),
        "noise": rng.uniform(0.2, 0.6, n_draws),
        "lengthscales": rng.uniform(0.5, 2.0, (n_draws, d)),  # ignored by the rule
    }
    sites = {k: jnp.asarray(v) for k, v in sites.items()}
    ld = local_data(parts, x_test, -0.5)
    args = (jnp.asarray(x), jnp.asarray(y), jnp.asarray(x_test))
    mean, var = predict_draws("local", sites, *args, local=ld)
    assert mean.shape == var.shape == (n_draws, N_TEST)
    for i in range(n_draws):
        want = local_conditional(args[2], ld.test_block, args[0], args[1], ld.blocks, ld.mask,
                                 sites["frequencies"][i], sites["nuisance"][i], sites["signal"][i],
                                 sites["noise"][i], -0.5)
        np.testing.assert_allclose(mean[i], want[0], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(var[i], want[1], rtol=1e-12, atol=1e-14)
    # and each draw agrees with the dense reference with that draw's hyperparameters
    draw = {k: np.asarray(v[2]) for k, v in sites.items()}
    ref = _reference(x, y, x_test, parts, draw["frequencies"], draw["nuisance"], float(draw["signal"]),
                     float(draw["noise"]), -0.5)
    np.testing.assert_allclose(mean[2], ref[0], rtol=1e-8, atol=1e-8 * np.abs(ref[0]).max())
    np.testing.assert_allclose(var[2], ref[1], rtol=1e-8)


def test_predict_draws_local_gamma0_one_partition_is_marginal_rule(x64, problem):
    x, y, x_test, _, freq, _ = problem
    sites = {"frequencies": jnp.asarray(np.stack([freq, _freq(M, x.shape[1], seed=7)])),
             "signal": jnp.asarray([1.3, 0.9]), "noise": jnp.asarray([0.4, 0.25])}  # no s needed at γ = 0
    args = (jnp.asarray(x), jnp.asarray(y), jnp.asarray(x_test))
    got = predict_draws("local", sites, *args, local=local_data(kmeans_partitions(x, 1), x_test, 0.0))
    want = predict_draws("marginal", sites, *args)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-9 * float(np.abs(w).max()))


def test_predict_draws_local_errors(problem):
    x, y, x_test, parts, freq, _ = problem
    sites = {"frequencies": jnp.asarray(freq[None]), "signal": jnp.ones(1), "noise": jnp.ones(1)}
    with pytest.raises(SSGPError, match="the local rule needs partitions"):
        predict_draws("local", sites, x, y, x_test)
    with pytest.raises(SSGPError, match="gamma != 0 needs sampled nuisance"):
        predict_draws("local", sites, x, y, x_test, local=local_data(parts, x_test, 0.3))


# --------------------------------------------------------------------------- predictions in chunks


def _draw_sites(count, d, *, seed=0, tril=False):
    """``count`` draws of the sites (frequencies, signal, noise, nuisance, optionally its tril)."""
    rng = np.random.default_rng(seed)
    sites = {"frequencies": np.stack([_freq(M, d, seed=seed + 10 + i) for i in range(count)]),
             "signal": rng.uniform(0.8, 1.5, count), "noise": rng.uniform(0.2, 0.6, count),
             "nuisance": rng.normal(0, 0.5, (count, 2 * M))}
    if tril:
        sites["nuisance_tril"] = np.tril(rng.normal(0, 0.1, (count, 2 * M, 2 * M)))
    return {k: jnp.asarray(v) for k, v in sites.items()}


def _rules(problem):
    """A SiteRule of each kind, and the likelihood each is scored under."""
    x, y, _, parts, _, _ = problem
    d = x.shape[1]
    return {
        "marginal": (P.SiteRule("marginal", _draw_sites(9, d), x, y), likelihoods.GAUSSIAN),
        "degenerate": (P.SiteRule("degenerate", _draw_sites(9, d, seed=1)), likelihoods.GAUSSIAN),
        "degenerate_tril": (P.SiteRule("degenerate", _draw_sites(9, d, seed=2, tril=True)),
                            likelihoods.GAUSSIAN),
        "local": (P.SiteRule("local", _draw_sites(9, d, seed=3), x, y, 0.4, parts),
                  likelihoods.GAUSSIAN),
        "probit": (P.SiteRule("degenerate", {k: v for k, v in _draw_sites(9, d, seed=4).items()
                                             if k != "noise"}), likelihoods.PROBIT),
        "poisson": (P.SiteRule("degenerate", {k: v for k, v in _draw_sites(9, d, seed=5).items()
                                              if k != "noise"}), likelihoods.POISSON),
    }


@pytest.mark.parametrize("kind", ["marginal", "degenerate", "degenerate_tril", "local", "probit",
                                  "poisson"])
def test_prediction_in_tiny_chunks_equals_one_shot(x64, problem, monkeypatch, kind):
    """A budget of one byte forces one draw, one row and one feature row at a time: the same
    moments, per-draw arrays, y* draws and intervals as all rows at once."""
    rule, lik = _rules(problem)[kind]
    x_test = problem[2][:23]
    scaler = Scaler(np.asarray(0.5), np.asarray(2.0))
    whole = P.prediction(rule, lik, x_test, scaler, seed=3)
    assert P.chunk_rows(9, 23) == 23 and P.chunk_rows(23, 9) == 9  # one chunk by default
    monkeypatch.setattr(P, "PREDICT_BUDGET", 1)
    assert P.chunk_rows(9, 23) == P.chunk_rows(23, 9) == P.feature_rows(2 * M) == 1
    chunked = P.prediction(rule, lik, x_test, scaler, seed=3)
    for name in ("mean", "var", "mean_f", "var_f", "var_y", "draws"):
        got, want = getattr(chunked, name), getattr(whole, name)
        assert got.shape == want.shape, name
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12, err_msg=name)
    for got, want in zip(chunked.interval(0.8), whole.interval(0.8), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def _spy(monkeypatch):
    """Record the (draws, rows) shape of each call of predict_draws (the rule on a batch of
    draws) and of y_moments (the y* moments of a chunk of rows) in ``P``."""
    calls = {"predict_draws": [], "y_moments": []}
    draws, moments = P.predict_draws, P.y_moments

    def predict_draws(*args, **kwargs):
        out = draws(*args, **kwargs)
        calls["predict_draws"].append(np.shape(out[0]))
        return out

    def y_moments(lik, mean_f, *args, **kwargs):
        calls["y_moments"].append(np.shape(mean_f))
        return moments(lik, mean_f, *args, **kwargs)

    monkeypatch.setattr(P, "predict_draws", predict_draws)
    monkeypatch.setattr(P, "y_moments", y_moments)
    return calls


def _assert_same_prediction(got, want):
    for name in ("mean", "var", "mean_f", "var_f", "var_y", "draws"):
        assert getattr(got, name).shape == getattr(want, name).shape, name
        np.testing.assert_allclose(getattr(got, name), getattr(want, name), rtol=1e-10, atol=1e-12,
                                   err_msg=name)


def test_stacked_rule_cycles_each_paths_draws(x64, problem, monkeypatch):
    """A mixture of rules repeats path k's draws to its count (draw j mod S_k), as in one
    concatenation, and predicts the same one draw and one row at a time."""
    x, _, x_test, _, _, _ = problem
    a = P.SiteRule("degenerate", _draw_sites(3, x.shape[1], seed=6))
    b = P.SiteRule("degenerate", _draw_sites(2, x.shape[1], seed=7))
    stacked = P.StackedRule((a, b), (7, 4))
    mom = stacked.moments(x_test)
    ma, mb = a.moments(x_test), b.moments(x_test)
    for field in ("mean_f", "var_f", "noise"):
        want = np.concatenate([getattr(ma, field)[np.resize(np.arange(3), 7)],
                               getattr(mb, field)[np.resize(np.arange(2), 4)]])
        np.testing.assert_array_equal(getattr(mom, field), want)
    scaler = Scaler(np.asarray(0.5), np.asarray(2.0))
    calls = _spy(monkeypatch)
    whole = P.prediction(stacked, likelihoods.GAUSSIAN, x_test, scaler, seed=3)
    assert calls == {"predict_draws": [(3, N_TEST), (2, N_TEST)], "y_moments": [(11, N_TEST)]}
    calls["predict_draws"].clear(), calls["y_moments"].clear()
    monkeypatch.setattr(P, "PREDICT_BUDGET", 1)
    chunked = P.prediction(stacked, likelihoods.GAUSSIAN, x_test, scaler, seed=3)
    assert calls == {"predict_draws": [(1, N_TEST)] * 5, "y_moments": [(11, 1)] * N_TEST}
    _assert_same_prediction(chunked, whole)


def test_chunk_sizes_keep_the_working_set_within_the_budget():
    """1,000 mixture draws and 10⁶ rows: rows are taken in chunks whose per-draw arrays fit the
    budget (the one-shot arrays would take 8 GB each)."""
    draws, rows = 1000, 10**6
    chunk = P.chunk_rows(draws, rows)
    assert 1 <= chunk < rows
    assert P.WORK_ARRAYS * draws * chunk * 8 <= P.PREDICT_BUDGET
    batch = P.chunk_rows(rows, draws)  # draws per call of the rule on all rows
    assert 1 <= batch < draws and P.WORK_ARRAYS * batch * rows * 8 <= P.PREDICT_BUDGET
    two_m = 2 * 500
    assert P.DRAW_BATCH * P.FEATURE_ARRAYS * P.feature_rows(two_m) * two_m * 8 <= P.PREDICT_BUDGET
    assert P.chunk_rows(draws, rows, budget=0) == 1  # at least one row whatever the budget


def test_prediction_calls_the_rule_and_y_moments_on_chunks_within_the_budget(x64, problem,
                                                                            monkeypatch):
    """A 1 MiB budget on 40 draws × 2,000 rows: the rule runs on batches of draws (the device's
    working set, which tracemalloc does not see) and the y* moments on chunks of rows, several
    of each, every one holding WORK_ARRAYS (draws, rows) float64 arrays within the budget; the
    numbers are those of one pass."""
    x, y, _, _, _, _ = problem
    rule = P.SiteRule("marginal", _draw_sites(40, x.shape[1], seed=9), x, y)
    x_test = np.random.default_rng(1).uniform(-2, 2, (2000, x.shape[1]))
    scaler = Scaler(np.asarray(0.5), np.asarray(2.0))
    whole = P.prediction(rule, likelihoods.GAUSSIAN, x_test, scaler, seed=3)
    budget = 2**20
    monkeypatch.setattr(P, "PREDICT_BUDGET", budget)
    calls = _spy(monkeypatch)
    chunked = P.prediction(rule, likelihoods.GAUSSIAN, x_test, scaler, seed=3)
    assert [s for s, _ in calls["predict_draws"]] == [5] * 8  # 40 draws, 5 per call
    assert [r for _, r in calls["y_moments"]] == [273] * 7 + [89]  # 2,000 rows
    for name, shapes in calls.items():
        assert all(P.WORK_ARRAYS * s * r * 8 <= budget for s, r in shapes), (name, shapes)
    _assert_same_prediction(chunked, whole)


def test_prediction_peak_allocation_is_its_arrays_plus_the_budget(x64, problem, monkeypatch):
    """Peak host (numpy) allocation of a prediction of 200 draws × 20,000 rows (32 MB per
    per-draw array) beyond the arrays it returns stays within a 4 MB budget and small change
    (the device's buffers: the test above)."""
    import tracemalloc

    x, y, _, _, _, _ = problem
    rule = P.SiteRule("marginal", _draw_sites(200, x.shape[1], seed=8), x, y)
    x_test = np.random.default_rng(0).uniform(-2, 2, (20_000, x.shape[1]))
    budget = 4 * 2**20
    monkeypatch.setattr(P, "PREDICT_BUDGET", budget, raising=False)
    P.prediction(rule, likelihoods.GAUSSIAN, x_test[:10], Scaler(np.zeros(()), np.ones(())))
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        pred = P.prediction(rule, likelihoods.GAUSSIAN, x_test, Scaler(np.zeros(()), np.ones(())))
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    held = sum(np.asarray(getattr(pred, k)).nbytes
               for k in ("mean", "var", "mean_f", "var_f", "var_y", "draws"))
    assert held >= 4 * 200 * 20_000 * 8
    assert peak - held <= 2 * budget + 2**20, (peak - held) / 2**20


# --------------------------------------------------------------------------- catalog


@pytest.mark.parametrize("value", ["1.5", "-1.01"])
def test_catalog_rejects_gamma_outside_unit_interval(value):
    with pytest.raises(SSGPError, match="predictive.gamma"):
        load_entry("svbssgp").with_overrides([f"gamma={value}"])


def test_catalog_short_keys_resolve_to_predictive():
    entry = load_entry("svbssgp")
    assert entry.config["predictive"]["rule"] == "local"
    over = entry.with_overrides(["gamma=0.3", "samples=5"])
    assert over.config["predictive"]["gamma"] == 0.3
    assert over.config["predictive"]["samples"] == 5
    # the other 'samples' key (NUTS draws) is untouched
    assert over.config["inference"]["nuts"]["samples"] == entry.config["inference"]["nuts"]["samples"] == 500
    assert entry.config["predictive"]["samples"] == 20  # the original entry is not mutated
