"""docs/guide/adding-a-model.md's "Adding a likelihood" runs as written: the complementary
log-log likelihood registers from user code, the catalog accepts the entry that names it, and the
fit on pendulum's thresholded target classifies better than chance with predictions that are the
likelihood's own E_q[1 − exp(−e^f)]."""

import math
import re
from pathlib import Path

import numpy as np
import pytest
from scipy import integrate, stats

import ssgp_ppl
from ssgp_ppl.entry import load_entry
from ssgp_ppl.errors import SSGPError
from ssgp_ppl.model import likelihoods

DOC = Path(__file__).resolve().parent.parent / "docs" / "guide" / "adding-a-model.md"


def _blocks(lang: str) -> list[str]:
    section = DOC.read_text().split("## Adding a likelihood", 1)[1]
    return re.findall(rf"```{lang}\n(.+?)\n```", section, re.S)


def test_without_registration_the_catalog_names_the_known_likelihoods(tmp_path):
    path = tmp_path / "cloglog.toml"
    path.write_text(_blocks("toml")[0])
    assert "cloglog" not in likelihoods.LIKELIHOODS  # (this test runs before the fixture)
    with pytest.raises(SSGPError, match=r"cloglog.toml: model.likelihood: 'cloglog' is not one "
                                        r"of gaussian, student_t, probit, logit, poisson"):
        load_entry(path)


@pytest.fixture(scope="module")
def registered():
    exec(compile(_blocks("python")[0], str(DOC), "exec"), {})
    yield likelihoods.LIKELIHOODS["cloglog"]
    del likelihoods.LIKELIHOODS["cloglog"]


def _p1(mu: float, var: float) -> float:
    """∫ (1 − exp(−e^f)) N(f | mu, var) df, float64 adaptive quadrature."""
    sd = math.sqrt(var)
    return integrate.quad(lambda f: -math.expm1(-math.exp(f)) * stats.norm.pdf(f, mu, sd),
                          mu - 12 * sd, mu + 12 * sd, epsabs=0, epsrel=1e-12)[0]


@pytest.fixture
def entry_file(tmp_path):
    path = tmp_path / "cloglog.toml"
    path.write_text(_blocks("toml")[0])
    return path


def test_the_entry_fits_and_predicts_the_likelihoods_own_mean(registered, entry_file):
    post = ssgp_ppl.fit(entry_file, data="pendulum", progress=False)
    assert post.entry.lik is registered and post.test.mean.shape == (315,)
    m = post.metrics
    assert set(m) == {"error_rate", "brier", "nll"}
    assert m["error_rate"] < 0.35 and m["nll"] < math.log(2) and m["brier"] < 0.25, m
    # P(y* = 1) of a row: the mean over draws of ∫ (1 − exp(−e^f)) N(f | μ_s, v_s) df (float64)
    for row in (0, 157, 314):
        per_draw = [_p1(mu, v) for mu, v in zip(post.test.mean_f[:, row], post.test.var_f[:, row],
                                                 strict=True)]
        np.testing.assert_allclose(post.test.mean[row], np.mean(per_draw), rtol=1e-6)
    assert set(np.unique(post.test.draws)) <= {0.0, 1.0}


def test_the_entry_is_validated_with_the_likelihoods_needs(registered, entry_file):
    entry_file.write_text(entry_file.read_text().replace('rule = "degenerate"', 'rule = "marginal"'))
    with pytest.raises(SSGPError, match=r"cloglog.toml: predictive.rule: the cloglog likelihood "
                                        "needs 'degenerate'"):
        load_entry(entry_file)


def test_a_second_likelihood_of_the_same_name_is_refused(registered):
    with pytest.raises(SSGPError, match="a likelihood named 'cloglog' is registered already"):
        ssgp_ppl.register_likelihood(type(registered)())
