"""Every refused bad input: one line naming the problem, exit status 2 from the CLI, an
SSGPError (a ValueError) from the Python API. Nothing here fits a model for long: every error is
raised before or at the first step."""

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from ssgp_ppl.cli import main
from ssgp_ppl.data.datasets import load
from ssgp_ppl.errors import SSGPError


def _csv(tmp_path, frame: pd.DataFrame, name="data.csv"):
    path = tmp_path / name
    frame.to_csv(path, index=False)
    return str(path)


def _frame(n=40, d=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    return pd.DataFrame({**{f"x{j}": x[:, j] for j in range(d)}, "y": np.sin(x).sum(1)})


def _raw(tmp_path, text, name="raw.csv"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _loop(tmp_path):
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.symlink_to(b)
    b.symlink_to(a)
    return str(a)


def _latin1_toml(tmp_path):
    path = tmp_path / "latin.toml"
    path.write_bytes('description = "café"\n'.encode("latin-1"))
    return str(path)


def _toml(tmp_path, text):
    path = tmp_path / "entry.toml"
    path.write_text(text)
    return str(path)


BASE = ('description = "x"\n[model]\nm = 5\nfrequencies = "learned"\nnuisance = "marginalized"\n'
        '[inference]\nmethods = ["ml"]\n[model.noise]\nrole = "learned"\n')


def _toml_directory(tmp_path):
    (tmp_path / "entry.toml").mkdir()
    return str(tmp_path / "entry.toml")


def _fifo(tmp_path, name):
    import os

    if not hasattr(os, "mkfifo"):
        pytest.skip("no named pipes here")
    os.mkfifo(tmp_path / name)
    return str(tmp_path / name)


def _nan_inputs(tmp_path):
    f = _frame()
    f.loc[[1, 5], "x1"] = np.nan
    f.loc[3, "y"] = np.inf
    return ["ssgp", "--data", _csv(tmp_path, f)]


def _non_numeric(tmp_path):
    f = _frame()
    f["colour"] = ["red", "blue"] * 20
    f = f[["x0", "colour", "x1", "x2", "y"]]
    return ["ssgp", "--data", _csv(tmp_path, f)]


CASES = {
    # data
    "nan-and-inf": (_nan_inputs, ["missing values", "'x1' 2", "--dropna"]),
    "inf-after-dropna": (lambda t: [*_nan_inputs(t), "--dropna"], ["column 'y' has 1 inf"]),
    "non-numeric-column": (_non_numeric, ["input column 'colour' is not numeric",
                                          "--encode onehot"]),
    "missing-target": (lambda t: ["ssgp", "--data", _csv(t, _frame()), "--target", "price"],
                       ["target column 'price' not found", "x0, x1, x2, y"]),
    "empty-data": (lambda t: ["ssgp", "--data", _csv(t, _frame().iloc[:0])], ["is empty"]),
    "unknown-data-name": (lambda t: ["ssgp", "--data", "pendulumm"],
                          ["unknown data set 'pendulumm'", "known:", "pendulum", "kin40k"]),
    "missing-data-dir": (lambda t: ["ssgp", "--data", "pendulum", "--data-dir", str(t / "nowhere")],
                         ["data directory", "nowhere", "does not exist"]),
    "fewer-rows-than-partitions": (
        lambda t: ["svbssgp", "--data", _csv(t, _frame(n=40)), "--set", "partitions.count=50"],
        ["training rows cannot be split into 50 partitions"]),
    "fewer-rows-than-neighbours": (
        lambda t: ["tan_local", "--data", _csv(t, _frame(n=40)), "--set", "k=60"],
        ["k = 60 exceeds the", "training rows"]),
    # settings
    "m-below-1": (lambda t: ["ssgp", "--data", "pendulum", "--set", "m=0"], ["model.m", ">= 1"]),
    "gamma-outside": (lambda t: ["svbssgp", "--data", "pendulum", "--set", "gamma=1.5"],
                      ["predictive.gamma", "<= 1"]),
    "gamma-nan": (lambda t: ["svbssgp", "--data", "pendulum", "--set", "gamma=nan"],
                  ["predictive.gamma", "finite number"]),
    "r-below-1": (lambda t: ["svbssgp", "--data", "pendulum", "--set", "predictive.samples=0"],
                  ["predictive.samples", ">= 1"]),
    "unknown-set-key": (lambda t: ["ssgp", "--data", "pendulum", "--set", "lerning_rate=0.1"],
                        ["unknown key", "lerning_rate"]),
    # training across processes (checked before jax.distributed starts)
    "processes-incomplete": (lambda t: ["svbssgp", "--data", "pendulum", "--coordinator", "127.0.0.1:9"],
                             ["needs all of --coordinator", "--num-processes", "--process-id"]),
    "process-id-too-large": (lambda t: ["svbssgp", "--data", "pendulum", "--coordinator", "127.0.0.1:9",
                                        "--num-processes", "2", "--process-id", "2"],
                             ["--process-id must be below --num-processes 2, got 2"]),
    "coordinator-without-port": (lambda t: ["svbssgp", "--data", "pendulum", "--coordinator", "node0",
                                            "--num-processes", "2", "--process-id", "0"],
                                 ["--coordinator must be HOST:PORT", "node0"]),
    # hostile or careless input
    "constant-target": (lambda t: ["ssgp", "--data", _csv(t, _frame().assign(y=3.0))],
                        ["target 'y' is constant (3)", "nothing to learn"]),
    "target-beyond-float64-variance": (
        lambda t: ["ssgp", "--data", _csv(t, _frame().assign(y=lambda f: f.y * 1e300))],
        ["standard deviation", "divide the target"]),
    "tiny-target": (lambda t: ["ssgp", "--data", _csv(t, _frame().assign(y=lambda f: f.y * 1e-300))],
                    ["standard deviation", "between 1e-150 and 1e+150"]),
    "test-value-overflows-metrics": (
        lambda t: ["ssgp", "--data", _csv(t, _frame()), "--test",
                   _csv(t, _frame(n=5, seed=1).assign(y=[0, 0, 0, 0, 1e200]), "test.csv")],
        ["test metrics", "not finite", "e+199 training standard deviations"]),
    "duplicate-header-target": (
        lambda t: ["ssgp", "--data", _raw(t, "a,y,y\n" + "\n".join(f"{i},{i},{i % 3}"
                                                                    for i in range(30))),
                   "--target", "y"], ["duplicate column names: 'y'"]),
    "data-is-a-directory": (lambda t: ["ssgp", "--data", str(t)], ["is a directory"]),
    "data-is-a-fifo": (lambda t: ["ssgp", "--data", _fifo(t, "data.csv")],
                       ["data.csv' is a FIFO (named pipe), not a data file"]),
    "data-symlink-loop": (lambda t: ["ssgp", "--data", _loop(t)], ["symbolic link to nothing"]),
    "m-absurd": (lambda t: ["ssgp", "--data", "pendulum", "--set", "m=9223372036854775807"],
                 ["model.m", "<= 100000"]),
    "spectral-seed-float": (lambda t: ["ssgp", "--data", "pendulum", "--set", "spectral_seed=1e20"],
                            ["model.spectral_seed", "expected int"]),
    "memory-estimate": (lambda t: ["ssgp", "--data", "pendulum", "--set", "m=100000"],
                        ["needs about", "GiB", "m = 100000", "--force"]),
    # catalog files
    "catalog-unknown-key": (lambda t: [_toml(t, BASE.replace("m = 5", "m = 5\nsize = 3")),
                                       "--data", "pendulum"], ["entry.toml", "model.size", "unknown key"]),
    "catalog-wrong-type": (lambda t: [_toml(t, BASE.replace("m = 5", 'm = "5"')), "--data", "pendulum"],
                           ["entry.toml", "model.m", "expected int"]),
    "catalog-nested-too-deeply": (lambda t: [_toml(t, "a = " + "[" * 5000 + "]" * 5000),
                                             "--data", "pendulum"],
                                  ["entry.toml: not valid TOML: nested too deeply"]),
    "catalog-not-utf8": (lambda t: [_latin1_toml(t), "--data",
                                    "pendulum"], ["latin.toml: not UTF-8 text"]),
    "catalog-impossible-value": (lambda t: [_toml(t, BASE.replace("m = 5", "m = -2")),
                                            "--data", "pendulum"], ["entry.toml", "model.m", ">= 1"]),
    "catalog-method-twice": (lambda t: [_toml(t, BASE.replace('["ml"]', '["ml", "ml"]')),
                                        "--data", "pendulum"],
                             ["entry.toml: inference.methods: 'ml' is listed twice"]),
    "catalog-methods-unbounded": (lambda t: [_toml(t, BASE.replace('["ml"]',
                                                                   str(["ml"] * 100_000))),
                                             "--data", "pendulum"],
                                  ["entry.toml: inference.methods: 'ml' is listed twice"]),
    "catalog-methods-nested": (lambda t: [_toml(t, BASE.replace('["ml"]', '[["ml"], ["ml"]]')),
                                          "--data", "pendulum"],
                               ["inference.methods: expected a list of values, got a nested"]),
    "catalog-is-a-directory": (lambda t: [_toml_directory(t), "--data", "pendulum"],
                               ["entry.toml is a directory, not a TOML file"]),
    "catalog-is-a-fifo": (lambda t: [_fifo(t, "entry.toml"), "--data", "pendulum"],
                          ["entry.toml is a FIFO (named pipe), not a TOML file"]),
    "input-listed-twice": (lambda t: ["ssgp", "--data", _csv(t, _frame()), "--inputs", "x0,x1,x0"],
                           ["--inputs: column 'x0' is listed twice"]),
    "noise-init-underflows": (lambda t: ["ssgp", "--data", "pendulum", "--set", "noise.init=1e-300"],
                              ["model.noise.init: must be >= 1e-06, got 1e-300"]),
}


def test_a_catalog_file_with_a_byte_order_mark_loads(tmp_path):
    from ssgp_ppl.entry import load_entry

    path = tmp_path / "bom.toml"
    path.write_bytes(BASE.encode("utf-8-sig"))
    assert load_entry(path).config["model"]["m"] == 5


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_clear_line_and_exit_2(case, tmp_path, capsys):
    make, words = CASES[case]
    assert main(["fit", *make(tmp_path), "--no-progress", "--steps", "3",
                 "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("ssgp-ppl: error:"), err
    for w in words:
        assert w in err, err


def test_no_traceback_without_debug_and_one_with_it(tmp_path):
    """As a new user would see it: a subprocess, stderr holds one line; --debug shows the trace."""
    args = [sys.executable, "-m", "ssgp_ppl.cli", "fit", "ssgp", "--data", "pendulum", "--set", "m=0"]
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "Traceback" not in r.stderr
    r = subprocess.run([*args, "--debug"], capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "Traceback" in r.stderr and "model.m" in r.stderr


def test_python_api_raises_the_package_error(tmp_path):
    """The same checks from Python: SSGPError, which is a ValueError."""
    assert issubclass(SSGPError, ValueError)
    with pytest.raises(SSGPError, match=r"missing values \(column and count: 'x1' 2\); use "
                       r"--dropna \(dropna=True\)"):
        load(_nan_inputs(tmp_path)[2])


def test_test_inputs_with_other_columns_are_refused(pendulum):
    from ssgp_ppl.entry import load_entry
    from ssgp_ppl.pipeline import fit

    entry = load_entry("ssgp").with_overrides(["ml.steps=5"])
    bad = pendulum._replace(x_test=np.c_[pendulum.x_test, pendulum.x_test[:, :1]])
    with pytest.raises(SSGPError, match=r"inputs have \d+ columns but the model was built for"):
        fit(entry, bad, progress=False)


@pytest.mark.parametrize("seed", ["99999999999999999999999", "-1", "1073741825"])
def test_seeds_and_splits_out_of_range_are_refused_before_any_work(seed, capsys):
    import ssgp_ppl

    for flag in ("--seed", "--split"):
        with pytest.raises(SystemExit) as e:
            main(["fit", "ssgp", "--data", "pendulum", flag, seed])
        assert e.value.code == 2
        assert "expected an integer from 0 to 1073741824" in capsys.readouterr().err
    value = int(seed) if seed != "99999999999999999999999" else 10**23
    for what in ("seed", "split"):
        with pytest.raises(SSGPError, match=f"{what} must be an integer from 0 to"):
            ssgp_ppl.fit("ssgp", data="pendulum", **{what: value})


def test_an_unexpected_exception_is_an_internal_error_line_exit_1(monkeypatch, capsys):
    import ssgp_ppl.cli as cli

    def boom(args):
        raise RuntimeError("something\nbroke")

    monkeypatch.setattr(cli, "cmd_models", boom)
    assert cli.main(["models"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "internal error (RuntimeError: something broke)" in err
    assert "please report" in err and "--debug" in err
    with pytest.raises(RuntimeError):
        cli.main(["models", "--debug"])


def test_hand_edited_run_json_and_checkpoint_are_refused(tmp_path, capsys):
    import json

    out = tmp_path / "run"
    assert main(["fit", "ssgp", "--data", "pendulum", "--steps", "20", "--no-progress",
                 "--out", str(out)]) == 0
    run = json.loads((out / "run.json").read_text())
    (out / "run.json").write_text(json.dumps(run | {"seed": "1"}))
    capsys.readouterr()
    assert main(["fit", "--resume", str(out)]) == 2
    assert "run.json is corrupt" in capsys.readouterr().err
    (out / "run.json").write_text(json.dumps(run))
    z = dict(np.load(out / "checkpoint.npz"))
    meta = json.loads(z["meta"].tobytes().decode())
    z["meta"] = np.frombuffer(json.dumps(meta | {"done": 10**9}).encode(), np.uint8)
    np.savez(out / "checkpoint.npz", **z)
    assert main(["fit", "--resume", str(out)]) == 2
    assert "is corrupt (1000000000 steps done but 20 losses)" in capsys.readouterr().err


def test_semicolon_csv_reads(tmp_path):
    path = tmp_path / "semi.csv"
    path.write_text("a;b;y\n" + "\n".join(f"{i};{i * 2};{i % 5}" for i in range(30)) + "\n")
    from ssgp_ppl.errors import DataWarning

    with pytest.warns(DataWarning, match="column 'a' counts the rows"):  # kept as an input
        data = load(str(path))
    assert data.feature_names == ("a", "b") and data.n_train + data.n_test == 30


def test_columns_near_the_float64_limits_keep_their_information(tmp_path):
    """A column of magnitude 1e160 or 1e-170: its standardised values are the same as those of
    the column at magnitude 1 (the standard deviation must not overflow or underflow)."""
    f = _frame(n=60)
    ref = load(_csv(tmp_path, f, "ref.csv"))
    for k in (1e160, 1e-170):
        data = load(_csv(tmp_path, f.assign(x0=f.x0 * k), f"s{k}.csv"))
        np.testing.assert_allclose(data.x_train[:, 0], ref.x_train[:, 0], rtol=1e-9, atol=1e-12)


def test_a_checkpoint_header_claiming_a_huge_array_is_refused(tmp_path):
    """A .npy header in the checkpoint claiming 1e11 floats: refused as corrupt, no MemoryError."""
    import io as _io
    import zipfile

    from ssgp_ppl.runtime.checkpoint import Checkpoint
    from ssgp_ppl.runtime.checkpoint import load as load_checkpoint

    path = tmp_path / "checkpoint.npz"
    header = _io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False,
                                                  "shape": (10**11,)})
    meta = json.dumps({"format": 2, "leaves": 1, "done": 0}).encode()
    meta_npy = _io.BytesIO()
    np.save(meta_npy, np.frombuffer(meta, np.uint8))
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("meta.npy", meta_npy.getvalue())
        z.writestr("leaf_0.npy", header.getvalue() + b"\0" * 64)
    with pytest.raises(SSGPError, match="is corrupt"):
        load_checkpoint(Checkpoint(path))
