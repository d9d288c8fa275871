"""The README and the docs site: the README is short and its examples are valid; the site builds
with ``mkdocs build --strict`` (any warning fails), which executes every notebook in notebooks/ at
small size (SSGP_PPL_SMALL=1) and renders it with its plots, and generates the catalog, CLI and
results pages from the code and the archived JSON."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from ssgp_ppl.entry import BUILTIN_CATALOG, load_entry

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.py"))


def test_readme_is_a_short_users_page():
    text = (ROOT / "README.md").read_text()
    assert len(text.encode()) <= 12 * 1024
    assert not re.search(r"\bissue \d|\bsession\b|before the fix", text, re.I)


@pytest.mark.parametrize("page", ["README.md", "docs/guide/adding-a-model.md"])
def test_toml_examples_are_valid_entries(page, tmp_path):
    """Every TOML block loads, after the page's own likelihood is registered as its code does."""
    from ssgp_ppl.likelihoods import LIKELIHOODS

    text = (ROOT / page).read_text()
    blocks = re.findall(r"```toml\n(.+?)```", text, re.S)
    assert blocks
    before = set(LIKELIHOODS)
    try:
        for code in re.findall(r"```python\n(.+?)```", text, re.S):
            if "register_likelihood(" in code:
                exec(compile(code, page, "exec"), {})
        for i, block in enumerate(blocks):
            p = tmp_path / f"example{i}.toml"
            p.write_text(block)
            entry = load_entry(p)
            assert entry.config["model"]["spectral_density"] == "matern32"
    finally:
        for name in set(LIKELIHOODS) - before:
            del LIKELIHOODS[name]


def test_docs_site_builds_strict_with_every_notebook_executed(tmp_path):
    env = {**os.environ, "SSGP_PPL_DOCS_CACHE": str(tmp_path / "cache"),
           "NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}
    env.pop("SSGP_PPL_SMALL", None)
    site = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stderr[-4000:]

    for path in NOTEBOOKS:  # each ran top to bottom and printed its scores
        (done,) = (tmp_path / "cache").glob(f"{path.stem}-*.ipynb")
        nb = nbformat.read(done, as_version=4)
        text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                       for o in c.get("outputs", []))
        assert "nmse" in text or "rmse" in text, path.stem
        page = (site / "tutorials" / path.stem / "index.html").read_text()
        assert "Executed at small size" in page

    catalog = (site / "reference" / "catalog" / "index.html").read_text()
    for p in BUILTIN_CATALOG.glob("*.toml"):
        assert f'id="{p.stem}"' in catalog, p.stem
    assert "inference.svi" in catalog and "spectral_density" in catalog
    cli = (site / "reference" / "cli" / "index.html").read_text()
    assert "--encode" in cli and "--catalog" in cli and "--samples" in cli
    api = (site / "reference" / "api" / "index.html").read_text()
    assert "ssgp_ppl.api.fit" in api and "TableOptions" in api
    # the results pages carry the archived figures, formatted from the JSON
    doc = json.loads((ROOT / "reports" / "catalog_metrics.json").read_text())
    results = (site / "results" / "catalog" / "index.html").read_text()
    for rec in doc["records"][:5]:
        assert f"{rec['nmse']:.4g}" in results
    peers = json.loads((ROOT / "reports" / "peers" / "peers.json").read_text())
    page = (site / "results" / "peers" / "index.html").read_text()
    for name, summ in peers["summary"].items():
        assert f"| {name} |" not in page and f"{summ['nmse']:.4g} ({summ['nmse_ratio']:.2f}×)" in page
    assert (site / "results" / "peers-nmse-time.png").stat().st_size > 10_000
    # every archived comparison listed shows the verdict of the reference it was read against
    from ssgp_ppl.report import REPORT_FORMAT

    page = (site / "results" / "comparisons" / "index.html").read_text()
    for comp in sorted((ROOT / "reports").glob("*/comparison.json")):
        doc = json.loads(comp.read_text())
        ref = next((m["reference"] for m in doc["methods"] if "reference" in m), None)
        if doc.get("format") == REPORT_FORMAT and ref is not None:
            want = ref.get("label") or ("computed here: " + ("CONVERGED" if ref["converged"]
                                                             else "NOT CONVERGED"))
            assert f"{doc['model']}</code> on {doc['dataset']}" in page
            assert f"Reference: {want}." in page
    mscan = json.loads((ROOT / "reports" / "mscan" / "mscan.json").read_text())
    page = (site / "results" / "m-scan" / "index.html").read_text()
    assert all(f"{r['nmse']:.3f} ({r['mnlp']:.2f})" in page for r in mscan["records"])
    assert mscan["memory"] and all(f"<td>{r['peak_rss_mb']:.0f}</td>" in page for r in mscan["memory"])
