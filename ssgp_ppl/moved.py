"""The module paths of the flat layout (``ssgp_ppl.densities``,
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
    "ssgp_ppl.densities": "ssgp_ppl.model.densities",
    "ssgp_ppl.likelihoods": "ssgp_ppl.model.likelihoods",
    "ssgp_ppl.spectral": "ssgp_ppl.model.spectral",
    "ssgp_ppl.predictive": "ssgp_ppl.model.predictive",
    "ssgp_ppl.guides": "ssgp_ppl.model.guides",
    "ssgp_ppl.mixture": "ssgp_ppl.model.mixture",
    "ssgp_ppl.linalg": "ssgp_ppl.model.linalg",
    "ssgp_ppl.methods": "ssgp_ppl.inference.methods",
    "ssgp_ppl.smc": "ssgp_ppl.inference.smc",
    "ssgp_ppl.ncvmp": "ssgp_ppl.inference.ncvmp",
    "ssgp_ppl.objectives": "ssgp_ppl.inference.objectives",
    "ssgp_ppl.paths": "ssgp_ppl.inference.paths",
    "ssgp_ppl.stacking": "ssgp_ppl.inference.stacking",
    "ssgp_ppl.selection": "ssgp_ppl.inference.selection",
    "ssgp_ppl.neighbourhoods": "ssgp_ppl.inference.neighbourhoods",
    "ssgp_ppl.partitions": "ssgp_ppl.inference.partitions",
    "ssgp_ppl.fitinfo": "ssgp_ppl.inference.fitinfo",
    "ssgp_ppl.metrics": "ssgp_ppl.diagnostics.metrics",
    "ssgp_ppl.calibration": "ssgp_ppl.diagnostics.calibration",
    "ssgp_ppl.invariants": "ssgp_ppl.diagnostics.invariants",
    "ssgp_ppl.evidence": "ssgp_ppl.diagnostics.evidence",
    "ssgp_ppl.gold": "ssgp_ppl.diagnostics.gold",
    "ssgp_ppl.datatree": "ssgp_ppl.diagnostics.datatree",
    "ssgp_ppl.sbc": "ssgp_ppl.diagnostics.sbc",
    "ssgp_ppl.datasets": "ssgp_ppl.data.datasets",
    "ssgp_ppl.tables": "ssgp_ppl.data.tables",
    "ssgp_ppl.io": "ssgp_ppl.runtime.io",
    "ssgp_ppl.checkpoint": "ssgp_ppl.runtime.checkpoint",
    "ssgp_ppl.rundir": "ssgp_ppl.runtime.rundir",
    "ssgp_ppl.signals": "ssgp_ppl.runtime.signals",
    "ssgp_ppl.status": "ssgp_ppl.runtime.status",
    "ssgp_ppl.resources": "ssgp_ppl.runtime.resources",
    "ssgp_ppl.sharding": "ssgp_ppl.runtime.sharding",
    "ssgp_ppl.cluster": "ssgp_ppl.runtime.cluster",
}


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
