#!/usr/bin/env python3
"""Lay the package out by role: model/, inference/, diagnostics/, data/, runtime/ under ssgp_ppl/,
the built-in catalog in a top-level models/ folder, the tests mirroring the package.

Usage::

    python scripts/relayout.py [ROOT]        # ROOT: a git checkout of the flat layout (default .)

It works on the files present when it runs (no stored patches), so it can be run on the newest
main: every move is a ``git mv``; every import, dotted module path (code, strings, docstrings,
``::: ssgp_ppl.x`` directives, monkeypatch targets) and repository path (``ssgp_ppl/x.py``,
``tests/test_x.py``, ``ROOT / "ssgp_ppl" / "data"``, ``Path(__file__).parent / "models"``) in
the package, tests, benchmarks, notebooks, scripts, docs, README, mkdocs.yml and pyproject.toml is
rewritten by regular expressions; the CHANGELOG and the archived reports/ are history and are not.
The entry-point group names (``ssgp_ppl.methods``, ``ssgp_ppl.densities``, …) are a contract with
installed plug-ins and are kept. ``ssgp_ppl/data/datasets.py`` is then split by moving top-level
definitions by name (``ast``) into ``checks.py``, ``readers.py`` and ``registry.py``, and every
use of a moved name is pointed at its new module. Last, ``ruff check --fix --select I`` sorts the
imports. A top-level module the tables below do not know stays where it is and is reported, as is
any old path left after the rewrite.

Nothing is committed: review ``git status`` / ``git diff --cached`` and commit.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path, PurePosixPath

# --------------------------------------------------------------------------------------------
# The layout
# --------------------------------------------------------------------------------------------

# top-level module of the flat layout -> its module in the new one (a package moves whole)
MODULES = {
    # model/: what is computed — densities, likelihoods, the model and its predictive, guides
    "densities": "model.densities",
    "likelihoods": "model.likelihoods",
    "model": "model.ssgp",
    "spectral": "model.spectral",
    "predictive": "model.predictive",
    "guides": "model.guides",
    "mixture": "model.mixture",
    "linalg": "model.linalg",
    # inference/: how — the methods and the algorithms they run
    "methods": "inference.methods",
    "inference": "inference.runners",
    "smc": "inference.smc",
    "ncvmp": "inference.ncvmp",
    "objectives": "inference.objectives",
    "paths": "inference.paths",
    "stacking": "inference.stacking",
    "selection": "inference.selection",
    "neighbourhoods": "inference.neighbourhoods",
    "partitions": "inference.partitions",
    "fitinfo": "inference.fitinfo",
    # diagnostics/: how good — metrics, calibration, invariants, evidence, gold references
    "metrics": "diagnostics.metrics",
    "calibration": "diagnostics.calibration",
    "invariants": "diagnostics.invariants",
    "evidence": "diagnostics.evidence",
    "gold": "diagnostics.gold",
    "datatree": "diagnostics.datatree",
    "sbc": "diagnostics.sbc",  # simulation-based calibration
    # data/: the data sets and a user's tables
    "datasets": "data.datasets",
    "tables": "data.tables",
    # runtime/: running a fit — files, checkpoints, run directories, signals, resources, devices
    "io": "runtime.io",
    "checkpoint": "runtime.checkpoint",
    "rundir": "runtime.rundir",
    "signals": "runtime.signals",
    "status": "runtime.status",
    "resources": "runtime.resources",
    "sharding": "runtime.sharding",
    "cluster": "runtime.cluster",
}
# the package's front and what every layer shares stay at the top
TOP = {"__init__", "api", "cli", "entry", "errors", "estimator", "pipeline", "plugins",
       "posterior", "report", "settings"}

PACKAGES = {
    "model": "The model: spectral densities, likelihoods, the SSGP model with its predictive rules "
             "and feature map, and the variational guides.",
    "inference": "Inference: the methods (their registry and one module per method) and what they "
                 "run: the SVI and NUTS runners, tempered SMC, NCVMP, training objectives, "
                 "multi-path runs and their stacking, β selection, partitions, the fit's typed "
                 "diagnostics.",
    "diagnostics": "Diagnostics: predictive metrics, calibration (PSIS-LOO, PIT), the invariant "
                   "quantities VI is compared with its reference on, log evidence checks, the gold "
                   "references and the ArviZ DataTree of a fit.",
    "data": "Data: the named data sets (their registry), the readers, splits and scaling, a user's "
            "tables; the bundled data files are in ``bundled/``.",
    "runtime": "Running a fit: atomic writes, checkpoints, run directories, stop signals and status "
               "lines, the memory estimate, sharding over devices and Dask clusters.",
}

# folders of data files (repository paths): old -> new
DIRS = {
    "ssgp_ppl/models": "models",          # the built-in catalog, a top-level folder
    "ssgp_ppl/data": "ssgp_ppl/data/bundled",  # the bundled data files (data/ is a package now)
    "tests/data": "tests/files",          # the tests' stored files (tests/data/ tests the data package)
}

# tests/test_<name>.py -> tests/<sub>/; a test of a moved module not listed follows the module,
# any other stays at the top (tests of the whole package: api, docs, packaging, architecture, …)
TESTS = {
    "model": ["densities", "likelihoods", "likelihood_contract", "model", "spectral", "guides",
              "guide_contract", "guide_settings", "mixture", "linalg", "local_predictive"],
    "inference": ["inference", "methods", "smc", "ncvmp", "objectives", "paths", "stacking",
                  "partitions", "fitinfo", "tan"],
    "diagnostics": ["calibration", "invariants", "metrics", "gold", "sbc"],
    "data": ["datasets", "tables"],
    "runtime": ["io", "checkpoint", "rundir", "sharding", "cluster", "resources"],
}
# the tests of the whole package, at the top
TESTS_TOP = ["adding_a_density", "adding_a_guide", "adding_a_likelihood", "adding_a_method", "api",
             "architecture", "benchmark_multimodal", "benchmark_peers", "benchmark_references",
             "catalog", "catalog_metrics", "cli", "docs", "estimator", "fit", "log_target",
             "packaging", "plugins", "posterior", "properties", "readme", "report", "validation"]

# ssgp_ppl/data/datasets.py split: new module -> (docstring, top-level names moved there)
SPLIT_SOURCE = "ssgp_ppl/data/datasets.py"
SPLIT = {
    "ssgp_ppl.data.checks": (
        "Checks of a data set's values: real numbers (:func:`real_array`), finite "
        "(:func:`check_finite`), within float32's range once scaled (:func:`check_scaled_range`); "
        "each problem one SSGPError naming the row and column.",
        ["_column", "_position", "_first", "real_array", "X_SCALED_MAX", "check_scaled_range",
         "check_finite", "_check_finite_array"]),
    "ssgp_ppl.data.readers": (
        "Readers: a data file as raw arrays or a table — the named sets' formats (headerless CSV, "
        "Auto-MPG's text, the UCI folders, airline, BlogFeedback) and a user's CSV / TSV / TXT / "
        "Parquet file — and the parsed-array cache of the large ones.",
        ["_AUTOMPG_INPUTS", "_AIRLINE_TARGET", "_BLOG_COLUMNS", "_BLOG_INPUTS", "_BLOG_ROWS",
         "_FILE_SUFFIXES", "_CACHE_VERSION", "_xnames", "_need_file", "_read_headerless_csv",
         "_read_autompg", "_read_uci_txt", "_read_ints", "_load_airline", "_parse_float_csv",
         "_load_blog", "_cache_dir", "_cached_parse", "_looks_like_path", "_file_stem",
         "_sniff_sep", "HEADER_CHARS", "_header_width", "_read_table"]),
    "ssgp_ppl.data.registry": (
        "The named data sets: per set its reader, split protocol and aliases, and where the "
        "shared data directory is.",
        ["KNOWN", "_BUNDLED", "_MASK_SETS", "_UCI_FOLDERS", "_ALIASES", "_AIRLINE_FILE",
         "_BLOG_FILE", "known_datasets", "default_data_dir", "_load_named", "_no_test_fraction",
         "_resolve_data_dir"]),
}
# names used by another module after the split lose their underscore
SPLIT_RENAMES = {
    "_check_finite_array": "check_rows", "_xnames": "xnames", "_need_file": "need_file",
    "_read_headerless_csv": "read_headerless_csv", "_read_autompg": "read_autompg",
    "_read_uci_txt": "read_uci_txt", "_load_airline": "read_airline", "_load_blog": "read_blog",
    "_cached_parse": "cached_parse", "_looks_like_path": "looks_like_path",
    "_file_stem": "file_stem", "_read_table": "read_table", "_AUTOMPG_INPUTS": "AUTOMPG_INPUTS",
    "_ALIASES": "ALIASES", "_load_named": "load_named", "_BUNDLED": "BUNDLED",
}

# files rewritten: tracked text files by suffix, but these (history, stored outputs, this script)
REWRITE_SUFFIXES = (".py", ".md", ".toml", ".yml", ".yaml", ".cfg", ".ini", ".txt", ".sh")
NOT_REWRITTEN = re.compile(r"^(CHANGELOG\.md|reports/|ssgp_ppl/references/|scripts/relayout\.py$)")

# entry-point group names: kept as they are (installed plug-ins declare them)
PROTECT = [
    re.compile(r'entry-points\.\s*"ssgp_ppl\.\w+"'),
    re.compile(r"\[ssgp_ppl\.\w+\]"),
    re.compile(r"group\s*=\s*[\"']ssgp_ppl\.\w+[\"']"),
    re.compile(r"group\s+`*ssgp_ppl\.\w+"),  # "the entry-point group ``ssgp_ppl.guides``"
    re.compile(r"entry points?\s+in\s+`*ssgp_ppl\.\w+"),
    re.compile(r"GROUPS\s*=\s*\{[^}]*\}"),
    re.compile(r"_distribution\(\s*\w+\s*,\s*\"ssgp_ppl\.\w+\""),
]

# one-off edits the patterns above cannot make: (file, old, new); each must match once
FIXUPS = [
    ("pyproject.toml",
     'ssgp_ppl = ["data/*", "data/**/*", "models/*.toml", "references/*/*/*"]',
     'ssgp_ppl = ["references/*/*/*"]\n"ssgp_ppl.data" = ["bundled/*"]'),
    # the executed-notebook cache key covers the catalog, which is no longer under ssgp_ppl/
    ("docs/gen_pages.py",
     'for f in sorted((ROOT / "ssgp_ppl").rglob("*")):',
     'for f in sorted([*(ROOT / "ssgp_ppl").rglob("*"), *(ROOT / "models").rglob("*")]):'),
    # the flat layout's module paths stay importable for a while (ssgp_ppl/moved.py)
    ("ssgp_ppl/__init__.py",
     'os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")\n',
     'os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")\n\n'
     "from ssgp_ppl import moved  # noqa: E402\n\n"
     "moved.install()  # the flat layout's module paths, with a DeprecationWarning\n"),
    # code lines the longer paths pushed past the line length (rewrap() takes prose only)
    ("ssgp_ppl/inference/fitinfo.py",
     "# SVI / type-II: by the stop rule (ssgp_ppl.inference.runners); NCVMP: its bound",
     "# SVI / type-II: by the runners' stop rule; NCVMP: its bound"),
    ("tests/test_architecture.py",
     '== {"ssgp_ppl.inference.methods", "ssgp_ppl.inference.methods.common"}',
     '== {"ssgp_ppl.inference.methods",\n'
     '                                                  "ssgp_ppl.inference.methods.common"}'),
]

MOVED_TEMPLATE = '''"""The module paths of the flat layout (``ssgp_ppl.densities``,
``ssgp_ppl.methods.base``, …), kept importable for a while: importing one gives the module at its
new path itself (the same object, so registries and classes are shared) with a
DeprecationWarning naming that path. Code and plug-ins written against the old paths keep
loading; saved posteriors and run files store no module path. ``ssgp_ppl.model`` and
``ssgp_ppl.inference`` are packages now, so their old modules (``ssgp_ppl.model.ssgp`` and
``ssgp_ppl.inference.runners`` now) have no alias."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

# old module (and everything under it) -> new module
MOVED = {
%s}


def new_name(name: str) -> str | None:
    """The new path of ``name`` if it is (under) a moved module, else None."""
    if not name.startswith("ssgp_ppl."):
        return None
    parts = name.split(".")
    for i in range(len(parts), 1, -1):
        new = MOVED.get(".".join(parts[:i]))
        if new is not None:
            return ".".join([new, *parts[i:]])
    return None


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path and loads it as the module at its new path."""

    def find_spec(self, fullname, path=None, target=None):
        new = new_name(fullname)
        if new is None:
            return None
        spec = importlib.util.find_spec(new)
        if spec is None:
            return None
        return importlib.util.spec_from_loader(
            fullname, self, is_package=spec.submodule_search_locations is not None)

    def create_module(self, spec):
        return None

    def exec_module(self, module) -> None:
        new = new_name(module.__name__)
        warnings.warn(f"{module.__name__} is now {new}; the old path will go", DeprecationWarning,
                      stacklevel=2)
        # the import system returns what sys.modules holds for the name after this call
        sys.modules[module.__name__] = importlib.import_module(new)


def install() -> None:
    """Put the alias finder first on ``sys.meta_path`` (once): an old submodule path must not be
    found again by the path finder under the new package's ``__path__``."""
    if not any(isinstance(f, _Alias) for f in sys.meta_path):
        sys.meta_path.insert(0, _Alias())


__all__ = ["MOVED", "install", "new_name"]
'''


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


class Relayout:
    def __init__(self, root: Path):
        self.root = root
        self.notes: list[str] = []
        self.touched: set[str] = set()
        self.new_to_old: dict[str, str] = {}  # repository path after -> before the moves
        self.file_map: dict[str, str] = {}  # repository path before -> after (files)
        self.module_map: dict[str, str] = {}  # dotted: old -> new
        self.test_dirs: set[str] = set()

    # git and files
    def git(self, *args: str) -> str:
        r = subprocess.run(["git", *args], cwd=self.root, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"relayout: git {' '.join(args)} failed: {r.stderr.strip()}")
        return r.stdout

    def tracked(self) -> list[str]:
        return sorted(self.git("ls-files", "-z").split("\0")[:-1])

    def read(self, rel: str) -> str:
        return (self.root / rel).read_text()

    def write(self, rel: str, text: str) -> None:
        p = self.root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        self.touched.add(rel)

    def mv(self, old: str, new: str) -> None:
        (self.root / new).parent.mkdir(parents=True, exist_ok=True)
        self.git("mv", old, new)
        self.file_map[old] = new
        self.new_to_old[new] = old

    # ----------------------------------------------------------------------------------------
    def run(self) -> None:
        self.check()
        self.plan_and_move()
        self.new_files()
        self.rewrite_all()
        self.fixups()
        self.split_datasets()
        self.rewrap()
        self.ruff()
        self.git("add", "-A", "--", *sorted(self.touched | set(self.file_map.values())))
        self.leftovers()
        for n in self.notes:
            print("relayout:", n)

    def check(self) -> None:
        if not (self.root / "ssgp_ppl" / "datasets.py").is_file():
            sys.exit("relayout: ssgp_ppl/datasets.py not found: not the flat layout (run once, on "
                     "a checkout of main)")
        for pkg in PACKAGES:
            if (self.root / "ssgp_ppl" / pkg / "__init__.py").exists():
                sys.exit(f"relayout: ssgp_ppl/{pkg}/ is a package already: laid out before?")
        if self.git("status", "--porcelain", "--untracked-files=no").strip():
            sys.exit("relayout: the work tree has uncommitted changes; commit or stash them")

    # ----------------------------------------------------------------------------------------
    def plan_and_move(self) -> None:
        files = self.tracked()
        # 1. data folders (first: ssgp_ppl/data/ and tests/data/ become packages of code)
        for old_dir, new_dir in DIRS.items():
            for f in files:
                if f.startswith(old_dir + "/"):
                    self.mv(f, new_dir + f[len(old_dir):])
        # 2. modules
        for f in files:
            m = re.fullmatch(r"ssgp_ppl/(\w+)\.py", f)
            if m:
                name = m.group(1)
                if name in MODULES:
                    self.mv(f, "ssgp_ppl/" + MODULES[name].replace(".", "/") + ".py")
                elif name not in TOP:
                    self.notes.append(f"ssgp_ppl/{name}.py is not in the layout's tables: it "
                                      "stays at the top (add it to MODULES or TOP)")
            for name, new in MODULES.items():  # a package
                if f.startswith(f"ssgp_ppl/{name}/"):
                    self.mv(f, "ssgp_ppl/" + new.replace(".", "/") + f[len(f"ssgp_ppl/{name}"):])
        missing = [n for n in MODULES if f"ssgp_ppl.{n}" not in
                   {self._dotted(o) for o in self.file_map}]
        if missing:
            self.notes.append(f"MODULES lists modules this tree does not have (fine where they "
                              f"are not merged yet): {', '.join(missing)}")
        self.module_map = {f"ssgp_ppl.{k}": f"ssgp_ppl.{v}" for k, v in MODULES.items()
                           if k not in missing}
        # 3. tests
        sub_of = {t: sub for sub, names in TESTS.items() for t in names}
        for f in files:
            m = re.fullmatch(r"tests/test_(\w+)\.py", f)
            if not m:
                continue
            name = m.group(1)
            sub = sub_of.get(name)
            if sub is None and name not in TESTS_TOP:  # a new test: by the module it is named after
                parts = name.split("_")
                module = next((p for p in ("_".join(parts[:i]) for i in range(len(parts), 0, -1))
                               if p in MODULES), None)
                sub = MODULES[module].split(".")[0] if module else None
                self.notes.append(f"tests/test_{name}.py is not in TESTS or TESTS_TOP: "
                                  + (f"moved to tests/{sub}/ by its name" if sub else
                                     "left at the top") + " (check, and add it to the tables)")
            if sub is not None:
                self.mv(f, f"tests/{sub}/test_{m.group(1)}.py")
                self.test_dirs.add(sub)
        for t in sorted(set(sub_of) - {re.fullmatch(r"tests/test_(\w+)\.py", f).group(1)
                                       for f in files if re.fullmatch(r"tests/test_\w+\.py", f)}):
            self.notes.append(f"TESTS lists tests/test_{t}.py, which this tree does not have "
                              "(fine where it is not merged yet)")
        # folders the moves emptied (bytecode aside): an empty ssgp_ppl/methods/ would still be
        # a namespace package to Python and to setuptools
        for d in sorted({str(PurePosixPath(o).parent) for o in self.file_map}, key=len,
                        reverse=True):
            p = self.root / d
            if p.is_dir() and all(c.name == "__pycache__" for c in p.iterdir()):
                for c in p.iterdir():
                    for f in c.iterdir():
                        f.unlink()
                    c.rmdir()
                p.rmdir()

    @staticmethod
    def _dotted(path: str) -> str:
        parts = PurePosixPath(path).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    def new_files(self) -> None:
        for pkg, doc in PACKAGES.items():
            self.write(f"ssgp_ppl/{pkg}/__init__.py", f'"""{_wrap(doc, 3)}"""\n\n'
                       "__all__: list[str] = []\n")
        lines = "".join(f'    "{o}": "{n}",\n' for o, n in self.module_map.items()
                        if o.split(".")[1] not in PACKAGES)  # ssgp_ppl.model/.inference: packages
        self.write("ssgp_ppl/moved.py", MOVED_TEMPLATE % lines)

    # ----------------------------------------------------------------------------------------
    # Rewriting
    # ----------------------------------------------------------------------------------------

    def map_path(self, p: str) -> str:
        """A repository path (file or folder, maybe with a glob or <placeholder>) after the moves."""
        if p in self.file_map:
            return self.file_map[p]
        moved_dirs = {**DIRS, **{f"ssgp_ppl/{k}": "ssgp_ppl/" + v.replace(".", "/")
                                 for k, v in MODULES.items()
                                 if not (self.root / "ssgp_ppl" / f"{k}.py").exists()
                                 and self._was_package(k)}}
        for old, new in sorted(moved_dirs.items(), key=lambda kv: -len(kv[0])):
            if p == old or p.startswith(old + "/"):
                return new + p[len(old):]
        m = re.fullmatch(r"(ssgp_ppl|tests)/(\w+)\.py(.*)", p)
        if m and f"{m.group(1)}/{m.group(2)}.py" in self.file_map:
            return self.file_map[f"{m.group(1)}/{m.group(2)}.py"] + m.group(3)
        return p

    def _was_package(self, name: str) -> bool:
        return any(o.startswith(f"ssgp_ppl/{name}/") for o in self.file_map)

    def rewrite_all(self) -> None:
        names = sorted((o.split(".", 1)[1] for o in self.module_map), key=len, reverse=True)
        self.dotted_re = re.compile(r"(?<![\w.])ssgp_ppl\.(" + "|".join(map(re.escape, names))
                                    + r")(?![\w])")
        for rel in self.tracked():
            if NOT_REWRITTEN.match(rel) or not rel.endswith(REWRITE_SUFFIXES):
                continue
            if not (self.root / rel).is_file():
                continue
            old = self.read(rel)
            new = self.rewrite_text(rel, old)
            if new != old:
                self.write(rel, new)

    def rewrite_text(self, rel: str, text: str) -> str:
        kept: list[str] = []

        def protect(m):
            kept.append(m.group(0))
            return f"\0{len(kept) - 1}\0"

        for pat in PROTECT:
            text = pat.sub(protect, text)
        if rel.endswith(".py"):
            text = self.rewrite_file_paths(rel, text)  # before the imports change (aliases)
            text = self.rewrite_path_chains(text)
        # the statements written are final: the dotted paths below must not rewrite them again
        text = self.rewrite_from_imports(text, lambda s: protect(_Match(s)))
        text = self.dotted_re.sub(lambda m: self.module_map["ssgp_ppl." + m.group(1)], text)
        text = re.sub(r"(?<![\w/.\-])((?:ssgp_ppl|tests)/[\w*<>{}\-]+(?:[/.][\w*<>{}\-]+)*/?)",
                      lambda m: self.map_path(m.group(1)), text)
        return re.sub(r"\0(\d+)\0", lambda m: kept[int(m.group(1))], text)

    def rewrite_from_imports(self, text: str, final=lambda s: s) -> str:
        """``from ssgp_ppl import a, b as c`` -> one statement per package the names are in now."""
        pat = re.compile(r"^(?P<indent>[ \t]*)from ssgp_ppl import (?P<body>\([^)]*\)|[^\n#]*?)"
                         r"(?P<comment>[ \t]*#[^\n]*)?$", re.M)

        def repl(m):
            body = m.group("body").strip().strip("()")
            items = [re.sub(r"#[^\n]*", "", s).strip() for s in body.split(",")]
            groups: dict[str, list[str]] = {}
            for item in filter(None, (" ".join(i.split()) for i in items)):
                name, _, alias = item.partition(" as ")
                new = self.module_map.get(f"ssgp_ppl.{name}")
                if new is None:
                    groups.setdefault("ssgp_ppl", []).append(item)
                    continue
                parent, last = new.rsplit(".", 1)
                alias = alias or (name if last != name else "")
                groups.setdefault(parent, []).append(f"{last} as {alias}" if alias else last)
            if list(groups) == ["ssgp_ppl"]:
                return m.group(0)
            comment = m.group("comment") or ""
            return "\n".join(f"{m.group('indent')}" + final(f"from {parent} import "
                                                          f"{', '.join(items)}{comment}")
                             for parent, items in groups.items())

        return pat.sub(repl, text)

    def _module_aliases(self, text: str) -> dict[str, str]:
        """local name -> the old dotted module it is bound to by an import in ``text``."""
        out = {}
        for m in re.finditer(r"^[ \t]*from ssgp_ppl import (\([^)]*\)|[^\n#]*)", text, re.M):
            for item in m.group(1).strip("()").split(","):
                name, _, alias = " ".join(re.sub(r"#.*", "", item).split()).partition(" as ")
                if f"ssgp_ppl.{name}" in self.module_map:
                    out[alias or name] = f"ssgp_ppl.{name}"
        for m in re.finditer(r"^[ \t]*import (ssgp_ppl\.[\w.]+) as (\w+)", text, re.M):
            out[m.group(2)] = m.group(1)
        return out

    def _module_file(self, dotted: str, new: bool) -> str | None:
        for old_path in self.file_map:
            if self._dotted(old_path) == dotted:
                return self.file_map[old_path] if new else old_path
        return None

    def rewrite_file_paths(self, rel: str, text: str) -> str:
        """``Path(__file__)...parent... / "x"`` (and ``Path(mod.__file__)``) pointing at the same
        place from where the file (or the module) is now."""
        old_rel = self.new_to_old.get(rel, rel)
        aliases = self._module_aliases(text)
        pat = re.compile(r"Path\((?P<who>__file__|\w+\.__file__)\)(?P<res>\.resolve\(\))?"
                         r"(?P<ups>(?:\.parent(?!s))+|\.parents\[(?P<k>\d+)\])"
                         r"(?P<segs>(?:\s*/\s*\"[^\"{}]+\")*)")

        def repl(m):
            if m.group("who") == "__file__":
                src_old, src_new = old_rel, rel
            else:
                mod = aliases.get(m.group("who").split(".")[0])
                if mod is None:
                    return m.group(0)
                src_old, src_new = self._module_file(mod, False), self._module_file(mod, True)
                if src_old is None:
                    return m.group(0)
            up = int(m.group("k")) + 1 if m.group("k") else m.group("ups").count(".parent")
            segs = re.findall(r"\"([^\"]+)\"", m.group("segs"))
            target = os.path.normpath(os.path.join(os.path.dirname(src_old), *[".."] * (up - 1),
                                                   *segs))
            if not target.startswith(".."):
                target = self.map_path(target)
            rel_parts = PurePosixPath(os.path.relpath(target, os.path.dirname(src_new))).parts
            ups = len([p for p in rel_parts if p == ".."])
            rest = [p for p in rel_parts if p not in ("..", ".")]
            if src_old == src_new and ups == up - 1 and rest == segs:
                return m.group(0)
            head = f"Path({m.group('who')}){m.group('res') or ''}"
            head += ".parent" if ups == 0 else f".parents[{ups}]"
            return head + "".join(f' / "{s}"' for s in rest)

        return pat.sub(repl, text)

    def rewrite_path_chains(self, text: str) -> str:
        """``ROOT / "ssgp_ppl" / "data" / "x"`` -> the same path after the moves."""

        def repl(m):
            segs = re.findall(r"\"([^\"]+)\"", m.group(0))
            new = self.map_path("/".join(segs)).split("/")
            return " / ".join(f'"{s}"' for s in new) if new != segs else m.group(0)

        return re.sub(r"\"(?:ssgp_ppl|tests)\"(?:\s*/\s*\"[\w.\-]+\")+", repl, text)

    # ----------------------------------------------------------------------------------------
    def fixups(self) -> None:
        for rel, old, new in FIXUPS:
            text = self.read(rel)
            if text.count(old) != 1:
                sys.exit(f"relayout: {rel}: expected one {old!r} (edited since the script was "
                         "written?): make this edit by hand, update FIXUPS and run again")
            self.write(rel, text.replace(old, new))

    # ----------------------------------------------------------------------------------------
    # The datasets.py split
    # ----------------------------------------------------------------------------------------

    def split_datasets(self) -> None:
        src_rel = SPLIT_SOURCE
        src_mod = self._dotted(src_rel)
        text = self.read(src_rel)
        for old, new in SPLIT_RENAMES.items():  # first, in the whole module
            text = re.sub(rf"(?<![\w.]){re.escape(old)}(?!\w)", new, text)
        plan = {mod: (doc, [SPLIT_RENAMES.get(n, n) for n in names])
                for mod, (doc, names) in SPLIT.items()}
        tree = ast.parse(text)
        lines = text.splitlines(keepends=True)

        stmts = []  # (names, first line, last line, node) of each top-level definition
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names = [node.target.id]
            else:
                continue
            first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            while first > 1 and lines[first - 2].startswith("#") and not _banner(lines[first - 2]):
                first -= 1  # the comment lines right above it go with it
            stmts.append((names, first, node.end_lineno, node))
        defined = {n: s for s in stmts for n in s[0]}
        home = {n: src_mod for n in defined if n != "__all__"}
        for mod, (_, names) in plan.items():
            for n in names:
                if n not in defined:
                    sys.exit(f"relayout: {src_rel} has no top-level {n!r}: update SPLIT")
                home[n] = mod

        def uses(stmt) -> set[str]:
            return {n.id for n in ast.walk(stmt[3]) if isinstance(n, ast.Name)} - set(stmt[0])

        header = "".join(ast.get_source_segment(text, n) + "\n" for n in tree.body
                         if isinstance(n, ast.Import | ast.ImportFrom)
                         and not (isinstance(n, ast.ImportFrom) and n.module == "__future__"))
        for mod, (doc, names) in plan.items():
            mine = [s for s in stmts if s[0][0] in names]
            needed: dict[str, set[str]] = {}
            for s in mine:
                for n in uses(s):
                    h = home.get(n)
                    if h == src_mod:
                        sys.exit(f"relayout: {mod}.{s[0][0]} uses {n}, which stays in {src_mod}: "
                                 "add it to SPLIT (the modules must not import each other back)")
                    if h is not None and h != mod:
                        needed.setdefault(h, set()).add(n)
            public = sorted(n for n in names if not n.startswith("_"))
            out = [f'"""{_wrap(doc, 3)}"""\n\nfrom __future__ import annotations\n\n', header]
            out += [f"from {h} import {', '.join(sorted(ns))}\n" for h, ns in sorted(needed.items())]
            out.append(_join_segments(lines, mine))
            out.append("\n\n" + _wrap("__all__ = [" + ", ".join(f'"{n}"' for n in public) + "]",
                                      0, 100, indent="    ") + "\n")
            self.write(mod.replace(".", "/") + ".py", "".join(out))

        # the source: moved definitions out, imports of what it still uses in, __all__ trimmed
        moved = {n for _, (_, names) in plan.items() for n in names}
        drop = set()
        for s in stmts:
            if s[0][0] in moved:
                drop |= set(range(s[1], s[2] + 1))
        needed = {}
        for s in stmts:
            if s[0][0] not in moved:
                for n in uses(s):
                    if n in moved:
                        needed.setdefault(home[n], set()).add(n)
        keep = [ln for i, ln in enumerate(lines, 1) if i not in drop]
        body = _drop_empty_banners("".join(keep))
        body = re.sub(r"\n{4,}", "\n\n\n", body)
        last_import = max(n.end_lineno for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom))
        anchor = "".join(lines[:last_import])
        assert body.startswith(anchor)
        imports = "".join(f"from {h} import {', '.join(sorted(ns))}\n"
                          for h, ns in sorted(needed.items()))
        body = anchor + imports + body[len(anchor):]
        body = _trim_all(body, moved)
        self.write(src_rel, body)

        # every use elsewhere: from-imports by name, module attributes, dotted paths
        new_home = {old: (home[SPLIT_RENAMES.get(old, old)], SPLIT_RENAMES.get(old, old))
                    for _, (_, names) in SPLIT.items() for old in names}
        self.split_touched = {src_rel, *(m.replace(".", "/") + ".py" for m in plan)}
        for rel in self.tracked() + sorted(self.touched):
            if rel in self.split_touched or rel == "ssgp_ppl/moved.py" or NOT_REWRITTEN.match(rel) or \
                    not rel.endswith(REWRITE_SUFFIXES) or not (self.root / rel).is_file():
                continue
            old = self.read(rel)
            new = self._point_at_split(old, src_mod, new_home)
            if new != old:
                self.write(rel, new)
                self.split_touched.add(rel)

    def _point_at_split(self, text: str, src_mod: str, new_home: dict) -> str:
        pkg, src_name = src_mod.rsplit(".", 1)
        renamed = set()

        # from ssgp_ppl.data.datasets import a, b
        def from_repl(m):
            body = m.group("body").strip().strip("()")
            groups: dict[str, list[str]] = {}
            for item in filter(None, (" ".join(re.sub(r"#.*", "", i).split())
                                      for i in body.split(","))):
                name, _, alias = item.partition(" as ")
                h, new = new_home.get(name, (src_mod, name))
                if new != name and not alias:
                    renamed.add((name, new))
                groups.setdefault(h, []).append(f"{new} as {alias}" if alias else new)
            if list(groups) == [src_mod]:
                return m.group(0)
            comment = m.group("comment") or ""
            return "\n".join(f"{m.group('indent')}from {h} import {', '.join(items)}{comment}"
                             for h, items in groups.items())

        text = re.sub(rf"^(?P<indent>[ \t]*)from {re.escape(src_mod)} import "
                      r"(?P<body>\([^)]*\)|[^\n#]*?)(?P<comment>[ \t]*#[^\n]*)?$", from_repl, text,
                      flags=re.M)
        for old, new in renamed:
            text = re.sub(rf"(?<![\w.]){re.escape(old)}(?!\w)", new, text)

        # module aliases: datasets.check_finite -> checks.check_finite (+ its import)
        aliases = {}
        for m in re.finditer(rf"^[ \t]*from {re.escape(pkg)} import (\([^)]*\)|[^\n#]*)", text,
                             re.M):
            for item in m.group(1).strip("()").split(","):
                name, _, alias = " ".join(re.sub(r"#.*", "", item).split()).partition(" as ")
                if name == src_name:
                    aliases[alias or name] = m
        for m in re.finditer(rf"^[ \t]*import {re.escape(src_mod)} as (\w+)", text, re.M):
            aliases[m.group(1)] = m
        wanted: dict[str, set[str]] = {}
        for alias in aliases:
            def attr(m, alias=alias):
                h, new = new_home.get(m.group(1), (src_mod, m.group(1)))
                if h == src_mod:
                    return m.group(0)
                short = h.rsplit(".", 1)[1]
                wanted.setdefault(alias, set()).add(short)
                return f"{short}.{new}"
            text = re.sub(rf"(?<![\w.]){re.escape(alias)}\.(\w+)", attr, text)

            def named(m, alias=alias):  # monkeypatch.setattr(datasets, "default_data_dir", …)
                h, new = new_home.get(m.group(2), (src_mod, m.group(2)))
                if h == src_mod:
                    return m.group(0)
                short = h.rsplit(".", 1)[1]
                wanted.setdefault(alias, set()).add(short)
                return f"{short}{m.group(1)}{new}{m.group(3)}"
            text = re.sub(rf"(?<![\w.]){re.escape(alias)}(\s*,\s*[\"'])(\w+)([\"'])", named, text)
        for alias, shorts in wanted.items():
            for short in shorts:
                if re.search(rf"^\s*(def|class)\s+{short}\b|^\s*{short}\s*=", text, re.M):
                    sys.exit(f"relayout: a file binds the name {short!r} already; point its uses "
                             "of the split module by hand")
            stmt = rf"^([ \t]*)((?:from {re.escape(pkg)} import [^\n]*\b{re.escape(src_name)}\b" \
                   rf"[^\n]*)|(?:import {re.escape(src_mod)} as {re.escape(alias)}\b[^\n]*))$"
            line = f"from {pkg} import {', '.join(sorted(shorts))}"
            text = re.sub(stmt, lambda m, line=line: f"{m.group(0)}\n{m.group(1)}{line}", text,
                          flags=re.M)

        # dotted paths in text: ssgp_ppl.data.datasets.check_finite
        def dotted(m):
            h, new = new_home.get(m.group(1), (src_mod, m.group(1)))
            return f"{h}.{new}"
        return re.sub(rf"(?<![\w.]){re.escape(src_mod)}\.(\w+)", dotted, text)

    # ----------------------------------------------------------------------------------------
    def rewrap(self) -> None:
        """Docstring and comment lines the longer paths pushed past the line length: the words
        beyond it go to the start of the paragraph's next line (and so on), or to a new line."""
        for rel in sorted(self.touched):
            if not rel.endswith(".py"):
                continue
            lines = self.read(rel).split("\n")
            prose = _prose_lines("\n".join(lines))
            i, changed = 0, False
            while i < len(lines):
                line = lines[i]
                if len(line) <= LINE_LENGTH:
                    i += 1
                    continue
                kind = prose.get(i + 1)
                if kind is None:
                    if not re.match(r"\s*(from|import) ", line):  # ruff --select I wraps those
                        self.notes.append(f"{rel}:{i + 1} is longer than {LINE_LENGTH}: "
                                          "shorten it")
                    i += 1
                    continue
                indent = re.match(r"[ \t]*" + ("# ?" if kind == "comment" else ""), line).group(0)
                cut = line.rfind(" ", 0, LINE_LENGTH + 1)
                if cut <= len(indent):
                    i += 1
                    continue
                head, rest = line[:cut].rstrip(), line[cut + 1:]
                nxt = lines[i + 1] if i + 1 < len(lines) else ""
                cont = (nxt.strip() and prose.get(i + 2) == kind and nxt.startswith(indent)
                        and not nxt.strip().startswith(('"""', "'''", "* ", "- ", ".."))
                        and not (kind == "comment" and not nxt[len(indent):].strip()))
                lines[i] = head
                if cont:
                    lines[i + 1] = indent + rest + " " + nxt[len(indent):].lstrip()
                else:
                    lines.insert(i + 1, indent + rest)
                    prose = {k + (k > i + 1): v for k, v in prose.items()}
                    prose[i + 2] = kind
                changed = True
                i += 1
            if changed:
                self.write(rel, "\n".join(lines))

    def ruff(self) -> None:
        ruff = os.environ.get("RUFF") or str(Path(sys.executable).with_name("ruff"))
        py = sorted(r for r in self.touched | set(self.file_map.values()) if r.endswith(".py"))
        split_py = sorted(r for r in getattr(self, "split_touched", ()) if r.endswith(".py"))
        for select, files in (("F401", split_py), ("I", py)):
            if not files:
                continue
            r = subprocess.run([ruff, "check", "--fix", "--select", select, "--quiet", *files],
                               cwd=self.root, capture_output=True, text=True)
            if r.returncode not in (0, 1):
                sys.exit(f"relayout: ruff failed: {r.stderr}")
            if r.stdout.strip():
                self.notes.append(f"ruff --select {select} left:\n{r.stdout.strip()}")

    def leftovers(self) -> None:
        """Old module paths and repository paths still present in rewritten files."""
        old_names = [o.split(".", 1)[1] for o in self.module_map
                     if o.split(".")[1] not in PACKAGES]
        pat = re.compile(r"(?<![\w.])ssgp_ppl\.(" + "|".join(old_names) + r")(?![\w])"
                         r"|from ssgp_ppl import [^\n]*\b(" + "|".join(old_names) + r")\b"
                         r"|ssgp_ppl/(models|" + "|".join(old_names) + r")\b")
        for rel in self.tracked():
            if NOT_REWRITTEN.match(rel) or not rel.endswith(REWRITE_SUFFIXES) or \
                    rel == "ssgp_ppl/moved.py" or not (self.root / rel).is_file():
                continue
            text = self.read(rel)
            for p in PROTECT:
                text = p.sub(lambda m: re.sub(r"[^\n]", "_", m.group(0)), text)
            for i, line in enumerate(text.splitlines(), 1):
                if pat.search(line):
                    self.notes.append(f"left as it was: {rel}:{i}: {line.strip()[:120]}")


class _Match:
    """A stand-in for a match object: ``group(0)`` is the given text."""

    def __init__(self, text: str):
        self.text = text

    def group(self, i: int) -> str:
        return self.text


LINE_LENGTH = 110  # pyproject.toml's [tool.ruff] line-length


def _prose_lines(text: str) -> dict[int, str]:
    """line number -> "docstring" for the lines of a docstring (the closing quotes' line
    included), "comment" for a line that is only a comment."""
    out = {}
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) \
                and node.body and isinstance(node.body[0], ast.Expr) \
                and isinstance(node.body[0].value, ast.Constant) \
                and isinstance(node.body[0].value.value, str):
            doc = node.body[0]
            out.update({n: "docstring" for n in range(doc.lineno, doc.end_lineno + 1)})
    for n, line in enumerate(text.split("\n"), 1):
        if line.lstrip().startswith("#") and n not in out:
            out[n] = "comment"
    return out


def _banner(line: str) -> bool:
    return bool(re.match(r"#\s*-{10,}", line))


def _wrap(text: str, first: int, width: int = 99, indent: str = "") -> str:
    """``text`` in lines of at most ``width`` characters, the first ``first`` shorter; the
    continuation lines start with ``indent``."""
    out, line = [], ""
    for word in text.split():
        room = width - (first if not out else len(indent))
        if line and len(line) + len(word) + 1 > room:
            out.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return ("\n" + indent).join(out + [line])


def _join_segments(lines: list[str], stmts) -> str:
    """The statements' source in order: two blank lines around a function or class, the
    original spacing between neighbouring assignments."""
    out, prev = [], None
    for names, first, last, node in stmts:
        seg = "".join(lines[first - 1:last])
        if prev is not None:
            simple = not isinstance(node, ast.FunctionDef | ast.ClassDef) and \
                not isinstance(prev[3], ast.FunctionDef | ast.ClassDef)
            gap = lines[prev[2]:first - 1]  # blank lines only where nothing stood between
            if simple and all(not g.strip() for g in gap) and len(gap) <= 1:
                out.append("".join(gap))
            else:
                out.append("\n" if simple else "\n\n")
        else:
            out.append("\n\n" if isinstance(node, ast.FunctionDef | ast.ClassDef) else "\n")
        out.append(seg)
        prev = (names, first, last, node)
    return "".join(out)


def _drop_empty_banners(text: str) -> str:
    """Section banners (``# ---`` / ``# Title`` / ``# ---``) with nothing left under them."""
    pat = re.compile(r"^# -{10,}\n# [^\n]*\n# -{10,}\n", re.M)
    spans = [m.span() for m in pat.finditer(text)]
    out, pos = [], 0
    for i, (a, b) in enumerate(spans):
        nxt = spans[i + 1][0] if i + 1 < len(spans) else len(text)
        section = text[b:nxt]
        out.append(text[pos:a])
        if section.strip():
            out.append(text[a:b])
        pos = b
    out.append(text[pos:])
    return "".join(out)


def _trim_all(text: str, moved: set[str]) -> str:
    """``__all__`` without the moved names."""
    m = re.search(r"^__all__ = \[(.*?)\]", text, re.M | re.S)
    if not m:
        return text
    names = [n for n in re.findall(r"\"(\w+)\"", m.group(1)) if n not in moved]
    if "\n" in m.group(1):
        new = "__all__ = [\n" + "".join(f'    "{n}",\n' for n in names) + "]"
    else:
        new = "__all__ = [" + ", ".join(f'"{n}"' for n in names) + "]"
    return text[:m.start()] + new + text[m.end():]


if __name__ == "__main__":
    Relayout(Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()).run()
