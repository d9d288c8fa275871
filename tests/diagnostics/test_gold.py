"""Gold-standard references (ssgp_ppl.diagnostics.gold): the verdict's thresholds, the target key, storing
K independent SMC runs, ``compare`` reusing a stored reference, and the stored references
themselves (their verdict recomputed from what is stored)."""

import json

import numpy as np
import pytest
import xarray as xr

from ssgp_ppl.diagnostics import gold
from ssgp_ppl.entry import load_entry
from ssgp_ppl.report import compare, small


def _invariants(runs: int, draws: int, shift: float = 0.0, seed: int = 0) -> xr.Dataset:
    """(chain, draw) invariants: every run draws the same N(0, 1) law, run 0 shifted by ``shift``."""
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(runs, draws, 2))
    a[0] += shift
    return xr.Dataset({"noise": (("chain", "draw"), a[..., 0]),
                       "kernel": (("chain", "draw", "lag"), a)})


def _verdict(inv, **kw):
    args = dict(run_nlpd=[1.00, 1.01, 0.99, 1.00], pooled_nlpd=1.0,
                log_z=[-10.0, -10.2, -9.9, -10.1], dim=5,
                is_check={"log_z": -10.05, "se": 0.01, "khat": 0.2})
    return gold.verdict(inv, **(args | kw))


def test_runs_that_agree_are_converged():
    v = _verdict(_invariants(4, 1000))
    assert v["converged"] and v["reasons"] == []
    assert max(v["rhat_max"].values()) <= gold.RHAT_MAX
    assert v["log_evidence_mean"] == pytest.approx(-10.05)
    assert v["log_evidence_se"] == pytest.approx(np.std([-10.0, -10.2, -9.9, -10.1], ddof=1) / 2)


@pytest.mark.parametrize("change, reason", [
    ({"inv": _invariants(4, 1000, shift=0.5)}, "runs disagree: R-hat up to 1.02"),
    ({"inv": _invariants(4, 60)}, "pooled ESS down to"),
    ({"inv": _invariants(3, 1000)}, "3 runs (< 4)"),
    ({"run_nlpd": [1.0, 1.03, 1.0, 1.0]}, "test MNLP is 0.030 from the pooled one"),
    ({"log_z": [-10.0, -11.5, -9.9, -10.1]}, "log evidence has sd 0.75"),
    ({"is_check": {"log_z": -9.0, "se": 0.01, "khat": 0.2}}, "1.05 nats from importance"),
    ({"is_check": {"log_z": -10.05, "se": 0.01, "khat": 0.9}}, "Pareto k̂ 0.90"),
    ({"is_check": None}, "no importance-sampling check"),
    ({"is_check": {"log_z": -10.05, "se": 0.01, "khat": 0.9,
                   "bridge": {"log_z": -9.0, "se": 0.02}}}, "1.05 nats from bridge sampling"),
    ({"is_check": {"log_z": -10.05, "se": 0.01, "khat": 0.9,
                   "bridge": {"log_z": -10.05, "se": 0.3}}}, "bridge sampling's se 0.30"),
])
def test_each_threshold_fails_the_verdict(change, reason):
    """Each threshold fails the verdict and is named; the checks that do not look at the draws
    fail alone (runs that disagree also lose pooled ESS: both are named)."""
    change = dict(change)
    draws_changed = "inv" in change
    v = _verdict(change.pop("inv", _invariants(4, 1000)), **change)
    assert not v["converged"]
    assert any(reason in r for r in v["reasons"]), v["reasons"]
    if not draws_changed:
        assert len(v["reasons"]) == 1, v["reasons"]


def test_bridge_sampling_checks_log_z_where_importance_weights_are_heavy_tailed():
    """k̂ above IS_KHAT_MAX with a bridge sampling estimate (se ≤ BRIDGE_SE_MAX) that matches the
    runs: converged, and the verdict says which estimate checked log Z; with k̂ ≤ IS_KHAT_MAX the
    importance-sampling estimate is the check, whatever the bridge says."""
    bridge = {"log_z": -10.04, "se": 0.02}
    v = _verdict(_invariants(4, 1000),
                 is_check={"log_z": -12.0, "se": 0.01, "khat": 0.9, "bridge": bridge})
    assert v["converged"] and v["evidence_check"] == "bridge sampling", v["reasons"]
    assert v["bridge_gap"] == pytest.approx(0.01)
    v = _verdict(_invariants(4, 1000), is_check={"log_z": -10.05, "se": 0.01, "khat": 0.2,
                                                 "bridge": {"log_z": -3.0, "se": 0.02}})
    assert v["converged"] and v["evidence_check"] == "importance sampling"


def test_no_importance_check_needed_above_its_dimension():
    v = _verdict(_invariants(4, 1000), dim=gold.IS_MAX_DIM + 1, is_check=None)
    assert v["converged"]


def test_shuffled_breaks_ancestor_order():
    """Resampled particles in ancestor order look like a trending chain (R-hat ≫ 1 between the
    halves of one run); shuffled, the same draws pass."""
    from arviz_stats import rhat

    draws = np.sort(np.random.default_rng(1).normal(size=2000)).reshape(1, -1)
    halves = draws.reshape(2, -1)
    assert float(rhat(halves, method="rank")) > 1.5
    mixed = gold.shuffled(draws, seed=0).reshape(2, -1)
    assert float(rhat(mixed, method="rank")) < 1.01


def test_target_key_ignores_last_bits_and_sees_real_changes(pendulum_minmax):
    entry = load_entry("tan_va_svi")
    data = pendulum_minmax
    h = gold.target_hash(gold.target_key(entry, data))
    nudged = data._replace(x_train=data.x_train * (1 + 1e-15))
    assert gold.target_hash(gold.target_key(entry, nudged)) == h
    changed = data._replace(y_train=data.y_train + 1e-3)
    assert gold.target_hash(gold.target_key(entry, changed)) != h
    other = entry.with_overrides(["model.m=21"])
    assert gold.target_hash(gold.target_key(other, data)) != h
    # a fit without type-II sites hands over {}: the same target as no hand-over at all
    from ssgp_ppl.posterior import Handoff

    assert gold.target_hash(gold.target_key(entry, data, Handoff(type2={}))) == h
    # the inference settings are not part of the target
    assert gold.target_hash(gold.target_key(entry.with_overrides(["inference.svi.lr=0.02"]),
                                            data)) == h


@pytest.fixture(scope="module")
def tiny_gold(tmp_path_factory, pendulum_minmax):
    """A gold reference of the quick Tan entry from 4 small SMC runs (float64, each run adapting
    its own kernels: no pilot run), stored in a temporary folder."""
    import jax

    from ssgp_ppl.inference.methods import common
    from ssgp_ppl.inference.methods.smc import target_model
    from ssgp_ppl.inference.smc import tempered_smc_runs

    previous = bool(jax.config.read("jax_enable_x64"))
    entry, data = small(load_entry("tan_va_svi"), pendulum_minmax)
    handoff = gold.comparison_handoff(entry, data)  # the float32 comparison's spectral points
    jax.config.update("jax_enable_x64", True)
    try:
        model, _ = target_model(entry, common.spec_for(entry, data, handoff), None, True)
        runs = tempered_smc_runs(model, data.x_train, data.y_train, runs=4, particles=100,
                                 mcmc_steps=2, seed=3, pilot=False)
        root = tmp_path_factory.mktemp("gold")
        g = gold.store(entry, data, handoff, runs, settings={"particles": 100, "mcmc_steps": 2,
                                                             "draws_per_run": 100},
                       draws=100, is_draws=20_000, root=root)
    finally:
        jax.config.update("jax_enable_x64", previous)
    return entry, data, g, runs


def test_stored_reference_is_found_and_holds_its_runs(tiny_gold):
    """Found for the float32 comparison's target, not for another model or other spectral
    points (the same entry's points drawn in float64 are another target)."""
    import dataclasses

    import jax

    from ssgp_ppl.posterior import Handoff

    entry, data, g, runs = tiny_gold
    assert gold.find(entry, data, root=g.path.parent).path == g.path
    assert gold.find(entry.with_overrides(["model.m=5"]), data, root=g.path.parent) is None
    points = np.asarray(g.provenance["spectral_points"])
    moved = Handoff(spectral_points=points * (1 + 1e-4))
    assert gold.find(entry, data, moved, root=g.path.parent) is None
    assert gold.find(entry, data, dataclasses.replace(moved, spectral_points=points),
                     root=g.path.parent).path == g.path
    previous = bool(jax.config.read("jax_enable_x64"))
    jax.config.update("jax_enable_x64", True)
    try:
        assert gold.find(entry, data, root=g.path.parent) is None
    finally:
        jax.config.update("jax_enable_x64", previous)
    prov = json.loads((g.path / "gold.json").read_text())
    assert prov["runs"] == 4 and prov["verdict"]["log_evidence"] == pytest.approx(
        [r.log_evidence for r in runs])
    post = g.posterior()
    assert post.chains == 4 and post.flat_sites["noise"].shape == (400,)
    # D = 11 ≤ IS_MAX_DIM: the importance-sampling check ran, and the verdict reads it
    v = g.verdict
    isc = v["is_check"]
    assert isc["draws"] == 20_000 and np.isfinite([isc["log_z"], isc["se"], isc["khat"]]).all()
    assert v["is_gap"] == pytest.approx(abs(isc["log_z"] - v["log_evidence_mean"]))
    unreliable = any("importance-sampling check unreliable" in r for r in v["reasons"])
    assert unreliable == (isc["khat"] > gold.IS_KHAT_MAX)


# the VI side of the two comparisons below: one short path (the inference settings are not part
# of the gold's target, test_target_key_ignores_last_bits_and_sees_real_changes)
QUICK_VI = ["inference.svi.steps=60", "inference.svi.paths=1"]


def test_compare_reuses_the_gold_reference_and_runs_no_smc(tiny_gold, tmp_path, monkeypatch):
    import ssgp_ppl.inference.smc

    entry, data, g, _ = tiny_gold
    entry = entry.with_overrides(QUICK_VI)

    def no_smc(*a, **k):
        raise AssertionError("compare ran SMC although a gold reference matches")

    monkeypatch.setattr(ssgp_ppl.inference.smc, "tempered_smc_runs", no_smc)
    monkeypatch.setattr("ssgp_ppl.inference.methods.smc.tempered_smc_runs", no_smc)
    records = compare(entry, data, tmp_path, progress=False, gold_root=g.path.parent)
    ref = next(r for r in records if "reference" in r)["reference"]
    assert ref["source"] == "gold" and ref["label"] == g.label()
    assert ref["label"].startswith("gold reference (") and "4 runs" in ref["label"]
    assert ref["converged"] == g.converged
    vi = next(r for r in records if "vs_reference" in r)
    assert vi["vs_reference"]["reference_converged"] == g.converged
    assert "replicate_floor" in ref  # the gold's own two halves of runs
    chains = next(r for r in records if r["method"] == "smc-chains-stacked")["paths"]
    assert chains["objective_kind"] == ["log_density"] * 4  # each run: −mean lp, never inf
    assert np.isfinite(chains["objective"]).all()
    html = (tmp_path / "report.html").read_text()
    assert g.label() in html and gold.criteria_text()[:40] in html


def test_fresh_reference_ignores_the_gold(tiny_gold, tmp_path):
    entry, data, g, _ = tiny_gold
    entry = entry.with_overrides([*QUICK_VI, "inference.smc.particles=16", "inference.smc.mcmc_steps=2",
                                  "inference.smc.samples=30", "inference.smc.warmup=30"])
    records = compare(entry, data, tmp_path, progress=False, gold_root=g.path.parent,
                      fresh_reference=True)
    ref = next(r for r in records if "reference" in r)["reference"]
    assert "source" not in ref and "runs_rhat" in ref


STORED = sorted(p.name for p in gold.GOLD_DIR.glob("*") if (p / "gold.json").is_file())
STORED_IS = [f for f in STORED  # the references whose verdict rests on a passing IS check
             if (c := json.loads((gold.GOLD_DIR / f / "gold.json").read_text())["verdict"][
                 "is_check"]) and c["khat"] <= gold.IS_KHAT_MAX]
STORED_BRIDGE = [f for f in STORED  # … and those whose log Z check is bridge sampling
                 if json.loads((gold.GOLD_DIR / f / "gold.json").read_text())["verdict"].get(
                     "evidence_check") == "bridge sampling"]


@pytest.mark.parametrize("folder", STORED)
def test_stored_gold_references_are_what_they_say(folder, x64):
    """Every gold reference shipped with the package: small (≤ 5 MB), its data and entry still
    the catalog's (target hash), and its R-hat and ESS recomputed from the stored draws equal the
    stored verdict's."""
    from ssgp_ppl.data.datasets import load
    from ssgp_ppl.diagnostics.calibration import invariant_diagnostics
    from ssgp_ppl.pipeline import evaluate

    g = next(g for g in gold.stored() if g.path.name == folder)
    assert sum(f.stat().st_size for f in g.path.iterdir()) <= 5 * 2**20
    p = g.provenance
    entry = load_entry(p["entry"])
    data = load(p["dataset"], split=p["split"], x_scaling=entry.config["data"]["x_scaling"])
    handoff = gold.comparison_handoff(entry, data)
    assert gold.target_hash(gold.target_key(entry, data, handoff)) == p["target_hash"]
    assert gold.find(entry, data, handoff).path == g.path
    post = evaluate(g.posterior(), data)
    d = invariant_diagnostics(post.datatree["invariants"].to_dataset())
    for stat in ("rhat_max", "ess_bulk_min", "ess_tail_min"):
        for q, value in g.verdict[stat].items():
            assert d[stat][q] == pytest.approx(value, rel=1e-3), (stat, q)
    assert post.metrics["mnlp"] == pytest.approx(g.verdict["pooled_nlpd"], abs=0.01)


def test_budget_needed_and_the_unattainable_label(tmp_path):
    """Twice the allowed sd of log Ẑ needs 4 × the particles and 4 × the time; a reference needing
    more than ATTAINABLE_HOURS says so in its label."""
    needed, hours = gold.budget_needed(2 * gold.LOG_Z_SD_MAX, 256, 3600.0)
    assert (needed, hours) == (1024, pytest.approx(4.0))
    prov = {"runs": 4, "computed": "2026-11-25T00:00:00", "wall_seconds": 3600.0,
            "verdict": {"converged": False, "hours_needed": 4.0}}
    assert "not attainable" not in gold.GoldReference(tmp_path, prov).label()
    assert gold.attainable(prov["verdict"])
    prov["verdict"]["hours_needed"] = gold.ATTAINABLE_HOURS + 1
    assert not gold.attainable(prov["verdict"])
    assert gold.GoldReference(tmp_path, prov).label().startswith(
        "gold reference (NOT CONVERGED, not attainable on this hardware; 4 runs")


def test_runs_in_separate_modes_label(tmp_path):
    """A reference whose runs disagree with each run in a mode of its own says so, whatever the
    1/N rule estimates; runs that share modes, or agree, do not."""
    v = {"converged": False, "hours_needed": 0.1, "modes": 4, "chain_mode": [0, 1, 2, 3],
         "reasons": ["runs disagree: R-hat up to 1.59 (f_test; > 1.01)"]}
    prov = {"runs": 4, "computed": "2026-11-26T00:00:00", "wall_seconds": 120.0, "verdict": v}
    assert gold.separate_modes(v) and gold.attainable(v)
    assert gold.GoldReference(tmp_path, prov).label().startswith(
        "gold reference (NOT CONVERGED, runs in separate modes; 4 runs")
    v["chain_mode"], v["modes"] = [0, 0, 1, 1], 2
    assert not gold.separate_modes(v) and gold.limit(v) is None
    v.update(chain_mode=[0, 1, 2, 3], modes=4, reasons=["the runs' log evidence has sd 0.9 nats"])
    assert not gold.separate_modes(v)


def test_budget_text_says_what_a_larger_budget_would_do():
    """The one sentence the report, the results page and the notebook print: the particles and
    hours the 1/N rule asks for, then why that would not suffice (more hours than
    ATTAINABLE_HOURS, or runs in separate modes); nothing for a CONVERGED reference."""
    v = {"converged": False, "particles_needed": 2048, "hours_needed": 1.5, "modes": 2,
         "chain_mode": [0, 0, 1, 1], "reasons": ["the runs' log evidence has sd 0.9 nats"]}
    assert gold.budget_text(v) == ("by the 1/N variance of log Ẑ, about 2,048 particles a run "
                                   "would be needed (about 1.5 hours of the machine that "
                                   "computed it)")
    v["hours_needed"] = gold.ATTAINABLE_HOURS + 1
    assert gold.budget_text(v).endswith("; not attainable on this hardware (more than 8 hours)")
    v.update(hours_needed=0.1, modes=4, chain_mode=[0, 1, 2, 3],
             reasons=["runs disagree: R-hat up to 1.59 (f_test; > 1.01)"])
    assert gold.budget_text(v).endswith("; its 4 runs sit in 4 separate modes, one each: more "
                                        "particles a run narrow the spread of log Ẑ without "
                                        "bringing the runs together")
    assert gold.budget_text({"converged": True, "particles_needed": 10}) is None


def test_stored_free_frequency_reference_is_labelled_by_its_modes():
    """The stored free-frequency pendulum reference: NOT CONVERGED with its runs in separate modes,
    and its label says so (never a bare NOT CONVERGED that a larger budget would mend)."""
    g = next(g for g in gold.stored() if g.path.name.startswith("ssgp_svi-pendulum"))
    assert not g.converged and gold.separate_modes(g.verdict)
    assert "runs in separate modes" in g.label()


def _stored_target(folder: str):
    """(reference, log prior, log likelihood, its stored draws as the target's flat latent
    vectors, the target's mirror symmetry) of a stored gold reference, in the float width in
    force."""
    from ssgp_ppl.data.datasets import load

    g = next(g for g in gold.stored() if g.path.name == folder)
    p = g.provenance
    entry = load_entry(p["entry"])
    data = load(p["dataset"], split=p["split"], x_scaling=entry.config["data"]["x_scaling"])
    handoff = gold.comparison_handoff(entry, data)
    log_prior, log_lik, flatten = gold.target_potentials(entry, data, handoff)
    flat = flatten(g.posterior().flat_sites)  # the target's latent sites of every draw
    return g, log_prior, log_lik, flat, gold.target_symmetry(entry, data, handoff)


@pytest.mark.parametrize("folder", STORED_IS)
def test_stored_log_evidence_matches_importance_sampling(folder, x64):
    """The runs' mean log Ẑ of every stored reference with an importance-sampling check lies within
    IS_MATCH nats of a new importance-sampling estimate of log Z, from a proposal fitted here to
    the stored draws with another seed, symmetrised under the target's mirror symmetry as the
    stored check was (Pareto k̂ ≤ IS_KHAT_MAX)."""
    from ssgp_ppl.diagnostics.evidence import importance_log_evidence

    g, log_prior, log_lik, flat, signs = _stored_target(folder)
    log_z, se, khat = importance_log_evidence(log_prior, log_lik, flat, draws=60_000, seed=1,
                                              symmetry=signs)
    assert khat <= gold.IS_KHAT_MAX
    assert abs(log_z - g.verdict["is_check"]["log_z"]) < 5 * se + 0.05
    assert abs(log_z - g.verdict["log_evidence_mean"]) <= gold.IS_MATCH, (
        log_z, g.verdict["log_evidence"])


@pytest.mark.parametrize("folder", STORED_BRIDGE)
def test_stored_log_evidence_matches_bridge_sampling(folder, x64):
    """The runs' mean log Ẑ of every stored reference checked by bridge sampling lies within
    IS_MATCH nats of a new bridge sampling estimate from the stored draws with another seed,
    whose standard error is at most BRIDGE_SE_MAX."""
    from ssgp_ppl.diagnostics.evidence import bridge_log_evidence

    g, log_prior, log_lik, flat, signs = _stored_target(folder)
    log_z, se = bridge_log_evidence(log_prior, log_lik, flat, draws=60_000, seed=1,
                                    symmetry=signs)
    assert se <= gold.BRIDGE_SE_MAX
    assert abs(log_z - g.verdict["log_evidence_mean"]) <= gold.IS_MATCH, (
        log_z, se, g.verdict["log_evidence"])
