"""The scikit-learn estimator: the same numbers as the function API, cloneable parameters, and a
run through a Pipeline and cross_val_score on real data (Auto-MPG)."""

import numpy as np
import pytest

pytest.importorskip("sklearn")

from sklearn.base import clone  # noqa: E402
from sklearn.model_selection import KFold, cross_val_score  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

import ssgp_ppl  # noqa: E402
from ssgp_ppl.data.datasets import load  # noqa: E402

SETTINGS = {"m": 8, "ml.steps": 300}


@pytest.fixture(scope="module")
def autompg():
    d = load("autompg")  # its training rows back in raw units
    return d.x_scaler.inverse(d.x_train), d.y_scaler.inverse(d.y_train)


def test_fit_predict_equal_the_function_api_and_std_is_the_predictive_sd(autompg):
    x, y = autompg
    reg = ssgp_ppl.SSGPRegressor("ssgp_fixed", settings=SETTINGS).fit(x, y)
    post = ssgp_ppl.fit("ssgp_fixed", x=x, y=y, settings=SETTINGS)
    pred = post.predict(x[:50])
    mean, std = reg.predict(x[:50], return_std=True)
    np.testing.assert_array_equal(mean, pred.mean)
    np.testing.assert_array_equal(std, np.sqrt(pred.var))
    lo, hi = reg.predict_interval(x[:50], 0.9)
    np.testing.assert_array_equal(np.stack([lo, hi]), np.stack(pred.interval(0.9)))
    assert reg.n_features_in_ == x.shape[1] and 0.5 < reg.score(x, y) <= 1.0


def test_params_clone_and_set_params():
    reg = ssgp_ppl.SSGPRegressor("ssgp", settings={"m": 5}, seed=3)
    assert reg.get_params() == {"model": "ssgp", "method": None, "settings": {"m": 5},
                                "steps": None, "budget": None, "log_target": False, "seed": 3,
                                "progress": False}
    twin = clone(reg).set_params(seed=4)
    assert twin.seed == 4 and reg.seed == 3 and twin.settings == {"m": 5}
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        reg.predict(np.zeros((2, 7)))


def test_in_a_pipeline_through_cross_val_score(autompg):
    """Three folds of scaler + regressor: each fold's R² equals a fit by hand on that fold."""
    x, y = autompg
    pipe = make_pipeline(StandardScaler(), ssgp_ppl.SSGPRegressor("ssgp_fixed", settings=SETTINGS))
    folds = KFold(3, shuffle=True, random_state=0)
    scores = cross_val_score(pipe, x, y, cv=folds)
    by_hand = []
    for train, test in folds.split(x):
        sc = StandardScaler().fit(x[train])
        post = ssgp_ppl.fit("ssgp_fixed", x=sc.transform(x[train]), y=y[train], settings=SETTINGS)
        resid = y[test] - post.predict(sc.transform(x[test])).mean
        by_hand.append(1 - np.sum(resid**2) / np.sum((y[test] - y[test].mean()) ** 2))
    np.testing.assert_allclose(scores, by_hand, rtol=1e-6)
    assert np.all(scores > 0.6)  # Auto-MPG: a GP explains most of mpg's variance
