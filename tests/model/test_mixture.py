"""Mixture guide (Nguyen & Bonilla 2014): entropy bound and its gradients (supp. eqs. 33-35), cross-entropy
(eqs. 29-32), and the Rao-Blackwellised score-function ELBO gradient: unbiased, lower variance."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from scipy.special import logsumexp

from ssgp_ppl.entry import load_entry
from ssgp_ppl.model import mixture, spectral


def _components(k=3, d=4, seed=0):
    rng = np.random.default_rng(seed)
    return jnp.asarray(rng.normal(0, 1, (k, d))), jnp.asarray(rng.uniform(0.3, 1.2, (k, d)))


def test_entropy_bound_gradients_are_supplement_eqs_33_35(x64):
    loc, scale = _components()
    k = loc.shape[0]
    var = np.asarray(scale**2)
    m = np.asarray(loc)
    s = var[:, None] + var[None]  # S_k + S_l (diagonal)
    n_kl = np.exp(-0.5 * np.sum(np.log(2 * np.pi * s) + (m[:, None] - m[None]) ** 2 / s, -1))
    z = n_kl.mean(1)
    g_m = jax.grad(mixture.entropy_bound, argnums=0)(loc, scale)
    g_var = jax.grad(lambda lc, v: mixture.entropy_bound(lc, jnp.sqrt(v)), argnums=1)(loc, scale**2)
    for a in range(k):
        coef = (n_kl[a] / z[a] + n_kl[a] / z) / k  # (1/K)(N_kl/z_k + N_kl/z_l), over l
        diff = m[a] - m  # (K, D)
        eq33 = np.sum(coef[:, None] * diff / s[a], 0) / k
        eq35 = np.sum(coef[:, None] * (1 / s[a] - diff**2 / s[a] ** 2), 0) / (2 * k)
        np.testing.assert_allclose(np.asarray(g_m[a]), eq33, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(np.asarray(g_var[a]), eq35, rtol=1e-9, atol=1e-12)


def test_entropy_bound_is_exact_for_one_component_and_a_lower_bound(x64):
    loc, scale = _components(k=1)
    exact = float(dist.Normal(loc[0], scale[0]).entropy().sum())
    # the bound with K = 1 is the entropy minus D/2 (1 - log 2) (Huber et al.'s zeroth order)
    d = loc.shape[1]
    np.testing.assert_allclose(float(mixture.entropy_bound(loc, scale)),
                               exact - 0.5 * d * (1 - math.log(2)), rtol=1e-12)
    loc, scale = _components(k=3)
    rng = np.random.default_rng(1)
    comp = rng.integers(0, 3, 200000)
    x = np.asarray(loc)[comp] + np.asarray(scale)[comp] * rng.standard_normal((200000, 4))
    logq = logsumexp(np.stack([np.sum(-0.5 * np.log(2 * np.pi * np.asarray(scale[j]) ** 2)
                                      - (x - np.asarray(loc[j])) ** 2 / (2 * np.asarray(scale[j]) ** 2), 1)
                               for j in range(3)]), axis=0) - np.log(3)
    assert float(mixture.entropy_bound(loc, scale)) <= -logq.mean() + 4 * logq.std() / math.sqrt(len(logq))


def test_cross_entropy_matches_monte_carlo(x64):
    loc, scale = _components()
    prior_sd = jnp.asarray([0.5, 1.0, 2.0, 1.5])
    rng = np.random.default_rng(2)
    comp = rng.integers(0, 3, 400000)
    x = np.asarray(loc)[comp] + np.asarray(scale)[comp] * rng.standard_normal((400000, 4))
    p2 = np.asarray(prior_sd) ** 2
    lp = np.sum(-0.5 * np.log(2 * np.pi * p2) - x**2 / (2 * p2), 1)
    got = float(mixture.cross_entropy(loc, scale, prior_sd))
    assert abs(got - lp.mean()) < 4 * lp.std() / math.sqrt(len(lp))


def _setup(m=3, n=25):
    entry = load_entry("ssgp_mixture").with_overrides([f"m={m}", "components=2"])
    spec = entry.spec(1)
    model = entry.model(spec)
    g = entry.guide(spec, model)
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.uniform(-2, 2, (n, 1)))
    y = jnp.asarray(np.sin(2 * np.asarray(x[:, 0])) + 0.2 * rng.standard_normal(n))
    import numpyro
    from numpyro.infer import SVI

    from ssgp_ppl.inference.objectives import make_objective
    svi = SVI(model, g, numpyro.optim.Adam(0.01), make_objective("elbo", guide=g))
    params = svi.get_params(svi.init(jax.random.PRNGKey(0), x, y))
    params["alpha_scale"] = params["alpha_scale"] * 3.0
    return spec, model, g, params, x, y


def _pathwise_loglik_grad(params, spec, x, y, draws=200000):
    """Reference: reparameterised gradient of (1/K) Σ_k E_{q_k}[Σᵢ log N(yᵢ | φᵢ(θ)ᵀs, σ²)] w.r.t.
    the component means, from many joint draws of (θ, s)."""
    m = spec.m
    n_theta = m

    def f(loc, key):
        eps = jax.random.normal(key, (loc.shape[0], loc.shape[1]))
        a = loc + params["alpha_scale"] * eps
        def one(ak):
            phi = spectral.features(x, ak[:n_theta].reshape(m, 1))
            return jnp.sum(jax.scipy.stats.norm.logpdf(y, phi @ ak[n_theta:], params["noise"]))
        return jnp.mean(jax.vmap(one)(a))

    keys = jax.random.split(jax.random.PRNGKey(9), draws // 1000)
    g = jax.jit(jax.vmap(lambda ks: jnp.mean(jax.vmap(lambda k: jax.grad(f)(params["alpha_loc"], k))(
        jax.random.split(ks, 1000)), 0)))(keys)
    return np.asarray(g.mean(0)), np.asarray(g.std(0) / math.sqrt(len(keys)))


def test_rao_blackwellised_score_gradient_is_unbiased(x64):
    """Mean of 4000 avi_elbo gradients (S = 8 per component) in the component means equals the
    pathwise gradient of the expected log-likelihood plus the closed-form prior and entropy terms."""
    spec, model, g, params, x, y = _setup()
    keys = jax.random.split(jax.random.PRNGKey(3), 4000)
    grads = jax.jit(jax.vmap(lambda k: jax.grad(lambda p: -mixture.avi_elbo(k, p, model, g, x, y, samples=8))(
        params)["alpha_loc"]))(keys)
    grads = np.asarray(grads)
    # the deterministic part (cross-entropy + entropy bound) in closed form
    def det(loc):
        theta_sd = jnp.full((spec.m,), 1.0 / (spectral.TWO_PI * params["lengthscales"][0]))
        prior = jnp.concatenate([theta_sd, jnp.full((2 * spec.m,), params["signal"] / math.sqrt(spec.m))])
        return mixture.cross_entropy(loc, params["alpha_scale"], prior) + mixture.entropy_bound(
            loc, params["alpha_scale"])
    ref_ll, ref_se = _pathwise_loglik_grad(params, spec, x, y)
    ref = ref_ll + np.asarray(jax.grad(det)(params["alpha_loc"]))
    se = np.sqrt(grads.std(0) ** 2 / len(grads) + ref_se**2)
    assert np.all(np.abs(grads.mean(0) - ref) < 4.5 * se + 1e-6), (grads.mean(0) - ref) / se


def test_rao_blackwellisation_lowers_the_variance(x64):
    """The θ-mean gradients of avi_elbo (s integrated given θ, supp. §3) vary less than plain
    score-function gradients that also draw s (same draws per component, same baseline)."""
    spec, model, g, params, x, y = _setup()
    m = spec.m
    loc, scale = params["alpha_loc"], params["alpha_scale"]

    def plain(key, loc):
        eps = jax.random.normal(key, (loc.shape[0], 8, loc.shape[1]))
        a = jax.lax.stop_gradient(loc[:, None] + scale[:, None] * eps)

        def ll(ak):
            phi = spectral.features(x, ak[:m].reshape(m, 1))
            return jnp.sum(jax.scipy.stats.norm.logpdf(y, phi @ ak[m:], params["noise"]))

        c = jax.vmap(jax.vmap(ll))(a)
        base = (c.sum(1, keepdims=True) - c) / 7
        logq = dist.Normal(loc[:, None], scale[:, None]).log_prob(a).sum(-1)
        return jnp.mean((c - base) * logq)

    keys = jax.random.split(jax.random.PRNGKey(5), 1500)
    g_plain = np.asarray(jax.jit(jax.vmap(lambda k: jax.grad(plain, argnums=1)(k, loc)))(keys))
    g_rb = np.asarray(jax.jit(jax.vmap(lambda k: jax.grad(
        lambda p: -mixture.avi_elbo(k, p, model, g, x, y, samples=8))(params)["alpha_loc"]))(keys))
    v_plain, v_rb = g_plain[..., :m].var(0).sum(), g_rb[..., :m].var(0).sum()
    assert v_rb < 0.75 * v_plain, (v_rb, v_plain)  # measured: 0.52 × on this problem
