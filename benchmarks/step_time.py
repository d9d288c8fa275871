"""SVI step time of each catalog model next to a pure-JAX reference of the same estimator; prints JSON.

  python benchmarks/step_time.py                                  # every svi / ml entry
  python benchmarks/step_time.py --entries svbssgp ssgp_svi --steps 3000 --out reports/step_time.json
  python benchmarks/step_time.py --x64                            # the same in float64
  python benchmarks/step_time.py --plain-loop --blas-threads 1    # see below

Every catalog entry trained by SVI or type-II ML ("svi" or "ml" in ``[inference] methods``;
entries fitted only by ncvmp / local are skipped) at m = 20 (``--set m=20``), on d = 8 AIRLINE
inputs (``--rows`` rows subsampled, standardised), 1000 rows a step:

* entries with a ``[partitions]`` section: a = 10 of the k-means partitions of the training rows,
  cut at 100 rows and padded to 100 (``kmeans_partitions(x, n // 100, max_size_factor=1.0,
  pad_to=100)``), drawn uniformly each step (p/a-scaled, masked);
* other SVI entries: 1000 rows drawn uniformly with replacement (``batch_size=1000``);
* type-II ML entries: the SSGP marginal likelihood does not factorise over rows (no minibatches),
  so each step is the full data of a fixed random 1000-row subset.

Probit entries see the target thresholded at its median, Poisson entries the arrival delay in
whole minutes clipped at 0 (a count); the step time does not depend on the values.

The package's step is ``ssgp_ppl.inference.runners.run_svi`` with the entry's own model, guide,
objective, particles, lr and lr_halflife, assembled as ``ssgp_ppl.inference.methods.svi`` / ``.ml`` do
(``references.package_parts``; NumPyro SVI, ClippedAdam, ``chunk`` steps per jitted lax.scan).
The reference (``benchmarks/references.py``) is the same estimator written directly in
jax.numpy (``"reference": "hand_written"``), or, for an entry no hand-written reference covers,
the entry's own NumPyro loss as a pure function of the unconstrained parameters with a
hand-written Adam (``"same_loss_plain_loop"``); either runs
with the same batch sampler, key stream and chunking, so the same seed gives the same draws and
updates: ``first_10_losses_max_rel_diff`` (package vs reference, first run) is float rounding,
and ``final_loss`` / ``ref_final_loss`` are the means of the last 100 steps. Steady-state time
per step = (total − first chunk, compilation included) / (steps − first chunk's steps), median
over ``--repeats`` runs (seed = repeat index; the runs alternate in order); ratio = package /
reference. Target of the issue: ratio ≤ 1.3.

``--plain-loop`` also times the package's own loss under the reference's Adam and scan
(``plain_loop_ms_per_step``, ``ratio_to_plain_loop``): package / plain loop is the SVI class and
optimiser's share of a gap, plain loop / hand-written the loss's (handlers, extra work).
``--blas-threads N`` sets OPENBLAS_NUM_THREADS: jaxlib's CPU Cholesky, QR, LU and triangular
solves call OpenBLAS, whose own threads next to XLA's on a small, busy machine made a 200 × 200 QR
take 200 ms instead of 0.5 (the value in force is in the output's header).
"""

from __future__ import annotations

import os
import sys

# --blas-threads N sets OPENBLAS_NUM_THREADS, which OpenBLAS (the LAPACK behind jaxlib's CPU
# cholesky, QR, LU and triangular solves) reads once when it loads: before numpy / jax import it
if "--blas-threads" in sys.argv[:-1]:
    os.environ["OPENBLAS_NUM_THREADS"] = sys.argv[sys.argv.index("--blas-threads") + 1]
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # the package's default (ssgp_ppl/__init__.py)

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402

from ssgp_ppl.runtime.io import print_json  # noqa: E402

ROWS_PER_STEP = 1000
PER_STEP = 10  # a, partitions per step (the catalog's own value for every partition entry)


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def trained_by_gradient(entry) -> str | None:
    """The entry's SVI / type-II ML method (its own if it has both), or None."""
    return next((m for m in entry.methods if m in ("svi", "ml")), None)


def entry_data(entry, data, kind: str):
    """(x, y) of the training split for this entry's likelihood (module docstring)."""
    x, y = data.x_train, data.y_train
    lik = entry.config["model"]["likelihood"]
    if lik == "probit":
        y = (y > np.median(y)).astype(np.float64)
    elif lik == "poisson":
        y = np.maximum(np.round(np.asarray(data.y_scaler.inverse(y))), 0.0)
    elif lik != "gaussian":
        raise SystemExit(f"{entry.name}: no benchmark target for the {lik} likelihood")
    if kind == "full":  # type-II ML: the full data of a fixed random 1000-row subset
        rows = np.random.default_rng(0).choice(len(x), ROWS_PER_STEP, replace=False)
        x, y = x[rows], y[rows]
    return x, y


def steady_ms(seconds: float, first: tuple[int, float], steps: int) -> float:
    return 1e3 * (seconds - first[1]) / (steps - first[0])


def bench_entry(name: str, data, partitions, a, refs) -> dict:
    from ssgp_ppl.entry import load_entry
    from ssgp_ppl.inference.runners import Batching, Schedule, run_svi

    entry = load_entry(name)
    method = trained_by_gradient(entry)
    sets = ["m=20"]
    parted = method == "svi" and entry.config["partitions"]["per_step"] > 0
    if method == "svi" and not parted:
        sets.append(f"inference.svi.batch_size={ROWS_PER_STEP}")
    entry = entry.with_overrides(sets)
    kind = "full" if method == "ml" else "partitions" if parted else "uniform"
    x, y = entry_data(entry, data, kind)
    n = len(x)
    spec = entry.spec(x.shape[1])
    cfg = entry.settings(method)
    model, guide, loss, particles = refs.package_parts(entry, spec, method)
    per_step = 1
    if kind == "partitions":
        per_step = min(PER_STEP, partitions.count)
        draw, aux = refs.sampler(n, partitions=partitions, per_step=per_step)
        sampler = f"partitions a={per_step} × {partitions.blocks.shape[1]} rows"
    elif kind == "uniform":
        draw, aux = refs.sampler(n, batch_size=ROWS_PER_STEP)
        sampler = f"uniform {ROWS_PER_STEP} rows"
    else:
        draw, aux = refs.sampler(n)
        sampler = f"full data {n} rows (type-II ML: no minibatches)"
    try:
        ref = refs.hand_written(entry, spec, method, n_total=n)
    except refs.NotHandWritten as e:
        log(f"{name}: no hand-written reference ({e}); using the plain-loop fallback")
        xb, yb, kw = draw(jax.random.PRNGKey(1), jax.numpy.asarray(x), jax.numpy.asarray(y), aux)
        ref = refs.plain_loop(model, guide, loss, xb, yb, kw)
    refs_by_label = {"ref": ref}
    if a.plain_loop and ref.kind != refs.PLAIN_LOOP:
        xb, yb, kw = draw(jax.random.PRNGKey(1), jax.numpy.asarray(x), jax.numpy.asarray(y), aux)
        refs_by_label["plain"] = refs.plain_loop(model, guide, loss, xb, yb, kw)
    lr, halflife = cfg["lr"], cfg.get("lr_halflife", 0.0)
    labels = ["pkg", *refs_by_label]
    ms_, first_, loss_, trace_ = ({k: [] for k in labels} for _ in range(4))
    for rep in range(a.repeats):
        for which in (labels if rep % 2 == 0 else labels[::-1]):  # alternate the order
            if which == "pkg":
                out = run_svi(model, guide, x, y,
                              Schedule(a.steps, lr=lr, lr_halflife=halflife, chunk=a.chunk,
                                       tol=0.0, min_steps=10**9),
                              batching=Batching(
                                  ROWS_PER_STEP if kind == "uniform" else None,
                                  partitions if kind == "partitions" else None, per_step),
                              loss=loss, seed=rep, progress=False)
            else:
                out = refs.run(refs_by_label[which], draw, aux, x, y, steps=a.steps,
                               chunk=a.chunk, lr=lr, lr_halflife=halflife, seed=rep)
            ms_[which].append(steady_ms(out.seconds, out.first_chunk, out.steps))
            first_[which].append(out.first_chunk[1])
            loss_[which].append(float(np.mean(out.losses[-100:])))
            trace_[which].append(np.asarray(out.losses[:10], np.float64))
    pkg_ms, ref_ms = ms_["pkg"], ms_["ref"]
    pkg_first, ref_first = first_["pkg"], first_["ref"]
    pkg_loss, ref_loss = loss_["pkg"], loss_["ref"]
    # the same seed: the same draws and updates, so the first losses agree to rounding
    early = float(np.max(np.abs(trace_["ref"][0] - trace_["pkg"][0])
                         / np.maximum(np.abs(trace_["pkg"][0]), 1e-12)))
    ms, rms = float(np.median(pkg_ms)), float(np.median(ref_ms))
    row = {"name": name, "method": method,
           "guide": "-" if method == "ml" else entry.settings("svi")["guide"],
           "objective": "type-II ML (marginal likelihood)" if method == "ml"
           else entry.settings("svi")["objective"],
           "particles": particles, "sampler": sampler, "rows_per_step": ROWS_PER_STEP,
           "lr": lr, "lr_halflife": halflife,
           "ms_per_step": ms, "ref_ms_per_step": rms, "ratio": ms / rms,
           "reference": ref.kind, "reference_note": ref.note,
           "first_chunk_s": float(np.median(pkg_first)), "ref_first_chunk_s": float(np.median(ref_first)),
           "runs_ms": pkg_ms, "ref_runs_ms": ref_ms,
           "final_loss": pkg_loss[0], "ref_final_loss": ref_loss[0],
           "first_10_losses_max_rel_diff": early}
    if "plain" in refs_by_label:
        pms = float(np.median(ms_["plain"]))
        row.update(plain_loop_ms_per_step=pms, ratio_to_plain_loop=ms / pms,
                   plain_loop_first_chunk_s=float(np.median(first_["plain"])),
                   plain_loop_runs_ms=ms_["plain"])
    log(json.dumps({k: row.get(k) for k in ("name", "sampler", "ms_per_step", "ref_ms_per_step",
                                            "ratio", "reference", "plain_loop_ms_per_step",
                                            "first_10_losses_max_rel_diff")}))
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--entries", nargs="+", help="catalog entries (default: every svi / ml one)")
    p.add_argument("--rows", type=int, default=100_000, help="AIRLINE rows subsampled")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--chunk", type=int, default=500, help="steps per jitted scan")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", help="also write the JSON here")
    p.add_argument("--x64", action="store_true", help="float64 throughout")
    p.add_argument("--blas-threads", type=int, metavar="N",
                   help="OPENBLAS_NUM_THREADS for this run (default: the environment's); see above")
    p.add_argument("--plain-loop", action="store_true",
                   help="also time the package's own loss with the hand-written Adam and scan "
                   "(same_loss_plain_loop): splits the gap into SVI/optimiser and loss overhead")
    a = p.parse_args()
    if a.steps <= a.chunk:
        p.error("--steps must exceed --chunk (the first chunk, with compilation, is not timed)")
    if a.x64:
        jax.config.update("jax_enable_x64", True)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import numpyro
    import references as refs

    from ssgp_ppl.data.datasets import load
    from ssgp_ppl.entry import list_entries, load_entry
    from ssgp_ppl.inference.partitions import kmeans_partitions

    names = a.entries or [e for e in list_entries() if trained_by_gradient(load_entry(e))]
    for name in names:
        if trained_by_gradient(load_entry(name)) is None:
            p.error(f"{name} is fitted only by {', '.join(load_entry(name).methods)}: no SVI step")
    t0 = time.perf_counter()
    data = load("airline", split=0, test_fraction=0.05, subsample=a.rows)
    n = data.n_train
    t1 = time.perf_counter()
    block = ROWS_PER_STEP // PER_STEP
    partitions = kmeans_partitions(data.x_train, n // block, seed=0, max_size_factor=1.0,
                                   pad_to=block)
    log(f"{n} training rows, d = {data.n_features}, {partitions.count} partitions of "
        f"≤ {block} rows (k-means {time.perf_counter() - t1:.1f} s)")
    rows = []
    for name in names:
        rows.append(bench_entry(name, data, partitions, a, refs))
    res = {"benchmark": "step_time", "jax": jax.__version__, "numpyro": numpyro.__version__,
           "devices": [str(d) for d in jax.devices()], "backend": jax.default_backend(),
           "platform": platform.platform(), "machine": platform.machine(),
           "cpu_count": os.cpu_count(), "x64": bool(a.x64), "dataset": "airline",
           "openblas_num_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
           "rows": a.rows, "n_train": n, "d": data.n_features, "m": 20,
           "rows_per_step": ROWS_PER_STEP, "partitions": partitions.count,
           "steps": a.steps, "chunk": a.chunk, "repeats": a.repeats,
           "timed_steps": a.steps - a.chunk, "target_ratio": 1.3,
           "wall_seconds": time.perf_counter() - t0, "entries": rows}
    print_json(res, a.out)


if __name__ == "__main__":
    main()
