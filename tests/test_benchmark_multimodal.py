"""benchmarks/multimodal.py runs end to end at the test suite's quick settings and writes records
whose reference verdict agrees with its reasons."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_multimodal_benchmark_quick_run(tmp_path):
    out = tmp_path / "multimodal.json"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "multimodal.py"), "--entries",
                        "tan_va", "--data", "pendulum", "--small", "--out", str(out)],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    (rec,) = json.loads(out.read_text())["records"]
    assert rec["entry"] == "tan_va" and rec["method"] == "ncvmp"
    ref = rec["reference"]
    assert len(ref["log_evidence"]) == 2 and ref["seconds"] >= ref["smc_seconds"] > 0
    assert rec["stacked"]["paths"] == 10 and abs(sum(rec["stacked"]["weights"]) - 1) < 1e-9
    for part in ("reference", "single", "stacked"):
        assert 0 < rec[part]["nmse"] < 2 and rec[part]["seconds"] > 0
