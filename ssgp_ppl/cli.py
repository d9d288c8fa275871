"""``ssgp-ppl``: list catalog models, fit one on a data set, compare its VI with NUTS.

Any bad input is one line on stderr and exit status 2 (``--debug`` shows the traceback).
Progress bars go to stderr; tables to stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import unicodedata
from pathlib import Path

from ssgp_ppl import __version__  # imports JAX without starting a backend
from ssgp_ppl.entry import CATALOG_ENV
from ssgp_ppl.errors import SEED_MAX, one_line
from ssgp_ppl.inference import methods, sizing  # imports JAX without starting a backend
from ssgp_ppl.runtime import rundir  # imports JAX without starting a backend
from ssgp_ppl.runtime.checkpoint import DEFAULT_EVERY

CHAINS_DEVICES = 4  # host devices so that 4 NUTS chains run in parallel


def _integer(low: int, what: str, high: int | None = None):
    """argparse type: an integer in [``low``, ``high``] (``what`` names it in the error)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
        return value

    return parse


_positive = _integer(1, "a positive integer")
_non_negative = _integer(0, "an integer >= 0")
_seed = _integer(0, f"an integer from 0 to {SEED_MAX}", SEED_MAX)


def _seconds(text: str) -> float:
    """argparse type: a positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text}")
    return value


def _sized(args, entry, data):
    """``entry`` with ``m = "auto"`` sized to ``data`` within ``--budget`` seconds, the choice
    printed on stderr (:func:`ssgp_ppl.inference.sizing.resolve`); a resumed run keeps the m its
    run.json records (sized when it began, perhaps on another machine)."""
    if getattr(args, "sizing", None) is not None and entry.m_auto:
        kept = sizing.apply(entry, args.sizing)
        print(f"ssgp-ppl: {entry.name}: m = {kept.sizing.m} as sized when the run began",
              file=sys.stderr)
        return kept
    method = getattr(args, "method", None)  # compare: the entry's own method, its steps set
    sized = sizing.resolve(entry, data, budget=args.budget, seed=args.seed, method=method,
                           steps=args.steps if args.command == "fit" else None)
    if sized.sizing is not None and sized is not entry:
        print(f"ssgp-ppl: {entry.name}: {sized.sizing.text()}", file=sys.stderr)
    return sized


# the fit arguments a run directory's run.json records (what --resume restores)
RUN_ARGS = ("model", "data", "target", "split", "subsample", "data_dir", "x_scaling",
            "extra_noise_inputs", "threshold", "seed", "sets", "x64", "method", "steps",
            "select_beta", "checkpoint_every", "inputs", "drop", "dropna", "encode", "dates",
            "test", "log_target", "budget")
TABLE_ARGS = ("inputs", "drop", "dropna", "encode", "dates", "test")
OPTIONAL_RUN_ARGS = (*TABLE_ARGS, "log_target", "budget")  # a run.json may lack them: defaults
# the compare arguments its run.json records (what compare --resume restores)
COMPARE_ARGS = tuple(k for k in RUN_ARGS if k not in ("method", "select_beta",
                                                      "checkpoint_every")) + \
    ("samples", "chains", "fresh_reference")


def _resume_args(args, defaults) -> None:
    """``fit --resume DIR`` / ``compare --resume DIR``: the recorded run's arguments, output into
    DIR. Any run argument given with --resume is an error (it would be ignored)."""
    from ssgp_ppl.errors import SSGPError

    keys = RUN_ARGS if args.command == "fit" else COMPARE_ARGS
    where = Path(args.resume) if args.command == "fit" else Path(args.resume) / rundir.STAGING
    path = where / "run.json"
    given = [k for k in (*keys, "out") if getattr(args, k) != getattr(defaults, k)]
    if given:
        flags = ", ".join("MODEL" if k == "model" else "--set" if k == "sets"
                          else "--" + k.replace("_", "-") for k in given)
        raise SSGPError(f"--resume {args.resume} continues the run recorded in {path} with its "
                        f"own settings; drop {flags}")
    if not path.is_file():
        if args.command == "compare":  # a finished comparison, or none
            rundir.stage(Path(args.resume), resume=True, overwrite=False)
        raise SSGPError(f"{path} not found: --resume takes a run directory written by "
                        f"`ssgp-ppl {args.command} --out DIR`")
    try:
        saved = json.loads(path.read_text())
        command = saved.get("command", "fit") if isinstance(saved, dict) else args.command
    except ValueError as e:
        raise SSGPError(f"{path} is corrupt ({type(e).__name__}: {e})") from None
    if command != args.command:
        raise SSGPError(f"{path} records an `ssgp-ppl {command}` run, not an `ssgp-ppl "
                        f"{args.command}` one")
    try:
        for k in keys:  # the table options and --log-target may be absent (their defaults)
            value = saved[k] if k not in OPTIONAL_RUN_ARGS else saved.get(k, getattr(args, k))
            if not _run_value_ok(k, value):
                raise TypeError(f"{k!r} is {value!r}")
            setattr(args, k, value)
        catalogs = saved.get("catalog", [])
        if not isinstance(saved.get("sizing", {}), dict):
            raise TypeError(f"'sizing' is {saved['sizing']!r}")
    except (ValueError, KeyError, TypeError) as e:
        raise SSGPError(f"{path} is corrupt ({type(e).__name__}: {e})") from None
    if "sizing" in saved:  # m = "auto" as chosen when the run began
        from ssgp_ppl.inference.fitinfo import Sizing

        try:
            args.sizing = Sizing.from_json(saved["sizing"])
        except SSGPError as e:
            raise SSGPError(f"{path} is corrupt ({e})") from None
    from ssgp_ppl.entry import add_catalog

    for d in catalogs:  # the user catalogs the run's entry came from
        add_catalog(d)
    args.out = args.resume


_RUN_INTS = ("split", "seed", "extra_noise_inputs", "checkpoint_every")
_RUN_OPTIONAL_INTS = ("subsample", "steps", "samples", "chains")
_RUN_BOOLS = ("x64", "select_beta", "dropna", "fresh_reference", "log_target")


def _run_value_ok(key: str, value) -> bool:
    """A run.json value has the type its flag gives (a hand-edited file is refused up front)."""
    from ssgp_ppl.settings import is_int, is_number

    if key in _RUN_INTS:
        return is_int(value) and value >= 0
    if key in _RUN_OPTIONAL_INTS:
        return value is None or (is_int(value) and value >= 1)
    if key in _RUN_BOOLS:
        return isinstance(value, bool)
    if key == "threshold":
        return value is None or is_number(value)
    if key == "budget":
        return value is None or (is_number(value) and value > 0)
    if key == "sets":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    return value is None or isinstance(value, str)


def _run_record(args, keys=RUN_ARGS, entry=None) -> dict:
    """run.json: the run's arguments ``keys``, with files and directories as absolute paths (so
    that ``--resume`` works from any directory), the user catalogs in use and, where ``entry``'s m
    was sized to the data, its sizing (``--resume`` keeps that m)."""
    rec = {k: getattr(args, k) for k in keys}
    for k in ("model", "data", "test"):
        p = Path(str(rec[k])).expanduser()
        if rec[k] is not None and p.suffix and p.exists():  # a file, not a catalog/data set name
            rec[k] = str(p.resolve())
    if rec["data_dir"]:
        rec["data_dir"] = str(Path(rec["data_dir"]).expanduser().resolve())
    from ssgp_ppl.entry import catalog_dirs

    rec["catalog"] = [str(d) for d in catalog_dirs()[1:]]
    if entry is not None and entry.sizing is not None:
        rec["sizing"] = entry.sizing.to_json()
    return rec


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", help="show tracebacks")
    common.add_argument("--catalog", action="append", default=[], metavar="DIR",
                        help="a directory of your own catalog entries (*.toml), added to the "
                        f"built-in ones (repeatable; also ${CATALOG_ENV}, separated by "
                        f"{os.pathsep!r})")
    p = argparse.ArgumentParser(prog="ssgp-ppl", description=__doc__.splitlines()[0],
                                parents=[common])
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    def add(name, **kw):
        return sub.add_parser(name, parents=[common], **kw)

    m = add("models", help="list the catalog entries")
    m.add_argument("--json", action="store_true", help="machine-readable output")
    m.add_argument("--long", "-l", action="store_true",
                   help="add each entry's objective and description (lines as wide as they are)")
    m.add_argument("--guides", action="store_true", help="list the registered guides and the "
                   "settings of their [inference.svi.<guide>] tables instead")

    def data_args(q, resumable=False):
        q.add_argument("model", nargs="?" if resumable else None,
                       help="catalog entry name (see `ssgp-ppl models`) or a .toml path")
        q.add_argument("--data", required=not resumable, help="data set name or CSV/Parquet path")
        q.add_argument("--target", help="target column of a CSV/Parquet file (default: last)")
        q.add_argument("--split", type=_seed, default=0, help="split index / seed (default 0)")
        q.add_argument("--subsample", type=_positive, help="rows to draw from a large data set")
        q.add_argument("--data-dir", help="data directory (default: $SSGP_PPL_DATA or ../shared/data)")
        q.add_argument("--x-scaling", choices=("standard", "minmax"),
                       help="input scaling fitted on the training split: standard (zero mean, "
                       "unit sd) or minmax (to [-1, 1], as Tan et al. 2016, §7); default: the entry's "
                       "[data] x_scaling")
        q.add_argument("--extra-noise-inputs", type=int, default=0, metavar="N",
                       help="append N uniform noise inputs (Tan et al. 2016, §7.4, §7.6)")
        q.add_argument("--log-target", action="store_true",
                       help="fit the model to log(target) of a positive target (prices, wages); "
                       "predictions, intervals and metrics are back-transformed to the target's "
                       "units (gaussian-likelihood entries)")
        q.add_argument("--threshold", type=float,
                       help="binary-likelihood entries: the class is 1 where the target exceeds "
                       "this (default: the training split's median)")
        t = q.add_argument_group("your own table (a CSV/Parquet --data file)")
        t.add_argument("--inputs", metavar="COL,…", help="the input columns (default: all but "
                       "the target)")
        t.add_argument("--drop", metavar="COL,…", help="columns that are not inputs")
        t.add_argument("--dropna", action="store_true",
                       help="drop rows with a missing value in a used column (default: an error)")
        t.add_argument("--encode", choices=("onehot",),
                       help="text (categorical) columns become one 0/1 input per category")
        t.add_argument("--dates", choices=("numeric",),
                       help="date columns become days since 1970-01-01")
        t.add_argument("--test", metavar="FILE", help="score on this file's rows (same columns); "
                       "every row of --data then trains")
        q.add_argument("--seed", type=_seed, default=0, help="random seed (default 0)")
        q.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                       help="override a catalog key, e.g. --set m=50 --set svi.lr=0.005")
        q.add_argument("--x64", action="store_true", help="compute in float64")
        q.add_argument("--force", action="store_true",
                       help="run a fit whose memory estimate exceeds this machine's memory")
        q.add_argument("--budget", type=_seconds, metavar="SECONDS",
                       help="for an entry with m = \"auto\": the seconds its fit is sized to (an "
                       "estimate from every step of the step budget, not a limit; default "
                       f"{sizing.DEFAULT_BUDGET:g})")
        q.add_argument("--no-progress", action="store_true", help="no progress bars")

    f = add("fit", help="fit a catalog model, write metrics.json and posterior.nc")
    data_args(f, resumable=True)
    f.add_argument("--method", choices=tuple(methods.REGISTRY),
                   help="default: the entry's own")
    f.add_argument("--steps", type=_positive, help="SVI/ML steps, or NUTS draws per chain")
    f.add_argument("--out", help="output directory (default runs/<model>-<data>-<method>)")
    f.add_argument("--overwrite", action="store_true",
                   help="replace a run already in --out (without it, a finished run there is "
                   "refused and an interrupted one says to --resume)")
    f.add_argument("--select-beta", action="store_true",
                   help="pick β on a validation split of the training rows over [n, n/2, …, 0.01] "
                   "(Wei et al. 2021, §6.1), write beta_selection.json, then fit with it")
    f.add_argument("--checkpoint-every", type=_non_negative, default=DEFAULT_EVERY, metavar="N",
                   help=f"svi/ml: save the optimiser state to OUT/checkpoint.npz every N steps "
                   f"(atomically; default {DEFAULT_EVERY}; 0: only at the end and on Ctrl-C)")
    f.add_argument("--resume", metavar="DIR",
                   help="continue the run in DIR (its run.json and checkpoint.npz; give no model "
                   "or --data): the same final parameters as an uninterrupted run")

    k = f.add_argument_group("Dask cluster (the optional dask extra)")
    k.add_argument("--dask", nargs="?", const="local", metavar="ADDRESS",
                   help="run the test predictions (and tan_local's local fits) in chunks on a Dask "
                   "cluster: a local one of --dask-workers processes, or the scheduler at ADDRESS "
                   "(tcp://host:8786)")
    k.add_argument("--dask-workers", type=_positive, metavar="N",
                   help="worker processes of the local cluster (default 2)")
    g = f.add_argument_group("training across processes (jax.distributed; svi and ml)")
    g.add_argument("--coordinator", metavar="HOST:PORT",
                   help="address of process 0; start the same command once per process")
    g.add_argument("--num-processes", type=_positive, metavar="N", help="processes in the run")
    g.add_argument("--process-id", type=_non_negative, metavar="I",
                   help="this process's rank, 0 … N-1 (process 0 writes the outputs)")

    c = add("compare", help="fit every method of an entry plus NUTS; write a report")
    data_args(c, resumable=True)
    c.add_argument("--out", help="output directory (default runs/<model>-<data>-compare)")
    c.add_argument("--overwrite", action="store_true",
                   help="replace a run already in --out (without it, a finished run there is "
                   "refused and an interrupted one says to --resume); the old run stays whole "
                   "until the new one is complete")
    c.add_argument("--resume", metavar="DIR",
                   help="continue the interrupted comparison in DIR with its own settings (give "
                   "no model or --data): every method it finished is loaded, not fitted again")
    c.add_argument("--steps", type=_positive, help="SVI/ML steps and NCVMP iterations of every method")
    c.add_argument("--samples", type=_positive, help="the reference's draws per chain")
    c.add_argument("--chains", type=_positive, help="the reference's chains")
    c.add_argument("--fresh-reference", action="store_true",
                   help="compute the reference here even where a stored gold reference matches")
    c.add_argument("--sbc", type=_positive, metavar="N",
                   help="add simulation-based calibration of N simulations (`ssgp-ppl sbc` at "
                   "its defaults, --set on top, on the comparison's training inputs) into "
                   "OUT/sbc and its section to the report")

    b = add("sbc", help="simulation-based calibration of an entry's methods on a data set's "
            "inputs")
    b.add_argument("model", help="catalog entry name or a .toml path")
    b.add_argument("--data", default="pendulum",
                   help="the data set whose training inputs are the design points (default "
                   "pendulum)")
    b.add_argument("--sims", type=_positive, required=True, help="simulations N")
    b.add_argument("--methods", nargs="+", metavar="METHOD",
                   help="vi, vi_stacked, ncvmp, reference (default: all that apply)")
    b.add_argument("--out", help="output directory (default runs/<model>-<data>-sbc): "
                   "sbc.nc, sbc.json, sbc.png and the checkpoint")
    b.add_argument("--rows", type=_positive, default=40, help="design points (default 40)")
    b.add_argument("--draws", type=_positive, default=99,
                   help="posterior draws L per simulation (default 99)")
    b.add_argument("--batch", type=_positive, default=20,
                   help="simulations per compiled batch (default 20)")
    b.add_argument("--max-minutes", type=float, metavar="MIN",
                   help="stop before a batch that would end past MIN minutes")
    b.add_argument("--workers", type=_positive, default=1,
                   help="processes running batches side by side, a CPU core each (default 1)")
    b.add_argument("--store", metavar="DIR",
                   help="a folder of reference batches shared between entries with the same "
                   "model (differing in their guide alone): taken from it where present, left "
                   "in it otherwise")
    b.add_argument("--resume", action="store_true", dest="sbc_resume",
                   help="continue the run whose checkpoint is in --out")
    b.add_argument("--seed", type=_seed, default=0, help="random seed (default 0)")
    b.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a catalog key on top of the small defaults (m=6, "
                   "smc.mcmc_steps=10, smc.warmup=100, at most 2 SVI paths), e.g. --set "
                   "svi.steps=2000")
    b.add_argument("--x64", action="store_true", help="compute in float64")
    b.add_argument("--no-progress", action="store_true", help="no progress bars")
    return p


def _distributed(args) -> tuple | None:
    """(coordinator, processes, rank) of ``fit --coordinator …``, checked; None without it."""
    from ssgp_ppl.errors import SSGPError

    given = [getattr(args, k, None) for k in ("coordinator", "num_processes", "process_id")]
    if all(v is None for v in given):
        return None
    if any(v is None for v in given):
        raise SSGPError("training across processes needs all of --coordinator HOST:PORT, "
                        "--num-processes N and --process-id I")
    coordinator, processes, rank = given
    host, _, port = coordinator.rpartition(":")
    if not host or not port.isdigit():
        raise SSGPError(f"--coordinator must be HOST:PORT, got {coordinator!r}")
    if rank >= processes:
        raise SSGPError(f"--process-id must be below --num-processes {processes}, got {rank}")
    return coordinator, processes, rank


def _check_dask(args) -> None:
    from ssgp_ppl.errors import SSGPError

    if getattr(args, "dask_workers", None) is not None and not args.dask:
        raise SSGPError("--dask-workers sizes the local cluster of --dask; give --dask too")
    if getattr(args, "dask", None) and args.dask != "local" and ":" not in args.dask:
        raise SSGPError(f"--dask takes a scheduler address (tcp://host:8786), got {args.dask!r}; "
                        "put a bare --dask after the model name")


def _setup_jax(x64: bool, distributed: tuple | None = None) -> None:
    """Host devices for parallel NUTS chains (one process), the float width, and
    ``jax.distributed`` (before any computation)."""
    flags = os.environ.get("XLA_FLAGS", "")
    if distributed is None and "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={CHAINS_DEVICES}"
    import jax

    if x64:
        jax.config.update("jax_enable_x64", True)
    if distributed is not None:
        coordinator, processes, rank = distributed
        jax.distributed.initialize(coordinator_address=coordinator, num_processes=processes,
                                   process_id=rank, initialization_timeout=120)


def _load_data(args, entry):
    from ssgp_ppl.data.datasets import load
    from ssgp_ppl.data.tables import TableOptions

    table = TableOptions.of(args.inputs, args.drop, args.dropna, args.encode, args.dates)
    return load(args.data, split=args.split, data_dir=args.data_dir, target=args.target,
                table=table, test=args.test,
                subsample=args.subsample,
                x_scaling=args.x_scaling or entry.config["data"]["x_scaling"],
                extra_noise_inputs=args.extra_noise_inputs,
                target_kind=entry.lik.target, threshold=args.threshold,
                log_target=bool(args.log_target))


def _entry(args):
    from ssgp_ppl.entry import load_entry

    entry = load_entry(args.model)
    return entry.with_overrides(args.sets) if args.sets else entry


_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def printable(text: str) -> str:
    """``text`` with its control characters (terminal escape sequences, newlines, bidirectional
    overrides) written as escapes (``\\x1b``, ``\\n``): text from a catalog file can neither
    drive the terminal nor break a table's lines."""
    return "".join(ch.encode("unicode_escape").decode("ascii")
                   if ch in _BIDI or unicodedata.category(ch) in ("Cc", "Zl", "Zp") else ch
                   for ch in text)


def _terminal_width() -> int:
    import shutil

    return shutil.get_terminal_size((100, 24)).columns


def _print_table(rows: list[dict], cols: list[str], width: int | None = None) -> None:
    """Rows under a header, columns padded; with ``width``, the widest text column is cut with
    "…" so that a line fits in that many characters."""
    def fmt(v):
        return printable(f"{v:.4g}" if isinstance(v, float) else str(v))

    cells = [[fmt(r.get(c, "")) for c in cols] for r in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(cols)]
    over = 0 if width is None else sum(widths) + 2 * (len(cols) - 1) - width
    if over > 0:
        i = max(range(len(cols)), key=lambda k: widths[k])
        keep = max(len(cols[i]), widths[i] - over)
        for r in cells:
            if len(r[i]) > keep:
                r[i] = r[i][:keep - 1] + "…"
        widths[i] = max(len(cols[i]), *(len(r[i]) for r in cells))
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)).rstrip())
    for r in cells:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())


TABLE = ["model", "method", "dataset", "n_train", "n_test", "rmse", "nmse", "mnlp", "crps",
         "coverage_50", "coverage_90", "nll", "steps", "converged", "improvement_per_1k",
         "fit_seconds"]


def _columns(rows: list[dict]) -> list[str]:
    """The table's columns: the regression metrics where there are any, else the classifier's /
    count model's (error rate, Brier score, MRE), with the exact test NLL in every case."""
    cols = [c for c in TABLE if any(c in r for r in rows)]
    extra = [c for c in ("objective", "beta", "error_rate", "brier", "mre")
             if any(c in r for r in rows)]
    return cols[:-1] + extra + cols[-1:]


def cmd_models(args) -> int:
    import warnings

    from ssgp_ppl.api import catalog, guides
    from ssgp_ppl.entry import BUILTIN_CATALOG

    if args.guides:
        rows = guides()
        if args.json:
            print(json.dumps(rows, indent=2, ensure_ascii=False))
            return 0
        for r in rows:
            r["settings"] = ", ".join(f"{k} = {json.dumps(f['default'], ensure_ascii=False)}"
                                      for k, f in r["settings"].items()) or "-"
        _print_table(rows, ["name", "settings", "description"])
        return 0

    with warnings.catch_warnings(record=True) as skipped:
        warnings.simplefilter("always")
        rows = catalog()
    for w in skipped:  # user files that are not entries: one line each, the rest listed
        print(f"ssgp-ppl: skipped {printable(str(w.message))}", file=sys.stderr)
    if args.json:
        print(json.dumps(rows, indent=2, ensure_ascii=False))
    else:
        cols = ["name", "use when", "methods", "guide"]
        if args.long:
            cols += ["objective", "description"]
        if any(Path(r["file"]).parent != BUILTIN_CATALOG for r in rows):
            cols.append("file")
        _print_table(rows, cols, width=None if args.long else _terminal_width())
    return 0


def cmd_fit(args) -> int:
    import jax

    from ssgp_ppl.errors import SSGPError

    entry = _entry(args)
    data = _load_data(args, entry)
    entry = _sized(args, entry, data)
    m = methods.get(args.method or entry.methods[0])
    method = m.name
    writer = jax.process_index() == 0  # across processes (jax.distributed) rank 0 writes
    if jax.process_count() > 1 and (not m.distributed or args.select_beta or args.dask):
        able = ", ".join(k for k, v in methods.REGISTRY.items() if v.distributed)
        extra = " --select-beta" if args.select_beta else " --dask" if args.dask else ""
        raise SSGPError(f"training across processes is for methods {able} without "
                        f"--select-beta or --dask, not {method}{extra}")
    out = Path(args.out or f"runs/{entry.name}-{data.name}-{method}")
    if not writer:
        return _fit_in(args, entry, data, m, out, writer)
    with rundir.hold(out):
        rundir.check_free(out, resume=bool(args.resume), overwrite=args.overwrite)
        return _fit_in(args, entry, data, m, out, writer)


def _fit_in(args, entry, data, m, out: Path, writer: bool) -> int:
    """``fit`` in the run directory ``out`` (held by this process)."""

    from ssgp_ppl.errors import SSGPError
    from ssgp_ppl.pipeline import fit, metrics_record
    from ssgp_ppl.runtime.checkpoint import Checkpoint
    from ssgp_ppl.runtime.io import write_json

    method = m.name
    out.mkdir(parents=True, exist_ok=True)
    if not args.resume and writer:
        write_json(out / "run.json", _run_record(args, entry=entry))
    checkpoint = None
    if m.checkpoints:  # with --checkpoint-every 0: saved only at the end or on Ctrl-C
        resume = bool(args.resume) and bool(rundir.checkpoints(out))
        if args.resume and not resume:
            print(f"ssgp-ppl: no checkpoint in {out} (stopped before training began): "
                  "starting from step 0", file=sys.stderr)
        checkpoint = Checkpoint(out / "checkpoint.npz", every=args.checkpoint_every or 10**12,
                                resume=resume)
    elif args.resume:
        raise SSGPError(f"method {method!r} does not checkpoint: nothing to resume in {out}")
    if args.select_beta:
        from ssgp_ppl.inference.selection import record, select_beta

        saved = out / "beta_selection.json"
        if args.resume and saved.is_file():  # the selection finished before the interruption
            beta = json.loads(saved.read_text())["beta"]
        else:
            sel = select_beta(entry, data, seed=args.seed, steps=args.steps)
            write_json(saved, record(sel))
            beta = sel.beta
            print(f"β = {sel.beta:g} (validation {sel.criterion} {min(sel.scores):.4g}, "
                  f"{len(sel.grid)} values, {sel.seconds:.0f} s)", file=sys.stderr)
        entry = entry.with_overrides([f"inference.svi.beta={beta!r}"])
    if args.dask:
        from ssgp_ppl.runtime.cluster import client

        cluster = client(None if args.dask == "local" else args.dask, workers=args.dask_workers or 2)
    else:
        cluster = contextlib.nullcontext()
    with cluster as dask_client, _precision_warnings() as precision:
        res = fit(entry, data, method, seed=args.seed, steps=args.steps, progress=not args.no_progress,
                  checkpoint=checkpoint, client=dask_client, force=args.force)
    record = metrics_record(res, data)
    name = res.info.stop_signal or "SIGINT"
    stopped = _stop_status(name)
    if not writer:
        return stopped if res.info.interrupted else 0
    write_json(out / "metrics.json", record)
    res.save(out / "posterior.nc")  # the DataTree plus what ssgp_ppl.load needs to predict
    _print_table([record], _columns([record]))
    if "stop" in record:
        print(f"{method}: {record['stop']}")
    if data.y_scaler.log:
        print(printable(_log_note(data)))
    if "calibration" in record:
        print(f"ssgp-ppl: warning: {method}: {record['calibration']}", file=sys.stderr)
    for text in precision:
        print(f"ssgp-ppl: warning: {text}", file=sys.stderr)
    print(f"wrote {out / 'metrics.json'} and {out / 'posterior.nc'}", file=sys.stderr)
    if res.info.interrupted:
        print(f"ssgp-ppl: stopped by {name} at step {res.info.steps}; checkpoint and metrics so "
              f"far written; continue with: ssgp-ppl fit --resume {out}", file=sys.stderr)
        return stopped
    return 0


def _log_note(data) -> str:
    """The line saying a target was fitted on its logarithm."""
    return (f"target {data.target_name!r} log-transformed: fitted on log({data.target_name}); "
            "predictions and metrics are in its original units")


@contextlib.contextmanager
def _precision_warnings():
    """Collects the fit's :class:`~ssgp_ppl.errors.PrecisionWarning` texts (each once, in order)
    into the yielded list, for one line each after the table; other warnings are shown as
    usual."""
    import warnings

    from ssgp_ppl.errors import PrecisionWarning

    texts: list[str] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", PrecisionWarning)
            yield texts
    finally:  # outside the recording: shown there, a warning would be recorded again
        for w in caught:
            if issubclass(w.category, PrecisionWarning):
                if str(w.message) not in texts:
                    texts.append(str(w.message))
            else:
                warnings.showwarning(w.message, w.category, w.filename, w.lineno)


def _stop_status(name: str) -> int:
    """The exit status of a run stopped by signal ``name``: 128 + the signal (130 SIGINT, 143
    SIGTERM, 129 SIGHUP), as a shell reports it."""
    import signal

    return 128 + signal.Signals[name].value


class _Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP: raised where Ctrl-C raises KeyboardInterrupt."""

    def __init__(self, name: str):
        super().__init__(name)
        self.signal = name


@contextlib.contextmanager
def _stop_on_signals():
    """SIGTERM and SIGHUP raise :class:`_Stopped` in the main thread, as Ctrl-C raises
    KeyboardInterrupt; a second one acts at once (the previous handler), and a signal the
    process inherited as ignored (``nohup``) stays ignored. The previous handlers are restored."""
    import signal

    from ssgp_ppl.runtime import signals

    def stop(num, frame):
        for k, v in previous.items():
            signal.signal(k, v)
        raise _Stopped(signal.Signals(num).name)

    with signals.handled(("SIGTERM", "SIGHUP"), stop) as previous:
        yield


def cmd_compare(args) -> int:
    from ssgp_ppl.report import budget, compare, finished_methods

    out = sbc_result = None
    try:
        with _stop_on_signals(), _precision_warnings() as precision:
            entry = _entry(args)
            if getattr(args, "sbc", None):  # refused before the comparison runs, not after
                from ssgp_ppl.diagnostics import sbc

                sbc.check_entry(sbc.small(entry, sbc.SMALL_SETTINGS + tuple(args.sets)))
            data = _load_data(args, entry)
            entry = budget(entry, data.n_train, steps=args.steps, samples=args.samples,
                           chains=args.chains)
            entry = _sized(args, entry, data)
            out = Path(args.out or f"runs/{entry.name}-{data.name}-compare")
            records = compare(entry, data, out, seed=args.seed, progress=not args.no_progress,
                              fresh_reference=args.fresh_reference, overwrite=args.overwrite,
                              resume=bool(args.resume),
                              run_record=_run_record(args, COMPARE_ARGS, entry) |
                              {"command": "compare"})
            if getattr(args, "sbc", None):
                sbc_result = _compare_sbc(args, data, out)
    except KeyboardInterrupt as e:  # Ctrl-C, SIGTERM, SIGHUP: 128 + the signal, as fit
        name = getattr(e, "signal", "SIGINT")
        stopped = _stop_status(name)
        if out is None:
            print(f"ssgp-ppl: stopped by {name}", file=sys.stderr)
        elif (out / rundir.STAGING).is_dir():
            done = finished_methods(out)
            kept = (f"finished methods kept in {out / rundir.STAGING}: {', '.join(done)}" if done
                    else "no method had finished")
            print(f"ssgp-ppl: stopped by {name}; {kept}; continue with: ssgp-ppl compare "
                  f"--resume {out}", file=sys.stderr)
        else:
            print(f"ssgp-ppl: stopped by {name} after the comparison was written to {out}",
                  file=sys.stderr)
        return stopped
    rows = [{**r, "method": r["reference"]["label"] if r["reference"].get("source") == "gold"
             else f"{r['method']} (reference, "
             f"{'converged' if r['reference']['converged'] else 'NOT CONVERGED'})"}
            if "reference" in r else r for r in records]
    _print_table(rows, _columns(rows))
    if data.y_scaler.log:
        print(printable(_log_note(data)))
    for text in precision:
        print(f"ssgp-ppl: warning: {text}", file=sys.stderr)
    for r in records:
        if "reference" in r and not r["reference"]["converged"]:
            print(f"reference NOT CONVERGED: {'; '.join(r['reference']['reasons'])}",
                  file=sys.stderr)
    if sbc_result is not None:
        from ssgp_ppl.diagnostics import sbc

        tally = [ln for ln in sbc.summary_lines(sbc_result) if not ln.startswith(" ")]
        print(f"simulation-based calibration, {sbc_result.done} simulations: "
              f"{'; '.join(tally)} (each quantity's reading in the report)")
        print(f"wrote {out / sbc.COMPARISON_FOLDER / sbc.TREE} and "
              f"{out / sbc.COMPARISON_FOLDER / sbc.SUMMARY}", file=sys.stderr)
    print(f"wrote {out / 'report.html'} and {out / 'comparison.json'}", file=sys.stderr)
    return 0


def _compare_sbc(args, data, out: Path):
    """``compare --sbc N``: SBC at its defaults on the comparison's training inputs into
    ``out/sbc``, and its section in the report (:func:`ssgp_ppl.diagnostics.sbc.add_to_comparison`)."""
    from ssgp_ppl.diagnostics import sbc
    from ssgp_ppl.entry import load_entry

    entry = sbc.small(load_entry(args.model), sbc.SMALL_SETTINGS + tuple(args.sets))
    return sbc.add_to_comparison(entry, data, out, sims=args.sbc, seed=args.seed,
                                 progress=not args.no_progress)


def cmd_sbc(args) -> int:
    from ssgp_ppl.diagnostics import sbc

    out = Path(args.out or f"runs/{Path(args.model).stem}-{args.data}-sbc")
    settings = tuple(sbc.SMALL_SETTINGS) + tuple(args.sets)
    try:
        with rundir.hold(out), _stop_on_signals():
            res = sbc.run(args.model, args.data, sims=args.sims, methods_=args.methods, out=out,
                          seed=args.seed, draws=args.draws, rows=args.rows, settings=settings,
                          batch=args.batch, max_minutes=args.max_minutes, resume=args.sbc_resume,
                          progress=not args.no_progress, workers=args.workers,
                          store=args.store)
    except KeyboardInterrupt as e:  # Ctrl-C, SIGTERM, SIGHUP: 128 + the signal, as fit
        name = getattr(e, "signal", "SIGINT")
        if (out / sbc.CHECKPOINT).is_file():
            kept = (f"the finished batches are in {out / sbc.CHECKPOINT}; continue with the "
                    "same command and --resume")
        else:
            kept = "no batch had finished; run the same command again"
        print(f"ssgp-ppl: stopped by {name}; {kept}", file=sys.stderr)
        return _stop_status(name)
    print("\n".join(sbc.summary_lines(res)))
    if res.stopped:
        print(f"ssgp-ppl: {res.stopped}: {res.done} of {res.sims} simulations done; continue "
              "with --resume", file=sys.stderr)
    print(f"wrote {out / sbc.TREE}, {out / sbc.SUMMARY} and {out / sbc.FIGURE}", file=sys.stderr)
    return 0


PIPE_CLOSED = 141  # 128 + SIGPIPE: what a shell reports for a program whose reader went away


def main(argv: list[str] | None = None) -> int:
    """The command line; a reader that closes the output early (``ssgp-ppl models | head``) ends
    it quietly with status 141."""
    try:
        try:
            with _own_warnings():
                return _main(argv)
        finally:  # the output is buffered in a pipe: a closed one shows here, not at exit
            sys.stdout.flush()
    except BrokenPipeError:
        with contextlib.suppress(OSError, ValueError, AttributeError):  # the rest goes nowhere
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return PIPE_CLOSED


def _show_warning(message, category, filename, lineno, file=None, line=None):
    """The package's own warnings (data, catalog) as one ``ssgp-ppl: warning:`` line; any other
    as Python shows it."""
    from ssgp_ppl.errors import CatalogWarning, DataWarning

    if issubclass(category, (CatalogWarning, DataWarning)):
        print(f"ssgp-ppl: warning: {printable(str(message))}", file=file or sys.stderr)
    else:
        _python_showwarning(message, category, filename, lineno, file, line)


_python_showwarning = None


@contextlib.contextmanager
def _own_warnings():
    """Show the package's warnings with :func:`_show_warning` while the command runs."""
    import warnings

    from ssgp_ppl.errors import CatalogWarning, DataWarning

    global _python_showwarning
    with warnings.catch_warnings():  # restores showwarning and the filters afterwards
        _python_showwarning = warnings.showwarning
        warnings.showwarning = _show_warning
        for category in (CatalogWarning, DataWarning):  # always a line, never an exception
            warnings.simplefilter("always", category)
        yield


def _main(argv: list[str] | None) -> int:
    os.environ.setdefault("MPLBACKEND", "Agg")  # the report's figures are files, never windows
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command in ("fit", "compare") and not args.resume and (
            args.model is None or args.data is None):
        parser.error(f"{args.command} needs a model and --data (or --resume DIR)")
    try:
        from ssgp_ppl.errors import SSGPError

        try:
            from ssgp_ppl.entry import add_catalog

            for d in args.catalog:
                add_catalog(d)
            if getattr(args, "resume", None):  # before JAX starts: the run may be float64
                _resume_args(args, parser.parse_args([args.command, "--resume", args.resume]))
            if args.command != "models":
                _check_dask(args)
                _setup_jax(args.x64, _distributed(args))
            return {"models": cmd_models, "fit": cmd_fit, "compare": cmd_compare,
                    "sbc": cmd_sbc}[args.command](args)
        except BrokenPipeError:  # the reader of the output went away: see main
            raise
        except (SSGPError, OSError, ValueError) as e:  # bad input: one line, exit 2
            if args.debug:
                raise
            if isinstance(e, OSError) and e.filename and e.strerror:
                msg = f"{e.filename}: {e.strerror}"
            else:
                msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            print(f"ssgp-ppl: error: {printable(msg)}", file=sys.stderr)
            return 2
        except Exception as e:  # a bug, not bad input: say so; the traceback with --debug
            if args.debug:
                raise
            text = one_line(e)[:300]
            if isinstance(e, MemoryError) or "RESOURCE_EXHAUSTED" in text:  # host or XLA memory
                print("ssgp-ppl: error: out of memory; lower m, subsample the rows or pick a "
                      "smaller guide", file=sys.stderr)
                return 1
            print(f"ssgp-ppl: internal error ({type(e).__name__}: {printable(text)}); please report it with "
                  "the command and the traceback that --debug prints", file=sys.stderr)
            return 1
    except KeyboardInterrupt:
        print("ssgp-ppl: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["main"]
