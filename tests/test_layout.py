"""The flat layout's module paths and files: an old path (``ssgp_ppl.densities``,
``ssgp_ppl.methods.base``) imports the module at its new path itself, with a DeprecationWarning
naming it; a plug-in written against the old paths registers through its entry point; a posterior
saved before the layout changed, and every stored gold reference, loads and predicts."""

import importlib
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import ssgp_ppl
from ssgp_ppl import moved

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("old", sorted(moved.MOVED))
def test_an_old_module_path_is_the_new_module(old, monkeypatch):
    new = moved.MOVED[old]
    monkeypatch.delitem(sys.modules, old, raising=False)
    with pytest.warns(DeprecationWarning, match=f"{old} is now {new}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)


def test_old_submodule_paths_and_from_imports_resolve_to_the_same_objects(monkeypatch):
    for old in ("ssgp_ppl.methods", "ssgp_ppl.methods.base", "ssgp_ppl.densities"):
        monkeypatch.delitem(sys.modules, old, raising=False)
    for attr in ("methods", "densities"):  # what an earlier import of the old path set
        monkeypatch.delattr(ssgp_ppl, attr, raising=False)
    with pytest.warns(DeprecationWarning):
        from ssgp_ppl.methods.base import Method
    with pytest.warns(DeprecationWarning):
        from ssgp_ppl import densities
    from ssgp_ppl.inference.methods.base import Method as new_method
    from ssgp_ppl.model import densities as new_densities

    assert Method is new_method and densities is new_densities
    assert moved.new_name("ssgp_ppl.methods.svi") == "ssgp_ppl.inference.methods.svi"
    assert moved.new_name("ssgp_ppl.model.densities") is None  # a new path is not moved


def test_a_plug_in_written_against_the_old_paths_registers(tmp_path, monkeypatch):
    """An installed density whose module imports ``ssgp_ppl.densities`` (the entry-point group
    keeps its name) joins the registry."""
    from ssgp_ppl.model.densities import SpectralDensity
    from ssgp_ppl.plugins import Registry

    info = tmp_path / "oldplug-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: oldplug\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[ssgp_ppl.densities]\nflat = oldplugmod:FLAT\n")
    (tmp_path / "oldplugmod.py").write_text(textwrap.dedent("""
        from ssgp_ppl.densities import SpectralDensity

        class Flat(SpectralDensity):
            name = "flat"
            doc = "a test density"

        FLAT = Flat.__new__(Flat)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "ssgp_ppl.densities", raising=False)
    monkeypatch.delitem(sys.modules, "oldplugmod", raising=False)
    reg = Registry("spectral density", SpectralDensity)
    with pytest.warns(DeprecationWarning, match="ssgp_ppl.densities is now"):
        names = list(reg)
    assert names == ["flat"] and isinstance(reg.get("flat"), SpectralDensity)


def test_files_saved_before_the_layout_changed_load_and_predict():
    """Saved posteriors store no module path: the archived ``ml`` posterior and the stored gold
    references load as they were written."""
    from ssgp_ppl.diagnostics import gold

    post = ssgp_ppl.load(ROOT / "tests" / "files" / "ssgp_fixed-autompg-posterior_ml.nc")
    assert post.method == "ml" and np.all(np.isfinite(post.predict(np.zeros((2, 6))).mean))
    refs = gold.stored()
    assert refs
    for ref in refs:
        stored = ref.posterior()
        d = stored.x_scaler.mean.shape[0]
        assert np.all(np.isfinite(stored.predict(np.zeros((2, d))).mean)), ref.path.name
