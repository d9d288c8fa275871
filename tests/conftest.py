"""Shared fixtures: float32/float64 switching (restoring the previous setting) and the pendulum data."""

import jax
import numpy as np
import pytest

from ssgp_ppl import datasets


def _set_x64(enabled: bool):
    """Switch JAX's default float width; return a callable restoring the previous setting."""
    previous = bool(jax.config.read("jax_enable_x64"))
    jax.config.update("jax_enable_x64", enabled)
    return lambda: jax.config.update("jax_enable_x64", previous)


@pytest.fixture
def x64():
    """Run the test in float64; the previous setting is restored afterwards."""
    restore = _set_x64(True)
    try:
        yield np.float64
    finally:
        restore()


@pytest.fixture(params=[np.float32, np.float64], ids=["float32", "float64"])
def precision(request):
    """Run the test once in float32 and once in float64; yields the numpy dtype in force."""
    restore = _set_x64(request.param is np.float64)
    try:
        yield request.param
    finally:
        restore()


@pytest.fixture(scope="session")
def pendulum():
    """The bundled pendulum data set (standardised on its training split), loaded once."""
    return datasets.load("pendulum")

