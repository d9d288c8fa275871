"""Every refused bad input: one line naming the problem, exit status 2 from the CLI, an
SSGPError (a ValueError) from the Python API. Nothing here fits a model for long: every error is
raised before or at the first step."""

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from ssgp_ppl.cli import main
from ssgp_ppl.datasets import load
from ssgp_ppl.errors import SSGPError


def _csv(tmp_path, frame: pd.DataFrame, name="data.csv"):
    path = tmp_path / name
    frame.to_csv(path, index=False)
    return str(path)


def _frame(n=40, d=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    return pd.DataFrame({**{f"x{j}": x[:, j] for j in range(d)}, "y": np.sin(x).sum(1)})


def _toml(tmp_path, text):
    path = tmp_path / "entry.toml"
    path.write_text(text)
    return str(path)


BASE = ('description = "x"\n[model]\nm = 5\nfrequencies = "learned"\nnuisance = "marginalized"\n'
        '[inference]\nmethods = ["ml"]\n[model.noise]\nrole = "learned"\n')


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
    # catalog files
    "catalog-unknown-key": (lambda t: [_toml(t, BASE.replace("m = 5", "m = 5\nsize = 3")),
                                       "--data", "pendulum"], ["entry.toml", "model.size", "unknown key"]),
    "catalog-wrong-type": (lambda t: [_toml(t, BASE.replace("m = 5", 'm = "5"')), "--data", "pendulum"],
                           ["entry.toml", "model.m", "expected int"]),
    "catalog-impossible-value": (lambda t: [_toml(t, BASE.replace("m = 5", "m = -2")),
                                            "--data", "pendulum"], ["entry.toml", "model.m", ">= 1"]),
}


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
