"""m = "auto": the pilot's objective and leave-one-out scores against dense float64 references, the
budget and memory caps, the choice on real data, and the sizing record wherever a fit goes."""

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ssgp_ppl
from ssgp_ppl import pipeline
from ssgp_ppl.entry import load_entry
from ssgp_ppl.errors import SSGPError
from ssgp_ppl.inference import sizing


def _problem(n=40, m=8, d=2, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    y = np.sin(x @ np.array([1.0, -0.5][:d])) + 0.1 * rng.normal(size=n)
    points = rng.normal(size=(m, d))
    params = np.array([*np.log(rng.uniform(0.5, 1.5, d)), np.log(1.2), np.log(0.3)])
    return x, y, points, params


def _dense(x, y, points, params):
    """K = σ_s²/m ΦΦᵀ + σ_n² I in float64 numpy: −log p(y)/n and each row's refit LOO density."""
    d, m = x.shape[1], points.shape[0]
    lam, signal, noise = np.exp(params[:d]), np.exp(params[d]), np.exp(params[d + 1])
    proj = 2 * np.pi * x @ (points * lam / (2 * np.pi)).T
    phi = np.concatenate([np.cos(proj), np.sin(proj)], axis=1)
    k = signal**2 / m * phi @ phi.T + noise**2 * np.eye(len(y))
    _, logdet = np.linalg.slogdet(k)
    nll = 0.5 * (y @ np.linalg.solve(k, y) + logdet + len(y) * np.log(2 * np.pi)) / len(y)
    loo = []
    for i in range(len(y)):  # refit without row i: the Gaussian conditional of yᵢ
        keep = np.arange(len(y)) != i
        kk = k[np.ix_(keep, keep)]
        w = np.linalg.solve(kk, k[keep, i])
        mu, var = w @ y[keep], k[i, i] - w @ k[keep, i]
        loo.append(-0.5 * (np.log(2 * np.pi * var) + (y[i] - mu) ** 2 / var))
    return nll, np.array(loo)


@pytest.mark.parametrize("dual", [False, True], ids=["2m-form", "n-form"])
@pytest.mark.parametrize("x64", [False, True], ids=["float32", "float64"])
def test_pilot_objective_and_loo_equal_dense_reference(dual, x64):
    """Both forms of the pilot's marginal likelihood and leave-one-out densities equal a dense
    float64 computation with explicit refits (1e-6 relative jitter in the n × n form)."""
    x, y, points, params = _problem(n=40 if not dual else 12, m=8)
    nll, loo = _dense(x, y, points, params)
    with jax.enable_x64(x64):
        dt = jnp.float64 if x64 else jnp.float32
        args = (jnp.asarray(params, dt), jnp.asarray(x, dt), jnp.asarray(y, dt),
                jnp.asarray(points, dt))
        got_nll = float(sizing.pilot_objective(*args, dual))
        got_loo = np.asarray(sizing.pilot_loo(*args, dual))
    tol = 1e-5 if x64 else 2e-3
    assert got_nll == pytest.approx(nll, rel=tol, abs=tol)
    np.testing.assert_allclose(got_loo, loo, rtol=tol, atol=tol)


def test_pilot_gradient_matches_finite_differences(x64):
    x, y, points, params = _problem(n=30, m=6)
    args = (jnp.asarray(x), jnp.asarray(y), jnp.asarray(points))
    for dual in (False, True):
        f = lambda p, dual=dual: sizing.pilot_objective(p, *args, dual)  # noqa: E731
        g = np.asarray(jax.grad(f)(jnp.asarray(params)))
        eps = 1e-6
        fd = [(float(f(jnp.asarray(params + eps * e))) - float(f(jnp.asarray(params - eps * e))))
              / (2 * eps) for e in np.eye(len(params))]
        np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-7)


def test_fit_seconds_counts_every_step_and_the_rows_a_step_sees():
    entry = load_entry("vssgp_collapsed")  # every row at every step
    st = entry.config["inference"]["svi"]
    want = st["steps"] * (sizing.STEP_OVERHEAD + 300 * (2 * 50) ** 2 / sizing.RATE)
    assert sizing.fit_seconds(entry, 300, 50) == pytest.approx(want)
    sampled = load_entry("svbssgp")  # partitions drawn per step: the rows do not grow with n
    assert sizing.rows_per_step(sampled, 2_000_000) < 0.01 * 2_000_000
    assert sizing.rows_per_step(sampled, 2_000_000, "ml") == 2_000_000  # type-II: every row
    batch = st["batch_size"]  # above its batch size a collapsed entry's step sees the batch
    assert sizing.rows_per_step(entry, 50_000) == batch < 50_000
    assert sizing.fit_seconds(entry, 50_000, 50) == sizing.fit_seconds(entry, batch, 50)


def test_resolve_on_pendulum_picks_the_best_scored_affordable_m(pendulum):
    """On pendulum the pilot's leave-one-out score rises with m (measured: −1.34 at m = 10 to
    −0.62 at m = 100 on the 315 training rows); the choice is the best one the budget allows, and
    the sizing record travels with the fitted posterior."""
    entry = load_entry("vssgp_collapsed").with_overrides(["m=auto", "svi.steps=100",
                                                         "svi.min_steps=0"])
    budget = (sizing.fit_seconds(entry, pendulum.n_train, 100)
              + sizing.fit_seconds(entry, pendulum.n_train, 200)) / 2  # m <= 100 affordable
    sized = sizing.resolve(entry, pendulum, budget=budget)
    s = sized.sizing
    assert sorted(s.scores) == [10, 25, 50, 100]
    assert set(s.excluded) == {200, 400}
    assert s.scores[100] > s.scores[50] + 0.1 > s.scores[10] + 0.2
    assert s.m == sized.config["model"]["m"] == 100
    assert s.pilot_rows == pendulum.n_train
    assert sizing.resolve(sized, pendulum) is sized  # a number for m: unchanged
    post = pipeline.fit(sized, pendulum, progress=False)
    assert post.entry.sizing == s
    assert post.datatree.attrs["m"] == 100
    assert json.loads(post.datatree.attrs["sizing_record"])["scores"]["100"] == s.scores[100]
    assert "m = 100 sized to the data" in repr(post)


def test_sizing_record_survives_save_and_load(tmp_path):
    entry = load_entry("vssgp_collapsed").with_overrides(["m=auto", "svi.steps=50",
                                                         "svi.min_steps=0"])
    post = ssgp_ppl.fit(entry, "pendulum", budget=0.6, progress=False)
    assert post.entry.sizing is not None and post.entry.sizing.budget == 0.6
    post.save(tmp_path / "p.nc")
    back = ssgp_ppl.load(tmp_path / "p.nc")
    assert back.entry.sizing == post.entry.sizing
    assert back.entry.config["model"]["m"] == post.entry.sizing.m
    assert sizing.Sizing.from_json(post.entry.sizing.to_json()) == post.entry.sizing


def test_settings_keep_the_sizing_only_while_m_is_unchanged(pendulum):
    entry = load_entry("vssgp_collapsed").with_overrides(["m=auto", "svi.steps=50"])
    sized = sizing.resolve(entry, pendulum, budget=0.6)
    assert sized.with_overrides(["svi.lr=0.02"]).sizing == sized.sizing
    assert sized.with_overrides(["m=7"]).sizing is None


def test_resolve_refuses_what_it_cannot_size(pendulum):
    auto = load_entry("vssgp_collapsed").with_overrides(["m=auto"])
    with pytest.raises(sizing.SizingError, match=r"no m of 10, 25.*fits the budget of 0.01 s") as e:
        sizing.resolve(auto, pendulum, budget=0.01)
    assert sorted(e.value.excluded) == list(sizing.LADDER)  # each m left out, with why
    assert all("> budget 0.01 s" in why for why in e.value.excluded.values())
    assert e.value.reason.startswith("no m of") and str(e.value).endswith(e.value.reason)
    for bad in (0, -1, math.inf, math.nan, True, "60"):
        with pytest.raises(SSGPError, match="budget must be a positive number of seconds"):
            sizing.resolve(auto, pendulum, budget=bad)
    probit = load_entry("ssgp_probit").with_overrides(["m=auto"])
    with pytest.raises(SSGPError, match=r"ssgp_probit.toml: model.m: 'auto' is scored by the "
                                        r"Gaussian likelihood"):
        sizing.resolve(probit, pendulum)
    tan = load_entry("tan_va").with_overrides(["m=auto"])
    with pytest.raises(SSGPError, match=r"model.m: 'auto' sizes entries fitted by svi or ml"):
        sizing.resolve(tan, pendulum)


def test_unresolved_entry_names_what_to_do():
    auto = load_entry("vssgp_collapsed").with_overrides(["m=auto"])
    assert auto.latent_sites == load_entry("vssgp_collapsed").latent_sites
    with pytest.raises(SSGPError, match=r"model.m = 'auto' is sized against the training rows"):
        auto.spec(2)
    with pytest.raises(SSGPError, match=r"m: expected int or 'auto', got str 'automatic'"):
        load_entry("vssgp_collapsed").with_overrides(["m=automatic"])


def test_pilot_subsamples_large_data():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(sizing.PILOT_ROWS + 500, 2))
    y = np.sin(x[:, 0]) + 0.1 * rng.normal(size=len(x))
    scores, rows = sizing.pilot_scores(load_entry("vssgp_collapsed"), x, y, (10,))
    assert rows == sizing.PILOT_ROWS
    assert np.isfinite(scores[10])


def test_the_steps_and_the_method_the_fit_runs_are_what_m_is_sized_for(pendulum):
    """``steps`` scales every estimate (compare's --steps, fit's steps=); a method that is not svi
    or ml (a sampler) is sized as the entry's own fit at its own steps."""
    auto = load_entry("vssgp_collapsed").with_overrides(["m=auto"])
    n = pendulum.n_train
    assert sizing.fit_seconds(auto, n, 100, steps=1000) == pytest.approx(
        sizing.fit_seconds(auto, n, 100) * 1000 / auto.config["inference"]["svi"]["steps"])
    budget = sizing.fit_seconds(auto, n, 400, steps=1000) * 1.01  # every m at 1,000 steps
    short = sizing.resolve(auto, pendulum, budget=budget, steps=1000)
    assert not short.sizing.excluded
    own = sizing.resolve(auto, pendulum, budget=budget, steps=1000, method="nuts")
    assert set(own.sizing.excluded) == {m for m in sizing.LADDER
                                        if sizing.fit_seconds(auto, n, m) > budget}
    assert own.sizing.estimated_seconds[10] == round(sizing.fit_seconds(auto, n, 10), 1)


def test_sbc_refuses_auto_before_anything_runs(tmp_path):
    from ssgp_ppl.diagnostics import sbc

    with pytest.raises(SSGPError, match=r"model.m: SBC fits its simulations at a given m"):
        sbc.design("vssgp_collapsed", settings=["m=auto"])
    with pytest.raises(SSGPError, match=r"SBC fits its simulations at a given m"):
        ssgp_ppl.compare("vssgp_collapsed", "pendulum", settings={"m": "auto"}, sbc=5,
                         out=tmp_path / "c", progress=False)
    assert not (tmp_path / "c").exists()


def test_a_comparison_sizes_once_and_records_it(tmp_path, monkeypatch):
    """compare: m sized once (one pilot) for every method; comparison.json, Comparison and the
    report carry it, and a comparison loaded back has the same record."""
    pilots = []
    real = sizing.pilot_scores

    def counted(*a, **k):
        pilots.append(a[3] if len(a) > 3 else k.get("ms"))
        return real(*a, **k)

    monkeypatch.setattr(sizing, "pilot_scores", counted)
    cmp = ssgp_ppl.compare("ssgp_fixed", "pendulum", small=True, out=tmp_path / "c",
                           settings={"m": "auto"}, budget=1.0, progress=False)
    doc = json.loads((tmp_path / "c" / "comparison.json").read_text())
    assert cmp.to_dict() == doc
    assert doc["m"] == cmp.m == cmp.sizing.m == doc["sizing"]["m"]
    assert all(p.entry.config["model"]["m"] == cmp.m for p in cmp.posteriors.values())
    assert cmp.sizing.text() in (tmp_path / "c" / "report.html").read_text().replace("&#x27;", "'")
    assert ssgp_ppl.load_comparison(tmp_path / "c").sizing == cmp.sizing
    assert len(pilots) == 1, pilots
