"""benchmarks/sbc.py: a run writes each entry's record and figure; ``--figures`` draws the figures
again from the runs' DataTrees; the results page lists each record's reading and figure."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from ssgp_ppl.diagnostics.sbc import SMALL_SETTINGS

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
SMALL = list(SMALL_SETTINGS)  # as the JSON holds them


def _python(code: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(BENCH), str(ROOT / "scripts"),
                                                        os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def test_sbc_benchmark_writes_records_and_figures(tmp_path):
    out = tmp_path / "reports" / "sbc.json"
    runs = tmp_path / "runs"
    fig = tmp_path / "reports" / "sbc" / "svbssgp.png"
    page = _python(f"""
        from pathlib import Path
        import results_tables, sbc
        args = ["--entries", "svbssgp", "svbssgp_collapsed", "--sims", "3", "--out", r"{out}",
                "--runs", r"{runs}", "--no-progress"]
        for s in ("m=2", "svi.steps=40", "svi.chunk=20", "svi.min_steps=0",
                  "smc.particles=16", "smc.mcmc_steps=2", "smc.integration_steps=4",
                  "smc.warmup=10"):
            args += ["--set", s]
        assert sbc.main(args) == 0
        fig = Path(r"{fig}")
        assert fig.read_bytes()[:8] == b"\\x89PNG\\r\\n\\x1a\\n"
        fig.unlink()
        assert sbc.main(["--figures", "--out", r"{out}", "--runs", r"{runs}"]) == 0
        results_tables.ROOT = Path(r"{tmp_path}")
        print(results_tables.sbc())
    """)
    rec, other = json.loads(out.read_text())["records"]
    assert rec["entry"] == "svbssgp" and rec["sims_done"] == 3 and "shared" not in rec
    assert set(rec["calibrated"]) == {"vi", "reference"}
    assert set(rec["converged"]) == {"vi", "reference"}
    assert rec["settings"][:len(SMALL)] == SMALL and "smc.warmup=10" in rec["settings"]
    assert " at `" not in page  # every record at the file's settings
    assert fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # drawn again from the run
    for m in ("vi", "reference"):  # the converged column is the record's
        assert f"| `svbssgp` | {m} | 3 |" in page
        assert f"| {rec['converged'][m]} of 3 | {rec['failed'][m]} |" in page
    assert "](sbc-svbssgp.png)" in page
    sys.path.insert(0, str(ROOT / "scripts"))
    import results_tables

    for r in (rec, other):  # the entry's wall time, in the column after "failed" on each row
        rows = [line for line in page.splitlines() if line.startswith(f"| `{r['entry']}` |")]
        assert len(rows) == len(r["calibrated"])
        for line, m in zip(rows, r["calibrated"], strict=True):
            assert f"| {r['failed'][m]} | {results_tables._minutes(r['seconds'])} |" in line
    # the same model with another guide: its reference is svbssgp's, from the store
    assert other["shared"] == {"reference": {"simulations": 3, "computed_by": "svbssgp"}}
    assert other["seconds_per_simulation"]["reference"] == rec["seconds_per_simulation"]["reference"]
    assert [(s["quantity"], s["verdict"]) for s in other["summary"] if s["method"] == "reference"] \
        == [(s["quantity"], s["verdict"]) for s in rec["summary"] if s["method"] == "reference"]
    assert "| `svbssgp_collapsed` | reference (all computed by `svbssgp`'s run) | 3 |" in page
    assert len(list((runs / "shared").glob("reference-*.npz"))) == 1


def test_entry_times_read_as_minutes_and_seconds():
    sys.path.insert(0, str(ROOT / "scripts"))
    import results_tables

    assert results_tables._minutes(1713.6) == "28 min 34 s"
    assert results_tables._minutes(67.3) == "1 min 7 s"
    assert results_tables._minutes(41.4) == "41 s"


def test_a_record_run_at_other_settings_names_them(tmp_path, monkeypatch):
    """The results table marks a row whose record was run at other SBC settings than the file's
    (a record left from a run at another budget), and no other row."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import results_tables

    def rec(entry, settings):
        return {"entry": entry, "sims": 200, "sims_done": 200, "stopped": None, "seconds": 90.0,
                "workers": 2, "seconds_per_simulation": {"vi": 0.5}, "converged": {"vi": 3},
                "failed": {"vi": 0}, "calibrated": {"vi": "1/1"},
                "summary": [{"method": "vi", "quantity": "noise", "calibrated": True,
                             "shape": "calibrated", "verdict": "calibrated"}],
                **({"settings": settings} if settings is not None else {})}

    now, old = ["m=6", "smc.mcmc_steps=10", "smc.warmup=100"], ["m=6", "smc.warmup=200"]
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "sbc.json").write_text(json.dumps(
        {"settings": now, "records": [rec("a", now), rec("b", old), rec("c", None)]}))
    monkeypatch.setattr(results_tables, "ROOT", tmp_path)
    rows = {line.split("|")[1].strip(): line for line in results_tables.sbc().splitlines()
            if line.startswith("| `")}
    assert "| 200 (2 workers) at `m=6`, `smc.warmup=200` |" in rows["`b`"]
    assert "| 200 (2 workers) |" in rows["`a`"] and "| 200 (2 workers) |" in rows["`c`"]
