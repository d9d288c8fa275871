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
    """Base class of the inference methods: settings in, a `Posterior` out.

    A method is an instance of a subclass in its own module of ``ssgp_ppl.inference.methods``,
    registered once (``methods.register``; see [Adding a method](../adding-a-method.md)). A
    subclass sets the class attributes below and writes `run`; the other methods have defaults.

    Attributes
    ----------
    name
        The method's name in the catalog (``inference.methods``) and on the command line.
    Settings
        A frozen dataclass of its ``[inference.<name>]`` catalog table, each field declared with
        ``setting`` (type, default, doc, bounds); the catalog validates the table with it.
    description
        One line for ``ssgp-ppl models``.
    checkpoints
        Whether `run` honours a checkpoint (resume, Ctrl-C).
    distributed
        Whether it trains across processes under ``jax.distributed``.
    reference
        Whether it is the MCMC reference ``compare`` adds to an entry's methods.
    provides
        The `Handoff` fields its posterior fills for other methods.
    accepts
        The `Handoff` fields it uses when the entry's own method provides them.
    budget
        ``compare``'s budget flags (``steps``, ``samples``, ``chains``) -> the key of its
        settings each sets.
    """

    name: ClassVar[str]
    Settings: ClassVar[type[Settings]] = Settings
    description: ClassVar[str] = ""
    checkpoints: ClassVar[bool] = False  # run() honours a Checkpoint (resume, Ctrl-C)
    distributed: ClassVar[bool] = False  # trains across processes under jax.distributed
    reference: ClassVar[bool] = False  # the MCMC reference compare adds to an entry's methods
    row_batches: ClassVar[bool] = False  # its steps see the minibatch / partitions the entry asks for
    provides: ClassVar[tuple[str, ...]] = ()  # Handoff fields its posterior fills for others
    accepts: ClassVar[tuple[str, ...]] = ()  # Handoff fields it uses when the own method provides them
    # compare's budget flags (steps, samples, chains) -> the key of this method's settings they set
    budget: ClassVar[dict[str, str]] = {}

    def settings(self, entry: CatalogEntry):
        return self.Settings.of(entry, self.name)

    def table_schema(self, table: dict | None = None, src: str = "") -> dict:
        """The schema the catalog validates this method's ``[inference.<name>]`` table with.

        Parameters
        ----------
        table
            The table as an entry writes it, or None for every key any entry may write.
        src
            The entry's file, named in the errors.

        Returns
        -------
        dict
            Key -> field; the ``Settings``' unless the table has sub-tables (``svi``'s guide).
        """
        return self.Settings.schema()

    def check(self, entry: CatalogEntry, src: str) -> None:
        """Check that ``entry`` can use this method (likelihood, latent sites, …).

        Parameters
        ----------
        entry
            The catalog entry.
        src
            The entry's file, named in the error.

        Raises
        ------
        SSGPError
            One error naming ``src`` and the key, when ``entry`` cannot use this method.
        """

    def requires(self, entry: CatalogEntry) -> tuple[str, ...]:
        """What this method needs from the fit of the entry's own method.

        Parameters
        ----------
        entry
            The catalog entry.

        Returns
        -------
        tuple of str
            `Handoff` fields (``type2``, ``spectral_points``, …), passed in to `run` as
            ``inputs``.
        """
        return ()

    def objective_label(self, entry: CatalogEntry) -> str:
        """What the method optimises or samples, for ``ssgp-ppl models``.

        Parameters
        ----------
        entry
            The catalog entry.

        Returns
        -------
        str
            One short phrase (empty by default).
        """
        return ""

    def paths(self, entry: CatalogEntry) -> tuple[int, str]:
        """How many runs from dispersed starts the entry asks for, and how they combine.

        Parameters
        ----------
        entry
            The catalog entry.

        Returns
        -------
        tuple
            ``(K, combine)``: the number of paths and ``"stacking"`` or another rule of
            ``ssgp_ppl.inference.paths``; one run unless the method has ``paths`` settings.
        """
        return 1, "stacking"

    def run_paths(self, starts: list[tuple], data: Dataset, *, seed: int = 0,
                  steps: int | None = None, progress: bool = True, checkpoint=None,
                  client=None) -> list[Posterior]:
        """Run each path of a multi-path fit: one `run` per start.

        A method may run its paths together (``svi``: vectorised in one jit).

        Parameters
        ----------
        starts
            ``(entry, Handoff)`` per path (`path_starts`).
        data
            The training and test rows.
        seed
            The fit's seed; path k runs with ``ssgp_ppl.inference.paths.path_seed(seed, k)``.
        steps
            SVI/ML steps or NCVMP iterations (default: the entry's).
        progress
            Show progress on stderr.
        checkpoint
            The fit's checkpoint; path k has its own
            (``ssgp_ppl.inference.paths.path_checkpoint``).
        client
            A ``distributed.Client`` to run on.

        Returns
        -------
        list of Posterior
            One per path run; the list stops after a path interrupted by Ctrl-C.
        """
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
        """Where each path of a multi-path fit starts.

        Parameters
        ----------
        entry
            The catalog entry.
        data
            The training rows the starts are drawn for.
        count
            The number of paths.
        seed
            The random seed.
        inputs
            The hand-over from the entry's own method.

        Returns
        -------
        list of tuple
            ``(entry, Handoff)`` per path (default: ``ssgp_ppl.inference.paths.dispersed_starts``).
        """
        from ssgp_ppl.inference.paths import dispersed_starts

        return dispersed_starts(entry, data, count, seed=seed, inputs=inputs)

    def guide_label(self, entry: CatalogEntry) -> str | None:
        """The guide it fits, where it fits one.

        Parameters
        ----------
        entry
            The catalog entry.

        Returns
        -------
        str or None
            The guide's label, None for a method without a guide.
        """
        return None

    def draws(self, entry: CatalogEntry, n: int) -> int:
        """The posterior draws S one run predicts with.

        Parameters
        ----------
        entry
            The catalog entry.
        n
            The number of training rows.

        Returns
        -------
        int
            The entry's predictive samples by default; a sampler's chains × samples. A
            multi-path mixture has ``ssgp_ppl.inference.paths.MIXTURE_DRAWS``.
        """
        return int(entry.config["predictive"]["samples"])

    def run(self, entry: CatalogEntry, data: Dataset, *, seed: int = 0, steps: int | None = None,
            progress: bool = True, inputs: Handoff | None = None, checkpoint=None,
            client=None) -> Posterior:
        """Fit ``entry`` on ``data``: what every subclass writes.

        Parameters
        ----------
        entry
            The catalog entry (its ``[inference.<name>]`` table via ``self.settings(entry)``).
        data
            The training and test rows, standardised.
        seed
            The random seed.
        steps
            SVI/ML steps or NCVMP iterations (default: the entry's); None for a sampler.
        progress
            Show progress on stderr.
        inputs
            The hand-over from the entry's own method (the fields of `requires`).
        checkpoint
            Where to save and resume, for a method with ``checkpoints``.
        client
            A ``distributed.Client`` to run on.

        Returns
        -------
        Posterior
            The draws, the predictive rule and the method's info; the pipeline adds the test
            scores and the DataTree.
        """
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
