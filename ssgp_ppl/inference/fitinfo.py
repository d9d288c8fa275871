"""What a fit reports besides its draws: :class:`FitInfo`, what every method has, with the
method's own diagnostics in a type of their own (as blackjax's ``NUTSInfo``, ``TemperedSMCInfo``)
and, for a multi-path fit, :class:`PathsInfo`.

``post.info.method`` is an :class:`SVIInfo`, :class:`MLInfo`, :class:`NUTSInfo`, :class:`SMCInfo`,
:class:`NCVMPInfo` or :class:`LocalInfo` (None for a method without one); each such type has a
``kind`` under which a saved posterior stores it (:func:`info_to_json`, :func:`info_from_json`).
:class:`Sizing` records how ``m = "auto"`` was sized to the data (:mod:`ssgp_ppl.inference.sizing`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from ssgp_ppl.errors import SSGPError

INFO_KINDS: dict[str, type[MethodInfo]] = {}  # kind -> its MethodInfo subclass


@dataclass(frozen=True, kw_only=True)
class StopReading:
    """The loss stop rule's last reading (:class:`ssgp_ppl.inference.runners.Trend`): the loss's
    improvement per 1,000 steps, its standard error and the tolerance it was held to (nats;
    the first two None before 3 chunks)."""

    improvement: float | None = None
    improvement_se: float | None = None
    tolerance: float | None = None


@dataclass(frozen=True, kw_only=True)
class MethodInfo:
    """Base of a method's own diagnostics; a subclass with a ``kind`` is saved and loaded."""

    kind: ClassVar[str] = ""

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        if cls.kind:
            INFO_KINDS[cls.kind] = cls


@dataclass(frozen=True, kw_only=True)
class SVIInfo(MethodInfo):
    """``svi``: the objective and its β."""

    kind: ClassVar[str] = "svi"
    objective: str | None = None
    beta: float | None = None


@dataclass(frozen=True, kw_only=True)
class MLInfo(MethodInfo):
    """``ml``: a type-II fit (its stop rule's reading is :attr:`FitInfo.reading`)."""

    kind: ClassVar[str] = "ml"


@dataclass(frozen=True, kw_only=True)
class NUTSInfo(MethodInfo):
    """``nuts``: divergent transitions over all chains."""

    kind: ClassVar[str] = "nuts"
    divergences: int | None = None


@dataclass(frozen=True, kw_only=True)
class SMCInfo(MethodInfo):
    """``smc`` (and a gold reference): each tempered run's log evidence log p(y) and tempering
    steps, the SMC seconds and particles, whether s was integrated out, the max rank R-hat of the
    scalar invariants across runs, and the polishing chains' divergences (None: no chains)."""

    kind: ClassVar[str] = "smc"
    log_evidence: tuple[float, ...] | None = None
    temperatures: tuple[int, ...] | None = None
    smc_seconds: float | None = None
    particles: int | None = None
    collapsed: bool | None = None
    runs_rhat: float | None = None
    divergences: int | None = None


@dataclass(frozen=True, kw_only=True)
class NCVMPInfo(MethodInfo):
    """``ncvmp``: Tan et al. 2016's algorithm (1 or 2), the final bound, and whether an
    unconverged fit stopped at its iteration budget (False: no step size raised the bound)."""

    kind: ClassVar[str] = "ncvmp"
    algorithm: int | None = None
    bound: float | None = None
    budget_reached: bool | None = None


@dataclass(frozen=True, kw_only=True)
class LocalInfo(MethodInfo):
    """``local``: neighbours per test point, whether the neighbourhoods adapt, and, once test
    points are predicted, the local fits run (two per point when they adapt) and how many of them
    stopped before NCVMP's bound rule said converged."""

    kind: ClassVar[str] = "local"
    k: int | None = None
    adapt: bool | None = None
    fits: int | None = None
    unconverged: int | None = None


@dataclass(frozen=True, kw_only=True)
class PathsInfo:
    """A multi-path fit (:mod:`ssgp_ppl.inference.paths`): the number of paths, how they combine, each
    path's weight, LOO log score, final objective and its kind (``paths.OBJECTIVE_KINDS``), rows
    whose PSIS k̂ exceeds ``paths.good_k``, posterior mean σ_n (standardised), and the mixture's
    LOO log score."""

    count: int
    combine: str
    weights: tuple[float, ...]
    loo: tuple[float, ...]
    objective: tuple[float, ...]
    objective_kind: tuple[str, ...] | None = None
    pareto_k_bad: tuple[int, ...] | None = None
    noise: tuple[float | None, ...] | None = None
    stacked_loo: float | None = None


@dataclass(frozen=True, kw_only=True)
class FitInfo:
    """What every method reports besides its draws; None where a method has no such quantity."""

    fit_seconds: float = 0.0
    predict_seconds: float = 0.0
    loo_seconds: float = 0.0  # densities and pointwise log-likelihoods for PSIS-LOO
    steps: int | None = None  # SVI/ML steps, NCVMP iterations
    converged: bool | None = None  # SVI / type-II: by the runners' stop rule; NCVMP: its bound;
    # local: every local fit's bound (known once test points are predicted)
    reading: StopReading | None = None  # SVI / type-II: the stop rule's last reading
    interrupted: bool | None = None  # stopped by Ctrl-C after a whole chunk (checkpointed fits)
    stop_signal: str | None = None  # the signal that stopped it (SIGINT, SIGTERM, SIGHUP)
    partitions: int | None = None  # k-means partitions used
    precision: str | None = None  # the fit vs its precision in words where it warns (linalg.resolution)
    noise_floor: float | None = None  # σ_floor in the target's units (Gaussian SSGP fits)
    jitter: float | None = None  # largest jitter ε × mean diag A at the fitted values (where A is factored)
    method: MethodInfo | None = None  # the method's own diagnostics
    paths: PathsInfo | None = None  # a multi-path fit's paths


@dataclass(frozen=True, kw_only=True)
class Sizing:
    """How ``m = "auto"`` was resolved: the chosen ``m``, the ``budget`` (seconds) it was held to,
    each scored candidate's leave-one-out log density per row (``scores``, m -> nats), the
    candidates left out with why (``excluded``, m -> reason), the pilot's rows and seconds."""

    m: int
    budget: float
    scores: dict[int, float]
    estimated_seconds: dict[int, float]
    excluded: dict[int, str]
    pilot_rows: int
    pilot_seconds: float

    def text(self) -> str:
        """One line for a reader: the choice and the scores behind it."""
        scored = ", ".join(f"{m}: {s:.3f}" for m, s in self.scores.items())
        out = (f"m = {self.m} sized to the data (leave-one-out log density per row of a pilot "
               f"on {self.pilot_rows} rows, {scored}; budget {self.budget:g} s")
        over = [str(m) for m, why in self.excluded.items() if "budget" in why]
        memory = [str(m) for m, why in self.excluded.items() if "budget" not in why]
        if over:
            out += f"; {', '.join(over)} over it"
        if memory:
            out += f"; {', '.join(memory)} over the memory"
        return out + ")"

    def to_json(self) -> dict:
        out = dataclasses.asdict(self)
        for k in ("scores", "estimated_seconds", "excluded"):
            out[k] = {str(m): v for m, v in out[k].items()}
        return out

    @classmethod
    def from_json(cls, d: dict) -> Sizing:
        try:
            return cls(**{**d, **{k: {int(m): v for m, v in d[k].items()}
                                  for k in ("scores", "estimated_seconds", "excluded")}})
        except (TypeError, KeyError, ValueError, AttributeError) as e:
            raise SSGPError(f"sizing: not a sizing record ({e})") from None


def stop_text(info: FitInfo) -> str | None:
    """How an iterative fit stopped, in words (None for a fit without a stop rule): converged, or
    stopped by the step budget with the objective's improvement per 1,000 steps at the end (a
    posterior saved without that reading says "unknown")."""
    if info.converged is None:
        return None
    if info.interrupted:
        return f"stopped by {info.stop_signal or 'SIGINT'} at step {info.steps}"
    if isinstance(info.method, LocalInfo):  # NCVMP's rule in each local fit
        m = info.method
        return (f"converged (the bound of each of the {m.fits} local fits)" if info.converged
                else f"{m.unconverged} of the {m.fits} local fits stopped before their bound "
                "converged")
    if isinstance(info.method, NCVMPInfo):  # NCVMP's bound-based rule
        if info.converged:
            return "converged (relative increase of the bound below its tolerance)"
        if info.method.budget_reached is False:
            return "stopped before the bound converged: no step size raised it"
        return "stopped by the iteration budget before the bound converged"
    r = info.reading
    if r is None or r.improvement is None:
        return ("converged" if info.converged else "stopped by the step budget") + \
            " (improvement per 1,000 steps unknown)"
    tol = "" if r.tolerance is None else f"; tolerance {r.tolerance:.3g}"
    rate = f"{r.improvement:.3g} ± {r.improvement_se or 0.0:.2g} nats per 1,000 steps{tol}"
    if info.converged:
        return f"converged (improvement {rate})"
    if r.improvement > 0:
        return f"stopped by the step budget, objective still improving by {rate}"
    return f"stopped by the step budget, not shown to have converged (improvement {rate})"


# ------------------------------------------------------------------ saved form

_NESTED = ("reading", "method", "paths")


def info_to_json(info: FitInfo) -> dict:
    """``info`` as JSON-able values; the method's diagnostics carry their ``kind``."""
    out = {f.name: getattr(info, f.name) for f in dataclasses.fields(FitInfo)
           if f.name not in _NESTED}
    out["reading"] = None if info.reading is None else dataclasses.asdict(info.reading)
    out["method"] = None if info.method is None else {"kind": info.method.kind,
                                                       **dataclasses.asdict(info.method)}
    out["paths"] = None if info.paths is None else dataclasses.asdict(info.paths)
    return out


def _values(d: dict) -> dict:
    """JSON lists as the tuples the info types hold."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}


def _table(d, what: str) -> dict | None:
    if d is not None and not isinstance(d, dict):
        raise TypeError(f"info.{what}: expected a table or null, got {type(d).__name__}")
    return d


def info_from_json(d: dict) -> FitInfo:
    """The :class:`FitInfo` :func:`info_to_json` wrote (a ValueError or TypeError where it is not
    such a table: an unknown method kind, an unknown key)."""
    d = dict(d)
    reading, method, paths = (_table(d.pop(k, None), k) for k in _NESTED)
    if method is not None:
        method = dict(method)
        kind = method.pop("kind", None)
        if kind not in INFO_KINDS:
            raise ValueError(f"info.method: unknown kind {kind!r}; known: {', '.join(INFO_KINDS)}")
        method = INFO_KINDS[kind](**_values(method))
    return FitInfo(**_values(d), reading=None if reading is None else StopReading(**reading),
                   method=method, paths=None if paths is None else PathsInfo(**_values(paths)))


# a posterior saved with one flat FitInfo: PathsInfo's fields under their earlier keys
_FLAT_PATHS = {"count": "paths", "combine": "combine", "weights": "path_weights",
               "loo": "path_loo", "objective": "path_objective",
               "objective_kind": "path_objective_kind", "pareto_k_bad": "path_pareto_k_bad",
               "noise": "path_noise", "stacked_loo": "stacked_loo"}


def info_from_flat(d: dict, method: str) -> FitInfo:
    """The :class:`FitInfo` of a posterior saved with every method's fields in one flat table
    (a key it lacks is None): the fields of ``method``'s own info type go to ``info.method``."""
    d = _values(d)
    common = {f.name: d[f.name] for f in dataclasses.fields(FitInfo)
              if f.name not in _NESTED and f.name in d}
    reading = None
    if any(d.get(k) is not None for k in ("improvement", "improvement_se", "tolerance")):
        reading = StopReading(improvement=d.get("improvement"),
                              improvement_se=d.get("improvement_se"), tolerance=d.get("tolerance"))
    cls = INFO_KINDS.get(method)
    own = None if cls is None else cls(**{f.name: d.get(f.name) for f in dataclasses.fields(cls)})
    paths = None
    if d.get("paths"):
        paths = PathsInfo(**{k: d.get(old) for k, old in _FLAT_PATHS.items()})
    return FitInfo(**common, reading=reading, method=own, paths=paths)


__all__ = ["FitInfo", "StopReading", "MethodInfo", "SVIInfo", "MLInfo", "NUTSInfo", "SMCInfo",
           "NCVMPInfo", "LocalInfo", "PathsInfo", "INFO_KINDS", "Sizing", "stop_text", "info_to_json",
           "info_from_json", "info_from_flat"]
