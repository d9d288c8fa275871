"""Cholesky with jitter escalation (ssgp_ppl.linalg): finite where the plain factor fails, exact
where it does not, differentiable, and a clear error where no jitter helps."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from ssgp_ppl import spectral
from ssgp_ppl.errors import SSGPError
from ssgp_ppl.linalg import JITTER, check_finite, cholesky, jitter_level
from ssgp_ppl.model import marginal_log_likelihood


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

    previous = jax.config.read("jax_enable_x64")
    jax.config.update("jax_enable_x64", True)
    try:
        ref = value(np.float64)
    finally:
        jax.config.update("jax_enable_x64", previous)
    got = value(np.float32)
    assert np.isfinite(got)
    assert abs(got - ref) < 1e-3 * abs(ref)
