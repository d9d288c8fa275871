"""Compute, validate and store the gold-standard references (:mod:`ssgp_ppl.diagnostics.gold`).

For each target (a fully Bayesian catalog entry × a bundled data set), K independent tempered-SMC
runs of the entry's reference target, each from the prior with its own seed, in groups of runs
vmapped in one jit, every run with the kernels (temperatures, HMC step sizes, dense masses) of
one adaptive pilot run with fewer particles, computed once a target (Ẑ of a kernel sequence fixed
in advance is unbiased); the pilot and every finished group are checkpointed (``--checkpoints``,
one ``.npz`` a run, written atomically, small enough to commit), so a computation can span several
sittings and machines: run the same command again and it continues. When all K runs are there,
the pooled posterior (each run one chain, thinned to ``--draws`` a run), each run's test MNLP,
the importance-sampling check of log Z and the verdict (:func:`ssgp_ppl.diagnostics.gold.verdict`) are
computed and the reference is stored under ``ssgp_ppl/references/v<format>/`` with its
provenance.

    python benchmarks/gold_references.py                      # every target, default budget
    python benchmarks/gold_references.py --only tan_va:pendulum --particles 512 --max-minutes 50
    # on another machine (a GPU), the same targets: the hand-overs saved here travel with it
    python benchmarks/gold_references.py --only tan_va:pendulum --handoffs HANDOFFS --store OUT

The runs sample in float64 (the Tan posterior has |corr| up to 0.998) the target a default
(float32) comparison has: fixed spectral points drawn in float32.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
# the targets and their budgets (particles × HMC moves a temperature; vmapped runs a group)
TARGETS = {
    # 256 and 512 particles: log Z sd 0.65 and 0.55 over 4 runs; 1,024: 0.11 (52 s on an H100);
    # 1,024 at 10 moves: sd 0.07, the same reference (pooled test MNLP 2.2305 vs 2.2292), 42 min
    # on 2 cores
    "tan_va:pendulum": {"particles": 1024, "mcmc_steps": 10},
    # 10 HMC moves a temperature: the same reference as 20 (pooled test MNLP 2.4999 vs 2.4998, log Z
    # -144.99 +- 0.08 vs -144.97 +- 0.03) in 29 min instead of 115 on 2 cores
    "tan_va:autompg": {"particles": 512, "mcmc_steps": 10},
    "tan_va_svi:pendulum": {"particles": 256, "mcmc_steps": 20},
    # 10 moves: the same reference as 20 (pooled test MNLP 2.466 vs 2.469), 30 min instead of 61
    "tan_va_svi:autompg": {"particles": 512, "mcmc_steps": 10},
    # free frequencies, one mode a run at 512 (R-hat 1.64, log Z sd 2.99) and at 4,096 particles
    # (R-hat 1.59, sd 0.95; 75 s on an H100, ~8 hours on 2 CPU cores by the 512-particle runs)
    "ssgp_svi:pendulum": {"particles": 4096, "mcmc_steps": 20},
    "ssgp_svi:autompg": {"particles": 512, "mcmc_steps": 20},
}
RUNS = 4
PILOT_SHARE = 4  # the pilot run has particles / PILOT_SHARE particles (at least PILOT_MIN)
PILOT_MIN = 128
DRAWS_PER_RUN = 500  # kept per run in the stored posterior
SEED = 0
IS_DRAWS = 180_000  # importance-sampling draws: enough for a stable Pareto k̂


def _write_npz(path: Path, **arrays) -> None:
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, **arrays)
    os.replace(tmp, path)


def _load_run(path: Path):
    from ssgp_ppl.inference.smc import SMCResult

    with np.load(path) as z:
        samples = {k[len("sample_"):]: z[k] for k in z.files if k.startswith("sample_")}
        kernels = [z[k] if k in z.files else None
                   for k in ("schedule", "step_sizes", "inverse_masses")]
        return SMCResult(z["positions"], samples, float(z["log_evidence"]), int(z["temperatures"]),
                         float(z["acceptance"]), z["log_likelihood"], float(z["seconds"]), None,
                         *kernels)


def _save_run(path: Path, r, share: int = 1, **made) -> None:
    """One run, atomically; ``made``: how it was made (``mcmc_steps``, ``pilot``: the pilot's file
    name), checked when the run is used (`_how_made`)."""
    extra = {} if r.schedule is None else {"schedule": r.schedule, "step_sizes": r.step_sizes,
                                           "inverse_masses": r.inverse_masses}
    _write_npz(path, positions=r.positions, log_evidence=r.log_evidence,
               temperatures=r.temperatures, acceptance=r.acceptance,
               log_likelihood=r.log_likelihood, seconds=r.seconds / share, **extra,
               **{f"made_{k}": v for k, v in made.items()},
               **{f"sample_{s}": v for s, v in r.samples.items()})


def _how_made(path: Path) -> dict:
    """What `_save_run` recorded of how a run was made ({} for a run checkpointed without it:
    after a full-size pilot of its own group, its HMC moves not recorded)."""
    with np.load(path) as z:
        return {k[len("made_"):]: z[k].item() for k in z.files if k.startswith("made_")}


def _handoff(entry, data, target: str, folder: Path | None, progress: bool):
    """The comparison's hand-over for ``target``: read from ``folder`` when an earlier sitting
    saved it there, else computed (and saved there, atomically, when a folder is given)."""
    import pickle

    from ssgp_ppl.diagnostics import gold

    path = None if folder is None else folder / f"{target.replace(':', '-')}.pkl"
    if path is not None and path.exists():
        with open(path, "rb") as f:
            return pickle.load(f)
    handoff = gold.comparison_handoff(entry, data, seed=SEED, progress=progress)
    if path is not None:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(pickle.dumps(handoff))
        os.replace(tmp, path)
    return handoff


def compute(target: str, *, runs: int, group: int, particles: int, mcmc_steps: int,
            checkpoints: Path, deadline: float, draws: int, progress: bool = True,
            handoffs: Path | None = None, store_root: Path | None = None,
            revalidate: bool = False) -> dict | None:
    """One target: run what is missing, then validate and store. None when the deadline stopped
    it before every run was done (the finished runs are checkpointed)."""
    import jax.numpy as jnp

    from ssgp_ppl.data.datasets import load
    from ssgp_ppl.diagnostics import gold
    from ssgp_ppl.entry import load_entry
    from ssgp_ppl.inference.methods import common
    from ssgp_ppl.inference.methods.smc import SMC_SEED_OFFSET, target_model
    from ssgp_ppl.inference.smc import PILOT_SEED_OFFSET, tempered_smc_runs

    name, dataset = target.split(":")
    entry = load_entry(name)
    data = load(dataset, x_scaling=entry.config["data"]["x_scaling"])
    # the target a default (float32) comparison has, sampled in float64; with --handoffs, the
    # one saved by an earlier sitting (so that another machine, a GPU, samples this very target)
    handoff = _handoff(entry, data, target, handoffs, progress)
    key = gold.target_key(entry, data, handoff)
    h = gold.target_hash(key)
    g = gold.find(entry, data, handoff, root=store_root)
    if g is not None and not revalidate and g.provenance["runs"] >= runs and \
            g.provenance["settings"]["particles"] >= particles:
        print(f"{target}: stored already as {g.path.name}", file=sys.stderr)
        return g.provenance
    pts = gold.target_points(entry, data, handoff)
    ck = checkpoints / (h if pts is None else f"{h}-{gold._rounded_sha(pts)[:8]}")
    ck.mkdir(parents=True, exist_ok=True)
    spec = common.spec_for(entry, data, handoff)
    model, _ = target_model(entry, spec, handoff.type2, True)
    x, y = jnp.asarray(data.x_train), jnp.asarray(data.y_train)
    done = {k for k in range(runs) if (ck / f"run_{k}.npz").exists()}
    pilot_n = max(PILOT_MIN, particles // PILOT_SHARE)
    pilot_path = ck / f"pilot_{pilot_n}x{mcmc_steps}.npz"
    if len(done) < runs and not pilot_path.exists():
        t0 = time.perf_counter()
        res = tempered_smc_runs(model, x, y, runs=1, particles=pilot_n, mcmc_steps=mcmc_steps,
                                seed=SEED + SMC_SEED_OFFSET + PILOT_SEED_OFFSET, pilot=False)
        _save_run(pilot_path, res[0])
        print(f"{target}: pilot run ({pilot_n} particles, {res[0].temperatures} temperatures) "
              f"in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    pilot = _load_run(pilot_path) if len(done) < runs else None
    while len(done) < runs:
        if time.time() > deadline:
            print(f"{target}: {len(done)}/{runs} runs done; run again to continue", file=sys.stderr)
            return None
        todo = [k for k in range(runs) if k not in done][:group]
        t0 = time.perf_counter()
        # a group's runs split the key of its first run's seed (the group size is recorded)
        res = tempered_smc_runs(model, x, y, runs=len(todo), particles=particles,
                                mcmc_steps=mcmc_steps, pilot=pilot,
                                seed=SEED + SMC_SEED_OFFSET + 1000 * todo[0])
        for k, r in zip(todo, res, strict=True):
            _save_run(ck / f"run_{k}.npz", r, share=len(todo), mcmc_steps=mcmc_steps,
                      pilot=pilot_path.name)
            done.add(k)
        print(f"{target}: runs {todo} in {time.perf_counter() - t0:.0f} s, log Z "
              f"{[round(r.log_evidence, 2) for r in res]}", file=sys.stderr)
    results = [_load_run(ck / f"run_{k}.npz") for k in range(runs)]
    if sizes := sorted({len(r.positions) for r in results} - {particles}):
        print(f"{target}: the checkpointed runs in {ck} have {sizes} particles, not {particles}: "
              "give --particles as they were run, or move them away to start again",
              file=sys.stderr)
        return None
    made = [_how_made(ck / f"run_{k}.npz") for k in range(runs)]
    kinds = {(m.get("mcmc_steps"), m.get("pilot")) for m in made}
    if len(kinds) > 1 or (made[0] and made[0]["mcmc_steps"] != mcmc_steps):
        print(f"{target}: the checkpointed runs in {ck} were made as {sorted(kinds, key=str)} "
              f"(HMC moves, pilot), not all with {mcmc_steps} moves and one pilot: give "
              "--mcmc-steps as they were run, or move them away to start again", file=sys.stderr)
        return None
    used = made[0].get("pilot")  # the pilot file every run used; None: each group its own
    settings = {"particles": particles, "mcmc_steps": mcmc_steps if used else "not recorded",
                "group": group, "mass": "auto (dense up to D = 50)",
                "pilot": (f"one adaptive pilot run for every run ({used})" if used else
                          "one full-size adaptive pilot run a group"),
                "draws_per_run": draws, "seed": SEED,
                "run_seeds": [SEED + SMC_SEED_OFFSET + 1000 * (k - k % group) for k in range(runs)]}
    g = gold.store(entry, data, handoff, results, settings=settings, seed=SEED, draws=draws,
                   is_draws=IS_DRAWS, name=f"{name}-{dataset}", root=store_root,
                   pilot_seconds=_load_run(ck / used).seconds if used else 0.0)
    v = g.verdict
    print(f"{target}: {'CONVERGED' if v['converged'] else 'NOT CONVERGED: ' + '; '.join(v['reasons'])}"
          f" ({g.provenance['wall_seconds'] / 60:.1f} min) -> {g.path}", file=sys.stderr)
    return g.provenance


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", nargs="*", help="targets ENTRY:DATA (default: all)")
    p.add_argument("--runs", type=int, default=RUNS)
    p.add_argument("--group", type=int, default=RUNS, help="runs vmapped in one jit (after one "
                   "pilot run)")
    p.add_argument("--particles", type=int)
    p.add_argument("--mcmc-steps", type=int)
    p.add_argument("--draws", type=int, default=DRAWS_PER_RUN)
    p.add_argument("--checkpoints", default=str(ROOT / "reports" / "gold" / "runs"),
                   help="one .npz a finished run, by target hash (committed: a later sitting, "
                   "on another machine, continues from them)")
    p.add_argument("--handoffs", help="folder of the comparisons' hand-overs (NCVMP's spectral "
                   "points, …): read when there, else computed and written, so that a sitting on "
                   "another machine samples the same target")
    p.add_argument("--revalidate", action="store_true", help="validate and store again from the "
                   "checkpointed runs (a changed check), even where a reference is stored")
    p.add_argument("--store", help="folder of the stored references (default: the package's)")
    p.add_argument("--max-minutes", type=float, default=float("inf"),
                   help="start no new group of runs after this (the sitting's budget)")
    args = p.parse_args(argv)
    import jax

    jax.config.update("jax_enable_x64", True)
    deadline = time.time() + 60 * args.max_minutes
    targets = args.only or list(TARGETS)
    for t in targets:
        if t not in TARGETS:
            print(f"gold_references: unknown target {t!r} (known: {', '.join(TARGETS)})",
                  file=sys.stderr)
            return 2
    for t in targets:
        cfg = TARGETS[t]
        compute(t, runs=args.runs, group=args.group,
                particles=args.particles or cfg["particles"],
                mcmc_steps=args.mcmc_steps or cfg["mcmc_steps"],
                checkpoints=Path(args.checkpoints), deadline=deadline, draws=args.draws,
                handoffs=args.handoffs and Path(args.handoffs),
                store_root=args.store and Path(args.store), revalidate=args.revalidate)
    return 0


if __name__ == "__main__":
    sys.exit(main())
