"""Atomic writes: a new temporary file per write (never through a planted link), the old file kept
and nothing left behind when the write fails (a full disk, simulated), one error naming the
path; the DataTree is serialised in memory so HDF5 never meets a full disk; a target that is not a
regular file (a device, a FIFO, a directory) is refused and left as it was."""

import errno
import os

import numpy as np
import pytest
import xarray as xr

from ssgp_ppl.errors import SSGPError
from ssgp_ppl.runtime import io


def test_planted_links_at_the_old_temporary_names_are_not_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    for name in ("run.json.tmp", ".run.json.tmp", "posterior.nc.tmp", "checkpoint.npz.tmp"):
        (tmp_path / name).symlink_to(victim)
    umask = os.umask(0o027)
    try:
        io.write_json(tmp_path / "run.json", {"seed": 1})
    finally:
        os.umask(umask)
    io.write_datatree(tmp_path / "posterior.nc",
                      xr.DataTree.from_dict({"a": xr.Dataset({"x": ("t", np.arange(3.0))})}))
    assert victim.read_text() == "precious"
    assert io.json.loads((tmp_path / "run.json").read_text()) == {"seed": 1}
    back = xr.open_datatree(tmp_path / "posterior.nc", engine="h5netcdf")
    np.testing.assert_array_equal(back["a"]["x"].values, np.arange(3.0))
    assert (tmp_path / "run.json").stat().st_mode & 0o777 == 0o640  # 0666 less the umask
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp") and not p.is_symlink()) == []


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EROFS])
def test_a_failed_write_keeps_the_old_file_and_leaves_nothing(tmp_path, monkeypatch, err):
    target = tmp_path / "metrics.json"
    target.write_text("old")

    def full(fd):
        raise OSError(err, os.strerror(err))

    monkeypatch.setattr(io.os, "fsync", full)
    with pytest.raises(SSGPError) as e:
        io.write_json(target, {"rmse": 1.0})
    assert str(target) in str(e.value) and "unchanged" in str(e.value)
    assert ("disk is full" in str(e.value)) == (err == errno.ENOSPC)
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.json"]
    with pytest.raises(SSGPError, match="cannot write .*posterior.nc"):
        io.write_datatree(tmp_path / "posterior.nc", xr.DataTree())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.json"]


@pytest.fixture
def tiny_disk(tmp_path):
    """A 96 KiB tmpfs (skipped where this machine does not let the tests mount one)."""
    import shutil
    import subprocess

    mnt = tmp_path / "tiny"
    mnt.mkdir()
    if shutil.which("mount") is None or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=96k", "tmpfs", str(mnt)],
            capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root); the ENOSPC cases above simulate it")
    yield mnt
    subprocess.run(["umount", str(mnt)], check=False)


def test_a_fit_onto_a_full_disk_is_one_error_and_leaves_no_partial_file(tiny_disk, capsys):
    from ssgp_ppl.cli import main

    out = tiny_disk / "run"
    assert main(["fit", "ssgp", "--data", "pendulum", "--steps", "20", "--no-progress",
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "No space left on device" in err and str(out) in err
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]
    assert not (out / "posterior.nc").exists()


def _null_device(path):
    """A character device like /dev/null at ``path`` (skipped where mknod is not allowed)."""
    import stat

    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except (PermissionError, OSError) as e:
        pytest.skip(f"cannot create a device node here: {e}")


@pytest.mark.parametrize("kind", ["fifo", "directory", "link to a fifo", "device"])
def test_a_target_that_is_not_a_regular_file_is_refused_and_left_as_it_was(tmp_path, kind):
    import stat

    target = tmp_path / "out.json"
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "directory":
        target.mkdir()
    elif kind == "device":
        _null_device(target)
    else:
        os.mkfifo(tmp_path / "pipe")
        target.symlink_to(tmp_path / "pipe")
    before = os.stat(target).st_mode
    words = {"fifo": "FIFO", "directory": "directory", "link to a fifo": "FIFO",
             "device": "character device"}[kind]
    for write in (lambda: io.write_json(target, {"a": 1}),
                  lambda: io.write_datatree(target, xr.DataTree())):
        with pytest.raises(SSGPError) as e:
            write()
        msg = str(e.value)
        assert str(target) in msg and words in msg and "not a regular file" in msg and "\n" not in msg
    assert os.stat(target).st_mode == before and not stat.S_ISREG(before)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_file_kind_names_what_is_not_a_regular_file(tmp_path):
    (tmp_path / "file").write_text("x")
    (tmp_path / "dir").mkdir()
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "link").symlink_to(tmp_path / "pipe")
    (tmp_path / "broken").symlink_to(tmp_path / "nothing")
    kinds = {p: io.file_kind(tmp_path / p) for p in ("file", "dir", "pipe", "link", "broken",
                                                     "nothing")}
    assert kinds == {"file": None, "dir": "a directory", "pipe": "a FIFO (named pipe)",
                     "link": "a FIFO (named pipe)", "broken": None, "nothing": None}

