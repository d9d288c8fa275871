"""Contract of every guide class registered in ssgp_ppl.model.guides.GUIDES: the class declares its
name, settings and abilities, the guide covers exactly the model's latent sites, a closed-form
q(s | rest) it declares is the distribution its own draws of s have, and the svi method fits it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro import handlers
from numpyro.infer import Predictive

from ssgp_ppl.data import datasets
from ssgp_ppl.entry import load_entry
from ssgp_ppl.errors import SSGPError
from ssgp_ppl.inference import methods
from ssgp_ppl.model.guides import GUIDES, EmptyGuide, Guide, GuideType, MAPGuide, make_guide
from ssgp_ppl.settings import Settings

# an entry whose latent sites each guide covers
ENTRY = {"auto_normal": "ssgp_svi", "auto_mvn": "ssgp_svi", "auto_lowrank": "ssgp_svi",
         "auto_delta": "ssgp_svi", "joint_affine": "svbssgp", "mean_field": "vssgp",
         "gaussian_lambda": "tan_va_svi", "mixture": "ssgp_mixture"}
D = 2


def test_every_guide_has_a_case():
    assert set(ENTRY) == set(GUIDES)


@pytest.mark.parametrize("name", sorted(GUIDES))
def test_every_registered_guide_declares_its_name_settings_and_abilities(name):
    cls = GUIDES[name]
    assert isinstance(cls, GuideType) and issubclass(cls, Guide) and cls.name == name
    assert cls.description
    assert issubclass(cls.Settings, Settings)
    schema = cls.Settings.schema()
    assert all(f.doc for f in schema.values())
    assert cls.Settings() == cls.Settings(**{k: f.default for k, f in schema.items()})
    assert cls.noncentring in (None, "guide", "model")
    dim = 10  # the memory estimate: at least a location per latent coordinate
    assert isinstance(cls.param_count(dim), int) and cls.param_count(dim) >= dim


@pytest.fixture(scope="module")
def small():
    rng = np.random.default_rng(3)
    x = rng.uniform(-2, 2, (40, D))
    return datasets.from_arrays(x, np.sin(2 * x[:, 0]) + 0.1 * rng.standard_normal(40))


@pytest.mark.parametrize("name", sorted(GUIDES))
def test_every_registered_guide_fits_a_few_svi_steps(name, small):
    """The svi method fits the guide, chosen by name, for 6 steps on 40 rows and predicts."""
    entry = load_entry(ENTRY[name]).with_overrides([
        "m=3", f"svi.guide={name}", "svi.steps=6", "svi.min_steps=6", "svi.chunk=3",
        "svi.paths=1", "partitions.per_step=0", "predictive.samples=20"])
    post = methods.get("svi").run(entry, small, seed=0, progress=False)
    assert post.info.steps == 6 and np.shape(post.losses) == (6,)
    assert np.isfinite(post.losses).all()
    assert post.params and all(np.isfinite(v).all() for v in post.params.values())
    pred = post.predict(np.asarray(small.x_train[:5]))
    assert np.isfinite(pred.mean).all() and (np.asarray(pred.var) > 0).all()


def _build(name):
    entry = load_entry(ENTRY[name]).with_overrides(["m=3"])
    spec = entry.spec(D)
    model = entry.model(spec)
    return spec, model, make_guide(name, model, spec)


@pytest.mark.parametrize("name", sorted(GUIDES))
def test_guide_covers_the_latent_sites_and_declares_its_abilities(name):
    spec, model, guide = _build(name)
    assert isinstance(guide, Guide)
    x = jnp.asarray(np.random.default_rng(0).normal(size=(7, D)))
    handlers.seed(guide, 0)(x, None)  # an autoguide traces the model on its first call
    tr = handlers.trace(handlers.seed(guide, 0)).get_trace(x, None)
    # (numpyro's autoguides also record the model's observation site "y" with obs=None)
    drawn = {k for k, v in tr.items() if v["type"] == "sample" and not v["infer"].get("is_auxiliary")
             and k != "y"}
    assert drawn == set(spec.latent_sites())
    own = guide.own_objective("elbo")
    assert (own is not None) == (name == "mixture")  # only the mixture has its own estimator
    assert guide.own_objective("dlm_log") is None
    assert guide.components == (3 if name == "mixture" else 1)
    params = {k: v["value"] for k, v in tr.items() if v["type"] == "param"}
    draw = {k: tr[k]["value"] for k in drawn}
    if not guide.gaussian_nuisance:
        with pytest.raises(SSGPError, match="no closed-form Gaussian"):
            guide.nuisance_conditional(params, draw)
        assert guide.conditional_and_marginal(params, draw) is None
        return
    loc, tril = guide.nuisance_conditional(params, draw)
    assert loc.shape == (2 * spec.m,) and tril.shape == (2 * spec.m, 2 * spec.m)
    np.testing.assert_allclose(np.triu(np.asarray(tril), 1), 0.0, atol=1e-7)
    both = guide.conditional_and_marginal(params, draw)
    if both is not None:
        np.testing.assert_allclose(both[0], loc, rtol=1e-5)
        np.testing.assert_allclose(both[1], tril, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name", ["mean_field", "gaussian_lambda"])
def test_declared_conditional_is_the_distribution_of_the_drawn_s(name):
    """For guides where s is independent of the other latents, the draws of s have the declared
    mean and covariance (Monte Carlo, 20000 draws: within 5 standard errors)."""
    spec, model, guide = _build(name)
    x = jnp.zeros((5, D))
    params = {k: v["value"] for k, v in handlers.trace(handlers.seed(guide, 0)).get_trace(
        x, None).items() if v["type"] == "param"}
    rng = np.random.default_rng(1)
    params = {k: v + 0.1 * rng.normal(size=np.shape(v)) * (v.ndim < 2) for k, v in params.items()}
    params = {k: jnp.abs(v) if "scale" in k or "shape" in k or "rate" in k else v
              for k, v in params.items()}
    n = 20000
    draws = Predictive(guide, params=params, num_samples=n)(jax.random.PRNGKey(2), x)
    s = np.asarray(draws["nuisance"], np.float64)
    loc, tril = guide.nuisance_conditional(params, {k: v[0] for k, v in draws.items()})
    cov = np.asarray(tril, np.float64) @ np.asarray(tril, np.float64).T
    se = np.sqrt(np.diag(cov) / n)
    assert np.all(np.abs(s.mean(0) - np.asarray(loc)) < 5 * se)
    np.testing.assert_allclose(np.cov(s.T), cov, atol=5 * np.sqrt(2 / n) * np.diag(cov).max())


def test_empty_and_map_guides():
    entry = load_entry("ssgp")
    spec = entry.spec(D)
    assert EmptyGuide(spec)(jnp.zeros((3, D))) is None and not EmptyGuide(spec).gaussian_nuisance
    svi_entry = load_entry("ssgp_svi")
    spec2 = svi_entry.spec(D)
    g = MAPGuide(spec2, svi_entry.model(spec2))
    handlers.seed(g, 0)(jnp.zeros((3, D)), None)
    tr = handlers.trace(handlers.seed(g, 0)).get_trace(jnp.zeros((3, D)), None)
    sites = {k: v for k, v in tr.items() if v["type"] == "sample" and k != "y"}
    assert set(sites) == set(spec2.latent_sites())
    other = handlers.trace(handlers.seed(g, 7)).get_trace(jnp.zeros((3, D)), None)
    for k, v in sites.items():  # point estimates: every seed draws the same values
        np.testing.assert_array_equal(v["value"], other[k]["value"])
