"""A positive target fitted on its logarithm (``log_target``): the predictive of y back-transformed
from the Gaussian on log y (log-normal per draw) against float64 references computed with
scipy.stats.lognorm and by Monte Carlo; metrics on y; non-positive targets refused by row; the
transform saved with the posterior; the CLI flag."""

import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from scipy import integrate, optimize
from scipy.stats import lognorm

import ssgp_ppl
from ssgp_ppl.cli import main
from ssgp_ppl.data.datasets import from_arrays, load
from ssgp_ppl.errors import SSGPError
from ssgp_ppl.model.predictive import predict_sites

SETTINGS = {"m": 5, "ml.steps": 200}


def _toy(n=40, n_test=20, seed=0):
    """x on [-3, 3], log y = 1 + sin x + N(0, 0.3²): a log-normal target."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-3, 3, (n + n_test, 1))
    y = np.exp(1.0 + np.sin(x[:, 0]) + 0.3 * rng.standard_normal(n + n_test))
    return x[:n], y[:n], x[n:], y[n:]


def _mixture(mu, var):
    """The log-normals exp(N(mu[s], var[s])) (S, n) of each draw s and point, by
    scipy.stats.lognorm."""
    return lognorm(s=np.sqrt(var), scale=np.exp(mu))


def _quantile(mu, var, p):
    """The p-quantile of each point's equal-weight mixture of log-normals, by root finding on
    the mixture's cdf."""
    out = []
    for j in range(mu.shape[1]):
        cdf = _mixture(mu[:, j], var[:, j]).cdf
        out.append(optimize.brentq(lambda t, cdf=cdf: cdf(t).mean() - p, 1e-12, 1e6, xtol=1e-14,
                                   rtol=1e-13))
    return np.array(out)


def test_mixture_back_transform_matches_scipy_and_monte_carlo(x64):
    """Seven posterior draws of the sites under the marginal rule: the predictive of y is the
    mixture of the log-normals of the draws' Gaussians on log y (those of a prediction on log y
    itself): its mean, variance, 5% / 95% quantiles and log density, and y* draws exp of log y*'s."""
    x, y, xt, yt = _toy()
    data = from_arrays(x, y, xt, yt, log_target=True)
    logs = from_arrays(x, np.log(y), xt, np.log(yt))  # the same model, told nothing
    np.testing.assert_allclose(data.y_train, logs.y_train, rtol=0, atol=1e-14)
    rng = np.random.default_rng(1)
    sites = {"frequencies": 0.3 * rng.standard_normal((7, 4, 1)),
             "signal": rng.uniform(0.5, 1.5, 7), "noise": rng.uniform(0.2, 0.6, 7)}
    p = predict_sites(sites, data, "marginal")
    q = predict_sites(sites, logs, "marginal")
    mu = q.mean_f * q.y_scale + q.y_shift  # each draw's Gaussian on log y, in log units
    var = q.var_y * q.y_scale**2
    comp = _mixture(mu, var)
    mean = comp.mean().mean(0)
    np.testing.assert_allclose(p.mean, mean, rtol=1e-12)
    np.testing.assert_allclose(p.var, (comp.var() + comp.mean() ** 2).mean(0) - mean**2,
                               rtol=1e-10)
    lo, hi = p.interval(0.9)
    np.testing.assert_allclose(lo, _quantile(mu, var, 0.05), rtol=1e-9)
    np.testing.assert_allclose(hi, _quantile(mu, var, 0.95), rtol=1e-9)
    assert np.all(lo > 0)
    np.testing.assert_allclose(p.log_density(yt), np.log(comp.pdf(yt).mean(0)), rtol=1e-12)
    np.testing.assert_allclose(p.draws, np.exp(q.draws), rtol=1e-13)
    # Monte Carlo: a draw picks a component, then exp of its Gaussian
    n = 200_000
    k = rng.integers(0, 7, (n, mu.shape[1]))
    cols = np.arange(mu.shape[1])
    z = np.exp(mu[k, cols] + np.sqrt(var[k, cols]) * rng.standard_normal(k.shape))
    se = z.std(0) / np.sqrt(n)
    assert np.all(np.abs(z.mean(0) - p.mean) < 4 * se)
    assert np.all(np.abs(np.quantile(z, 0.95, axis=0) / hi - 1) < 0.02)


@pytest.fixture(scope="module")
def fitted():
    """A type-II fit of the toy with log_target (its test split scored), and the same fit on
    log y."""
    import jax

    x, y, xt, yt = _toy()
    with jax.enable_x64(True):
        post = ssgp_ppl.fit("ssgp", x=x, y=y, x_test=xt, y_test=yt, settings=SETTINGS,
                            log_target=True, progress=False)
        plain = ssgp_ppl.fit("ssgp", x=x, y=np.log(y), x_test=xt, y_test=np.log(yt),
                             settings=SETTINGS, progress=False)
    return post, plain, xt, yt


def test_a_fit_on_log_y_is_scored_on_y(fitted):
    """One type-II draw: the predictive of y is the log-normal of the fit on log y. Its mean,
    variance, interval and density against scipy; RMSE, NMSE, MNLP, CRPS (numerical
    integration) and coverage on y; the DataTree says the target was log-transformed."""
    import jax

    post, plain, xt, yt = fitted
    for k, v in post.sites.items():
        np.testing.assert_array_equal(v, plain.sites[k], err_msg=k)
    with jax.enable_x64(True):
        p, q = post.predict(xt), plain.predict(xt)
    d = lognorm(s=np.sqrt(q.var), scale=np.exp(q.mean))
    np.testing.assert_allclose(p.mean, d.mean(), rtol=1e-12)
    np.testing.assert_allclose(p.var, d.var(), rtol=1e-10)
    lo, hi = p.interval(0.9)
    np.testing.assert_allclose(lo, d.ppf(0.05), rtol=1e-9)
    np.testing.assert_allclose(hi, d.ppf(0.95), rtol=1e-9)
    np.testing.assert_allclose(p.log_density(yt), d.logpdf(yt), rtol=1e-12)

    m = post.metrics
    np.testing.assert_allclose(m["rmse"], np.sqrt(np.mean((yt - d.mean()) ** 2)), rtol=1e-9)
    np.testing.assert_allclose(m["nmse"], np.mean((yt - d.mean()) ** 2) / np.var(yt), rtol=1e-9)
    np.testing.assert_allclose(m["mnlp"], -np.mean(d.logpdf(yt)), rtol=1e-9)
    np.testing.assert_allclose(m["nll"], -np.mean(d.logpdf(yt)), rtol=1e-9)
    # the log-scale fit's scores move by the Jacobian: mean log y
    np.testing.assert_allclose(m["mnlp"] - plain.metrics["mnlp"], np.mean(np.log(yt)), rtol=1e-9)
    def crps(j):  # ∫ (F(t) − 1{t ≥ y})² dt, on either side of y
        one = lognorm(s=np.sqrt(q.var[j]), scale=np.exp(q.mean[j]))
        return (integrate.quad(lambda t: one.cdf(t) ** 2, 0, yt[j], epsabs=0, epsrel=1e-11)[0]
                + integrate.quad(lambda t: one.sf(t) ** 2, yt[j], np.inf, epsabs=0,
                                 epsrel=1e-11)[0])

    np.testing.assert_allclose(m["crps"], np.mean([crps(j) for j in range(len(yt))]), rtol=1e-8)
    inside = (yt >= d.ppf(0.05)) & (yt <= d.ppf(0.95))
    assert m["coverage_90"] == np.mean(inside) == plain.metrics["coverage_90"]
    assert m["coverage_50"] == plain.metrics["coverage_50"]
    dt = post.datatree
    assert dt.attrs["target_transform"] == "log" and "log(target)" in dt.attrs["target_note"]
    np.testing.assert_allclose(dt["predictions_constant_data"]["y_test"].values, yt, rtol=1e-12)
    assert "log-transformed" in repr(post)


def test_the_transform_is_saved_with_the_posterior(fitted, tmp_path):
    """save / load: the loaded posterior back-transforms its predictions as the saved one did."""
    import jax

    post, _, xt, yt = fitted
    with jax.enable_x64(True):  # the fit's float64 draws stay float64
        back = ssgp_ppl.load(post.save(tmp_path / "p.nc"))
        a, b = post.predict(xt), back.predict(xt)
    assert back.y_scaler.log and back.test.log
    for k in ("mean", "var", "draws"):
        np.testing.assert_array_equal(getattr(a, k), getattr(b, k), err_msg=k)
    np.testing.assert_array_equal(a.interval(0.9), b.interval(0.9))
    np.testing.assert_array_equal(back.test.interval(0.9), post.test.interval(0.9))
    assert back.metrics == post.metrics
    assert xr.open_datatree(tmp_path / "p.nc", engine="h5netcdf").attrs["target_transform"] == "log"
    assert post.test.mean.min() > 0 and np.all(back.test.draws > 0)


def test_a_target_that_is_not_positive_is_one_error_naming_column_and_row(tmp_path):
    x, y, xt, yt = _toy()
    table = pd.DataFrame({"age": x[:, 0], "wage": y})
    table.loc[7, "wage"] = 0.0
    table.loc[9, "wage"] = -2.5
    table.to_csv(tmp_path / "wages.csv", index=False)
    with pytest.raises(SSGPError, match=r"^'.*wages.csv': a log-transformed target must be "
                       r"positive, but column 'wage' has 2 values <= 0 \(the first: row 7 is 0\)$"):
        load(str(tmp_path / "wages.csv"), log_target=True)
    # rows dropped for a missing value do not renumber the table's rows
    table.loc[2, "age"] = np.nan
    with pytest.raises(SSGPError, match=r"the first: row 7 is 0\)$"):
        ssgp_ppl.fit("ssgp", data=table, dropna=True, log_target=True, settings=SETTINGS)
    good = table.drop(index=[7, 9]).dropna()
    with pytest.raises(SSGPError, match=r"^'.*wages.csv': .* column 'wage' has 2 values <= 0 "
                       r"\(the first: row 7 is 0\)$"):
        load(good, test=str(tmp_path / "wages.csv"), log_target=True)
    with pytest.raises(SSGPError, match=r"^y: .* column 'y' has 1 value <= 0 \(the first: row 3 "
                       r"is -1\)$"):
        ssgp_ppl.fit("ssgp", x=x, y=np.where(np.arange(len(y)) == 3, -1.0, y), log_target=True)
    with pytest.raises(SSGPError, match=r"^y_test: .* \(the first: row 0 is 0\)$"):
        ssgp_ppl.fit("ssgp", x=x, y=y, x_test=xt, y_test=yt * 0, log_target=True)
    with pytest.raises(SSGPError, match="log-transformed target must be continuous, not binary"):
        ssgp_ppl.fit("ssgp_probit", x=x, y=y, log_target=True)
    with pytest.raises(SSGPError, match="log-transformed target needs the gaussian likelihood"):
        ssgp_ppl.fit("vssgp", x=x, y=y, log_target=True,
                     settings={"likelihood": "student_t", "svi.steps": 2})
    with pytest.raises(SSGPError, match="log_target must be True or False"):
        ssgp_ppl.fit("ssgp", x=x, y=y, log_target="yes")


def _cli(*args):
    env = {**os.environ, "PYTHONWARNINGS": "error"}
    return subprocess.run([sys.executable, "-m", "ssgp_ppl.cli", *args], capture_output=True,
                          text=True, env=env, timeout=600)


def test_cli_log_target(tmp_path, capsys):
    """``--log-target``: a non-positive target is one error line and exit status 2; a fit says
    the target was log-transformed and records it in metrics.json and run.json."""
    x, y, xt, yt = _toy()
    table = pd.DataFrame({"age": np.r_[x[:, 0], xt[:, 0]], "wage": np.r_[y, yt]})
    table.to_csv(tmp_path / "wages.csv", index=False)
    table.assign(wage=np.where(table.index == 5, 0.0, table.wage)).to_csv(tmp_path / "bad.csv",
                                                                           index=False)
    for command in ("fit", "compare"):
        code = main([command, "ssgp", "--data", str(tmp_path / "bad.csv"), "--log-target",
                     "--out", str(tmp_path / command)])
        err = capsys.readouterr().err
        assert code == 2
        assert err.count("\n") == 1 and err.startswith("ssgp-ppl: error: ")
        assert "column 'wage' has 1 value <= 0 (the first: row 5 is 0)" in err
    out = tmp_path / "run"
    r = _cli("fit", "ssgp", "--data", str(tmp_path / "wages.csv"), "--log-target", "--out",
             str(out), "--set", "m=5", "--set", "ml.steps=200", "--no-progress")
    assert r.returncode == 0, r.stderr
    assert "target 'wage' log-transformed: fitted on log(wage)" in r.stdout
    rec = json.loads((out / "metrics.json").read_text())
    assert rec["target_transform"] == "log" and rec["n_test"] == 6
    assert json.loads((out / "run.json").read_text())["log_target"] is True
    back = ssgp_ppl.load(out / "posterior.nc")
    assert back.y_scaler.log and back.metrics["mnlp"] == pytest.approx(rec["mnlp"])
