"""The memory estimate a fit is checked against before it starts (ssgp_ppl.runtime.resources)."""

import re

import numpy as np
import pytest

import ssgp_ppl.inference.methods  # noqa: F401  (ssgp_ppl.inference.paths imports it; load it first)
from ssgp_ppl import pipeline
from ssgp_ppl.data import datasets
from ssgp_ppl.diagnostics.datatree import LOGLIK_MAX_VALUES, LOO_MIN_DRAWS
from ssgp_ppl.entry import load_entry
from ssgp_ppl.errors import SSGPError
from ssgp_ppl.inference import paths
from ssgp_ppl.runtime import resources


def test_guide_parameters_and_bytes_follow_the_sizes():
    e = load_entry("svbssgp")  # joint affine guide: a triangular D x D scale, D = m d + 2m + 3
    m = e.config["model"]["m"]
    need = resources.estimate(e, n=270, d=500, n_test=30, method="svi")
    dim = m * 500 + 2 * m + 3
    assert need.guide == "joint_affine" and need.guide_params == dim * (dim + 1) // 2 + dim
    assert need.bytes >= 16 * need.guide_params  # parameters, gradient, two Adam moments
    ml = resources.estimate(load_entry("ssgp"), n=1000, d=9, n_test=100, method="ml")
    assert ml.guide_params == 0 and ml.bytes >= 4 * (2 * 20) ** 2 * 8
    mf = resources.estimate(load_entry("vssgp"), n=100, d=3, n_test=10, method="svi")
    assert mf.guide == "mean_field" and mf.guide_params == 2 * (20 * 3 + 40 + 3)


def test_an_impossible_fit_is_refused_unless_forced(monkeypatch):
    monkeypatch.setattr(resources, "memory_bytes", lambda: 2.0**30)  # a 1 GiB machine
    e = load_entry("ssgp").with_overrides(["m=20000"])  # the 40000 x 40000 Gram matrix: 48 GiB
    with pytest.raises(SSGPError, match=r"needs about .* GiB \(m = 20000, d = 9, n = 315\).*--force"):
        resources.check(e, 315, 9, 315, "ml")
    assert resources.check(e, 315, 9, 315, "ml", force=True).bytes > 2.0**30


def test_a_million_test_rows_of_a_multi_path_fit_are_refused_before_it_starts(monkeypatch):
    """``ssgp_svi`` mixes its 8 paths into 1,000 draws: 10⁶ test rows need 1,000 × 10⁶ values per
    per-draw array. On an 8 GiB machine the fit is refused before any path runs, by one error
    naming the memory needed, the test predictions' share and the memory available."""
    monkeypatch.setattr(resources, "memory_bytes", lambda: 8.0 * 2**30)

    def started(*args, **kwargs):
        raise AssertionError("the fit started")

    monkeypatch.setattr(paths, "run", started)
    x = np.linspace(0.0, 1.0, 300)[:, None]
    data = datasets.from_arrays(x, np.sin(6 * x[:, 0]), np.zeros((10**6, 1)), np.zeros(10**6))
    entry = load_entry("ssgp_svi")
    with pytest.raises(SSGPError) as err:
        pipeline.fit(entry, data, progress=False)
    msg = str(err.value)
    assert "\n" not in msg
    assert re.search(r"needs about \d+(\.\d+)? GiB \(m = \d+, d = 1, n = 300.*; \d+(\.\d+)? GiB of it "
                     r"for the test predictions, 1000 draws × 1000000 rows\), more than this "
                     r"machine's 8 GiB allows", msg), msg
    need = resources.estimate(entry, n=300, d=1, n_test=10**6, method="svi")
    assert need.draws == paths.MIXTURE_DRAWS == 1000
    assert need.test_bytes >= resources.TEST_ARRAYS * 1000 * 10**6 * 8 > 8 * 2**30


def test_test_predictions_count_the_draws_each_method_predicts_with():
    """S of the test arrays: the mixture's draws for a multi-path fit, chains × samples for a
    sampler, one for a point estimate, else the predictive samples (raised to LOO_MIN_DRAWS where
    a pointwise log-likelihood is kept)."""
    assert resources.draws(load_entry("ssgp_svi"), "svi", 315) == paths.MIXTURE_DRAWS
    assert resources.draws(load_entry("tan_va_stacked"), "ncvmp", 315) == paths.MIXTURE_DRAWS
    nuts = load_entry("ssgp").with_overrides(["nuts.chains=3", "nuts.samples=250"])
    assert resources.draws(nuts, "nuts", 315) == 750
    assert resources.draws(load_entry("ssgp"), "ml", 315) == 1
    few = load_entry("vssgp").with_overrides(["samples=20"])
    assert resources.draws(few, "svi", 315) == LOO_MIN_DRAWS
    assert resources.draws(few, "svi", LOGLIK_MAX_VALUES) == 20
    small = resources.estimate(few, n=315, d=1, n_test=1000, method="svi")
    big = resources.estimate(few, n=315, d=1, n_test=2000, method="svi")
    assert big.bytes - small.bytes == resources.TEST_ARRAYS * LOO_MIN_DRAWS * 1000 * 8


@pytest.mark.skipif(resources.memory_maps() is None, reason="/proc/self/maps: Linux only")
def test_release_compiled_gives_back_the_memory_maps_of_compiled_programs():
    """Each compiled program holds memory maps until JAX's caches let it go: four fresh NUTS runs
    add maps; above the share release_compiled drops them (the count falls), below it does
    nothing."""
    import jax
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import MCMC, NUTS

    def model(y):
        mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
        numpyro.sample("y", dist.Normal(mu, 1.0), obs=y)

    resources.release_compiled(0.0)
    before, limit = resources.memory_maps()
    for i in range(4):  # a new MCMC object compiles its programs again
        mcmc = MCMC(NUTS(model), num_warmup=20, num_samples=20, progress_bar=False)
        mcmc.run(jax.random.PRNGKey(i), jnp.ones(5))
    del mcmc
    grown = resources.memory_maps()[0]
    assert grown > before + 40  # about 19 a run
    assert resources.release_compiled(1.0) is False and resources.memory_maps()[0] >= grown - 5
    assert resources.release_compiled(0.0) is True
    assert resources.memory_maps()[0] < grown - 40 and limit >= 1000
