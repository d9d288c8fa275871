"""The one shape of an inference method (as blackjax's algorithms): settings in, a Posterior out.

A method is an instance of a :class:`Method` subclass in its own module of this package, listed
once in :data:`ssgp_ppl.inference.methods.REGISTRY`:

* ``Settings``: a frozen dataclass of its ``[inference.<name>]`` catalog table, each field declared
  with :func:`~ssgp_ppl.settings.setting` (type, default, doc, bounds); the catalog validates the
  table with it (:meth:`Method.table_schema`) and errors name the file and key;
* :meth:`Method.check`: the checks of this method against an entry (likelihood, latent sites, …);
* :meth:`Method.requires`: what it needs from the entry's own method (type-II estimates, spectral
  points), passed in by the caller as a :class:`~ssgp_ppl.posterior.Handoff`;
* :meth:`Method.run` ``(entry, data, *, seed, steps, progress, inputs, checkpoint, client)`` →
  :class:`~ssgp_ppl.posterior.Posterior`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from ssgp_ppl.errors import SSGPError
from ssgp_ppl.settings import Settings, setting  # noqa: F401  (methods declare theirs with these)

if TYPE_CHECKING:  # pragma: no cover
    from ssgp_ppl.data.datasets import Dataset
    from ssgp_ppl.entry import CatalogEntry
    from ssgp_ppl.posterior import Handoff, Posterior


class Method:
    """Base class of the inference methods (see the module docstring)."""

    name: ClassVar[str]
    Settings: ClassVar[type[Settings]] = Settings
    description: ClassVar[str] = ""
    checkpoints: ClassVar[bool] = False  # run() honours a Checkpoint (resume, Ctrl-C)
    distributed: ClassVar[bool] = False  # trains across processes under jax.distributed
    reference: ClassVar[bool] = False  # the MCMC reference compare adds to an entry's methods
    provides: ClassVar[tuple[str, ...]] = ()  # Handoff fields its posterior fills for others
    accepts: ClassVar[tuple[str, ...]] = ()  # Handoff fields it uses when the own method provides them
    # compare's budget flags (steps, samples, chains) -> the key of this method's settings they set
    budget: ClassVar[dict[str, str]] = {}

    def settings(self, entry: CatalogEntry):
        return self.Settings.of(entry, self.name)

    def table_schema(self, table: dict | None = None, src: str = "") -> dict:
        """The schema the catalog validates this method's ``[inference.<name>]`` table with:
        ``table`` as an entry in ``src`` writes it (errors name ``src``), or every key any entry
        may write (None). Its ``Settings`` unless the table has sub-tables (``svi``'s guide)."""
        return self.Settings.schema()

    def check(self, entry: CatalogEntry, src: str) -> None:
        """Raise one SSGPError naming ``src`` and the key when ``entry`` cannot use this method."""

    def requires(self, entry: CatalogEntry) -> tuple[str, ...]:
        """Handoff fields this method needs from the entry's own method's fit."""
        return ()

    def objective_label(self, entry: CatalogEntry) -> str:
        """What the method optimises or samples, for `ssgp-ppl models`."""
        return ""

    def paths(self, entry: CatalogEntry) -> tuple[int, str]:
        """(K, combine): how many runs from dispersed starts the entry asks for and how they
        combine (:mod:`ssgp_ppl.inference.paths`); one run unless the method has ``paths`` settings."""
        return 1, "stacking"

    def run_paths(self, starts: list[tuple], data: Dataset, *, seed: int = 0,
                  steps: int | None = None, progress: bool = True, checkpoint=None,
                  client=None) -> list[Posterior]:
        """One :meth:`run` per (entry, Handoff) of ``starts`` (path k's seed
        :func:`ssgp_ppl.inference.paths.path_seed`, its own
        checkpoint, :func:`ssgp_ppl.inference.paths.path_checkpoint`); stops after a path interrupted by
        Ctrl-C. A method may run its paths together (``svi``: vectorised in one jit)."""
        from ssgp_ppl.inference.paths import path_checkpoint, path_seed

        out = []
        for k, (entry, given) in enumerate(starts):
            out.append(self.run(entry, data, seed=path_seed(seed, k), steps=steps,
                                progress=progress,
                                inputs=given, checkpoint=path_checkpoint(checkpoint, k),
                                client=client))
            if out[-1].info.interrupted:
                break
        return out

    def path_starts(self, entry: CatalogEntry, data: Dataset, count: int, *, seed: int = 0,
                    inputs: Handoff) -> list[tuple]:
        """(entry, Handoff) where each of ``count`` paths of a multi-path fit starts
        (default: :func:`ssgp_ppl.inference.paths.dispersed_starts`)."""
        from ssgp_ppl.inference.paths import dispersed_starts

        return dispersed_starts(entry, data, count, seed=seed, inputs=inputs)

    def guide_label(self, entry: CatalogEntry) -> str | None:
        """The guide it fits, where it fits one."""
        return None

    def draws(self, entry: CatalogEntry, n: int) -> int:
        """The posterior draws S a fit on n training rows predicts with (one run; a multi-path
        mixture has :data:`~ssgp_ppl.inference.paths.MIXTURE_DRAWS`): the entry's predictive samples."""
        return int(entry.config["predictive"]["samples"])

    def run(self, entry: CatalogEntry, data: Dataset, *, seed: int = 0, steps: int | None = None,
            progress: bool = True, inputs: Handoff | None = None, checkpoint=None,
            client=None) -> Posterior:
        raise NotImplementedError


class PosteriorSampler(Method):
    """A sampler of the model with priors (``nuts``, ``smc``): it needs latent sites, and on
    type-II sites it conditions on the entry's own method's estimates (empirical Bayes)."""

    def check(self, entry, src: str) -> None:
        if not entry.latent_sites:
            raise SSGPError(f"{src}: inference.methods: '{self.name}' needs latent sites; this "
                            "model has none")
        if entry.learned_sites and entry.methods[0] == self.name:
            learned = ", ".join(f"model.{s}" for s in entry.learned_sites)
            raise SSGPError(f"{src}: inference.methods: '{self.name}' first needs priors or fixed "
                            f"values, but these are learned: {learned} (list 'svi' or 'ml' first: "
                            "it then conditions on their type-II estimates)")

    def requires(self, entry) -> tuple[str, ...]:
        return ("type2",) if entry.learned_sites else ()

    def draws(self, entry, n: int) -> int:
        s = self.settings(entry)
        return int(s.chains * s.samples)


__all__ = ["Method", "PosteriorSampler", "Settings", "setting"]
