"""The README and the docs site: the README is short and its examples are valid; the site builds
with ``mkdocs build --strict`` (any warning fails), which executes every notebook in notebooks/ at
small size (SSGP_PPL_SMALL=1) and renders it with its plots, and generates the catalog, CLI and
results pages from the code and the archived JSON."""

import html
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


@pytest.mark.parametrize(("page", "densities"), [("README.md", ["matern32"]),
                                                 ("docs/guide/adding-a-model.md",
                                                  ["matern32", "laplace", "matern32",
                                                   "matern32"])])
def test_toml_examples_are_valid_entries(page, densities, tmp_path):
    """Each TOML block loads (after the page's own density, likelihood and guide registrations,
    if any) and uses the density the page says."""
    from ssgp_ppl.model.densities import DENSITIES
    from ssgp_ppl.model.guides import GUIDES
    from ssgp_ppl.model.likelihoods import LIKELIHOODS

    text = (ROOT / page).read_text()
    blocks = re.findall(r"```toml\n(.+?)```", text, re.S)
    registers = [b for b in re.findall(r"```python\n(.+?)```", text, re.S)
                 if any(f"register_{k}(" in b for k in ("density", "likelihood", "guide"))]
    before = dict(DENSITIES)
    guides_before, liks_before = set(GUIDES), set(LIKELIHOODS)
    for name, obj in before.items():  # a user density another test left registered
        if type(obj).__module__ != "ssgp_ppl.model.densities":
            DENSITIES.pop(name)
    try:
        for code in registers:
            exec(compile(code, page, "exec"), {})
        got = []
        for i, block in enumerate(blocks):
            p = tmp_path / f"example{i}.toml"
            p.write_text(block)
            got.append(load_entry(p).config["model"]["spectral_density"])
        assert got == densities
    finally:
        for name in list(DENSITIES):
            if name not in before or DENSITIES[name] is not before[name]:
                DENSITIES.pop(name)
        for obj in before.values():
            DENSITIES.register(obj)
        for name in set(GUIDES) - guides_before:
            del GUIDES[name]
        for name in set(LIKELIHOODS) - liks_before:
            del LIKELIHOODS[name]


# the budget cut of the pages' examples in the tests: the code runs as written, only faster
QUICK_FIT = {"svi.steps": 60, "svi.min_steps": 0, "svi.paths": 1, "predictive.samples": 20}
QUICK_COMPARE = {"small": True, "steps": 100, "samples": 30, "progress": False}
# and the reference's SMC cut further, on top of the page's own settings
QUICK_COMPARE_SETTINGS = {"smc.particles": 32, "smc.mcmc_steps": 2, "smc.warmup": 30}


# cut to 60 SVI steps, the pendulum fit's intervals are too narrow (test coverage 0.75 of 315
# rows): its CalibrationWarning is the cut budget's, not the pages'
@pytest.mark.filterwarnings("ignore::ssgp_ppl.errors.CalibrationWarning")
@pytest.mark.parametrize("page", ["README.md", "docs/getting-started.md"])
def test_python_examples_run_as_written(page, tmp_path, monkeypatch):
    """Every ```python block of the page, run in order in one namespace (in an empty folder),
    with the budgets of ssgp_ppl.fit and ssgp_ppl.compare cut (QUICK_FIT, QUICK_COMPARE and
    QUICK_COMPARE_SETTINGS)."""
    import numpy as np

    import ssgp_ppl
    from ssgp_ppl import api

    fit, compare = api.fit, api.compare

    def quick_fit(*args, settings=None, **kw):
        return fit(*args, settings={**(settings or {}), **QUICK_FIT}, **kw)

    def quick_compare(*args, settings=None, **kw):
        return compare(*args, settings={**(settings or {}), **QUICK_COMPARE_SETTINGS},
                       **{**kw, **QUICK_COMPARE})

    monkeypatch.setattr(api, "fit", quick_fit)
    monkeypatch.setattr(api, "compare", quick_compare)
    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"```python\n(.+?)```", (ROOT / page).read_text(), re.S)
    assert blocks
    ns: dict = {}
    for block in blocks:
        exec(compile(block, page, "exec"), ns)
    post, pred, x_new = ns["post"], ns["pred"], ns["x_new"]
    assert post.info.steps == QUICK_FIT["svi.steps"] and 0 < post.metrics["nmse"] < 2
    assert pred.mean.shape == (len(x_new),) == (5,)
    lo, hi = pred.interval(0.9)
    assert np.all(lo < pred.mean) and np.all(pred.mean < hi)
    np.testing.assert_array_equal(ns["same"].predict(x_new).mean, pred.mean)
    assert ssgp_ppl.load("pendulum.nc").method == "svi"
    if "cmp" in ns:
        cmp = ns["cmp"]
        assert cmp.methods == ["svi-one-path", "svi", "smc", "smc-chains-stacked"]  # 4 paths
        assert list(cmp.table["method"]) == cmp.methods and cmp.report.is_file()
        assert cmp.verdict.startswith(("CONVERGED", "NOT CONVERGED: "))
        assert ns["vi"].metrics["nmse"] == cmp.record("svi")["nmse"]
def test_docs_site_builds_strict_with_every_notebook_executed(tmp_path):
    env = {**os.environ, "SSGP_PPL_DOCS_CACHE": str(tmp_path / "cache"),
           "NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}
    env.pop("SSGP_PPL_SMALL", None)
    site = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stderr[-4000:]

    for path in NOTEBOOKS:  # each ran top to bottom and printed its scores (SBC: its tally)
        (done,) = (tmp_path / "cache").glob(f"{path.stem}-*.ipynb")
        nb = nbformat.read(done, as_version=4)
        text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                       for o in c.get("outputs", []))
        if path.stem == "sbc":
            assert re.search(r"tan_va\s+reference\s+\d+\s+\d+/\d+", text), text[-2000:]
        else:
            assert "nmse" in text or "rmse" in text, path.stem
        page = (site / "tutorials" / path.stem / "index.html").read_text()
        assert "Executed at small size" in page

    catalog = (site / "reference" / "catalog" / "index.html").read_text()
    for p in BUILTIN_CATALOG.glob("*.toml"):
        assert f'id="{p.stem}"' in catalog, p.stem
    assert "inference.svi" in catalog and "spectral_density" in catalog
    from ssgp_ppl.model.densities import DENSITIES

    assert 'id="spectral-densities"' in catalog
    for name, density in DENSITIES.items():  # the registry's list, not a hand-typed one
        row = f"<td><code>{name}</code></td>\n<td>{html.escape(density.doc, quote=False)}</td>"
        assert row in catalog, name
    cli = (site / "reference" / "cli" / "index.html").read_text()
    assert "--encode" in cli and "--catalog" in cli and "--samples" in cli
    api = (site / "reference" / "api" / "index.html").read_text()
    assert "ssgp_ppl.api.fit" in api and "TableOptions" in api
    # numpy docstrings: tables of parameters, returns and errors, no raw Sphinx role
    assert api.count('doc-section-title">Parameters:') >= 40
    assert api.count('doc-section-title">Returns:') >= 40 and 'doc-section-title">Raises:' in api
    assert not re.search(r":(class|func|meth|data|attr|mod):`", api)
    # the results pages carry the archived figures, formatted from the JSON
    doc = json.loads((ROOT / "reports" / "catalog_metrics.json").read_text())
    results = (site / "results" / "catalog" / "index.html").read_text()
    for rec in doc["records"][:5]:
        assert f"{rec['nmse']:.4g}" in results
    peers = json.loads((ROOT / "reports" / "peers" / "peers.json").read_text())
    page = (site / "results" / "peers" / "index.html").read_text()
    for name, summ in peers["summary"].items():
        se = f" ± {summ['nmse_se']:.2g}" if summ.get("seeds", 1) > 1 else ""  # over the seeds
        assert f"| {name} |" not in page
        assert f"{summ['nmse']:.4g}{se} ({summ['nmse_ratio']:.2f}×)" in page, name
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
    from ssgp_ppl.entry import load_entry

    # the task-first guide names every built-in entry with when to use it
    page = (site / "guide" / "choosing" / "index.html").read_text()
    for p in BUILTIN_CATALOG.glob("*.toml"):
        e = load_entry(p.stem)
        assert f"<code>{p.stem}</code></a></td>\n<td>{e.use_when}" in page.replace("&amp;", "&"), p.stem
    # the gold page: every stored reference's verdict, and why the conditional entries have none
    from ssgp_ppl.diagnostics import gold
    from ssgp_ppl.entry import list_entries, load_entry

    page = (site / "results" / "gold" / "index.html").read_text()
    for g in gold.stored():
        assert f"<code>{g.provenance['entry']}</code></td>\n<td>{g.provenance['dataset']}" in page
    for name in list_entries():
        e = load_entry(name)
        assert (f"<code>{name}</code>: samples" in page) == bool(e.latent_sites and e.learned_sites)
    mscan = json.loads((ROOT / "reports" / "mscan" / "mscan.json").read_text())
    page = (site / "results" / "m-scan" / "index.html").read_text()
    assert all(f"{r['nmse']:.3f} ({r['mnlp']:.2f})" in page for r in mscan["records"])
    assert mscan["memory"] and all(f"<td>{r['peak_rss_mb']:.0f}</td>" in page for r in mscan["memory"])


# the pages whose ``::: object`` lines mkdocstrings renders from the docstrings
API_PAGES = ["docs/reference/api.md"]
ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|data|attr|exc|obj|const):`")


def _rendered(page: str) -> list[tuple[str, object, str | None]]:
    """(path, Griffe object, member list or None) of every object ``page`` renders, and of each
    member rendered with a class: those its ``members:`` option lists, else (mkdocstrings'
    default) every public member with a docstring."""
    import griffe

    package = griffe.load("ssgp_ppl", search_paths=[str(ROOT)], docstring_parser="numpy")
    text = (ROOT / page).read_text()
    out = []
    for path, options in re.findall(r"^::: (\S+)\n((?:    .*\n)*)", text, re.M):
        obj = package[path.removeprefix("ssgp_ppl.")]
        out.append((path, obj))
        if obj.is_class:
            listed = re.search(r"members: \[(.*)\]", options)
            names = [m.strip() for m in listed.group(1).split(",")] if listed else [
                n for n, m in obj.members.items() if not n.startswith("_") and m.docstring]
            out += [(f"{path}.{n}", obj.all_members[n]) for n in names]
    return out


def _section_names(obj, *kinds: str) -> list[str]:
    """The names a docstring's sections of these kinds list (``x, y``: both)."""
    return [n.strip() for s in obj.docstring.parse("numpy") if s.kind.value in kinds
            for p in s.value for n in p.name.split(",")]


@pytest.mark.parametrize("page", API_PAGES)
def test_api_pages_render_numpy_docstrings(page):
    """Every function, class and member an API page renders has a numpy-style docstring, so the
    page shows Parameters / Returns tables: no Sphinx roles (the docstring reads as the page
    does); a function's Parameters name exactly its parameters, and one that returns something
    has a Returns section; a class names every constructor argument under Parameters or
    Attributes, and nothing it does not have."""
    import importlib
    import inspect

    import yaml

    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    handler = next(p["mkdocstrings"] for p in config["plugins"] if isinstance(p, dict)
                   and "mkdocstrings" in p)["handlers"]["python"]["options"]
    assert handler["docstring_style"] == "numpy" and handler["merge_init_into_class"]
    problems, functions, classes = [], 0, 0
    for path, obj in _rendered(page):
        if not obj.docstring:
            problems.append(f"{path}: no docstring")
            continue
        if ROLE.search(obj.docstring.value):
            problems.append(f"{path}: a Sphinx role ({ROLE.search(obj.docstring.value).group(0)}…)")
        if obj.is_function and "property" not in obj.labels:
            functions += 1
            wanted = [p.name for p in obj.parameters if p.name not in ("self", "cls")]
            given = _section_names(obj, "parameters")
            if sorted(given) != sorted(wanted):
                problems.append(f"{path}: Parameters {given}, signature {wanted}")
            returns = obj.returns is not None and str(obj.returns) != "None"
            if returns and not _section_names(obj, "returns"):
                problems.append(f"{path}: returns {obj.returns} without a Returns section")
        elif obj.is_class:
            classes += 1
            cls = getattr(importlib.import_module(obj.module.path), obj.name)
            wanted = set(inspect.signature(cls).parameters)
            given = _section_names(obj, "parameters", "attributes")
            if not wanted <= set(given):
                problems.append(f"{path}: {sorted(wanted - set(given))} not documented")
            unknown = [n for n in given if n not in wanted and n not in obj.all_members]
            if unknown:
                problems.append(f"{path}: documents {unknown}, which it does not have")
    assert not problems, "\n".join(problems)
    assert functions >= 40 and classes >= 12  # the page's objects were found
