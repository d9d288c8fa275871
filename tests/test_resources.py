"""The memory estimate a fit is checked against before it starts (ssgp_ppl.resources)."""

import pytest

from ssgp_ppl import resources
from ssgp_ppl.entry import load_entry
from ssgp_ppl.errors import SSGPError


def test_guide_parameters_and_bytes_follow_the_sizes():
    e = load_entry("svbssgp")  # joint affine guide: a triangular D x D scale, D = m d + 2m + 3
    m = e.config["model"]["m"]
    need = resources.estimate(e, n=270, d=500, n_test=30, method="svi")
    dim = m * 500 + 2 * m + 3
    assert need.guide == "joint_affine" and need.guide_params == dim * (dim + 1) // 2 + dim
    assert need.bytes >= 16 * need.guide_params  # parameters, gradient, two Adam moments
    ml = resources.estimate(load_entry("ssgp"), n=1000, d=9, n_test=100, method="ml")
    assert ml.guide_params == 0 and ml.bytes >= 4 * (2 * 20) ** 2 * 8
    mf = resources.estimate(load_entry("vssgp"), n=100, d=3, n_test=10, method="svi")
    assert mf.guide == "mean_field" and mf.guide_params == 2 * (20 * 3 + 40 + 3)


def test_an_impossible_fit_is_refused_unless_forced(monkeypatch):
    monkeypatch.setattr(resources, "memory_bytes", lambda: 2.0**30)  # a 1 GiB machine
    e = load_entry("ssgp").with_overrides(["m=20000"])  # the 40000 x 40000 Gram matrix: 48 GiB
    with pytest.raises(SSGPError, match=r"needs about .* GiB \(m = 20000, d = 9, n = 315\).*--force"):
        resources.check(e, 315, 9, 315, "ml")
    assert resources.check(e, 315, 9, 315, "ml", force=True).bytes > 2.0**30
