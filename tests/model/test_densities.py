"""The spectral densities (ssgp_ppl.model.densities): every registered density against references
derived from the object itself, and each built-in family against its analytic form.

For every density: p(r | ℓ) integrates to 1 (scipy quadrature in 1-D, a double-exponential
trapezoid rule in 2-D and 3-D), its kernel is the Fourier transform of its density (scipy QAWF)
and the Monte Carlo mean of cos(2π rᵀτ) over draws of r (Hoang et al. 2017, eq. 1), its standard
points follow its distribution (two-sample KS), and its declared abilities hold. Per family:
scipy.stats densities, and the kernels of Rasmussen & Williams 2006, eqs. 4.9, 4.14 and 4.16.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro import handlers
from numpyro.infer.reparam import LocScaleReparam
from scipy import integrate, special, stats

from ssgp_ppl.errors import SSGPError
from ssgp_ppl.model import densities
from ssgp_ppl.model.densities import DENSITIES, Cauchy, Matern, SpectralDensity, SquaredExponential
from ssgp_ppl.model.ssgp import Hyper, SSGPSpec, frequency_prior

NAMES = list(DENSITIES)
ELL_1D = 0.7
ELL_3D = np.array([0.7, 1.3, 0.4])
N_DRAWS = 6 * 1024


def _density_1d(density, ell=ELL_1D):
    return lambda r: math.exp(float(density.log_density(jnp.array([r]), jnp.array([ell]))))


# --------------------------------------------------------------------------- the registry


@pytest.mark.parametrize("name", NAMES)
def test_every_density_has_one_shape(name):
    d = DENSITIES[name]
    assert isinstance(d, SpectralDensity) and d.name == name and name.isidentifier()
    assert d.doc and "\n" not in d.doc
    assert isinstance(d.gaussian, bool) and isinstance(d.loc_scale, bool)
    assert densities.get(name) is d


def test_the_built_in_names_keep_their_catalog_spelling():
    assert {"se", "matern12", "matern32", "matern52", "cauchy"} <= set(DENSITIES)
    assert [DENSITIES[f"matern{k}2"].nu for k in (1, 3, 5)] == [0.5, 1.5, 2.5]


def test_an_unknown_name_is_one_error_listing_the_known_ones():
    with pytest.raises(SSGPError, match=r"unknown spectral density 'rq'; known: se, matern12"):
        densities.get("rq")
    with pytest.raises(SSGPError, match="unknown spectral density 'Matern32'"):
        SSGPSpec(m=2, d=1, spectral_points=jnp.zeros((2, 1)), density="Matern32")


def test_a_spec_looks_a_name_up_once():
    spec = SSGPSpec(m=2, d=1, spectral_points=jnp.zeros((2, 1)), density="matern32")
    assert spec.density is densities.MATERN32


# --------------------------------------------------------------------------- p(r | ℓ)


@pytest.mark.parametrize("name", NAMES)
def test_density_integrates_to_one_in_1d(x64, name):
    total, err = integrate.quad(_density_1d(DENSITIES[name]), -np.inf, np.inf, limit=200)
    assert err < 1e-7
    assert total == pytest.approx(1.0, abs=1e-8)


def _integral(density, ell, h):
    """∫ p(r | ℓ) dr over R^d by the trapezoid rule in v, r_j = c_j sinh(π/2 sinh v_j),
    c_j = 1/2πℓ_j (a double-exponential substitution: polynomial tails decay doubly
    exponentially in v)."""
    d = len(ell)
    v = np.arange(-3.5, 3.5 + h / 2, h)
    x = np.sinh(np.pi / 2 * np.sinh(v))
    dx = np.pi / 2 * np.cosh(v) * np.cosh(np.pi / 2 * np.sinh(v))
    c = 1.0 / (2 * np.pi * ell)
    r = np.stack([g.ravel() for g in np.meshgrid(*[x] * d, indexing="ij")], -1) * c
    w = np.prod(np.stack([g.ravel() for g in np.meshgrid(*[dx] * d, indexing="ij")], -1), -1)
    p = np.exp(np.asarray(density.log_density(r, ell)))
    return h**d * np.prod(c) * np.sum(w * p)


@pytest.mark.parametrize("d", [2, 3], ids=["d2", "d3"])
@pytest.mark.parametrize("name", NAMES)
def test_density_integrates_to_one_in_higher_d(x64, name, d):
    """ARD ℓ; separable and isotropic densities alike (no radial shortcut)."""
    total = _integral(DENSITIES[name], ELL_3D[:d], {2: 0.05, 3: 0.07}[d])
    assert total == pytest.approx(1.0, abs=1e-7)


@pytest.mark.parametrize("name", NAMES)
def test_log_density_is_the_distributions_log_prob_in_both_widths(precision, name):
    """log_density = frequency_distribution(ℓ, d).log_prob (float64 reference); a scalar ℓ is
    shared by the d inputs."""
    density = DENSITIES[name]
    r = np.random.default_rng(0).normal(scale=0.5, size=(20, 3))
    got = density.log_density(jnp.asarray(r, precision), jnp.asarray(ELL_3D, precision))
    assert got.dtype == precision and got.shape == (20,)
    restore = jax.config.read("jax_enable_x64")
    jax.config.update("jax_enable_x64", True)
    try:
        want = np.asarray(density.frequency_distribution(jnp.asarray(ELL_3D), 3).log_prob(r))
        iso = density.log_density(r[:, :2], 0.7)
        ard = density.log_density(r[:, :2], np.full(2, 0.7))
    finally:
        jax.config.update("jax_enable_x64", restore)
    tol = {np.float32: 2e-6, np.float64: 1e-13}[precision]
    np.testing.assert_allclose(got, want, rtol=tol, atol=10 * tol)
    np.testing.assert_allclose(iso, ard, rtol=1e-12)


# scipy's densities of r for each built-in family, from the object's own parameters
SCIPY = {
    SquaredExponential: lambda dens, r, ell: np.sum(
        stats.norm.logpdf(r, 0.0, 1.0 / (2 * np.pi * ell)), axis=-1),
    Matern: lambda dens, r, ell: r.shape[-1] * np.log(2 * np.pi) + stats.multivariate_t.logpdf(
        2 * np.pi * r, loc=np.zeros(r.shape[-1]), shape=np.diag(1.0 / ell**2), df=2 * dens.nu),
    Cauchy: lambda dens, r, ell: np.sum(stats.cauchy.logpdf(r, 0.0, 1.0 / (2 * np.pi * ell)),
                                        axis=-1),
}
FAMILIES = [*(n for n, d in DENSITIES.items() if type(d) in SCIPY), "matern_nu0_8"]


def _family(name):
    return Matern(0.8) if name == "matern_nu0_8" else DENSITIES[name]


@pytest.mark.parametrize("name", FAMILIES)
def test_density_matches_scipy_pointwise(x64, name):
    """SE: product of N(0, 1/(4π²ℓ²)); Matérn ν: ω = 2πr ~ t_{2ν}(0, diag(1/ℓ²)), times (2π)^d
    (R&W 2006, eq. 4.15); Cauchy: product of Cauchy(0, 1/2πℓ)."""
    density = _family(name)
    r = np.random.default_rng(0).normal(scale=0.5, size=(20, 3))
    want = SCIPY[type(density)](density, r, ELL_3D)
    np.testing.assert_allclose(density.log_density(r, ELL_3D), want, rtol=1e-11)


# --------------------------------------------------------------------------- k(τ)


@pytest.mark.parametrize("name", [*NAMES, "matern_nu0_8"])
def test_kernel_is_fourier_transform_of_density(x64, name):
    """k(τ) = ∫ p(r) cos(2π r τ) dr (d = 1): ties the density and kernel conventions together."""
    density = _family(name)
    p = _density_1d(density)
    for tau in [0.0, 0.3, 1.0, 2.5]:
        if tau == 0.0:
            want = integrate.quad(p, -np.inf, np.inf, limit=200)[0]
        else:  # even integrand: 2 ∫_0^∞ p(r) cos(2π τ r) dr by QAWF
            want = 2.0 * integrate.quad(p, 0.0, np.inf, weight="cos", wvar=2 * np.pi * tau,
                                        limlst=100)[0]
        got = float(density.kernel(jnp.array([tau]), jnp.array([ELL_1D])))
        assert got == pytest.approx(want, rel=1e-7, abs=1e-9), tau


@pytest.mark.parametrize("name", NAMES)
def test_kernel_is_the_monte_carlo_mean_over_frequency_draws(precision, name):
    """σ² mean of cos(2π rᵀτ) over 6144 draws r ~ p(r | ℓ) (d = 3, ARD ℓ) = k(τ) within 4
    standard errors (float64 reference of k)."""
    density = DENSITIES[name]
    taus = np.array([[0.3, -0.2, 0.1], [0.0, 0.5, 0.0], [-0.6, 0.4, 0.05], [0.2, 0.2, 0.2]])
    r = density.frequency_distribution(jnp.asarray(ELL_3D, precision), 3).sample(
        jax.random.PRNGKey(5), (N_DRAWS,))
    assert r.dtype == precision and r.shape == (N_DRAWS, 3)
    draws = 1.3**2 * np.cos(2 * np.pi * np.asarray(r, np.float64) @ taus.T)  # (N, 4)
    mean, se = draws.mean(axis=0), draws.std(axis=0, ddof=1) / np.sqrt(N_DRAWS)
    restore = jax.config.read("jax_enable_x64")
    jax.config.update("jax_enable_x64", True)
    try:
        exact = np.asarray(density.kernel(taus, ELL_3D, signal=1.3))
    finally:
        jax.config.update("jax_enable_x64", restore)
    assert np.all(exact > 0.05 * 1.3**2) and np.all(exact < 0.95 * 1.3**2)  # informative lags
    assert np.all(np.abs(mean - exact) < 4 * se), (mean, exact, se)


@pytest.mark.parametrize("name", NAMES)
def test_kernel_signal_ard_and_symmetry(x64, name):
    """k(τ; ℓ, σ) = σ² k(τ/ℓ; 1, 1), k(0) = σ², k(−τ) = k(τ), a scalar ℓ = the ARD vector."""
    density = DENSITIES[name]
    tau = np.array([[0.3, -0.8, 1.1], [0.05, 0.1, -0.2]])
    ell = np.array([0.5, 2.0, 1.0])
    got = np.asarray(density.kernel(tau, ell, signal=1.7))
    unit = np.asarray(density.kernel(tau / ell, np.ones(3)))
    np.testing.assert_allclose(got, 1.7**2 * unit, rtol=1e-13)
    np.testing.assert_allclose(density.kernel(-tau, ell, signal=1.7), got, rtol=1e-14)
    np.testing.assert_allclose(density.kernel(tau, 0.8), density.kernel(tau, np.full(3, 0.8)),
                               rtol=1e-14)
    assert float(density.kernel(np.zeros(3), ell, signal=1.7)) == pytest.approx(1.7**2, rel=1e-14)
    assert np.all(got < 1.7**2) and np.all(got > 0)


def test_se_kernel_is_the_squared_exponential(x64):
    """R&W 2006, eq. 4.9 with ARD ℓ."""
    tau, ell = np.array([0.3, -0.8, 1.1]), np.array([0.5, 2.0, 1.0])
    rho2 = np.sum((tau / ell) ** 2)
    assert float(densities.SE.kernel(tau, ell)) == pytest.approx(np.exp(-0.5 * rho2), rel=1e-14)


@pytest.mark.parametrize("name", [n for n, d in DENSITIES.items() if isinstance(d, Matern)])
def test_matern_kernel_is_the_closed_form(x64, name):
    """Half-integer ν: R&W 2006, eq. 4.16 written out (ν = ½, 3/2, 5/2); any ν: eq. 4.14 with
    scipy's K_ν."""
    density = DENSITIES[name]
    tau, ell = np.array([0.3, -0.8, 1.1]), np.array([0.5, 2.0, 1.0])
    rho = np.sqrt(np.sum((tau / ell) ** 2))
    z = np.sqrt(2 * density.nu) * rho
    bessel = 2 ** (1 - density.nu) / special.gamma(density.nu) * z**density.nu * special.kv(
        density.nu, z)
    assert float(density.kernel(tau, ell)) == pytest.approx(bessel, rel=1e-12)
    written = {0.5: np.exp(-z), 1.5: (1 + z) * np.exp(-z), 2.5: (1 + z + z**2 / 3) * np.exp(-z)}
    if density.nu in written:
        assert float(density.kernel(tau, ell)) == pytest.approx(written[density.nu], rel=1e-13)


def test_matern_takes_any_nu_as_the_student_t_density(x64):
    """Matern(ν) for ν not half-integer: its kernel (K_ν) is continuous with the closed forms,
    jit- and vmap-able, and its frequency distribution is the Student-t with 2ν d.o.f."""
    tau, ell = np.array([[0.3, -0.8, 1.1], [0.0, 0.0, 0.0]]), np.array([0.5, 2.0, 1.0])
    near = Matern(2.5 + 1e-9)
    assert not near.half_integer and densities.MATERN52.half_integer
    np.testing.assert_allclose(near.kernel(tau, ell), densities.MATERN52.kernel(tau, ell),
                               rtol=1e-8)
    m = Matern(0.8)
    assert m.name == "matern_nu0_8" and Matern(0.8, name="student_t16").name == "student_t16"
    np.testing.assert_allclose(jax.jit(m.kernel)(tau, ell), m.kernel(tau, ell), rtol=1e-15)
    np.testing.assert_allclose(jax.vmap(m.kernel, (0, None))(tau, ell), m.kernel(tau, ell),
                               rtol=1e-15)
    assert float(m.kernel(tau, ell)[1]) == 1.0
    fd = m.frequency_distribution(jnp.asarray(ell), 3)
    assert isinstance(fd, dist.MultivariateStudentT) and float(fd.df) == pytest.approx(1.6)


@pytest.mark.parametrize("nu", [0, -1.5, float("nan"), float("inf"), True, "1.5"])
def test_matern_rejects_a_nu_that_is_no_positive_number(nu):
    with pytest.raises(SSGPError, match="Matern: ν must be a finite number > 0"):
        Matern(nu)


def test_cauchy_kernel_is_the_separable_exponential(x64):
    """exp(−Σ|τⱼ|/ℓⱼ) analytically; in one input it is Matérn ½ (exp(−|τ|/ℓ)); in three it is
    not (L1 against L2 distance)."""
    tau, ell = np.array([0.3, -0.8, 1.1]), np.array([0.5, 2.0, 1.0])
    want = np.exp(-(0.3 / 0.5 + 0.8 / 2.0 + 1.1 / 1.0))
    assert float(densities.CAUCHY.kernel(tau, ell)) == pytest.approx(want, rel=1e-14)
    t1 = np.array([[0.4], [-1.7]])
    np.testing.assert_allclose(densities.CAUCHY.kernel(t1, 0.6), densities.MATERN12.kernel(t1, 0.6),
                               rtol=1e-14)
    assert float(densities.MATERN12.kernel(tau, ell)) > 1.5 * want


# --------------------------------------------------------------------------- standard points


@pytest.mark.parametrize("name", NAMES)
def test_standard_points_follow_the_frequency_distribution(x64, name):
    """s / 2π and draws of p(r | ℓ = 1): the same distribution of a coordinate and of the
    squared radius (two-sample KS, 6144 each, d = 9)."""
    density = DENSITIES[name]
    s = np.asarray(density.standard_points(jax.random.PRNGKey(11), N_DRAWS, 9))
    assert s.shape == (N_DRAWS, 9) and s.dtype == np.float64
    r = np.asarray(density.frequency_distribution(jnp.ones(9), 9).sample(
        jax.random.PRNGKey(12), (N_DRAWS,)))
    u = s / (2 * np.pi)
    assert stats.ks_2samp(u[:, 0], r[:, 0]).pvalue > 1e-3
    assert stats.ks_2samp(np.sum(u**2, axis=1), np.sum(r**2, axis=1)).pvalue > 1e-3


@pytest.mark.parametrize("name", [n for n, d in DENSITIES.items()
                                  if isinstance(d, SquaredExponential | Matern)])
def test_se_and_matern_standard_points_are_normal_and_student_t(x64, name):
    """Coordinates ~ N(0, 1) or t_{2ν}; |s|²/d ~ χ²_d/d or F(d, 2ν) (one χ² per point)."""
    density, d = DENSITIES[name], 9
    s = np.asarray(density.standard_points(jax.random.PRNGKey(11), N_DRAWS, d))
    nu = getattr(density, "nu", None)
    coord = stats.norm() if nu is None else stats.t(df=2 * nu)
    radius = stats.chi2(d, scale=1.0 / d) if nu is None else stats.f(d, 2 * nu)
    assert stats.kstest(s[:, 0], coord.cdf).pvalue > 1e-3
    assert stats.kstest(np.sum(s**2, axis=1) / d, radius.cdf).pvalue > 1e-3


@pytest.mark.parametrize("name", NAMES)
def test_standard_points_are_seeded_and_dtyped(precision, name):
    density = DENSITIES[name]
    a = density.standard_points(jax.random.PRNGKey(3), 64, 9)
    b = density.standard_points(jax.random.PRNGKey(3), 64, 9)
    c = density.standard_points(jax.random.PRNGKey(4), 64, 9)
    assert a.dtype == precision and a.shape == (64, 9)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)


@pytest.mark.parametrize("m,d", [(0, 2), (3, 0)], ids=["m0", "d0"])
@pytest.mark.parametrize("name", NAMES)
def test_standard_points_reject_empty(name, m, d):
    with pytest.raises(SSGPError, match="need m >= 1"):
        DENSITIES[name].standard_points(jax.random.PRNGKey(0), m, d)


# --------------------------------------------------------------------------- declared abilities


@pytest.mark.parametrize("name", NAMES)
def test_gaussian_means_the_normal_prior_the_mixture_and_ncvmp_write(x64, name):
    """gaussian: log p(r | ℓ) is Σ log N(rⱼ; 0, 1/2πℓⱼ), the prior ssgp_ppl.model.mixture's closed-form
    E_q log p(θ) assumes; otherwise it differs from that Normal."""
    density = DENSITIES[name]
    r = np.random.default_rng(1).normal(scale=0.3, size=(10, 3))
    normal = np.sum(stats.norm.logpdf(r, 0.0, 1.0 / (2 * np.pi * ELL_3D)), axis=-1)
    same = np.allclose(density.log_density(r, ELL_3D), normal, rtol=1e-10)
    assert same == density.gaussian


def _prior_model(density):
    def model():
        ell = numpyro.sample("lengthscales", dist.LogNormal(0.0, 0.3).expand([3]).to_event(1))
        numpyro.sample("frequencies", frequency_prior(ell, 4, density))
    return model


@pytest.mark.parametrize("name", NAMES)
def test_loc_scale_means_locscalereparam_decentres_the_frequencies(x64, name):
    """loc_scale: under NumPyro's LocScaleReparam(centered=0), θ = ε / 2πℓ with ε's
    distribution free of ℓ (the non-centred NUTS/SMC/auto-guide models, whose ε starts at the
    standard points); otherwise LocScaleReparam refuses the site."""
    density = DENSITIES[name]
    model = handlers.reparam(_prior_model(density), config={"frequencies": LocScaleReparam(0)})
    if not density.loc_scale:
        with pytest.raises((ValueError, AttributeError)):  # no real support, or no .scale
            handlers.trace(handlers.seed(model, 0)).get_trace()
        return
    fixed = jnp.asarray(np.random.default_rng(2).standard_cauchy((4, 3)))
    log_p = []
    for ell in (np.full(3, 0.5), np.array([2.0, 1.0, 3.0])):
        sub = handlers.substitute(handlers.seed(model, 0), data={"lengthscales": jnp.asarray(ell)})
        tr = handlers.trace(sub).get_trace()
        eps = np.asarray(tr["frequencies_decentered"]["value"])
        np.testing.assert_allclose(tr["frequencies"]["value"], eps / (2 * np.pi * ell), rtol=1e-13)
        log_p.append(float(tr["frequencies_decentered"]["fn"].log_prob(fixed)))
    assert log_p[0] == log_p[1]
    # ε's density is the standard points' (s = 2πr at ℓ = 1)
    want = float(density.log_density(fixed / (2 * np.pi), 1.0).sum()) - 12 * math.log(2 * np.pi)
    assert log_p[0] == pytest.approx(want, rel=1e-12)


def test_the_declared_abilities_of_the_built_ins():
    """Which built-in density the mixture guide, NCVMP and the non-centred models accept."""
    assert [n for n in ("se", "matern12", "matern32", "matern52", "cauchy")
            if DENSITIES[n].gaussian] == ["se"]
    assert [n for n in ("se", "matern12", "matern32", "matern52", "cauchy")
            if DENSITIES[n].loc_scale] == ["se", "cauchy"]


def test_a_density_without_its_methods_says_which_is_missing():
    class Half(SpectralDensity):
        name = "half"

    with pytest.raises(NotImplementedError, match="Half.frequency_distribution"):
        Half().log_density(jnp.zeros((1, 2)), 1.0)
    with pytest.raises(NotImplementedError, match="Half.kernel"):
        Half().kernel(jnp.zeros((1, 2)), 1.0)


def test_a_spec_with_a_density_object_keeps_it():
    spec = SSGPSpec(m=2, d=3, spectral_points=jnp.zeros((2, 3)), density=densities.CAUCHY,
                    lengthscales=Hyper("fixed", 1.0))
    assert spec.density is densities.CAUCHY
