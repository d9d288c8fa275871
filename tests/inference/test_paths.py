"""Multi-path inference (ssgp_ppl.inference.paths): draw allocation, combination rules, and multi-path fits
of a site-draw method (SVI) and a closed-form one (NCVMP) that predict, save and load."""

import numpy as np
import pytest

from ssgp_ppl import load as load_posterior
from ssgp_ppl.entry import load_entry
from ssgp_ppl.inference.paths import MIXTURE_DRAWS, allocate, loo_log_density, weights_of
from ssgp_ppl.model.predictive import StackedRule
from ssgp_ppl.pipeline import fit


def test_allocate_counts_sum_and_follow_weights():
    w = np.array([0.5004, 0.2996, 0.2, 0.0])
    c = allocate(w)
    assert c.sum() == MIXTURE_DRAWS and c[-1] == 0
    np.testing.assert_array_less(np.abs(c / MIXTURE_DRAWS - w), 1.0 / MIXTURE_DRAWS + 1e-12)


def test_best_and_posterior_weights():
    loo = np.array([[-1.0, -0.5, -3.0], [-2.0, -1.0, -0.1]])  # column sums -3, -1.5, -3.1
    np.testing.assert_array_equal(weights_of("best", loo, np.zeros(3)), [0, 1, 0])
    w = weights_of("posterior", loo, np.array([10.0, 11.0, np.inf]))  # ∝ exp(−loss)
    np.testing.assert_allclose(w, [np.e / (1 + np.e), 1 / (1 + np.e), 0.0])
    stack = weights_of("stacking", loo, np.zeros(3))
    assert stack.sum() == pytest.approx(1.0) and stack[1] > 0 and stack[2] > 0


@pytest.fixture(scope="module")
def small_rows(pendulum):
    return pendulum._replace(x_train=pendulum.x_train[:80], y_train=pendulum.y_train[:80],
                             x_test=pendulum.x_test[:20], y_test=pendulum.y_test[:20])


def _stacked_score(post, data):
    loo = np.stack([loo_log_density(p, data) for p in post.path_posteriors], 1)
    w = np.asarray(post.info.paths.weights)
    return float(np.log(np.exp(loo) @ w).sum())


def test_multi_path_svi(small_rows, tmp_path):
    """3 SVI paths: the mixture has MIXTURE_DRAWS draws with a path coordinate, its LOO log
    score is the weights' and at least each path's own (the simplex holds every vertex), and it
    predicts the same after save and load."""
    entry = load_entry("ssgp_svi").with_overrides(["m=4", "svi.steps=200", "svi.min_steps=0",
                                                   "svi.paths=3", "predictive.samples=30"])
    post = fit(entry, small_rows, "svi", progress=False)
    assert post.info.paths.count == 3 and len(post.path_posteriors) == 3
    w = np.asarray(post.info.paths.weights)
    assert w.sum() == pytest.approx(1.0)
    posterior = post.datatree["posterior"]
    assert posterior.sizes["draw"] == MIXTURE_DRAWS
    np.testing.assert_array_equal(np.bincount(posterior["path"].values, minlength=3), allocate(w))
    assert post.info.paths.stacked_loo == pytest.approx(_stacked_score(post, small_rows), rel=1e-6)
    assert post.info.paths.stacked_loo >= max(post.info.paths.loo) - 1e-6
    back = load_posterior(post.save(tmp_path / "stacked.nc"))
    x = small_rows.x_scaler.inverse(small_rows.x_test)
    np.testing.assert_allclose(back.predict(x).mean, post.predict(x).mean, rtol=1e-6)
    np.testing.assert_array_equal(back.path_of_draw, post.path_of_draw)


def test_multi_path_ncvmp_is_the_weighted_mixture(small_rows, tmp_path):
    """NCVMP paths on three spectral sets: the predictive mean is Σₖ (countₖ / total) meanₖ of the
    paths' closed forms, exactly; the stacked rule saves and loads."""
    entry = load_entry("tan_va").with_overrides(["m=6", "ncvmp.max_iter=40", "ncvmp.paths=3",
                                                 "predictive.samples=20"])
    data = small_rows
    post = fit(entry, data, "ncvmp", progress=False)
    assert isinstance(post.rule, StackedRule)
    counts = np.asarray(post.rule.counts)
    x = data.x_scaler.inverse(data.x_test)
    means = np.stack([p.predict(x).mean for p in post.path_posteriors])
    np.testing.assert_allclose(post.predict(x).mean, counts @ means / counts.sum(), rtol=1e-6)
    back = load_posterior(post.save(tmp_path / "ncvmp.nc"))
    np.testing.assert_allclose(back.predict(x).var, post.predict(x).var, rtol=1e-6)


def test_each_path_checkpoints_on_its_own(tmp_path):
    """Path k saves to checkpoint-path<k>.npz with the path in its fingerprint; on resume only the
    paths that saved one resume (the others start from step 0)."""
    from ssgp_ppl.inference.paths import path_checkpoint
    from ssgp_ppl.runtime.checkpoint import Checkpoint

    ck = Checkpoint(tmp_path / "checkpoint.npz", every=10, fingerprint={"seed": 1}, resume=True)
    (tmp_path / "checkpoint-path0.npz").write_bytes(b"")
    first, second = path_checkpoint(ck, 0), path_checkpoint(ck, 1)
    assert first.path.name == "checkpoint-path0.npz" and first.resume
    assert second.path.name == "checkpoint-path1.npz" and not second.resume
    assert first.fingerprint == {"seed": 1, "path": 0} and second.fingerprint["path"] == 1
    assert path_checkpoint(None, 3) is None


def test_vectorised_paths_equal_their_own_runs(small_rows):
    """run_svi_paths gives each path the result run_svi gives it alone (same start, same key
    stream, the same stop): the paths share one update, nothing else."""
    import dataclasses

    from ssgp_ppl.inference.runners import Schedule, reparam_for_nuts, run_svi, run_svi_paths
    from ssgp_ppl.model.guides import make_guide
    from ssgp_ppl.model.ssgp import with_start

    entry = load_entry("ssgp_svi").with_overrides(["m=3"])
    spec = entry.spec(small_rows.n_features)
    starts = [spec, with_start(spec, {"lengthscales": np.full(spec.d, 3.0), "noise": 0.5})]
    pairs = []
    for sp in starts:
        model = reparam_for_nuts(entry.model(dataclasses.replace(sp)), ["frequencies"])
        pairs.append((model, make_guide("auto_mvn", model, sp)))
    schedule = Schedule(400, 0.01, 0.0, 25, 1e9, 4, 0)  # huge tol: stops after 2 × 4 chunks
    together = run_svi_paths(pairs, small_rows.x_train, small_rows.y_train, schedule,
                             seeds=[3, 11], progress=False)
    for (model, guide), seed, res in zip(pairs, [3, 11], together, strict=True):
        alone = run_svi(model, guide, small_rows.x_train, small_rows.y_train, schedule, seed=seed,
                        progress=False)
        assert res.steps == alone.steps == 200 and res.converged and alone.converged
        np.testing.assert_allclose(res.losses, alone.losses, rtol=1e-4, atol=1e-3)
        for k in alone.params:
            np.testing.assert_allclose(res.params[k], alone.params[k], rtol=1e-3, atol=1e-4)
    assert not np.allclose(together[0].params["auto_loc"], together[1].params["auto_loc"])
