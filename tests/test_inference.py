"""Guide draws with their densities: E_q[log p − log q] is the ELBO that NumPyro's Trace_ELBO
estimates, for every guide family of the catalog (auto, joint affine, mean field, Gaussian λ)."""

import jax
import numpy as np
import pytest
from numpyro.infer import SVI, Trace_ELBO
from numpyro.optim import Adam

from ssgp_ppl.entry import load_entry
from ssgp_ppl.inference import guide_draws_with_density


@pytest.mark.parametrize("name", ["ssgp_svi", "svbssgp", "vssgp", "tan_va_svi"])
def test_log_p_minus_log_q_averages_to_the_elbo(name, pendulum):
    entry = load_entry(name)
    spec = entry.spec(pendulum.n_features)
    model = entry.model(spec)
    guide = entry.guide(spec, model)
    x, y = pendulum.x_train[:60], pendulum.y_train[:60]
    svi = SVI(model, guide, Adam(0.01), Trace_ELBO())
    params = svi.get_params(svi.init(jax.random.PRNGKey(0), x, y))
    n = 3000
    draws, log_p, log_q = guide_draws_with_density(model, guide, params, x, y, num_samples=n,
                                                   seed=1)
    w = np.asarray(log_p - log_q, np.float64)
    assert np.all(np.isfinite(w))
    loss = Trace_ELBO(num_particles=n).loss(jax.random.PRNGKey(2), params, model, guide, x, y)
    se = w.std() / np.sqrt(n) * np.sqrt(2)
    assert w.mean() == pytest.approx(-float(loss), abs=4 * se + 1e-3 * abs(w.mean()))
    assert set(draws) >= set(spec.latent_sites())
