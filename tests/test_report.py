"""``compare`` on a quick run: the report's JSON carries every section the issue lists and the
HTML embeds every plot; an unconverged reference is labelled wherever it is used."""

import json
import re

import numpy as np

from ssgp_ppl.entry import load_entry
from ssgp_ppl.report import compare, small


def test_compare_report_sections(pendulum, tmp_path):
    entry, data = small(load_entry("vssgp"), pendulum)
    records = compare(entry, data, tmp_path, progress=False)
    assert [r["method"] for r in records] == ["svi", "nuts"]
    saved = json.loads((tmp_path / "comparison.json").read_text())
    svi, nuts = saved["methods"]
    np.testing.assert_allclose(svi["coverage_curve"]["nominal"], np.linspace(0.1, 0.9, 9))
    assert svi["loo"]["corrected"] and not nuts["loo"]["corrected"]
    vs = svi["vs_nuts"]
    assert {"frequency_spread", "kernel", "f_test"} <= set(vs)  # noise, signal: type-II, constant
    assert "noise" not in vs
    assert all(vs[q]["std_ratio"] > 0 for q in ("kernel", "f_test"))
    h = nuts["nuts"]
    assert {"rhat_max", "ess_bulk_min", "ess_tail_min", "bfmi", "divergences", "modes"} <= set(h)
    assert len(h["chain_mode"]) == 2 and vs["reference_converged"] == h["converged"]
    html = (tmp_path / "report.html").read_text()
    assert len(re.findall(r"<img alt='[^']+' src='data:image/png;base64,[A-Za-z0-9+/=]{500,}'>",
                          html)) == 6
    assert ("NOT CONVERGED" in html) == (not h["converged"])
    for method in ("svi", "nuts"):
        assert (tmp_path / f"posterior_{method}.nc").exists()
