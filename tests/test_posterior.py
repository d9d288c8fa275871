"""Saved posteriors: save refuses a target that is not a regular file."""

import os
import stat

import numpy as np
import pytest

import ssgp_ppl
from ssgp_ppl.errors import SSGPError


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A small type-II fit with a test split, saved: (posterior, path, raw test inputs)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 2))
    y = np.sin(2 * x).sum(1) + 0.1 * rng.normal(size=40)
    post = ssgp_ppl.fit("ssgp", x=x[:30], y=y[:30], x_test=x[30:], y_test=y[30:],
                        settings={"m": 3, "ml.steps": 20, "ml.min_steps": 0})
    return post, post.save(tmp_path_factory.mktemp("saved") / "p.nc"), x[30:]


def _one_line(e: SSGPError) -> str:
    msg = str(e)
    assert msg and "\n" not in msg
    return msg


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
