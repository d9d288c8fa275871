"""The package's shape: every module in its role's package or among the top-level ones, the role
packages' own modules empty, the data package independent of the model; only the method registry
compares method names, only the densities module knows spectral densities by name or class, guide
abilities are methods (no getattr/hasattr lookups), no module uses another's private names, and no
module imports another that imports it back."""

import ast
import re
from pathlib import Path

import pytest

from ssgp_ppl.inference import methods
from ssgp_ppl.model import densities, guides, likelihoods

PACKAGE = Path(__file__).resolve().parent.parent / "ssgp_ppl"
ABILITIES = {"nuisance_conditional", "conditional_and_marginal", "own_objective", "elbo",
             "components", "gaussian_nuisance"}
# the layout (docs/development/layout.md): a package per role, and at the top what a user calls
# and what every role shares
ROLES = ("model", "inference", "diagnostics", "data", "runtime")
TOP = {"__init__", "api", "cli", "entry", "errors", "estimator", "moved", "pipeline", "plugins",
       "posterior", "report", "settings"}


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        yield name, path, ast.parse(path.read_text(), filename=str(path))


def _offenders(check, owner: str | None = None) -> dict:
    """module -> what ``check(tree, source)`` finds there, over the package's modules but the
    ``owner`` module (or package, by prefix) that may do it."""
    out = {}
    for name, path, tree in _modules():
        if owner is not None and (name == owner or name.startswith(owner + ".")):
            continue
        hits = check(tree, path.read_text())
        if hits:
            out[name] = hits
    return out

def _method_name_comparisons(tree: ast.AST, source: str) -> list[str]:
    """Comparisons of an expression that mentions a method with a registered method's name."""
    names = set(methods.REGISTRY)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        consts = []
        for side in [node.left, *node.comparators]:
            elts = side.elts if isinstance(side, ast.Tuple | ast.List | ast.Set) else [side]
            consts += [e.value for e in elts if isinstance(e, ast.Constant)]
        text = ast.get_source_segment(source, node) or ""
        if names & set(consts) and "method" in text:
            found.append(f"line {node.lineno}: {text}")
    return found


def test_only_the_registry_compares_method_names():
    offenders = _offenders(_method_name_comparisons, owner="ssgp_ppl.inference.methods")
    assert not offenders, offenders


def test_the_check_finds_a_method_name_comparison():
    src = 'def f(entry, method):\n    return method == "nuts" or "svi" in entry.methods\n'
    assert len(_method_name_comparisons(ast.parse(src), src)) == 2


DENSITY_CLASSES = {c.__name__ for c in vars(densities).values() if isinstance(c, type)
                   and issubclass(c, densities.SpectralDensity) and c is not densities.SpectralDensity}


def _density_switches(tree: ast.AST, source: str) -> list[str]:
    """Comparisons of an expression that mentions a density with a string (a density's name),
    tables keyed by density names ("se" alone is also a standard error), and isinstance checks
    against a density class: what a declared ability replaces."""
    names = set(densities.DENSITIES)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare | ast.Call | ast.Dict):  # the nodes looked at
            continue
        text = ast.get_source_segment(source, node) or ""  # (it re-reads the source: only here)
        if isinstance(node, ast.Compare):
            consts = []
            for side in [node.left, *node.comparators]:
                elts = side.elts if isinstance(side, ast.Tuple | ast.List | ast.Set) else [side]
                consts += [e.value for e in elts if isinstance(e, ast.Constant)
                           and isinstance(e.value, str)]
            if names & set(consts) or (consts and "density" in text and not any(
                    c.startswith("log_") or c.endswith("log_density") for c in consts)):
                found.append(f"line {node.lineno}: {text}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id == "isinstance" and len(node.args) == 2
              and DENSITY_CLASSES & {n.id if isinstance(n, ast.Name) else getattr(n, "attr", "")
                                     for n in ast.walk(node.args[1])}):
            found.append(f"line {node.lineno}: {text}")
        elif isinstance(node, ast.Dict) and len(names & {k.value for k in node.keys
                                                         if isinstance(k, ast.Constant)}) > 1:
            found.append(f"line {node.lineno}: {text[:80]}")
    return found


def test_only_the_densities_module_switches_on_a_density():
    offenders = _offenders(_density_switches, owner="ssgp_ppl.model.densities")
    assert not offenders, offenders


def test_the_check_finds_a_density_switch():
    src = ('def f(spec, mc, d):\n'
           '    a = spec.density == "se" or mc["spectral_density"] != "cauchy"\n'
           '    b = spec.density.name in ("matern32", "matern52")\n'
           '    c = isinstance(spec.density, densities.Matern)\n'
           '    nu = {"matern12": 0.5, "se": None}[spec.density.name]\n'
           '    ok = isinstance(spec.density, densities.SpectralDensity)\n'
           '    return kind == "log_density" or spec.density.gaussian\n')
    assert len(_density_switches(ast.parse(src), src)) == 5


# an expression that reads a likelihood's name: lik.name, mc["likelihood"], spec.likelihood
_LIK_NAME = re.compile(r"\blik\w*\.name\b|\[\s*[\"']likelihood[\"']\s*\]|\.likelihood\b")


def _likelihood_name_switches(tree: ast.AST, source: str) -> list[str]:
    """Comparisons and ``match`` statements on a likelihood's name, comparisons of a likelihood
    expression with a registered likelihood's name or built-in object (``lik is PROBIT``), and
    tables keyed by likelihood names."""
    names = set(likelihoods.LIKELIHOODS)
    objects = {n.upper() for n in names}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare | ast.Match | ast.Dict):  # the nodes looked at
            continue
        text = ast.get_source_segment(source, node) or ""  # (it re-reads the source: only here)
        if isinstance(node, ast.Compare):
            consts = []
            for side in [node.left, *node.comparators]:
                elts = side.elts if isinstance(side, ast.Tuple | ast.List | ast.Set) else [side]
                consts += [e.value for e in elts if isinstance(e, ast.Constant)]
                consts += [e.id if isinstance(e, ast.Name) else e.attr for e in elts
                           if isinstance(e, ast.Name | ast.Attribute)]
            if _LIK_NAME.search(text) or (names & set(consts) and "lik" in text) or \
                    objects & set(consts):
                found.append(f"line {node.lineno}: {text}")
        elif isinstance(node, ast.Match) and _LIK_NAME.search(
                ast.get_source_segment(source, node.subject) or ""):
            found.append(f"line {node.lineno}: match {ast.unparse(node.subject)}")
        elif isinstance(node, ast.Dict) and len(names & {k.value for k in node.keys
                                                         if isinstance(k, ast.Constant)}) > 1:
            found.append(f"line {node.lineno}: {text[:80]}")
    return found


def _likelihood_names_spelled(tree: ast.AST) -> list[str]:
    """String constants that are a built-in likelihood's name (other than the catalog's default,
    ``gaussian``, and the names other components share: the guides' ψ ``student_t``)."""
    spelled = {"probit", "logit", "poisson", "student_t"} - set(guides.PSI)
    return [f"line {n.lineno}: {n.value!r}" for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and n.value in spelled]


def test_only_the_likelihood_module_switches_on_likelihood_names():
    offenders = _offenders(lambda tree, src: _likelihood_name_switches(tree, src)
                           + _likelihood_names_spelled(tree), owner="ssgp_ppl.model.likelihoods")
    assert not offenders, offenders


def test_the_check_finds_likelihood_name_switches():
    src = ('def f(lik, mc, spec, entry):\n'
           '    a = lik.name == "probit"\n'
           '    b = mc["likelihood"] not in ("gaussian", "probit")\n'
           '    c = spec.likelihood != "gaussian"\n'
           '    d = {"probit": 1, "poisson": 2}\n'
           '    e = entry.lik in (PROBIT, POISSON) or lik == "gaussian"\n'
           '    match entry.lik.name:\n'
           '        case "logit":\n'
           '            pass\n')
    tree = ast.parse(src)
    assert len(_likelihood_name_switches(tree, src)) == 7
    assert sorted(h.split(": ")[1] for h in _likelihood_names_spelled(tree)) == [
        "'logit'", "'poisson'", "'probit'", "'probit'", "'probit'"]


# NamedTuple's own methods: public API despite the underscore
NAMEDTUPLE_METHODS = {"_replace", "_asdict", "_fields", "_field_defaults", "_make"}


def _private_uses(tree: ast.AST, source: str) -> list[str]:
    """Uses of another ssgp_ppl module's private names: ``from ssgp_ppl.x import _name``, and
    ``name._attr`` / ``name.sub._attr`` where ``name`` was imported from (or is) an ssgp_ppl
    module (``SVI._helper``, ``inference._loop``). A module's own names, and attributes of
    objects it built, are its business."""
    bound, found = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ssgp_ppl"):
            for a in node.names:
                if a.name.startswith("_") and not a.name.startswith("__"):
                    found.append(f"line {node.lineno}: from {node.module} import {a.name}")
                bound.add(a.asname or a.name)
        elif isinstance(node, ast.Import):
            bound |= {a.asname or a.name.split(".")[0] for a in node.names
                      if a.name.startswith("ssgp_ppl")}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                and not node.attr.startswith("__") and node.attr not in NAMEDTUPLE_METHODS):
            continue
        base = node.value
        while isinstance(base, ast.Attribute):
            base = base.value
        if isinstance(base, ast.Name) and base.id in bound:
            found.append(f"line {node.lineno}: {ast.get_source_segment(source, node)}")
    return found


def test_no_module_uses_another_modules_private_names():
    """What one module needs of another has a public, documented name there."""
    offenders = _offenders(_private_uses)
    assert not offenders, offenders


def test_the_check_finds_private_names_of_other_modules():
    src = ('import ssgp_ppl.inference.smc\n'
           'from ssgp_ppl import inference\n'
           'from ssgp_ppl.inference.runners import _Convergence, run_svi\n'
           'from ssgp_ppl.inference.methods.svi import SVI\n'
           'def f(ds, own):\n'
           '    a = SVI._setup(1) + inference._drive + ssgp_ppl.inference.smc._label\n'
           '    return ds._replace(a=a), own._private, run_svi.__doc__\n')
    hits = _private_uses(ast.parse(src), src)
    assert sorted(h.split(": ", 1)[1] for h in hits) == [
        "SVI._setup", "from ssgp_ppl.inference.runners import _Convergence", "inference._drive",
        "ssgp_ppl.inference.smc._label"], hits


def test_guide_abilities_are_not_looked_up_with_getattr():
    offenders = []
    for name, _, tree in _modules():
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2
                    and isinstance(node.args[1], ast.Constant) and node.args[1].value in ABILITIES):
                offenders.append(f"{name}:{node.lineno}")
    assert not offenders, offenders


def _imports(name: str, tree: ast.AST, modules) -> set[str]:
    """Every ssgp_ppl module ``name`` imports by name, at module level or inside functions
    (TYPE_CHECKING blocks excluded: they never run); ``from pkg import sub`` is an import of the
    submodule ``pkg.sub``."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for b in node.body for n in ast.walk(b)}
    out = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("ssgp_ppl")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ssgp_ppl"):
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                out.add(sub if sub in modules else node.module)
    # importing a.b.c first runs the package a.b's __init__ (unless name is inside a.b already)
    parents = {".".join(m.split(".")[:i]) for m in out for i in range(2, m.count(".") + 1)}
    return out | {p for p in parents if p in modules and not name.startswith(p + ".")}


def test_every_module_has_its_place_in_the_layout():
    """A new module goes into its role's package; the top level keeps the package's front."""
    top = {p.stem for p in PACKAGE.glob("*.py")}
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert top == TOP, sorted(top ^ TOP)
    assert packages == set(ROLES), sorted(packages ^ set(ROLES))


def test_the_role_packages_import_nothing():
    """``import ssgp_ppl.model.x`` runs ``ssgp_ppl/model/__init__.py`` first: each role package's
    own module is a docstring and an empty ``__all__``, so importing one module never imports
    its siblings (no cost, no loop)."""
    for role in ROLES:
        tree = ast.parse((PACKAGE / role / "__init__.py").read_text())
        assert [type(n).__name__ for n in tree.body] == ["Expr", "AnnAssign"], role
        assert not [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)], role


def test_the_data_package_does_not_know_the_model():
    """Reading, checking and splitting data needs no model, inference or diagnostics: ``data/``
    imports from the package only itself, the errors and the atomic writes."""
    allowed = {"ssgp_ppl.errors", "ssgp_ppl.runtime", "ssgp_ppl.runtime.io"}
    mods = {name: tree for name, _, tree in _modules()}
    offenders = {name: sorted(m for m in _imports(name, tree, mods)
                              if m not in allowed and not m.startswith("ssgp_ppl.data"))
                 for name, tree in mods.items() if name.startswith("ssgp_ppl.data")}
    assert not any(offenders.values()), offenders


def test_no_import_loops():
    mods = {name: tree for name, _, tree in _modules()}
    graph = {name: {m for m in _imports(name, tree, mods) if m in mods and m != name}
             for name, tree in mods.items()}
    cycles = []

    def visit(node, stack, seen):
        for nxt in graph[node]:
            if nxt in stack:
                cycles.append(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in seen:
                seen.add(nxt)
                visit(nxt, stack + [nxt], seen)

    for start in graph:
        visit(start, [start], {start})
    assert not cycles, sorted(set(cycles))[:10]


def test_the_loop_check_sees_a_package_init():
    """``from ssgp_ppl.inference.methods import common`` imports ``ssgp_ppl.inference.methods`` (its
    ``__init__``)."""
    mods = {"ssgp_ppl.inference.methods", "ssgp_ppl.inference.methods.common", "ssgp_ppl.x"}
    tree = ast.parse("from ssgp_ppl.inference.methods import common\n")
    assert _imports("ssgp_ppl.x", tree, mods) == {"ssgp_ppl.inference.methods",
                                                  "ssgp_ppl.inference.methods.common"}
    assert _imports("ssgp_ppl.inference.methods.svi", tree, mods) == {"ssgp_ppl.inference.methods.common"}


MODULES = sorted(name for name, _, _ in _modules())


@pytest.mark.parametrize("name", MODULES)
def test_every_module_imports_first_in_a_fresh_interpreter(name):
    """``import <module>`` as a program's first import of the package: no circular ImportError."""
    import os
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True, text=True,
                       timeout=300, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert r.returncode == 0, r.stderr[-2000:]


@pytest.mark.parametrize("name", sorted(methods.REGISTRY))
def test_every_method_has_one_shape(name):
    m = methods.REGISTRY[name]
    assert m.name == name
    assert isinstance(m, methods.Method)
    schema = m.Settings.schema()
    assert schema and all(f.doc for f in schema.values())
    # its table is what the catalog validates (svi's also holds each guide's table)
    from ssgp_ppl.entry import SCHEMA

    assert SCHEMA["inference"][name] == m.table_schema()
    assert {k: f for k, f in SCHEMA["inference"][name].items() if not isinstance(f, dict)} == schema


def test_importing_the_pipeline_first_leaves_numpyro_whole():
    """arviz_base loads numpyro lazily; imported before numpyro it leaves numpyro.distributions
    without its submodule attributes (numpyro.factor then fails): the package imports numpyro
    first."""
    import subprocess
    import sys

    code = ("import ssgp_ppl.pipeline, numpyro.distributions as nd; "
            "assert hasattr(nd, 'distribution')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**__import__("os").environ, "JAX_PLATFORMS": "cpu"})
    assert r.returncode == 0, r.stderr[-2000:]


def test_every_public_module_declares_what_it_exports():
    """Each module a user may import (its name has no leading underscore) lists its public names
    in ``__all__``, and each of those names exists."""
    import importlib

    missing, unknown = [], {}
    for name, _, tree in _modules():
        if any(part.startswith("_") for part in name.split(".")[1:]):
            continue  # a private module
        declared = any(isinstance(node, ast.Assign | ast.AnnAssign) and "__all__" in
                       [t.id for t in (node.targets if isinstance(node, ast.Assign)
                                       else [node.target]) if isinstance(t, ast.Name)]
                       for node in tree.body)
        if not declared:
            missing.append(name)
            continue
        module = importlib.import_module(name)
        absent = [n for n in module.__all__ if not hasattr(module, n)]
        if absent:
            unknown[name] = absent
    assert not missing, missing
    assert not unknown, unknown
    assert {"fit", "compare", "load", "load_comparison", "catalog"} <= set(
        importlib.import_module("ssgp_ppl").__all__)


def _guide_name_tests(tree: ast.AST, source: str) -> list[str]:
    """Comparisons with a registered guide's name, and ``startswith`` tests of a name's prefix."""
    from ssgp_ppl.model.guides import GUIDES

    names = set(GUIDES)
    found = []
    for node in ast.walk(tree):
        consts = []
        if isinstance(node, ast.Compare):
            for side in [node.left, *node.comparators]:
                elts = side.elts if isinstance(side, ast.Tuple | ast.List | ast.Set) else [side]
                consts += [e.value for e in elts if isinstance(e, ast.Constant)]
            hit = names & set(consts)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "startswith" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            prefix = node.args[0].value
            hit = {n for n in names if n.startswith(prefix) and n != prefix and prefix.endswith("_")}
        else:
            continue
        if hit:
            found.append(f"line {node.lineno}: {ast.get_source_segment(source, node)}")
    return found


def test_no_module_tests_a_guide_by_its_name():
    """A guide's abilities are its class attributes and methods (ssgp_ppl.model.guides); no module
    decides what a guide can do from its name."""
    offenders = _offenders(_guide_name_tests)
    assert not offenders, offenders


def test_the_check_finds_a_guide_name_test():
    src = 'def f(s):\n    return s.guide == "mixture" or s.guide.startswith("auto_")\n'
    assert len(_guide_name_tests(ast.parse(src), src)) == 2
