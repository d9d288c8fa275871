"""Every notebook in notebooks/ runs top to bottom at small size (SSGP_PPL_SMALL=1).

Each runs on its own (any order, any xdist worker): the VI-vs-NUTS notebooks write their small
runs to a temporary reports folder ($SSGP_PPL_REPORTS); the calibration notebook's quick run reads
the committed full-size reports.
"""

from pathlib import Path

import jupytext
import pytest
from nbclient import NotebookClient

# the longest first (xdist hands tests out in collection order)
NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.py"),
                   key=lambda p: (p.stem == "calibration", p.stem))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, monkeypatch, tmp_path):
    monkeypatch.setenv("SSGP_PPL_SMALL", "1")
    monkeypatch.setenv("SSGP_PPL_REPORTS", str(tmp_path))
    nb = jupytext.read(path)
    assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code")
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={
        "metadata": {"path": str(path.parent)}}).execute()
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                   for o in c.get("outputs", []))
    assert "nmse" in text or "rmse" in text
