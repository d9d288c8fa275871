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
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from ssgp_ppl import datasets, pipeline  # noqa: E402
from ssgp_ppl.entry import load_entry  # noqa: E402
from ssgp_ppl.io import write_json  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "reports" / "mscan"
SETS = {"pendulum": None, "autompg": None, "kin40k": 5000, "protein": 5000}  # set -> subsample
ENTRIES = ("svbssgp_collapsed", "vssgp_collapsed", "svbssgp", "vssgp")
MS = (10, 20, 50, 100)
NOISE = 0.02  # NMSE may rise by this much from one m to the next and still count as flat


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
    a = ap.parse_args(argv)
    sets, entries = a.sets.split(","), a.entries.split(",")
    bad = [s for s in sets if s not in SETS]
    if bad:
        print(f"mscan.py: unknown set: {', '.join(bad)} (known: {', '.join(SETS)})", file=sys.stderr)
        return 2
    for s in sets:
        for e in entries:
            for m in (int(v) for v in a.m.split(",")):
                measure(s, e, m, out=a.out, overwrite=a.overwrite, seed=a.seed)
    records = [json.loads(p.read_text()) for p in sorted(a.out.glob("*/*-m*.json"))]
    records.sort(key=lambda r: (r["set"], r["entry"], r["m"]))
    doc = {"format": 1, "noise": NOISE, "records": records, "verdict": flat(records)}
    write_json(a.out / "mscan.json", doc)
    print(json.dumps(doc["verdict"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
