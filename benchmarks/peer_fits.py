"""Adapters that fit the peer GP libraries the benchmark (``benchmarks/peers.py``) compares against.

Every peer has the same call shape::

    fit_<peer>(x, y, x_test, *, seed=0, steps=..., eval_every=..., on_eval=None, **options) -> PeerFit

``x`` (n, d), ``y`` (n,) and ``x_test`` (t, d) are float64 numpy arrays already standardised by the
caller (inputs and target zero mean / unit sd on the training split); the predictions come back in
those standardised units. ``PeerFit.mean`` / ``PeerFit.var`` are the moments of the predictive
distribution of a new *observation* y* (latent variance plus noise variance).

``on_eval(seconds_so_far, mean, var)``, when given, is called after every ``eval_every`` optimiser
steps and after the last step (unless that step was just reported) with test-set predictions of the
model as it stands; the fit's clock is paused while the prediction for it and the callback run, so
``seconds_so_far`` and ``PeerFit.fit_seconds`` count the fit only.

``fit_seconds`` is the wall time of everything the fit needs: conversion of the data to the
library's arrays, k-means for the inducing points, building the model, JAX compilation (GPJax) and
the optimisation; ``predict_seconds`` is the time to predict ``x_test`` at the end.

The peers, each the field's standard setup:

* ``gpytorch_svgp``: GPyTorch SVGP (Hensman, Fusi & Lawrence 2013, "Gaussian processes for big
  data"; Hensman, Matthews & Ghahramani 2015, "Scalable variational Gaussian process
  classification"), float32.
* ``gpjax_svgp``: GPJax SVGP (the same model; Pinder & Dodd 2022, "GPJax: A Gaussian process
  framework in JAX"), float32, whitened.
* ``gpytorch_exact``: GPyTorch exact GP (Gardner et al. 2018, "GPyTorch: blackbox matrix-matrix
  Gaussian process inference with GPU acceleration"), float64, Cholesky.
* ``sklearn_exact``: scikit-learn ``GaussianProcessRegressor`` (Rasmussen & Williams 2006,
  Algorithm 2.1; Pedregosa et al. 2011), float64, L-BFGS-B.

Threads: the torch fits run with ``torch.set_num_threads(1)`` (restored afterwards) and every fit
limits the BLAS/OpenMP pools to one thread through ``threadpoolctl`` when that is installed. JAX's
thread count is the caller's process setting
(``XLA_FLAGS=--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1``).

The peer libraries are imported inside each function: this module imports without any of them.
``pip install "ssgp-ppl[bench]"`` brings them (torch, gpytorch, gpjax, optax, flax, scikit-learn).
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "PEERS",
    "PeerFit",
    "fit_gpjax_svgp",
    "fit_gpytorch_exact",
    "fit_gpytorch_svgp",
    "fit_sklearn_exact",
    "kmeans_inducing",
]

OnEval = Callable[[float, np.ndarray, np.ndarray], Any]

_INSTALL = 'pip install "ssgp-ppl[bench]"'


@dataclass
class PeerFit:
    """One peer's fit: predictions of y* at ``x_test`` and what the fit cost.

    ``mean`` (t,) and ``var`` (t,) are the predictive mean and variance of a new observation y*
    (latent variance + noise variance), float64, in the caller's standardised units.
    ``fit_seconds``: wall time of the fit (data conversion, k-means, compilation and optimisation
    included; the time of ``on_eval`` and of the predictions made for it excluded).
    ``predict_seconds``: wall time of predicting ``x_test`` with the final model.
    ``settings``: what was used (library and version, inducing points, batch size, learning rate,
    steps run, float type, fitted hyperparameters).
    """

    mean: np.ndarray
    var: np.ndarray
    fit_seconds: float
    predict_seconds: float
    settings: dict[str, Any] = field(default_factory=dict)


class _Clock:
    """Wall clock of a fit that can be paused (for the ``on_eval`` predictions)."""

    def __init__(self) -> None:
        self._start = time.perf_counter()
        self._paused = 0.0

    def seconds(self) -> float:
        return time.perf_counter() - self._start - self._paused

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self._paused += time.perf_counter() - t0


def _one_thread_blas() -> contextlib.AbstractContextManager:
    """Limit the BLAS / OpenMP thread pools (numpy, scipy, scikit-learn) to one thread."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
        return contextlib.nullcontext()
    return threadpool_limits(limits=1)


@contextlib.contextmanager
def _torch_one_thread(torch: Any) -> Iterator[None]:
    """``torch.set_num_threads(1)`` for the fit, restored afterwards; inter-op threads set once."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:  # can be set only once per process, and not after inter-op parallel work has started
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _check_arrays(x: np.ndarray, y: np.ndarray, x_test: np.ndarray) -> tuple[np.ndarray, ...]:
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64).reshape(-1)
    x_test = np.asarray(x_test, dtype=np.float64)
    if x.ndim != 2 or x_test.ndim != 2 or x.shape[0] != y.shape[0] or x.shape[1] != x_test.shape[1]:
        raise ValueError(f"expected x (n, d), y (n,), x_test (t, d); got {x.shape}, {y.shape}, "
                         f"{x_test.shape}")
    return x, y, x_test


def _check_steps(steps: int, eval_every: int) -> None:
    if steps < 1 or eval_every < 1:
        raise ValueError(f"steps and eval_every must be positive, got {steps} and {eval_every}")


def _eval_points(steps: int, eval_every: int) -> list[int]:
    """The step counts after which ``on_eval`` is called: every ``eval_every`` steps, and the last."""
    points = list(range(eval_every, steps + 1, eval_every))
    if not points or points[-1] != steps:
        points.append(steps)
    return points


def _train(step: Callable[[], Any], steps: int, eval_every: int, on_eval, predict,
           clock: _Clock) -> Any:
    """``step()`` ``steps`` times; after every ``eval_every`` steps and the last,
    ``on_eval(seconds, *predict())`` with the clock paused (when ``on_eval`` is given). Returns
    the last step's value (its loss)."""
    done, last = 0, None
    for stop in _eval_points(steps, eval_every):
        while done < stop:
            last = step()
            done += 1
        if on_eval is not None:
            with clock.paused():
                on_eval(clock.seconds(), *predict())
    return last


def kmeans_inducing(x: np.ndarray, k: int, seed: int) -> np.ndarray:
    """``k`` inducing inputs: k-means centres of the rows of ``x`` (all rows when n <= k).

    SciPy's ``kmeans2``: 10 Lloyd iterations from ``k`` distinct rows drawn at random (seeded), on
    at most 100,000 rows drawn without replacement (the k-means initialisation of Hensman et al.
    2013 and of the GPflow SVGP examples; SciPy's k-means++ start is a Python loop, seconds at
    k = 512, so it is not used). A cluster left empty keeps its starting row. float64, shape
    (min(k, n), d).
    """
    from scipy.cluster.vq import kmeans2

    x = np.asarray(x, dtype=np.float64)
    n = x.shape[0]
    if n <= k:
        return x.copy()
    rng = np.random.default_rng(seed)
    sub = x[rng.choice(n, 100_000, replace=False)] if n > 100_000 else x
    with _one_thread_blas(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="One of the clusters is empty")
        centres, _ = kmeans2(sub, k, iter=10, minit="points", seed=rng)
    return np.asarray(centres, dtype=np.float64)


# --------------------------------------------------------------------------------------------------
# GPyTorch SVGP
# --------------------------------------------------------------------------------------------------


def _import_torch() -> tuple[Any, Any]:
    try:
        import gpytorch
        import torch
    except ImportError as e:
        raise ImportError(f"the GPyTorch peers need torch and gpytorch: {_INSTALL}") from e
    return torch, gpytorch


def _torch_predict(torch: Any, gpytorch: Any, model: Any, likelihood: Any, tt: Any,
                   predict_batch: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean and variance of y* (the likelihood's noise included) in batches of ``predict_batch``
    rows, exact variances (``fast_pred_var`` off); the model is back in training mode after."""
    model.eval()
    likelihood.eval()
    means, variances = [], []
    with torch.no_grad(), gpytorch.settings.fast_pred_var(False):
        for lo in range(0, tt.shape[0], predict_batch):
            pred = likelihood(model(tt[lo:lo + predict_batch]))
            means.append(pred.mean.numpy())
            variances.append(pred.variance.numpy())
    model.train()  # drops the prediction caches
    likelihood.train()
    return np.concatenate(means).astype(np.float64), np.concatenate(variances).astype(np.float64)


def fit_gpytorch_svgp(x: np.ndarray, y: np.ndarray, x_test: np.ndarray, *, seed: int = 0,
                      steps: int = 2000, eval_every: int = 100, on_eval: OnEval | None = None,
                      inducing: int = 512, batch_size: int = 1024, lr: float = 0.01,
                      predict_batch: int = 4096) -> PeerFit:
    """GPyTorch SVGP (Hensman et al. 2013, 2015), the GPyTorch SVGP tutorial's setup, float32.

    ``ApproximateGP`` with ``CholeskyVariationalDistribution`` and the (whitened)
    ``VariationalStrategy(learn_inducing_locations=True)``, ``ConstantMean``,
    ``ScaleKernel(RBFKernel(ard_num_dims=d))``, ``GaussianLikelihood``,
    ``VariationalELBO(num_data=n)``; Adam (``lr``) over the model's and the likelihood's
    parameters; minibatches of ``batch_size`` rows drawn by shuffled epochs (the last batch of an
    epoch is the remainder, as a ``DataLoader(shuffle=True)`` gives); ``inducing`` inducing
    points initialised by :func:`kmeans_inducing` (all rows when n < ``inducing``). float32, the
    usual practice for SVGP speed. Predictions ``likelihood(model(x))`` in eval mode in batches of
    ``predict_batch`` rows with ``fast_pred_var`` off.
    """
    torch, gpytorch = _import_torch()
    x, y, x_test = _check_arrays(x, y, x_test)
    _check_steps(steps, eval_every)
    dtype = torch.float32

    with _torch_one_thread(torch), _one_thread_blas(), torch.random.fork_rng(devices=[]):
        clock = _Clock()
        torch.manual_seed(seed)
        n, d = x.shape
        z = kmeans_inducing(x, inducing, seed)
        tx = torch.as_tensor(x, dtype=dtype)
        ty = torch.as_tensor(y, dtype=dtype)
        tt = torch.as_tensor(x_test, dtype=dtype)

        class SVGP(gpytorch.models.ApproximateGP):
            def __init__(self, inducing_points: Any) -> None:
                q_u = gpytorch.variational.CholeskyVariationalDistribution(inducing_points.size(0))
                strategy = gpytorch.variational.VariationalStrategy(
                    self, inducing_points, q_u, learn_inducing_locations=True)
                super().__init__(strategy)
                self.mean_module = gpytorch.means.ConstantMean()
                self.covar_module = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=d))

            def forward(self, xb: Any) -> Any:
                return gpytorch.distributions.MultivariateNormal(self.mean_module(xb), self.covar_module(xb))

        model = SVGP(torch.as_tensor(z, dtype=dtype)).to(dtype)
        likelihood = gpytorch.likelihoods.GaussianLikelihood().to(dtype)
        elbo = gpytorch.mlls.VariationalELBO(likelihood, model, num_data=n)
        optimizer = torch.optim.Adam([{"params": model.parameters()}, {"params": likelihood.parameters()}],
                                     lr=lr)
        batch = min(batch_size, n)
        gen = torch.Generator().manual_seed(seed)

        def predict() -> tuple[np.ndarray, np.ndarray]:
            return _torch_predict(torch, gpytorch, model, likelihood, tt, predict_batch)

        model.train()
        likelihood.train()
        order = {"perm": torch.randperm(n, generator=gen), "pos": 0}  # shuffled epochs

        def step() -> None:
            if order["pos"] >= n:
                order["perm"], order["pos"] = torch.randperm(n, generator=gen), 0
            idx = order["perm"][order["pos"]:order["pos"] + batch]
            order["pos"] += batch
            optimizer.zero_grad(set_to_none=True)
            (-elbo(model(tx[idx]), ty[idx])).backward()
            optimizer.step()

        _train(step, steps, eval_every, on_eval, predict, clock)
        fit_seconds = clock.seconds()

        t0 = time.perf_counter()
        mean, var = predict()
        predict_seconds = time.perf_counter() - t0

    kern = model.covar_module
    settings = {
        "library": f"gpytorch {gpytorch.__version__} (torch {torch.__version__})",
        "model": "SVGP, CholeskyVariationalDistribution + whitened VariationalStrategy, ARD RBF",
        "dtype": "float32", "inducing": int(z.shape[0]), "learn_inducing_locations": True,
        "inducing_init": "kmeans2 (random rows, 10 iterations)", "batch_size": batch,
        "batching": "shuffled epochs", "optimizer": "Adam", "lr": lr, "steps": steps,
        "lengthscale": kern.base_kernel.lengthscale.detach().numpy().reshape(-1).astype(float).tolist(),
        "outputscale": float(kern.outputscale.detach()), "noise_variance": float(likelihood.noise.detach()),
    }
    return PeerFit(mean, var, fit_seconds, predict_seconds, settings)


# --------------------------------------------------------------------------------------------------
# GPJax SVGP
# --------------------------------------------------------------------------------------------------


def fit_gpjax_svgp(x: np.ndarray, y: np.ndarray, x_test: np.ndarray, *, seed: int = 0,
                   steps: int = 2000, eval_every: int = 100, on_eval: OnEval | None = None,
                   inducing: int = 512, batch_size: int = 1024, lr: float = 0.01, whiten: bool = True,
                   jitter: float = 1e-6, float64: bool = False, predict_batch: int = 4096) -> PeerFit:
    """GPJax SVGP (Hensman et al. 2013, 2015; GPJax's "sparse stochastic variational inference"
    tutorial), float32 (``float64=True`` for double).

    ``Prior(mean_function=Constant (trainable), kernel=RBF(ARD lengthscales))`` × ``Gaussian``
    likelihood, the variational family ``WhitenedVariationalGaussian`` (``whiten=False``:
    ``VariationalGaussian``; whitened by default, as GPyTorch's ``VariationalStrategy``), inducing
    inputs from :func:`kmeans_inducing` (trainable), objective ``-gpx.objectives.elbo`` on
    minibatches of ``batch_size`` rows sampled with replacement (as ``gpx.fit`` samples them),
    ``optax.adam(lr)`` on the parameters in GPJax's unconstrained space (``DEFAULT_BIJECTION``).

    The training loop is ``gpx.fit``'s step written out: ``gpx.fit`` re-creates the optimiser state
    on every call, so chaining calls of it for the ``on_eval`` trajectory would restart Adam's
    moments at every evaluation. Here one jitted ``lax.scan`` runs each chunk of steps (all
    ``steps`` in one chunk when ``on_eval`` is None) and the Adam state is carried between chunks.
    The computation runs under ``jax.enable_x64(float64)``, so the caller's ``jax_enable_x64`` does
    not change its float type. Predictions: the variational family's moments point by point (as
    ``gpx.objectives.variational_expectation`` computes them, no t×t covariance) plus the noise
    variance, jitted, in batches of ``predict_batch`` rows; ``predict_seconds`` includes the one
    compilation of that function (also in ``settings["predict_compile_seconds"]``), ``fit_seconds``
    the compilation of the training loop.
    """
    try:
        import gpjax as gpx
        import jax
        import jax.numpy as jnp
        import jax.random as jr
        import optax
        from flax import nnx
        from gpjax.parameters import DEFAULT_BIJECTION, Parameter, Real, transform
    except ImportError as e:
        raise ImportError(f"the GPJax peer needs gpjax and optax: {_INSTALL}") from e
    x, y, x_test = _check_arrays(x, y, x_test)
    _check_steps(steps, eval_every)

    with jax.enable_x64(float64), _one_thread_blas(), warnings.catch_warnings():
        # gpx.Dataset warns whenever X or y is not float64 (at every trace); float32 is our choice
        warnings.filterwarnings("ignore", message=r"(X|y) is not of type float64")
        clock = _Clock()
        dtype = jnp.float64 if float64 else jnp.float32
        n, d = x.shape
        z = kmeans_inducing(x, inducing, seed)
        m = z.shape[0]
        batch = min(batch_size, n)
        X = jnp.asarray(x, dtype)
        Y = jnp.asarray(y, dtype)[:, None]

        kernel = gpx.kernels.RBF(lengthscale=jnp.ones(d, dtype), variance=jnp.asarray(1.0, dtype))
        meanf = gpx.mean_functions.Constant(Real(jnp.asarray(0.0, dtype)))
        prior = gpx.gps.Prior(mean_function=meanf, kernel=kernel)
        lik = gpx.likelihoods.Gaussian(num_datapoints=n, obs_stddev=jnp.asarray(1.0, dtype))
        family = (gpx.variational_families.WhitenedVariationalGaussian if whiten
                  else gpx.variational_families.VariationalGaussian)
        q = family(posterior=prior * lik, inducing_inputs=jnp.asarray(z, dtype),
                   variational_mean=jnp.zeros((m, 1), dtype),
                   variational_root_covariance=jnp.eye(m, dtype=dtype), jitter=jitter)

        graphdef, params, *static = nnx.split(q, Parameter, ...)
        params = transform(params, DEFAULT_BIJECTION, inverse=True)
        optim = optax.adam(lr)
        opt_state = optim.init(params)

        def merged(p: Any) -> Any:
            return nnx.merge(graphdef, transform(p, DEFAULT_BIJECTION), *static)

        def loss(p: Any, xb: Any, yb: Any) -> Any:
            return -gpx.objectives.elbo(merged(p), gpx.Dataset(X=xb, y=yb))

        @jax.jit
        def run(p: Any, state: Any, xs: Any, ys: Any, keys: Any) -> tuple[Any, Any, Any]:
            def step(carry: Any, key: Any) -> tuple[Any, Any]:
                p, state = carry
                idx = jr.randint(key, (batch,), 0, n)  # gpx.fit's get_batch: with replacement
                value, grad = jax.value_and_grad(loss)(p, xs[idx], ys[idx])
                updates, state = optim.update(grad, state, p)
                return (optax.apply_updates(p, updates), state), value

            (p, state), values = jax.lax.scan(step, (p, state), keys)
            return p, state, values

        @jax.jit
        def moments(p: Any, xb: Any) -> tuple[Any, Any]:
            model = merged(p)

            def one(xi: Any) -> tuple[Any, Any]:
                qx = model(xi[None, :])
                return qx.mean.squeeze(), qx.covariance().squeeze()

            mu, latent = jax.vmap(one)(xb)
            return mu, latent + model.posterior.likelihood.obs_stddev[...].squeeze() ** 2

        t_rows = x_test.shape[0]
        pb = min(predict_batch, t_rows)

        compiled: dict[str, Any] = {}  # the prediction function, compiled once, its compile time

        def predict(p: Any) -> tuple[np.ndarray, np.ndarray]:
            if not compiled:
                t0 = time.perf_counter()
                compiled["fn"] = moments.lower(p, jax.ShapeDtypeStruct((pb, d), dtype)).compile()
                compiled["seconds"] = time.perf_counter() - t0
            means, variances = [], []
            for lo in range(0, t_rows, pb):
                rows = x_test[lo:lo + pb]
                pad = np.concatenate([rows, np.repeat(rows[-1:], pb - len(rows), axis=0)])  # one shape
                mu, v = compiled["fn"](p, jnp.asarray(pad, dtype))
                means.append(np.asarray(mu)[: len(rows)])
                variances.append(np.asarray(v)[: len(rows)])
            return np.concatenate(means).astype(np.float64), np.concatenate(variances).astype(np.float64)

        keys = jr.split(jr.key(seed), steps)
        chunks = _eval_points(steps, eval_every) if on_eval is not None else [steps]
        done, values = 0, None
        for stop in chunks:
            params, opt_state, values = run(params, opt_state, X, Y, keys[done:stop])
            jax.block_until_ready(params)
            done = stop
            if on_eval is not None:
                with clock.paused():
                    on_eval(clock.seconds(), *predict(params))
        fit_seconds = clock.seconds()

        t0 = time.perf_counter()
        mean, var = predict(params)
        # the prediction function's compilation counts once, whether an on_eval call or this one did it
        predict_seconds = time.perf_counter() - t0 + (0.0 if on_eval is None else compiled["seconds"])

        final = merged(params)
        kern = final.posterior.prior.kernel
        settings = {
            "library": f"gpjax {gpx.__version__} (jax {jax.__version__}, optax {optax.__version__})",
            "model": f"SVGP, {family.__name__}, ARD RBF, Constant mean",
            "dtype": "float64" if float64 else "float32", "jitter": jitter, "inducing": int(m),
            "learn_inducing_locations": True, "inducing_init": "kmeans2 (random rows, 10 iterations)",
            "batch_size": batch, "batching": "sampled with replacement (gpx.fit's get_batch)",
            "optimizer": "optax.adam", "lr": lr, "steps": done,
            "final_loss": float(values[-1]) if values is not None else None,
            "predict_compile_seconds": compiled["seconds"],
            "lengthscale": np.asarray(kern.lengthscale[...], dtype=float).reshape(-1).tolist(),
            "outputscale": float(kern.variance[...]),
            "noise_variance": float(final.posterior.likelihood.obs_stddev[...] ** 2),
        }
    return PeerFit(mean, var, fit_seconds, predict_seconds, settings)


# --------------------------------------------------------------------------------------------------
# GPyTorch exact GP
# --------------------------------------------------------------------------------------------------


def _refuse_rows(name: str, n: int, max_rows: int) -> None:
    if n > max_rows:
        raise ValueError(f"{name}: {n} training rows is above max_rows={max_rows} (an exact GP is O(n^3))")


def fit_gpytorch_exact(x: np.ndarray, y: np.ndarray, x_test: np.ndarray, *, seed: int = 0,
                       steps: int = 100, eval_every: int = 10, on_eval: OnEval | None = None,
                       lr: float = 0.1, max_rows: int = 10_000, cholesky: bool = True,
                       predict_batch: int = 2048) -> PeerFit:
    """GPyTorch exact GP, the GPyTorch regression tutorial's recipe, float64.

    ``ExactGP`` with ``ConstantMean``, ``ScaleKernel(RBFKernel(ard_num_dims=d))``,
    ``GaussianLikelihood``; Adam (``lr`` 0.1) for ``steps`` full-batch iterations on the exact
    marginal likelihood (``ExactMarginalLogLikelihood``). With ``cholesky`` (default) every solve
    and log-determinant is a Cholesky one (``max_cholesky_size`` above n), so training and
    prediction are exact; ``cholesky=False`` keeps GPyTorch's default of conjugate gradients and
    stochastic Lanczos quadrature above 800 rows (BBMM, Gardner et al. 2018). Predictions
    ``likelihood(model(x))`` with ``fast_pred_var`` off. Refuses (``ValueError``) above
    ``max_rows`` training rows.
    """
    torch, gpytorch = _import_torch()
    x, y, x_test = _check_arrays(x, y, x_test)
    _check_steps(steps, eval_every)
    _refuse_rows("gpytorch_exact", x.shape[0], max_rows)
    dtype = torch.float64
    chol = gpytorch.settings.max_cholesky_size(x.shape[0] + 1) if cholesky else contextlib.nullcontext()

    with _torch_one_thread(torch), _one_thread_blas(), torch.random.fork_rng(devices=[]), chol:
        clock = _Clock()
        torch.manual_seed(seed)
        d = x.shape[1]
        tx = torch.as_tensor(x, dtype=dtype)
        ty = torch.as_tensor(y, dtype=dtype)
        tt = torch.as_tensor(x_test, dtype=dtype)

        class ExactGPModel(gpytorch.models.ExactGP):
            def __init__(self, train_x: Any, train_y: Any, likelihood: Any) -> None:
                super().__init__(train_x, train_y, likelihood)
                self.mean_module = gpytorch.means.ConstantMean()
                self.covar_module = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=d))

            def forward(self, xb: Any) -> Any:
                return gpytorch.distributions.MultivariateNormal(self.mean_module(xb), self.covar_module(xb))

        likelihood = gpytorch.likelihoods.GaussianLikelihood().to(dtype)
        model = ExactGPModel(tx, ty, likelihood).to(dtype)
        mll = gpytorch.mlls.ExactMarginalLogLikelihood(likelihood, model)
        optimizer = torch.optim.Adam(model.parameters(), lr=lr)  # includes the likelihood's noise

        def predict() -> tuple[np.ndarray, np.ndarray]:
            return _torch_predict(torch, gpytorch, model, likelihood, tt, predict_batch)

        model.train()
        likelihood.train()

        def step():
            optimizer.zero_grad(set_to_none=True)
            loss = -mll(model(tx), ty)
            loss.backward()
            optimizer.step()
            return loss

        loss = _train(step, steps, eval_every, on_eval, predict, clock)
        fit_seconds = clock.seconds()

        t0 = time.perf_counter()
        mean, var = predict()  # the first prediction builds the caches (Cholesky of K + noise)
        predict_seconds = time.perf_counter() - t0

    kern = model.covar_module
    settings = {
        "library": f"gpytorch {gpytorch.__version__} (torch {torch.__version__})",
        "model": "ExactGP, ARD RBF, Constant mean", "dtype": "float64",
        "linear_algebra": "Cholesky" if cholesky else "GPyTorch default (CG / Lanczos above 800 rows)",
        "optimizer": "Adam", "lr": lr, "steps": steps, "final_loss": float(loss.detach()),
        "lengthscale": kern.base_kernel.lengthscale.detach().numpy().reshape(-1).astype(float).tolist(),
        "outputscale": float(kern.outputscale.detach()), "noise_variance": float(likelihood.noise.detach()),
    }
    return PeerFit(mean, var, fit_seconds, predict_seconds, settings)


# --------------------------------------------------------------------------------------------------
# scikit-learn exact GP
# --------------------------------------------------------------------------------------------------


def fit_sklearn_exact(x: np.ndarray, y: np.ndarray, x_test: np.ndarray, *, seed: int = 0,
                      steps: int = 15_000, eval_every: int = 10, on_eval: OnEval | None = None,
                      max_rows: int = 10_000, predict_batch: int = 2048) -> PeerFit:
    """scikit-learn exact GP (Rasmussen & Williams 2006, Algorithm 2.1), float64.

    ``GaussianProcessRegressor(kernel=ConstantKernel() * RBF(np.ones(d)) + WhiteKernel(),
    normalize_y=False, n_restarts_optimizer=0)``: L-BFGS-B on the exact log marginal likelihood
    from the kernel's default hyperparameters, as scikit-learn's own ``"fmin_l_bfgs_b"`` optimizer
    runs it (``scipy.optimize.minimize(method="L-BFGS-B", jac=True)`` within the kernel's bounds)
    with at most ``steps`` iterations (15,000: SciPy's default, i.e. to convergence). ``eval_every``
    counts L-BFGS-B iterations: ``on_eval`` gets the predictions of a GP refitted
    (``optimizer=None``) at that iteration's hyperparameters. ``var`` is the predictive std² of
    ``predict(return_std=True)``, which includes the ``WhiteKernel`` noise (the predictive variance
    of y*). Refuses (``ValueError``) above ``max_rows`` training rows.
    """
    try:
        import sklearn
        from scipy.optimize import minimize
        from sklearn.gaussian_process import GaussianProcessRegressor
        from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel
    except ImportError as e:
        raise ImportError(f"the scikit-learn peer needs scikit-learn: {_INSTALL}") from e
    x, y, x_test = _check_arrays(x, y, x_test)
    _check_steps(steps, eval_every)
    _refuse_rows("sklearn_exact", x.shape[0], max_rows)

    def predict(gpr: Any) -> tuple[np.ndarray, np.ndarray]:
        means, variances = [], []
        for lo in range(0, x_test.shape[0], predict_batch):
            mu, sd = gpr.predict(x_test[lo:lo + predict_batch], return_std=True)
            means.append(mu)
            variances.append(sd**2)
        return np.concatenate(means).astype(np.float64), np.concatenate(variances).astype(np.float64)

    with _one_thread_blas():
        clock = _Clock()
        kernel = ConstantKernel() * RBF(np.ones(x.shape[1])) + WhiteKernel()
        info: dict[str, Any] = {}

        def optimizer(obj_func: Callable, initial_theta: np.ndarray, bounds: np.ndarray) -> tuple:
            it = [0]

            def callback(theta: np.ndarray) -> None:
                it[0] += 1
                if on_eval is not None and it[0] % eval_every == 0:
                    with clock.paused():
                        at = GaussianProcessRegressor(kernel=kernel.clone_with_theta(theta), optimizer=None,
                                                      normalize_y=False).fit(x, y)
                        on_eval(clock.seconds(), *predict(at))
                        info["reported"] = it[0]

            res = minimize(obj_func, initial_theta, method="L-BFGS-B", jac=True, bounds=bounds,
                           options={"maxiter": steps}, callback=callback)
            info.update(nit=int(res.nit), converged=bool(res.success), message=str(res.message))
            return res.x, res.fun

        gpr = GaussianProcessRegressor(kernel=kernel, normalize_y=False, n_restarts_optimizer=0,
                                       optimizer=optimizer, random_state=seed).fit(x, y)
        if on_eval is not None and info.get("reported") != info["nit"]:
            with clock.paused():
                on_eval(clock.seconds(), *predict(gpr))
        fit_seconds = clock.seconds()

        t0 = time.perf_counter()
        mean, var = predict(gpr)
        predict_seconds = time.perf_counter() - t0

    k = gpr.kernel_
    settings = {
        "library": f"scikit-learn {sklearn.__version__}",
        "model": "GaussianProcessRegressor, ConstantKernel * RBF(ARD) + WhiteKernel", "dtype": "float64",
        "optimizer": "L-BFGS-B", "steps": info["nit"], "max_steps": steps, "converged": info["converged"],
        "message": info["message"], "log_marginal_likelihood": float(gpr.log_marginal_likelihood_value_),
        "lengthscale": np.atleast_1d(k.k1.k2.length_scale).astype(float).tolist(),
        "outputscale": float(k.k1.k1.constant_value), "noise_variance": float(k.k2.noise_level),
    }
    return PeerFit(mean, var, fit_seconds, predict_seconds, settings)


PEERS: dict[str, Callable[..., PeerFit]] = {
    "gpytorch_svgp": fit_gpytorch_svgp,
    "gpjax_svgp": fit_gpjax_svgp,
    "gpytorch_exact": fit_gpytorch_exact,
    "sklearn_exact": fit_sklearn_exact,
}
