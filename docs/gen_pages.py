"""The generated pages of the docs site (run by the mkdocs-gen-files plugin at every build).

- ``reference/catalog.md``: every built-in catalog entry (from ``models/*.toml``), every
  registered spectral density (from ``ssgp_ppl.model.densities.DENSITIES``) and every component's
  settings (from the schema the components validate with);
- ``reference/cli.md``: the ``--help`` of each command;
- ``results/*.md``: tables made from the archived JSON in ``reports/`` (never typed by hand), and
  the comparison reports themselves;
- ``tutorials/*.md``: the notebooks in ``notebooks/``, executed at small size
  (``SSGP_PPL_SMALL=1``), with their plots. Executed notebooks are cached by their source's hash in
  ``$SSGP_PPL_DOCS_CACHE`` (default ``.docs_cache/``), so ``mkdocs serve`` runs them once.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import mkdocs_gen_files

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from results_tables import PEERS_FIGURE, TABLES, peers_figure, sbc_figures  # noqa: E402

from ssgp_ppl.api import catalog  # noqa: E402
from ssgp_ppl.entry import BUILTIN_CATALOG, schema  # noqa: E402
from ssgp_ppl.inference import methods  # noqa: E402
from ssgp_ppl.model.densities import DENSITIES  # noqa: E402
from ssgp_ppl.model.guides import GUIDES  # noqa: E402
from ssgp_ppl.runtime.io import write_text_atomic  # noqa: E402
from ssgp_ppl.settings import Field  # noqa: E402

# the results pages' tables are wide: no table of contents beside them (MkDocs Material front matter)
WIDE = "---\nhide:\n  - toc\n---\n\n"


def write(path: str, text: str) -> None:
    with mkdocs_gen_files.open(path, "w") as f:
        f.write(text)


def _cell(v) -> str:
    return str(v).replace("|", "\\|").replace("\n", " ")


def _field_rows(node: dict, prefix: str = "") -> list[str]:
    rows = []
    for key, f in node.items():
        if isinstance(f, dict):
            rows += _field_rows(f, f"{prefix}{key}.")
            continue
        assert isinstance(f, Field)
        types = f.type if isinstance(f.type, tuple) else (f.type,)
        allowed = ", ".join(f"`{c}`" for c in f.choices) if f.choices else ""
        if f.low is not None or f.high is not None:
            lo = "" if f.low is None else f"{'>' if f.open_low else '≥'} {f.low:g}"
            hi = "" if f.high is None else f"≤ {f.high:g}"
            allowed = " and ".join(s for s in (lo, hi) if s)
        rows.append(f"| `{prefix}{key}` | {'/'.join(t.__name__ for t in types)} | "
                    f"`{_cell(json.dumps(f.default, ensure_ascii=False))}` | {_cell(allowed)} | "
                    f"{_cell(f.doc)} |")
    return rows


def catalog_page() -> str:
    head = "| key | type | default | allowed | meaning |\n| --- | --- | --- | --- | --- |"
    out = ["# Catalog reference", "",
           "Generated from the built-in catalog (`models/*.toml`) and from the settings "
           "each component validates. The format is described in "
           "[Catalog format](catalog-format.md); `ssgp-ppl models` lists the same entries.", "",
           "## Entries", "", "| entry | use when | methods | guide | objective | description |",
           "| --- | --- | --- | --- | --- | --- |"]
    rows = [r for r in catalog() if Path(r["file"]).parent == BUILTIN_CATALOG]  # not $SSGP_PPL_MODELS
    out += [f"| [`{r['name']}`](#{r['name']}) | {_cell(r['use when'])} | {r['methods']} | {r['guide']} | "
            f"{_cell(r['objective'])} | {_cell(r['description'])} |" for r in rows]
    for r in rows:
        text = (BUILTIN_CATALOG / f"{r['name']}.toml").read_text()
        out += ["", f"### {r['name']}", "", _cell(r["description"]), "",
                f"`models/{r['name']}.toml`:", "", "```toml", text.rstrip(), "```"]
    out += ["", "## Spectral densities", "",
            "The values `model.spectral_density` takes: the registered densities "
            "(`ssgp_ppl.model.densities`; to add one, see [Adding a spectral density]"
            "(../guide/adding-a-model.md#adding-a-spectral-density)). *gaussian*: r | ℓ ~ "
            "N(0, diag(1/4π²ℓ²)), which the `mixture` guide and NCVMP need; *loc_scale*: the "
            "SMC/NUTS reference and `noncentred` auto guides sample θ·2πℓ.", "",
            "| density | kernel and frequencies | gaussian | loc_scale |",
            "| --- | --- | --- | --- |"]
    out += [f"| `{name}` | {_cell(d.doc)} | {'yes' if d.gaussian else 'no'} | "
            f"{'yes' if d.loc_scale else 'no'} |" for name, d in DENSITIES.items()]
    out += ["", *likelihoods_section()]
    full = schema()
    out += ["", "## Settings of each component", "",
            "Every key a catalog file may set, with its default. `--set KEY=VALUE` (CLI) and "
            "`settings={...}` (Python) override them by dotted path or by a leaf name that is "
            "unique. The guide named by `[inference.svi] guide` takes its settings from its own "
            "table `[inference.svi.<guide>]` (`--set svi.<guide>.KEY=VALUE`); a table or key of "
            "another guide is an error.", ""]
    for section, node in full.items():
        if section == "inference":
            for name, sub in node.items():
                if not isinstance(sub, dict):
                    out += ["", "### [inference]", "", head, *_field_rows({name: sub}, "inference.")]
                    continue
                desc = methods.REGISTRY[name].description if name in methods.REGISTRY else ""
                out += ["", f"### [inference.{name}]", "", _cell(desc), "", head,
                        *_field_rows({k: f for k, f in sub.items() if not isinstance(f, dict)})]
                for table, fields in sub.items():  # svi's guides: [inference.svi.<guide>]
                    if isinstance(fields, dict):
                        out += ["", f"#### [inference.{name}.{table}]", "",
                                _cell(GUIDES[table].description), "",
                                *([head, *_field_rows(fields)] if fields else ["No settings."])]
        elif isinstance(node, dict):
            out += ["", f"### [{section}]", "", head, *_field_rows(node)]
        else:
            out += ["", f"### `{section}` (top level)", "", head, *_field_rows({section: node})]
    return "\n".join(out) + "\n"


def likelihoods_section() -> list[str]:
    """The registered likelihoods (``model.likelihood``) and what each declares."""
    from ssgp_ppl.model.likelihoods import LIKELIHOODS

    def closed(lik) -> str:
        forms = [what for what, flag in (("E_q log p", lik.exact_expected_log),
                                         ("log E_q p", lik.exact_log_expected),
                                         ("mean and variance", lik.exact_moments)) if flag]
        return ", ".join(forms) or "none"

    out = ["## Likelihoods", "",
           "The values of `model.likelihood`: every registered likelihood (the built-in ones, "
           "those registered with `ssgp_ppl.register_likelihood` and installed plug-ins), from "
           "`ssgp_ppl.model.likelihoods.LIKELIHOODS`. Expectations without a closed form are "
           "Gauss-Hermite sums; a likelihood whose s does not integrate out needs "
           "`nuisance = \"sampled\"` and `predictive.rule = \"degenerate\"`. "
           "[Adding a likelihood](../guide/adding-a-model.md#adding-a-likelihood) shows how to "
           "write one.", "",
           "| name | target | noise σ_n | s integrates out | closed forms | description |",
           "| --- | --- | --- | --- | --- | --- |"]
    for name, lik in LIKELIHOODS.items():
        out.append(f"| `{name}` | {lik.target} | {'yes' if lik.has_scale else 'no'} | "
                   f"{'yes' if lik.conjugate else 'no'} | {closed(lik)} | "
                   f"{_cell(lik.description)} |")
    return out


def cli_page() -> str:
    from ssgp_ppl.cli import _parser

    os.environ["COLUMNS"] = "100"
    parser = _parser()
    out = ["# CLI reference", "", "Generated from the command's own `--help`.", "",
           "## ssgp-ppl", "", "```text", parser.format_help().rstrip(), "```"]
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name, p in sub.choices.items():
        out += ["", f"## ssgp-ppl {name}", "", "```text", p.format_help().rstrip(), "```"]
    return "\n".join(out) + "\n"


CHOOSING = """# Which entry should I use?

Start from the task; every entry below fits with `ssgp-ppl fit ENTRY --data …` or
`ssgp_ppl.fit("ENTRY", data=…)`, and `ssgp-ppl models` prints the same "use when" column.

- **Ordinary regression, a first look**: `ssgp` fits in seconds, but its point estimates of the
  frequencies overfit small data: read its 90% coverage below before trusting its intervals.
- **Calibrated uncertainty on small or medium data** (up to a few thousand rows): `tan_va_svi`
  or `ssgp_svi`, fully Bayesian over the hyperparameters, each with a stored gold reference
  ([Gold references](../results/gold.md)) that `ssgp-ppl compare` checks the VI against.
- **Large n** (10⁴–10⁶ rows): `svbssgp` (minibatches, local predictions), or its DLM variants
  when the test metric is fixed in advance: `svbssgp_dlm_log` for the log-likelihood,
  `svbssgp_dlm_square` for RMSE.
- **Non-Gaussian targets**: `ssgp_probit` for 0/1 classes, `ssgp_poisson` for counts.
- **Smoothness that changes across the inputs**: `tan_local`.
- **Reproducing a paper**: `tan_va` (Tan et al. 2016), `vssgp` (Gal & Turner 2015), `svbssgp`
  (Hoang et al. 2017); the [results pages](../results/catalog.md) set their figures beside the
  papers'.

Test scores of each entry's default fit on the two bundled benchmark sets (split 0, from
`reports/catalog_metrics.json`; MNLP in nats per point, coverage of the 90% interval: 0.90 is
calibrated):

"""


def choosing_page() -> str:
    """The task-first guide to the catalog, with each entry's "use when" and its archived scores."""
    doc = json.loads((ROOT / "reports" / "catalog_metrics.json").read_text())
    scores = {(r["model"], r["dataset"]): r for r in doc["records"]}
    rows = [r for r in catalog() if Path(r["file"]).parent == BUILTIN_CATALOG]
    out = [CHOOSING, "| entry | use when | pendulum NMSE / MNLP / coverage | "
           "Auto-MPG NMSE / MNLP / coverage |", "| --- | --- | --- | --- |"]
    for r in rows:
        cells = []
        for data in ("pendulum", "autompg"):
            m = scores.get((r["name"], data))
            cells.append("–" if m is None or "mnlp" not in m else
                         f"{m['nmse']:.3f} / {m['mnlp']:.2f} / {m['coverage_90']:.2f}")
        out.append(f"| [`{r['name']}`](../reference/catalog.md#{r['name']}) | "
                   f"{_cell(r['use when'])} | {cells[0]} | {cells[1]} |")
    return "\n".join(out) + "\n"


def results_pages() -> list[str]:
    """One page per results table, and the comparison reports (their HTML copied as they are)."""
    written = []
    for slug, (title, intro, make) in TABLES.items():
        write(f"results/{slug}.md", f"{WIDE}# {title}\n\n{intro}\n\n{make()}\n")
        written.append(slug)
    with mkdocs_gen_files.open(f"results/{PEERS_FIGURE}", "wb") as f:
        peers_figure(f)
    for fig in sbc_figures():
        with mkdocs_gen_files.open(f"results/sbc-{fig.name}", "wb") as f:
            f.write(fig.read_bytes())
    from ssgp_ppl.report import REPORT_FORMAT

    sections = []
    for comp in sorted(ROOT.glob("reports/*/comparison.json")):
        doc = json.loads(comp.read_text())
        if doc.get("format") != REPORT_FORMAT:  # a layout without the reference's verdict
            continue
        html = comp.parent / "report.html"
        link = ""
        if html.exists():
            with mkdocs_gen_files.open(f"results/reports/{comp.parent.name}.html", "w") as f:
                f.write(html.read_text())
            link = f" ([report](reports/{comp.parent.name}.html))"
        ref = next((m["reference"] for m in doc["methods"] if "reference" in m), None)
        verdict = "none (no latent variables: nothing to sample)" if ref is None else ref.get("label") or (
            "computed here: " + ("CONVERGED" if ref.get("converged") else "NOT CONVERGED"))
        sections += [f"## `{doc['model']}` on {doc['dataset']}{link}", "",
                     f"Reference: {verdict}.", "",
                     "| method | NMSE | MNLP | 90% coverage | fit s |", "| --- | --- | --- | --- | --- |"]
        sections += [f"| {m['method']} | {m['nmse']:.4g} | {m['mnlp']:.4g} | "
                     f"{m['coverage_90']:.3f} | {m['fit_seconds']:.1f} |" for m in doc["methods"]]
        sections.append("")
    write("results/comparisons.md",
          f"{WIDE}# Comparison reports\n\n`ssgp-ppl compare ENTRY --data pendulum|autompg` for each "
          "catalog entry (split 0; `benchmarks/comparisons.py`): every method of the entry and the "
          "reference side by side. Each comparison names the reference every VI-vs-reference "
          "distance in its report is read against: a stored gold reference with its label, or "
          "the reference computed in the comparison with its own verdict. Each report holds the "
          "calibration plots, PSIS-LOO, the posterior comparison on the invariant quantities and "
          "the reference's reasons.\n\n" + "\n".join(sections) + "\n")
    return written


def tutorial_pages() -> None:
    import jupytext
    import nbformat
    from nbclient import NotebookClient
    from nbconvert import MarkdownExporter

    cache = Path(os.environ.get("SSGP_PPL_DOCS_CACHE", ROOT / ".docs_cache"))
    cache.mkdir(parents=True, exist_ok=True)
    # an executed copy is reused only for the same notebook and the same package and catalog
    package = hashlib.sha256()
    for f in sorted([*(ROOT / "ssgp_ppl").rglob("*"), *(ROOT / "models").rglob("*")]):
        if f.suffix in (".py", ".toml"):
            package.update(f.relative_to(ROOT).as_posix().encode() + f.read_bytes())
    for path in sorted((ROOT / "notebooks").glob("*.py")):
        source = path.read_bytes()
        key = hashlib.sha256(source + b"small" + package.digest()).hexdigest()[:16]
        done = cache / f"{path.stem}-{key}.ipynb"
        if done.exists():
            nb = nbformat.read(done, as_version=4)
        else:
            nb = jupytext.reads(source.decode(), fmt="py:percent")
            env = dict(os.environ)
            os.environ["SSGP_PPL_SMALL"] = "1"
            os.environ.setdefault("SSGP_PPL_REPORTS", str(cache / "reports"))
            try:
                NotebookClient(nb, timeout=900, kernel_name="python3", resources={
                    "metadata": {"path": str(path.parent)}}).execute()
            finally:
                os.environ.clear()
                os.environ.update(env)
            write_text_atomic(done, nbformat.writes(nb))
        for cell in nb.cells:  # warnings on stderr (tqdm, JAX) are not part of the tutorial
            if cell.cell_type == "code":
                cell.outputs = [o for o in cell.get("outputs", [])
                                if not (o.get("output_type") == "stream" and o.get("name") == "stderr")]
        body, resources = MarkdownExporter().from_notebook_node(
            nb, resources={"output_files_dir": f"{path.stem}_files"})
        for name, data in resources.get("outputs", {}).items():
            with mkdocs_gen_files.open(f"tutorials/{name}", "wb") as f:
                f.write(data)
        note = ("!!! note \"Executed at small size\"\n    This page is the notebook "
                f"`notebooks/{path.name}` run with `SSGP_PPL_SMALL=1` (small budgets) when the "
                "docs were built. For the full-size figures, run it yourself: `jupytext --to "
                f"ipynb --execute notebooks/{path.name}` (or open it in Jupyter with "
                "jupytext).\n\n")
        lines = body.splitlines(keepends=True)
        first = next((i for i, ln in enumerate(lines) if ln.startswith("# ")), None)
        if first is None:  # no title cell: the file name is the title
            text = f"# {path.stem.replace('_', ' ')}\n\n{note}{body}"
        else:
            text = "".join(lines[:first + 1]) + "\n" + note + "".join(lines[first + 1:])
        write(f"tutorials/{path.stem}.md", text)


write("reference/catalog.md", catalog_page())
write("guide/choosing.md", choosing_page())
write("reference/cli.md", cli_page())
results_pages()
if os.environ.get("SSGP_PPL_DOCS_NOTEBOOKS", "1") != "0":
    tutorial_pages()
