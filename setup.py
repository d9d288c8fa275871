"""The one build step pyproject.toml cannot declare: the built-in catalog, a top-level folder of
the repository (``models/*.toml``), goes into the wheel as ``ssgp_ppl/catalog/``.

An editable install (``pip install -e .``) copies nothing: ``ssgp_ppl.entry.BUILTIN_CATALOG``
reads the repository's ``models/`` where a package has no ``catalog/`` folder. The source
distribution carries ``models/`` (MANIFEST.in), so a wheel built from it has the catalog too.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

CATALOG = Path(__file__).resolve().parent / "models"
TARGET = ("ssgp_ppl", "catalog")  # inside the package, where BUILTIN_CATALOG looks first


class BuildPy(build_py):
    """build_py, then the catalog's files into the built package."""

    def _catalog(self) -> list[tuple[Path, Path]]:
        files = sorted(CATALOG.glob("*.toml"))
        if not files:
            raise SystemExit(f"setup.py: no catalog entries in {CATALOG} (models/*.toml): a "
                             "wheel without its built-in catalog would install")
        return [(f, Path(self.build_lib, *TARGET, f.name)) for f in files]

    def run(self) -> None:
        if not self.editable_mode:  # only this tree's files: none an earlier build left there
            shutil.rmtree(Path(self.build_lib, "ssgp_ppl"), ignore_errors=True)
        super().run()
        if self.editable_mode:  # the installed package reads models/ in place
            return
        for src, dst in self._catalog():
            self.mkpath(str(dst.parent))
            self.copy_file(str(src), str(dst))

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        out = super().get_outputs(include_bytecode)
        return out if self.editable_mode else out + [str(d) for _, d in self._catalog()]


setup(cmdclass={"build_py": BuildPy})
