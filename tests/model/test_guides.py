"""Tests for ssgp_ppl.model.guides: the sVBSSGP joint affine guide α = vec(θ, s) = M z + b (Hoang et al. 2017,
§3.1, Lemma 1) and the VSSGP mean-field guide (Hoang et al. 2017, Remark 2): their densities against dense
float64 references, Monte Carlo moments, smooth per-draw ELBOs, the sites they accept, and the unbiasedness
of the partition-sampled ELBO gradient (Hoang et al. 2017, §4.1 Theorem 1 / eq. 7; extended version,
App. G Prop. 2:
a partitions × b draws of z per step).
"""

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest
from jax.test_util import check_grads
from numpyro import handlers
from numpyro.infer import Trace_ELBO
from scipy import stats

from ssgp_ppl.data import datasets
from ssgp_ppl.entry import load_entry
from ssgp_ppl.errors import SSGPError
from ssgp_ppl.inference.partitions import kmeans_partitions
from ssgp_ppl.inference.runners import batch_sampler
from ssgp_ppl.model.guides import JointAffineGuide, MeanFieldGuide
from ssgp_ppl.model.ssgp import Hyper, ssgp_model

INIT_SCALE = 0.1  # the guides' default: σ₀ = 0.1 × prior std of each coordinate


def _spec(m: int, d: int):
    return load_entry("svbssgp").with_overrides([f"m={m}"]).spec(d)


def _trace(guide, params, x, seed=0):
    """Trace of one guide draw with ``params`` substituted (None: the guide's initial params)."""
    g = handlers.seed(guide, seed)
    if params is not None:
        g = handlers.substitute(g, data=params)
    return handlers.trace(g).get_trace(x)


def _guide_eval(guide, x):
    """Jitted (params, key) -> (site values, log q): log q is the sum of the log_probs of the
    guide's sample sites in its trace (auxiliary base draw included)."""

    @jax.jit
    def run(params, key):
        tr = _trace(guide, params, x, seed=key)
        log_q = sum(jnp.sum(s["fn"].log_prob(s["value"])) for s in tr.values() if s["type"] == "sample")
        return {k: s["value"] for k, s in tr.items() if s["type"] in ("sample", "param")}, log_q

    return run


def _alpha(values):
    """α = vec(θ, s) from guide site values (θ row-major, as the guide's reshape)."""
    return jnp.concatenate([values["frequencies"].ravel(), values["nuisance"]])


def _alpha_draws(guide, params, x, n, seed):
    """n independent draws of α from the guide, (n, D) numpy float64."""
    run = _guide_eval(guide, x)
    one = lambda key: _alpha(run(params, key)[0])  # noqa: E731
    return np.asarray(jax.jit(jax.vmap(one))(jax.random.split(jax.random.PRNGKey(seed), n)), np.float64)


def _init_values(guide, x):
    """The guide's site values at its initial params."""
    return _guide_eval(guide, x)({}, jax.random.PRNGKey(3))[0]


def _sigma0(spec, guide, x):
    """σ₀ read off the guide at its initial params: α = σ₀ ⊙ z + b₀ because U starts at I."""
    v = _init_values(guide, x)
    np.testing.assert_array_equal(v["alpha_matrix"], np.eye(v["alpha_base"].size))
    z = np.asarray(v["alpha_base"], np.float64)
    return (np.asarray(_alpha(v), np.float64) - np.asarray(v["alpha_loc"], np.float64)) / z


def _dense_affine(dim, seed, dtype=np.float64):
    """A random well-conditioned U (lower triangular, positive diagonal, every entry below the
    diagonal non-zero: the guide's parameter space) and a random b."""
    rng = np.random.default_rng(seed)
    u = np.tril(np.eye(dim) + 0.5 * rng.standard_normal((dim, dim)) / math.sqrt(dim))
    u[np.diag_indices(dim)] = np.abs(u[np.diag_indices(dim)]) + 0.2
    b = rng.standard_normal(dim)
    assert np.abs(u[np.tril_indices(dim, -1)]).min() > 0
    return jnp.asarray(u, dtype), jnp.asarray(b, dtype)


# --------------------------------------------------------------------------- joint affine: density


def test_joint_affine_initial_scale_is_documented_prior_std(x64):
    """σ₀ = init_scale × prior std: 1/(2πℓ₀) for θ, σ_s/√m for s (catalog init ℓ₀ = σ_s = 1)."""
    m, d = 3, 2
    spec = _spec(m, d)
    sigma0 = _sigma0(spec, JointAffineGuide(spec), jnp.zeros((4, d)))
    want = np.concatenate([np.full(m * d, INIT_SCALE / (2 * np.pi * spec.lengthscales.value)),
                           np.full(2 * m, INIT_SCALE * spec.signal.value / math.sqrt(m))])
    np.testing.assert_allclose(sigma0, want, rtol=1e-12)


@pytest.mark.parametrize("psi", ["normal", "student_t"])
def test_joint_affine_log_q_equals_dense_density(precision, psi):
    """log q(α) from the guide's sites = log ψ(M⁻¹(α − b)) − log|det M| (Lemma 1) for a random
    lower-triangular U: N(b, MMᵀ) for ψ normal, multivariate t_ν(b, MMᵀ) for ψ Student-t (ν = 4)."""
    m, d, df = 2, 3, 4.0
    spec = _spec(m, d)
    dim = m * d + 2 * m
    x = jnp.zeros((5, d))
    guide = JointAffineGuide(spec, psi=psi, df=df)
    sigma0 = _sigma0(spec, guide, x)
    u, b = _dense_affine(dim, seed=1, dtype=precision)
    params = {"alpha_matrix": u, "alpha_loc": b}
    mat = sigma0[:, None] * np.asarray(u, np.float64)  # M = diag(σ₀) U
    cov = mat @ mat.T
    rel = {np.float32: 1e-4, np.float64: 1e-10}[precision]
    run = _guide_eval(guide, x)
    for seed in range(3):
        values, log_q = run(params, jax.random.PRNGKey(seed))
        alpha = np.asarray(_alpha(values), np.float64)
        # the draw is α = M z + b with the base draw z of the auxiliary site
        z = np.asarray(values["alpha_base"], np.float64)
        np.testing.assert_allclose(alpha, mat @ z + np.asarray(b, np.float64), rtol=rel, atol=rel)
        assert log_q.dtype == precision
        if psi == "normal":
            want = stats.multivariate_normal.logpdf(alpha, np.asarray(b, np.float64), cov)
        else:
            want = stats.multivariate_t.logpdf(alpha, loc=np.asarray(b, np.float64), shape=cov, df=df)
            if precision is np.float64:  # and NumPyro's own dense density agrees
                ref = dist.MultivariateStudentT(df, b, scale_tril=jnp.linalg.cholesky(jnp.asarray(cov)))
                assert float(ref.log_prob(jnp.asarray(alpha))) == pytest.approx(want, rel=1e-10)
        assert float(log_q) == pytest.approx(want, rel=rel)


def test_joint_affine_factor_is_lower_triangular_with_positive_diagonal(x64):
    """The guide's U lives on lower-triangular matrices with a positive diagonal (every q(α) of the
    family has exactly one such factor of MMᵀ): an unconstrained vector maps onto one."""
    from numpyro.distributions.transforms import biject_to

    m, d = 2, 2
    spec = _spec(m, d)
    dim = m * d + 2 * m
    tr = _trace(JointAffineGuide(spec), None, jnp.zeros((3, d)))
    site = tr["alpha_matrix"]
    raw = jnp.asarray(np.random.default_rng(3).standard_normal(dim * (dim + 1) // 2))
    u = np.asarray(biject_to(site["kwargs"]["constraint"])(raw))
    assert np.all(u[np.triu_indices(dim, 1)] == 0) and np.all(np.diag(u) > 0)


@pytest.mark.parametrize("builder", [JointAffineGuide, MeanFieldGuide], ids=["joint_affine", "mean_field"])
def test_alpha_guides_cover_theta_alone_when_s_is_integrated_out(builder, x64):
    """With s integrated out the guide is q(θ) alone: one frequencies site, and for the joint affine
    guide log q(θ) = N(θ | b, MMᵀ) over the m·d coordinates."""
    m, d = 2, 3
    spec = dataclasses.replace(_spec(m, d), nuisance="marginalized")
    guide = builder(spec)
    dim = m * d
    x = jnp.zeros((3, d))
    params = {}
    if builder is JointAffineGuide:
        u, b = _dense_affine(dim, seed=8)
        params = {"alpha_matrix": u, "alpha_loc": b}
    values, log_q = _guide_eval(guide, x)(params, jax.random.PRNGKey(1))
    assert "nuisance" not in values and values["frequencies"].shape == (m, d)
    if builder is JointAffineGuide:
        mat = np.asarray(guide.scale0)[:, None] * np.asarray(u)
        want = stats.multivariate_normal.logpdf(np.asarray(values["frequencies"]).ravel(),
                                                np.asarray(b), mat @ mat.T)
        assert float(log_q) == pytest.approx(want, rel=1e-10)


def test_noncentred_joint_affine_density_and_conditional(x64):
    """Non-centred, α holds (θ·2πℓ, s·√m/σ_s): θ = D_θ ε, s = D_s η, so q(θ, s) = N(D b, D MMᵀ D) for
    the learned ℓ and σ_s in ``params``; ``conditional_and_marginal`` agrees with that density
    (log q(θ) = log q(θ, s) − log q(s | θ))."""
    m, d = 2, 2
    spec = _spec(m, d)
    guide = JointAffineGuide(spec, noncentred=True)
    dim = m * d + 2 * m
    x = jnp.zeros((3, d))
    u, b = _dense_affine(dim, seed=9)
    ell, signal = jnp.asarray([0.7, 2.5]), jnp.asarray(1.8)
    params = {"alpha_matrix": u, "alpha_loc": b, "lengthscales": ell, "signal": signal}
    scale = np.concatenate([np.tile(1.0 / (2 * np.pi * np.asarray(ell)), m),
                            np.full(2 * m, float(signal) / np.sqrt(m))])
    mat = scale[:, None] * np.asarray(guide.scale0)[:, None] * np.asarray(u)
    for seed in range(3):
        values, log_q = _guide_eval(guide, x)(params, jax.random.PRNGKey(seed))
        alpha = np.asarray(_alpha(values))
        want = stats.multivariate_normal.logpdf(alpha, scale * np.asarray(b), mat @ mat.T)
        assert float(log_q) == pytest.approx(want, rel=1e-9)
        draw = {k: values[k] for k in ("frequencies", "nuisance")}
        loc, tril, log_q_theta = guide.conditional_and_marginal(params, draw)
        log_q_s = dist.MultivariateNormal(loc, scale_tril=tril).log_prob(draw["nuisance"])
        assert float(log_q_theta) == pytest.approx(float(log_q) - float(log_q_s), rel=1e-9)


# --------------------------------------------------------------------------- joint affine: moments


@pytest.mark.parametrize("psi,df", [("normal", None), ("student_t", 10.0)], ids=["normal", "student_t"])
def test_joint_affine_sample_moments(x64, psi, df):
    """E α = b and Cov α = MMᵀ (ψ normal) or ν/(ν−2) MMᵀ (ψ Student-t), within Monte Carlo error.

    ν = 10 rather than 4 for this check: with ν = 4 the fourth moment of α is infinite, so the
    sample covariance has no finite standard error to compare against.
    """
    m, d, n = 2, 2, 40_000
    spec = _spec(m, d)
    dim = m * d + 2 * m
    x = jnp.zeros((3, d))
    guide = JointAffineGuide(spec, psi=psi, df=df or 5.0)
    sigma0 = _sigma0(spec, guide, x)
    u, b = _dense_affine(dim, seed=2)
    mat = sigma0[:, None] * np.asarray(u)
    base_cov = mat @ mat.T
    cov = base_cov if psi == "normal" else df / (df - 2) * base_cov
    alpha = _alpha_draws(guide, {"alpha_matrix": u, "alpha_loc": b}, x, n, seed=11)
    centred = alpha - np.asarray(b)
    z_mean = centred.mean(0) / np.sqrt(np.diag(cov) / n)
    assert np.abs(z_mean).max() < 4.5, z_mean
    # second moments about the known mean b: mean of products, SE from the products' spread
    iu = np.triu_indices(dim)
    prods = centred[:, iu[0]] * centred[:, iu[1]]
    se = prods.std(0, ddof=1) / math.sqrt(n)
    z_cov = (prods.mean(0) - cov[iu]) / se
    assert np.abs(z_cov).max() < 4.5, z_cov
    if psi == "student_t":  # the test can tell ν/(ν−2) MMᵀ from MMᵀ
        assert np.abs((prods.mean(0) - base_cov[iu]) / se).max() > 10


# --------------------------------------------------------------------------- smooth per-draw ELBO


@pytest.mark.parametrize("guide_name", ["joint_affine-normal", "mean_field"])
def test_per_draw_elbo_gradients(x64, pendulum, guide_name):
    """For a fixed key (fixed z) the ELBO surrogate is smooth in the guide's params and the type-II
    hyperparameters σ_n, σ_s, ℓ: reverse-mode gradients match finite differences. (For fixed z, ψ
    only changes the constant log ψ(z), so Student-t adds nothing here but compile time; its
    gradients are exercised by the unbiasedness tests below.)"""
    x, y = jnp.asarray(pendulum.x_train[:20]), jnp.asarray(pendulum.y_train[:20])
    m, d = 2, x.shape[1]
    spec = _spec(m, d)
    model = functools.partial(ssgp_model, spec=spec)
    rng = np.random.default_rng(5)
    hyper = {"noise": np.float64(0.5), "signal": np.float64(1.1), "lengthscales": rng.uniform(0.8, 1.5, d)}
    if guide_name == "mean_field":
        guide = MeanFieldGuide(spec)
        init = _init_values(guide, x)
        params = {k: init[k] * (1 + 0.2 * rng.uniform(size=init[k].shape))
                  for k in ("frequencies_loc", "frequencies_scale", "nuisance_loc", "nuisance_scale")}
    else:
        guide = JointAffineGuide(spec, psi=guide_name.split("-")[1], df=4.0)
        u, _ = _dense_affine(m * d + 2 * m, seed=6)
        b = _init_values(guide, x)["alpha_loc"] + 0.05 * rng.standard_normal(m * d + 2 * m)
        params = {"alpha_matrix": u, "alpha_loc": b}
    params = {k: jnp.asarray(v, jnp.float64) for k, v in {**params, **hyper}.items()}  # strong types
    key = jax.random.PRNGKey(7)

    @jax.jit
    def loss(p):
        return Trace_ELBO().loss(key, p, model, guide, x, y)

    check_grads(loss, (params,), order=1, modes=["rev"], eps=1e-6)
    grads = jax.grad(loss)(params)
    assert all(float(jnp.max(jnp.abs(g))) > 1e-6 for g in jax.tree.leaves(grads))


# --------------------------------------------------------------------------- mean field


def test_mean_field_params_and_density(precision):
    """Params are exactly the four documented names, and log q is a sum of independent Normals."""
    m, d = 2, 3
    spec = _spec(m, d)
    x = jnp.zeros((4, d))
    guide = MeanFieldGuide(spec)
    tr = _trace(guide, None, x)
    names = {k for k, site in tr.items() if site["type"] == "param"}
    assert names == {"frequencies_loc", "frequencies_scale", "nuisance_loc", "nuisance_scale"}
    assert {k for k, site in tr.items() if site["type"] == "sample"} == {"frequencies", "nuisance"}
    rng = np.random.default_rng(8)
    params = {"frequencies_loc": rng.standard_normal((m, d)),
              "frequencies_scale": rng.uniform(0.1, 2, (m, d)),
              "nuisance_loc": rng.standard_normal(2 * m), "nuisance_scale": rng.uniform(0.1, 2, 2 * m)}
    params = {k: jnp.asarray(v, precision) for k, v in params.items()}
    values, log_q = _guide_eval(guide, x)(params, jax.random.PRNGKey(1))
    want = (stats.norm.logpdf(np.asarray(values["frequencies"], np.float64),
                              np.asarray(params["frequencies_loc"], np.float64),
                              np.asarray(params["frequencies_scale"], np.float64)).sum()
            + stats.norm.logpdf(np.asarray(values["nuisance"], np.float64),
                                np.asarray(params["nuisance_loc"], np.float64),
                                np.asarray(params["nuisance_scale"], np.float64)).sum())
    assert log_q.dtype == precision
    assert float(log_q) == pytest.approx(want, rel={np.float32: 1e-5, np.float64: 1e-12}[precision])


def test_mean_field_frequencies_and_nuisance_independent_joint_affine_correlated(x64):
    """Cross-covariance of θ and s: ≈ 0 under mean_field (Remark 2), = the (θ, s) block of MMᵀ
    under joint_affine with dense U, which is clearly nonzero (θ and s interact a posteriori)."""
    m, d, n = 2, 2, 40_000
    spec = _spec(m, d)
    n_theta, dim = m * d, m * d + 2 * m
    x = jnp.zeros((3, d))

    def cross(alpha):
        c = alpha - alpha.mean(0)
        prods = c[:, :n_theta, None] * c[:, None, n_theta:]  # (n, mθ, 2m)
        return prods.mean(0), prods.std(0, ddof=1) / math.sqrt(n)

    mf = MeanFieldGuide(spec)
    rng = np.random.default_rng(9)
    mf_params = {"frequencies_loc": rng.standard_normal((m, d)),
                 "frequencies_scale": rng.uniform(0.5, 2, (m, d)),
                 "nuisance_loc": rng.standard_normal(2 * m), "nuisance_scale": rng.uniform(0.5, 2, 2 * m)}
    est, se = cross(_alpha_draws(mf, mf_params, x, n, seed=12))
    assert np.abs(est / se).max() < 4.5

    ja = JointAffineGuide(spec)
    sigma0 = _sigma0(spec, ja, x)
    u, b = _dense_affine(dim, seed=10)
    mat = sigma0[:, None] * np.asarray(u)
    want = (mat @ mat.T)[:n_theta, n_theta:]
    est, se = cross(_alpha_draws(ja, {"alpha_matrix": u, "alpha_loc": b}, x, n, seed=13))
    assert np.abs((est - want) / se).max() < 4.5
    assert np.abs(est / se).max() > 20  # and the test would notice independence


# --------------------------------------------------------------------------- accepted sites


def _bad_specs():
    base = _spec(2, 2)
    return {
        "noise_prior": dataclasses.replace(base, noise=Hyper("prior", 0.3)),
        "signal_prior": dataclasses.replace(base, signal=Hyper("prior", 1.0)),
        "lengthscales_prior": dataclasses.replace(base, lengthscales=Hyper("prior", 1.0, "lognormal")),
        "scaled": dataclasses.replace(base, parameterization="scaled"),
        "scaled_prior": dataclasses.replace(base, parameterization="scaled",
                                            inverse_lengthscales=Hyper("prior", 1.0, "normal")),
        "learned_frequencies": dataclasses.replace(base, frequencies="learned"),
    }


@pytest.mark.parametrize("builder", [JointAffineGuide, MeanFieldGuide],
                         ids=["joint_affine", "mean_field"])
@pytest.mark.parametrize("case", list(_bad_specs()))
def test_guides_reject_other_latent_sites(builder, case):
    spec = _bad_specs()[case]
    with pytest.raises(SSGPError, match="covers exactly the frequencies") as err:
        builder(spec)
    assert f"latent sites are {', '.join(spec.latent_sites())}" in str(err.value)


def test_joint_affine_rejects_unknown_psi():
    with pytest.raises(SSGPError, match="guide 'joint_affine': psi: 'laplace' is not one of "
                                        "normal, student_t"):
        JointAffineGuide(_spec(2, 2), psi="laplace")


# --------------------------------------------------------------------------- unbiasedness (§4.1)

N_ROWS, M, P, A, B = 120, 3, 6, 2, 2  # rows, frequencies, partitions p, per step a, particles b
K = 4000  # paired gradient draws
Z_MAX = 4.5
SETTINGS = ["joint_affine-normal", "joint_affine-student_t", "mean_field"]


def _setting_params(name, spec, guide, x, d):
    """A non-trivial point: dense U, shifted b (or perturbed mean-field params), ARD ℓ."""
    rng = np.random.default_rng(21)
    init = _init_values(guide, x)
    if name == "mean_field":
        params = {k: init[k] * (1 + 0.3 * rng.uniform(size=init[k].shape))
                  for k in ("frequencies_loc", "frequencies_scale", "nuisance_loc", "nuisance_scale")}
    else:
        dim = init["alpha_loc"].size
        params = {"alpha_matrix": _dense_affine(dim, seed=22)[0],
                  "alpha_loc": init["alpha_loc"] + 0.05 * rng.standard_normal(dim)}
    params.update(noise=jnp.asarray(0.4), signal=jnp.asarray(1.2),
                  lengthscales=jnp.asarray(rng.uniform(0.8, 1.5, d)))
    return params


@pytest.fixture(scope="module", params=SETTINGS)
def gradient_draws(request):
    """K draws, each with its own z key and partition key, of three gradients of
    Trace_ELBO(num_particles=b).loss: the partition-sampled one (a blocks, mask, scale p/a), the
    full-data one with the same z key, and the wrongly scaled one (scale 1). float64, numpy."""
    previous = bool(jax.config.read("jax_enable_x64"))
    jax.config.update("jax_enable_x64", True)
    try:
        data = datasets.load("pendulum")
        x, y = jnp.asarray(data.x_train[:N_ROWS]), jnp.asarray(data.y_train[:N_ROWS])
        n, d = x.shape
        spec = _spec(M, d)
        model = functools.partial(ssgp_model, spec=spec)
        name = request.param
        guide = (MeanFieldGuide(spec) if name == "mean_field"
                 else JointAffineGuide(spec, psi=name.split("-")[1], df=4.0))
        params = _setting_params(name, spec, guide, x, d)
        parts = kmeans_partitions(np.asarray(x), P, seed=0)
        p = parts.count  # k-means may cut a large cluster: p is what batch_sampler scales by
        draw, aux = batch_sampler(n, partitions=parts, per_step=A)
        elbo = Trace_ELBO(num_particles=B)

        def grad(key, *args, **kw):
            return jax.grad(lambda pr: elbo.loss(key, pr, model, guide, *args, **kw))(params)

        def three(key_z, key_batch):
            xb, yb, kw = draw(key_batch, x, y, aux)
            assert kw["obs_scale"] == p / A
            return (grad(key_z, xb, yb, **kw), grad(key_z, x, y),
                    grad(key_z, xb, yb, obs_mask=kw["obs_mask"], obs_scale=1.0))

        keys_z = jax.random.split(jax.random.PRNGKey(31), K)
        keys_b = jax.random.split(jax.random.PRNGKey(32), K)
        out = jax.jit(jax.vmap(three))(keys_z, keys_b)
        flat = [{k: np.asarray(v, np.float64).reshape(K, -1) for k, v in g.items()} for g in out]
        return {"stochastic": flat[0], "full": flat[1], "unscaled": flat[2], "p": p}
    finally:
        jax.config.update("jax_enable_x64", previous)


def paired_z(a: dict, b: dict) -> dict:
    """Per-site |mean(a − b)| / SE over paired draws; components with zero spread are returned
    separately as their largest |difference| (they must then be exactly equal)."""
    out = {}
    for site in a:
        diff = a[site] - b[site]
        se = diff.std(0, ddof=1) / math.sqrt(diff.shape[0])
        zero = se == 0
        z = np.abs(diff.mean(0))[~zero] / se[~zero]
        out[site] = (z.max(initial=0.0), np.abs(diff[:, zero]).max(initial=0.0))
    return out


def test_partition_sampled_gradient_is_unbiased_paired(gradient_draws):
    """E over (a partitions drawn with replacement, scale p/a) of the stochastic gradient equals the
    full-data gradient for the same z (Hoang et al. 2017, eq. 7; extended version, App. G Prop. 2),
    for the guide's
    params and the type-II σ_n, σ_s, ℓ.

    Pairing on the z key leaves only the partition-sampling noise. Threshold: under H0 each
    component's z is ≈ N(0, 1) (K = 4000 draws); P(|Z| > 4.5) ≈ 6.8e-6, and a Bonferroni bound over
    the ≈ 1130 components of joint_affine (33² entries of U, 33 of b, σ_n; 77 for mean_field; σ_s
    and ℓ enter only the priors and have zero paired difference) keeps the family-wise false-alarm
    rate below 1 % per setting. (Measured with the seeds here: max |z| ≈ 3.1, 2.8, 2.1.)
    """
    z = paired_z(gradient_draws["stochastic"], gradient_draws["full"])
    for site, (z_max, exact_gap) in z.items():
        assert z_max < Z_MAX, (site, z_max)
        assert exact_gap <= 1e-9, (site, exact_gap)
    # σ_s and ℓ only enter log p(s | σ_s) and log p(θ | ℓ): identical for the same z
    for site in ("signal", "lengthscales"):
        np.testing.assert_allclose(gradient_draws["stochastic"][site], gradient_draws["full"][site],
                                   rtol=1e-12, atol=1e-12)
    # the comparison is not vacuous: partition sampling does move the data-dependent gradients
    for site in set(z) - {"signal", "lengthscales"}:
        assert np.abs(gradient_draws["stochastic"][site] - gradient_draws["full"][site]).max() > 1e-3


def test_partition_sampled_gradient_is_unbiased_unpaired(gradient_draws):
    """Unpaired: mean stochastic gradient over keys k₁..k_{K/2} vs mean full-data gradient over the
    independent keys k_{K/2+1}..k_K, within their combined standard error (same 4.5 threshold)."""
    half = K // 2
    for site in gradient_draws["stochastic"]:
        s, f = gradient_draws["stochastic"][site][:half], gradient_draws["full"][site][half:]
        se = np.sqrt(s.var(0, ddof=1) / half + f.var(0, ddof=1) / (K - half))
        z = np.abs(s.mean(0) - f.mean(0)) / se
        assert z.max() < Z_MAX, (site, z.max())


def test_partition_sampled_gradient_negative_control(gradient_draws):
    """Power: with the wrong likelihood scale 1 instead of p/a the same paired statistic fails by far."""
    z = paired_z(gradient_draws["unscaled"], gradient_draws["full"])
    worst = max(z_max for z_max, _ in z.values())
    assert worst > 10 * Z_MAX, z
    assert z["noise"][0] > Z_MAX


@pytest.mark.parametrize("n", [120, 315])
def test_batch_sampler_draw_is_o_of_a_blocks(x64, pendulum, n):
    """The drawn batch is a whole padded blocks, shape (a·size,) with size ≤ ⌈2n/p⌉, the masked
    rows are exactly the drawn blocks' rows, and no intermediate of the jitted draw has n rows."""
    x = jnp.asarray(pendulum.x_train[:n])
    y = jnp.arange(n, dtype=jnp.float64)  # y carries the row index, to identify drawn rows
    p = n // 20
    parts = kmeans_partitions(np.asarray(x), p, seed=0)
    size = parts.blocks.shape[1]
    assert size <= math.ceil(2.0 * n / p)
    draw, aux = batch_sampler(n, partitions=parts, per_step=A)
    blocks = {tuple(parts.blocks[k][parts.mask[k]]) for k in range(parts.count)}
    for seed in range(5):
        xb, yb, kw = draw(jax.random.PRNGKey(seed), x, y, aux)
        assert xb.shape == (A * size, x.shape[1]) and yb.shape == (A * size,)
        assert kw["obs_mask"].shape == (A * size,) and kw["obs_scale"] == parts.count / A
        rows = np.asarray(yb, int).reshape(A, size)
        mask = np.asarray(kw["obs_mask"]).reshape(A, size)
        for j in range(A):
            assert tuple(rows[j][mask[j]]) in blocks
        np.testing.assert_array_equal(np.asarray(xb), np.asarray(x)[np.asarray(yb, int)])
    jaxpr = jax.make_jaxpr(draw)(jax.random.PRNGKey(0), x, y, aux)
    shapes = [v.aval.shape for eqn in jaxpr.eqns for v in eqn.outvars]
    assert not any(n in s for s in shapes), shapes


def test_joint_affine_marginal_of_theta_equals_joint_minus_conditional(x64):
    """``conditional_and_marginal``'s log q(θ) from the LQ factor (what the Wei et al. 2021 objectives
    use) equals log q(θ, s) − log q(s | θ) from the guide's own trace (log ψ(z) − log|det M|),
    for a random lower-triangular U and several draws."""
    spec = _spec(3, 2)
    guide = JointAffineGuide(spec)
    x = jnp.zeros((4, 2))
    dim = 3 * 2 + 6
    rng = np.random.default_rng(5)
    u = np.tril(np.eye(dim) + 0.3 * rng.standard_normal((dim, dim)))
    u[np.diag_indices(dim)] = np.abs(u[np.diag_indices(dim)]) + 0.2
    params = {"alpha_matrix": jnp.asarray(u), "alpha_loc": jnp.asarray(rng.standard_normal(dim))}
    for seed in range(3):
        tr = _trace(guide, params, x, seed=seed)
        log_q = sum(jnp.sum(v["fn"].log_prob(v["value"])) for v in tr.values() if v["type"] == "sample")
        draw = {k: tr[k]["value"] for k in ("frequencies", "nuisance")}
        loc, tril, log_q_theta = guide.conditional_and_marginal(params, draw)
        log_q_s = dist.MultivariateNormal(loc, scale_tril=tril).log_prob(draw["nuisance"])
        np.testing.assert_allclose(log_q_theta, log_q - log_q_s, rtol=1e-10)
        loc2, tril2 = guide.nuisance_conditional(params, draw)
        np.testing.assert_array_equal(loc2, loc)
        np.testing.assert_array_equal(tril2, tril)


# --------------------------------------------------------------------------- auto_mvn in float32


def _auto_mvn_setup(dtype, params=None):
    """ssgp_svi (m = 5, auto_mvn) on a near-interpolating set (n = 200, 2 inputs, noise sd 1e-4) in
    ``dtype``: (model, guide, params, x, y); ``params`` (numpy) replace the guide's initial ones
    (the initial frequencies come from spectral points drawn in the working precision)."""
    from numpyro.infer import SVI

    from ssgp_ppl.entry import load_entry as entry_of
    from ssgp_ppl.inference.runners import optimizer
    from ssgp_ppl.model.guides import make_guide

    rng = np.random.default_rng(0)
    x = rng.uniform(-2, 2, size=(200, 2))
    y = np.sin(x[:, 0]) + 0.5 * np.cos(x[:, 1]) + 1e-4 * rng.standard_normal(200)
    x, y = jnp.asarray(x, dtype), jnp.asarray((y - y.mean()) / y.std(), dtype)
    entry = entry_of("ssgp_svi").with_overrides(["m=5"])
    spec = entry.spec(2)
    model = entry.model(spec)
    guide = make_guide("auto_mvn", model, spec)
    svi = SVI(model, guide, optimizer(0.01), Trace_ELBO())
    init = svi.get_params(svi.init(jax.random.PRNGKey(0), x, y))
    params = {k: jnp.asarray(v if params is None else params[k], dtype) for k, v in init.items()}
    return model, guide, params, x, y


def _ill_conditioned_factor(dim, scale=1e-3, below=-4.0):
    """L = scale · U, U unit lower triangular with ``below`` under the diagonal: |det L| =
    scale^dim, but cond(L) ≈ (1 − below)^(dim − 1) (≈ 1e9 for dim 14): a concentrated q whose
    draws z = μ + Lε lose L⁻¹(z − μ) to float32 rounding."""
    return scale * (np.eye(dim) + below * np.tril(np.ones((dim, dim)), -1))


def _elbo_losses(dtype, params, draws=64):
    """Single-draw Trace_ELBO losses (−ELBO) at ``draws`` keys, float64 numpy."""
    model, guide, params, x, y = _auto_mvn_setup(dtype, params)
    keys = jax.random.split(jax.random.PRNGKey(1), draws)
    one = lambda k: Trace_ELBO().loss(k, params, model, guide, x, y)  # noqa: E731
    return np.asarray(jax.jit(jax.vmap(one))(keys), np.float64)


def test_auto_mvn_elbo_in_float32_is_bounded_by_float64_with_an_ill_conditioned_factor():
    """A concentrated auto_mvn q (cond(L) ≈ 1e9) on a near-interpolating set: the float32 −ELBO
    equals the float64 one within Monte Carlo error, and never falls below it. With log q(z)
    recovered as log N(L⁻¹(z − μ)) from the float32 draw z, the rounding of z − μ, amplified by
    cond(L), sends the float32 loss towards −∞: the runaway a concentrated posterior drives SVI
    into (loss −7.5e34, then NaN)."""
    previous = jax.config.read("jax_enable_x64")
    jax.config.update("jax_enable_x64", True)
    try:
        params = {k: np.asarray(v) for k, v in _auto_mvn_setup(np.float64)[2].items()}
        params["auto_scale_tril"] = _ill_conditioned_factor(params["auto_loc"].size)
        assert np.linalg.cond(params["auto_scale_tril"]) > 1e8
        ref = _elbo_losses(np.float64, params)
    finally:
        jax.config.update("jax_enable_x64", previous)
    got = _elbo_losses(np.float32, params)
    assert np.isfinite(got).all()
    se = math.hypot(ref.std(ddof=1), got.std(ddof=1)) / math.sqrt(len(ref))
    assert got.min() > ref.min() - 10 * ref.std(ddof=1)  # no draw runs away below the reference
    assert abs(got.mean() - ref.mean()) < 5 * se + 0.5, (got.mean(), ref.mean(), se)


def test_auto_mvn_log_q_is_the_dense_multivariate_normal_density(precision):
    """Where L is well conditioned, the guide's log q at its own draw (as Trace_ELBO computes it,
    from the draw's ε) is the dense MultivariateNormal density of the draw (float64 reference)."""
    rng = np.random.default_rng(3)
    params = {k: np.asarray(v) for k, v in _auto_mvn_setup(precision)[2].items()}
    dim = params["auto_loc"].size
    tril = np.tril(0.3 * rng.standard_normal((dim, dim)) / math.sqrt(dim)) + 0.2 * np.eye(dim)
    model, guide, params, x, y = _auto_mvn_setup(precision, {**params, "auto_scale_tril": tril})
    for seed in range(3):
        site = _trace(guide, params, x, seed=seed)["_auto_latent"]
        got = float(site["fn"].log_prob(site["value"], site["intermediates"]) if site["intermediates"]
                    else site["fn"].log_prob(site["value"]))  # as Trace_ELBO reads it
        loc = np.asarray(params["auto_loc"], np.float64)
        want = stats.multivariate_normal(loc, tril @ tril.T).logpdf(np.asarray(site["value"], np.float64))
        assert got == pytest.approx(want, rel=1e-10 if precision is np.float64 else 1e-4, abs=1e-3)
