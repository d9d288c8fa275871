"""Quantities the SSGP posterior's symmetries leave unchanged, and VI-vs-MCMC comparisons on them.

The SSGP likelihood (Hoang et al. 2017, eq. 3) is invariant under permuting the m frequencies (with their
cos/sin amplitude pairs) and under flipping a frequency's sign together with its sine amplitude,
so a posterior over free θ has up to m!·2^m equivalent modes. In the scaled parameterisation
(Tan et al. 2016, eq. 4, fixed spectral points) the exact symmetry is λ → −λ with every sine amplitude
flipped; flipping one λ_j is only approximately one (through the symmetric distribution of the
fixed points), which still leaves the posterior with near-equivalent modes. Comparing VI with
MCMC site by site is therefore meaningless. Every function here works on quantities those maps fix:

* ``noise``, ``signal``: σ_n, σ_s (original units of y);
* ``frequency_spread`` (d,): 2π · rms_i r_ij, the inverse of the effective lengthscale (an SE
  spectral density with lengthscale ℓ_j has this spread 1/ℓ_j; in the scaled parameterisation
  it is |λ_j| times the rms of the fixed spectral points). Inverse rather than lengthscale: an
  irrelevant input has λ_j ≈ 0, where 1/|λ_j| has no moments;
* ``kernel`` (d, lag): the implied covariance k(τ e_j) = σ_s²/m Σ_i cos(2π r_ij τ) (the prior
  covariance of f given θ under s ~ N(0, σ_s²/m I), Hoang et al. 2017, eq. 3) at lags τ along each input;
* ``f_test`` (test,): a draw of the latent function at each test input from its per-draw
  predictive N(mean_f, var_f) (exact for sampled s; the marginal for integrated-out s).

All are per posterior draw; :func:`posterior_comparison` compares two sets of draws with
``arviz_stats`` (Wasserstein-1, KL by nearest neighbours) and the ratio of posterior standard
deviations; :func:`count_modes` groups NUTS chains into modes by two-chain rank R-hat.
"""

from __future__ import annotations

import warnings

import numpy as np
import xarray as xr

from ssgp_ppl.model import spectral

LAGS = np.linspace(0.0, 2.0, 21)  # in the model's (scaled) input units
LAGS.setflags(write=False)
SCALARS = ("noise", "signal", "frequency_spread")
QUANTITIES = SCALARS + ("kernel", "f_test")
DIMS = {"frequency_spread": ["input"], "kernel": ["input", "lag"], "f_test": ["test"]}
NUM_SAMPLES = 500  # draws subsampled from each side by arviz_stats' distances
KL_MAX_COMPONENTS = 25  # per quantity; components beyond it are thinned evenly (f_test has n_test)


def frequency_spread(frequencies):
    """2π rms_i r_ij per input dimension j (1 / effective lengthscale); (..., m, d) -> (..., d)."""
    return spectral.TWO_PI * np.sqrt(np.mean(np.square(frequencies), axis=-2))


def kernel_at_lags(frequencies, signal, lags=LAGS):
    """k(τ e_j) = σ_s²/m Σ_i cos(2π r_ij τ); frequencies (..., m, d), signal (...,) -> (..., d, L)."""
    m = frequencies.shape[-2]
    phase = spectral.TWO_PI * frequencies[..., :, :, None] * np.asarray(lags)  # (..., m, d, L)
    return np.asarray(signal)[..., None, None] ** 2 / m * np.cos(phase).sum(axis=-3)


def invariant_draws(frequencies, signal, noise, mean_f, var_f, *, y_scale: float = 1.0,
                    y_shift: float = 0.0, seed: int = 0, lags=LAGS) -> dict:
    """Every invariant quantity per draw, in original units of y.

    frequencies (S, m, d); signal, noise (S,) in standardised units; mean_f, var_f (S, n_test) the
    per-draw predictive of f* in standardised units. Returns a dict of (S, ...) float64 arrays.
    """
    frequencies = np.asarray(frequencies, np.float64)
    signal = np.asarray(signal, np.float64)
    mean_f = np.asarray(mean_f, np.float64)
    sd_f = np.sqrt(np.maximum(np.asarray(var_f, np.float64), 0.0))
    z = np.random.default_rng(seed).standard_normal(mean_f.shape)
    out = {} if noise is None else {"noise": np.asarray(noise, np.float64) * y_scale}
    return out | {
        "signal": signal * y_scale,
        "frequency_spread": frequency_spread(frequencies),
        "kernel": kernel_at_lags(frequencies, signal, lags) * y_scale**2,
        "f_test": (mean_f + sd_f * z) * y_scale + y_shift,
    }


def as_dataset(draws: dict, chains: int, lags=LAGS) -> xr.Dataset:
    """(S, ...) arrays -> Dataset with (chain, draw, ...) variables and named dims/coords."""
    data = {}
    for k, v in draws.items():
        v = np.asarray(v)
        arr = v.reshape((chains, -1) + v.shape[1:])
        data[k] = (["chain", "draw"] + DIMS.get(k, []), arr)
    ds = xr.Dataset(data)
    coords = {"chain": np.arange(ds.sizes["chain"]), "draw": np.arange(ds.sizes["draw"])}
    if "lag" in ds.dims:
        coords["lag"] = np.asarray(lags)
    for dim in ("input", "test"):
        if dim in ds.dims:
            coords[dim] = np.arange(ds.sizes[dim])
    return ds.assign_coords(coords)


def varies(a) -> bool:
    """Whether draws differ beyond rounding (a type-II estimate repeated per draw does not)."""
    a = np.asarray(a, np.float64)
    return bool(np.std(a) > 1e-9 * (np.abs(a).mean() + 1e-300))


def _components(da: xr.DataArray) -> list[xr.DataArray]:
    """The scalar components of a (chain, draw, ...) variable, each (chain, draw)."""
    if da.ndim == 2:
        return [da]
    flat = da.stack(component=[d for d in da.dims if d not in ("chain", "draw")])
    return [flat.isel(component=i).drop_vars(["component"] + list(flat.indexes["component"].names))
            for i in range(flat.sizes["component"])]


def _thin(items: list, k: int) -> list:
    if len(items) <= k:
        return items
    return [items[i] for i in np.linspace(0, len(items) - 1, k).round().astype(int)]


def posterior_comparison(approx: xr.Dataset, reference: xr.Dataset, *, seed: int = 0) -> dict:
    """Compare the draws of an approximation (VI) with a reference (NUTS) per invariant quantity.

    For each quantity varying under both: ``w1`` the Wasserstein-1 distance per component
    averaged over components (original units; ``arviz_stats.wasserstein`` with joint=False),
    ``w1_scaled`` the same with each component divided by the reference's sd, ``kl`` the
    nearest-neighbour estimate of KL(approx ‖ reference) per component averaged
    (``arviz_stats.kl_divergence``'s estimate, :func:`marginal_kl`; at most KL_MAX_COMPONENTS
    evenly spaced components), and the ratio of posterior standard deviations sd_approx /
    sd_ref: median, min and max over components (< 1: VI understates the uncertainty).
    """
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        # tied draws give a zero nearest-neighbour distance: KL is then inf (reported as such)
        warnings.simplefilter("ignore", RuntimeWarning)
        return _posterior_comparison(approx, reference, seed)


def marginal_w1(pairs, *, num_samples: int, seed: int) -> np.ndarray:
    """Wasserstein-1 distance of each (approx, reference) pair of (chain, draw) components: the
    number ``arviz_stats.wasserstein(a, r, joint=False, num_samples=num_samples,
    random_seed=seed)`` returns, computed as it does (the chains stacked draw-wise, the same
    seeded subsample of ``num_samples`` draws, scipy's ``wasserstein_distance``) without its
    per-call conversion of each component to a DataTree, which made a comparison of a few
    hundred components take seconds."""
    from scipy.stats import wasserstein_distance

    subsample = _subsampler(num_samples, seed)
    return np.array([float(wasserstein_distance(subsample(a), subsample(r))) for a, r in pairs])


def _subsampler(num_samples: int, seed: int):
    """A component's (chain, draw) values stacked draw-wise and subsampled as ``arviz_base.extract``
    does for ``num_samples`` draws with ``random_seed=seed``."""
    picks: dict[int, np.ndarray] = {}

    def subsample(da):
        v = np.asarray(da.transpose("chain", "draw").values).reshape(-1)
        if v.size not in picks:
            picks[v.size] = np.random.default_rng(seed).choice(np.arange(v.size), size=num_samples,
                                                               replace=False)
        return v[picks[v.size]]

    return subsample


def marginal_kl(pairs, *, num_samples: int, seed: int) -> np.ndarray:
    """Nearest-neighbour KL(approx ‖ reference) of each (approx, reference) pair of (chain, draw)
    components (Perez-Cruz 2008, eq. 14): the number ``arviz_stats.kl_divergence(a, r,
    num_samples=num_samples, random_seed=seed)`` returns, computed as it does (the same seeded
    subsample, the same 1e-6-sd jitter against ties, k-d trees) without its conversion of each
    pair to DataTrees, which took most of a small comparison's diagnostics time."""
    from scipy.spatial import cKDTree

    subsample = _subsampler(num_samples, seed)
    out = []
    for a, r in pairs:
        x, y = subsample(a)[:, None], subsample(r)[:, None]
        rng = np.random.default_rng(0)  # arviz_stats' jitter, drawn in its order
        x = x + rng.normal(0, x.std(axis=0) / 1e6, size=x.shape)
        y = y + rng.normal(0, y.std(axis=0) / 1e6, size=y.shape)
        n, dim = x.shape
        r_k, _ = cKDTree(y).query(x)
        s_k = cKDTree(x).query(x, k=2)[0][:, 1]
        kl = (dim / n) * np.sum(np.log(r_k / s_k)) + np.log(n / (n - 1))
        out.append(max(0.0, float(kl)))
    return np.array(out)


def _posterior_comparison(approx, reference, seed):
    out = {}
    for name in QUANTITIES:
        if name not in approx or name not in reference:
            continue
        comps_a, comps_r = _components(approx[name]), _components(reference[name])
        pairs = [(a, r) for a, r in zip(comps_a, comps_r, strict=True)
                 if varies(a) and varies(r)]
        if not pairs:
            continue  # constant under one of them (a type-II estimate, a point fit)
        sd_a = np.array([float(a.std()) for a, _ in pairs])
        sd_r = np.array([float(r.std()) for _, r in pairs])
        num_samples = min(NUM_SAMPLES, pairs[0][0].size, pairs[0][1].size)
        w1 = marginal_w1(pairs, num_samples=num_samples, seed=seed)
        kl = marginal_kl(_thin(pairs, KL_MAX_COMPONENTS), num_samples=num_samples, seed=seed)
        ratio = sd_a / sd_r
        out[name] = {"components": len(pairs), "w1": float(w1.mean()),
                     "w1_scaled": float(np.mean(w1 / sd_r)), "kl": float(np.mean(kl)),
                     "std_ratio": float(np.median(ratio)), "std_ratio_min": float(ratio.min()),
                     "std_ratio_max": float(ratio.max())}
    return out


def count_modes(draws: xr.Dataset, *, threshold: float = 1.1, extra: dict | None = None) -> dict:
    """How many distinct modes the chains visited.

    Two chains are in the same mode when the two-chain rank R-hat (``arviz_stats.rhat``) of every
    scalar invariant (noise, signal, each input's frequency spread, and ``extra`` (chain, draw)
    arrays such as the log density) is below ``threshold``; modes are the connected components of
    that relation. Returns {"modes": k, "chain_mode": [mode index per chain]}.
    """
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # a stuck chain: zero variance
        return _count_modes(draws, threshold, extra)


def _count_modes(draws, threshold, extra):
    from arviz_stats import rhat

    comps = []
    for name in SCALARS:
        if name in draws:
            comps += [np.asarray(c) for c in _components(draws[name]) if varies(c)]
    comps += [np.asarray(v) for v in (extra or {}).values()]
    chains = draws.sizes["chain"]
    parent = list(range(chains))

    def root(i):
        while parent[i] != i:
            i = parent[i]
        return i

    for i in range(chains):
        for j in range(i + 1, chains):
            r = np.array([float(rhat(c[[i, j]], method="rank")) for c in comps] or [1.0])
            if np.all(r < threshold):  # NaN (a stuck chain) counts as a different mode
                parent[root(j)] = root(i)
    roots = [root(i) for i in range(chains)]
    labels = {r: k for k, r in enumerate(dict.fromkeys(roots))}
    return {"modes": len(labels), "chain_mode": [labels[r] for r in roots]}


__all__ = ["LAGS", "QUANTITIES", "as_dataset", "count_modes", "frequency_spread",
           "invariant_draws", "kernel_at_lags", "marginal_kl", "marginal_w1", "posterior_comparison"]
