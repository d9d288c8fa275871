"""Tests for ssgp_ppl.data.datasets: protocols, scaling, round trips against the raw files, errors."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ssgp_ppl.data import checks, readers, registry
from ssgp_ppl.data import datasets as D
from ssgp_ppl.errors import SSGPError

BUNDLED = Path(D.__file__).resolve().parent / "bundled"
SHARED = registry.default_data_dir()
needs_shared = pytest.mark.skipif(
    SHARED is None or not Path(SHARED).is_dir(), reason="shared data directory absent"
)

AIRLINE_ROWS = 2_055_733


# ------------------------------------------------------------------------------------------
# helpers: independent parsers of the raw files and row-multiset comparison
# ------------------------------------------------------------------------------------------


def raw_pendulum() -> np.ndarray:
    return np.loadtxt(BUNDLED / "pendulum.csv.gz", delimiter=",")


def raw_autompg() -> tuple[np.ndarray, np.ndarray]:
    rows = []
    for line in (BUNDLED / "autompg.txt").read_text().splitlines():
        tok = line.split()
        if not tok or "NaN" in tok[:7] or "?" in tok[:7]:
            continue
        rows.append([float(t) for t in tok[:7]])
    a = np.array(rows)
    return a[:, 1:7], a[:, 0]


def sort_rows(a: np.ndarray) -> np.ndarray:
    key = np.round(a, 6)
    return a[np.lexsort(key.T[::-1])]


def raw_union(ds: D.Dataset) -> np.ndarray:
    """Train and test rows mapped back to raw units, target as last column."""
    tr = np.column_stack([ds.x_scaler.inverse(ds.x_train), ds.y_scaler.inverse(ds.y_train)])
    te = np.column_stack([ds.x_scaler.inverse(ds.x_test), ds.y_scaler.inverse(ds.y_test)])
    return np.concatenate([tr, te])


def raw_test_rows(ds: D.Dataset) -> set[tuple[float, ...]]:
    te = np.column_stack([ds.x_scaler.inverse(ds.x_test), ds.y_scaler.inverse(ds.y_test)])
    return {tuple(r) for r in np.round(te, 6)}


def one_line_error(excinfo) -> str:
    msg = str(excinfo.value)
    assert "\n" not in msg
    return msg


# ------------------------------------------------------------------------------------------
# bundled sets
# ------------------------------------------------------------------------------------------


def test_known_datasets():
    names = registry.known_datasets()
    assert names == registry.KNOWN
    assert len(names) == 14 and len(set(names)) == 14
    assert {"pendulum", "autompg", "airline", "blog", "protein", "wine-red"} <= set(names)


def test_pendulum_protocol():
    ds = D.load("pendulum", 0)
    assert (ds.n_train, ds.n_test, ds.n_features) == (315, 315, 9)
    assert ds.x_train.shape == (315, 9) and ds.y_train.shape == (315,)
    assert ds.x_test.shape == (315, 9) and ds.y_test.shape == (315,)
    assert ds.feature_names == tuple(f"x{i}" for i in range(9))
    assert ds.name == "pendulum" and ds.split == 0
    for a in (ds.x_train, ds.y_train, ds.x_test, ds.y_test):
        assert a.dtype == np.float64 and a.flags.c_contiguous


def test_autompg_protocol():
    ds = D.load("autompg", 2)
    assert (ds.n_train, ds.n_test, ds.n_features) == (312, 80, 6)
    assert ds.feature_names == (
        "cylinders",
        "displacement",
        "horsepower",
        "weight",
        "acceleration",
        "model_year",
    )
    assert ds.target_name == "mpg"
    for a in (ds.x_train, ds.y_train, ds.x_test, ds.y_test):
        assert np.isfinite(a).all()


@pytest.mark.parametrize("name", ["pendulum", "autompg"])
def test_training_split_standardised(name):
    ds = D.load(name, 1)
    np.testing.assert_allclose(ds.x_train.mean(axis=0), 0.0, atol=1e-10)
    np.testing.assert_allclose(ds.x_train.std(axis=0), 1.0, rtol=1e-10)
    assert abs(ds.y_train.mean()) < 1e-10 and abs(ds.y_train.std() - 1.0) < 1e-10
    assert ds.x_scaler.mean.shape == (ds.n_features,) and ds.y_scaler.mean.shape == ()
    # test rows are scaled with the training statistics, so they are not exactly standard
    assert np.abs(ds.x_test.mean(axis=0)).max() > 1e-6
    # scalers are the raw training statistics
    raw_tr = ds.x_scaler.inverse(ds.x_train)
    np.testing.assert_allclose(ds.x_scaler.mean, raw_tr.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(ds.x_scaler.scale, raw_tr.std(axis=0), rtol=1e-10)


def test_pendulum_round_trip_to_raw_file():
    raw = raw_pendulum()
    assert raw.shape == (630, 10)
    for split in (0, 7):
        ds = D.load("pendulum", split)
        got = raw_union(ds)
        assert got.shape == raw.shape
        np.testing.assert_allclose(sort_rows(got), sort_rows(raw), rtol=1e-12, atol=1e-12)


def test_autompg_round_trip_to_raw_file():
    x_raw, y_raw = raw_autompg()
    assert x_raw.shape == (392, 6)
    ds = D.load("autompg", 0)
    got = raw_union(ds)
    want = np.column_stack([x_raw, y_raw])
    np.testing.assert_allclose(sort_rows(got), sort_rows(want), rtol=1e-12, atol=1e-10)


def test_autompg_parser_accepts_original_uci_format(tmp_path):
    lines = [
        '18.0   8   307.0      130.0      3504.      12.0   70  1\t"chevrolet chevelle malibu"',
        '25.0   4   98.00      ?          2046.      19.0   71  1\t"ford pinto"',
        '24.0   4   113.0      95.00      2372.      15.0   70  3\t"toyota corona mark ii"',
    ]
    p = tmp_path / "auto-mpg.data"
    p.write_text("\n".join(lines) + "\n")
    x, y = readers.read_autompg(p)
    np.testing.assert_array_equal(y, [18.0, 24.0])
    np.testing.assert_array_equal(x[1], [4, 113.0, 95.0, 2372.0, 15.0, 70])


def test_splits_deterministic_and_distinct():
    a = D.load("pendulum", 3)
    b = D.load("pendulum", 3)
    c = D.load("pendulum", 4)
    for u, v in zip(a[1:5], b[1:5], strict=True):
        np.testing.assert_array_equal(u, v)
    assert raw_test_rows(a) != raw_test_rows(c)
    # train and test are disjoint (all 630 pendulum rows are distinct)
    tr = np.column_stack([a.x_scaler.inverse(a.x_train), a.y_scaler.inverse(a.y_train)])
    assert not ({tuple(r) for r in np.round(tr, 6)} & raw_test_rows(a))


def test_minmax_scaling():
    ds = D.load("autompg", 0, x_scaling="minmax")
    np.testing.assert_allclose(ds.x_train.min(axis=0), -1.0, atol=1e-12)
    np.testing.assert_allclose(ds.x_train.max(axis=0), 1.0, atol=1e-12)
    assert abs(ds.y_train.mean()) < 1e-10 and abs(ds.y_train.std() - 1.0) < 1e-10
    std = D.load("autompg", 0)
    np.testing.assert_allclose(
        ds.x_scaler.inverse(ds.x_test), std.x_scaler.inverse(std.x_test), rtol=1e-12
    )


def test_inverse_std_scales_only():
    ds = D.load("autompg", 0)
    s = np.array([0.5, 1.0, 2.0])
    np.testing.assert_allclose(ds.y_scaler.inverse_std(s), s * ds.y_scaler.scale)
    np.testing.assert_allclose(ds.y_scaler.transform(ds.y_scaler.inverse(s)), s)


def test_a_transform_beyond_float64_is_inf_without_a_warning():
    scaler = D.Scaler(np.zeros(2), np.array([1e-300, 1.0]))
    np.testing.assert_array_equal(scaler.transform(np.array([[1e300, 1e300]])), [[np.inf, 1e300]])


def test_extra_noise_inputs():
    base = D.load("pendulum", 5)
    ds = D.load("pendulum", 5, extra_noise_inputs=10)
    assert ds.n_features == 19
    assert ds.feature_names[9:] == tuple(f"noise_{i}" for i in range(10))
    # partition and real columns unchanged by the noise columns
    np.testing.assert_allclose(ds.x_train[:, :9], base.x_train, rtol=1e-12)
    np.testing.assert_array_equal(ds.y_test, base.y_test)
    noise = ds.x_scaler.inverse(np.concatenate([ds.x_train, ds.x_test]))[:, 9:]
    assert noise.min() >= 0.0 and noise.max() <= 1.0
    assert abs(noise.mean() - 0.5) < 0.05
    # seeded by split
    again = D.load("pendulum", 5, extra_noise_inputs=10)
    np.testing.assert_array_equal(again.x_train, ds.x_train)
    other = D.load("pendulum", 6, extra_noise_inputs=10)
    assert not np.allclose(
        np.sort(other.x_train[:, 9:].ravel()), np.sort(ds.x_train[:, 9:].ravel())
    )


# ------------------------------------------------------------------------------------------
# shared data directory
# ------------------------------------------------------------------------------------------

UCI_SHAPES = {
    "kin40k": (40_000, 8),
    "elevators": (16_599, 18),
    "pol": (15_000, 26),
    "concrete": (1_030, 8),
    "energy": (768, 8),
    "kin8nm": (8_192, 8),
    "power-plant": (9_568, 4),
    "protein": (45_730, 9),
    "wine-red": (1_599, 11),
    "yacht": (308, 6),
}


@needs_shared
@pytest.mark.parametrize("name", sorted(UCI_SHAPES))
def test_shared_uci_sets_load(name):
    n, d = UCI_SHAPES[name]
    ds = D.load(name, 1)
    assert ds.n_features == d and ds.n_train + ds.n_test == n
    if name not in ("kin40k", "elevators", "pol"):
        assert ds.n_test == round(0.1 * n)
    else:
        assert 0.05 * n < ds.n_test < 0.15 * n
    for a in (ds.x_train, ds.y_train, ds.x_test, ds.y_test):
        assert np.isfinite(a).all()
    np.testing.assert_allclose(ds.x_train.mean(axis=0), 0.0, atol=1e-8)


@needs_shared
def test_mask_set_uses_mask_column():
    folder = Path(SHARED) / "uci" / "elevators"
    data = np.loadtxt(folder / "data.csv.gz", delimiter=",")
    mask = np.loadtxt(folder / "test_mask.csv.gz", delimiter=",").astype(bool)
    assert mask.shape == (16_599, 10)
    ds = D.load("elevators", 4)
    got = np.sort(ds.y_scaler.inverse(ds.y_test))
    np.testing.assert_allclose(got, np.sort(data[mask[:, 4], -1]), rtol=1e-10, atol=1e-14)
    assert ds.n_test == mask[:, 4].sum()
    with pytest.raises(SSGPError) as e:
        D.load("elevators", 10)
    assert "10 splits" in one_line_error(e)
    with pytest.raises(SSGPError, match="test_fraction"):
        D.load("elevators", 0, test_fraction=0.2)


@needs_shared
def test_uci_txt_split_range_and_test_fraction():
    with pytest.raises(SSGPError) as e:
        D.load("protein", 5)
    assert "5 splits" in one_line_error(e)
    D.load("protein", 4)
    with pytest.raises(SSGPError, match="20 splits"):
        D.load("concrete", 20)
    ds = D.load("concrete", 0, test_fraction=0.2)
    assert ds.n_test == 206 and ds.n_train == 824
    x = np.loadtxt(Path(SHARED) / "uci" / "yacht" / "data.txt")
    ds = D.load("yacht", 3)
    np.testing.assert_allclose(sort_rows(raw_union(ds)), sort_rows(x), rtol=1e-12, atol=1e-12)


@needs_shared
def test_blog():
    ds = D.load("blog", 0)
    assert (ds.n_train, ds.n_test, ds.n_features) == (57_000, 3_000, 60)
    y = ds.y_scaler.inverse(np.concatenate([ds.y_train, ds.y_test]))
    # comment counts: non-negative integers
    assert y.min() >= 0 and np.allclose(y, np.round(y))
    assert np.isfinite(ds.x_train).all()


@pytest.fixture(scope="module")
def airline_cache(tmp_path_factory):
    if SHARED is None or not Path(SHARED).is_dir():
        pytest.skip("shared data directory absent")
    cache = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SSGP_PPL_CACHE", str(cache))
        yield cache


def test_airline_subsample_and_cache(airline_cache):
    ds = D.load("airline", 0, subsample=10_000)
    assert (ds.n_train, ds.n_test, ds.n_features) == (9_500, 500, 8)
    assert ds.feature_names == (
        "aircraft_age",
        "distance",
        "airTime",
        "depTime",
        "arrTime",
        "dayOfWeek",
        "dayOfMonth",
        "month",
    )
    assert ds.target_name == "arrDelay"
    cached = list(airline_cache.glob("airline-*.npy"))
    assert len(cached) == 1 and not list(airline_cache.glob("*.tmp"))
    assert np.load(cached[0], mmap_mode="r").shape == (AIRLINE_ROWS, 9)
    again = D.load("airline", 0, subsample=10_000)  # now from the cache
    np.testing.assert_array_equal(again.x_train, ds.x_train)
    np.testing.assert_array_equal(again.y_test, ds.y_test)
    other = D.load("airline", 1, subsample=10_000)
    assert not np.array_equal(other.y_test, ds.y_test)
    raw_month = ds.x_scaler.inverse(ds.x_train)[:, 7]
    assert set(np.unique(raw_month)) <= {1.0, 2.0, 3.0, 4.0}
    with pytest.raises(SSGPError, match="exceeds"):
        D.load("airline", 0, subsample=AIRLINE_ROWS + 1)


def test_airline_full(airline_cache):
    ds = D.load("airline", 0)
    assert ds.n_train + ds.n_test == AIRLINE_ROWS
    assert ds.n_test == round(0.05 * AIRLINE_ROWS)


def test_cache_reparses_on_change_and_corruption(tmp_path, monkeypatch):
    monkeypatch.setenv("SSGP_PPL_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "src.csv"
    src.write_text("a\n1\n")
    calls = []

    def parse():
        calls.append(1)
        return np.full((2, 3), float(len(calls)))

    first = readers.cached_parse(src, "t", parse)
    second = readers.cached_parse(src, "t", parse)
    assert len(calls) == 1
    np.testing.assert_array_equal(first, second)
    src.write_text("a\n1\n2\n")  # size changes -> new key
    readers.cached_parse(src, "t", parse)
    assert len(calls) == 2
    st = src.stat()
    src.write_text("a\n1\n3\n")  # same size, modification time put back: the content decides
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
    readers.cached_parse(src, "t", parse)
    assert len(calls) == 3
    for f in (tmp_path / "cache").glob("*.npy"):
        f.write_bytes(b"garbage")
    readers.cached_parse(src, "t", parse)
    assert len(calls) == 4


# ------------------------------------------------------------------------------------------
# data files given by path
# ------------------------------------------------------------------------------------------


def make_frame(n=50, seed=0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "a": rng.normal(size=n),
            "b": rng.uniform(size=n) * 10,
            "c": rng.integers(0, 5, size=n).astype(float),
            "y": rng.normal(size=n),
        }
    )


def test_csv_with_target_column(tmp_path):
    df = make_frame()
    p = tmp_path / "toy.csv"
    df.to_csv(p, index=False)
    ds = D.load(str(p), 0, target="b")
    assert ds.name == "toy"
    assert ds.feature_names == ("a", "c", "y") and ds.target_name == "b"
    assert (ds.n_train, ds.n_test) == (45, 5)
    got = raw_union(ds)
    want = df[["a", "c", "y", "b"]].to_numpy()
    np.testing.assert_allclose(sort_rows(got), sort_rows(want), rtol=1e-12, atol=1e-12)
    default = D.load(str(p), 0, test_fraction=0.2)
    assert default.target_name == "y" and default.feature_names == ("a", "b", "c")
    assert default.n_test == 10


@pytest.mark.parametrize("suffix", [".csv.gz", ".tsv", ".txt", ".parquet"])
def test_other_file_formats(tmp_path, suffix):
    df = make_frame(n=30, seed=1)
    p = tmp_path / f"toy{suffix}"
    if suffix == ".parquet":
        df.to_parquet(p)
    elif suffix == ".csv.gz":
        with gzip.open(p, "wt") as f:
            df.to_csv(f, index=False)
    elif suffix == ".tsv":
        df.to_csv(p, sep="\t", index=False)
    else:
        df.to_csv(p, sep=" ", index=False)
    ds = D.load(p, 2)
    assert ds.name == "toy" and ds.feature_names == ("a", "b", "c")
    np.testing.assert_allclose(
        sort_rows(raw_union(ds)), sort_rows(df.to_numpy()), rtol=1e-12, atol=1e-12
    )


def test_constant_column_gets_unit_scale(tmp_path):
    df = make_frame()
    df["c"] = 3.0
    p = tmp_path / "const.csv"
    df.to_csv(p, index=False)
    ds = D.load(str(p), 0)
    assert ds.x_scaler.scale[2] == 1.0
    assert np.all(ds.x_train[:, 2] == 0.0)


def write(tmp_path, name, text) -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_error_nan(tmp_path):
    p = write(tmp_path, "nan.csv", "a,b,y\n1,2,3\n4,,6\n7,8,nan\n1,2,3\n")
    with pytest.raises(SSGPError) as e:
        D.load(p)
    msg = one_line_error(e)
    assert "missing values" in msg and "'b' 1, 'y' 1" in msg and "--dropna" in msg


def test_error_inf(tmp_path):
    p = write(tmp_path, "inf.csv", "a,b,y\n1,inf,3\n4,-inf,6\n7,8,9\n")
    with pytest.raises(SSGPError) as e:
        D.load(p)
    assert "column 'b' has 2 inf" in one_line_error(e)


def test_non_finite_values_are_counted_per_column_and_the_first_is_placed():
    x = np.array([[0.0, 1.0], [np.inf, np.nan], [2.0, -np.inf]])
    y = np.array([0.0, 1.0, np.nan])
    with pytest.raises(SSGPError) as e:
        checks.check_finite(x, "t", ["a", "b"], y, "y", rows=True)
    assert one_line_error(e) == ("non-finite values in t: column 'a' has 1 inf; column 'b' has 1 "
                                 "NaN and 1 inf; column 'y' has 1 NaN (the first: row 1, column "
                                 "'a' is inf)")
    with pytest.raises(SSGPError, match=r"in t: column 0 has 1 inf; column 1 has 1 NaN and 1 inf$"):
        checks.check_finite(x, "t")  # no names: columns by number
    checks.check_finite(x[:1], "t", ["a", "b"], y[:1])


def test_error_text_column(tmp_path):
    p = write(tmp_path, "text.csv", "a,name,y\n1,foo,3\n4,bar,6\n")
    with pytest.raises(SSGPError) as e:
        D.load(p)
    msg = one_line_error(e)
    assert "input column 'name' is not numeric" in msg and "--encode onehot" in msg


def test_error_missing_target(tmp_path):
    p = write(tmp_path, "t.csv", "a,b,y\n1,2,3\n4,5,6\n")
    with pytest.raises(SSGPError) as e:
        D.load(p, target="z")
    msg = one_line_error(e)
    assert "'z'" in msg and "available: a, b, y" in msg


@pytest.mark.parametrize("text", ["", "a,b,y\n"])
def test_error_empty(tmp_path, text):
    p = write(tmp_path, "empty.csv", text)
    with pytest.raises(SSGPError) as e:
        D.load(p)
    assert "empty" in one_line_error(e)


def test_error_unknown_name(tmp_path):
    with pytest.raises(SSGPError) as e:
        D.load("xyz")
    msg = one_line_error(e)
    assert "unknown data set 'xyz'" in msg and "known: pendulum, autompg" in msg
    with pytest.raises(SSGPError, match="unknown data set"):
        D.load(str(tmp_path / "missing.csv"))
    p = write(tmp_path, "data.json", "{}")
    with pytest.raises(SSGPError, match="unsupported"):
        D.load(p)


def test_error_data_dir_missing(tmp_path, monkeypatch):
    missing = tmp_path / "nope"
    with pytest.raises(SSGPError) as e:
        D.load("concrete", data_dir=missing)
    msg = one_line_error(e)
    assert str(missing) in msg and "--data-dir" in msg and "SSGP_PPL_DATA" in msg
    monkeypatch.setenv("SSGP_PPL_DATA", str(missing))
    with pytest.raises(SSGPError, match="does not exist"):
        D.load("kin40k")
    monkeypatch.setattr(registry, "default_data_dir", lambda: None)
    with pytest.raises(SSGPError) as e:
        D.load("blog")
    assert "SSGP_PPL_DATA" in one_line_error(e)
    # a data dir without the set's files
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(SSGPError, match="missing"):
        D.load("yacht", data_dir=tmp_path / "empty_dir")
    # bundled sets never need it
    assert D.load("pendulum").n_train == 315


def test_default_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SSGP_PPL_DATA", str(tmp_path))
    assert registry.default_data_dir() == tmp_path
    monkeypatch.delenv("SSGP_PPL_DATA")
    work = tmp_path / "a" / "repo"
    work.mkdir(parents=True)
    (tmp_path / "a" / "shared" / "data").mkdir(parents=True)
    monkeypatch.chdir(work)
    assert registry.default_data_dir().resolve() == (tmp_path / "a" / "shared" / "data").resolve()
    monkeypatch.chdir(tmp_path)
    sibling = Path(D.__file__).resolve().parents[3] / "shared" / "data"
    assert registry.default_data_dir() == (sibling if sibling.is_dir() else None)


def test_bad_arguments():
    with pytest.raises(SSGPError, match="x_scaling"):
        D.load("pendulum", x_scaling="robust")
    with pytest.raises(SSGPError, match="split"):
        D.load("pendulum", -1)
    with pytest.raises(SSGPError, match="subsample"):
        D.load("pendulum", subsample=100)
    with pytest.raises(SSGPError, match="test_fraction"):
        D.load("autompg", test_fraction=0.3)
    with pytest.raises(SSGPError, match="extra_noise_inputs"):
        D.load("pendulum", extra_noise_inputs=-1)
    with pytest.raises(SSGPError, match="target"):
        D.load("autompg", target="weight")
    assert D.load("autompg", target="mpg").target_name == "mpg"


def test_binary_and_count_targets():
    """Probit targets: 1 above the training median (or a threshold), unscaled; Poisson targets:
    raw counts, which must be non-negative integers."""
    d = D.load("autompg", target_kind="binary")
    raw = D.load("autompg")
    med = np.median(raw.y_scaler.inverse(raw.y_train))
    np.testing.assert_array_equal(d.y_train, raw.y_scaler.inverse(raw.y_train) > med)
    assert set(np.unique(d.y_test)) == {0.0, 1.0} and d.target_name == f"mpg > {med:g}"
    assert float(d.y_scaler.scale) == 1.0 and float(d.y_scaler.mean) == 0.0
    with pytest.raises(SSGPError, match="single class"):
        D.load("autompg", target_kind="binary", threshold=1000.0)
    with pytest.raises(SSGPError, match="non-negative integer count"):
        D.load("pendulum", target_kind="count")
    with pytest.raises(SSGPError, match="threshold applies only"):
        D.load("pendulum", threshold=1.0)


# ------------------------------------------------------------------------------------------
# wide headers: the column limit is checked before any per-column work
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".csv", ".csv.gz", ".tsv", ".txt"])
def test_header_of_a_million_columns_is_refused_by_the_column_limit(tmp_path, suffix):
    from ssgp_ppl.data.tables import MAX_COLUMNS

    width = 1_000_000
    sep = {".tsv": "\t", ".txt": " "}.get(suffix, ",")
    text = sep.join(f"c{i}" for i in range(width)) + "\n" + sep.join(["0"] * width) + "\n"
    p = tmp_path / f"wide{suffix}"
    if suffix.endswith(".gz"):
        with gzip.open(p, "wt") as f:
            f.write(text)
    else:
        p.write_text(text)
    with pytest.raises(SSGPError) as e:
        D.load(str(p))
    msg = one_line_error(e)
    assert f"has {width} columns" in msg and f"at most {MAX_COLUMNS} columns" in msg


def test_parquet_and_dataframe_wider_than_the_column_limit_are_refused(tmp_path, monkeypatch):
    from ssgp_ppl.data import tables

    monkeypatch.setattr(tables, "MAX_COLUMNS", 3)
    df = make_frame(n=20)  # a, b, c, y
    df.to_parquet(tmp_path / "t.parquet")
    for data in (str(tmp_path / "t.parquet"), df):
        with pytest.raises(SSGPError, match="has 4 columns; at most 3 columns are supported"):
            D.load(data)


def test_duplicate_name_in_a_wide_header_is_named(tmp_path):
    width = 20_000
    names = [f"c{i}" for i in range(width - 1)] + ["c17"]
    p = tmp_path / "wide_dup.csv"
    p.write_text(",".join(names) + "\n" + ",".join(["0"] * width) + "\n")
    with pytest.raises(SSGPError) as e:
        D.load(str(p))
    assert "duplicate column names: 'c17'" in one_line_error(e)
