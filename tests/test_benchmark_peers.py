"""benchmarks/peers.py, mscan.py and sizing_choices.py: the side-by-side run writes its per-method
records and resumes from them; the summary's ratios and target verdicts are computed from the
records."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"


def _python(code: str) -> str:
    """Run ``code`` with benchmarks/ importable, in its own process (the scripts set XLA_FLAGS)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(BENCH), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                       timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def test_summary_ratios_and_targets_from_records():
    out = _python("""
        import json, peers
        traj = [{"seconds": 1.0, "rmse": 3.0, "nmse": 0.5}, {"seconds": 4.0, "rmse": 2.0, "nmse": 0.3}]
        recs = [
            {"set": "pendulum", "method": "gpytorch_svgp", "kind": "peer", "bayesian": False,
             "nmse": 0.30, "mnlp": 2.00, "rmse": 2.0, "fit_seconds": 10.0, "predict_seconds": 0.5,
             "trajectory": traj},
            {"set": "pendulum", "method": "sklearn_exact", "kind": "peer", "bayesian": False,
             "nmse": 0.25, "mnlp": 1.50, "rmse": 1.9, "fit_seconds": 2.0, "predict_seconds": 0.5},
            {"set": "pendulum", "method": "ssgp", "kind": "ours", "bayesian": False,
             "nmse": 0.10, "mnlp": 1.00, "rmse": 1.0, "fit_seconds": 1.0, "predict_seconds": 0.5},
            {"set": "pendulum", "method": "vssgp_collapsed", "kind": "ours", "bayesian": True,
             "nmse": 0.24, "mnlp": 1.51, "rmse": 1.8, "fit_seconds": 4.5, "predict_seconds": 0.5},
            {"set": "pendulum", "method": "svbssgp", "kind": "ours", "bayesian": True,
             "nmse": 0.40, "mnlp": 1.40, "rmse": 2.5, "fit_seconds": 1.0, "predict_seconds": 0.5},
        ]
        print(json.dumps([peers.summarise(recs), peers.not_measured(recs)]))
    """)
    summary, missing = json.loads(out)
    s = summary["pendulum"]
    # the type-II ssgp is not Bayesian: the best Bayesian entry by NMSE is vssgp_collapsed
    assert s["best_bayesian"] == "vssgp_collapsed"
    assert s["best_peer_nmse"] == ["sklearn_exact", 0.25] and s["best_peer_mnlp"] == ["sklearn_exact", 1.5]
    assert abs(s["nmse_ratio"] - 0.24 / 0.25) < 1e-4 and abs(s["mnlp_above_best"] - 0.01) < 1e-9
    assert abs(s["time_ratio"] - 0.45) < 1e-9
    assert s["svgp_rmse_at_equal_time"] == 2.0  # the trajectory's last point reached by 4.5 s
    assert s["meets"] == {"nmse": True, "mnlp": True, "time": True}
    assert s["predict_seconds"] == 0.5
    assert missing["pendulum"] == ["gpjax_svgp", "vssgp", "svbssgp_collapsed", "ssgp_svi", "tan_va"]
    # a set with no record at all is listed whole, though it has no summary
    assert "yacht" not in summary and len(missing["yacht"]) == 10
    assert s["all_three"] == ["vssgp_collapsed"]  # svbssgp: NMSE 1.6×, MNLP −0.1, time 0.1×


def test_several_seeds_compare_means_and_decide_by_the_standard_errors():
    """Three seeds a method: the summary compares the means, gives their standard errors, and
    decides each target by them: an NMSE ratio of 1.00 ± 0.02 is "within se", an MNLP 0.11 above
    the best peer's by ± 0.006 is "missed", a time ratio of 0.1 "met"; the per-method table rows
    hold the means over the seeds and count the fits their stop rule declared done."""
    out = _python("""
        import json, peers
        def rec(method, kind, seed, nmse, mnlp, fit):
            return {"set": "pendulum", "method": method, "kind": kind, "bayesian": kind == "ours",
                    "seed": seed, "nmse": nmse, "mnlp": mnlp, "rmse": 1.0, "fit_seconds": fit,
                    "predict_seconds": 0.5}
        recs = [rec("gpytorch_svgp", "peer", k, 0.30, 2.0, 10.0) for k in range(3)]
        recs += [rec("sklearn_exact", "peer", k, 0.25, 1.40, 2.0) for k in range(3)]
        recs += [rec("vssgp_collapsed", "ours", k, v, m, 1.0)
                 for k, (v, m) in enumerate([(0.24, 1.50), (0.26, 1.52), (0.25, 1.51)])]
        for r, done in zip(recs[-3:], (True, False, True)):
            r["settings"] = {"m": 50, "converged": done}
        print(json.dumps([peers.summarise(recs), peers.over_seeds(recs)]))
    """)
    summary, by_method = json.loads(out)
    s = summary["pendulum"]
    se = 0.01 / 3 ** 0.5  # sd 0.01 over three seeds
    assert s["seeds"] == 3 and abs(s["nmse"] - 0.25) < 1e-12 and abs(s["nmse_se"] - se) < 1e-12
    assert abs(s["nmse_ratio"] - 1.0) < 1e-4 and abs(s["nmse_ratio_se"] - se / 0.25) < 1e-4
    assert abs(s["mnlp_above_best"] - 0.11) < 1e-9 and abs(s["mnlp_above_best_se"] - se) < 1e-4
    assert s["decided"] == {"nmse": "within se", "mnlp": "missed", "time": "met"}
    ours = next(r for r in by_method if r["method"] == "vssgp_collapsed")
    assert ours["seeds"] == 3 and abs(ours["mnlp"] - 1.51) < 1e-12 and ours["seed"] == 0
    assert ours["converged_seeds"] == 2  # one seed's fit ended at its step budget
    assert all("converged_seeds" not in r for r in by_method if r["kind"] == "peer")


def test_summary_names_a_fast_entry_that_meets_all_three_when_the_best_is_slow():
    out = _python("""
        import json, peers
        recs = [
            {"set": "kin40k", "method": "gpytorch_svgp", "kind": "peer", "bayesian": False,
             "nmse": 0.040, "mnlp": -0.17, "rmse": 0.2, "fit_seconds": 200.0, "predict_seconds": 0.5},
            {"set": "kin40k", "method": "svbssgp_collapsed", "kind": "ours", "bayesian": True,
             "nmse": 0.014, "mnlp": -0.69, "rmse": 0.1, "fit_seconds": 500.0, "predict_seconds": 0.5},
            {"set": "kin40k", "method": "svbssgp", "kind": "ours", "bayesian": True,
             "nmse": 0.038, "mnlp": -0.19, "rmse": 0.19, "fit_seconds": 50.0, "predict_seconds": 0.5},
            {"set": "kin40k", "method": "vssgp", "kind": "ours", "bayesian": True,
             "nmse": 0.058, "mnlp": -0.04, "rmse": 0.25, "fit_seconds": 40.0, "predict_seconds": 0.5},
        ]
        print(json.dumps(peers.summarise(recs)))
    """)
    s = json.loads(out)["kin40k"]
    assert s["best_bayesian"] == "svbssgp_collapsed" and s["time_ratio"] == 2.5
    assert s["meets"] == {"nmse": True, "mnlp": True, "time": False}
    assert s["all_three"] == ["svbssgp"]


def test_peers_quick_run_writes_records_and_resumes(tmp_path):
    """One of this project's entries and one peer: the peer's library is absent in the test
    environment (the ``bench`` extra) or present; either way a record is written, and a second
    run reuses both records instead of fitting again."""
    cmd = [sys.executable, str(BENCH / "peers.py"), "--quick", "--sets", "pendulum", "--methods",
           "gpytorch_svgp,vssgp_collapsed", "--out", str(tmp_path)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    ours = json.loads((tmp_path / "pendulum" / "vssgp_collapsed.json").read_text())
    assert ours["n_train"] == 315 and ours["bayesian"] and 0 < ours["nmse"] < 1.5
    assert ours["fit_seconds"] > 0 and 0 <= ours["coverage_90"] <= 1
    # m = "auto" within --quick's 10 s: the pilot's time is part of the fit's
    assert ours["sizing"]["budget"] == 10 and ours["settings"]["m"] == ours["sizing"]["m"]
    assert ours["fit_seconds"] > ours["sizing"]["pilot_seconds"] > 0
    peer = json.loads((tmp_path / "pendulum" / "gpytorch_svgp.json").read_text())
    assert ("skipped" in peer and "ssgp-ppl[bench]" in peer["skipped"]) or 0 < peer["nmse"] < 1.5
    doc = json.loads((tmp_path / "peers.json").read_text())
    assert {r["method"] for r in doc["records"]} == {"gpytorch_svgp", "vssgp_collapsed"}
    stamp = (tmp_path / "pendulum" / "vssgp_collapsed.json").stat().st_mtime_ns
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "vssgp_collapsed (n" not in r.stderr
    assert (tmp_path / "pendulum" / "vssgp_collapsed.json").stat().st_mtime_ns == stamp


def test_full_batch_cost_and_the_entries_it_skips(tmp_path):
    """steps × paths × n × (2m)² (NCVMP: iterations × n × m² × d²) from each entry's own settings;
    an entry above the budget is recorded as skipped with the figure and its formula, and the
    summary passes over it."""
    out = _python(f"""
        import json, peers
        from ssgp_ppl.entry import load_entry
        cost = {{e: peers.full_batch_cost(load_entry(e), 1000, 8) for e in peers.OURS}}
        peers.FULL_BATCH_MAX = 1e9
        rec = peers.measure("pendulum", "ssgp", out=__import__("pathlib").Path({str(tmp_path)!r}),
                            quick=False, seed=0, overwrite=False)
        print(json.dumps({{"cost": cost, "rec": rec, "summary": peers.summarise([rec])}}))
    """)
    doc = json.loads(out)
    cost = doc["cost"]
    assert cost["svbssgp"] is None and cost["vssgp"] is None  # partition-sampled: a of p blocks
    steps, ncvmp = "steps × paths × n × (2m)²", "iterations × n × m² × d²"
    assert cost["svbssgp_collapsed"] is None  # m = "auto": sized within its time budget
    assert cost["ssgp_svi"] == [25000 * 8 * 1000 * 20**2, steps]  # 25,000 steps, 8 paths, m = 10
    assert cost["ssgp"] == [100000 * 1000 * 40**2, steps]
    assert cost["tan_va"] == [(500 + 10 * 2) * 1000 * 20**2 * 8**2, ncvmp]  # max_iter + 10 × 2
    rec = doc["rec"]  # pendulum, 315 rows: 100000 × 315 × 40² = 5.04e10 > 1e9
    assert "nmse" not in rec
    assert rec["skipped"].startswith(f"every step sees all 315 rows: {steps} = ")
    assert "5e+10" in rec["skipped"] and doc["summary"] == {}
    assert json.loads((tmp_path / "pendulum" / "ssgp.json").read_text()) == rec


def test_each_entry_gets_its_inputs_scaled_as_its_entry_says(tmp_path):
    """Tan et al. 2016's entries are fitted on inputs in [-1, 1] (``[data] x_scaling =
    "minmax"``), the others and the peers on standardised ones; the record names the scaling."""
    out = _python(f"""
        import json, peers
        from pathlib import Path
        seen = {{}}
        def fake(method, ds, **kw):
            seen[method] = [float(ds.x_train.min()), float(ds.x_train.max())]
            return {{"skipped": "not fitted"}}
        peers.run_ours = fake
        recs = {{e: peers.measure("pendulum", e, out=Path({str(tmp_path)!r}), quick=True, seed=0,
                                 overwrite=False) for e in ("tan_va", "ssgp")}}
        print(json.dumps({{"seen": seen, "scaling": {{e: r["x_scaling"] for e, r in recs.items()}}}}))
    """)
    doc = json.loads(out)
    assert doc["scaling"] == {"tan_va": "minmax", "ssgp": "standard"}
    lo, hi = doc["seen"]["tan_va"]
    assert lo == -1.0 and hi == 1.0
    lo, hi = doc["seen"]["ssgp"]
    assert lo < -1.0 or hi > 1.0  # standardised: pendulum's inputs reach past one sd


def test_peers_unknown_set_is_one_line_exit_2(tmp_path):
    r = subprocess.run([sys.executable, str(BENCH / "peers.py"), "--sets", "nope", "--out",
                        str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and r.stderr.strip() == "peers.py: unknown set or method: nope"


def test_mscan_verdict_allows_noise_but_not_a_rise():
    out = _python("""
        import json, mscan
        recs = [{"set": "a", "entry": "e", "m": m, "nmse": v} for m, v in ((10, 0.5), (20, 0.3), (50, 0.31))]
        recs += [{"set": "a", "entry": "f", "m": m, "nmse": v} for m, v in ((10, 0.5), (20, 0.6))]
        print(json.dumps(mscan.flat(recs)))
    """)
    v = json.loads(out)
    assert v["a/e"] == {"m": [10, 20, 50], "nmse": [0.5, 0.3, 0.31], "non_increasing": True}
    assert v["a/f"]["non_increasing"] is False


def test_mscan_memory_child_measures_one_fit():
    """The child's figures are of one fit: its peak lies above what the process held before the
    fit by the fit's own arrays, and the resources estimate is of the same fit's sizes."""
    out = _python("""
        import json, mscan
        mscan.MEMORY_STEPS = 50
        print(json.dumps(mscan.memory_child("pendulum", "vssgp_collapsed", 10, 0)))
    """)
    rec = json.loads(out.strip().splitlines()[-1])
    assert rec["steps"] == 50 and rec["n_train"] == 315 and rec["m"] == 10
    assert rec["peak_rss_mb"] >= rec["rss_before_fit_mb"] > 100  # Python, JAX and the data
    assert abs(rec["fit_mb"] - (rec["peak_rss_mb"] - rec["rss_before_fit_mb"])) < 0.2
    # 315 × 20 features, a 10-dimensional guide, and the prediction's working-set budget
    from ssgp_ppl.model.predictive import PREDICT_BUDGET
    assert 0 < rec["estimate_mb"] - PREDICT_BUDGET / 2**20 < 50


def test_sizing_choices_records_the_pilot_and_resumes(tmp_path):
    """benchmarks/sizing_choices.py on pendulum: one record per m = "auto" entry with the chosen
    m among the scored candidates, gathered into sizing.json; a second run reuses the records;
    a budget no m fits is recorded as the one-line reason."""
    cmd = [sys.executable, str(BENCH / "sizing_choices.py"), "--sets", "pendulum", "--budget", "40",
           "--out", str(tmp_path)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads((tmp_path / "sizing.json").read_text())
    assert {x["entry"] for x in doc["records"]} == {"svbssgp_collapsed", "vssgp_collapsed"}
    for rec in doc["records"]:
        s = rec["sizing"]
        assert s["budget"] == 40 and str(s["m"]) in s["scores"] and rec["n_train"] == 315
        assert s["excluded"] and all(s["estimated_seconds"][k] > 40 for k in s["excluded"])
    stamp = (tmp_path / "pendulum" / "vssgp_collapsed.json").stat().st_mtime_ns
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "pendulum ·" not in r.stderr
    assert (tmp_path / "pendulum" / "vssgp_collapsed.json").stat().st_mtime_ns == stamp
    r = subprocess.run([*cmd[:-4], "--budget", "0.001", "--out", str(tmp_path / "none")],
                       capture_output=True, text=True, timeout=300)
    rec = json.loads((tmp_path / "none" / "pendulum" / "vssgp_collapsed.json").read_text())
    assert r.returncode == 0 and rec["error"].endswith("give a larger budget or m a number")
