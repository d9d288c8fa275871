"""The package as a user installs it: a wheel built from this tree carries the built-in catalog
(the repository's ``models/``, as ``ssgp_ppl/catalog/``), this tree's modules, the bundled data
and the licence, installs into a fresh virtual environment and works from any directory
(``ssgp-ppl --version``, ``models`` listing and loading every entry, a short fit of a CSV
file).

The fresh environment gets the wheel's declared dependencies without a download: the
distributions that its ``Requires-Dist`` (with their own requirements, extras and markers) name
are taken from the environment running the tests, and only those, linked into one folder on the
new environment's path; ``pip install --no-index`` then installs the wheel only if they satisfy
every requirement it declares, and the commands run with nothing else importable."""

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np

import ssgp_ppl

ROOT = Path(__file__).resolve().parent.parent
CATALOG = ROOT / "models"


def _sh(*cmd, cwd=None, timeout=900, pip_isolated=False):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SSGP_PPL_", "PYTHONPATH"))}
    if pip_isolated:  # no index, no find-links, no configuration: only what is installed counts
        env = {k: v for k, v in env.items() if not k.startswith("PIP_")} | {
            "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1", "PIP_NO_CACHE_DIR": "1"}
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True,
                       timeout=timeout, env=env)
    assert r.returncode == 0, f"{cmd}: {r.stderr[-2000:]}"
    return r


def _declared_closure(wheel: Path) -> dict:
    """The distributions the wheel's ``Requires-Dist`` name (without extras of ssgp-ppl itself),
    followed through their own requirements, extras and markers, as installed here; each must
    satisfy the version its requirer asks for."""
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    with zipfile.ZipFile(wheel) as z:
        meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    todo = [(Requirement(line.split(":", 1)[1].strip()), "") for line in meta.splitlines()
            if line.startswith("Requires-Dist:")]
    found: dict[str, tuple] = {}
    while todo:
        req, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(req.name)
        dist = metadata.distribution(name)
        assert req.specifier.contains(dist.version, prereleases=True), (str(req), dist.version)
        extras = set(req.extras) | found.get(name, (None, set()))[1]
        if name in found and extras == found[name][1]:
            continue
        found[name] = (dist, extras)
        for spec in dist.requires or []:
            todo += [(Requirement(spec), e) for e in ["", *sorted(extras)]]
    return {name: dist for name, (dist, _) in found.items()}


def _link_dependencies(wheel: Path, folder: Path) -> None:
    """``folder`` holding links to the top-level files and folders of the wheel's declared
    dependencies (:func:`_declared_closure`), their metadata included."""
    folder.mkdir()
    for name, dist in sorted(_declared_closure(wheel).items()):
        assert dist.files, f"{name}: installed without a record of its files"
        for top in sorted({f.parts[0] for f in dist.files} - {"..", "__pycache__"}):
            if not (folder / top).exists():
                (folder / top).symlink_to(Path(dist.locate_file(top)).resolve())


def test_wheel_installs_into_a_fresh_venv_and_works_from_any_directory(tmp_path):
    _sh(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", tmp_path / "dist", ROOT)
    (wheel,) = (tmp_path / "dist").glob("ssgp_ppl-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        shipped = {n.removeprefix("ssgp_ppl/catalog/"): z.read(n) for n in names
                   if n.startswith("ssgp_ppl/catalog/")}
    entries = {p.name: p.read_bytes() for p in CATALOG.glob("*.toml")}
    assert len(entries) >= 10 and shipped == entries  # every entry, as this tree has it
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "ssgp_ppl").rglob("*.py")}
    assert {n for n in names if n.endswith(".py")} == modules  # none an earlier build left
    assert "ssgp_ppl/data/bundled/pendulum.csv.gz" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)

    venv = tmp_path / "venv"
    _sh(sys.executable, "-m", "venv", venv)
    site = _sh(venv / "bin" / "python", "-c",
               "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip()
    _link_dependencies(wheel, tmp_path / "deps")
    (Path(site) / "declared_dependencies.pth").write_text(f"{tmp_path / 'deps'}\n")
    _sh(venv / "bin" / "python", "-m", "pip", "install", "-q", wheel, pip_isolated=True)
    exe = venv / "bin" / "ssgp-ppl"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert _sh(exe, "--version", cwd=elsewhere).stdout.split() == ["ssgp-ppl", ssgp_ppl.__version__]
    # every entry loads (an entry that does not is a warning and missing from the list)
    r = _sh(exe, "models", "--json", cwd=elsewhere)
    listed = json.loads(r.stdout)
    assert sorted(x["name"] for x in listed) == sorted(p.stem for p in CATALOG.glob("*.toml"))
    assert "warning" not in r.stderr.lower(), r.stderr[-2000:]
    assert all(str(venv) in x["file"] for x in listed)  # the installed copy, not this tree's

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
