"""Pure-JAX references of the catalog's SVI and type-II ML training steps, for step_time.py.

A reference is the *same estimator* as the package's training step for one catalog entry: the
same model density, guide family and parameterisation (NumPyro's unconstrained parameters, name
for name and in the same layout, so Adam sees the same coordinates), the same particles and the
same random draws (NumPyro's key derivations are replicated: ``Trace_ELBO`` splits the step key
into (model, guide) keys and the seeded guide splits once per sample site; the objectives split
into (particles, estimator) keys), the same minibatch scaling, and the same step rule (NumPyro's
``ClippedAdam``: every gradient entry clipped to ±100, then ``jax.example_libraries`` Adam with
b1 = 0.9, b2 = 0.999, eps = 1e-8 and the entry's step-size schedule) -- written directly in
jax.numpy: no handlers, traces, SVI class or numpyro.optim. :func:`run` runs the steps in
chunks of one jitted ``lax.scan`` each, with the same batch sampler and key stream as
``ssgp_ppl.inference.runners.run_svi``: the same seed gives the same trajectory.

Where a reference computes a term more directly than the package, the term is the same function
of the parameters and the draws, so values and gradients agree to rounding (what each skips is
listed in the builder's docstring; ``tests/test_benchmark_references.py`` checks every
hand-written loss and gradient against the package's for the same parameters, batch and key):

* log q of a reparameterised Gaussian draw x = μ + Lε is −½‖ε‖² − Σ log Lᵢᵢ − (k/2) log 2π (the
  package's MultivariateNormal.log_prob solves L⁻¹(x − μ) to get ε back);
* joint affine guide (M lower triangular) under the exact-in-s objectives: θ − b_θ = L_θθ z_θ, so
  the draw's z_θ is L_θθ⁻¹(θ − b_θ) without the package's triangular solve, and log q(θ) is
  log N(z_θ) − log|det L_θθ|;
* mean-field guide under those objectives: s is not drawn (only its closed-form KL enters) and
  Var f = (Φ ∘ Φ) σ_s², not ‖Φ diag(σ_s)‖² row by row.

Entries outside what the hand-written builders cover get :func:`plain_loop`: the entry's own
loss (NumPyro's, through its handlers) as a pure function of the unconstrained parameters, with
the same hand-written Adam in the same scan; labelled ``same_loss_plain_loop``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import cho_solve
from jax.scipy.special import gammaln, logsumexp
from jax.scipy.stats import norm

from ssgp_ppl.model.guides import initial_components
from ssgp_ppl.model.linalg import cholesky
from ssgp_ppl.model.spectral import TWO_PI, features

HAND_WRITTEN = "hand_written"
PLAIN_LOOP = "same_loss_plain_loop"
LOG_2PI = math.log(2.0 * math.pi)
CLIP = 100.0  # run_svi's ClippedAdam(clip_norm=100.0): an elementwise clip
B1, B2, EPS = 0.9, 0.999, 1e-8  # jax.example_libraries.optimizers.adam's defaults (NumPyro's Adam)


class NotHandWritten(Exception):
    """The entry is outside what the hand-written references cover."""


class Reference(NamedTuple):
    """One estimator: initial unconstrained params and ``loss(params, key, x_b, y_b, kw)``."""

    kind: str  # HAND_WRITTEN or PLAIN_LOOP
    params: dict
    loss: Callable
    note: str = ""


class RunResult(NamedTuple):
    """What :func:`run` returns (the timing fields mean what they mean in ``SVIResult``)."""

    params: dict  # unconstrained
    losses: np.ndarray
    steps: int
    seconds: float
    first_chunk: tuple[int, float]


# --------------------------------------------------------------------------------- sampling


def sampler(n: int, batch_size: int | None = None, partitions=None, per_step: int = 1):
    """``(draw, aux)`` as ``ssgp_ppl.inference.runners.batch_sampler``: full data, ``batch_size`` rows
    drawn uniformly with replacement (kw ``n_total``), or ``per_step`` of the padded partition
    blocks (kw ``obs_mask``, ``obs_scale`` = p / a)."""
    if partitions is not None:
        p = int(np.asarray(partitions.blocks).shape[0])

        def draw(key, x, y, aux):
            blocks, mask = aux
            k = jax.random.randint(key, (per_step,), 0, p)
            idx = blocks[k].reshape(-1)
            return x[idx], y[idx], {"obs_mask": mask[k].reshape(-1), "obs_scale": p / per_step}

        return draw, (jnp.asarray(partitions.blocks), jnp.asarray(partitions.mask))
    if batch_size is not None and batch_size < n:
        def draw(key, x, y, aux):
            idx = jax.random.randint(key, (batch_size,), 0, n)
            return x[idx], y[idx], {"n_total": n}

        return draw, ()
    return (lambda key, x, y, aux: (x, y, {})), ()


def data_weights(b: int, kw: dict):
    """Weight of each row's log-likelihood: the model's plate scale (n/b or p/a) × the mask."""
    if "obs_scale" in kw:
        scale = kw["obs_scale"]
    elif "n_total" in kw:
        scale = kw["n_total"] / b
    else:
        scale = 1.0
    mask = kw.get("obs_mask")
    return scale if mask is None else jnp.where(mask, scale, 0.0)


# ---------------------------------------------------------------------------- the scan loop


def run(ref: Reference, draw, aux, x, y, *, steps: int, chunk: int, lr: float,
        lr_halflife: float = 0.0, seed: int = 0) -> RunResult:
    """``steps`` ClippedAdam steps on ``ref.loss``, ``chunk`` per call of one jitted lax.scan,
    losses pulled to the host after each chunk (as run_svi does; no convergence test)."""
    x, y = jnp.asarray(x), jnp.asarray(y)
    key_init, key_batch = jax.random.split(jax.random.PRNGKey(seed))
    key_svi = jax.random.split(key_init, 3)[0]  # SVI.init: (state key, model seed, guide seed)
    # strong dtypes (a weakly-typed initial value would come back strong after the first chunk
    # and the second call would compile again, inside the timed steady state)
    params = jax.tree.map(lambda a: jnp.asarray(np.asarray(a)), ref.params)
    zeros = jax.tree.map(jnp.zeros_like, params)
    state = (params, zeros, zeros, jnp.asarray(np.asarray(0, np.int32)), key_svi)
    value_and_grad = jax.value_and_grad(ref.loss)

    def step_size(i):
        return lr if not lr_halflife else lr * 0.5 ** (i / lr_halflife)

    def run_chunk(state, key, x, y, aux, length):
        def body(carry, _):
            (p, m, v, i, ks), k = carry
            k, sub = jax.random.split(k)
            xb, yb, kw = draw(sub, x, y, aux)
            ks, key_step = jax.random.split(ks)
            loss, g = value_and_grad(p, key_step, xb, yb, kw)
            g = jax.tree.map(lambda g_: jnp.clip(g_, -CLIP, CLIP), g)
            m = jax.tree.map(lambda g_, m_: (1 - B1) * g_ + B1 * m_, g, m)
            v = jax.tree.map(lambda g_, v_: (1 - B2) * jnp.square(g_) + B2 * v_, g, v)
            lr_i = step_size(i)

            def update(p_, m_, v_):
                mhat = m_ / (1 - jnp.asarray(B1, m_.dtype) ** (i + 1))
                vhat = v_ / (1 - jnp.asarray(B2, m_.dtype) ** (i + 1))
                return p_ - lr_i * mhat / (jnp.sqrt(vhat) + EPS)

            p = jax.tree.map(update, p, m, v)
            return ((p, m, v, i + 1, ks), k), loss

        (state, key), losses = jax.lax.scan(body, (state, key), None, length=length)
        return state, key, losses

    run_chunk = jax.jit(run_chunk, static_argnums=5)
    losses, done, first = [], 0, (0, 0.0)
    start = time.perf_counter()
    while done < steps:
        length = min(chunk, steps - done)
        t = time.perf_counter()
        state, key_batch, chunk_losses = run_chunk(state, key_batch, x, y, aux, length)
        losses.append(np.asarray(chunk_losses))
        if done == 0:
            first = (length, time.perf_counter() - t)
        done += length
    seconds = time.perf_counter() - start
    return RunResult(state[0], np.concatenate(losses), done, seconds, first)


# ------------------------------------------------------------------------------- densities


def normal_logpdf(x, loc, scale):
    z = (x - loc) / scale
    return -0.5 * z**2 - jnp.log(scale) - 0.5 * LOG_2PI


def std_normal_logpdf(eps):
    return -0.5 * eps**2 - 0.5 * LOG_2PI


def prior_logpdf(h, x):
    """log density of a role-"prior" hyperparameter (``ssgp_ppl.model.ssgp.Hyper.prior``)."""
    if h.dist == "half_normal":
        return math.log(2.0) + normal_logpdf(x, 0.0, h.scale)
    if h.dist == "half_cauchy":
        return math.log(2.0) - math.log(math.pi * h.scale) - jnp.log1p((x / h.scale) ** 2)
    if h.dist == "lognormal":
        lx = jnp.log(x)
        return normal_logpdf(lx, h.loc, h.scale) - lx
    if h.dist == "normal":
        return normal_logpdf(x, h.loc, h.scale)
    raise NotHandWritten(f"prior {h.dist}")


def log_lik(name: str, y, f, scale):
    if name == "gaussian":
        return normal_logpdf(y, f, scale)
    if name == "probit":
        return norm.logcdf((2.0 * y - 1.0) * f)
    if name == "poisson":
        return y * f - jnp.exp(f) - gammaln(y + 1.0)
    raise NotHandWritten(f"likelihood {name}")


HERMITE = 32  # ssgp_ppl.model.likelihoods.QUADRATURE_NODES


def expected_log_lik(name: str, y, mu, var, scale):
    """E_{N(f | mu, var)} log p(y | f) as ``Likelihood.expected_log_prob``."""
    if name == "gaussian":
        return normal_logpdf(y, mu, scale) - 0.5 * var / scale**2
    if name == "poisson":
        return y * mu - jnp.exp(mu + 0.5 * var) - gammaln(y + 1.0)
    if name == "probit":  # Gauss-Hermite with 32 nodes
        t, w = np.polynomial.hermite.hermgauss(HERMITE)
        eps = jnp.asarray(np.sqrt(2.0) * t, mu.dtype)
        wts = jnp.asarray(w / np.sqrt(np.pi), mu.dtype)
        f = mu[..., None] + jnp.sqrt(var)[..., None] * eps
        return jnp.sum(wts * norm.logcdf((2.0 * y[..., None] - 1.0) * f), axis=-1)
    raise NotHandWritten(f"likelihood {name}")


def log_expected_lik(name: str, y, mu, var, scale):
    """log E_{N(f | mu, var)} p(y | f) in closed form (``gradient = "exact"``)."""
    if name == "gaussian":
        return normal_logpdf(y, mu, jnp.sqrt(var + scale**2))
    if name == "probit":
        return norm.logcdf((2.0 * y - 1.0) * mu / jnp.sqrt(1.0 + var))
    raise NotHandWritten(f"log E_q p(y | f) in closed form under {name}")


def predictive_mean(name: str, mu, var):
    if name == "gaussian":
        return mu
    if name == "probit":
        return norm.cdf(mu / jnp.sqrt(1.0 + var))
    if name == "poisson":
        return jnp.exp(mu + 0.5 * var)
    raise NotHandWritten(f"likelihood {name}")


def gaussian_kl(loc, tril_diag_sq_sum, logdet_q, prior_sd, dim):
    """KL(N(loc, LLᵀ) ‖ N(0, prior_sd² I)) from ΣL², log|LLᵀ| (``objectives.gaussian_kl``)."""
    return 0.5 * (tril_diag_sq_sum / prior_sd**2 + loc @ loc / prior_sd**2 - dim
                  + 2.0 * dim * jnp.log(prior_sd) - logdet_q)


# ------------------------------------------------------------------------- hyperparameters


def _learned_init(spec, name, shape=()):
    h = getattr(spec, name)
    return {name: jnp.log(jnp.full(shape, h.value) if shape else jnp.asarray(h.value))} \
        if h.role == "learned" else {}


def _hyper(spec, params, name, shape=()):
    """A learned (exp of its unconstrained param) or fixed hyperparameter."""
    h = getattr(spec, name)
    if h.role == "learned":
        return jnp.exp(params[name])
    if h.role == "fixed":
        return jnp.full(shape, h.value) if shape else jnp.asarray(h.value)
    raise NotHandWritten(f"{name} with a prior")


def _scalar_hypers_init(spec) -> dict:
    out = {}
    for name in spec.hyper_names():
        out.update(_learned_init(spec, name))
    return out


def _noise(spec, params):
    return _hyper(spec, params, "noise") if spec.lik.has_scale else jnp.ones(())


def _theta_init(spec):
    return spec.spectral_points / (TWO_PI * spec.lengthscales.value)


def _alpha_init(spec, init_scale):
    """b₀ = vec(θ₀, 0) and σ₀ (``ssgp_ppl.model.guides.alpha_init``)."""
    theta0 = _theta_init(spec)
    theta_sd = jnp.full(theta0.shape, 1.0 / (TWO_PI * spec.lengthscales.value))
    s_sd = jnp.full((2 * spec.m,), spec.signal.value / jnp.sqrt(spec.m))
    loc = jnp.concatenate([theta0.ravel(), jnp.zeros(2 * spec.m)])
    return loc, init_scale * jnp.concatenate([theta_sd.ravel(), s_sd])


def _alpha_hypers_init(spec) -> dict:
    """The learned hyperparameters of a model whose latents are exactly (θ, s)."""
    out = _scalar_hypers_init(spec)
    out.update(_learned_init(spec, "lengthscales", (spec.d,)))
    return out


def _check(cond: bool, what: str):
    if not cond:
        raise NotHandWritten(what)


# ------------------------------------------------------------------------- type-II ML (ssgp)


def ml_reference(spec) -> Reference:
    """−log p(y | θ, σ_s, σ_n) with s integrated out (LG 2010 eq. 8, ``marginal_log_likelihood``):
    a Cholesky of the 2m × 2m matrix A = ΦᵀΦ + (mσ_n²/σ_s²) I, on the full batch. The package's
    Cholesky with jitter escalation (``ssgp_ppl.model.linalg.cholesky``) is used as is."""
    _check(spec.nuisance == "marginalized" and spec.lik.name == "gaussian"
           and not spec.latent_sites(), "ML references cover the marginalised Gaussian model")
    params = _scalar_hypers_init(spec)
    if spec.parameterization == "scaled":
        params.update(_learned_init(spec, "inverse_lengthscales", (spec.d,)))
    else:
        _check(spec.frequencies == "learned", "free frequencies must be learned")
        params["frequencies"] = _theta_init(spec)

    def loss(params, key, x, y, kw):
        noise, signal = _hyper(spec, params, "noise"), _hyper(spec, params, "signal")
        if spec.parameterization == "scaled":
            lam = _hyper(spec, params, "inverse_lengthscales", (spec.d,))
            freq = spec.spectral_points * lam / TWO_PI
        else:
            freq = params["frequencies"]
        phi = features(x, freq)
        n, two_m = phi.shape
        m = two_m // 2
        ratio = m * noise**2 / signal**2
        chol = cholesky(phi.T @ phi + ratio * jnp.eye(two_m, dtype=phi.dtype))
        w = cho_solve((chol, True), phi.T @ y)
        resid = y - phi @ w
        quad = (resid @ resid + ratio * (w @ w)) / noise**2
        logdet = 2.0 * jnp.sum(jnp.log(jnp.diagonal(chol)))
        return -(-0.5 * quad - 0.5 * logdet + m * jnp.log(ratio)
                 - 0.5 * n * jnp.log(2 * math.pi * noise**2))

    return Reference(HAND_WRITTEN, params, loss, "marginal likelihood (Cholesky of 2m × 2m)")


# ------------------------------------------------------- Trace_ELBO over (θ, s): svbssgp, vssgp


def _free_alpha_model(spec, params, theta, s, x, y, kw):
    """log p(θ | ℓ) + log p(s | σ_s) + Σ wᵢ log p(yᵢ | φ(xᵢ)ᵀs): the model's latent and data
    terms for the free parameterisation (SE density)."""
    ell = _hyper(spec, params, "lengthscales", (spec.d,))
    signal = _hyper(spec, params, "signal")
    theta_sd = jnp.broadcast_to(1.0 / (TWO_PI * ell), theta.shape)
    lp = jnp.sum(normal_logpdf(theta, 0.0, theta_sd))
    lp = lp + jnp.sum(normal_logpdf(s, 0.0, signal / math.sqrt(spec.m)))
    f = features(x, theta) @ s
    w = data_weights(x.shape[0], kw)
    return lp + jnp.sum(w * log_lik(spec.lik.name, y, f, _noise(spec, params)))


def _check_alpha(spec, what):
    _check(spec.parameterization == "free" and spec.latent_sites() == ("frequencies", "nuisance")
           and spec.density.gaussian and spec.lik.name in ("gaussian", "probit", "poisson"),
           f"{what}: latents (θ, s) of the free SE model")


def _unit_tril(v, dim: int):
    """U (dim, dim) from its unconstrained vector, as NumPyro's ``lower_cholesky`` constraint
    stores it: the entries below the diagonal row by row, then the log of the diagonal."""
    rows, cols = jnp.tril_indices(dim, -1)
    return jnp.zeros((dim, dim), v.dtype).at[rows, cols].set(v[:-dim]) + jnp.diag(jnp.exp(v[-dim:]))


def joint_affine_elbo(spec, init_scale: float) -> Reference:
    """Trace_ELBO (one particle) of the joint affine guide α = M z + b, z ~ N(0, I),
    M = diag(σ₀) U, U lower triangular: log q(α) = log N(z) − log|det M|, the sum of log σ₀ and
    of U's unconstrained log diagonal."""
    _check_alpha(spec, "joint_affine")
    m, d = spec.m, spec.d
    n_theta = m * d
    loc0, scale0 = _alpha_init(spec, init_scale)
    dim = loc0.shape[0]
    log_scale0 = jnp.sum(jnp.log(scale0))
    params = {"alpha_matrix": jnp.zeros(dim * (dim + 1) // 2), "alpha_loc": loc0,
              **_alpha_hypers_init(spec)}  # U = I

    def loss(params, key, x, y, kw):
        guide_key = jax.random.split(key)[1]  # (model seed, guide seed)
        z = jax.random.normal(jax.random.split(guide_key)[1], (dim,), x.dtype)  # 1st guide site
        unit = _unit_tril(params["alpha_matrix"], dim)
        alpha = (scale0[:, None] * unit) @ z + params["alpha_loc"]
        log_q = jnp.sum(std_normal_logpdf(z)) - (log_scale0 + jnp.sum(params["alpha_matrix"][-dim:]))
        log_p = _free_alpha_model(spec, params, alpha[:n_theta].reshape(m, d), alpha[n_theta:],
                                  x, y, kw)
        return log_q - log_p

    return Reference(HAND_WRITTEN, params, loss, "z ~ N(0, I_D), U lower triangular")


def mean_field_elbo(spec, init_scale: float) -> Reference:
    """Trace_ELBO (one particle) of the mean-field guide: θ, s independent Gaussians."""
    _check_alpha(spec, "mean_field")
    m, d = spec.m, spec.d
    n_theta = m * d
    loc0, scale0 = _alpha_init(spec, init_scale)
    params = {"frequencies_loc": loc0[:n_theta].reshape(m, d),
              "frequencies_scale": jnp.log(scale0[:n_theta].reshape(m, d)),
              "nuisance_loc": loc0[n_theta:], "nuisance_scale": jnp.log(scale0[n_theta:]),
              **_alpha_hypers_init(spec)}

    def loss(params, key, x, y, kw):
        g = jax.random.split(key)[1]
        g, k_theta = jax.random.split(g)
        k_s = jax.random.split(g)[1]
        fs, ns = jnp.exp(params["frequencies_scale"]), jnp.exp(params["nuisance_scale"])
        e_theta = jax.random.normal(k_theta, (m, d), x.dtype)
        e_s = jax.random.normal(k_s, (2 * m,), x.dtype)
        theta = params["frequencies_loc"] + e_theta * fs
        s = params["nuisance_loc"] + e_s * ns
        log_q = (jnp.sum(std_normal_logpdf(e_theta)) - jnp.sum(params["frequencies_scale"])
                 + jnp.sum(std_normal_logpdf(e_s)) - jnp.sum(params["nuisance_scale"]))
        return log_q - _free_alpha_model(spec, params, theta, s, x, y, kw)

    return Reference(HAND_WRITTEN, params, loss, "log q from ε (no re-standardisation)")


# --------------------------------------------------- AutoMultivariateNormal (ssgp_svi)


def _softplus_inv(y):
    return jnp.log(-jnp.expm1(-y)) + y


def auto_mvn_elbo(spec, init_scale: float = 0.1) -> Reference:
    """Trace_ELBO (one particle) of NumPyro's AutoMultivariateNormal over all latent sites, in
    the model's site order (positive hyperparameters through exp, log-Jacobians as the guide's
    Delta densities), ``auto_scale_tril`` in NumPyro's ScaledUnitLowerCholesky coordinates
    (strictly-lower entries, then softplus⁻¹ of the row scales). log q of the latent draw is
    −½‖ε‖² − Σ log Lᵢᵢ − (D/2) log 2π: no triangular solve."""
    _check(spec.parameterization == "free" and spec.frequencies == "prior"
           and spec.nuisance == "sampled" and spec.density.gaussian
           and spec.lik.name in ("gaussian", "probit", "poisson"),
           "auto_mvn: free SE model with prior frequencies and sampled s")
    m, d = spec.m, spec.d
    sites = spec.latent_sites()
    shapes = {"noise": (), "signal": (), "lengthscales": (d,), "frequencies": (m, d),
              "nuisance": (2 * m,)}
    positive = {"noise", "signal", "lengthscales"}
    init = {"noise": jnp.log(jnp.asarray(spec.noise.value)),
            "signal": jnp.log(jnp.asarray(spec.signal.value)),
            "lengthscales": jnp.log(jnp.full((d,), spec.lengthscales.value)),
            "frequencies": _theta_init(spec), "nuisance": jnp.zeros(2 * m)}
    loc0 = jnp.concatenate([jnp.reshape(init[s], -1) for s in sites])
    dim = loc0.shape[0]
    rows, cols = np.tril_indices(dim, -1)
    sizes = [int(np.prod(shapes[s])) for s in sites]
    offsets = np.cumsum([0] + sizes)
    params = {"auto_loc": loc0,
              "auto_scale_tril": jnp.concatenate([jnp.zeros(rows.size),
                                                  _softplus_inv(jnp.full((dim,), init_scale))])}
    for name in ("noise", "signal", "lengthscales"):  # learned ones stay numpyro.param sites
        if name not in sites and (name != "noise" or spec.lik.has_scale):
            params.update(_learned_init(spec, name, shapes[name]))

    def loss(params, key, x, y, kw):
        raw = params["auto_scale_tril"]
        diag = jax.nn.softplus(raw[-dim:])
        unit = jnp.zeros((dim, dim), raw.dtype).at[rows, cols].set(raw[:-dim])
        tril = (unit + jnp.eye(dim, dtype=raw.dtype)) * diag[:, None]
        g = jax.random.split(key)[1]
        eps = jax.random.normal(jax.random.split(g)[1], (dim,), x.dtype)
        u = params["auto_loc"] + tril @ eps
        log_q = jnp.sum(std_normal_logpdf(eps)) - jnp.sum(jnp.log(diag))
        val, log_p = {}, 0.0
        for site, a, b in zip(sites, offsets[:-1], offsets[1:], strict=True):
            part = u[a:b].reshape(shapes[site])
            if site in positive:
                val[site] = jnp.exp(part)
                log_q = log_q - jnp.sum(part)  # the Delta site's −log|J| of exp
            else:
                val[site] = part
        for name in ("noise", "signal", "lengthscales"):
            if name in val:
                log_p = log_p + jnp.sum(prior_logpdf(getattr(spec, name), val[name]))
        noise = val["noise"] if "noise" in val else _noise(spec, params)
        signal = val["signal"] if "signal" in val else _hyper(spec, params, "signal")
        ell = val["lengthscales"] if "lengthscales" in val else _hyper(spec, params,
                                                                        "lengthscales", (d,))
        theta, s = val["frequencies"], val["nuisance"]
        log_p = log_p + jnp.sum(normal_logpdf(theta, 0.0, jnp.broadcast_to(
            1.0 / (TWO_PI * ell), theta.shape)))
        log_p = log_p + jnp.sum(normal_logpdf(s, 0.0, signal / math.sqrt(m)))
        w = data_weights(x.shape[0], kw)
        log_p = log_p + jnp.sum(w * log_lik(spec.lik.name, y, features(x, theta) @ s, noise))
        return log_q - log_p

    return Reference(HAND_WRITTEN, params, loss, f"full-rank Gaussian over {dim} dims, no solve")


# ------------------------------------- exact-in-s objectives: beta_elbo, dlm_log, dlm_square


def conditional_objective(spec, guide_name: str, kind: str, *, beta: float, particles: int,
                          gradient: str, init_scale: float) -> Reference:
    """``ssgp_ppl.inference.objectives._loss``: per particle a draw of θ, q(s | θ) = N(μ_s, L_sL_sᵀ) in
    closed form, q(fᵢ | θ) = N(φᵢᵀμ_s, ‖L_sᵀφᵢ‖²), KL = log q(θ) − log p(θ) + KL(q(s|θ) ‖ p(s)).

    joint_affine: L = M (lower triangular); z_θ = L_θθ⁻¹(θ − b_θ) is the draw itself, and
    log q(θ) = log N(z_θ; 0, I) − log|det L_θθ| (the package solves for z_θ;
    tests/model/test_guides.py checks its value against the guide's log q(α) − log q(s | θ)).
    mean_field: log q(θ) from ε, s not drawn, Var f = (Φ ∘ Φ) σ_s²."""
    _check_alpha(spec, kind)
    _check(kind in ("elbo", "dlm_log", "dlm_square"), f"objective {kind}")
    _check(kind != "dlm_log" or gradient == "exact", f"dlm_log with gradient {gradient}")
    lik = spec.lik.name
    if kind == "dlm_log":
        _check(lik in ("gaussian", "probit"), "dlm_log exact needs gaussian or probit")
    m, d = spec.m, spec.d
    n_theta = m * d
    two_m = 2 * m
    loc0, scale0 = _alpha_init(spec, init_scale)
    dim = loc0.shape[0]
    if guide_name == "joint_affine":
        params = {"alpha_matrix": jnp.zeros(dim * (dim + 1) // 2), "alpha_loc": loc0}  # U = I
    elif guide_name == "mean_field":
        params = {"frequencies_loc": loc0[:n_theta].reshape(m, d),
                  "frequencies_scale": jnp.log(scale0[:n_theta].reshape(m, d)),
                  "nuisance_loc": loc0[n_theta:], "nuisance_scale": jnp.log(scale0[n_theta:])}
    else:
        raise NotHandWritten(f"guide {guide_name} under {kind}")
    params.update(_alpha_hypers_init(spec))

    def loss(params, key, x, y, kw):
        ell = _hyper(spec, params, "lengthscales", (d,))
        signal = _hyper(spec, params, "signal")
        noise = _noise(spec, params)
        prior_sd = signal / math.sqrt(m)
        theta_sd = jnp.broadcast_to(1.0 / (TWO_PI * ell), (m, d))
        key_p, _ = jax.random.split(key)
        keys = jax.random.split(key_p, particles)
        if guide_name == "joint_affine":
            low = scale0[:, None] * _unit_tril(params["alpha_matrix"], dim)
            b = params["alpha_loc"]
            l_tt, l_st, l_ss = low[:n_theta, :n_theta], low[n_theta:, :n_theta], low[n_theta:, n_theta:]
            log_det_tt = jnp.sum(jnp.log(jnp.diagonal(l_tt)))
            tril_sq = jnp.sum(l_ss**2)
            logdet_s = 2.0 * jnp.sum(jnp.log(jnp.diagonal(l_ss)))

            def one(k):
                z = jax.random.normal(jax.random.split(k)[1], (dim,), x.dtype)
                u = z[:n_theta]  # θ − b_θ = L_θθ z_θ
                theta = (l_tt @ u + b[:n_theta]).reshape(m, d)
                loc_s = b[n_theta:] + l_st @ u
                log_q = jnp.sum(std_normal_logpdf(u)) - log_det_tt
                phi = features(x, theta)
                var = jnp.sum((phi @ l_ss) ** 2, axis=-1)
                kl_s = gaussian_kl(loc_s, tril_sq, logdet_s, prior_sd, two_m)
                return phi @ loc_s, var, log_q, theta, kl_s
        else:
            ns2 = jnp.exp(2.0 * params["nuisance_scale"])
            loc_s = params["nuisance_loc"]
            kl_s = gaussian_kl(loc_s, jnp.sum(ns2), 2.0 * jnp.sum(params["nuisance_scale"]),
                               prior_sd, two_m)

            def one(k):
                e = jax.random.normal(jax.random.split(k)[1], (m, d), x.dtype)
                theta = params["frequencies_loc"] + e * jnp.exp(params["frequencies_scale"])
                log_q = jnp.sum(std_normal_logpdf(e)) - jnp.sum(params["frequencies_scale"])
                phi = features(x, theta)
                return phi @ loc_s, (phi**2) @ ns2, log_q, theta, kl_s

        mu, var, log_q, theta, kl_s = jax.vmap(one)(keys)
        log_p = jnp.sum(normal_logpdf(theta, 0.0, theta_sd), axis=(1, 2))
        kl = log_q - log_p + kl_s
        w = data_weights(x.shape[0], kw)
        if kind == "elbo":
            per_row = -jnp.mean(expected_log_lik(lik, y, mu, var, noise), axis=0)
        elif kind == "dlm_log":
            inner = log_expected_lik(lik, y, mu, var, noise)
            per_row = -(logsumexp(inner, axis=0) - math.log(particles))
        else:
            yhat = predictive_mean(lik, mu, var)
            if particles >= 2:
                h = particles // 2
                per_row = (jnp.mean(yhat[:h], 0) - y) * (jnp.mean(yhat[h:2 * h], 0) - y)
            else:
                per_row = (yhat[0] - y) ** 2
        return jnp.sum(w * per_row) + beta * jnp.mean(kl)

    return Reference(HAND_WRITTEN, params, loss,
                     f"{particles} particles, exact in s; log q(θ) without slogdet / s-solve")


# ----------------------------------------------------------------- mixture (ssgp_mixture)


def mixture_elbo(spec, *, components: int, init_scale: float, spread: float,
                 samples: int) -> Reference:
    """``ssgp_ppl.model.mixture.avi_elbo`` (Nguyen & Bonilla 2014's Rao-Blackwellised score-function estimator
    and entropy bound): already pure JAX apart from reading the hyperparameters off a model trace."""
    _check_alpha(spec, "mixture")
    m, d = spec.m, spec.d
    n_theta = m * d
    locs0, scales0 = initial_components(spec, components, init_scale, spread)  # the guide's start
    params = {"alpha_loc": locs0, "alpha_scale": jnp.log(scales0), **_alpha_hypers_init(spec)}
    lik = spec.lik.name

    def loss(params, key, x, y, kw):
        noise = _noise(spec, params)
        signal = _hyper(spec, params, "signal")
        ell = _hyper(spec, params, "lengthscales", (d,))
        loc, scale = params["alpha_loc"], jnp.exp(params["alpha_scale"])
        kc = loc.shape[0]
        w = data_weights(x.shape[0], kw)
        eps = jax.random.normal(key, (kc, samples, n_theta), x.dtype)
        theta = jax.lax.stop_gradient(loc[:, None, :n_theta] + scale[:, None, :n_theta] * eps)

        def loglik(th, s_loc, s_sd):
            phi = features(x, th.reshape(m, d))
            return jnp.sum(w * expected_log_lik(lik, y, phi @ s_loc, (phi**2) @ s_sd**2, noise))

        ell_ks = jax.vmap(lambda th_k, sl, ss: jax.vmap(lambda th: loglik(th, sl, ss))(th_k))(
            theta, loc[:, n_theta:], scale[:, n_theta:])
        log_q = jnp.sum(normal_logpdf(theta, loc[:, None, :n_theta], scale[:, None, :n_theta]),
                        axis=-1)
        c = jax.lax.stop_gradient(ell_ks)
        baseline = (jnp.sum(c, axis=1, keepdims=True) - c) / (samples - 1)
        score = jnp.mean((c - baseline) * (log_q - jax.lax.stop_gradient(log_q)))
        theta_sd = jnp.broadcast_to(1.0 / (TWO_PI * ell), (m, d)).ravel()
        prior_sd = jnp.concatenate([theta_sd, jnp.full((2 * m,), signal / math.sqrt(m))])
        var = scale**2
        cross = jnp.mean(jnp.sum(-0.5 * (jnp.log(2 * math.pi * prior_sd**2)
                                         + (loc**2 + var) / prior_sd**2), axis=-1))
        s2 = var[:, None, :] + var[None, :, :]
        diff = loc[:, None, :] - loc[None, :, :]
        log_n = -0.5 * jnp.sum(jnp.log(2 * math.pi * s2) + diff**2 / s2, axis=-1)
        entropy = -jnp.mean(logsumexp(log_n, axis=1) - math.log(kc))
        return -(jnp.mean(ell_ks) + cross + entropy + score)

    return Reference(HAND_WRITTEN, params, loss, f"K = {components}, {samples} θ draws each")


# --------------------------------------------------------- gaussian_lambda (tan_va_svi)


def _lower_cholesky(raw, k):
    """NumPyro's LowerCholeskyTransform: strictly-lower entries, then log of the diagonal."""
    rows, cols = np.tril_indices(k, -1)
    low = jnp.zeros((k, k), raw.dtype).at[rows, cols].set(raw[:-k])
    return low + jnp.diag(jnp.exp(raw[-k:]))


def gaussian_lambda_elbo(spec, *, particles: int, init_scale: float, n_total: int) -> Reference:
    """Trace_ELBO of Tan et al. 2016's family q(λ)q(α)q(σ)q(γ) (``gaussian_lambda`` guide): Gaussian λ
    and α with Cholesky factors in NumPyro's lower-Cholesky coordinates, σ = g^(−1/2) with
    g ~ Gamma(shape, rate) (jax.random.gamma's implicit reparameterisation, as NumPyro's
    InverseGamma), log q(σ) = log Gamma(g) − log|dσ/dg|; priors half-Cauchy and N(0, 1)."""
    _check(spec.parameterization == "scaled" and spec.nuisance == "sampled"
           and spec.lik.name == "gaussian"
           and sorted(spec.latent_sites()) == sorted(("noise", "signal", "inverse_lengthscales",
                                                      "nuisance")),
           "gaussian_lambda: Tan et al. 2016's latents")
    m, d = spec.m, spec.d
    two_m = 2 * m
    lam_scale0 = math.sqrt(0.5)
    a_scale0 = init_scale * spec.signal.value / math.sqrt(m)
    params = {"inverse_lengthscales_loc": jnp.full((d,), 0.5),
              "inverse_lengthscales_scale_unit": jnp.zeros(d * (d + 1) // 2),
              "nuisance_loc": jnp.zeros(two_m),
              "nuisance_scale_unit": jnp.zeros(two_m * (two_m + 1) // 2)}
    for site, shape0 in (("signal", m - 0.5), ("noise", (n_total - 1) / 2)):
        init = getattr(spec, site).value
        params[f"{site}_shape"] = jnp.log(jnp.asarray(float(shape0)) - 0.5)
        params[f"{site}_rate"] = jnp.log(jnp.asarray((shape0 + 1.0) * init**2))

    def scale_draw(key, params, site):
        a = 0.5 + jnp.exp(params[f"{site}_shape"])
        b = jnp.exp(params[f"{site}_rate"])
        g = jax.random.gamma(key, a, (), dtype=b.dtype) / b
        sigma = jnp.power(jnp.power(g, -1.0), 0.5)
        log_q = (a * jnp.log(b) - gammaln(a) + (a - 1.0) * jnp.log(g) - b * g
                 - (math.log(0.5) - 1.5 * jnp.log(g)))
        return sigma, log_q

    def loss(params, key, x, y, kw):
        l_lam = lam_scale0 * _lower_cholesky(params["inverse_lengthscales_scale_unit"], d)
        l_a = a_scale0 * _lower_cholesky(params["nuisance_scale_unit"], two_m)
        w = data_weights(x.shape[0], kw)

        def one(k):
            g = jax.random.split(k)[1]
            g, k_lam = jax.random.split(g)
            g, k_a = jax.random.split(g)
            g, k_sig = jax.random.split(g)
            k_noise = jax.random.split(g)[1]
            e_lam = jax.random.normal(k_lam, (d,), x.dtype)
            e_a = jax.random.normal(k_a, (two_m,), x.dtype)
            lam = params["inverse_lengthscales_loc"] + l_lam @ e_lam
            s = params["nuisance_loc"] + l_a @ e_a
            signal, lq_sig = scale_draw(k_sig, params, "signal")
            noise, lq_noise = scale_draw(k_noise, params, "noise")
            log_q = (jnp.sum(std_normal_logpdf(e_lam)) - jnp.sum(jnp.log(jnp.diagonal(l_lam)))
                     + jnp.sum(std_normal_logpdf(e_a)) - jnp.sum(jnp.log(jnp.diagonal(l_a)))
                     + lq_sig + lq_noise)
            log_p = (prior_logpdf(spec.noise, noise) + prior_logpdf(spec.signal, signal)
                     + jnp.sum(prior_logpdf(spec.inverse_lengthscales, lam))
                     + jnp.sum(normal_logpdf(s, 0.0, signal / math.sqrt(m))))
            f = features(x, spec.spectral_points * lam / TWO_PI) @ s
            log_p = log_p + jnp.sum(w * normal_logpdf(y, f, noise))
            return log_p - log_q

        return -jnp.mean(jax.vmap(one)(jax.random.split(key, particles)))

    return Reference(HAND_WRITTEN, params, loss, f"{particles} particles, Gamma draws for σ, γ")


# --------------------------------------------------------------------------- dispatch


def hand_written(entry, spec, method: str, *, n_total: int) -> Reference:
    """The hand-written reference of ``entry`` trained by ``method`` (``ml`` or ``svi``), or
    :class:`NotHandWritten`."""
    if method == "ml":
        return ml_reference(spec)
    cfg = entry.settings("svi")
    guide, objective = cfg["guide"], cfg["objective"]
    own = cfg[guide]  # the guide's [inference.svi.<guide>] settings
    init_scale = own.get("init_scale", 0.1)
    if objective == "elbo":
        if guide == "mixture":
            return mixture_elbo(spec, components=own["components"], init_scale=init_scale,
                                spread=own["spread"], samples=max(cfg["mc_samples"], 2))
        _check(cfg["num_particles"] == 1 or guide == "gaussian_lambda",
               "Trace_ELBO references are for one particle (gaussian_lambda: any)")
        if guide == "joint_affine":
            _check(own["psi"] == "normal", "joint_affine with ψ = normal")
            return joint_affine_elbo(spec, init_scale)
        if guide == "mean_field":
            return mean_field_elbo(spec, init_scale)
        if guide == "auto_mvn":
            return auto_mvn_elbo(spec)
        if guide == "gaussian_lambda":
            return gaussian_lambda_elbo(spec, particles=cfg["num_particles"],
                                        init_scale=init_scale, n_total=n_total)
        raise NotHandWritten(f"guide {guide}")
    kind = {"beta_elbo": "elbo", "dlm_log": "dlm_log", "dlm_square": "dlm_square"}[objective]
    if guide == "joint_affine":
        _check(own["psi"] == "normal", "joint_affine with ψ = normal")
    particles = max(cfg["num_particles"], 2) if objective == "dlm_square" else cfg["num_particles"]
    return conditional_objective(spec, guide, kind, beta=cfg["beta"], particles=particles,
                                 gradient=cfg["gradient"], init_scale=init_scale)


def plain_loop(model, guide, loss, x_b, y_b, kw_b, *, seed: int = 0) -> Reference:
    """The package's own loss as a pure function of NumPyro's unconstrained params:
    ``loss.loss(key, constrain(params), model, guide, x, y, **kw)`` (``Trace_ELBO()`` when
    ``loss`` is None, as run_svi), with the initial params of ``SVI.init`` on the batch
    (x_b, y_b, kw_b)."""
    import numpyro
    from numpyro.infer import SVI, Trace_ELBO

    elbo = Trace_ELBO() if loss is None else loss
    svi = SVI(model, guide, numpyro.optim.Adam(1e-3), elbo)
    key_init = jax.random.split(jax.random.PRNGKey(seed))[0]
    state = svi.init(key_init, x_b, y_b, **kw_b)
    params = svi.optim.get_params(state.optim_state)
    constrain = svi.constrain_fn

    def loss_fn(params, key, x, y, kw):
        return elbo.loss(key, constrain(params), model, guide, x, y, **kw)

    return Reference(PLAIN_LOOP, params, loss_fn, "the package's loss, hand-written Adam and scan")


class PackageParts(NamedTuple):
    """What the package's training step is made of (the arguments its run_svi call receives)."""

    model: Callable
    guide: Callable
    loss: object  # run_svi's ``loss``: None (NumPyro's Trace_ELBO()) or the loss object
    particles: int  # Monte Carlo particles per step (1 for type-II ML)


def package_parts(entry, spec, method: str) -> PackageParts:
    """The package's model, guide and loss for ``method`` as ``ssgp_ppl.inference.methods.ml`` and
    ``ssgp_ppl.inference.methods.svi`` assemble them: type-II ML fits ``MAPGuide`` (``EmptyGuide`` when the
    model has no latent sites) under run_svi's default loss (None: NumPyro's Trace_ELBO()); SVI
    fits the entry's guide (``methods.svi.guide_of``) under its objective, or
    ``Trace_ELBO(num_particles)`` where the objective is the plain ELBO."""
    from numpyro.infer import Trace_ELBO

    from ssgp_ppl.inference.methods.svi import SVI, guide_of
    from ssgp_ppl.inference.objectives import make_objective
    from ssgp_ppl.model.guides import EmptyGuide, MAPGuide

    model = entry.model(spec)
    if method == "ml":
        guide = MAPGuide(spec, model) if spec.latent_sites() else EmptyGuide(spec)
        return PackageParts(model, guide, None, 1)
    s = SVI.settings(entry)
    guide = guide_of(entry, spec, model, s)
    objective = make_objective(s.objective, beta=s.beta, particles=s.num_particles,
                               gradient=s.gradient, samples=s.mc_samples, guide=guide)
    loss = objective or Trace_ELBO(num_particles=s.num_particles)
    return PackageParts(model, guide, loss, s.num_particles)
