"""Test NMSE and MNLP of the variational entries as the number of features m grows.

  python benchmarks/mscan.py                       # the sets and entries below; resumes
  python benchmarks/mscan.py --entries svbssgp_collapsed --sets pendulum --m 10,20

A Bayesian model with more features is closer to the full GP it approximates, so its test scores
should not get worse with m. The papers' guides over α = (θ, s) (``svbssgp``: joint affine,
``vssgp``: mean field) do: a Gaussian q(θ, s) couples s to θ only linearly, and with many features
the ELBO prefers q(θ) near the prior with y explained as noise. The collapsed entries keep the same
guides over θ and give s its exact conditional p(s | θ, y) (``svbssgp_collapsed``,
``vssgp_collapsed``). Each result is written atomically to ``reports/mscan/<set>/<entry>-m<m>.json``
(a rerun skips those there; ``--overwrite`` measures again), and ``reports/mscan/mscan.json``
gathers them with, per (set, entry), whether NMSE is non-increasing in m within ``NOISE``.
One thread, like ``benchmarks/peers.py``; kin40k and protein use a 5,000-row subsample (about 4,500
training rows: the collapsed step costs O(n m²)).

  python benchmarks/mscan.py --memory              # peak memory of each fit at the largest m

``--memory`` fits each (set, entry) at the largest ``--m`` again in a child process with
``MEMORY_STEPS`` steps (a fit's arrays do not grow with its steps) and records the child's peak
resident memory, its resident memory before the fit (Python, JAX and the data) and
``ssgp_ppl.runtime.resources.estimate``'s figure, in ``reports/mscan/<set>/<entry>-m<m>-memory.json``.
The step time at each m is the scan's own: fit seconds / steps, compilation included.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from ssgp_ppl import pipeline  # noqa: E402
from ssgp_ppl.data import datasets  # noqa: E402
from ssgp_ppl.entry import load_entry  # noqa: E402
from ssgp_ppl.runtime.io import write_json  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "reports" / "mscan"
SETS = {"pendulum": None, "autompg": None, "kin40k": 5000, "protein": 5000}  # set -> subsample
ENTRIES = ("svbssgp_collapsed", "vssgp_collapsed", "svbssgp", "vssgp")
MS = (10, 20, 50, 100)
NOISE = 0.02  # NMSE may rise by this much from one m to the next and still count as flat
MEMORY_STEPS = 300


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def measure(set_name: str, entry_name: str, m: int, *, out: Path, overwrite: bool, seed: int) -> dict:
    path = out / set_name / f"{entry_name}-m{m}.json"
    if path.exists() and not overwrite:
        return json.loads(path.read_text())
    ds = datasets.load(set_name, split=0, subsample=SETS[set_name])
    entry = load_entry(entry_name).with_overrides([f"m={m}"])
    log(f"{set_name} · {entry_name} · m = {m} (n = {ds.n_train}) …")
    t = time.perf_counter()
    post = pipeline.fit(entry, ds, None, seed=seed, progress=False)
    rec = {"set": set_name, "entry": entry_name, "m": m, "n_train": int(ds.n_train),
           "subsample": SETS[set_name], "seed": seed,
           **{k: round(float(post.metrics[k]), 6) for k in ("nmse", "mnlp", "coverage_90")},
           "fit_seconds": round(post.info.fit_seconds, 3), "steps": post.info.steps,
           "wall_seconds": round(time.perf_counter() - t, 3)}
    log(f"  NMSE {rec['nmse']:.4f}  MNLP {rec['mnlp']:.4f}  {rec['fit_seconds']:.1f} s")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, rec)
    return rec


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kilobytes


def memory_child(set_name: str, entry_name: str, m: int, seed: int) -> dict:
    """One fit in this process: its peak resident memory against the resident memory before it."""
    from ssgp_ppl.runtime import resources

    ds = datasets.load(set_name, split=0, subsample=SETS[set_name])
    entry = load_entry(entry_name).with_overrides([f"m={m}", f"svi.steps={MEMORY_STEPS}",
                                                   "svi.min_steps=0"])
    before = _peak_rss_mb()
    post = pipeline.fit(entry, ds, None, seed=seed, progress=False)
    est = resources.estimate(entry, ds.n_train, ds.n_features, ds.n_test, post.method)
    return {"set": set_name, "entry": entry_name, "m": m, "n_train": int(ds.n_train),
            "steps": post.info.steps, "rss_before_fit_mb": round(before, 1),
            "peak_rss_mb": round(_peak_rss_mb(), 1),
            "fit_mb": round(_peak_rss_mb() - before, 1), "estimate_mb": round(est.bytes / 2**20, 1)}


def measure_memory(set_name: str, entry_name: str, m: int, *, out: Path, overwrite: bool,
                   seed: int) -> dict:
    path = out / set_name / f"{entry_name}-m{m}-memory.json"
    if path.exists() and not overwrite:
        return json.loads(path.read_text())
    log(f"{set_name} · {entry_name} · m = {m}: memory …")
    proc = subprocess.run([sys.executable, __file__, "--memory-child", set_name, entry_name, str(m),
                           str(seed)], capture_output=True, text=True, check=False)
    if proc.returncode:
        raise SystemExit(proc.stderr[-3000:])
    rec = json.loads(proc.stdout.strip().splitlines()[-1])
    log(f"  peak {rec['peak_rss_mb']:.0f} MB, fit {rec['fit_mb']:.0f} MB")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, rec)
    return rec


def flat(records: list[dict]) -> dict:
    """Per (set, entry): NMSE by m and whether it never rises by more than NOISE."""
    out: dict = {}
    for r in records:
        out.setdefault(r["set"], {}).setdefault(r["entry"], {})[r["m"]] = r["nmse"]
    verdict = {}
    for s, entries in out.items():
        for e, by_m in entries.items():
            ms = sorted(by_m)
            rises = [round(by_m[b] - by_m[a], 4) for a, b in zip(ms, ms[1:], strict=False)]
            verdict[f"{s}/{e}"] = {"m": ms, "nmse": [by_m[k] for k in ms],
                                   "non_increasing": all(r <= NOISE for r in rises)}
    return verdict


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--entries", default=",".join(ENTRIES))
    ap.add_argument("--m", default=",".join(map(str, MS)))
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--overwrite", action="store_true")
    ap.add_argument("--memory", action="store_true",
                    help="measure the peak memory of each fit at the largest --m")
    ap.add_argument("--memory-child", nargs=4, metavar=("SET", "ENTRY", "M", "SEED"),
                    help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.memory_child:
        s, e, m, seed = a.memory_child
        print(json.dumps(memory_child(s, e, int(m), int(seed))))
        return 0
    sets, entries = a.sets.split(","), a.entries.split(",")
    bad = [s for s in sets if s not in SETS]
    if bad:
        print(f"mscan.py: unknown set: {', '.join(bad)} (known: {', '.join(SETS)})", file=sys.stderr)
        return 2
    ms = [int(v) for v in a.m.split(",")]
    for s in sets:
        for e in entries:
            if a.memory:
                measure_memory(s, e, max(ms), out=a.out, overwrite=a.overwrite, seed=a.seed)
                continue
            for m in ms:
                measure(s, e, m, out=a.out, overwrite=a.overwrite, seed=a.seed)
    records = [json.loads(p.read_text()) for p in sorted(a.out.glob("*/*-m*.json"))]
    memory = [r for r in records if "peak_rss_mb" in r]
    records = [dict(r, ms_per_step=round(1e3 * r["fit_seconds"] / r["steps"], 3))
               for r in records if "peak_rss_mb" not in r]
    records.sort(key=lambda r: (r["set"], r["entry"], r["m"]))
    memory.sort(key=lambda r: (r["set"], r["entry"], r["m"]))
    doc = {"format": 1, "noise": NOISE, "records": records, "memory": memory,
           "verdict": flat(records)}
    write_json(a.out / "mscan.json", doc)
    print(json.dumps(doc["verdict"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
