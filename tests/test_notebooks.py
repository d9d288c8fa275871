"""Every notebook in notebooks/ runs top to bottom at small size (SSGP_PPL_SMALL=1).

The VI-vs-NUTS notebooks write their small runs to one temporary reports folder
($SSGP_PPL_REPORTS) that the calibration notebook, run last, reuses.
"""

from pathlib import Path

import jupytext
import pytest
from nbclient import NotebookClient

# one worker runs them all, in this order (xdist --dist loadgroup): calibration reads the reports
# the others write; as the largest group xdist starts it first
pytestmark = pytest.mark.xdist_group("notebooks")

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.py"),
                   key=lambda p: (p.stem == "calibration", p.stem))


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    return tmp_path_factory.mktemp("reports")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, monkeypatch, reports):
    monkeypatch.setenv("SSGP_PPL_SMALL", "1")
    monkeypatch.setenv("SSGP_PPL_REPORTS", str(reports))
    nb = jupytext.read(path)
    assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code")
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={
        "metadata": {"path": str(path.parent)}}).execute()
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                   for o in c.get("outputs", []))
    assert "nmse" in text or "rmse" in text
