"""The model catalog: one declarative TOML file per entry, in the built-in catalog
(:data:`BUILTIN_CATALOG`: the repository's ``models/``, shipped in the wheel) and in any user
catalog directory.

:func:`load_entry` reads and validates a file; every problem is one :class:`SSGPError` naming the
file and the dotted key. :meth:`CatalogEntry.spec` builds the :class:`~ssgp_ppl.model.ssgp.SSGPSpec`,
:meth:`CatalogEntry.model` the model callable and :meth:`CatalogEntry.guide` the guide. The format
is documented in the README ("Catalog format") and by :data:`SCHEMA` below.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import re
import tomllib
from dataclasses import dataclass
from functools import cached_property, partial
from pathlib import Path

import jax
import numpy as np

from ssgp_ppl.errors import SEED_MAX, SSGPError
from ssgp_ppl.inference import methods as _methods
from ssgp_ppl.inference.fitinfo import Sizing
from ssgp_ppl.inference.methods.svi import SVI, guide_of
from ssgp_ppl.inference.partitions import Partitions, auto_count, kmeans_partitions
from ssgp_ppl.model import densities, likelihoods
from ssgp_ppl.model.predictive import RULES
from ssgp_ppl.model.ssgp import PRIORS, ROLES, Hyper, SSGPSpec, ssgp_model
from ssgp_ppl.runtime.io import file_kind
from ssgp_ppl.settings import Field, leaf_paths, validate

HYPER_RANGE = (1e-6, 1e6)  # starting and fixed values (standardised units): far beyond, float32
# under- or overflows (noise² = 0 is an invalid noise; 1e300 a NaN loss)


def _hyper_schema(init: float, dist: str = "half_cauchy", scale: float = 1.0) -> dict:
    lo, hi = HYPER_RANGE
    return {
        "role": Field(str, "learned", "learned (type-II) | fixed | prior", choices=ROLES),
        "init": Field((int, float), init, "initial value (learned, and start of VI/MAP)", low=lo,
                      high=hi),
        "value": Field((int, float), init, "value when role = fixed", low=lo, high=hi),
        "dist": Field(str, dist, "prior family when role = prior", choices=PRIORS),
        "loc": Field((int, float), 0.0, "prior location (lognormal, normal)"),
        "scale": Field((int, float), scale, "prior scale", low=0, open_low=True),
    }


_BASE: dict = {  # everything but [inference], whose tables the methods declare
    "description": Field(str, None, "one-line description shown by `ssgp-ppl models`"),
    "paper": Field(str, "", "where the model comes from (seed and equation)"),
    "use_when": Field(str, "", "when to choose this entry, a few words (`ssgp-ppl models`)"),
    "model": {
        "m": Field(int, 20, "number of frequencies (2m features); auto: sized to the data and the "
                   "time budget (ssgp_ppl.inference.sizing)", low=1, high=100_000, auto=True),
        "spectral_density": Field(str, "se", "spectral density p(r | ℓ), the kernel family "
                                  "(ssgp_ppl.model.densities)"),  # choices: the registry, in schema()
        "parameterization": Field(str, "free", "free θ | scaled (s ⊙ λ, Tan et al. 2016, eq. 4)",
                                  choices=("free", "scaled")),
        "frequencies": Field(str, "prior", "free θ: prior (given ℓ) | learned (point estimate)",
                             choices=("prior", "learned")),
        "nuisance": Field(str, "sampled", "s sampled, or integrated out in closed form",
                          choices=("sampled", "marginalized")),
        "likelihood": Field(str, "gaussian", "observation model p(y | f) (Wei et al. 2021, §2)"),
        "df": Field((int, float), 4.0, "Student-t degrees of freedom", low=0, open_low=True),
        "spectral_seed": Field(int, 0, "seed of the fixed standard spectral points", low=0,
                               high=SEED_MAX),
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


def schema(raw: dict | None = None, src: str = "") -> dict:
    """The catalog format with every registered method's ``[inference.<name>]`` table and every
    registered spectral density (:func:`ssgp_ppl.inference.methods.register` and
    :func:`ssgp_ppl.model.densities.register` add them after import): each table as the entry ``raw``
    (read from ``src``) writes it (``[inference.svi]`` holds its guide's table only), or every key
    any entry may write (``raw`` None)."""
    density = _BASE["model"]["spectral_density"]._replace(choices=tuple(densities.DENSITIES))
    model = {**_BASE["model"], "spectral_density": density}
    tables = raw.get("inference") if isinstance(raw, dict) else None
    tables = tables if isinstance(tables, dict) else {}

    def table(name):
        if raw is None:
            return None
        t = tables.get(name, {})
        return t if isinstance(t, dict) else {}  # validate names a table of another type

    inference = {
        "methods": Field(list, ["svi"], "methods this entry fits; the first is its own",
                         choices=tuple(_methods.REGISTRY)),
        **{name: m.table_schema(table(name), src) for name, m in _methods.REGISTRY.items()},
    }
    keys = list(_BASE)
    keys.insert(keys.index("data") + 1, "inference")
    out = {k: inference if k == "inference" else model if k == "model" else _BASE[k]
           for k in keys}
    lik = out["model"]["likelihood"]  # the registered likelihoods (register_likelihood adds some)
    out["model"] = {**out["model"],
                    "likelihood": lik._replace(choices=tuple(likelihoods.LIKELIHOODS))}
    return out


SCHEMA = schema()  # the built-in methods' catalog format


# the built-in catalog: a wheel carries it inside the package (setup.py copies the repository's
# models/ there); a source tree and an editable install read models/ itself
_PACKAGE = Path(__file__).resolve().parent
BUILTIN_CATALOG = _PACKAGE / "catalog" if (_PACKAGE / "catalog").is_dir() else _PACKAGE.parent / "models"
CATALOG_ENV = "SSGP_PPL_MODELS"  # user catalog directories, separated by os.pathsep
_user_catalogs: list[Path] = []


def add_catalog(directory: str | Path) -> None:
    """Add a user catalog directory: its ``*.toml`` entries join the built-in ones (as
    ``ssgp-ppl --catalog DIR`` and the ``SSGP_PPL_MODELS`` environment variable do).

    Parameters
    ----------
    directory
        The folder of the entries (``~`` expanded); adding it twice adds it once.

    Raises
    ------
    SSGPError
        When ``directory`` is not a path, or no such folder exists.
    """
    if not isinstance(directory, str | os.PathLike) or not str(directory).strip():
        raise SSGPError(f"add_catalog takes a directory path, got {type(directory).__name__} "
                        f"{directory!r}"[:200])
    d = Path(directory).expanduser().resolve()
    if not d.is_dir():
        raise SSGPError(f"catalog directory not found: {directory}")
    if d not in _user_catalogs:
        _user_catalogs.append(d)


def catalog_dirs() -> list[Path]:
    """The catalog directories in search order: the built-in one, then those of
    :func:`add_catalog`, then those of ``$SSGP_PPL_MODELS``."""
    env = [Path(p).expanduser() for p in os.environ.get(CATALOG_ENV, "").split(os.pathsep) if p]
    for d in env:
        if not d.is_dir():
            raise SSGPError(f"{CATALOG_ENV}: catalog directory not found: {d}")
    dirs = [BUILTIN_CATALOG, *_user_catalogs, *(d.resolve() for d in env)]
    return list(dict.fromkeys(dirs))


def catalog_files() -> tuple[dict[str, Path], dict[Path, str]]:
    """``({name: file}, {file: problem})``: every entry file of :func:`catalog_dirs`; a file whose
    name an earlier directory already has is not an entry (its problem names both files)."""
    files: dict[str, Path] = {}
    clashes: dict[Path, str] = {}
    for d in catalog_dirs():
        for f in sorted(d.glob("*.toml")):
            if f.stem in files:
                clashes[f] = (f"{f}: entry {f.stem!r} is already defined by {files[f.stem]}; "
                              "rename the file")
            else:
                files[f.stem] = f
    return files, clashes


def _parse_value(text: str):
    """A ``--set`` value: a TOML number, boolean, string or list, else the text as it is."""
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text
    return value if isinstance(value, bool | int | float | str | list) else text


@dataclass(frozen=True)
class CatalogEntry:
    """A validated catalog entry (all defaults filled in), as `load_entry` returns it.

    Parameters
    ----------
    name
        The entry's name (its file's stem).
    path
        The TOML file it was read from.
    config
        The validated configuration: every table and key of the catalog format, defaults
        filled in.
    sizing
        How ``m = "auto"`` was resolved for the data it is fitted on
        (`ssgp_ppl.inference.fitinfo.Sizing`); None for an entry whose m was given.
    """

    name: str
    path: Path
    config: dict
    sizing: Sizing | None = None

    @property
    def description(self) -> str:
        return self.config["description"]

    @property
    def use_when(self) -> str:
        return self.config["use_when"]

    @property
    def m_auto(self) -> bool:
        """Whether ``model.m`` is still ``"auto"``: sized against the training rows
        (:func:`ssgp_ppl.inference.sizing.resolve`) before the entry can be fitted."""
        return self.config["model"]["m"] == "auto"

    @property
    def methods(self) -> list[str]:
        return self.config["inference"]["methods"]

    def settings(self, method: str) -> dict:
        return self.config["inference"][method]

    def spec(self, d: int) -> SSGPSpec:
        """The model specification for ``d`` input columns.

        Parameters
        ----------
        d
            The number of input columns.

        Returns
        -------
        SSGPSpec
            The model's settings, with ``m`` standard spectral points drawn from the entry's
            spectral density with its ``spectral_seed``.
        """
        mc = self.config["model"]
        if self.m_auto:
            raise SSGPError(f"{self.path}: model.m = 'auto' is sized against the training rows: "
                            "fit the entry (ssgp_ppl.fit, ssgp-ppl fit) or resolve it first with "
                            "ssgp_ppl.inference.sizing.resolve(entry, data)")
        density = densities.get(mc["spectral_density"])
        pts = density.standard_points(jax.random.PRNGKey(mc["spectral_seed"]), mc["m"], d)

        def hyper(name):
            h = mc[name]
            value = h["value"] if h["role"] == "fixed" else h["init"]
            return Hyper(h["role"], value, h["dist"], h["loc"], h["scale"])

        return SSGPSpec(
            m=mc["m"], d=d, spectral_points=pts, density=density,
            parameterization=mc["parameterization"], frequencies=mc["frequencies"],
            nuisance=mc["nuisance"], likelihood=mc["likelihood"], df=mc["df"],
            noise=hyper("noise"), signal=hyper("signal"), lengthscales=hyper("lengthscales"),
            inverse_lengthscales=hyper("inverse_lengthscales"),
        )

    def model(self, spec: SSGPSpec):
        """The catalog's one model function with this entry's spec bound."""
        return partial(ssgp_model, spec=spec)

    def guide(self, spec: SSGPSpec, model=None):
        """The entry's ``[inference.svi]`` guide object for ``spec`` (:mod:`ssgp_ppl.model.guides`),
        with its ``[inference.svi.<guide>]`` settings."""
        return guide_of(self, spec, model or self.model(spec), SVI.settings(self))

    @cached_property
    def lik(self):
        """The entry's observation model (:mod:`ssgp_ppl.model.likelihoods`)."""
        mc = self.config["model"]
        return likelihoods.LIKELIHOODS.get(mc["likelihood"]).configure(mc)

    @cached_property
    def latent_sites(self) -> tuple[str, ...]:
        """The model's latent sample sites (independent of d and m)."""
        return self.structure.latent_sites()

    @cached_property
    def learned_sites(self) -> tuple[str, ...]:
        """The model's type-II hyperparameters (independent of d and m)."""
        return self.structure.learned_sites()

    @cached_property
    def structure(self) -> SSGPSpec:
        """A spec with d = 1 (and m = 2 where m is still "auto"): what does not depend on them."""
        entry = self.with_settings([("m", 2)]) if self.m_auto else self
        return entry.spec(1)

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
        """Apply ``key=value`` texts, as ``--set`` does.

        Parameters
        ----------
        assignments
            ``["svi.steps=2000", "m=20"]``: each value is read as a TOML value, else as text;
            the keys are those of `with_settings`.

        Returns
        -------
        CatalogEntry
            A new entry, validated again.

        Raises
        ------
        SSGPError
            When an item is not ``key=value``, or as `with_settings` raises.
        """
        pairs = []
        for item in assignments:
            if not isinstance(item, str) or "=" not in item:
                raise SSGPError(f"--set {item!r}: expected key=value")
            key, text = (s.strip() for s in item.split("=", 1))
            pairs.append((key, _parse_value(text)))
        return self.with_settings(pairs, what="--set")

    def with_settings(self, items, *, what: str = "settings") -> CatalogEntry:
        """Apply ``(key, value)`` pairs and validate the entry again.

        Parameters
        ----------
        items
            ``(key, value)`` pairs. A key is a dotted path (``inference.svi.steps``) or a leaf name
            unique in the schema (``m``); an ambiguous leaf such as ``steps`` resolves to the
            entry's own method. Values are data (numbers, text, booleans, lists), never parsed.
        what
            What the errors name as the source of the settings.

        Returns
        -------
        CatalogEntry
            A new entry (with this one's ``sizing`` where m is unchanged); this one is unchanged.

        Raises
        ------
        SSGPError
            When a key is not in the schema (with the keys it may have meant) or a value fails
            validation.
        """
        raw = copy.deepcopy(self.config)
        paths = leaf_paths(schema())
        guide = self.config["inference"]["svi"]["guide"]
        touched = []
        for key, value in items:
            if not isinstance(key, str) or not _KEY.fullmatch(key):
                raise SSGPError(f"{what}: {key!r} is not a catalog key (a dotted name such as "
                                "svi.lr or m)")
            parts = tuple(key.split("."))
            matches = [p for p in paths if p[-len(parts):] == parts]
            for prefer in (("inference", self.methods[0]), ("inference", "svi", guide),
                           ("predictive",)):
                if len(matches) > 1:
                    own = [p for p in matches if p[:len(prefer)] == prefer]
                    matches = own if len(own) == 1 else matches
            if not matches:
                near = [".".join(p) for p in paths if p[-1] == parts[-1]]
                hint = f"; keys of that name: {', '.join(near)}" if near else ""
                raise SSGPError(f"{what}: unknown key {key!r} (see the README's catalog "
                                f"format){hint}")
            if len(matches) > 1:
                opts = ", ".join(".".join(p) for p in matches)
                raise SSGPError(f"{what}: key {key!r} is ambiguous; use one of {opts}")
            value = _setting_value(value, key, what)
            if matches[0] == ("inference", "methods") and isinstance(value, str):
                value = [v.strip() for v in value.split(",")]
            node = raw
            for p in matches[0][:-1]:
                node = node.setdefault(p, {})  # a guide's table the entry does not hold yet
            node[matches[0][-1]] = value
            touched.append(matches[0])
        # the old guide's table (its defaults) goes with it, unless these items set a key in it
        svi = raw["inference"]["svi"]
        if svi["guide"] != guide and not any(p[:3] == ("inference", "svi", guide) for p in touched):
            svi.pop(guide, None)
        entry = _build(self.name, self.path, raw, src=f"{self.path.name} with {what}")
        same_m = entry.config["model"]["m"] == self.config["model"]["m"]
        return dataclasses.replace(entry, sizing=self.sizing) if same_m and self.sizing else entry


_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def _setting_value(v, key: str, what: str):
    """A setting's value as the plain data TOML gives (numpy scalars as Python values, tuples as
    lists); anything else one SSGPError naming the key."""
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, list | tuple):
        return [_setting_value(i, key, what) for i in v]
    if not isinstance(v, bool | int | float | str):
        raise SSGPError(f"{what}: {key}: expected a number, text, true/false or a list, got "
                        f"{type(v).__name__} {v!r}"[:300])
    return v


def _build(name: str, path: Path, raw: dict, src: str) -> CatalogEntry:
    cfg = validate(raw, schema(raw, src), "", src)
    mc = cfg["model"]
    if cfg["predictive"]["rule"] == "degenerate" and mc["nuisance"] != "sampled":
        raise SSGPError(f"{src}: predictive.rule: 'degenerate' needs model.nuisance = 'sampled'")
    if mc["parameterization"] == "scaled" and mc["frequencies"] == "learned":
        raise SSGPError(f"{src}: model.frequencies: 'learned' needs parameterization = 'free'")
    pred = cfg["predictive"]
    if pred["gamma"] != 0 and pred["rule"] != "local":
        raise SSGPError(f"{src}: predictive.gamma: γ = {pred['gamma']} is used only by "
                        f"rule = 'local' (this entry's rule is '{pred['rule']}')")
    for h in ("noise", "signal", "lengthscales"):
        if mc[h]["role"] == "prior" and mc[h]["dist"] == "normal":
            raise SSGPError(f"{src}: model.{h}.dist: 'normal' allows negative values; use "
                            "half_cauchy, half_normal or lognormal for a positive parameter")
    if cfg["predictive"]["rule"] == "local" and cfg["predictive"]["gamma"] != 0 and \
            mc["nuisance"] != "sampled":
        raise SSGPError(f"{src}: predictive.gamma: γ != 0 needs model.nuisance = 'sampled'")
    if cfg["partitions"]["per_step"] and mc["nuisance"] != "sampled":
        raise SSGPError(f"{src}: partitions.per_step: partition sampling needs model.nuisance = "
                        "'sampled' (the marginal likelihood does not factorise)")
    lik = likelihoods.LIKELIHOODS.get(mc["likelihood"])
    lik.check_settings(mc, src)
    if not lik.conjugate:
        if mc["nuisance"] != "sampled":
            raise SSGPError(f"{src}: model.nuisance: the {lik.name} likelihood needs "
                            "'sampled' (s integrates out only under the Gaussian)")
        if cfg["predictive"]["rule"] != "degenerate":
            raise SSGPError(f"{src}: predictive.rule: the {lik.name} likelihood needs "
                            "'degenerate' (marginal and local are Gaussian closed forms)")
    entry = CatalogEntry(name, path, cfg)
    for method in entry.methods:  # each listed method checks the entry against its needs
        _methods.get(method).check(entry, src)
    return entry


def from_saved(name: str, path: Path, config: dict, src: str) -> CatalogEntry:
    """The entry a saved posterior stores (:func:`ssgp_ppl.posterior.load`), validated as a
    catalog file is: every problem one SSGPError naming ``src`` and the dotted key."""
    return _build(name, path, config, src=src)


def load_entry(name_or_path: str | Path) -> CatalogEntry:
    """Load a catalog entry by name or by path to a TOML file.

    Parameters
    ----------
    name_or_path
        A name of `list_entries` (built-in or user catalog), or a path to a ``.toml`` file.

    Returns
    -------
    CatalogEntry
        The validated entry.

    Raises
    ------
    SSGPError
        When the name is unknown (the known names listed), the file cannot be read or is not
        valid TOML, or the entry fails validation; every message names the file.
    """
    if not isinstance(name_or_path, str | os.PathLike):
        raise SSGPError("a catalog model is a name, a .toml path or a CatalogEntry, got "
                        f"{type(name_or_path).__name__}")
    p = Path(name_or_path)
    if p.suffix != ".toml":
        files, clashes = catalog_files()
        clash = [q for f, q in clashes.items() if f.stem == str(name_or_path)]
        if clash:  # a user file of this name: which one is meant is not clear
            raise SSGPError(clash[0])
        if str(name_or_path) not in files:
            known = ", ".join(files) or "none"
            raise SSGPError(f"unknown catalog model {str(name_or_path)!r}; known: {known}")
        p = files[str(name_or_path)]
    if not p.is_file():
        raise SSGPError(_not_a_file(p))
    src = p.name if p.parent == BUILTIN_CATALOG else str(p)  # every message names the file so
    try:  # a byte order mark (editors on Windows write one) is not part of the TOML
        raw = tomllib.loads(p.read_bytes().decode("utf-8-sig"))
    except OSError as e:
        raise SSGPError(f"{src}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise SSGPError(f"{src}: not UTF-8 text (byte {e.start}); a catalog file is UTF-8 TOML") from None
    except tomllib.TOMLDecodeError as e:
        raise SSGPError(f"{src}: not valid TOML: {e}") from None
    except RecursionError:
        raise SSGPError(f"{src}: not valid TOML: nested too deeply") from None
    return _build(p.stem, p, raw, src=src)


def _not_a_file(p: Path) -> str:
    """Why ``p``, which is not a regular file, is no catalog file."""
    if p.is_symlink() and not p.exists():
        return f"catalog file {p} is a symbolic link to nothing (broken, or a loop)"
    what = file_kind(p)
    return f"catalog file not found: {p}" if what is None else \
        f"catalog file {p} is {what}, not a TOML file"


def list_entries() -> list[str]:
    """Names of all catalog entries (built-in and user), sorted."""
    return sorted(catalog_files()[0])


__all__ = ["BUILTIN_CATALOG", "CATALOG_ENV", "SCHEMA", "CatalogEntry", "add_catalog",
           "catalog_dirs", "catalog_files", "from_saved", "list_entries", "load_entry", "schema"]
