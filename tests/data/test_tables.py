"""A user's own table: choosing columns, dropping rows with missing values, one-hot categories and
dates as numbers; the encoding is fitted on the training table, applied to a test file and to
predict's DataFrame, saved with the posterior and recorded in run.json and the DataTree."""

import json
import re
import warnings

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import ssgp_ppl
from ssgp_ppl.data.datasets import load
from ssgp_ppl.data.tables import TableOptions, duplicates, prepare
from ssgp_ppl.errors import SSGPError


def table(n=120, seed=0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    d = pd.DataFrame({
        "when": pd.date_range("2020-01-01", periods=n, freq="D").strftime("%Y-%m-%d"),
        "colour": rng.choice(["red", "green", "blue"], n),
        "x": rng.normal(size=n),
        "id": np.arange(n)})
    d["y"] = np.sin(2 * d.x) + (d.colour == "red") + 0.01 * np.arange(n) + 0.1 * rng.normal(size=n)
    return d


def test_encoding_values_names_and_record():
    d = table()
    d.loc[[3, 7], "x"] = np.nan
    opts = TableOptions.of(drop="id", dropna=True, encode="onehot", dates="numeric")
    x, y, enc, rec = prepare(d, "y", opts, "t")
    assert enc.feature_names == ("when", "colour=blue", "colour=green", "colour=red", "x")
    keep = d.drop(index=[3, 7])
    assert x.shape == (118, 5) and rec["rows_dropped"] == 2
    # 2020-01-01 is day 18262 after 1970-01-01
    np.testing.assert_array_equal(x[:, 0], 18262 + keep.index.to_numpy())
    np.testing.assert_array_equal(x[:, 3], (keep.colour == "red").to_numpy(float))
    np.testing.assert_array_equal(x[:, 1:4].sum(axis=1), 1.0)
    np.testing.assert_array_equal(y, keep.y.to_numpy())
    assert rec["columns"] == {"when": "date", "colour": "onehot"}
    x2, y2, dropped = enc.transform(d, "again", dropna=True)  # the same table: the same arrays
    np.testing.assert_array_equal(x2, x)
    np.testing.assert_array_equal(y2, y)
    assert dropped == 2


@pytest.mark.parametrize("opts, words", [
    (TableOptions.of(drop="id", encode="onehot"), ["'when' holds dates", "--dates numeric"]),
    (TableOptions.of(drop="id", dates="numeric"), ["'colour' is not numeric", "3 values",
                                                   "--encode onehot"]),
    (TableOptions.of(inputs="x,nope"), ["--inputs: no column 'nope'"]),
    (TableOptions.of(drop="y"), ["--drop: 'y' is the target column"]),
])
def test_what_is_missing_is_named_with_the_option_that_fixes_it(opts, words):
    with pytest.raises(SSGPError) as e:
        prepare(table(), "y", opts, "t")
    assert all(w in str(e.value) for w in words), str(e.value)
    with pytest.raises(SSGPError, match="not both"):
        TableOptions.of(inputs="x", drop="id")


def test_missing_values_are_an_error_unless_dropped():
    d = table()
    d.loc[5, "x"] = np.nan
    with pytest.raises(SSGPError, match=r"missing values \(column and count: 'x' 1\); use --dropna"):
        prepare(d, "y", TableOptions.of(inputs="x"), "t")
    x, _, _, rec = prepare(d, "y", TableOptions.of(inputs="x", dropna=True), "t")
    assert len(x) == len(d) - 1 and rec["rows_dropped"] == 1


def test_unseen_category_and_missing_column_are_refused():
    _, _, enc, _ = prepare(table(), "y", TableOptions.of(inputs="colour,x", encode="onehot"), "t")
    other = table(10, seed=1)
    other.loc[0, "colour"] = "mauve"
    with pytest.raises(SSGPError, match="'colour' has categories the model never saw: mauve"):
        enc.transform(other, "new")
    with pytest.raises(SSGPError, match="lacks the input columns x"):
        enc.transform(other.drop(columns="x"), "new")


def test_repeated_header_is_refused(tmp_path):
    p = tmp_path / "dup.csv"
    p.write_text("a,y,y\n1,2,3\n4,5,6\n7,8,9\n")
    with pytest.raises(SSGPError, match="duplicate column names: 'y'"):
        load(str(p), target="y")


def test_duplicates_are_each_named_once_in_order_of_first_occurrence():
    assert duplicates(["b", "a", "b", "c", "a", "b"]) == ["b", "a"]
    assert duplicates([1, "1", 1.0]) == [1]  # 1 == 1.0; mixed types need no ordering
    assert duplicates([f"c{i}" for i in range(200_000)] + ["c7"]) == ["c7"]


def test_a_repeated_column_name_is_refused_in_options_and_dataframes():
    with pytest.raises(SSGPError, match="--drop: column 'b', 'a' is listed twice"):
        TableOptions.of(drop="b,a,b,a")
    d = table(20)
    twice = pd.concat([d, d[["x"]]], axis=1)
    with pytest.raises(SSGPError, match="x has duplicate column names: 'x'"):
        prepare(twice, "y", TableOptions(drop=("when", "colour")), "x")


def test_a_value_that_is_not_a_number_is_named_by_row_and_column():
    d = table(20).drop(columns=["when", "colour"])
    enc = prepare(d, "y", TableOptions(), "train")[2]
    held = d.astype({"x": object})  # numbers held as objects are numbers
    np.testing.assert_array_equal(enc.transform(held, "new")[0], enc.transform(d, "new")[0])
    held.loc[3, "x"] = "abc"
    with pytest.raises(SSGPError, match="new: row 3, column 'x' holds str 'abc', not a number"):
        enc.transform(held, "new")
    y = d["y"].astype(object)
    y[1], y[4] = None, "n/a"  # the row dropped for its missing value does not shift the row named
    with pytest.raises(SSGPError, match="train: row 4, column 'y' holds str 'n/a'"):
        prepare(d.assign(y=y), "y", TableOptions(dropna=True), "train")
    with pytest.raises(SSGPError, match=r"'y' 1\); use --dropna .*\(the first: row 1, column 'y'"):
        prepare(d.assign(y=y.where(y != "n/a", 0.0)), "y", TableOptions(), "train")


def test_test_file_rows_are_the_test_set_and_predict_takes_a_dataframe(tmp_path):
    d = table(160)
    d.iloc[:130].to_csv(tmp_path / "train.csv", index=False)
    d.iloc[130:].to_csv(tmp_path / "test.csv", index=False)
    opts = dict(drop="id", encode="onehot", dates="numeric")
    data = load(str(tmp_path / "train.csv"), table=TableOptions.of(**opts),
                test=str(tmp_path / "test.csv"))
    assert (data.n_train, data.n_test) == (130, 30)
    np.testing.assert_allclose(data.y_scaler.inverse(data.y_test), d.y.iloc[130:], rtol=1e-12)
    with pytest.raises(SSGPError, match="applies to data files"):
        load("pendulum", table=TableOptions.of(dropna=True))

    post = ssgp_ppl.fit("ssgp", data=str(tmp_path / "train.csv"), test=str(tmp_path / "test.csv"),
                        settings={"ml.steps": 200, "m": 10}, **opts)
    assert post.metrics["nmse"] < 0.5
    again = post.predict(d.iloc[130:])  # the raw table, encoded as the training one
    np.testing.assert_allclose(again.mean, post.test.mean, rtol=1e-5, atol=1e-6)
    saved = ssgp_ppl.load(post.save(tmp_path / "post.nc"))
    np.testing.assert_allclose(saved.predict(d.iloc[130:]).mean, again.mean, rtol=1e-6)
    prep = json.loads(post.datatree.attrs["data_preparation"])
    assert prep["columns"] == {"when": "date", "colour": "onehot"}
    assert prep["options"]["encode"] == "onehot" and prep["test"].endswith("test.csv")
    assert post.datatree.attrs["inputs"][:2] == ["when", "colour=blue"]
    tree = xr.open_datatree(tmp_path / "post.nc", engine="h5netcdf")
    assert json.loads(tree.attrs["data_preparation"]) == prep
    # the input dimension is labelled by the columns, in memory and saved
    for t in (post.datatree, tree):
        assert list(t["predictions_constant_data"]["x_test"].coords["input"].values) == \
            list(post.datatree.attrs["inputs"])
    assert post.datatree["posterior"]["frequencies"].sel(input="x").shape[-1] == 10


def _rows(first: str, values) -> pd.DataFrame:
    rng = np.random.default_rng(1)
    n = len(values)
    return pd.DataFrame({first: values, "a": rng.normal(size=n), "y": rng.normal(size=n)})


@pytest.mark.parametrize("name", ["rownames", "Unnamed: 0", "index", "id", "row.names"])
def test_a_first_column_named_as_a_row_index_is_left_out_with_one_line(name):
    from ssgp_ppl.errors import DataWarning

    with pytest.warns(DataWarning, match=rf"column '{re.escape(name)}' is a row index, not an "
                                         r"input; left out \(list it in --inputs"):
        x, _, enc, rec = prepare(_rows(name, np.arange(1, 41)), "y", TableOptions(), "t")
    assert enc.feature_names == ("a",) and x.shape == (40, 1)
    assert rec["index_columns_left_out"] == [name]
    # named in --inputs, it is an input, without a word
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, _, enc, _ = prepare(_rows(name, np.arange(1, 41)), "y",
                               TableOptions.of(inputs=f"{name},a"), "t")
    assert enc.feature_names == (name, "a")


def test_a_counting_column_under_another_name_stays_an_input_and_is_named():
    from ssgp_ppl.errors import DataWarning

    with pytest.warns(DataWarning, match=r"column 't' counts the rows \(0, 1, …, 39\); it is "
                                         r"used as an input \(--drop t"):
        _, _, enc, rec = prepare(_rows("t", np.arange(40)), "y", TableOptions(), "t")
    assert enc.feature_names == ("t", "a") and rec["index_columns_left_out"] == []
    # an ordinary integer input (not distinct, or not counting) passes silently
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for values in (np.arange(40) % 5, np.arange(40) * 3 + 7):
            _, _, enc, _ = prepare(_rows("rooms", values), "y", TableOptions(), "t")
            assert enc.feature_names == ("rooms", "a")
        _, _, enc, _ = prepare(_rows("id", np.arange(40) % 5), "y", TableOptions(), "t")
        assert enc.feature_names == ("id", "a")  # repeated values: not an index


def test_a_file_whose_first_column_has_no_name_reads_without_it(tmp_path, capsys):
    """A table written with its row labels (R's write.csv, pandas' to_csv): the CLI says in one
    line that the nameless column is left out, and fits on the others."""
    from ssgp_ppl import cli

    rng = np.random.default_rng(2)
    d = pd.DataFrame({"a": rng.normal(size=60), "y": rng.normal(size=60)},
                     index=[f"car {i}" for i in range(60)])
    d.to_csv(tmp_path / "labelled.csv")
    rc = cli.main(["fit", "ssgp", "--data", str(tmp_path / "labelled.csv"), "--set", "ml.steps=3",
                   "--set", "m=2", "--no-progress", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert ("ssgp-ppl: warning: data file '" in err or "ssgp-ppl: warning: '" in err) and \
        "column 1 has no name (row labels or a row index written with the table); left out" in err
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert "a" in json.dumps(run) and run  # fitted on the named column


def test_every_text_column_is_named_at_once():
    d = table().assign(shape=["round", "square"] * 60, size=["S", "M", "L"] * 40)
    with pytest.raises(SSGPError, match=r"3 input columns are not numeric: 'colour', 'shape', "
                                        r"'size'; use --encode onehot \(encode='onehot'\) or "
                                        r"--drop colour,shape,size"):
        prepare(d, "y", TableOptions.of(drop="id", dates="numeric"), "t")
