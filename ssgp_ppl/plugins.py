"""Registries of components, filled by the package, by user code and by installed plug-ins.

Each kind of component (inference methods, spectral densities, likelihoods, guides) has one
:class:`Registry`: a read-only-looking mapping name → component that the catalog, the CLI and the
docs read. Components arrive three ways:

* the package's own, registered when their module is imported;
* user code: ``ssgp_ppl.register_method(obj)`` (and its siblings) before loading a TOML entry;
* an installed distribution that declares an entry point in the registry's group, as
  pytest plug-ins do::

      [project.entry-points."ssgp_ppl.densities"]
      cauchy = "my_package.densities:CAUCHY"

  The entry point names the component object (an instance of the registry's base class); its
  name must be the component's ``name``. Entry points are loaded on the registry's first read, so
  an ``import ssgp_ppl`` never imports a plug-in it does not need for that first read.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from importlib.metadata import entry_points

from ssgp_ppl.errors import SSGPError

GROUPS = {
    "method": "ssgp_ppl.methods",
    "spectral density": "ssgp_ppl.densities",
    "likelihood": "ssgp_ppl.likelihoods",
    "guide": "ssgp_ppl.guides",
}


class Registry[T](MutableMapping):
    """name → component of one kind (see the module docstring)."""

    def __init__(self, kind: str, base: type, builtin: tuple = ()):
        self.kind = kind
        self.group = GROUPS[kind]
        self.base = base
        self._items: dict[str, T] = {}
        self._loaded = False
        for obj in builtin:
            self.register(obj)

    # the mapping protocol; reading loads the installed plug-ins once
    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        for ep in entry_points(group=self.group):
            try:
                obj = ep.load()
            except Exception as e:  # a broken plug-in: say which, do not hide the cause
                raise SSGPError(f"the {self.kind} plug-in {ep.name!r} ({ep.value}, entry point "
                                f"group {self.group!r}) failed to import: {e}") from e
            if isinstance(obj, type) and issubclass(obj, self.base):
                obj = obj()
            if getattr(obj, "name", None) != ep.name:
                raise SSGPError(f"the {self.kind} plug-in entry point {ep.name!r} ({ep.value}) "
                                f"names an object whose name is {getattr(obj, 'name', None)!r}; "
                                "they must agree")
            self.register(obj)

    def __getitem__(self, name: str) -> T:
        self._load()
        return self._items[name]

    def __iter__(self) -> Iterator[str]:
        self._load()
        return iter(self._items)

    def __len__(self) -> int:
        self._load()
        return len(self._items)

    def __setitem__(self, name: str, obj: T) -> None:
        if name != getattr(obj, "name", None):
            raise SSGPError(f"a {self.kind} is registered under its own name, not {name!r}")
        self.register(obj)

    def __delitem__(self, name: str) -> None:
        del self._items[name]

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self)})"

    def register(self, obj: T) -> T:
        """Add ``obj`` under ``obj.name``; registering the same object again is a no-op."""
        if not isinstance(obj, self.base):
            raise SSGPError(f"register_{self.kind.split()[-1]}() takes a {self.base.__name__} "
                            f"instance, got {type(obj).__name__}")
        name = obj.name
        if not isinstance(name, str) or not name.isidentifier():
            raise SSGPError(f"a {self.kind}'s name must be an identifier, got {name!r}")
        if name in self._items and self._items[name] is not obj:
            raise SSGPError(f"a {self.kind} named {name!r} is registered already")
        self._items[name] = obj
        return obj

    def get(self, name: str) -> T:  # type: ignore[override]
        """The component registered as ``name`` (one SSGPError listing the known ones otherwise)."""
        try:
            return self[name]
        except (KeyError, TypeError):  # TypeError: an unhashable name (a list)
            raise SSGPError(f"unknown {self.kind} {name!r}; known: {', '.join(self)}") from None


__all__ = ["GROUPS", "Registry"]
