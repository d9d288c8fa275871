"""Saved posteriors: save refuses a target that is not a regular file; load validates the stored
entry (as a catalog file) and scalers, checks the saved state's sha256 checksum, and refuses a file
whose metadata declares what no posterior holds before reading any data. Random corruptions of a
saved file give the saved posterior back or one SSGPError line."""

import json
import os
import re
import resource
import stat

import h5netcdf
import numpy as np
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ssgp_ppl
from ssgp_ppl import posterior
from ssgp_ppl.errors import SSGPError
from ssgp_ppl.posterior import STATE_GROUP


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A small type-II fit with a test split, saved: (posterior, path, raw test inputs)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 2))
    y = np.sin(2 * x).sum(1) + 0.1 * rng.normal(size=40)
    post = ssgp_ppl.fit("ssgp", x=x[:30], y=y[:30], x_test=x[30:], y_test=y[30:],
                        settings={"m": 3, "ml.steps": 20, "ml.min_steps": 0})
    return post, post.save(tmp_path_factory.mktemp("saved") / "p.nc"), x[30:]


def _same(back, post, x):
    """``back`` is ``post``: the same predictions, test split, entry, metrics and info."""
    a, b = post.predict(x), back.predict(x)
    for k in ("mean", "var", "mean_f", "var_f", "draws"):
        np.testing.assert_array_equal(getattr(a, k), getattr(b, k), err_msg=k)
    np.testing.assert_array_equal(back.mean, post.mean)
    assert back.entry.config == post.entry.config and back.method == post.method
    assert json.dumps(back.metrics) == json.dumps(post.metrics) and back.info == post.info


def _rewrite(src, dst, edit=None, checksum=True):
    """``src`` written again to ``dst`` through xarray, with ``edit(meta, state)`` applied to the
    state group (its JSON attribute as a dict, its Dataset; returns the Dataset) and, with
    ``checksum=False``, the checksum attribute removed (as in a file saved without one)."""
    with xr.open_datatree(src, engine="h5netcdf") as opened:
        dt = opened.load()
    state = dt[STATE_GROUP].to_dataset()
    meta = json.loads(state.attrs["ssgp_ppl"])
    if edit is not None:
        state = edit(meta, state)
    state.attrs["ssgp_ppl"] = json.dumps(meta)
    if not checksum:
        del state.attrs[posterior.CHECKSUM]
    dt[STATE_GROUP] = xr.DataTree(state)
    dt.to_netcdf(dst, engine="h5netcdf")
    return dst


def _one_line(e: SSGPError) -> str:
    msg = str(e)
    assert msg and "\n" not in msg
    return msg


# --------------------------------------------------------------------------- predict's inputs
@pytest.mark.parametrize("value, words", [
    (1e308, r"is 1e\+308, 1.24e\+308 times"),
    (1.7e308, r"is 1.7e\+308, more than 1.8e\+308 times"),  # overflows once scaled
    (-1.7e308, r"is -1.7e\+308, more than 1.8e\+308 times")])
def test_predict_names_the_row_column_and_value_of_an_input_out_of_range(saved, value, words):
    """A finite input beyond the range the model computes is one error in the user's terms: its
    row, column and value, however far its scaled value lies (float64 overflow included)."""
    post, _, x = saved
    bad = x[:4].copy()
    bad[2, 1] = value
    with pytest.raises(SSGPError) as err:
        post.predict(bad)
    msg = _one_line(err.value)
    assert re.fullmatch(rf"predict: row 2, column 'x1' {words} the training inputs' spread from "
                        r"their centre; the model computes up to 1e\+30", msg), msg
    with pytest.raises(SSGPError, match=r"predict: x_std: row 1, column 'x0' lies 1e\+31 times"):
        post.predict_standardised(np.array([[0.0, 0.0], [1e31, 0.0]]))


# --------------------------------------------------------------------------- save's target
@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_save_refuses_a_target_that_is_not_a_regular_file(saved, tmp_path, kind):
    post, _, _ = saved
    target = tmp_path / "p.nc"
    os.mkfifo(target) if kind == "fifo" else target.mkdir()
    with pytest.raises(SSGPError) as e:
        post.save(target)
    assert str(target) in _one_line(e.value) and "not a regular file" in str(e.value)
    mode = os.stat(target).st_mode
    assert stat.S_ISFIFO(mode) if kind == "fifo" else stat.S_ISDIR(mode)


_TARGET_KINDS = ["new", "existing file", "symlink to a file", "dangling symlink", "fifo",
                 "directory", "missing directory", "read-only directory", "odd name", "bytes",
                 "int", "none", "empty"]


@settings(max_examples=26, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(_TARGET_KINDS), as_str=st.booleans())
def test_save_to_any_target_writes_a_loadable_file_or_gives_one_error(saved, tmp_path_factory,
                                                                      kind, as_str):
    """``Posterior.save`` to random targets (new and existing files, links, a FIFO, a directory,
    a missing or read-only directory, odd names, non-paths): a regular file that loads as the
    saved posterior, or one SSGPError that leaves whatever was at the target as it was."""
    post, _, x = saved
    d = tmp_path_factory.mktemp("target")
    target = d / "p.nc"
    if kind == "existing file":
        target.write_bytes(b"old")
    elif kind == "symlink to a file":
        (d / "real.nc").write_bytes(b"old")
        target.symlink_to(d / "real.nc")
    elif kind == "dangling symlink":
        target.symlink_to(d / "nowhere.nc")
    elif kind == "fifo":
        os.mkfifo(target)
    elif kind == "directory":
        target.mkdir()
    elif kind == "missing directory":
        target = d / "no" / "such" / "p.nc"
    elif kind == "read-only directory":
        (d / "ro").mkdir()
        target = d / "ro" / "p.nc"
        os.chmod(d / "ro", 0o500)
    elif kind == "odd name":
        target = d / "a b\tç;$(x).nc"
    before = os.lstat(target) if os.path.lexists(target) else None
    arg = {"bytes": os.fsencode(str(target)), "int": 5, "none": None, "empty": ""}.get(
        kind, str(target) if as_str else target)
    try:
        written = post.save(arg)
    except SSGPError as e:
        _one_line(e)
        if before is not None:  # nothing replaced
            after = os.lstat(target)
            assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)
        return
    finally:
        if kind == "read-only directory":
            os.chmod(d / "ro", 0o700)
    assert stat.S_ISREG(os.stat(written).st_mode)
    _same(ssgp_ppl.load(written), post, x)


# --------------------------------------------------------------------------- the stored state
def _set_m(meta, state):
    meta["entry"]["config"]["model"]["m"] = -7
    return state


def _set_density(meta, state):
    meta["entry"]["config"]["model"]["spectral_density"] = "__import__('os').system('true')"
    return state


def _set_poisson(meta, state):
    meta["entry"]["config"]["model"]["likelihood"] = "poisson"
    return state


def _nan_y_scale(meta, state):
    return state.assign(y_scaler_scale=state["y_scaler_scale"] * np.nan)


def _zero_x_scale(meta, state):
    return state.assign(x_scaler_scale=state["x_scaler_scale"] * 0.0)


def _negative_y_scale(meta, state):
    return state.assign(y_scaler_scale=-state["y_scaler_scale"])


def _shift_x(meta, state):
    return state.assign(x_scaler_mean=state["x_scaler_mean"] + 0.5)


EDITS = {"m": (_set_m, "model.m"), "density": (_set_density, "model.spectral_density"),
         "poisson": (_set_poisson, "poisson"), "nan_y_scale": (_nan_y_scale, "y_scaler_scale"),
         "zero_x_scale": (_zero_x_scale, "x_scaler_scale"),
         "negative_y_scale": (_negative_y_scale, "y_scaler_scale"),
         "shifted_x_scaler": (_shift_x, None)}


def test_a_saved_posterior_carries_a_checksum_and_loads_as_saved(saved, tmp_path):
    post, path, x = saved
    with xr.open_datatree(path, engine="h5netcdf") as dt:
        assert len(dt[STATE_GROUP].attrs[posterior.CHECKSUM]) == 64  # sha256, hex
    _same(ssgp_ppl.load(path), post, x)
    _same(ssgp_ppl.load(_rewrite(path, tmp_path / "again.nc")), post, x)  # rewritten, unchanged


@pytest.mark.parametrize("edit", list(EDITS))
def test_an_edited_saved_posterior_is_refused_as_modified(saved, tmp_path, edit):
    _, path, _ = saved
    bad = _rewrite(path, tmp_path / "edited.nc", EDITS[edit][0])
    with pytest.raises(SSGPError) as e:
        ssgp_ppl.load(bad)
    msg = _one_line(e.value)
    assert str(bad) in msg and "modified or corrupted" in msg and "ssgp-ppl fit" in msg


def test_a_posterior_saved_without_a_checksum_loads_as_saved(saved, tmp_path):
    post, path, x = saved
    _same(ssgp_ppl.load(_rewrite(path, tmp_path / "unchecked.nc", checksum=False)), post, x)


@pytest.mark.parametrize("edit", [k for k, (_, key) in EDITS.items() if key])
def test_an_edited_posterior_without_a_checksum_is_validated_as_a_catalog_file(saved, tmp_path,
                                                                               edit):
    _, path, _ = saved
    fn, key = EDITS[edit]
    bad = _rewrite(path, tmp_path / "edited.nc", fn, checksum=False)
    with pytest.raises(SSGPError) as e:
        ssgp_ppl.load(bad)
    msg = _one_line(e.value)
    assert str(bad) in msg and key in msg


# --------------------------------------------------------------------------- the file's layout
@pytest.fixture
def address_space_limited():
    """Address space capped at 1 GiB above the current use for the test (a load that tried to
    allocate a declared 16 GB gets a MemoryError instead of the machine's memory)."""
    with open("/proc/self/status") as f:
        vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    old = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (vm + 2**30, old[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, old)


def test_a_huge_declared_but_unwritten_array_is_refused_before_reading(saved, tmp_path,
                                                                       address_space_limited):
    _, path, _ = saved
    crafted = _rewrite(path, tmp_path / "crafted.nc", lambda meta, s: s.drop_vars("losses"))
    with h5netcdf.File(crafted, "a") as f:
        group = f.groups[STATE_GROUP]
        group.dimensions["losses_dim0"] = 2_000_000_000
        group.create_variable("losses", ("losses_dim0",), "f8")  # 16 GB declared, none written
    assert crafted.stat().st_size < 100_000
    with pytest.raises(SSGPError) as e:
        ssgp_ppl.load(crafted)
    msg = _one_line(e.value)
    assert str(crafted) in msg and "losses" in msg and "16 GB" in msg


STATE_LAYOUTS = {
    "unknown_name": lambda s: s.assign(evil=("evil_dim0", np.ones(3))),
    "other_dimensions": lambda s: s.assign(log_p=(("a", "b"), np.zeros((1, 1)))),
    "text": lambda s: s.assign(losses=("losses_dim0", np.array(["a", "b"]))),
}


@pytest.mark.parametrize("layout", list(STATE_LAYOUTS))
def test_a_state_variable_posterior_save_never_writes_is_refused(saved, tmp_path, layout):
    _, path, _ = saved
    name = {"unknown_name": "evil", "other_dimensions": "log_p", "text": "losses"}[layout]
    bad = _rewrite(path, tmp_path / "odd.nc",
                   lambda meta, s: STATE_LAYOUTS[layout](s.drop_vars(name, errors="ignore")))
    with pytest.raises(SSGPError) as e:
        ssgp_ppl.load(bad)
    msg = _one_line(e.value)
    assert str(bad) in msg and f"{STATE_GROUP}/{name}" in msg


# --------------------------------------------------------------------------- random corruptions
_CHARS = st.characters(exclude_characters="\x00")  # netCDF text attributes hold no NUL
_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
                    st.lists(st.integers(-3, 3), max_size=3),
                    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2))


def _leaves(obj, prefix=()):
    """Paths to every value of a JSON document (dict keys, list indices), containers included."""
    yield prefix
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for k, v in items:
        yield from _leaves(v, (*prefix, k))


def _set(obj, where, value):
    if not where:
        return value
    node = obj
    for k in where[:-1]:
        node = node[k]
    node[where[-1]] = value
    return obj


def _corrupt(data, path, dst, checksum=True):
    """``path`` written to ``dst`` with one random corruption: bytes flipped, an attribute changed
    or removed, or a variable of any group dropped."""
    kind = data.draw(st.sampled_from(["flip", "attribute", "drop"] if checksum else ["attribute"]))
    if kind == "flip":
        raw = bytearray(path.read_bytes())
        for _ in range(data.draw(st.integers(1, 4))):
            raw[data.draw(st.integers(0, len(raw) - 1))] ^= data.draw(st.integers(1, 255))
        dst.write_bytes(bytes(raw))
        return dst
    with xr.open_datatree(path, engine="h5netcdf") as opened:
        dt = opened.load()
    if kind == "drop":
        groups = sorted(g.path for g in dt.subtree if g.ds.variables)
        group = data.draw(st.sampled_from(groups))
        name = data.draw(st.sampled_from(sorted(dt[group].ds.variables)))
        dt[group] = xr.DataTree(dt[group].to_dataset().drop_vars(name))
    else:
        state = dt[STATE_GROUP].to_dataset()
        if not checksum:
            del state.attrs[posterior.CHECKSUM]
        where = data.draw(st.sampled_from(["meta", "meta_text", "checksum", "root", "posterior"]
                                          if checksum else ["meta"]))
        if where == "meta":
            meta = json.loads(state.attrs["ssgp_ppl"])
            leaf = data.draw(st.sampled_from(list(_leaves(meta))))
            state.attrs["ssgp_ppl"] = json.dumps(_set(meta, leaf, data.draw(_VALUES)))
        elif where == "meta_text":
            state.attrs["ssgp_ppl"] = data.draw(st.text(_CHARS, max_size=40))
        elif where == "checksum":
            value = data.draw(st.one_of(st.none(), st.text("0123456789abcdef", min_size=64,
                                                           max_size=64)))
            state.attrs.pop(posterior.CHECKSUM) if value is None else \
                state.attrs.update({posterior.CHECKSUM: value})
        else:
            node = dt if where == "root" else dt["posterior"]
            key = data.draw(st.sampled_from(sorted(node.attrs)))
            node.attrs[key] = data.draw(st.one_of(st.integers(-5, 5), st.text(_CHARS, max_size=8)))
        dt[STATE_GROUP] = xr.DataTree(state)
    dt.to_netcdf(dst, engine="h5netcdf")
    return dst


@settings(max_examples=30, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_corrupted_file_loads_as_saved_or_is_refused_in_one_line(saved, tmp_path_factory, data):
    post, path, x = saved
    bad = _corrupt(data, path, tmp_path_factory.mktemp("bad") / "p.nc")
    try:
        back = ssgp_ppl.load(bad)
    except SSGPError as e:
        _one_line(e)
        return
    _same(back, post, x)


@settings(max_examples=15, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_an_edited_file_without_a_checksum_loads_or_is_refused_in_one_line(saved, tmp_path_factory,
                                                                           data):
    _, path, _ = saved
    bad = _corrupt(data, path, tmp_path_factory.mktemp("bad") / "p.nc", checksum=False)
    try:
        ssgp_ppl.load(bad)
    except SSGPError as e:
        _one_line(e)


def test_repr_is_short_and_says_what_was_fitted_and_how_it_stopped():
    """repr(post) is a few lines (entry, method, data, draws, test scores, how it stopped), never
    the arrays; the notebook repr is the same as a table."""
    import ssgp_ppl
    from ssgp_ppl.posterior import stop_text

    post = ssgp_ppl.fit("ssgp_fixed", data="autompg", settings={"m": 4, "ml.steps": 200})
    text = repr(post)
    assert len(text) < 800 and text.count("\n") < 14, text
    assert "model: ssgp_fixed" in text and "method: ml" in text and "data: autompg" in text
    assert f"nmse: {post.metrics['nmse']:.4g}" in text and f"stop: {stop_text(post.info)}" in text
    html = post._repr_html_()
    assert html.count("<tr>") == text.count("\n") - 1 and "ssgp_fixed" in html
