"""Cholesky with jitter escalation (ssgp_ppl.model.linalg): finite where the plain factor fails, exact
where it does not, differentiable, and a clear error where no jitter helps."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from ssgp_ppl.errors import SSGPError
from ssgp_ppl.model import spectral
from ssgp_ppl.model.linalg import JITTER, check_finite, cholesky, jitter_level
from ssgp_ppl.model.ssgp import marginal_log_likelihood


def _in_float64(fn):
    """``fn(np.float64)`` with JAX in float64; the previous float width is restored."""
    previous = jax.config.read("jax_enable_x64")
    jax.config.update("jax_enable_x64", True)
    try:
        return fn(np.float64)
    finally:
        jax.config.update("jax_enable_x64", previous)

def _gram(n, m, ratio, dtype, duplicate=False, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 2))
    if duplicate:
        x = np.repeat(x[:3], n // 3 + 1, axis=0)[:n]
    freqs = rng.normal(size=(m, 2))
    phi = np.asarray(spectral.features(jnp.asarray(x, dtype), jnp.asarray(freqs, dtype)))
    return phi, phi.T @ phi + ratio * np.eye(2 * m, dtype=phi.dtype)


def test_well_conditioned_matrix_gets_no_jitter(precision):
    _, a = _gram(200, 10, 1.0, precision)
    assert int(jitter_level(jnp.asarray(a))) == 0
    np.testing.assert_allclose(np.asarray(cholesky(jnp.asarray(a))), np.linalg.cholesky(
        a.astype(np.float64)), rtol=2e-4 if precision is np.float32 else 1e-12, atol=1e-5)


def test_rank_deficient_float32_gram_is_factored_with_jitter():
    """Duplicated rows, fewer distinct rows than features, zero noise ratio: the plain float32
    factor is NaN; the escalated one is finite and is the exact factor of A + εI."""
    _, a = _gram(30, 20, 0.0, np.float32, duplicate=True)
    assert not np.isfinite(np.asarray(jnp.linalg.cholesky(jnp.asarray(a)))).all()
    level = int(jitter_level(jnp.asarray(a)))
    assert 0 < level < len(JITTER)
    chol = np.asarray(cholesky(jnp.asarray(a)), np.float64)
    assert np.isfinite(chol).all()
    shifted = a.astype(np.float64) + JITTER[level] * np.mean(np.diag(a)) * np.eye(40)
    np.testing.assert_allclose(chol @ chol.T, shifted, atol=1e-4 * np.abs(shifted).max())


def test_no_jitter_repairs_an_indefinite_matrix_and_the_error_says_so():
    a = np.diag([1.0, 1.0, -1.0]).astype(np.float32)
    chol = cholesky(jnp.asarray(a))
    assert int(jitter_level(jnp.asarray(a))) == len(JITTER) - 1
    with pytest.raises(SSGPError, match=r"predictive: \d of 9 values are NaN/inf .*Cholesky.*--x64"):
        check_finite("predictive", chol)
    check_finite("fine", np.ones(3))  # finite: silent


def test_cholesky_gradients(x64):
    rng = np.random.default_rng(1)
    b = rng.normal(size=(4, 4))
    a0 = jnp.asarray(b @ b.T + 4 * np.eye(4))
    check_grads(lambda a: cholesky(0.5 * (a + a.T)), (a0,), order=1, modes=("rev", "fwd"))
    # the jittered branch too: the jitter is a constant of the step
    sing = jnp.asarray(np.outer(b[0], b[0]))
    g = jax.grad(lambda a: jnp.sum(jnp.log(jnp.diagonal(cholesky(0.5 * (a + a.T))))))(sing)
    assert np.isfinite(np.asarray(g)).all()


def test_marginal_likelihood_with_duplicated_rows_and_tiny_noise_matches_float64():
    """Near-constant targets on 4 distinct inputs repeated 25 times (ΦᵀΦ of rank 4 in 30
    dimensions) in float32: finite, and equal to the float64 value to 1e-3 relative."""
    rng = np.random.default_rng(2)
    x = np.repeat(rng.normal(size=(4, 2)), 25, axis=0)
    y = 1.0 + 1e-4 * rng.normal(size=100)
    freqs = rng.normal(size=(15, 2))
    args = (1.0, 0.05)

    def value(dtype):
        phi = spectral.features(jnp.asarray(x, dtype), jnp.asarray(freqs, dtype))
        return float(marginal_log_likelihood(phi, jnp.asarray(y, dtype), *args))

    ref = _in_float64(value)
    got = value(np.float32)
    assert np.isfinite(got)
    assert abs(got - ref) < 1e-3 * abs(ref)


# --------------------------------------------------------------------------- the fit vs its precision


def _sine(n, noise, seed=0):
    """y = sin 2x + N(0, noise²), x uniform on [−3, 3]: (n, 1) inputs, (n,) targets."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-3, 3, size=(n, 1))
    return x, np.sin(2 * x[:, 0]) + noise * rng.standard_normal(n)


def _ssgp_fit(noise, steps=3000):
    """SSGP (optimized, m = 10) by type-II ML on 2,000 training and 500 test rows of ``_sine``."""
    from ssgp_ppl.data.datasets import from_arrays
    from ssgp_ppl.entry import load_entry
    from ssgp_ppl.pipeline import fit

    data = from_arrays(*_sine(2000, noise), *_sine(500, noise, seed=1))
    entry = load_entry("ssgp").with_overrides(["m=10", f"ml.steps={steps}"])
    return fit(entry, data, "ml", progress=False), data


def test_float32_fit_with_a_tiny_noise_records_and_warns(tmp_path):
    """Noise sd 1e-4 in float32: the learned σ_n settles on float32's resolution floor (0.8e-3,
    float64 learns 1.0e-4) and the 90% intervals cover everything; the fit says so in FitInfo,
    metrics.json, the DataTree's attributes and one PrecisionWarning naming --x64."""
    import ssgp_ppl
    from ssgp_ppl.errors import PrecisionWarning
    from ssgp_ppl.pipeline import metrics_record

    with pytest.warns(PrecisionWarning, match=r"^ssgp:ml: float32 cannot resolve this fit: the "
                      r"learned noise σ_n = \S+ sits at float32's resolution floor \S+ for its signal and "
                      r"features, where the float64 marginal likelihood puts it at .*--x64"):
        post, data = _ssgp_fit(1e-4)
    noise = float(post.sites["noise"].ravel()[0]) * float(data.y_scaler.scale)
    assert noise > 3e-4 and post.metrics["coverage_90"] > 0.99  # what float32 cannot resolve
    assert post.info.noise_floor >= noise and post.info.jitter == 0.0
    rec = metrics_record(post, data)
    assert rec["precision"] == post.info.precision and rec["noise_floor"] == post.info.noise_floor
    assert post.datatree.attrs["precision"] == post.info.precision
    assert post.datatree.attrs["noise_floor"] == pytest.approx(post.info.noise_floor)
    saved = ssgp_ppl.load(post.save(tmp_path / "post.nc"))
    assert saved.info.precision == post.info.precision
    assert saved.datatree.attrs["precision"] == post.info.precision


def test_float64_fit_with_a_tiny_noise_does_not_warn(x64):
    """The same fit in float64 (warnings are errors here): σ_n ≈ 1e-4, far above float64's floor,
    90% coverage near 0.9, nothing recorded."""
    from ssgp_ppl.pipeline import metrics_record

    post, data = _ssgp_fit(1e-4)
    noise = float(post.sites["noise"].ravel()[0]) * float(data.y_scaler.scale)
    assert noise == pytest.approx(1e-4, rel=0.1) and 0.85 < post.metrics["coverage_90"] < 0.95
    assert post.info.precision is None and post.info.noise_floor < 1e-2 * noise
    assert "precision" not in metrics_record(post, data) and "precision" not in post.datatree.attrs


def test_float32_fit_with_a_normal_noise_does_not_warn():
    post, data = _ssgp_fit(0.1)
    assert post.info.precision is None and post.info.noise_floor < 0.5 * 0.1
    assert 0.85 < post.metrics["coverage_90"] < 0.95


def test_resolution_floor_matches_its_float64_definition(precision):
    """σ_floor² = (σ_s²/m) · max(F · eps · λ_max − λ_min, 0) / (1 − F · eps), λ of ΦᵀΦ, eps the
    working precision's: the check's value against numpy's float64 eigenvalues."""
    from ssgp_ppl.model.linalg import FLOOR_FACTOR, resolution

    x, y = _sine(500, 0.01)
    rng = np.random.default_rng(4)
    freqs = np.abs(rng.normal(size=(3, 10, 1))) * 0.5
    signal, noise = np.array([0.8, 1.0, 1.3]), np.array([1e-4, 3e-2, 1e-3])
    res = resolution(jnp.asarray(x, precision), y, freqs, signal, noise)
    eps = np.finfo(precision).eps
    floors = []
    for f, s in zip(freqs, signal, strict=True):
        phi = np.asarray(spectral.features(np.asarray(x, np.float64), f))  # numpy float64
        lam = np.linalg.eigvalsh(phi.T @ phi)
        floors.append(s * np.sqrt(max(FLOOR_FACTOR * eps * lam[-1] - max(lam[0], 0), 0)
                                  / (1 - FLOOR_FACTOR * eps) / 10))
    assert res.draws == 3 and res.dtype == np.dtype(precision).name
    assert res.noise_floor == pytest.approx(np.median(floors), rel=1e-6)


def test_profile_noise_maximises_the_dense_float64_marginal_likelihood(x64):
    """The float64 σ_n of :func:`profile_noise` (from ΦᵀΦ's eigenvalues) against the dense
    log N(y | 0, σ_s²/m ΦΦᵀ + σ_n² I) (Hoang et al. 2017, eq. 3): its closed form equals the dense
    density, and its σ_n beats every σ_n of a grid of the dense one."""
    from scipy import stats

    from ssgp_ppl.model.linalg import _moments64, profile_noise

    x, y = _sine(150, 0.05)
    freqs = np.array([[1 / np.pi], [0.2], [0.45], [0.05]])  # the first gives sin 2x exactly
    signal = 0.9
    phi = np.asarray(spectral.features(x, freqs))
    g, b, yy = _moments64(x, y, freqs)
    np.testing.assert_allclose(g, phi.T @ phi, rtol=1e-12, atol=1e-9)
    lam, q = np.linalg.eigh(g)

    def dense(s):
        cov = signal**2 / 4 * phi @ phi.T + s**2 * np.eye(len(y))
        return stats.multivariate_normal(np.zeros(len(y)), cov).logpdf(y)

    best = profile_noise(lam, q.T @ b, yy, len(y), signal, 0.3)
    grid = np.geomspace(1e-3, 1.0, 61)
    assert dense(best) >= max(dense(s) for s in grid) - 1e-6
    assert 0.04 < best < 0.06  # the generating 0.05


def test_jitter_at_the_fitted_values_is_recorded_and_warned():
    """Duplicated rows and a noise of 1e-5 in float32: the factor of A at these values needs
    jitter (ΦᵀΦ has rank 4 in 40 dimensions): recorded with the noise it acts as; where A is not
    factored (``jitter=False``) it is not."""
    from ssgp_ppl.model.linalg import resolution

    rng = np.random.default_rng(2)
    x = np.repeat(rng.normal(size=(4, 2)), 25, axis=0)
    y = np.sin(x[:, 0])
    freqs = rng.normal(size=(1, 20, 2))
    res = resolution(jnp.asarray(x, np.float32), y, freqs, np.ones(1), np.full(1, 1e-5))
    assert res.jitter > 0 and res.jitter_draws == 1
    mean_diag = 50.0  # cos² + sin² = 1 per frequency: trace ΦᵀΦ = n m over 2m diagonal entries
    acts = np.sqrt((20 * 1e-10 + res.jitter * mean_diag) / 20)
    assert res.jitter_noise == pytest.approx(acts, rel=1e-3)
    text = res.text(y_scale=2.0)
    assert text.startswith("float32 cannot resolve this fit") and text.endswith("--x64 (float64)")
    assert f"needed jitter {res.jitter:g} × mean diag A, which acts as a noise σ_n of " \
           f"{2 * acts:.2g} (1 of 1 draws)" in text and "\n" not in text
    quiet = resolution(jnp.asarray(x, np.float32), y, freqs, np.ones(1), np.full(1, 1e-5),
                       jitter=False)
    assert quiet.jitter == 0.0 and quiet.jitter_draws == 0


def test_gram_summed_over_blocks_of_rows_is_the_one_product(x64, monkeypatch):
    from ssgp_ppl.model import linalg

    x, _ = _sine(1000, 0.0)
    freqs = np.random.default_rng(1).normal(size=(6, 1))
    phi = np.asarray(spectral.features(jnp.asarray(x), jnp.asarray(freqs)))
    monkeypatch.setattr(linalg, "GRAM_VALUES", 12 * 97)  # 97 rows a block, the last one short
    np.testing.assert_allclose(np.asarray(linalg.gram(jnp.asarray(x), jnp.asarray(freqs))),
                               phi.T @ phi, rtol=1e-12, atol=1e-9)


def test_float32_marginal_likelihood_never_exceeds_float64_as_the_noise_vanishes():
    """Near-interpolating data (y = sin 2x + N(0, 1e-4²), a frequency giving sin 2x exactly): from
    σ_n = 0.1 down to 1e-18 the float32 collapsed marginal likelihood stays at or below the
    float64 one: its quadratic form is a residual norm, so the type-II objective has no float32
    path to +∞."""
    x, y = _sine(500, 1e-4)
    freqs = np.array([[1 / np.pi], [0.2], [0.45], [0.05], [0.7]])
    noises = 10.0 ** -np.arange(1, 19)

    def values(dtype):
        phi = spectral.features(jnp.asarray(x, dtype), jnp.asarray(freqs, dtype))
        return np.array([float(marginal_log_likelihood(phi, jnp.asarray(y, dtype), 0.8, s))
                         for s in noises])

    ref = _in_float64(values)
    got = values(np.float32)
    assert not np.isnan(got).any() and np.isfinite(ref).all()
    assert (got <= ref + 1e-4 * np.abs(ref) + 1.0).all(), np.column_stack([noises, got, ref])
