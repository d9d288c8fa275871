"""The m that ``m = "auto"`` chooses on every peers set, without fitting: the pilot and the budget
rule of :mod:`ssgp_ppl.inference.sizing` for each entry that uses it, on split 0.

  python benchmarks/sizing_choices.py                    # every set of benchmarks/peers.py
  python benchmarks/sizing_choices.py --sets pendulum --budget 60

Each (set, entry) record is written atomically to ``reports/sizing/<set>/<entry>.json`` as it is
measured (a rerun skips those there; ``--overwrite`` measures again); ``reports/sizing/
sizing.json`` gathers them. The record is the :class:`~ssgp_ppl.inference.fitinfo.Sizing`: the
chosen m, each affordable candidate's pilot score (leave-one-out log density per row), each
candidate's estimated fit seconds and the ones excluded with why.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers  # noqa: E402  (its data sets, one thread per library)

from ssgp_ppl.entry import list_entries, load_entry  # noqa: E402
from ssgp_ppl.errors import SSGPError, one_line  # noqa: E402
from ssgp_ppl.inference import sizing  # noqa: E402
from ssgp_ppl.runtime.io import write_json  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "reports" / "sizing"


def auto_entries() -> list[str]:
    """The built-in entries whose m is "auto"."""
    return [n for n in list_entries() if load_entry(n).m_auto]


def measure(set_name: str, entry_name: str, *, out: Path, budget: float | None,
            overwrite: bool) -> dict:
    path = out / set_name / f"{entry_name}.json"
    if path.exists() and not overwrite:
        return json.loads(path.read_text())
    entry = load_entry(entry_name)
    ds = peers.load_set(set_name, x_scaling=entry.config["data"]["x_scaling"])
    peers.log(f"{set_name} · {entry_name} (n = {ds.n_train}, d = {ds.n_features}) …")
    rec = {"set": set_name, "entry": entry_name, "n_train": int(ds.n_train),
           "d": int(ds.n_features)}
    try:
        rec["sizing"] = sizing.resolve(entry, ds, budget=budget).sizing.to_json()
        peers.log(f"  m = {rec['sizing']['m']} ({rec['sizing']['pilot_seconds']} s)")
    except SSGPError as e:
        rec["error"] = one_line(e)
        if isinstance(e, sizing.SizingError):  # each m left out, with why
            rec["excluded"] = {str(m): why for m, why in e.excluded.items()}
        peers.log(f"  {rec['error']}")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, rec)
    return rec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default=",".join(peers.SETS),
                    help="comma-separated, of: " + ", ".join(peers.SETS))
    ap.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                    help=f"default: the package's, {sizing.DEFAULT_BUDGET:g} s")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--overwrite", action="store_true")
    a = ap.parse_args(argv)
    sets = [s for s in a.sets.split(",") if s]
    bad = [s for s in sets if s not in peers.SETS]
    if bad:
        print(f"sizing_choices.py: unknown set: {', '.join(bad)}", file=sys.stderr)
        return 2
    records = [measure(s, e, out=a.out, budget=a.budget, overwrite=a.overwrite)
               for s in sets for e in auto_entries()]
    every = [json.loads(p.read_text()) for p in sorted(a.out.glob("*/*.json"))]
    order = list(peers.SETS)
    every.sort(key=lambda r: (order.index(r["set"]) if r["set"] in order else 99, r["entry"]))
    write_json(a.out / "sizing.json", {"format": 1, "machine": peers.machine(),
                                       "default_budget": sizing.DEFAULT_BUDGET,
                                       "ladder": list(sizing.LADDER), "records": every})
    print(json.dumps([{k: r.get(k) for k in ("set", "entry")} | {"m": r.get("sizing", {}).get("m")}
                      for r in records]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
