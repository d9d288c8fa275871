"""docs/adding-a-method.md's worked example runs as written: the method registers, the catalog
validates its table, and its MAP fit equals the built-in ``ml`` method's MAP on the same entry."""

import re
from pathlib import Path

import pytest

import ssgp_ppl
from ssgp_ppl.errors import CalibrationWarning, SSGPError
from ssgp_ppl.inference import methods

DOC = Path(__file__).resolve().parent.parent / "docs" / "adding-a-method.md"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.+?)\n```", DOC.read_text(), re.S)


@pytest.fixture(scope="module")
def registered():
    exec(compile(_blocks("python")[0], str(DOC), "exec"), {})
    yield methods.REGISTRY["map"]
    del methods.REGISTRY["map"]


def test_worked_example_fits_and_equals_ml_on_the_same_entry(registered, tmp_path):
    path = tmp_path / "ssgp_map.toml"
    path.write_text(_blocks("toml")[0])
    # 500 steps leave pendulum's intervals too narrow (test coverage 0.6 of 315 rows): said
    with pytest.warns(CalibrationWarning, match=r"^ssgp_map:map: .* too narrow"):
        post = ssgp_ppl.fit(path, data="pendulum")
    assert post.method == "map" and post.info.steps <= 500
    with pytest.warns(CalibrationWarning, match=r"^ssgp_map:ml: .* too narrow"):
        ml = ssgp_ppl.fit(path, data="pendulum", method="ml",
                          settings={"ml.steps": 500, "ml.lr": 0.02, "ml.tol": 1e-6})
    assert post.metrics == pytest.approx(ml.metrics, rel=1e-6)
    assert "map" in methods.REGISTRY and methods.get("map") is registered


def test_the_new_table_is_validated(registered, tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(_blocks("toml")[0].replace("steps = 500", "steps = 0"))
    with pytest.raises(SSGPError, match=r"bad.toml: inference.map.steps: must be >= 1"):
        ssgp_ppl.fit(path, data="pendulum")


def test_a_second_method_of_the_same_name_is_refused(registered):
    with pytest.raises(SSGPError, match="registered already"):
        methods.register(type(registered)())
