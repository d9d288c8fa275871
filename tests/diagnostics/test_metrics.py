"""Tests for ssgp_ppl.diagnostics.metrics: closed forms against integration, sampling and hand examples."""

import math

import numpy as np
import pytest
from scipy import integrate, stats

from ssgp_ppl.diagnostics.metrics import (
    DEFAULT_LEVELS,
    coverage,
    coverage_curve,
    coverage_off,
    crps_gaussian,
    mixture_moments,
    mnlp,
    nmse,
    regression_metrics,
    rmse,
)
from ssgp_ppl.errors import SSGPError

# --------------------------------------------------------------------------- CRPS

CRPS_CASES = [
    (0.0, 1.0, 0.0),
    (0.0, 1.0, 1.3),
    (2.5, 0.3, 1.9),
    (-1.0, 4.0, 7.0),
    (10.0, 0.01, 10.02),
    (0.0, 2.0, -5.0),
]


def _crps_quad(mu: float, sigma: float, y: float) -> float:
    """int (F(t) - 1{t >= y})^2 dt, split at y and mu, tails beyond 40 sigma negligible."""
    lo, hi = min(mu, y) - 40.0 * sigma, max(mu, y) + 40.0 * sigma
    knots = sorted({lo, min(mu, y), max(mu, y), hi})
    total = 0.0
    for a, b in zip(knots[:-1], knots[1:], strict=True):
        if b <= y:
            f = lambda t: stats.norm.cdf(t, mu, sigma) ** 2  # noqa: E731
        else:
            f = lambda t: stats.norm.sf(t, mu, sigma) ** 2  # noqa: E731
        val, _ = integrate.quad(f, a, b, epsabs=0.0, epsrel=1e-12, limit=200)
        total += val
    return total


@pytest.mark.parametrize("mu,sigma,y", CRPS_CASES)
def test_crps_matches_numerical_integration(mu, sigma, y):
    got = crps_gaussian([y], [mu], [sigma**2])
    assert got == pytest.approx(_crps_quad(mu, sigma, y), rel=1e-8)


def test_crps_is_mean_over_points():
    mus, sigmas, ys = (np.array(c) for c in zip(*CRPS_CASES, strict=True))
    per_point = [crps_gaussian([y], [m], [s**2]) for m, s, y in CRPS_CASES]
    assert crps_gaussian(ys, mus, sigmas**2) == pytest.approx(np.mean(per_point), rel=1e-14)


@pytest.mark.parametrize("mu,sigma,y", [(0.0, 1.0, 0.4), (3.0, 0.5, 2.0), (-2.0, 3.0, 4.0)])
def test_crps_matches_monte_carlo_energy_form(mu, sigma, y):
    rng = np.random.default_rng(20240611)
    m = 400_000
    x = rng.normal(mu, sigma, m)
    x2 = rng.normal(mu, sigma, m)
    h = np.abs(x - y) - 0.5 * np.abs(x - x2)
    se = h.std(ddof=1) / math.sqrt(m)
    got = crps_gaussian([y], [mu], [sigma**2])
    assert abs(got - h.mean()) < 5.0 * se


def test_crps_zero_width_limit_is_absolute_error():
    # as sigma -> 0 the CRPS tends to |y - mu|
    assert crps_gaussian([1.0], [0.0], [1e-20]) == pytest.approx(1.0, rel=1e-9)


# --------------------------------------------------------------------------- MNLP


def test_mnlp_equals_negative_mean_logpdf():
    rng = np.random.default_rng(1)
    n = 500
    mu = rng.normal(size=n) * 3.0
    sd = rng.uniform(0.05, 5.0, n)
    y = rng.normal(size=n) * 4.0
    expected = -np.mean(stats.norm.logpdf(y, mu, sd))
    assert mnlp(y, mu, sd**2) == pytest.approx(expected, rel=1e-12)


def test_mnlp_hand_value():
    # y = mu, var = 1: 0.5 * log(2 pi)
    assert mnlp([2.0, -1.0], [2.0, -1.0], [1.0, 1.0]) == pytest.approx(0.5 * math.log(2 * math.pi))


# --------------------------------------------------------------------------- coverage


def _predictive(seed: int, n: int):
    rng = np.random.default_rng(seed)
    mu = rng.normal(size=n) * 2.0
    sd = rng.uniform(0.2, 3.0, n)
    y = mu + sd * rng.normal(size=n)
    return y, mu, sd


def test_coverage_calibrated_within_binomial_error():
    n = 200_000
    y, mu, sd = _predictive(7, n)
    levels, emp = coverage_curve(y, mu, sd**2)
    np.testing.assert_array_equal(levels, DEFAULT_LEVELS)
    for p, c in zip(levels, emp, strict=True):
        se = math.sqrt(p * (1.0 - p) / n)
        assert abs(c - p) < 4.0 * se, (p, c)
        assert coverage(y, mu, sd**2, p) == c
    for p in (0.5, 0.95, 0.99):
        se = math.sqrt(p * (1.0 - p) / n)
        assert abs(coverage(y, mu, sd**2, p) - p) < 4.0 * se


def test_coverage_overdispersed_above_and_underdispersed_below_nominal():
    n = 200_000
    y, mu, sd = _predictive(8, n)
    levels, over = coverage_curve(y, mu, (1.5 * sd) ** 2)
    _, under = coverage_curve(y, mu, (0.67 * sd) ** 2)
    for p, c_over, c_under in zip(levels, over, under, strict=True):
        se = math.sqrt(p * (1.0 - p) / n)
        assert c_over > p + 4.0 * se
        assert c_under < p - 4.0 * se


def test_coverage_off_needs_a_departure_both_large_and_beyond_sampling_noise():
    """Flagged outside [0.80, 0.97] and more than 3 binomial sds sqrt(0.09 / n) from 0.9."""
    assert coverage_off(0.85, 1000) is None and coverage_off(0.96, 1000) is None
    assert coverage_off(0.79, 1000) == (
        "test coverage of the 90% interval is 0.79 on 1000 rows, 11.6 binomial sds from 0.9 and "
        "outside [0.8, 0.97]: the predictive intervals are too narrow (miscalibrated)")
    assert coverage_off(0.98, 1000).endswith("8.4 binomial sds from 0.9 and outside [0.8, 0.97]: "
                                             "the predictive intervals are too wide (miscalibrated)")
    # on 30 rows sd = 0.055: 0.75 is 2.7 sds off (noise), 0.7 is 3.7; 1.0 never flagged
    assert coverage_off(0.75, 30) is None and coverage_off(1.0, 30) is None
    assert "0.7 on 30 rows, 3.7 binomial sds" in coverage_off(0.7, 30)
    # on 100 rows sd = 0.03: all 100 inside is 3.3 sds too wide
    assert "too wide" in coverage_off(1.0, 100) and coverage_off(0.96, 100) is None


def test_coverage_hand_example():
    # central 68.27% interval of N(0,1) is about [-1, 1]
    y = [0.0, 0.5, -0.9, 1.5, -3.0]
    assert coverage(y, np.zeros(5), np.ones(5), 0.6827) == pytest.approx(3 / 5)


def test_coverage_curve_custom_levels():
    y, mu, sd = _predictive(9, 1000)
    levels, emp = coverage_curve(y, mu, sd**2, levels=[0.25, 0.75])
    assert levels.dtype == np.float64 and emp.dtype == np.float64
    np.testing.assert_array_equal(levels, [0.25, 0.75])
    assert emp[0] <= emp[1]


# --------------------------------------------------------------------------- RMSE / NMSE


def test_rmse_hand_example():
    assert rmse([1.0, 2.0, 3.0], [1.0, 2.0, 5.0]) == pytest.approx(math.sqrt(4.0 / 3.0), rel=1e-15)
    assert rmse([1, 2, 3], [1, 2, 3]) == 0.0


def test_nmse_is_exactly_one_when_predicting_test_mean():
    rng = np.random.default_rng(3)
    y = rng.normal(5.0, 2.0, 137)
    assert nmse(y, np.full_like(y, y.mean())) == 1.0


def test_nmse_with_training_mean():
    y = np.array([1.0, 2.0, 3.0, 6.0])
    mu = np.array([1.5, 2.0, 2.0, 5.0])
    ybar_train = 2.5
    expected = np.mean((y - mu) ** 2) / np.mean((y - ybar_train) ** 2)
    assert nmse(y, mu, y_train_mean=ybar_train) == pytest.approx(expected, rel=1e-15)
    assert nmse(y, np.full(4, ybar_train), y_train_mean=ybar_train) == 1.0
    # default uses the test mean (3.0), which differs from the training mean here
    assert nmse(y, mu) == pytest.approx(np.mean((y - mu) ** 2) / np.mean((y - 3.0) ** 2))


def test_nmse_perfect_prediction_is_zero():
    y = [0.0, 1.0, 4.0]
    assert nmse(y, y) == 0.0


# --------------------------------------------------------------------------- regression_metrics


def test_regression_metrics_keys_and_values():
    y, mu, sd = _predictive(11, 2000)
    var = sd**2
    out = regression_metrics(y, mu, var)
    assert list(out) == ["rmse", "nmse", "mnlp", "crps", "coverage_50", "coverage_90"]
    assert all(type(v) is float for v in out.values())
    assert out["rmse"] == rmse(y, mu)
    assert out["nmse"] == nmse(y, mu)
    assert out["mnlp"] == mnlp(y, mu, var)
    assert out["crps"] == crps_gaussian(y, mu, var)
    assert out["coverage_50"] == coverage(y, mu, var, 0.5)
    assert out["coverage_90"] == coverage(y, mu, var, 0.9)


# --------------------------------------------------------------------------- mixture_moments


def test_mixture_moments_hand_example():
    means = np.array([[0.0, 1.0], [2.0, 1.0]])
    variances = np.array([[1.0, 0.5], [3.0, 0.5]])
    m, v = mixture_moments(means, variances)
    np.testing.assert_allclose(m, [1.0, 1.0], rtol=0, atol=0)
    # point 0: avg var 2 + population var of {0, 2} = 1 -> 3; point 1: 0.5 + 0 -> 0.5
    np.testing.assert_allclose(v, [3.0, 0.5], rtol=1e-15)
    assert m.shape == v.shape == (2,)


def test_mixture_moments_single_component_is_identity():
    means = np.array([[0.3, -2.0, 5.0]])
    variances = np.array([[0.1, 2.0, 7.0]])
    m, v = mixture_moments(means, variances)
    np.testing.assert_array_equal(m, means[0])
    np.testing.assert_array_equal(v, variances[0])


def test_mixture_moments_matches_sampling():
    rng = np.random.default_rng(5)
    s, n, draws = 4, 3, 400_000
    means = rng.normal(size=(s, n)) * 2.0
    variances = rng.uniform(0.1, 2.0, (s, n))
    m, v = mixture_moments(means, variances)
    comp = rng.integers(0, s, size=(draws, n))
    cols = np.arange(n)
    x = means[comp, cols] + np.sqrt(variances[comp, cols]) * rng.normal(size=(draws, n))
    xm = x.mean(axis=0)
    xv = x.var(axis=0)
    se_mean = np.sqrt(v / draws)
    # var of the sample variance: (mu4 - var^2) / draws, estimated from the sample
    se_var = np.sqrt((np.mean((x - xm) ** 4, axis=0) - xv**2) / draws)
    assert np.all(np.abs(xm - m) < 5.0 * se_mean)
    assert np.all(np.abs(xv - v) < 5.0 * se_var)


# --------------------------------------------------------------------------- validation

Y3 = [0.0, 1.0, 2.0]
M3 = [0.1, 0.9, 2.2]
V3 = [1.0, 0.5, 2.0]


def _msg(exc_info) -> str:
    msg = str(exc_info.value)
    assert "\n" not in msg
    return msg


VAR_FUNCS = [
    ("mnlp", lambda y, m, v: mnlp(y, m, v)),
    ("crps_gaussian", lambda y, m, v: crps_gaussian(y, m, v)),
    ("coverage", lambda y, m, v: coverage(y, m, v, 0.5)),
    ("coverage_curve", lambda y, m, v: coverage_curve(y, m, v)),
    ("regression_metrics", lambda y, m, v: regression_metrics(y, m, v)),
]
ALL_FUNCS = VAR_FUNCS + [
    ("rmse", lambda y, m, v: rmse(y, m)),
    ("nmse", lambda y, m, v: nmse(y, m)),
]


@pytest.mark.parametrize("name,fn", ALL_FUNCS)
@pytest.mark.parametrize(
    "args,fragments",
    [
        (([0.0, np.nan, np.inf], M3, V3), ["y", "2 non-finite"]),
        ((Y3, [0.0, 1.0, -np.inf], V3), ["mean", "1 non-finite"]),
        ((Y3, [0.0, 1.0], V3), ["mean", "length 2", "length 3"]),
        ((np.zeros((3, 1)), M3, V3), ["y", "1-D"]),
        ((2.0, M3, V3), ["y", "1-D"]),
        (([], [], []), ["y", "empty"]),
        ((["a", "b", "c"], M3, V3), ["y", "numeric"]),
        (([[1.0], [2.0, 3.0]], M3, V3), ["y", "convertible"]),
    ],
)
def test_validation_y_and_mean(name, fn, args, fragments):
    with pytest.raises(SSGPError) as ei:
        fn(*args)
    msg = _msg(ei)
    assert msg.startswith(name + ":")
    for frag in fragments:
        assert frag in msg


@pytest.mark.parametrize("name,fn", VAR_FUNCS)
@pytest.mark.parametrize(
    "var,fragments",
    [
        ([1.0, 0.0, -2.0], ["var", "2 non-positive"]),
        ([1.0, np.nan, 1.0], ["var", "1 non-finite"]),
        ([1.0, 1.0], ["var", "length 2", "length 3"]),
        ([[1.0, 1.0, 1.0]], ["var", "1-D"]),
    ],
)
def test_validation_var(name, fn, var, fragments):
    with pytest.raises(SSGPError) as ei:
        fn(Y3, M3, var)
    msg = _msg(ei)
    assert msg.startswith(name + ":")
    for frag in fragments:
        assert frag in msg


@pytest.mark.parametrize("level", [0.0, 1.0, -0.2, 1.5, np.nan, "x", None])
def test_validation_coverage_level(level):
    with pytest.raises(SSGPError, match="coverage: level"):
        coverage(Y3, M3, V3, level)


@pytest.mark.parametrize(
    "levels,fragment",
    [
        ([0.5, 1.0, 0.0], "2 entries outside"),
        ([0.5, np.nan], "1 non-finite"),
        ([], "empty"),
        ([[0.5]], "1-D"),
    ],
)
def test_validation_coverage_curve_levels(levels, fragment):
    with pytest.raises(SSGPError, match="coverage_curve: levels") as ei:
        coverage_curve(Y3, M3, V3, levels=levels)
    assert fragment in _msg(ei)


def test_validation_nmse():
    with pytest.raises(SSGPError, match="nmse: mean\\(\\(y - ybar\\)\\*\\*2\\) is 0"):
        nmse([2.0, 2.0], [1.0, 3.0])
    with pytest.raises(SSGPError, match="nmse: y_train_mean must be finite"):
        nmse(Y3, M3, y_train_mean=np.inf)
    with pytest.raises(SSGPError, match="nmse: y_train_mean must be a number"):
        nmse(Y3, M3, y_train_mean="mean")


@pytest.mark.parametrize(
    "means,variances,fragments",
    [
        (np.zeros((2, 3)), np.ones((2, 2)), ["variances", "shape (2, 2)", "shape (2, 3)"]),
        (np.zeros(3), np.ones(3), ["means", "2-D"]),
        (np.zeros((2, 3)), np.ones(3), ["variances", "2-D"]),
        (np.zeros((0, 3)), np.ones((0, 3)), ["means", "empty"]),
        (np.zeros((2, 0)), np.ones((2, 0)), ["means", "empty"]),
        (np.array([[0.0, np.nan], [np.inf, 1.0]]), np.ones((2, 2)), ["means", "2 non-finite"]),
        (np.zeros((2, 2)), np.array([[1.0, np.nan], [1.0, 1.0]]), ["variances", "1 non-finite"]),
        (np.zeros((2, 2)), np.array([[1.0, 0.0], [-1.0, -3.0]]), ["variances", "3 non-positive"]),
    ],
)
def test_validation_mixture_moments(means, variances, fragments):
    with pytest.raises(SSGPError) as ei:
        mixture_moments(means, variances)
    msg = _msg(ei)
    assert msg.startswith("mixture_moments:")
    for frag in fragments:
        assert frag in msg


def test_default_levels_read_only():
    with pytest.raises(ValueError):
        DEFAULT_LEVELS[0] = 0.5
