"""benchmarks/gold_references.py's checkpoints: a run saved and loaded again keeps what a later
sitting needs from it. The pilot's kernels (temperatures, HMC step sizes, inverse masses) come
back exactly, so runs that reuse a checkpointed pilot are the runs that reuse it in memory."""

import importlib.util
from pathlib import Path

import numpy as np

from ssgp_ppl.diagnostics.evidence import correlated_gaussian
from ssgp_ppl.inference.smc import tempered_smc_runs

_path = Path(__file__).resolve().parents[1] / "benchmarks" / "gold_references.py"
_spec = importlib.util.spec_from_file_location("benchmark_gold_references", _path)
gold_references = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gold_references)


def test_a_checkpointed_pilot_gives_the_runs_its_kernels_in_memory_give(tmp_path):
    dens = correlated_gaussian(0).log_densities()
    pilot = tempered_smc_runs(None, None, None, runs=1, particles=64, mcmc_steps=2, seed=1,
                              pilot=False, log_densities=dens)[0]
    assert pilot.schedule is not None and pilot.inverse_masses is not None
    gold_references._save_run(tmp_path / "pilot.npz", pilot, mcmc_steps=2, pilot="p.npz")
    loaded = gold_references._load_run(tmp_path / "pilot.npz")
    assert gold_references._how_made(tmp_path / "pilot.npz") == {"mcmc_steps": 2, "pilot": "p.npz"}
    for k in ("schedule", "step_sizes", "inverse_masses"):
        np.testing.assert_array_equal(getattr(loaded, k), getattr(pilot, k))
    assert loaded.log_evidence == pilot.log_evidence and loaded.seconds == pilot.seconds
    a, b = (tempered_smc_runs(None, None, None, runs=2, particles=128, mcmc_steps=2, seed=5,
                              pilot=p, log_densities=dens) for p in (pilot, loaded))
    assert [r.log_evidence for r in a] == [r.log_evidence for r in b]
    assert all(r.temperatures == pilot.temperatures for r in a + b)
    np.testing.assert_array_equal(a[1].positions, b[1].positions)
