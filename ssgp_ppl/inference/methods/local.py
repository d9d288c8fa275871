"""``local``: Tan et al. 2016, §6's adaptive neighbourhoods, a local NCVMP fit per new input."""

from __future__ import annotations

import dataclasses

import numpy as np

from ssgp_ppl.inference import ncvmp
from ssgp_ppl.inference.fitinfo import FitInfo, LocalInfo
from ssgp_ppl.inference.methods.base import Method, Settings, setting
from ssgp_ppl.inference.methods.ncvmp import algorithm_settings, check_tan
from ssgp_ppl.model.predictive import LocalFitsRule
from ssgp_ppl.posterior import Posterior


@dataclasses.dataclass(frozen=True)
class LocalSettings(Settings):
    k: int = setting(int, 60, "neighbours per test point (Tan et al. 2016, §6)", low=5)
    adapt: bool = setting(bool, True, "refit on the λ-weighted neighbourhood (eq. 16); false: "
                          "predict from the Euclidean fit M1")
    batch: int = setting(int, 1, "test points fitted at once (vmap)", low=1)


class LocalMethod(Method):
    """The fits happen at prediction time: :meth:`run` keeps the training rows and the solver's
    settings (``[inference.ncvmp]``), and every ``predict`` fits each new input's neighbourhood."""

    name = "local"
    Settings = LocalSettings
    description = "Tan et al. 2016, §6: a local NCVMP fit on each test point's neighbourhood"

    def check(self, entry, src: str) -> None:
        check_tan(entry, src, self.name)

    def objective_label(self, entry) -> str:
        return "elbo (NCVMP, per test point)"

    def draws(self, entry, n: int) -> int:
        return 1  # one closed-form predictive per test point

    def run(self, entry, data, *, seed=0, steps=None, progress=True, inputs=None, checkpoint=None,
            client=None) -> Posterior:
        s = self.settings(entry)
        spec = entry.spec(data.n_features)
        prior = ncvmp.tan_prior(spec)
        x, y = np.asarray(data.x_train), np.asarray(data.y_train)
        ncvmp.check_data(x, y, spec.m)
        settings = algorithm_settings(entry, steps)
        rule = LocalFitsRule(x, y, prior, spec.m, s.k, settings,
                             entry.config["model"]["spectral_seed"], s.adapt, s.batch,
                             desc=f"{entry.name}:local")
        return Posterior(entry=entry, method=self.name, dataset=data.name, sites={}, rule=rule,
                         x_scaler=data.x_scaler, y_scaler=data.y_scaler,
                         info=FitInfo(method=LocalInfo(k=s.k, adapt=s.adapt)))


LOCAL = LocalMethod()


__all__ = ["LOCAL", "LocalMethod", "LocalSettings"]
