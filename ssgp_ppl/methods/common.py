"""What several methods share: the spec with handed-over spectral points, partitions, the rule."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from ssgp_ppl.datatree import LOGLIK_MAX_VALUES, LOO_MIN_DRAWS, by_chain
from ssgp_ppl.predictive import SiteRule

__all__ = ["LOGLIK_MAX_VALUES", "LOO_MIN_DRAWS", "by_chain", "spec_for", "partitions_for",
           "site_rule"]


def spec_for(entry, data, inputs):
    """The entry's model spec for the data's columns; the spectral points handed over (the set
    NCVMP's restarts kept) replace the entry's own."""
    spec = entry.spec(data.n_features)
    if inputs is not None and inputs.spectral_points is not None:
        spec = dataclasses.replace(spec, spectral_points=jnp.asarray(inputs.spectral_points))
    return spec


def partitions_for(entry, data, inputs, seed: int):
    """The k-means partitions handed over, else built as ``[partitions]`` says (None when the
    entry uses none)."""
    if inputs is not None and inputs.partitions is not None:
        return inputs.partitions
    return entry.partitions(data.x_train, seed=seed) if entry.uses_partitions else None


def site_rule(entry, sites: dict, data, partitions) -> SiteRule:
    """The entry's ``[predictive]`` rule over flat site draws (S, ...)."""
    pred = entry.config["predictive"]
    needs_data = pred["rule"] != "degenerate"
    return SiteRule(pred["rule"], {k: jnp.asarray(v) for k, v in sites.items()},
                    np.asarray(data.x_train) if needs_data else None,
                    np.asarray(data.y_train) if needs_data else None, float(pred["gamma"]),
                    partitions if pred["rule"] == "local" else None)
