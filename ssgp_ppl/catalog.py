"""The model catalog: one declarative TOML file per entry in ``models/``.

:func:`load_entry` reads and validates a file; every problem is one :class:`SSGPError` naming the
file and the dotted key. :meth:`CatalogEntry.spec` builds the :class:`~ssgp_ppl.model.SSGPSpec`,
:meth:`CatalogEntry.model` the model callable and :meth:`CatalogEntry.guide` the guide. The format
is documented in the README ("Catalog format") and by :data:`SCHEMA` below.
"""

from __future__ import annotations

import copy
import math
import os
import tomllib
from dataclasses import dataclass
from functools import cached_property, partial
from pathlib import Path
from typing import Any, NamedTuple

import jax

from ssgp_ppl import spectral
from ssgp_ppl.errors import SSGPError
from ssgp_ppl.guides import PSI, known_guides, make_guide
from ssgp_ppl.likelihoods import LIKELIHOODS
from ssgp_ppl.model import PRIORS, ROLES, RULES, Hyper, SSGPSpec, ssgp_model
from ssgp_ppl.ncvmp import tan_prior
from ssgp_ppl.objectives import GRADIENTS, OBJECTIVES
from ssgp_ppl.partitions import Partitions, auto_count, kmeans_partitions

METHODS = ("ml", "svi", "nuts", "ncvmp", "local")
TAN_METHODS = ("ncvmp", "local")  # Tan et al. 2016's solver and its adaptive neighbourhoods


class Field(NamedTuple):
    """One catalog key: its type, default, allowed values / bounds and a one-line doc."""

    type: type | tuple
    default: Any
    doc: str
    choices: tuple | None = None
    low: float | None = None  # inclusive lower bound
    high: float | None = None  # inclusive upper bound
    open_low: bool = False  # lower bound exclusive


def _hyper_schema(init: float, dist: str = "half_cauchy", scale: float = 1.0) -> dict:
    return {
        "role": Field(str, "learned", "learned (type-II) | fixed | prior", choices=ROLES),
        "init": Field((int, float), init, "initial value (learned, and start of VI/MAP)", low=0,
                      open_low=True),
        "value": Field((int, float), init, "value when role = fixed", low=0, open_low=True),
        "dist": Field(str, dist, "prior family when role = prior", choices=PRIORS),
        "loc": Field((int, float), 0.0, "prior location (lognormal, normal)"),
        "scale": Field((int, float), scale, "prior scale", low=0, open_low=True),
    }


SCHEMA: dict = {
    "description": Field(str, None, "one-line description shown by `ssgp-ppl models`"),
    "paper": Field(str, "", "where the model comes from (seed and equation)"),
    "model": {
        "m": Field(int, 20, "number of frequencies (2m features)", low=1),
        "spectral_density": Field(str, "se", "kernel family", choices=tuple(spectral.DENSITIES)),
        "parameterization": Field(str, "free", "free θ | scaled (s ⊙ λ, Tan et al. 2016, eq. 4)",
                                  choices=("free", "scaled")),
        "frequencies": Field(str, "prior", "free θ: prior (given ℓ) | learned (point estimate)",
                             choices=("prior", "learned")),
        "nuisance": Field(str, "sampled", "s sampled, or integrated out in closed form",
                          choices=("sampled", "marginalized")),
        "likelihood": Field(str, "gaussian", "observation model p(y | f) (Wei et al. 2021, §2)",
                            choices=LIKELIHOODS),
        "df": Field((int, float), 4.0, "Student-t degrees of freedom", low=0, open_low=True),
        "spectral_seed": Field(int, 0, "seed of the fixed standard spectral points", low=0),
        "noise": _hyper_schema(0.3),
        "signal": _hyper_schema(1.0),
        "lengthscales": _hyper_schema(1.0, "lognormal"),
        "inverse_lengthscales": _hyper_schema(1.0, "normal", 3.1622776601683795),
    },
    "data": {
        "x_scaling": Field(str, "standard", "input scaling fitted on the training split: standard "
                           "(zero mean, unit sd) | minmax (to [-1, 1], Tan et al. 2016, §7)",
                           choices=("standard", "minmax")),
    },
    "inference": {
        "methods": Field(list, ["svi"], "methods this entry fits; the first is its own",
                         choices=METHODS),
        "ml": {
            "steps": Field(int, 3000, "Adam steps on the marginal likelihood (upper bound)", low=1),
            "lr": Field((int, float), 0.02, "Adam step size", low=0, open_low=True),
            "chunk": Field(int, 250, "steps per jitted scan", low=1),
            "tol": Field((int, float), 1e-6, "relative change of the smoothed loss to stop", low=0),
            "min_steps": Field(int, 0, "no convergence stop before this many steps", low=0),
        },
        "svi": {
            "guide": Field(str, "auto_mvn", "guide name (ssgp_ppl.guides)"),
            "psi": Field(str, "normal", "joint_affine: distribution ψ of z", choices=PSI),
            "df": Field((int, float), 5.0, "joint_affine with ψ = student_t: degrees of freedom ν",
                        low=0, open_low=True),
            "init_scale": Field((int, float), 0.1, "papers' guides: initial scale × prior std",
                                low=0, open_low=True),
            "components": Field(int, 3, "mixture: number K of diagonal Gaussian components", low=1),
            "spread": Field((int, float), 1.0, "mixture: spread of the components' starting "
                            "means, in prior standard deviations", low=0),
            "objective": Field(str, "elbo", "elbo | beta_elbo | dlm_log | dlm_square (Wei et al. 2021)",
                               choices=OBJECTIVES),
            "beta": Field((int, float), 1.0, "β of the KL term (beta_elbo, dlm_*)", low=0),
            "gradient": Field(str, "exact", "log E_q p(y|f) in dlm_log: exact (Gaussian, probit) | "
                              "quadrature | bmc | ups (Wei et al. 2021, §3-4)", choices=GRADIENTS),
            "mc_samples": Field(int, 10, "draws L of bmc/ups, quadrature nodes, or the mixture's "
                                "score-function draws per component", low=1),
            "steps": Field(int, 5000, "SVI steps (upper bound)", low=1),
            "lr": Field((int, float), 0.01, "Adam step size", low=0, open_low=True),
            "lr_halflife": Field((int, float), 0.0, "halve the step size every this many steps "
                                 "(0: constant)", low=0),
            "batch_size": Field(int, 0, "minibatch rows per step; 0 = all", low=0),
            "num_particles": Field(int, 1, "ELBO Monte Carlo particles per step", low=1),
            "chunk": Field(int, 250, "steps per jitted scan", low=1),
            "tol": Field((int, float), 1e-5, "relative change of the smoothed loss to stop", low=0),
            "min_steps": Field(int, 0, "no convergence stop before this many steps", low=0),
        },
        "ncvmp": {
            "algorithm": Field(int, 2, "Tan et al. 2016, Algorithm 1 (plain NCVMP) or 2 (adaptive steps)",
                               choices=(1, 2)),
            "rho": Field((int, float), 1.5, "Algorithm 2: step-size growth factor ρ", low=1,
                         open_low=True),
            "max_iter": Field(int, 500, "maximum iterations (§4)", low=1),
            "tol": Field((int, float), 1e-6, "relative increase of the bound to stop (§4)", low=0),
            "restarts": Field(int, 10, "spectral sets tried at the start (§7: ten)", low=1),
            "restart_iters": Field(int, 2, "iterations per tried set before keeping the best (§7)",
                                   low=1),
        },
        "local": {
            "k": Field(int, 60, "neighbours per test point (Tan et al. 2016, §6)", low=5),
            "adapt": Field(bool, True, "refit on the λ-weighted neighbourhood (eq. 16); false: "
                           "predict from the Euclidean fit M1"),
            "batch": Field(int, 1, "test points fitted at once (vmap)", low=1),
        },
        "nuts": {
            "warmup": Field(int, 500, "warm-up iterations per chain", low=1),
            "samples": Field(int, 500, "kept draws per chain", low=1),
            "chains": Field(int, 4, "number of chains", low=1),
            "target_accept": Field((int, float), 0.9, "target acceptance", low=0, high=1,
                                   open_low=True),
            "max_tree_depth": Field(int, 10, "NUTS maximum tree depth", low=1),
        },
    },
    "partitions": {
        "count": Field(int, 0, "p, k-means partitions of the training inputs (0: n/1000)", low=0),
        "per_step": Field(int, 0, "a, partitions drawn per SVI step, clipped to p (0: none)",
                          low=0),
        "sample": Field(int, 20000, "rows k-means is run on", low=1),
        "max_size_factor": Field((int, float), 2.0, "blocks above this × n/p rows are cut",
                                 low=1),
    },
    "predictive": {
        "rule": Field(str, "marginal", "marginal | degenerate (γ = 1) | local (γ-family, Prop. 1)",
                      choices=RULES),
        "gamma": Field((int, float), 0.0, "γ of the local rule", low=-1, high=1),
        "samples": Field(int, 200, "r, posterior draws averaged in the predictive", low=1),
        "integrate_nuisance": Field(bool, False, "degenerate rule with a guide whose q(s | θ) is "
                                    "Gaussian: integrate s per draw of θ (exact in s, as the DLM "
                                    "objectives train it)"),
    },
}


def models_dir() -> Path:
    """The catalog directory: env SSGP_PPL_MODELS, else ``models/`` beside the package."""
    env = os.environ.get("SSGP_PPL_MODELS")
    return Path(env) if env else Path(__file__).resolve().parent.parent / "models"


def _check_value(f: Field, value, where: str):
    types = f.type if isinstance(f.type, tuple) else (f.type,)
    if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
        want = " or ".join(t.__name__ for t in types)
        raise SSGPError(f"{where}: expected {want}, got {type(value).__name__} {value!r}")
    items = value if isinstance(value, list) else [value]
    if isinstance(value, list) and not value:
        raise SSGPError(f"{where}: must not be empty")
    for v in items:
        if isinstance(v, float) and not math.isfinite(v):  # TOML and --set accept nan and inf
            raise SSGPError(f"{where}: must be a finite number, got {v!r}")
        if f.choices is not None and v not in f.choices:
            raise SSGPError(f"{where}: {v!r} is not one of {', '.join(map(str, f.choices))}")
        if f.low is not None and (v < f.low or (f.open_low and v == f.low)):
            op = ">" if f.open_low else ">="
            raise SSGPError(f"{where}: must be {op} {f.low}, got {v!r}")
        if f.high is not None and v > f.high:
            raise SSGPError(f"{where}: must be <= {f.high}, got {v!r}")


def _validate(raw: dict, schema: dict, prefix: str, src: str) -> dict:
    out = {}
    for key in raw:
        if key not in schema:
            where = f"{prefix}{key}"
            known = ", ".join(schema)
            raise SSGPError(f"{src}: unknown key '{where}' (known here: {known})")
    for key, f in schema.items():
        where = f"{src}: {prefix}{key}"
        if isinstance(f, dict):
            sub = raw.get(key, {})
            if not isinstance(sub, dict):
                raise SSGPError(f"{where}: expected a table")
            out[key] = _validate(sub, f, f"{prefix}{key}.", src)
        elif key in raw:
            _check_value(f, raw[key], where)
            out[key] = float(raw[key]) if f.type == (int, float) else raw[key]
        elif f.default is None:
            raise SSGPError(f"{where}: required key is missing")
        else:
            out[key] = copy.copy(f.default)
    return out


def _leaf_paths(schema: dict, prefix=()) -> list[tuple[str, ...]]:
    paths = []
    for k, f in schema.items():
        paths += _leaf_paths(f, prefix + (k,)) if isinstance(f, dict) else [prefix + (k,)]
    return paths


def _parse_value(text: str):
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


@dataclass(frozen=True)
class CatalogEntry:
    """A validated catalog entry (all defaults filled in)."""

    name: str
    path: Path
    config: dict

    @property
    def description(self) -> str:
        return self.config["description"]

    @property
    def methods(self) -> list[str]:
        return self.config["inference"]["methods"]

    @property
    def guide_name(self) -> str:
        return self.config["inference"]["svi"]["guide"] if "svi" in self.methods else "-"

    def settings(self, method: str) -> dict:
        return self.config["inference"][method]

    def spec(self, d: int) -> SSGPSpec:
        """The model specification for d input columns (spectral points drawn with the seed)."""
        mc = self.config["model"]
        pts = spectral.standard_spectral_points(
            jax.random.PRNGKey(mc["spectral_seed"]), mc["m"], d, mc["spectral_density"]
        )

        def hyper(name):
            h = mc[name]
            value = h["value"] if h["role"] == "fixed" else h["init"]
            return Hyper(h["role"], value, h["dist"], h["loc"], h["scale"])

        return SSGPSpec(
            m=mc["m"], d=d, spectral_points=pts, density=mc["spectral_density"],
            parameterization=mc["parameterization"], frequencies=mc["frequencies"],
            nuisance=mc["nuisance"], likelihood=mc["likelihood"], df=mc["df"],
            noise=hyper("noise"), signal=hyper("signal"), lengthscales=hyper("lengthscales"),
            inverse_lengthscales=hyper("inverse_lengthscales"),
        )

    def model(self, spec: SSGPSpec):
        """The catalog's one model function with this entry's spec bound."""
        return partial(ssgp_model, spec=spec)

    def guide(self, spec: SSGPSpec, model=None):
        svi = self.settings("svi")
        opts = {k: svi[k] for k in ("init_scale",)}
        if svi["guide"] == "joint_affine":
            opts.update(psi=svi["psi"], df=svi["df"])
        if svi["guide"] == "mixture":
            opts.update(components=svi["components"], spread=svi["spread"])
        return make_guide(svi["guide"], model or self.model(spec), spec, **opts)

    @cached_property
    def latent_sites(self) -> tuple[str, ...]:
        """The model's latent sample sites (independent of d)."""
        return self.spec(1).latent_sites()

    @cached_property
    def learned_sites(self) -> tuple[str, ...]:
        """The model's type-II hyperparameters (independent of d)."""
        return self.spec(1).learned_sites()

    def partitions(self, x, *, seed: int = 0) -> Partitions:
        """k-means partitions of the training inputs ``x`` as ``[partitions]`` configures them."""
        pc = self.config["partitions"]
        return kmeans_partitions(x, pc["count"] or auto_count(len(x)), seed=seed,
                                 sample=pc["sample"], max_size_factor=pc["max_size_factor"])

    @property
    def uses_partitions(self) -> bool:
        return (self.config["predictive"]["rule"] == "local"
                or self.config["partitions"]["per_step"] > 0)

    def with_overrides(self, assignments: list[str]) -> CatalogEntry:
        """Apply ``key=value`` overrides (dotted path, or a leaf name unique in the schema; an
        ambiguous leaf such as ``steps`` resolves to the entry's own method) and re-validate."""
        raw = copy.deepcopy(self.config)
        paths = _leaf_paths(SCHEMA)
        for item in assignments:
            if "=" not in item:
                raise SSGPError(f"--set {item!r}: expected key=value")
            key, text = (s.strip() for s in item.split("=", 1))
            parts = tuple(key.split("."))
            matches = [p for p in paths if p[-len(parts):] == parts]
            for prefer in (("inference", self.methods[0]), ("predictive",)):
                if len(matches) > 1:
                    own = [p for p in matches if p[:len(prefer)] == prefer]
                    matches = own if len(own) == 1 else matches
            if not matches:
                raise SSGPError(f"--set: unknown key {key!r} (see the README's catalog format)")
            if len(matches) > 1:
                opts = ", ".join(".".join(p) for p in matches)
                raise SSGPError(f"--set: key {key!r} is ambiguous; use one of {opts}")
            node = raw
            for p in matches[0][:-1]:
                node = node[p]
            value = _parse_value(text)
            if matches[0] == ("inference", "methods") and isinstance(value, str):
                value = [v.strip() for v in value.split(",")]
            node[matches[0][-1]] = value
        return _build(self.name, self.path, raw, src=f"{self.path.name} with --set")


def _build(name: str, path: Path, raw: dict, src: str) -> CatalogEntry:
    cfg = _validate(raw, SCHEMA, "", src)
    mc = cfg["model"]
    guide = cfg["inference"]["svi"]["guide"]
    if guide not in known_guides():
        raise SSGPError(f"{src}: inference.svi.guide: unknown guide {guide!r}; known: "
                        f"{', '.join(known_guides())}")
    if cfg["predictive"]["rule"] == "degenerate" and mc["nuisance"] != "sampled":
        raise SSGPError(f"{src}: predictive.rule: 'degenerate' needs model.nuisance = 'sampled'")
    if mc["parameterization"] == "scaled" and mc["frequencies"] == "learned":
        raise SSGPError(f"{src}: model.frequencies: 'learned' needs parameterization = 'free'")
    methods = cfg["inference"]["methods"]
    pred = cfg["predictive"]
    if pred["gamma"] != 0 and pred["rule"] != "local":
        raise SSGPError(f"{src}: predictive.gamma: γ = {pred['gamma']} is used only by "
                        f"rule = 'local' (this entry's rule is '{pred['rule']}')")
    for h in ("noise", "signal", "lengthscales"):
        if mc[h]["role"] == "prior" and mc[h]["dist"] == "normal":
            raise SSGPError(f"{src}: model.{h}.dist: 'normal' allows negative values; use "
                            "half_cauchy, half_normal or lognormal for a positive parameter")
    if cfg["partitions"]["per_step"] and cfg["inference"]["svi"]["batch_size"]:
        raise SSGPError(f"{src}: inference.svi.batch_size: set either batch_size or "
                        "partitions.per_step, not both")
    if cfg["predictive"]["rule"] == "local" and cfg["predictive"]["gamma"] != 0 and \
            mc["nuisance"] != "sampled":
        raise SSGPError(f"{src}: predictive.gamma: γ != 0 needs model.nuisance = 'sampled'")
    if cfg["partitions"]["per_step"] and mc["nuisance"] != "sampled":
        raise SSGPError(f"{src}: partitions.per_step: partition sampling needs model.nuisance = "
                        "'sampled' (the marginal likelihood does not factorise)")
    svi = cfg["inference"]["svi"]
    if svi["objective"] != "elbo" and mc["nuisance"] != "sampled":
        raise SSGPError(f"{src}: inference.svi.objective: '{svi['objective']}' needs "
                        "model.nuisance = 'sampled'")
    if svi["objective"] == "dlm_log" and svi["gradient"] == "exact" and \
            mc["likelihood"] not in ("gaussian", "probit"):
        raise SSGPError(f"{src}: inference.svi.gradient: 'exact' has no closed form under the "
                        f"{mc['likelihood']} likelihood; use quadrature, bmc or ups")
    if mc["likelihood"] == "student_t" and mc["df"] <= 2:
        raise SSGPError(f"{src}: model.df: the Student-t predictive needs df > 2 (finite "
                        f"variance), got {mc['df']:g}")
    if mc["likelihood"] != "gaussian":
        if mc["nuisance"] != "sampled":
            raise SSGPError(f"{src}: model.nuisance: the {mc['likelihood']} likelihood needs "
                            "'sampled' (s integrates out only under the Gaussian)")
        if cfg["predictive"]["rule"] != "degenerate":
            raise SSGPError(f"{src}: predictive.rule: the {mc['likelihood']} likelihood needs "
                            "'degenerate' (marginal and local are Gaussian closed forms)")
        if any(m in TAN_METHODS for m in methods) or "ml" in methods:
            raise SSGPError(f"{src}: inference.methods: ml, ncvmp and local are Gaussian-only")
    if svi["guide"] == "mixture" and mc["spectral_density"] != "se" and "svi" in methods:
        raise SSGPError(f"{src}: inference.svi.guide: 'mixture' needs spectral_density = 'se'")
    entry = CatalogEntry(name, path, cfg)
    if any(m in TAN_METHODS for m in methods):
        try:
            tan_prior(entry.spec(1))
        except SSGPError as e:
            raise SSGPError(f"{src}: {e}") from None
    if "nuts" in methods and not entry.latent_sites:
        raise SSGPError(f"{src}: inference.methods: 'nuts' needs latent sites; this model has none")
    if "nuts" in methods and entry.learned_sites and methods[0] == "nuts":
        learned = ", ".join(f"model.{s}" for s in entry.learned_sites)
        raise SSGPError(f"{src}: inference.methods: 'nuts' first needs priors or fixed values, but "
                        f"these are learned: {learned} (list 'svi' or 'ml' first: NUTS then "
                        "conditions on their type-II estimates)")
    if methods[0] == "svi" and not entry.latent_sites:
        raise SSGPError(f"{src}: inference.methods: 'svi' needs latent sites; this model has "
                        "none (use 'ml')")
    return entry


def load_entry(name_or_path: str | Path) -> CatalogEntry:
    """Load a catalog entry by name (``models/<name>.toml``) or by path to a TOML file."""
    p = Path(name_or_path)
    if p.suffix != ".toml":
        p = models_dir() / f"{name_or_path}.toml"
        if not p.exists():
            known = ", ".join(list_entries()) or "none"
            raise SSGPError(f"unknown catalog model {str(name_or_path)!r}; known: {known}")
    if not p.exists():
        raise SSGPError(f"catalog file not found: {p}")
    try:
        raw = tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as e:
        raise SSGPError(f"{p.name}: not valid TOML: {e}") from None
    return _build(p.stem, p, raw, src=p.name)


def list_entries() -> list[str]:
    """Names of all catalog entries, sorted."""
    d = models_dir()
    return sorted(f.stem for f in d.glob("*.toml")) if d.is_dir() else []
