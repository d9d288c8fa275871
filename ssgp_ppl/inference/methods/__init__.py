"""The inference methods, one module each, and the registry every other module reads.

``REGISTRY`` maps a catalog name to its :class:`~ssgp_ppl.inference.methods.base.Method`. The CLI's
``--method`` choices, the catalog's ``inference.methods`` validation and its ``[inference.*]``
tables, the report's reference and labels and the β selection read it; this package is the only
place that compares method names. Adding a method = one module + one line below + its TOML table
(docs/adding-a-method.md).
"""

from __future__ import annotations

from ssgp_ppl.inference.methods.base import Method
from ssgp_ppl.inference.methods.local import LOCAL
from ssgp_ppl.inference.methods.ml import ML
from ssgp_ppl.inference.methods.ncvmp import NCVMP
from ssgp_ppl.inference.methods.nuts import NUTS
from ssgp_ppl.inference.methods.smc import SMC
from ssgp_ppl.inference.methods.svi import SVI
from ssgp_ppl.plugins import Registry

REGISTRY: Registry[Method] = Registry("method", Method, (ML, SVI, NUTS, SMC, NCVMP, LOCAL))


def register(method: Method) -> Method:
    """Add ``method`` to the registry (a method defined outside this package: the catalog then
    accepts its name in ``inference.methods`` and validates its ``[inference.<name>]`` table).
    An installed package can instead declare it under the entry-point group ``ssgp_ppl.methods``
    (:mod:`ssgp_ppl.plugins`)."""
    return REGISTRY.register(method)


def get(name: str) -> Method:
    """The method registered as ``name`` (one SSGPError listing the known ones otherwise)."""
    return REGISTRY.get(name)


def reference() -> Method:
    """The MCMC reference `compare` adds to an entry's methods."""
    return next(m for m in REGISTRY.values() if m.reference)


__all__ = ["REGISTRY", "Method", "get", "reference", "register"]
