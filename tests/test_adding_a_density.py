"""docs/guide/adding-a-model.md's "Adding a spectral density" runs as written: the density
registers from user code (no package edit), the catalog checks the name when an entry is loaded,
the density's kernel and log density agree with scipy's Laplace distribution (float64), and its
TOML entry fits on pendulum, saves and loads back through the registry."""

import math
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, stats

import ssgp_ppl
from ssgp_ppl.errors import SSGPError
from ssgp_ppl.model.densities import DENSITIES

DOC = Path(__file__).resolve().parent.parent / "docs" / "guide" / "adding-a-model.md"
TEXT = DOC.read_text()
SECTION = TEXT[TEXT.index("## Adding a spectral density"):]


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.+?)\n```", SECTION, re.S)


def _entry_file(tmp_path) -> Path:
    path = tmp_path / "laplace_svi.toml"
    path.write_text(_blocks("toml")[0])
    return path


@pytest.fixture
def unregistered():
    """The registry without the page's density (restored afterwards, as another test left it)."""
    saved = DENSITIES.pop("laplace", None)
    yield
    DENSITIES.pop("laplace", None)
    if saved is not None:
        DENSITIES.register(saved)


@pytest.fixture
def registered(unregistered):
    exec(compile(_blocks("python")[0], str(DOC), "exec"), {})
    return DENSITIES["laplace"]


def test_the_catalog_checks_the_name_when_the_entry_is_loaded(unregistered, tmp_path):
    path = _entry_file(tmp_path)
    with pytest.raises(SSGPError) as err:
        ssgp_ppl.fit(path, data="pendulum")
    msg = str(err.value)
    assert msg == (f"{path}: model.spectral_density: 'laplace' is not one of "
                   f"{', '.join(DENSITIES)}") and "cauchy" in msg


def test_the_page_registers_the_density_from_user_code(registered):
    assert type(registered).__module__ != "ssgp_ppl.model.densities"
    assert registered.name == "laplace" and registered.loc_scale and not registered.gaussian
    assert list(DENSITIES)[-1] == "laplace"
    with pytest.raises(SSGPError, match="a spectral density named 'laplace' is registered already"):
        ssgp_ppl.register_density(type(registered)())


def test_the_density_is_scipys_laplace_and_its_kernel_the_fourier_pair(registered, x64):
    """log p(r | ℓ) = Σ log Laplace(rⱼ; 0, 1/2πℓⱼ) (scipy); ∫ p = 1 and ∫ p(r) cos(2π rτ) dr =
    k(τ) in one input (quadrature); σ² mean of cos(2π rᵀτ) over 6144 draws of r (d = 3) = k(τ)
    within 4 standard errors; the standard points are Laplace(0, 1) (KS)."""
    ell = np.array([0.7, 1.3, 0.4])
    r = np.random.default_rng(0).normal(scale=0.5, size=(20, 3))
    want = np.sum(stats.laplace.logpdf(r, 0.0, 1.0 / (2 * np.pi * ell)), axis=-1)
    np.testing.assert_allclose(registered.log_density(r, ell), want, rtol=1e-12)

    def p(v):
        return math.exp(float(registered.log_density(jnp.array([v]), jnp.array([0.7]))))

    assert integrate.quad(p, -np.inf, np.inf)[0] == pytest.approx(1.0, abs=1e-9)
    for tau in (0.3, 1.0, 2.5):
        fourier = 2 * integrate.quad(p, 0, np.inf, weight="cos", wvar=2 * np.pi * tau)[0]
        assert float(registered.kernel(jnp.array([tau]), jnp.array([0.7]))) == pytest.approx(
            fourier, rel=1e-7)

    taus = np.array([[0.3, -0.2, 0.1], [0.0, 0.5, 0.0], [-0.6, 0.4, 0.05]])
    draws = registered.frequency_distribution(jnp.asarray(ell), 3).sample(
        jax.random.PRNGKey(5), (6144,))
    cos = 1.3**2 * np.cos(2 * np.pi * np.asarray(draws) @ taus.T)
    mean, se = cos.mean(axis=0), cos.std(axis=0, ddof=1) / np.sqrt(len(cos))
    exact = np.asarray(registered.kernel(taus, ell, signal=1.3))
    assert np.all(np.abs(mean - exact) < 4 * se), (mean, exact, se)

    s = np.asarray(registered.standard_points(jax.random.PRNGKey(1), 6144, 2))
    assert stats.kstest(s.ravel(), stats.laplace().cdf).pvalue > 1e-3


def test_the_entry_fits_on_pendulum_and_loads_back_by_name(registered, tmp_path):
    path = _entry_file(tmp_path)
    post = ssgp_ppl.fit(path, data="pendulum", settings={"svi.steps": 500})
    assert post.method == "svi" and post.entry.config["model"]["spectral_density"] == "laplace"
    assert post.entry.spec(9).density is registered
    assert 0 < post.metrics["nmse"] < 0.9  # better than the training mean (NMSE 1)
    saved = post.save(tmp_path / "laplace.nc")
    again = ssgp_ppl.load(saved)
    np.testing.assert_allclose(again.metrics["nmse"], post.metrics["nmse"], rtol=1e-12)
    DENSITIES.pop("laplace")
    with pytest.raises(SSGPError, match=r"model.spectral_density: 'laplace' is not one of se"):
        ssgp_ppl.load(saved)
