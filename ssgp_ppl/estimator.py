"""A scikit-learn estimator over :func:`ssgp_ppl.fit`: ``SSGPRegressor(model=…).fit(X, y)``.

It has scikit-learn's shape (``get_params`` / ``set_params``, ``fit`` returning the estimator,
``predict(X, return_std=True)`` as ``GaussianProcessRegressor``'s, ``score`` = R²), so that it
works in a ``Pipeline``, in ``cross_val_score`` and in ``GridSearchCV``. Needs scikit-learn
(``pip install "ssgp-ppl[sklearn]"``); the function API (:func:`ssgp_ppl.fit`) does not.

>>> from ssgp_ppl import SSGPRegressor                                    # doctest: +SKIP
>>> reg = SSGPRegressor("ssgp_fixed", settings={"m": 20}).fit(X, y)      # doctest: +SKIP
>>> mean, std = reg.predict(X_new, return_std=True)                      # doctest: +SKIP
"""

from __future__ import annotations

import numpy as np

try:
    from sklearn.base import BaseEstimator, RegressorMixin
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError("SSGPRegressor needs scikit-learn: pip install \"ssgp-ppl[sklearn]\" "
                      "(or pip install scikit-learn)") from e


class SSGPRegressor(RegressorMixin, BaseEstimator):
    """A catalog entry as a scikit-learn regressor.

    Parameters
    ----------
    model : str or path
        A catalog entry name (``ssgp_ppl.catalog()``) or a TOML path.
    method : str, optional
        The inference method (default: the entry's own).
    settings : dict, optional
        Catalog overrides, as :func:`ssgp_ppl.fit`'s (``{"m": 20, "svi.steps": 4000}``).
    steps : int, optional
        The step budget of an iterative method.
    budget : float, optional
        For an entry with ``m = "auto"``: the seconds the fit is sized to (as
        :func:`ssgp_ppl.fit`'s).
    log_target : bool
        Fit on log y of a positive target; ``predict`` and ``predict_interval`` give y's mean,
        standard deviation and interval (log-normal given each draw), as :func:`ssgp_ppl.fit`.
    seed : int
        The fit's and the predictions' random seed.
    progress : bool
        Show the fit's progress bar.

    Attributes
    ----------
    posterior_ : ssgp_ppl.posterior.Posterior
        The fitted posterior (predict, score, save, its ArviZ DataTree).
    n_features_in_ : int
        Number of input columns seen by ``fit``.
    feature_names_in_ : ndarray of str
        The input columns' names, when ``X`` was a DataFrame with text column names.
    """

    def __init__(self, model: str = "ssgp", *, method: str | None = None,
                 settings: dict | None = None, steps: int | None = None,
                 budget: float | None = None, log_target: bool = False, seed: int = 0,
                 progress: bool = False):
        self.model = model
        self.method = method
        self.settings = settings
        self.steps = steps
        self.budget = budget
        self.log_target = log_target
        self.seed = seed
        self.progress = progress

    def fit(self, X, y):
        """Fit the entry on the rows of ``X`` (n, d) and targets ``y`` (n,); returns self."""
        from ssgp_ppl.api import fit

        cols = getattr(X, "columns", None)
        if cols is not None and all(isinstance(c, str) for c in cols):
            self.feature_names_in_ = np.asarray(cols, dtype=object)
        elif hasattr(self, "feature_names_in_"):
            del self.feature_names_in_
        self.posterior_ = fit(self.model, x=X, y=np.asarray(y), method=self.method,
                              seed=self.seed, steps=self.steps, budget=self.budget,
                              settings=dict(self.settings) if self.settings else None,
                              log_target=self.log_target, progress=self.progress)
        self.n_features_in_ = int(self.posterior_.n_features)
        return self

    def predict(self, X, return_std: bool = False):
        """The predictive mean of y* at ``X`` (original units); with ``return_std`` also its
        standard deviation (observation noise included), as ``GaussianProcessRegressor``."""
        pred = self._predict(X)
        mean = np.asarray(pred.mean)
        return (mean, np.sqrt(np.asarray(pred.var))) if return_std else mean

    def predict_interval(self, X, level: float = 0.9):
        """The central ``level`` predictive interval of y* at ``X``: (lower, upper)."""
        lo, hi = self._predict(X).interval(level)
        return np.asarray(lo), np.asarray(hi)

    def _predict(self, X):
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "posterior_")
        return self.posterior_.predict(X, seed=self.seed)


__all__ = ["SSGPRegressor"]
