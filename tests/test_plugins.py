"""The component registries: user registration, and discovery of installed plug-ins through
entry points (a test distribution on ``sys.path``, found by ``importlib.metadata``)."""

import math
import sys
import textwrap

import pytest

from ssgp_ppl.errors import SSGPError
from ssgp_ppl.plugins import Registry


class Thing:
    def __init__(self, name):
        self.name = name


def _distribution(tmp_path, group: str, lines: str, module: str):
    """A distribution 'plugdist' with entry points in ``group`` and a module ``plugmod``."""
    info = tmp_path / "plugdist-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: plugdist\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{group}]\n{lines}\n")
    (tmp_path / "plugmod.py").write_text(textwrap.dedent(module))


@pytest.fixture
def on_path(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("plugmod", None)


def test_register_get_and_the_errors_name_the_problem():
    reg = Registry("guide", Thing, (Thing("a"),))
    b = reg.register(Thing("b"))
    assert list(reg) == ["a", "b"] and reg.get("b") is b and reg.register(b) is b
    with pytest.raises(SSGPError, match="a guide named 'b' is registered already"):
        reg.register(Thing("b"))
    with pytest.raises(SSGPError, match=r"unknown guide 'c'; known: a, b"):
        reg.get("c")
    with pytest.raises(SSGPError, match=r"register_guide\(\) takes a Thing instance, got int"):
        reg.register(3)
    with pytest.raises(SSGPError, match="must be an identifier"):
        reg.register(Thing("two words"))


def test_an_installed_plug_in_is_found_through_its_entry_point(on_path):
    _distribution(on_path, "ssgp_ppl.densities", "cauchy = plugmod:CAUCHY", """
        class Density:
            name = "cauchy"
        CAUCHY = Density()
    """)
    reg = Registry("spectral density", object, (Thing("se"),))
    assert list(reg) == ["se", "cauchy"]
    import plugmod

    assert reg.get("cauchy") is plugmod.CAUCHY


def test_a_broken_or_misnamed_plug_in_is_one_clear_error(on_path):
    _distribution(on_path, "ssgp_ppl.likelihoods", "logit = plugmod:MISSING", "X = 1\n")
    with pytest.raises(SSGPError, match=r"likelihood plug-in 'logit' \(plugmod:MISSING.*failed"):
        list(Registry("likelihood", object))


def test_an_entry_point_must_agree_with_the_component_name(on_path):
    _distribution(on_path, "ssgp_ppl.guides", "mine = plugmod:G", """
        class G:
            name = "other"
    """)
    with pytest.raises(SSGPError, match="names an object whose name is 'other'"):
        list(Registry("guide", object))


def test_an_installed_spectral_density_joins_the_catalog_s_choices(on_path, monkeypatch):
    """A SpectralDensity subclass named by an entry point in ssgp_ppl.densities is instantiated,
    registered after the built-in ones, and accepted by the catalog's model.spectral_density."""
    from ssgp_ppl import entry
    from ssgp_ppl.model import densities

    _distribution(on_path, "ssgp_ppl.densities", "laplace = plugmod:Laplace", """
        import numpyro.distributions as dist
        from ssgp_ppl.model.densities import SpectralDensity

        class Laplace(SpectralDensity):
            name = "laplace"
            doc = "product of Laplace densities"

            def frequency_distribution(self, lengthscales, d):
                return dist.Laplace(0.0, self.frequency_scale(lengthscales, d)).to_event(1)
    """)
    reg = Registry("spectral density", densities.SpectralDensity, tuple(densities.DENSITIES.values()))
    assert list(reg) == [*densities.DENSITIES, "laplace"]
    monkeypatch.setattr(densities, "DENSITIES", reg)
    assert entry.schema()["model"]["spectral_density"].choices[-1] == "laplace"
    assert float(reg["laplace"].log_density([0.0], 1.0)) == pytest.approx(
        math.log(math.pi), rel=1e-6)  # Laplace(0, b = 1/2π) at 0: 1/2b = π
def test_an_installed_guide_class_is_registered_as_the_class(on_path):
    """The guide registry holds classes (instances of GuideType): an entry point naming a guide
    class registers that class, not an instance of it."""
    from ssgp_ppl.model.guides import AutoMVNGuide, GuideType

    _distribution(on_path, "ssgp_ppl.guides", "flat = plugmod:FlatGuide", """
        from ssgp_ppl.model.guides import Guide

        class FlatGuide(Guide):
            name = "flat"
    """)
    reg = Registry("guide", GuideType, (AutoMVNGuide,))
    assert list(reg) == ["auto_mvn", "flat"]
    import plugmod

    assert reg.get("flat") is plugmod.FlatGuide
