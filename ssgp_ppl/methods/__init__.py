"""The inference methods, one module each, and the registry every other module reads.

``REGISTRY`` maps a catalog name to its :class:`~ssgp_ppl.methods.base.Method`. The CLI's
``--method`` choices, the catalog's ``inference.methods`` validation and its ``[inference.*]``
tables, the report's reference and labels and the β selection read it; this package is the only
place that compares method names. Adding a method = one module + one line below + its TOML table
(docs/adding-a-method.md).
"""

from __future__ import annotations

from ssgp_ppl.errors import SSGPError
from ssgp_ppl.methods.base import Method
from ssgp_ppl.methods.local import LOCAL
from ssgp_ppl.methods.ml import ML
from ssgp_ppl.methods.ncvmp import NCVMP
from ssgp_ppl.methods.nuts import NUTS
from ssgp_ppl.methods.smc import SMC
from ssgp_ppl.methods.svi import SVI

REGISTRY: dict[str, Method] = {m.name: m for m in (ML, SVI, NUTS, SMC, NCVMP, LOCAL)}


def register(method: Method) -> Method:
    """Add ``method`` to the registry (a method defined outside this package: the catalog then
    accepts its name in ``inference.methods`` and validates its ``[inference.<name>]`` table)."""
    if not isinstance(method, Method):
        raise SSGPError(f"register() takes a Method instance, got {type(method).__name__}")
    if method.name in REGISTRY and REGISTRY[method.name] is not method:
        raise SSGPError(f"a method named {method.name!r} is registered already")
    REGISTRY[method.name] = method
    return method


def get(name: str) -> Method:
    """The method registered as ``name`` (one SSGPError listing the known ones otherwise)."""
    try:
        return REGISTRY[name]
    except (KeyError, TypeError):  # TypeError: an unhashable name (a list)
        raise SSGPError(f"unknown method {name!r}; known: {', '.join(REGISTRY)}") from None


def reference() -> Method:
    """The MCMC reference `compare` adds to an entry's methods."""
    return next(m for m in REGISTRY.values() if m.reference)


__all__ = ["REGISTRY", "Method", "get", "reference", "register"]
