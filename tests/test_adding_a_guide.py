"""The "Adding a guide" example of docs/guide/adding-a-model.md runs as written: the guide
registers from user code, a TOML entry names it and sets its one setting in its own table, the
catalog validates that table, and the entry fits on pendulum with the new guide."""

import re
from pathlib import Path

import numpy as np
import pytest

import ssgp_ppl
from ssgp_ppl.api import guides
from ssgp_ppl.entry import load_entry
from ssgp_ppl.errors import SSGPError
from ssgp_ppl.model.guides import GUIDES

DOC = Path(__file__).resolve().parent.parent / "docs" / "guide" / "adding-a-model.md"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.+?)\n```", DOC.read_text(), re.S)


@pytest.fixture(scope="module")
def registered():
    (code,) = [b for b in _blocks("python") if "register_guide(" in b]
    exec(compile(code, str(DOC), "exec"), {})
    yield GUIDES["isotropic"]
    del GUIDES["isotropic"]


@pytest.fixture
def entry_file(tmp_path):
    (text,) = [b for b in _blocks("toml") if 'guide = "isotropic"' in b]
    path = tmp_path / "ssgp_isotropic.toml"
    path.write_text(text)
    return path


def test_the_registered_guide_fits_the_entry_on_pendulum(registered, entry_file):
    entry = load_entry(entry_file)
    guide = entry.guide(entry.spec(9))
    assert type(guide) is registered and guide.settings.init_scale == 0.02  # from its table
    post = ssgp_ppl.fit(entry_file, data="pendulum", progress=False)
    assert post.info.steps == 500 and np.isfinite(post.losses).all()
    # the guide's own params: one scale for all of θ's coordinates (s is integrated out)
    assert set(post.params) >= {"frequencies_loc", "frequencies_scale"}
    assert np.shape(post.params["frequencies_scale"]) == () and "nuisance_loc" not in post.params
    assert post.metrics["nmse"] < 0.9  # better than predicting the training mean (NMSE ≈ 1)
    listed = {r["name"]: r for r in guides()}["isotropic"]
    assert listed["settings"]["init_scale"]["default"] == 0.05


def test_its_table_is_validated_with_its_settings(registered, entry_file):
    text = entry_file.read_text()
    entry_file.write_text(text.replace("init_scale = 0.02", "init_scale = 0"))
    with pytest.raises(SSGPError) as err:
        load_entry(entry_file)
    assert str(err.value) == f"{entry_file}: inference.svi.isotropic.init_scale: must be > 0, got 0"
    entry_file.write_text(text.replace("init_scale = 0.02", "components = 2"))
    with pytest.raises(SSGPError, match=r"inference.svi.isotropic.components: the 'isotropic' guide "
                                        r"has no setting 'components' \(its settings: init_scale\)"):
        load_entry(entry_file)
    entry_file.write_text(text)
    e = load_entry(entry_file).with_overrides(["svi.isotropic.init_scale=0.05"])
    assert e.config["inference"]["svi"]["isotropic"] == {"init_scale": 0.05}


def test_a_second_guide_of_the_same_name_is_refused(registered):
    clone = type("IsotropicGuide", (registered,), {})
    with pytest.raises(SSGPError, match="a guide named 'isotropic' is registered already"):
        ssgp_ppl.register_guide(clone)
