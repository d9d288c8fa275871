"""A guide's settings live in its own table ``[inference.svi.<guide>]``, validated with its
Settings: an option the chosen guide does not have, written flat in ``[inference.svi]`` or in
another guide's table, is one error naming the file and key; ``--set`` reaches the same keys."""

import json

import pytest

from ssgp_ppl.cli import main
from ssgp_ppl.entry import BUILTIN_CATALOG, load_entry
from ssgp_ppl.errors import SSGPError
from ssgp_ppl.model.guides import GUIDES, Guide, register


def _entry_with(tmp_path, name: str, after_guide: str = "", tail: str = ""):
    """Built-in entry ``name`` written to tmp_path with ``after_guide`` right after its
    ``guide = ...`` line and ``tail`` at the end."""
    lines = (BUILTIN_CATALOG / f"{name}.toml").read_text().splitlines(keepends=True)
    at = next(i for i, li in enumerate(lines) if li.startswith("guide = ")) + 1
    path = tmp_path / f"{name}.toml"
    path.write_text("".join(lines[:at]) + after_guide + "".join(lines[at:]) + tail)
    return path


def _error(path) -> str:
    """The one-line error of loading ``path``, which names the file: that name, relative."""
    with pytest.raises(SSGPError) as err:
        load_entry(path)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"{path}: ")
    return msg.removeprefix(f"{path.parent}/")


def test_vssgp_with_the_mixtures_and_joint_affines_options_is_an_error(tmp_path):
    path = _entry_with(tmp_path, "vssgp", 'components = 7\npsi = "student_t"\n')
    assert _error(path) == (
        "vssgp.toml: inference.svi.components: the 'mean_field' guide has no setting "
        "'components' (its settings: init_scale; 'components' is a setting of mixture)")
    path = _entry_with(tmp_path, "vssgp", 'psi = "student_t"\n')
    assert _error(path) == (
        "vssgp.toml: inference.svi.psi: the 'mean_field' guide has no setting 'psi' (its "
        "settings: init_scale; 'psi' is a setting of joint_affine)")


def test_a_flat_option_of_the_chosen_guide_says_where_it_now_goes(tmp_path):
    path = _entry_with(tmp_path, "ssgp_mixture", "components = 7\n")
    assert _error(path) == ("ssgp_mixture.toml: inference.svi.components: a setting of the "
                            "'mixture' guide: write it in [inference.svi.mixture]")


def test_another_guides_table_and_an_unknown_key_in_the_own_table_are_errors(tmp_path):
    path = _entry_with(tmp_path, "vssgp", tail="\n[inference.svi.mixture]\ncomponents = 7\n")
    assert _error(path) == ("vssgp.toml: inference.svi.mixture: settings of the 'mixture' guide, "
                            "but this entry's guide is 'mean_field'")
    path = _entry_with(tmp_path, "vssgp", tail="\n[inference.svi.mean_field]\npsi = 'normal'\n")
    assert _error(path) == ("vssgp.toml: inference.svi.mean_field.psi: the 'mean_field' guide has "
                            "no setting 'psi' (its settings: init_scale)")
    path = _entry_with(tmp_path, "ssgp_svi", tail="\n[inference.svi.auto_mvn]\ninit_scale = 0.1\n")
    assert _error(path) == ("ssgp_svi.toml: inference.svi.auto_mvn.init_scale: the 'auto_mvn' "
                            "guide has no setting 'init_scale' (it has no settings)")


def test_the_guides_own_table_reaches_the_guide(tmp_path):
    path = tmp_path / "mix.toml"
    path.write_text((BUILTIN_CATALOG / "ssgp_mixture.toml").read_text()
                    .replace("components = 3 ", "components = 5 ").replace("spread = 1.0 ", "spread = 0.5 "))
    entry = load_entry(path)
    guide = entry.guide(entry.spec(2))
    assert guide.components == 5 and guide.settings.spread == 0.5 and guide.locs0.shape[0] == 5
    path = tmp_path / "ja.toml"
    path.write_text((BUILTIN_CATALOG / "svbssgp.toml").read_text()
                    .replace('psi = "normal" ', 'psi = "student_t"\ndf = 3 '))
    entry = load_entry(path)
    guide = entry.guide(entry.spec(2))
    assert (guide.psi, guide.df, guide.gaussian_nuisance) == ("student_t", 3.0, False)


def _bad_values():
    """(guide, key, value, message) for each bounded or enumerated setting of every registered
    guide: a value just outside."""
    for name, cls in GUIDES.items():
        for key, f in cls.Settings.schema().items():
            if f.choices is not None:
                yield name, key, "'nope'", f"'nope' is not one of {', '.join(f.choices)}"
            if f.low is not None:
                value = f.low if f.open_low else f.low - 1
                op = ">" if f.open_low else ">="
                yield name, key, repr(value), f"must be {op} {f.low:g}, got {value!r}"
            if f.high is not None:
                yield name, key, repr(f.high + 1), f"must be <= {f.high:g}"
            yield name, key, "[1, 2]", "expected"


BAD = list(_bad_values())


def test_every_bounded_guide_setting_is_covered():
    covered = {(g, k) for g, k, _, _ in BAD}
    assert ("mixture", "components") in covered and ("joint_affine", "psi") in covered
    assert ("joint_affine", "df") in covered and ("mean_field", "init_scale") in covered


@pytest.mark.parametrize(("guide", "key", "value", "words"), BAD,
                         ids=[f"{g}.{k}={v}" for g, k, v, _ in BAD])
def test_each_guides_settings_are_validated(tmp_path, guide, key, value, words):
    """On an entry that does not fit by svi (ssgp: type-II ML), so only the table is checked."""
    text = (BUILTIN_CATALOG / "ssgp.toml").read_text()
    path = tmp_path / "g.toml"
    path.write_text(text + f"\n[inference.svi]\nguide = '{guide}'\n\n[inference.svi.{guide}]\n"
                    f"{key} = {value}\n")
    msg = _error(path)
    assert msg.startswith(f"g.toml: inference.svi.{guide}.{key}: ") and words in msg, msg


def test_set_reaches_the_guides_table_and_is_validated_the_same_way():
    mix = load_entry("ssgp_mixture")
    for key in ("svi.mixture.components", "inference.svi.mixture.components", "components"):
        assert mix.with_overrides([f"{key}=7"]).config["inference"]["svi"]["mixture"]["components"] == 7
    with pytest.raises(SSGPError) as err:
        mix.with_overrides(["svi.mixture.components=0"])
    assert str(err.value) == ("ssgp_mixture.toml with --set: inference.svi.mixture.components: "
                              "must be >= 1, got 0")
    with pytest.raises(SSGPError, match=r"^--set: unknown key 'svi.components' .*; keys of that "
                                        r"name: inference.svi.mixture.components$"):
        mix.with_overrides(["svi.components=7"])
    # a leaf several guides have resolves to the entry's own guide
    sv = load_entry("svbssgp").with_overrides(["init_scale=0.3"])
    assert sv.config["inference"]["svi"]["joint_affine"]["init_scale"] == 0.3
    vs = load_entry("vssgp")
    with pytest.raises(SSGPError, match=r"^vssgp.toml with --set: inference.svi.mixture: settings "
                                        r"of the 'mixture' guide, but this entry's guide is "
                                        r"'mean_field'$"):
        vs.with_overrides(["svi.mixture.components=7"])
    # choosing another guide takes its own table; the old guide's goes with the old guide
    svi = vs.with_overrides(["svi.guide=mixture", "svi.mixture.components=7"]).config["inference"]["svi"]
    assert svi["mixture"] == {"init_scale": 0.1, "components": 7, "spread": 1.0}
    assert "mean_field" not in svi
    with pytest.raises(SSGPError, match="inference.svi.mean_field: settings of the 'mean_field' "
                                        "guide, but this entry's guide is 'mixture'"):
        vs.with_overrides(["svi.guide=mixture", "svi.mean_field.init_scale=0.2"])


def test_cli_set_of_a_guide_setting_is_one_error_line(capsys, tmp_path):
    code = main(["fit", "ssgp_mixture", "--data", "pendulum", "--set",
                 "svi.mixture.components=0", "--out", str(tmp_path / "out"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "ssgp_mixture.toml with --set: inference.svi.mixture.components: must be >= 1" in err


def test_models_guides_lists_each_guides_settings_from_its_schema(capsys):
    assert main(["models", "--guides", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == list(GUIDES)
    for r in rows:
        schema = GUIDES[r["name"]].Settings.schema()
        assert list(r["settings"]) == list(schema)
        assert all(r["settings"][k]["default"] == f.default and r["settings"][k]["doc"] == f.doc
                   for k, f in schema.items())
    mix = next(r for r in rows if r["name"] == "mixture")["settings"]["components"]
    assert mix == {"type": "int", "default": 3, "low": 1,
                   "doc": "number K of diagonal Gaussian components"}
    assert main(["models", "--guides"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 + len(GUIDES)
    mixture = next(li for li in lines if li.startswith("mixture "))
    assert "init_scale = 0.1, components = 3, spread = 1.0" in mixture
    assert next(li for li in lines if li.startswith("auto_mvn ")).split()[1] == "-"


def test_register_guide_takes_a_guide_class_with_a_new_name():
    with pytest.raises(SSGPError, match=r"register_guide\(\) takes a Guide subclass \(the class, "
                                        r"not an instance\), got int"):
        register(3)

    class Again(Guide):
        name = "mixture"

    with pytest.raises(SSGPError, match="a guide named 'mixture' is registered already"):
        register(Again)
    assert register(GUIDES["mixture"]) is GUIDES["mixture"]  # the same class again: a no-op


def test_a_guide_named_as_an_svi_setting_is_refused_by_name():
    class Steps(Guide):
        name = "steps"

    register(Steps)
    try:
        with pytest.raises(SSGPError, match=r"^the guide 'steps' has the name of an "
                                            r"\[inference.svi\] setting; rename it$"):
            load_entry("vssgp")
    finally:
        del GUIDES["steps"]
    assert load_entry("vssgp").config["inference"]["svi"]["guide"] == "mean_field"
