"""Log evidence checks: a correlated Gaussian target whose log evidence is known in closed form,
and importance sampling and bridge sampling estimates of log p(y) from a proposal fitted to
posterior draws."""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg
import scipy.special

GAUSSIAN_DIM = 11  # the pendulum reference target's dimension (9 λ, noise, signal)
GAUSSIAN_MAX_CORR = 0.998  # its largest posterior correlation, as on pendulum
GAUSSIAN_CONDITION = 1e4  # its posterior covariance's condition number


class GaussianTarget(NamedTuple):
    """Prior N(0, I), likelihood N(y | z, Λ⁻¹): the posterior N(μ, Σ) with Σ = (I + Λ)⁻¹ and the
    exact log evidence log N(y | 0, I + Λ⁻¹)."""

    lik_precision: np.ndarray
    y: np.ndarray
    post_cov: np.ndarray
    post_mean: np.ndarray
    log_z: float

    def log_densities(self, dtype=None):
        """(log prior, log likelihood, prior draw(key, n)) on flat vectors, for
        :func:`ssgp_ppl.inference.smc.tempered_smc_runs`."""
        dtype = dtype or jnp.result_type(float)
        prec = jnp.asarray(self.lik_precision, dtype)
        y = jnp.asarray(self.y, dtype)
        dim = len(self.y)
        _, logdet = np.linalg.slogdet(self.lik_precision)
        const = 0.5 * logdet - 0.5 * dim * math.log(2 * math.pi)

        def log_prior(z):
            return -0.5 * z @ z - 0.5 * dim * math.log(2 * math.pi)

        def log_lik(z):
            r = y - z
            return const - 0.5 * r @ prec @ r

        def draw(key, n):
            return jax.random.normal(key, (n, dim), dtype)

        return log_prior, log_lik, draw

    def tempered_cov(self, beta, dtype=None):
        """(I + βΛ)⁻¹, the covariance of p_β ∝ p(z) p(y | z)^β (jax, traceable in β)."""
        dtype = dtype or jnp.result_type(float)
        dim = len(self.y)
        return jnp.linalg.inv(jnp.eye(dim, dtype=dtype)
                              + beta * jnp.asarray(self.lik_precision, dtype))


def correlated_gaussian(seed: int = 0) -> GaussianTarget:
    """The D = ``GAUSSIAN_DIM`` Gaussian whose posterior has correlation ``GAUSSIAN_MAX_CORR``
    between its first two coordinates and condition number ``GAUSSIAN_CONDITION``: posterior
    covariance eigenvalues 0.9 × 10^(−4 … 0), paired in 45° rotations (the smallest with the
    one 1600 times larger) and mixed slightly by a seeded rotation; y is a draw of its marginal."""
    dim = GAUSSIAN_DIM
    rng = np.random.default_rng(seed)
    pairs = np.eye(dim)
    c = math.sqrt(0.5)
    for a in range(0, dim - 1, 2):
        pairs[a:a + 2, a:a + 2] = [[c, -c], [c, c]]
    skew = rng.normal(size=(dim, dim)) * 0.05
    rot = pairs @ scipy.linalg.expm(skew - skew.T)
    eig = 0.9 * np.logspace(-math.log10(GAUSSIAN_CONDITION), 0, dim)
    order = [0, 8, 1, 6, 2, 9, 3, 5, 4, 7, 10]
    post_cov = rot @ np.diag(eig[order]) @ rot.T
    post_cov = 0.5 * (post_cov + post_cov.T)
    lik_precision = np.linalg.inv(post_cov) - np.eye(dim)
    lik_precision = 0.5 * (lik_precision + lik_precision.T)
    marginal = np.eye(dim) + np.linalg.inv(lik_precision)
    y = np.linalg.cholesky(marginal) @ rng.normal(size=dim)
    _, logdet = np.linalg.slogdet(marginal)
    log_z = -0.5 * (y @ np.linalg.solve(marginal, y) + logdet + dim * math.log(2 * math.pi))
    post_mean = post_cov @ lik_precision @ y
    return GaussianTarget(lik_precision, y, post_cov, post_mean, float(log_z))


IS_DF = 5.0  # degrees of freedom of the multivariate t proposal components
IS_INFLATE = 1.5  # their covariance: the fitted one times this
IS_COMPONENTS = (1, 2, 4)  # mixture sizes tried (at least 5 (D + 1) particles a component); the
# one with the smallest BIC is used
IS_EM_ITERS = 200
IS_CHUNK = 4096  # proposal draws evaluated per jit call
IS_KDE_CENTRES = 4096  # at most this many distinct particles centre the kernel density proposal
IS_KDE_CHUNK = 256  # proposal draws per kernel density evaluation (draws × centres × D floats)
KHAT_RELIABLE = 0.7  # PSIS: above this the importance sampling estimate is unreliable
SYMMETRY_ULPS = 1000  # p(θ) = p(s∘θ) within this many ulps of log p: float rounding, no more


class _Mixture(NamedTuple):
    """Multivariate t mixture Σⱼ wⱼ t(·; μⱼ, Σⱼ), made exactly symmetric under θ → s∘θ where
    ``signs`` is given: q(θ) = ½ Σⱼ wⱼ [t(θ; μⱼ, Σⱼ) + t(s∘θ; μⱼ, Σⱼ)]."""

    w: np.ndarray
    mu: np.ndarray
    cov: np.ndarray
    signs: np.ndarray | None

    def _components(self, z, df):
        return np.stack([np.log(self.w[j]) + _mvt_logpdf(z, self.mu[j], self.cov[j], df)
                         for j in range(len(self.w))], 1)

    def logpdf(self, z, df=IS_DF):
        out = scipy.special.logsumexp(self._components(z, df), axis=1)
        if self.signs is None:
            return out
        return np.logaddexp(out, scipy.special.logsumexp(self._components(z * self.signs, df),
                                                         axis=1)) - math.log(2)

    def sample(self, rng, n, df=IS_DF):
        d = self.mu.shape[1]
        chi = rng.chisquare(df, size=n) / df
        g = rng.normal(size=(n, d))
        comp = rng.choice(len(self.w), size=n, p=self.w)
        z = np.empty((n, d))
        for j in range(len(self.w)):
            at = comp == j
            z[at] = self.mu[j] + (g[at] @ np.linalg.cholesky(self.cov[j]).T) / np.sqrt(chi[at])[:, None]
        if self.signs is not None:  # mirrored with probability ½: the density above
            z = np.where((rng.random(n) < 0.5)[:, None], z * self.signs, z)
        return z


def _gaussian_mixture(x: np.ndarray, k: int, rng, *,
                      signs: np.ndarray | None = None) -> tuple[_Mixture, float]:
    """(mixture, log likelihood) of a k-component Gaussian mixture fitted to the rows of ``x`` by
    EM, started at k-means++ centres. With ``signs`` the mixture is the symmetric one of :class:`_Mixture`:
    each row is explained by a component either as it is or mirrored, which is EM on the rows and
    their mirrors with each component tied to its mirror image (a fit to the particles folded
    onto one side of the symmetry, the fold chosen softly by each row's responsibilities)."""
    n, d = x.shape
    views = [x] if signs is None else [x, x * signs]
    pool = np.concatenate(views)
    centres = [pool[rng.integers(len(pool))]]
    for _ in range(1, k):
        dist2 = np.min([((pool - c) ** 2).sum(1) for c in centres], axis=0)
        centres.append(pool[rng.choice(len(pool), p=dist2 / dist2.sum())])
    # hard assignments to the nearest centre, over the row and its mirror
    d2 = np.stack([np.stack([((xv - c) ** 2).sum(1) for c in centres], 1) for xv in views], 1)
    flat = d2.reshape(n, -1)
    resp = np.eye(flat.shape[1])[np.argmin(flat, axis=1)].reshape(n, len(views), k)
    ridge = 1e-6 * np.diag(np.cov(x.T)).mean() * np.eye(d)
    prev = -np.inf
    ll = -np.inf
    for _ in range(IS_EM_ITERS):
        # M step
        nk = resp.sum((0, 1)) + 1e-300
        mu = sum(resp[:, b].T @ views[b] for b in range(len(views))) / nk[:, None]
        cov = np.stack([sum((resp[:, b, j, None] * (views[b] - mu[j])).T @ (views[b] - mu[j])
                            for b in range(len(views))) / nk[j] + ridge for j in range(k)])
        mix = _Mixture(nk / nk.sum(), mu, cov, None)
        # E step
        logp = np.stack([mix._components(xv, None) for xv in views], 1) - math.log(len(views))
        total = scipy.special.logsumexp(logp.reshape(n, -1), axis=1)
        resp = np.exp(logp - total[:, None, None])
        ll = float(total.sum())
        if ll - prev < 1e-8 * abs(ll):
            break
        prev = ll
    return mix._replace(signs=signs), ll


def _mvt_logpdf(x, mean, cov, df):
    """Log density of N(mean, cov) (``df`` None) or the multivariate t at the rows of ``x``."""
    d = len(mean)
    chol = np.linalg.cholesky(cov)
    z = scipy.linalg.solve_triangular(chol, (x - mean).T, lower=True)
    maha = (z**2).sum(0)
    logdet = 2 * np.log(np.diag(chol)).sum()
    if df is None:
        return -0.5 * (maha + logdet + d * math.log(2 * math.pi))
    return (scipy.special.gammaln((df + d) / 2) - scipy.special.gammaln(df / 2)
            - 0.5 * d * math.log(df * math.pi) - 0.5 * logdet
            - 0.5 * (df + d) * np.log1p(maha / df))


def _kde_logpdf(z: np.ndarray, centres: np.ndarray, chol: np.ndarray, df: float) -> np.ndarray:
    """Log density at the rows of ``z`` of the equal mixture of multivariate t (``df``, scale
    matrix chol cholᵀ) centred on the rows of ``centres``."""
    d = centres.shape[1]
    inv = np.linalg.inv(chol)
    zc, cc = z @ inv.T, centres @ inv.T
    const = (scipy.special.gammaln((df + d) / 2) - scipy.special.gammaln(df / 2)
             - 0.5 * d * math.log(df * math.pi) - np.log(np.diag(chol)).sum())
    out = np.empty(len(z))
    for i in range(0, len(z), IS_KDE_CHUNK):
        d2 = ((zc[i:i + IS_KDE_CHUNK, None, :] - cc[None]) ** 2).sum(-1)
        out[i:i + IS_KDE_CHUNK] = scipy.special.logsumexp(
            const - 0.5 * (df + d) * np.log1p(d2 / df), axis=1) - math.log(len(centres))
    return out


@functools.lru_cache(maxsize=8)
def _joint(log_prior, log_lik):
    """log p(z) + log p(y | z) at the rows of a (n, D) array, in float64 numpy; one compiled
    function per (log prior, log likelihood) pair, which the symmetry check, importance sampling
    and bridge sampling of one target share."""
    joint = jax.jit(jax.vmap(lambda v: log_prior(v) + log_lik(v)))

    def evaluate(z):
        dtype = jnp.result_type(float)  # the float width in force at the call
        return np.concatenate([np.asarray(joint(jnp.asarray(z[i:i + IS_CHUNK], dtype)), np.float64)
                               for i in range(0, len(z), IS_CHUNK)])

    return evaluate


def check_symmetry(log_prior, log_lik, particles, signs) -> np.ndarray:
    """Verify an exact symmetry p(θ) = p(s∘θ) of the unnormalised posterior at ``particles``.

    Parameters
    ----------
    log_prior, log_lik : callable
        Log prior and log likelihood of a flat (D,) vector (jax-traceable).
    particles : array_like
        (N, D) points to check at, typically posterior draws.
    signs : array_like
        (D,) the sign vector s, each entry ±1.

    Returns
    -------
    numpy.ndarray
        ``signs`` as float64.

    Raises
    ------
    SSGPError
        When ``signs`` is not a ±1 vector of length D, or when log p(θ) and log p(s∘θ) differ at
        a particle by more than :data:`SYMMETRY_ULPS` units in the last place of log p in the
        float width in force: a near-symmetry is not one, and symmetrising the proposal under it
        would bias nothing but would waste draws where p is small.
    """
    from ssgp_ppl.errors import SSGPError

    x = np.asarray(particles, np.float64)
    s = np.asarray(signs, np.float64)
    if s.shape != (x.shape[1],) or not np.all(np.abs(s) == 1):
        raise SSGPError(f"a symmetry's sign vector must hold ±1 for each of the {x.shape[1]} "
                        f"dimensions, got {np.asarray(signs).tolist()}")
    joint = _joint(log_prior, log_lik)
    a, b = joint(x), joint(x * s)
    eps = float(jnp.finfo(jnp.result_type(float)).eps)
    tol = SYMMETRY_ULPS * eps * np.maximum(1.0, np.abs(a))
    bad = ~((np.abs(a - b) <= tol) | ((a == b) & ~np.isfinite(a)))
    if bad.any():
        i = int(np.argmax(np.where(bad, np.abs(a - b), -np.inf)))
        raise SSGPError(
            f"p(θ) = p(s∘θ) does not hold for s = {s.astype(int).tolist()}: at {int(bad.sum())} of "
            f"{len(x)} particles log p differs from its mirror's, by up to {abs(a[i] - b[i]):.3g} "
            f"(log p {a[i]:.6g} against {b[i]:.6g}; tolerance {tol[i]:.2g}, float rounding)")
    return s


def importance_log_evidence(log_prior, log_lik, particles, *, draws: int = 60_000,
                            seed: int = 0, symmetry=None) -> tuple[float, float, float]:
    """Importance sampling estimate of the log evidence from a proposal built on posterior draws.

    p(y) = E_q[p(z) p(y | z) / q(z)] with q the defensive equal mixture (Hesterberg 1995) of two
    proposals built from posterior ``particles``: a mixture of multivariate t (``IS_DF``,
    covariance × ``IS_INFLATE``) fitted by EM, which follows a few elongated modes, and a t-kernel
    density estimate on the distinct particles (at most ``IS_KDE_CENTRES``; bandwidth by
    Silverman's rule on their covariance), which follows a posterior spread over many small
    modes. Each weight is at most twice that of either proposal alone. The mixture's size is
    the one of smallest BIC among ``IS_COMPONENTS``. The estimate uses ``draws`` fresh draws of
    the proposal, none used to fit it, so it stays unbiased for p(y).

    Parameters
    ----------
    log_prior, log_lik : callable
        Log prior and log likelihood of a flat (D,) vector (jax-traceable).
    particles : array_like
        (N, D) posterior draws the proposal is fitted to.
    draws : int
        Proposal draws of the estimate.
    seed : int
        Seeds the fit and the draws.
    symmetry : array_like, optional
        A sign vector s (D,) of an exact symmetry p(θ) = p(s∘θ) of the posterior (e.g. every
        frequency flipped together in a sparse-spectrum GP with its weights integrated out).
        It is verified first (`check_symmetry`); the proposal is then exactly symmetric:
        the t mixture is fitted to the particles and their mirrors with each component tied to
        its mirror image, the kernel density is centred on both, and q(θ) = ½(q₀(θ) + q₀(s∘θ)).
        A posterior with mirrored modes then meets a proposal that covers each mirror pair
        equally, whatever share of the particles each side received.

    Returns
    -------
    log_z : float
        log Ẑ.
    se : float
        Its standard error by the delta method, sd(w) / (mean(w) √n).
    khat : float
        The Pareto smoothed importance sampling diagnostic of the weights (Vehtari, Simpson,
        Gelman, Yao & Gabry 2024); above ``KHAT_RELIABLE`` the estimate is not to be trusted.

    Raises
    ------
    SSGPError
        When ``symmetry`` does not hold (`check_symmetry`).
    """
    from arviz_stats.base import array_stats

    x = np.asarray(particles, np.float64)
    signs = None if symmetry is None else check_symmetry(log_prior, log_lik, x, symmetry)
    rng = np.random.default_rng(seed)
    sample, log_q = _proposal(x, rng, signs)
    joint = _joint(log_prior, log_lik)
    z = sample(draws)
    log_p = joint(z)
    lw = np.where(np.isfinite(log_p), log_p - log_q(z), -np.inf)
    with np.errstate(all="ignore"):  # the Pareto fit of a light tail divides by ~0
        # psislw takes log likelihoods and weighs by their inverse: pass −log w
        khat = float(array_stats.psislw(-lw[np.isfinite(lw)], r_eff=1.0)[1])
    log_z = float(scipy.special.logsumexp(lw) - math.log(draws))
    ratio = np.exp(lw - lw.max())
    se = float(ratio.std() / ratio.mean() / math.sqrt(draws))
    return log_z, se, khat


def _proposal(x: np.ndarray, rng, signs):
    """(sample(m) → (m, D), log_q(z) → (m,)) of :func:`importance_log_evidence`'s defensive
    mixture fitted to the particles ``x``."""
    n, d = x.shape
    best = None
    sizes = [k for k in IS_COMPONENTS if n >= 5 * k * (d + 1)] or [1]
    for k in sizes:
        fit, ll = _gaussian_mixture(x, k, rng, signs=signs)
        bic = -2 * ll + (k - 1 + k * d + k * d * (d + 1) / 2) * math.log(n)
        if best is None or bic < best[0]:
            best = (bic, fit)
    mix = best[1]._replace(cov=best[1].cov * IS_INFLATE)
    centres = np.unique(x, axis=0)
    half = IS_KDE_CENTRES if signs is None else IS_KDE_CENTRES // 2
    if len(centres) > half:
        centres = centres[rng.choice(len(centres), half, replace=False)]
    if signs is not None:  # centred on the particles and their mirrors: symmetric as it stands
        centres = np.concatenate([centres, centres * signs])
    bandwidth = (4 / (len(centres) * (d + 2))) ** (1 / (d + 4))  # Silverman's rule
    kde_chol = bandwidth * np.linalg.cholesky(np.cov(centres.T) + 1e-12 * np.eye(d))

    def sample(m):
        from_kde = rng.random(m) < 0.5
        z = mix.sample(rng, m)
        g = rng.normal(size=(int(from_kde.sum()), d)) @ kde_chol.T
        chi = rng.chisquare(IS_DF, size=len(g)) / IS_DF
        z[from_kde] = centres[rng.integers(len(centres), size=len(g))] + g / np.sqrt(chi)[:, None]
        return z

    def log_q(z):
        return np.logaddexp(mix.logpdf(z), _kde_logpdf(z, centres, kde_chol, IS_DF)) - math.log(2)

    return sample, log_q


BRIDGE_TOL = 1e-10  # the iteration stops when log r̂ changes by less than this
BRIDGE_MAX_ITERS = 1000


def bridge_log_evidence(log_prior, log_lik, particles, *, draws: int = 60_000, seed: int = 0,
                        symmetry=None) -> tuple[float, float]:
    """Bridge sampling estimate of the log evidence (Meng & Wong 1996, the optimal bridge by
    their iteration (4.1)), with the proposal of `importance_log_evidence`.

    The particles are shuffled and split in halves (Overstall & Forster 2010): the proposal q is
    fitted to the first, the second are the posterior draws of the bridge, and ``draws`` fresh
    draws of q the other side. Unlike importance sampling it does not need q's tails to cover
    the posterior's: a region q underweights is met by posterior draws there, so it stays
    reliable where the importance weights are heavy-tailed (large Pareto k̂).

    Parameters
    ----------
    log_prior, log_lik : callable
        Log prior and log likelihood of a flat (D,) vector (jax-traceable).
    particles : array_like
        (N, D) posterior draws: half fit the proposal, half are the bridge's posterior side.
    draws : int
        Proposal draws of the estimate.
    seed : int
        Seeds the split, the fit and the draws.
    symmetry : array_like, optional
        A sign vector of an exact symmetry of the posterior, as `importance_log_evidence`
        takes it (verified first; the proposal is then exactly symmetric).

    Returns
    -------
    log_z : float
        log Ẑ.
    se : float
        Its standard error, the square root of the approximate relative mean-squared error of
        Frühwirth-Schnatter (2004, eq. 15) with the posterior draws counted as independent.
    """
    x = np.asarray(particles, np.float64)
    signs = None if symmetry is None else check_symmetry(log_prior, log_lik, x, symmetry)
    rng = np.random.default_rng(seed)
    x = x[rng.permutation(len(x))]
    fit, post = x[: len(x) // 2], x[len(x) // 2:]
    sample, log_q = _proposal(fit, rng, signs)
    joint = _joint(log_prior, log_lik)
    z = sample(draws)
    l2 = joint(z) - log_q(z)  # log p̃/q at the proposal draws
    l1 = joint(post) - log_q(post)  # and at the posterior draws
    l2 = np.where(np.isfinite(l2), l2, -np.inf)
    n1, n2 = len(post), draws
    s1, s2 = n1 / (n1 + n2), n2 / (n1 + n2)
    log_r = float(np.median(l1))  # a start on the right scale

    def terms(log_r):
        # f1 = p̃/(s1 p̃ + s2 r q) over q's draws, f2 = q/(s1 p̃ + s2 r q) over the posterior's,
        # both × r (so that each is O(1)); r̂ = r · mean(f1) / mean(f2)
        f1 = np.exp(l2 - log_r - np.logaddexp(math.log(s1) + l2 - log_r, math.log(s2)))
        f2 = np.exp(-np.logaddexp(math.log(s1) + l1 - log_r, math.log(s2)))
        return f1, f2

    for _ in range(BRIDGE_MAX_ITERS):
        f1, f2 = terms(log_r)
        step = math.log(f1.mean()) - math.log(f2.mean())
        log_r += step
        if abs(step) < BRIDGE_TOL:
            break
    f1, f2 = terms(log_r)
    re2 = f1.var() / (n2 * f1.mean() ** 2) + f2.var() / (n1 * f2.mean() ** 2)
    return float(log_r), float(math.sqrt(re2))


__all__ = ["GaussianTarget", "bridge_log_evidence", "check_symmetry", "correlated_gaussian",
           "importance_log_evidence"]
