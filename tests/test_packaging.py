"""The package as a user installs it: a wheel built from this tree carries the catalog, the
bundled data and the licence, installs into a fresh virtual environment and works from any
directory (``ssgp-ppl --version``, ``models``, a short fit of a CSV file)."""

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np

import ssgp_ppl
from ssgp_ppl.entry import BUILTIN_CATALOG

ROOT = Path(__file__).resolve().parent.parent


def _sh(*cmd, cwd=None, timeout=900):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SSGP_PPL_", "PYTHONPATH"))}
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True,
                       timeout=timeout, env=env)
    assert r.returncode == 0, f"{cmd}: {r.stderr[-2000:]}"
    return r


def test_wheel_installs_into_a_fresh_venv_and_works_from_any_directory(tmp_path):
    _sh(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", tmp_path / "dist", ROOT)
    (wheel,) = (tmp_path / "dist").glob("ssgp_ppl-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    shipped = {n.rsplit("/", 1)[-1] for n in names if n.startswith("ssgp_ppl/models/")}
    assert shipped == {p.name for p in BUILTIN_CATALOG.glob("*.toml")}
    assert "ssgp_ppl/data/pendulum.csv.gz" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)

    venv = tmp_path / "venv"
    _sh(sys.executable, "-m", "venv", venv)
    _sh(venv / "bin" / "python", "-m", "pip", "install", "-q", wheel)
    exe = venv / "bin" / "ssgp-ppl"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert _sh(exe, "--version", cwd=elsewhere).stdout.split() == ["ssgp-ppl", ssgp_ppl.__version__]
    listed = json.loads(_sh(exe, "models", "--json", cwd=elsewhere).stdout)
    assert sorted(r["name"] for r in listed) == sorted(p.stem for p in BUILTIN_CATALOG.glob("*.toml"))
    assert all(str(venv) in r["file"] for r in listed)  # the installed copy, not this tree's

    rng = np.random.default_rng(0)
    x = rng.uniform(-2, 2, (120, 2))
    y = np.sin(2 * x[:, 0]) + 0.5 * x[:, 1] + 0.1 * rng.standard_normal(120)
    np.savetxt(elsewhere / "mine.csv", np.column_stack([x, y]), delimiter=",", header="a,b,y",
               comments="")
    _sh(exe, "fit", "ssgp", "--data", "mine.csv", "--target", "y", "--steps", "300",
        "--no-progress", "--out", "run", cwd=elsewhere)
    rec = json.loads((elsewhere / "run" / "metrics.json").read_text())
    assert rec["n_train"] + rec["n_test"] == 120 and 0 < rec["nmse"] < 0.5
    saved = json.loads((elsewhere / "run" / "run.json").read_text())
    assert saved["data"] == str(elsewhere / "mine.csv")  # absolute: --resume works from anywhere
