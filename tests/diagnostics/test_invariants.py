"""Invariant quantities (kernel, frequency spread) against independent computations, their
invariance under the SSGP symmetries, and the VI-vs-reference distances against analytic values."""

import numpy as np
import pytest

from ssgp_ppl.diagnostics import invariants
from ssgp_ppl.model import spectral


def _draw(seed=0, m=7, d=3):
    rng = np.random.default_rng(seed)
    return rng.normal(0.0, 0.4, (m, d)), rng.normal(size=2 * m)


def test_kernel_is_the_feature_inner_product():
    """k(τ e_j) = σ²/m φ(0)ᵀφ(τ e_j), computed from the feature map (float64)."""
    freq, _ = _draw()
    signal = 1.7
    k = invariants.kernel_at_lags(freq[None], np.array([signal]))[0]  # (d, L)
    for j in range(freq.shape[1]):
        x = np.zeros((len(invariants.LAGS), freq.shape[1]))
        x[:, j] = invariants.LAGS
        phi = np.asarray(spectral.features(x, freq), np.float64)
        want = signal**2 / freq.shape[0] * phi @ phi[0]
        np.testing.assert_allclose(k[j], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(k[:, 0], signal**2)  # k(0) = σ²


def test_invariants_are_fixed_by_the_symmetries():
    """Permuting frequencies with their (cos, sin) pairs and flipping a frequency's sign with its
    sine amplitude leaves f, the kernel and the frequency spread unchanged."""
    freq, s = _draw(1)
    m = freq.shape[0]
    x = np.random.default_rng(2).normal(size=(11, freq.shape[1]))
    perm = np.random.default_rng(3).permutation(m)
    flip = np.where(np.arange(m) % 2 == 0, -1.0, 1.0)
    freq2 = (freq * flip[:, None])[perm]
    pairs = s.reshape(m, 2) * np.stack([np.ones(m), flip], axis=1)
    s2 = pairs[perm].reshape(-1)
    f1 = np.asarray(spectral.features(x, freq) @ s)
    f2 = np.asarray(spectral.features(x, freq2) @ s2)
    np.testing.assert_allclose(f1, f2, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(invariants.kernel_at_lags(freq2[None], np.ones(1)),
                               invariants.kernel_at_lags(freq[None], np.ones(1)), atol=1e-12)
    np.testing.assert_allclose(invariants.frequency_spread(freq2), invariants.frequency_spread(freq))
    # while the frequencies themselves changed
    assert np.abs(freq2 - freq).max() > 0.1


def test_frequency_spread_is_inverse_lengthscale_for_se_draws():
    """r ~ N(0, (2πℓ)⁻² I) (SE spectral density): 2π rms r_j → 1/ℓ_j."""
    ell = np.array([0.5, 2.0])
    r = np.random.default_rng(0).normal(size=(200_000, 2)) / (2 * np.pi * ell)
    np.testing.assert_allclose(invariants.frequency_spread(r), 1 / ell, rtol=0.01)


def test_posterior_comparison_gaussians():
    """q = N(0, 0.5²) vs p = N(0, 1): KL(q‖p) = log 2 + 1/8 − 1/2, W1 = 0.5 √(2/π), sd ratio 1/2;
    a quantity constant under q (a type-II estimate) is left out."""
    rng = np.random.default_rng(0)
    q = invariants.as_dataset({"noise": np.full(2000, 0.3), "f_test": 0.5 * rng.normal(size=(2000, 4))}, 1)
    p = invariants.as_dataset({"noise": rng.gamma(5, size=2000), "f_test": rng.normal(size=(2000, 4))}, 4)
    out = invariants.posterior_comparison(q, p)
    assert "noise" not in out
    f = out["f_test"]
    assert f["components"] == 4
    assert f["kl"] == pytest.approx(np.log(2) + 1 / 8 - 1 / 2, abs=0.08)
    assert f["w1"] == pytest.approx(0.5 * np.sqrt(2 / np.pi), abs=0.05)
    assert f["std_ratio"] == pytest.approx(0.5, abs=0.04)
    assert f["w1_scaled"] == pytest.approx(f["w1"], rel=0.1)


def test_count_modes():
    rng = np.random.default_rng(0)
    same = rng.normal(size=(4 * 400,))
    assert invariants.count_modes(invariants.as_dataset({"noise": same}, 4))["modes"] == 1
    shifted = same.reshape(4, 400) + np.array([0.0, 0.0, 5.0, 5.0])[:, None]
    out = invariants.count_modes(invariants.as_dataset({"noise": shifted.reshape(-1)}, 4))
    assert out == {"modes": 2, "chain_mode": [0, 0, 1, 1]}
    # a mode visible only in the log density
    lp = np.where(np.arange(4)[:, None] == 3, 10.0, 0.0) + rng.normal(size=(4, 400))
    assert invariants.count_modes(invariants.as_dataset({"noise": same}, 4),
                                  extra={"lp": lp})["chain_mode"] == [0, 0, 0, 1]


def _pairs(chains: int, draws: int, width: int):
    """(rng, (approx, reference) component pairs): N(0, 1) draws in ``chains`` chains against
    Gamma(2) draws in 4 chains of 150, ``width`` components each."""
    rng = np.random.default_rng(chains)
    a = invariants.as_dataset({"f_test": rng.normal(size=(chains * draws, width))}, chains)
    r = invariants.as_dataset({"f_test": rng.gamma(2.0, size=(4 * 150, width))}, 4)
    return rng, list(zip(invariants._components(a["f_test"]), invariants._components(r["f_test"]),
                         strict=True))


@pytest.mark.parametrize(("chains", "draws", "num_samples"), [(1, 2000, 500), (4, 100, 400),
                                                              (2, 60, 60), (3, 50, 40)])
def test_marginal_w1_is_arviz_stats_wasserstein(chains, draws, num_samples):
    """The distances posterior_comparison reports are arviz_stats.wasserstein's (joint=False,
    the same seeded subsample) to the last bit, on (chain, draw) components of unequal sizes."""
    from arviz_stats import wasserstein

    _, pairs = _pairs(chains, draws, 6)
    for seed in (0, 7):
        want = [wasserstein(x, y, joint=False, num_samples=num_samples, random_seed=seed,
                            round_to="none") for x, y in pairs]
        got = invariants.marginal_w1(pairs, num_samples=num_samples, seed=seed)
        assert got.tolist() == want
        assert len(set(want)) == len(want)  # six different distances


@pytest.mark.parametrize(("chains", "draws", "num_samples"), [(1, 2000, 500), (4, 100, 400),
                                                              (3, 50, 40)])
def test_marginal_kl_is_arviz_stats_kl_divergence(chains, draws, num_samples):
    """The KL divergences posterior_comparison reports are arviz_stats.kl_divergence's (the same
    seeded subsample and jitter) on (chain, draw) components of unequal sizes, and they see a
    real difference: a shifted reference gives a larger divergence than the approximation's own
    law."""
    from arviz_stats import kl_divergence

    rng, pairs = _pairs(chains, draws, 4)
    a = [x for x, _ in pairs]
    for seed in (0, 7):
        want = [kl_divergence(x, y, num_samples=num_samples, random_seed=seed, round_to="none")
                for x, y in pairs]
        got = invariants.marginal_kl(pairs, num_samples=num_samples, seed=seed)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
        assert len(set(want)) == len(want) and min(want) > 0.1
    same = invariants.as_dataset({"f_test": rng.normal(size=(4 * 150, 4))}, 4)
    near = invariants.marginal_kl(list(zip(a, invariants._components(same["f_test"]),
                                           strict=True)), num_samples=num_samples, seed=0)
    assert near.max() < min(want)
