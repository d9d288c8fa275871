"""Tan, Ong, Nott & Jasra (2016) variational SSGP: NCVMP Algorithms 1 and 2 (Tan et al. 2016).

The model is the catalog's base model in its λ parameterisation (Tan et al. 2016, eqs. 4-5):
y = Zα + ε, Z_i = [cos((s_r ⊙ x_i)ᵀλ)]_r ++ [sin((s_r ⊙ x_i)ᵀλ)]_r with fixed spectral points
s_r ~ N(0, I_d), λ ~ N(μ⁰, Σ⁰), α ~ N(0, σ²/m I_{2m}), σ ~ half-Cauchy(A_σ), γ ~ half-Cauchy(A_γ),
i.e. :func:`ssgp_ppl.model.ssgp.ssgp_model` with ``parameterization = "scaled"`` (λ = inverse lengthscales,
σ = signal, γ = noise, α = the nuisance s up to the order of its entries, see :func:`to_nuisance`).

The factorisation is q(α) q(λ) q(σ) q(γ) (eq. 11): q(α) = N(μ_α, Σ_α), q(λ) = N(μ_λ, Σ_λ) with full
covariances, and the optimal q(σ) ∝ exp(−C_σ/σ²) σ^{−2m} / (A_σ² + σ²), q(γ) ∝ exp(−C_γ/γ²) γ^{−n} /
(A_γ² + γ²) (§3.1). Everything is vectorised: the n × m × m pair terms of E_q(ZᵀZ) are accumulated
over row chunks inside one ``lax.scan``; the NCVMP derivatives of S = E_q log p(y|α,λ,γ) + E_q log p(λ)
(F₁...F₆ of Algorithms 1-2) are taken by automatic differentiation of the closed forms of App. A,
and tests compare them with the paper's printed F₁-F₄.

Internally α is in the paper's block order [a_1..a_m, b_1..b_m]; the model's nuisance site
interleaves cos/sin features, :func:`to_nuisance` converts.
"""

from __future__ import annotations

import math
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ssgp_ppl.errors import SSGPError
from ssgp_ppl.model import densities

# --------------------------------------------------------------------------------- H(p, q, r)

_GRID = 1024  # quadrature nodes per evaluation of log H (trapezoid in u = log x)
# A cycle that changes the bound L by less than this many machine epsilons of |L| (relative) has
# converged: that is the rounding noise of L (float32: 1.2e-5)
ROUNDING_EPS = 100.0
_Z_LOW, _Z_HIGH = -40.0, 14.0  # grid range in units of the mode's standard deviation


def _h_grid(p, q, r):
    """Nodes u (K,) and log integrand g(u) (K,) of H(p, q, r) in u = log x, around its mode.

    H(p, q, r) = ∫₀^∞ x^p exp{−q x² − log(r + x⁻²)} dx = ∫ exp{g(u)} du with
    g(u) = (p + 1) u − q e^{2u} − log(r + e^{−2u}). The mode v = e^{2u*} solves the quadratic
    2qr v² + (2q − (p+1) r) v − (p+3) = 0 exactly (the stable root is used), and the grid spans
    u* + sd·[−40, 14], sd = (−g''(u*))^{−1/2}: the left tail decays like e^{(p+3)u}, the right one
    like exp(−q e^{2u}).
    """
    p, q, r = (jnp.asarray(v, dtype=jnp.result_type(float)) for v in (p, q, r))
    b = 2.0 * q - (p + 1.0) * r
    disc = jnp.sqrt(b * b + 8.0 * q * r * (p + 3.0))
    v = jnp.where(b >= 0, 2.0 * (p + 3.0) / (b + disc), (disc - b) / (4.0 * q * r))
    u_star = 0.5 * jnp.log(v)
    curv = 4.0 * q * v + 4.0 * r * v / (r * v + 1.0) ** 2
    sd = 1.0 / jnp.sqrt(curv)
    z = jnp.linspace(_Z_LOW, _Z_HIGH, _GRID, dtype=u_star.dtype)
    u = u_star[..., None] + sd[..., None] * z
    pp, qq, rr = p[..., None], q[..., None], r[..., None]
    g = (pp + 1.0) * u - qq * jnp.exp(2.0 * u) - jnp.logaddexp(jnp.log(rr), -2.0 * u)
    return u, g


def log_h(p, q, r):
    """log H(p, q, r), H(p, q, r) = ∫₀^∞ x^p exp{−q x² − log(r + x⁻²)} dx (Tan et al. 2016, §3.1).

    The normaliser of q(γ) ∝ exp(−C/γ²) γ^{−n} / (A² + γ²) is H(n − 2, C, A²) in this form (substitute
    x = 1/γ), which is Wand et al. (2011, App. B)'s definition; the printed text of Tan et al. 2016 drops the
    exponent of x⁻² in log(r + x⁻²). Evaluated stably by trapezoid quadrature in log space (the
    integrand is smooth and decays super-exponentially, so the rule converges geometrically); p, q, r
    broadcast.
    """
    u, g = _h_grid(p, q, r)
    du = u[..., 1] - u[..., 0]
    w = jnp.ones(_GRID).at[0].set(0.5).at[-1].set(0.5)
    return jax.scipy.special.logsumexp(g, b=w, axis=-1) + jnp.log(du)


def h_ratio(p, q, r, k: int = 2):
    """H(p + k, q, r) / H(p, q, r): E_q[x^k] under x ∝ x^p e^{−q x²} / (r + x⁻²)."""
    return jnp.exp(log_h(p + k, q, r) - log_h(p, q, r))


def sample_inverse_scale(key, p, q, r, shape=()):
    """Draws of x ∝ x^p exp(−q x²) / (r + x⁻²) on (0, ∞) by inverse CDF on the quadrature grid.

    With p = n − 2, q = C_γ, r = A_γ², 1/x is a draw of γ from q(γ) (and p = 2m − 2 for σ).
    """
    u, g = _h_grid(p, q, r)
    w = jnp.exp(g - jnp.max(g))
    cdf = jnp.concatenate([jnp.zeros(1, w.dtype), jnp.cumsum(0.5 * (w[1:] + w[:-1]))])
    cdf = cdf / cdf[-1]
    uni = jax.random.uniform(key, shape, dtype=u.dtype)
    return jnp.exp(jnp.interp(uni, cdf, u))


# ------------------------------------------------------------------------- model quantities


class TanPrior(NamedTuple):
    """Known prior hyperparameters of Tan et al. 2016, §2: λ ~ N(μ⁰, Σ⁰), σ ~ HC(A_σ), γ ~ HC(A_γ)."""

    mu0: jax.Array  # (d,)
    sigma0: jax.Array  # (d, d)
    a_signal: float  # A_σ
    a_noise: float  # A_γ


def tan_prior(spec) -> TanPrior:
    """The prior of a model specification in Tan et al. 2016's λ parameterisation (§2).

    The one check that a spec is Tan et al. 2016's model (the catalog calls it too).

    Parameters
    ----------
    spec
        An `SSGPSpec` (`CatalogEntry.spec`): ``parameterization = "scaled"``, a Gaussian
        spectral density, a sampled nuisance, m >= 2, a normal prior on the inverse
        lengthscales and half-Cauchy priors on the signal and noise.

    Returns
    -------
    TanPrior
        λ ~ N(μ⁰, Σ⁰), σ ~ HC(A_σ), γ ~ HC(A_γ): ``mu0`` (d,), ``sigma0`` (d, d), ``a_signal``,
        ``a_noise``.

    Raises
    ------
    SSGPError
        At the first mismatch, naming the catalog key (``model.<key>``) and what it needs.
    """
    lam = spec.inverse_lengthscales
    checks = [("parameterization", spec.parameterization == "scaled", "'scaled'"),
              ("spectral_density", spec.density.gaussian,
               "a Gaussian spectral density (s_r ~ N(0, I)): " + densities.names_where(
                   lambda d: d.gaussian)),
              ("nuisance", spec.nuisance == "sampled", "'sampled'"),
              ("m", spec.m >= 2, "m >= 2")]
    for key, dist_name in (("inverse_lengthscales", "normal"), ("signal", "half_cauchy"),
                           ("noise", "half_cauchy")):
        h = getattr(spec, key)
        checks.append((key, h.role == "prior" and h.dist == dist_name,
                       f"role = 'prior', dist = '{dist_name}'"))
    for key, ok, want in checks:
        if not ok:
            raise SSGPError(f"model.{key}: methods ncvmp/local (Tan et al. 2016) need {want}")
    d = spec.d
    return TanPrior(jnp.full((d,), lam.loc), lam.scale**2 * jnp.eye(d), float(spec.signal.scale),
                    float(spec.noise.scale))


class NCVMPState(NamedTuple):
    """Variational parameters ϑ = {μ_α, Σ_α, μ_λ, Σ_λ, C_σ, C_γ} (Tan et al. 2016, §3.1); α in block order."""

    mu_lambda: jax.Array  # (d,)
    sigma_lambda: jax.Array  # (d, d)
    mu_alpha: jax.Array  # (2m,)
    sigma_alpha: jax.Array  # (2m, 2m)
    c_signal: jax.Array  # C_σ
    c_noise: jax.Array  # C_γ


def to_nuisance(alpha):
    """Block order [a_1..a_m, b_1..b_m] (Tan et al. 2016) → the model's interleaved [a_1, b_1, a_2, ...]."""
    m = alpha.shape[-1] // 2
    return jnp.stack([alpha[..., :m], alpha[..., m:]], axis=-1).reshape(alpha.shape)


def _damped_expm1(half, v):
    """e^{half}(e^{v} − 1) with half + v ≤ 0: ``expm1`` where |v| ≤ 1 (no cancellation as v → 0),
    e^{half + v} − e^{half} elsewhere. The product form e^{half}·expm1(v) is 0·∞ = NaN where a row's
    damping e^{half} underflows and e^{v} overflows (float32: |t|ᵀΣ|t| past ~88, inputs a few
    standard deviations out)."""
    small = jnp.abs(v) <= 1.0
    safe = jnp.where(small, v, 0.0)  # no overflow in the branch not taken (nor in its gradient)
    return jnp.where(small, jnp.exp(half) * jnp.expm1(safe), jnp.exp(half + v) - jnp.exp(half))


def _pair_terms(x, points, mu, sigma, centred: bool = False):
    """For rows x (c, d): E_q cos/sin products of App. A Lemma 1, each (c, m, m).

    Returns (cc, ss, sc) with cc[i,r,l] = E cos(t_rᵀλ)cos(t_lᵀλ), ss = E sin sin, sc = E sin_r cos_l,
    t_r = s_r ⊙ x_i. t±ᵀΣt± = u_r + u_l ± 2U_rl with U_rl = t_rᵀΣt_l computed as one matrix product
    (c, d²) @ (d², m²) of vec(x xᵀ ⊙ Σ) with vec(s_r s_lᵀ); cos/sin of t±ᵀμ come from those of t_rᵀμ
    by the angle-sum identities, so the only pairwise transcendental functions are the two damping
    exponentials.

    ``centred``: the covariances instead, E cos_r cos_l − E cos_r E cos_l and so on. The product of
    the means is e^{−(u_r+u_l)/2} times the same angle sums, so each covariance is
    ½e^{−(u_r+u_l)/2}[(e^{U} − 1) cos(a_r − a_l) ± (e^{−U} − 1) cos(a_r + a_l)] (sin for sc), with
    ``expm1``: accurate to the last bit where q(λ) is narrow (U → 0), where the difference of the
    two moments would cancel to rounding.
    """
    c, d = x.shape
    m = points.shape[0]
    a = x @ (points * mu).T  # (c, m) t_rᵀμ
    w = (x[:, :, None] * x[:, None, :] * sigma).reshape(c, d * d)
    k = (points[:, None, :, None] * points[None, :, None, :]).reshape(m * m, d * d)
    big_u = (w @ k.T).reshape(c, m, m)
    u = jnp.diagonal(big_u, axis1=1, axis2=2)
    half = -0.5 * (u[:, :, None] + u[:, None, :])
    if centred:
        e_minus, e_plus = _damped_expm1(half, big_u), _damped_expm1(half, -big_u)
    else:
        e_minus, e_plus = jnp.exp(half + big_u), jnp.exp(half - big_u)
    ca, sa = jnp.cos(a), jnp.sin(a)
    cc_ = ca[:, :, None] * ca[:, None, :]  # cos_r cos_l
    ss_ = sa[:, :, None] * sa[:, None, :]
    sc_ = sa[:, :, None] * ca[:, None, :]  # sin_r cos_l
    cs_ = ca[:, :, None] * sa[:, None, :]
    cos_minus, cos_plus = cc_ + ss_, cc_ - ss_  # cos(a_r ∓ a_l)
    sin_minus, sin_plus = sc_ - cs_, sc_ + cs_  # sin(a_r ∓ a_l)
    cc = 0.5 * (e_minus * cos_minus + e_plus * cos_plus)
    ss = 0.5 * (e_minus * cos_minus - e_plus * cos_plus)
    sc = 0.5 * (e_minus * sin_minus + e_plus * sin_plus)
    return cc, ss, sc


def expected_features(x, points, mu, sigma):
    """E_q(Z) (n, 2m), block order (Tan et al. 2016, App. A): e^{−½ t_irᵀΣt_ir} [cos(t_irᵀμ), sin(t_irᵀμ)]."""
    n, d = x.shape
    w = (x[:, :, None] * x[:, None, :] * sigma).reshape(n, d * d)
    k = (points[:, :, None] * points[:, None, :]).reshape(-1, d * d)  # (m, d²)
    damp = jnp.exp(-0.5 * (w @ k.T))
    a = x @ (points * mu).T
    return jnp.concatenate([damp * jnp.cos(a), damp * jnp.sin(a)], axis=-1)


def _gram_block(cc, ss, sc):
    """Assemble E(Z_i Z_iᵀ) (…, 2m, 2m) from the pair terms: [[cc, scᵀ], [sc, ss]]."""
    top = jnp.concatenate([cc, jnp.swapaxes(sc, -1, -2)], axis=-1)
    bottom = jnp.concatenate([sc, ss], axis=-1)
    return jnp.concatenate([top, bottom], axis=-2)


def _row_chunk(m: int, budget: int = 1 << 21) -> int:
    return max(1, budget // (m * m))


def _chunks(x, y, chunk):
    """Pad (n, d), (n,) to a multiple of ``chunk`` rows; returns (k, chunk, d), (k, chunk), mask."""
    n = x.shape[0]
    chunk = min(chunk, n)
    k = -(-n // chunk)
    pad = k * chunk - n
    xp = jnp.concatenate([x, jnp.zeros((pad, x.shape[1]), x.dtype)]).reshape(k, chunk, -1)
    yp = jnp.concatenate([y, jnp.zeros((pad,), y.dtype)]).reshape(k, chunk)
    mask = (jnp.arange(k * chunk) < n).reshape(k, chunk).astype(x.dtype)
    return xp, yp, mask


def expected_gram(x, points, mu, sigma, centred: bool = False):
    """E_q(ZᵀZ) = Σ_i E_q(Z_i Z_iᵀ) (2m, 2m), Tan et al. 2016, App. A, accumulated over row chunks;
    ``centred``: V = Σ_i Cov_q(Z_i) = E_q(ZᵀZ) − E_q(Z)ᵀE_q(Z), computed directly (:func:`_pair_terms`)."""
    m = points.shape[0]
    xp, _, mask = _chunks(x, jnp.zeros(x.shape[0], x.dtype), _row_chunk(m))

    def body(acc, args):
        xc, mc = args
        cc, ss, sc = _pair_terms(xc, points, mu, sigma, centred)
        w = mc[:, None, None]
        return acc + _gram_block(jnp.sum(w * cc, 0), jnp.sum(w * ss, 0), jnp.sum(w * sc, 0)), None

    acc0 = jnp.zeros((2 * m, 2 * m), x.dtype)
    return jax.lax.scan(body, acc0, (xp, mask))[0]


def expected_residual(y, ez, v, mu_alpha, sigma_alpha):
    """E_q‖y − Zα‖² = ‖y − E(Z)μ_α‖² + tr(E(Z)ᵀE(Z) Σ_α) + tr(Ψ V), Ψ = μ_αμ_αᵀ + Σ_α, V = Σ_i Cov_q(Z_i)
    (``expected_gram(..., centred=True)``): three non-negative terms. The expanded form
    yᵀy − 2yᵀE(Z)μ_α + tr(Ψ E(ZᵀZ)) (Tan et al. 2016, App. A) cancels terms of the size of yᵀy down to
    the residual, which in float32 left the bound L with rounding errors of ~10⁻³ of its value
    near a good fit (larger than the changes that decide convergence)."""
    r = y - ez @ mu_alpha
    psi = jnp.outer(mu_alpha, mu_alpha) + sigma_alpha
    return r @ r + jnp.sum((ez @ sigma_alpha) * ez) + jnp.sum(psi * v)


def _expected_loglik_core(x, y, points, mu, sigma, mu_alpha, psi):
    """−½ E_q‖y − Zα‖² as a function of q(λ) (μ, Σ): the λ-dependent part of the expected log
    likelihood times γ², in the form of :func:`expected_residual`, accumulated over row chunks."""
    m = points.shape[0]
    xp, yp, mask = _chunks(x, y, _row_chunk(m))
    pcc, pss, psc, pcs = psi[:m, :m], psi[m:, m:], psi[m:, :m], psi[:m, m:]
    sigma_alpha = psi - jnp.outer(mu_alpha, mu_alpha)

    def body(acc, args):
        xc, yc, mc = args
        cc, ss, sc = _pair_terms(xc, points, mu, sigma, centred=True)
        quad = (jnp.einsum("crl,rl->c", cc, pcc) + jnp.einsum("crl,rl->c", ss, pss)
                + jnp.einsum("crl,rl->c", sc, psc) + jnp.einsum("clr,rl->c", sc, pcs))
        ez = expected_features(xc, points, mu, sigma)
        r = yc - ez @ mu_alpha
        spread = jnp.sum((ez @ sigma_alpha) * ez, axis=1)
        return acc - 0.5 * jnp.sum(mc * (r * r + spread + quad)), None

    # rematerialised: the gradient (F₁, F₂) recomputes each chunk's pair terms instead of keeping
    # all n × m × m of them from the forward pass (AIRLINE 2M, m = 20: 213 GB)
    return jax.lax.scan(jax.checkpoint(body), jnp.zeros((), x.dtype), (xp, yp, mask))[0]


def _s_lambda(mu, sigma, x, y, points, state: NCVMPState, prior: TanPrior, inv_noise2):
    """S = Σ_{a ∈ N(λ)} S_a, the terms of the bound that depend on q(λ) (Tan et al. 2016, eq. 8-10)."""
    psi = jnp.outer(state.mu_alpha, state.mu_alpha) + state.sigma_alpha
    lik = inv_noise2 * _expected_loglik_core(x, y, points, mu, sigma, state.mu_alpha, psi)
    p0 = jnp.linalg.inv(prior.sigma0)
    diff = mu - prior.mu0
    return lik - 0.5 * diff @ p0 @ diff - 0.5 * jnp.trace(p0 @ sigma)


def natural_gradient_terms(x, y, points, state: NCVMPState, prior: TanPrior):
    """(F₅, F₆) of Algorithm 2: F₅ = −2 ∂S/∂Σ_λ = Σ⁰⁻¹ + E[γ⁻²](F₁ + F₂), F₆ = ∂S/∂μ_λ."""
    n = x.shape[0]
    inv_noise2 = h_ratio(n - 2, state.c_noise, prior.a_noise**2)
    g_mu, g_sigma = jax.grad(_s_lambda, argnums=(0, 1))(state.mu_lambda, state.sigma_lambda, x, y,
                                                        points, state, prior, inv_noise2)
    f5 = -2.0 * g_sigma
    return 0.5 * (f5 + f5.T), g_mu


class Stats(NamedTuple):
    ez: jax.Array  # (n, 2m) E_q(Z)
    ezz: jax.Array  # (2m, 2m) E_q(ZᵀZ)
    v: jax.Array  # (2m, 2m) Σ_i Cov_q(Z_i) = E_q(ZᵀZ) − E_q(Z)ᵀE_q(Z)


def update_rest(x, y, points, state: NCVMPState, prior: TanPrior):
    """Steps 3-6 of Algorithm 1: Σ_α, μ_α, then C_σ, C_γ given q(λ); returns (state, the
    :class:`Stats` E(Z), E(ZᵀZ), V they used)."""
    n = x.shape[0]
    m = points.shape[0]
    stats = moments(x, points, state)
    ez, ezz = stats.ez, stats.ezz
    inv_noise2 = h_ratio(n - 2, state.c_noise, prior.a_noise**2)
    inv_signal2 = h_ratio(2 * m - 2, state.c_signal, prior.a_signal**2)
    prec = inv_noise2 * ezz + m * inv_signal2 * jnp.eye(2 * m, dtype=x.dtype)
    chol = jnp.linalg.cholesky(prec)
    sigma_alpha = jax.scipy.linalg.cho_solve((chol, True), jnp.eye(2 * m, dtype=x.dtype))
    sigma_alpha = 0.5 * (sigma_alpha + sigma_alpha.T)
    mu_alpha = inv_noise2 * sigma_alpha @ (ez.T @ y)
    c_signal = 0.5 * m * (mu_alpha @ mu_alpha + jnp.trace(sigma_alpha))
    c_noise = 0.5 * expected_residual(y, ez, stats.v, mu_alpha, sigma_alpha)
    new = state._replace(mu_alpha=mu_alpha, sigma_alpha=sigma_alpha, c_signal=c_signal,
                         c_noise=c_noise)
    return new, stats


def moments(x, points, state: NCVMPState) -> Stats:
    """E_q(Z), E_q(ZᵀZ) and V = Σ_i Cov_q(Z_i) under q(λ); E_q(ZᵀZ) = E_q(Z)ᵀE_q(Z) + V."""
    ez = expected_features(x, points, state.mu_lambda, state.sigma_lambda)
    v = expected_gram(x, points, state.mu_lambda, state.sigma_lambda, centred=True)
    return Stats(ez, ez.T @ ez + v, v)


def lower_bound(x, y, points, state: NCVMPState, prior: TanPrior, stats: Stats | None = None):
    """The ELBO L = E_q log p(y, θ) − E_q log q(θ) (Tan et al. 2016, eq. 6, App. B) at any ϑ.

    Equal to the simplified eq. (12) after steps 5-6 of Algorithm 1 (tested); this general form is
    also valid at the initial point, where C_σ, C_γ are not yet the step 5-6 values.
    """
    n, _ = x.shape
    m = points.shape[0]
    d = state.mu_lambda.shape[0]
    if stats is None:
        stats = moments(x, points, state)
    an2, as2 = prior.a_noise**2, prior.a_signal**2
    lh_noise, lh_signal = log_h(n - 2, state.c_noise, an2), log_h(2 * m - 2, state.c_signal, as2)
    inv_noise2 = jnp.exp(log_h(n, state.c_noise, an2) - lh_noise)
    inv_signal2 = jnp.exp(log_h(2 * m, state.c_signal, as2) - lh_signal)
    resid2 = expected_residual(y, stats.ez, stats.v, state.mu_alpha, state.sigma_alpha)
    alpha2 = state.mu_alpha @ state.mu_alpha + jnp.trace(state.sigma_alpha)
    p0 = jnp.linalg.inv(prior.sigma0)
    diff = state.mu_lambda - prior.mu0
    logdet = lambda a: jnp.linalg.slogdet(a)[1]  # noqa: E731
    return (
        -0.5 * n * math.log(2 * math.pi) - 0.5 * inv_noise2 * resid2 + state.c_noise * inv_noise2
        + lh_noise
        + m * math.log(m) - 0.5 * m * inv_signal2 * alpha2 + state.c_signal * inv_signal2
        + lh_signal
        + 2.0 * math.log(2.0 / math.pi) + jnp.log(prior.a_signal) + jnp.log(prior.a_noise)
        + 0.5 * logdet(p0 @ state.sigma_lambda) - 0.5 * diff @ p0 @ diff
        - 0.5 * jnp.trace(p0 @ state.sigma_lambda) + 0.5 * d
        + 0.5 * logdet(state.sigma_alpha) + m
    )


def lower_bound_eq12(n: int, m: int, state: NCVMPState, prior: TanPrior):
    """Tan et al. 2016, eq. (12): the bound after steps 5-6 of Algorithm 1 (C_σ, C_γ just updated)."""
    d = state.mu_lambda.shape[0]
    p0 = jnp.linalg.inv(prior.sigma0)
    diff = state.mu_lambda - prior.mu0
    return (m * math.log(m) + jnp.log(4 * prior.a_signal * prior.a_noise / math.pi**2)
            + 0.5 * jnp.linalg.slogdet(p0 @ state.sigma_lambda)[1] - 0.5 * diff @ p0 @ diff
            - 0.5 * jnp.trace(p0 @ state.sigma_lambda)
            + 0.5 * jnp.linalg.slogdet(state.sigma_alpha)[1]
            + log_h(n - 2, state.c_noise, prior.a_noise**2)
            + log_h(2 * m - 2, state.c_signal, prior.a_signal**2)
            + m + 0.5 * d - 0.5 * n * math.log(2 * math.pi))


# -------------------------------------------------------------------------------- the solver


class NCVMPSettings(NamedTuple):
    """Settings of the NCVMP solver (static under jit); ``NCVMPSettings(max_iter=200)`` keeps the
    other defaults.

    Attributes
    ----------
    algorithm
        1 or 2: Tan et al. 2016's Algorithm 1 (full steps) or 2 (adaptive step size).
    rho
        Algorithm 2's step-size factor ρ > 1: a cycle that raises the bound L is kept and
        a ← ρa; one that does not is redone with a = 1 (step 6); a step whose Σ_λ is not
        positive definite is shrunk a ← a/ρ (step 3(b)). Where the cycle with a = 1 lowers L
        by more than the tolerance too, it is redone with a ← a/ρ until one raises L.
    max_iter
        Iterations at most (failed attempts of Algorithm 2 count, as in §4).
    tol
        Convergence: the relative increase of L below this.
    restarts
        Spectral sets tried (Tan et al. 2016, §7): each is run for ``restart_iters``
        iterations and the best bound is continued.
    restart_iters
        Iterations of each restart before the best is chosen.
    max_halvings
        Step 3(b) reductions a ← a/ρ before an iteration is given up; a below ρ^-max_halvings
        ends the damping of a cycle that lowers L (the fit stops unconverged).
    """

    algorithm: int = 2  # 1 | 2
    rho: float = 1.5
    max_iter: int = 500
    tol: float = 1e-6  # relative increase of L
    restarts: int = 10
    restart_iters: int = 2
    max_halvings: int = 60  # step 3(b) reductions a ← a/ρ before giving up on an iteration


class NCVMPResult(NamedTuple):
    state: NCVMPState
    bound: jax.Array  # final L
    iterations: jax.Array  # t (failed attempts of Algorithm 2 count, as in §4)
    converged: jax.Array  # relative increase < tol before max_iter
    bounds: jax.Array  # L after each iteration (NaN after the end): (max_iter + 1,), longer from
    # continue_x64 (both precisions' bounds)
    step_sizes: jax.Array  # (max_iter + 1,) a_t used at each iteration
    points: jax.Array  # (m, d) the spectral points used (the restart that won)
    budget_reached: jax.Array | None = None  # stopped by max_iter (else by convergence or
    # because no step size raised L)


def init_state(x, y, points, prior: TanPrior) -> NCVMPState:
    """§4's initialisation: μ_λ = 0.5·1, Σ_λ = 0.5 I, C_γ = (n/2 − 1) var(y)/4, C_σ = (m − 1) var(y),
    then μ_α, Σ_α by steps 3-4 of Algorithm 1 (steps 5-6 are not applied)."""
    n, d = x.shape
    m = points.shape[0]
    vy = jnp.var(y)
    dt = x.dtype
    state = NCVMPState(jnp.full((d,), 0.5, dt), 0.5 * jnp.eye(d, dtype=dt), jnp.zeros(2 * m, dt),
                       jnp.eye(2 * m, dtype=dt), (m - 1) * vy, (n / 2 - 1) * vy / 4)
    upd, stats = update_rest(x, y, points, state, prior)
    state = state._replace(mu_alpha=upd.mu_alpha, sigma_alpha=upd.sigma_alpha)
    return state


def _lambda_step(state: NCVMPState, f5, f6, a, rho, max_halvings):
    """Steps 3-4 of Algorithm 2: Σ_λ ← [(1 − a)Σ_λ⁻¹ + aF₅]⁻¹, shrinking a ← a/ρ until SPD (3(b)),
    then μ_λ ← μ_λ + aΣ_λF₆. Returns (mu, sigma, a, ok)."""
    prec_old = jnp.linalg.inv(state.sigma_lambda)
    prec_old = 0.5 * (prec_old + prec_old.T)

    def attempt(a):
        prec = (1.0 - a) * prec_old + a * f5
        chol = jnp.linalg.cholesky(0.5 * (prec + prec.T))
        return chol, jnp.all(jnp.isfinite(chol))

    def cond(carry):
        a, k, ok = carry
        return (~ok) & (k < max_halvings)

    def body(carry):
        a, k, _ = carry
        a = a / rho
        return a, k + 1, attempt(a)[1]

    a, _, ok = jax.lax.while_loop(cond, body, (a, 0, attempt(a)[1]))
    chol = attempt(a)[0]
    eye = jnp.eye(chol.shape[0], dtype=chol.dtype)
    sigma = jax.scipy.linalg.cho_solve((chol, True), eye)
    sigma = 0.5 * (sigma + sigma.T)
    mu = state.mu_lambda + a * sigma @ f6
    return mu, sigma, a, ok


def _cycle(x, y, points, state, prior, a, settings: NCVMPSettings):
    """One cycle: steps 2-5 of Algorithm 2 (a = 1 is Algorithm 1 with the 3(b) safeguard)."""
    f5, f6 = natural_gradient_terms(x, y, points, state, prior)
    mu, sigma, a, ok = _lambda_step(state, f5, f6, a, settings.rho, settings.max_halvings)
    new = state._replace(mu_lambda=mu, sigma_lambda=sigma)
    new, stats = update_rest(x, y, points, new, prior)
    bound = lower_bound(x, y, points, new, prior, stats)
    bound = jnp.where(ok & jnp.isfinite(bound), bound, -jnp.inf)
    return new, bound, a


class _Loop(NamedTuple):
    state: NCVMPState
    bound: jax.Array
    a: jax.Array
    t: jax.Array
    done: jax.Array
    converged: jax.Array
    bounds: jax.Array
    steps: jax.Array


def _iterate(x, y, points, state, bound, prior, settings: NCVMPSettings, max_iter: int,
             use_tol: bool = True) -> _Loop:
    """Algorithm 2 (or 1) from ``state`` for at most ``max_iter`` iterations.

    Algorithm 2, step 6: a cycle that raises L is kept and a ← ρa; one that does not is discarded,
    a ← 1 and the cycle is redone from the same state (counted as an iteration, §4). When the cycle
    with a = 1 changes L by less than the tolerance without raising it, the algorithm stops there,
    converged (Algorithm 1's stopping rule). When it lowers L by more (a full step can overshoot:
    NCVMP's updates of λ need not raise L), the cycle is redone with a ← a/ρ, as step 3(b) does,
    until one raises L; the step then grows by ρ again. Convergence: relative increase of L below
    ``tol`` in a cycle with a ≥ 1 (a damped step's small change says nothing about the full one).
    Algorithm 1 stops where a cycle fails to raise L.
    """
    dt = x.dtype
    nan = jnp.full((max_iter + 1,), jnp.nan, dt)
    init = _Loop(state, bound, jnp.asarray(1.0, dt), jnp.asarray(0), jnp.asarray(False),
                 jnp.asarray(False), nan.at[0].set(bound), nan.at[0].set(1.0))

    def cond(c: _Loop):
        return (~c.done) & (c.t < max_iter)

    def body(c: _Loop):
        new, new_bound, a_used = _cycle(x, y, points, c.state, prior, c.a, settings)
        delta = new_bound - c.bound
        better = delta > 0
        floor = ROUNDING_EPS * jnp.finfo(dt).eps
        small = jnp.abs(delta) <= jnp.maximum(settings.tol, floor) * jnp.abs(c.bound)
        t = c.t + 1
        state = jax.tree.map(lambda u, v: jnp.where(better, u, v), new, c.state)
        bound = jnp.where(better, new_bound, c.bound)
        full = c.a >= 1.0  # Algorithm 2's own step (1 or grown by ρ), not a damped one
        if settings.algorithm == 2:
            lowered = (~better) & (a_used <= 1.0)  # the retry with a = 1 (or a damped one) failed
            damp = lowered & ~(full & small) & (a_used > settings.rho ** -settings.max_halvings)
            a_next = jnp.where(better, settings.rho * a_used, jnp.where(damp, a_used / settings.rho,
                                                                         1.0))
            stop_fail = lowered & ~damp
        else:
            a_next = jnp.asarray(1.0, dt)
            stop_fail = ~better
        converged = full & small & (better | stop_fail)
        done = (converged | stop_fail) if use_tol else jnp.asarray(False)
        return _Loop(state, bound, a_next, t, done, converged & use_tol,
                     c.bounds.at[t].set(bound), c.steps.at[t].set(a_used))

    return jax.lax.while_loop(cond, body, init)


DEFAULT_SETTINGS = NCVMPSettings()


@partial(jax.jit, static_argnames=("settings",))
def fit_ncvmp(x, y, point_sets, prior: TanPrior, settings: NCVMPSettings = DEFAULT_SETTINGS,
              init: NCVMPState | None = None):
    """Fit q(α) q(λ) q(σ) q(γ) by Tan et al. 2016's Algorithm 2 (or 1) with §7's start.

    Each of the R spectral sets is run for ``settings.restart_iters`` iterations (vectorised over
    the restarts with vmap) and the one with the best bound continues to convergence. Jitted;
    vmap this function over neighbourhoods for local fits.

    Parameters
    ----------
    x
        (n, d) inputs, scaled.
    y
        (n,) centred targets.
    point_sets
        (R, m, d) standard spectral points s_r ~ N(0, I_d), one set per restart
        (`spectral_sets`).
    prior
        The prior (`tan_prior`).
    settings
        The solver's settings (`NCVMPSettings`).
    init
        A starting ϑ (`NCVMPState`, with R = 1) instead of §4's initialisation.

    Returns
    -------
    NCVMPResult
        ``state`` (the variational parameters ϑ = {μ_α, Σ_α, μ_λ, Σ_λ, C_σ, C_γ}, α in block
        order), ``bound`` (the final L), ``iterations``, ``converged``, ``bounds`` and
        ``step_sizes`` per iteration, and ``points`` (the spectral set that won).
    """
    if init is not None:
        bound = lower_bound(x, y, point_sets[0], init, prior)
        loop = _iterate(x, y, point_sets[0], init, bound, prior, settings, settings.max_iter)
        return NCVMPResult(loop.state, loop.bound, loop.t, loop.converged, loop.bounds, loop.steps,
                           point_sets[0], ~loop.done)

    def start(points):
        state = init_state(x, y, points, prior)
        bound = lower_bound(x, y, points, state, prior)
        loop = _iterate(x, y, points, state, bound, prior, settings, settings.restart_iters,
                        use_tol=False)
        return loop.state, loop.bound, loop.t

    if point_sets.shape[0] > 1:
        states, bounds, ts = jax.vmap(start)(point_sets)
        best = jnp.argmax(jnp.where(jnp.isfinite(bounds), bounds, -jnp.inf))
        state = jax.tree.map(lambda v: v[best], states)
        points, bound, t0 = point_sets[best], bounds[best], ts[best]
    else:
        points = point_sets[0]
        state = init_state(x, y, points, prior)
        bound, t0 = lower_bound(x, y, points, state, prior), jnp.asarray(0)
    loop = _iterate(x, y, points, state, bound, prior, settings, settings.max_iter)
    return NCVMPResult(loop.state, loop.bound, loop.t + t0, loop.converged, loop.bounds,
                       loop.steps, points, ~loop.done)


def continue_x64(x, y, result: NCVMPResult, prior: TanPrior,
                 settings: NCVMPSettings = DEFAULT_SETTINGS) -> NCVMPResult:
    """A float32 fit finished in float64: Algorithm 2 continued from its state with its spectral
    set (the step size a starts again at 1) until the relative increase of L is below
    ``settings.tol`` in float64.

    Float32 resolves L only to ~10⁻⁵ of itself (the stop rule's floor, ``ROUNDING_EPS``), 12 times
    the paper's tolerance of 10⁻⁶, and on an ill-conditioned Σ_α (condition number ~10⁵) its
    rounding noise is larger still: float32 fits stop where Algorithm 2 still gains (tan_va:
    0.02 nats on pendulum, 0.12 on Auto-MPG; tan_local's neighbourhoods: 0.05 median, up to 4).
    Host-side: the arrays are cast inside ``jax.enable_x64``.

    Parameters
    ----------
    x
        (n, d) inputs, scaled, as the float32 fit had them.
    y
        (n,) centred targets.
    result
        The float32 fit (`fit_ncvmp`'s `NCVMPResult`).
    prior
        The prior (`tan_prior`).
    settings
        The solver's settings; the float64 stage has ``max_iter`` iterations of its own.

    Returns
    -------
    NCVMPResult
        The finished fit in ``x``'s dtype: ``converged`` and ``budget_reached`` by the float64
        stage, ``iterations``, ``bounds`` and ``step_sizes`` of both precisions (the bounds of a
        fit with restarts omit the restarts' iterations, as `fit_ncvmp`'s do).
    """
    dt = np.asarray(x).dtype
    with jax.enable_x64(True):
        c = lambda a: jnp.asarray(np.asarray(a), jnp.float64)  # noqa: E731
        fin = fit_ncvmp(c(x), c(y), c(result.points)[None], jax.tree.map(c, prior), settings,
                        init=jax.tree.map(c, result.state))
        fin = jax.tree.map(np.asarray, fin)
    back = lambda a: np.asarray(a, dt) if np.issubdtype(np.asarray(a).dtype, np.floating) else a  # noqa: E731
    b0, b1 = np.asarray(result.bounds), fin.bounds
    return NCVMPResult(jax.tree.map(back, fin.state), back(fin.bound),
                       np.asarray(result.iterations) + fin.iterations, fin.converged,
                       back(np.concatenate([b0[np.isfinite(b0)], b1[1:]])),
                       back(np.concatenate([np.asarray(result.step_sizes)[np.isfinite(b0)],
                                            fin.step_sizes[1:]])),
                       result.points, fin.budget_reached)


def spectral_sets(key, restarts: int, m: int, d: int, dtype=None):
    """``restarts`` sets of m standard spectral points s_r ~ N(0, I_d) (R, m, d)."""
    dtype = dtype or jnp.result_type(float)
    return jax.random.normal(key, (restarts, m, d), dtype)


# ------------------------------------------------------------------------------- predictive


def predictive(state: NCVMPState, points, x_test, n: int, prior: TanPrior, *, chunk: int = 256):
    """Closed-form predictive mean and variance of y* (Tan et al. 2016, §5).

    μ* = E_q(Z*)ᵀμ_α; σ*² = E_q(γ²) + tr{(μ_αμ_αᵀ + Σ_α) E_q(Z*ᵀZ*)} − (E_q(Z*)ᵀμ_α)²,
    E_q(γ²) = H(n − 4, C_γ, A_γ²) / H(n − 2, C_γ, A_γ²), computed without the cancellation of the
    last two terms as E_q(γ²) + E_q(Z*)ᵀΣ_αE_q(Z*) + tr{(μ_αμ_αᵀ + Σ_α) Cov_q(Z*)}. Returns
    (mean, var), each (n*,).
    """
    psi = jnp.outer(state.mu_alpha, state.mu_alpha) + state.sigma_alpha
    noise2 = h_ratio(n - 2, state.c_noise, prior.a_noise**2, k=-2)

    def one(xs):  # var = E γ² + E(z)ᵀΣ_αE(z) + tr(Ψ Cov(z)): no cancellation of mean²
        cc, ss, sc = _pair_terms(xs[None], points, state.mu_lambda, state.sigma_lambda, True)
        cov = _gram_block(cc[0], ss[0], sc[0])
        ez = expected_features(xs[None], points, state.mu_lambda, state.sigma_lambda)[0]
        mean = ez @ state.mu_alpha
        return mean, noise2 + ez @ state.sigma_alpha @ ez + jnp.sum(psi * cov)

    return jax.lax.map(one, x_test, batch_size=chunk)


def noise_moments(state: NCVMPState, n: int, prior: TanPrior):
    """E_q(γ²) and E_q(γ⁻²) under the optimal q(γ)."""
    return (h_ratio(n - 2, state.c_noise, prior.a_noise**2, k=-2),
            h_ratio(n - 2, state.c_noise, prior.a_noise**2, k=2))


def sample_q(key, state: NCVMPState, n: int, m: int, prior: TanPrior, num: int) -> dict:
    """``num`` draws from q(α)q(λ)q(σ)q(γ) as the model's sites (nuisance in the model's order)."""
    k1, k2, k3, k4 = jax.random.split(key, 4)
    lam = jax.random.multivariate_normal(k1, state.mu_lambda, state.sigma_lambda, (num,))
    alpha = jax.random.multivariate_normal(k2, state.mu_alpha, state.sigma_alpha, (num,))
    signal = 1.0 / sample_inverse_scale(k3, 2 * m - 2, state.c_signal, prior.a_signal**2, (num,))
    noise = 1.0 / sample_inverse_scale(k4, n - 2, state.c_noise, prior.a_noise**2, (num,))
    return {"inverse_lengthscales": lam, "nuisance": to_nuisance(alpha), "signal": signal,
            "noise": noise}


def log_q_scale(sigma, p, c, a2):
    """log density of σ = 1/x where x ∝ x^p exp(−c x²) / (a2 + x⁻²) (q(σ), q(γ) of Tan et al. 2016):
    p log x − c x² − log(a2 + σ²) − log H(p, c, a2) + 2 log x at x = 1/σ (Jacobian x²)."""
    x = 1.0 / sigma
    return (p + 2.0) * jnp.log(x) - c * x**2 - jnp.log(a2 + sigma**2) - log_h(p, c, a2)


def log_q(draws: dict, state: NCVMPState, n: int, m: int, prior: TanPrior):
    """log q(α)q(λ)q(σ)q(γ) at draws of :func:`sample_q` (S,), densities in the model's sites.

    q(σ) is the density of σ = 1/x with x ∝ x^p exp(−C x²) / (A² + x⁻²), p = 2m − 2 (n − 2 for γ):
    log q(σ) = p log x − C x² − log(A² + x⁻²) − log H(p, C, A²) + 2 log x at x = 1/σ.
    The order of α's coordinates does not change its Gaussian density.
    """
    from jax.scipy.stats import multivariate_normal as mvn

    alpha = from_nuisance(draws["nuisance"])
    return (mvn.logpdf(draws["inverse_lengthscales"], state.mu_lambda, state.sigma_lambda)
            + mvn.logpdf(alpha, state.mu_alpha, state.sigma_alpha)
            + log_q_scale(draws["signal"], 2 * m - 2, state.c_signal, prior.a_signal**2)
            + log_q_scale(draws["noise"], n - 2, state.c_noise, prior.a_noise**2))


def from_nuisance(nuisance):
    """The model's interleaved order → Tan et al. 2016's block order (inverse of :func:`to_nuisance`)."""
    m = nuisance.shape[-1] // 2
    pairs = nuisance.reshape(nuisance.shape[:-1] + (m, 2))
    return jnp.concatenate([pairs[..., 0], pairs[..., 1]], axis=-1)


def check_data(x, y, m: int):
    """Tan et al. 2016's q(γ) needs n ≥ 5 (E_q γ² uses H(n − 4, ·)); say so in one line otherwise."""
    n = np.shape(x)[0]
    if n < 5:
        raise SSGPError(f"NCVMP needs at least 5 training rows (got {n})")


__all__ = ["DEFAULT_SETTINGS", "NCVMPResult", "NCVMPSettings", "NCVMPState", "TanPrior",
           "check_data", "continue_x64", "expected_features", "expected_gram", "expected_residual",
           "fit_ncvmp", "init_state", "log_q", "lower_bound", "moments", "noise_moments", "predictive",
           "sample_q", "spectral_sets", "tan_prior"]
