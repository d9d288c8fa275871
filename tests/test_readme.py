"""The README's two commands: CI runs the test command verbatim; the main job works from a fresh
clone exactly as written (it installs into the clone's own .venv and writes the report)."""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def readme_command(kind: str) -> str:
    text = (ROOT / "README.md").read_text()
    m = re.search(rf"<!-- readme-command: {kind} -->\s*```bash\n(.+?)\n```", text, re.S)
    assert m, f"README has no '{kind}' command block"
    return m.group(1).strip()


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert readme_command("tests") in [line.strip() for line in ci]


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(),
                    reason="needs a git checkout to clone")
def test_main_job_from_a_fresh_clone(tmp_path):
    """Clone HEAD, run the main-job command verbatim, check the report it writes."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    if (ROOT.parent / "shared").exists():  # the clone sits where CI puts it: beside shared/
        (tmp_path / "shared").symlink_to(ROOT.parent / "shared")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONPATH"))}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if ".venv" not in p)
    cmd = readme_command("main")
    r = subprocess.run(["bash", "-c", cmd], cwd=clone, env=env, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    out = "runs/tan_va_svi-pendulum-compare"  # compare's default output (not tracked by git)
    report = clone / out / "report.html"
    assert report.exists() and "data:image/png;base64," in report.read_text()
    comp = json.loads((clone / out / "comparison.json").read_text())
    methods = [m["method"] for m in comp["methods"]]
    # single VI, stacked VI, the reference, its chains stacked
    assert methods == ["svi-one-path", "svi", "smc", "smc-chains-stacked"]
    status = subprocess.run(["git", "status", "--porcelain"], cwd=clone, capture_output=True,
                            text=True, check=True).stdout
    assert status == "", status  # the main job leaves the clone clean
    for m in comp["methods"]:
        assert 0 < m["nmse"] < 1, m
    ref = comp["methods"][2]["reference"]
    # the stored gold reference, CONVERGED, with its runs' evidence; no SMC ran
    assert ref["source"] == "gold" and ref["converged"], ref.get("reasons")
    assert len(ref["log_evidence"]) >= 4
    assert comp["methods"][1]["paths"]["combine"] == "stacking"
    assert all(m["converged"] for m in comp["methods"][:2])  # both VI fits by the stop rule
