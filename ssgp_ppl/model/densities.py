"""Spectral densities of stationary ARD kernels, one :class:`SpectralDensity` object each, and
the registry the catalog's ``model.spectral_density`` is looked up in.

A density is written once, in its own class: its frequency distribution p(r | ℓ) over frequencies
r (cycles per unit input; :mod:`ssgp_ppl.model.spectral`'s conventions, Hoang et al. 2017, eq. 1), its
exact kernel k(τ) = σ_s² E_{r~p(r|ℓ)}[cos(2π rᵀτ)], and what it can do (:attr:`gaussian`,
:attr:`loc_scale`), which the model, guides and methods ask instead of its name. The log density
and the standard spectral points (Tan et al. 2016, eq. 4) follow from the distribution.

Built in: ``se`` (squared exponential), ``matern12``, ``matern32``, ``matern52`` and ``cauchy``
(the separable exponential kernel). The Matérn family is the multivariate Student-t family in
angular frequency ω = 2πr (Rasmussen & Williams 2006, eq. 4.15): ``Matern(nu)`` is the Student-t
spectral density with 2ν degrees of freedom, for any ν > 0. A density defined elsewhere joins with
:func:`register` (``ssgp_ppl.register_density``) or the entry-point group
``ssgp_ppl.densities`` (:mod:`ssgp_ppl.plugins`); docs/guide/adding-a-model.md shows one.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist

from ssgp_ppl.errors import SSGPError
from ssgp_ppl.model.spectral import TWO_PI
from ssgp_ppl.plugins import Registry


class SpectralDensity:
    """A spectral density p(r | ℓ) of a stationary ARD kernel with unit signal variance.

    A subclass sets `name` and `doc`, declares its abilities (`gaussian`, `loc_scale`) and
    writes `frequency_distribution` and `kernel`; `register` adds an instance to the catalog.

    Attributes
    ----------
    name
        The catalog's spelling (``model.spectral_density``), an identifier.
    doc
        The kernel, one line (the catalog reference lists it).
    """

    name: str = ""
    doc: str = ""
    gaussian: bool = False
    """r | ℓ ~ N(0, diag(1/4π²ℓ²)): the prior the ``mixture`` guide's closed-form E_q log p(θ)
    (Nguyen & Bonilla 2014, supp. §4) and Tan et al. 2016's model (s_r ~ N(0, I), NCVMP) write."""
    loc_scale: bool = False
    """`frequency_distribution` is a location-scale family NumPyro's ``LocScaleReparam``
    decentres: θ = ε / 2πℓ with ε free of ℓ (non-centred NUTS, SMC and ``auto_*`` guides)."""

    def frequency_distribution(self, lengthscales, d: int) -> dist.Distribution:
        """p(r | ℓ) of one frequency vector r.

        Parameters
        ----------
        lengthscales
            ℓ: (d,), or a scalar shared by the d inputs.
        d
            The number of inputs.

        Returns
        -------
        numpyro.distributions.Distribution
            Batch shape (), event shape (d,).
        """
        raise NotImplementedError(f"{type(self).__name__}.frequency_distribution")

    def kernel(self, tau, lengthscales, signal=1.0):
        """The exact kernel at given lags: k(τ) = σ_s² E_{r~p(r|ℓ)}[cos(2π rᵀτ)].

        Parameters
        ----------
        tau
            (..., d) lags τ.
        lengthscales
            ℓ: (d,), or a scalar shared by the d inputs.
        signal
            The signal sd σ_s.

        Returns
        -------
        jax.Array
            (...,) k(τ).
        """
        raise NotImplementedError(f"{type(self).__name__}.kernel")

    @staticmethod
    def frequency_scale(lengthscales, d: int):
        """The scale of r | ℓ when p(r | 1/2π) is the standard density.

        Parameters
        ----------
        lengthscales
            ℓ: (d,), or a scalar shared by the d inputs.
        d
            The number of inputs.

        Returns
        -------
        jax.Array
            (d,) 1 / 2πℓ.
        """
        return jnp.broadcast_to(1.0 / (TWO_PI * jnp.asarray(lengthscales)), (d,))

    def log_density(self, r, lengthscales):
        """log p(r | ℓ) at given frequencies: the ``log_prob`` of `frequency_distribution`.

        Parameters
        ----------
        r
            (..., d) frequencies.
        lengthscales
            ℓ: (d,), or a scalar shared by the d inputs.

        Returns
        -------
        jax.Array
            (...,) log p(r | ℓ).
        """
        r = jnp.asarray(r)
        return self.frequency_distribution(lengthscales, r.shape[-1]).log_prob(r)

    def standard_points(self, key, m: int, d: int, dtype=None):
        """Standard spectral points in ω-units at unit lengthscales: s = 2πr, r ~ p(r | ℓ = 1),
        so that r = s ⊙ λ / 2π (Tan et al. 2016, eq. 4).

        Parameters
        ----------
        key
            A JAX random key.
        m
            The number of points.
        d
            The number of inputs.
        dtype
            The points' dtype (default: JAX's float).

        Returns
        -------
        jax.Array
            (m, d) points s.

        Raises
        ------
        SSGPError
            When m < 1 or d < 1.
        """
        _check_sizes(m, d)
        dtype = dtype or jnp.result_type(float)
        r = self.frequency_distribution(jnp.ones((), dtype), d).sample(key, (m,))
        return (TWO_PI * r).astype(dtype)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


def _check_sizes(m: int, d: int) -> None:
    if m < 1 or d < 1:
        raise SSGPError(f"need m >= 1 frequencies and d >= 1 inputs, got m={m}, d={d}")


def _whitened_distance(tau, lengthscales):
    """ρ = ‖τ / ℓ‖₂ (...,)."""
    return jnp.sqrt(jnp.sum((jnp.asarray(tau) / jnp.asarray(lengthscales)) ** 2, axis=-1))


class SquaredExponential(SpectralDensity):
    """k(τ) = σ_s² exp(−½‖τ/ℓ‖²); p(r | ℓ) = N(0, (4π²Δ)⁻¹), Δ = diag(ℓ²) (Hoang et al. 2017,
    below eq. 1)."""

    name = "se"
    doc = "squared exponential: k(τ) = σ² exp(−½ Σ τⱼ²/ℓⱼ²); r ~ N(0, diag(1/4π²ℓ²))"
    gaussian = True
    loc_scale = True

    def frequency_distribution(self, lengthscales, d: int) -> dist.Distribution:
        return dist.Normal(0.0, self.frequency_scale(lengthscales, d)).to_event(1)

    def kernel(self, tau, lengthscales, signal=1.0):
        return signal**2 * jnp.exp(-0.5 * _whitened_distance(tau, lengthscales) ** 2)

    def standard_points(self, key, m: int, d: int, dtype=None):
        """s ~ N(0, I_d), from the first half of ``key``'s split (the catalog's points)."""
        _check_sizes(m, d)
        kz, _ = jax.random.split(key)
        return jax.random.normal(kz, (m, d), dtype=dtype or jnp.result_type(float))


class Matern(SpectralDensity):
    """Matérn ν: ω = 2πr follows the multivariate Student-t with 2ν degrees of freedom and scale
    diag(1/ℓ²) (Rasmussen & Williams 2006, eq. 4.15), any ν > 0; k(τ) is R&W 2006, eq. 4.14
    (eq. 4.16 for half-integer ν).

    Parameters
    ----------
    nu
        ν > 0, finite.
    name
        The catalog's name; default ``matern{2ν}2`` for half-integer ν (``matern32``), else
        ``matern_nu<ν>`` (``matern_nu1_2``).

    Raises
    ------
    SSGPError
        When ν is not a finite number > 0.
    """

    def __init__(self, nu: float, name: str | None = None):
        if isinstance(nu, bool) or not isinstance(nu, int | float) or not math.isfinite(nu) \
                or nu <= 0:
            raise SSGPError(f"Matern: ν must be a finite number > 0, got {nu!r}")
        self.nu = float(nu)
        half = self.nu - 0.5
        self.half_integer = half == int(half)  # ν = p + ½: closed form (R&W 2006, eq. 4.16)
        if name is None:
            name = f"matern{int(2 * self.nu)}2" if self.half_integer else \
                f"matern_nu{self.nu:g}".replace(".", "_")
        self.name = name
        self.doc = (f"Matérn ν = {self.nu:g}: k(τ) = σ² 2^(1−ν)/Γ(ν) (√(2ν)ρ)^ν K_ν(√(2ν)ρ), "
                    f"ρ = ‖τ/ℓ‖; 2πr ~ Student-t, {2 * self.nu:g} degrees of freedom")

    def frequency_distribution(self, lengthscales, d: int) -> dist.Distribution:
        scale = self.frequency_scale(lengthscales, d)
        return dist.MultivariateStudentT(2.0 * self.nu, jnp.zeros((d,), scale.dtype),
                                         jnp.diag(scale))

    def kernel(self, tau, lengthscales, signal=1.0):
        rho = _whitened_distance(tau, lengthscales)
        nu = self.nu
        z = math.sqrt(2.0 * nu) * rho
        if self.half_integer:  # R&W 2006, eq. 4.16 with p = ν − ½
            p, f = int(nu - 0.5), math.factorial
            poly = sum(f(p) * f(p + i) / (f(2 * p) * f(i) * f(p - i)) * (2.0 * z) ** (p - i)
                       for i in range(p + 1))
            return signal**2 * poly * jnp.exp(-z)
        return signal**2 * jax.pure_callback(
            lambda v: _matern_bessel(np.asarray(v), nu).astype(v.dtype),
            jax.ShapeDtypeStruct(z.shape, z.dtype), z, vmap_method="broadcast_all")

    def standard_points(self, key, m: int, d: int, dtype=None):
        """Standard spectral points s ~ t_{2ν}(0, I_d) = z / √(g / 2ν), z ~ N(0, I_d),
        g ~ χ²_{2ν} (one g per point).

        Parameters
        ----------
        key
            A JAX random key.
        m
            The number of points.
        d
            The number of inputs.
        dtype
            The points' dtype (default: JAX's float).

        Returns
        -------
        jax.Array
            (m, d) points s.

        Raises
        ------
        SSGPError
            When m < 1 or d < 1.
        """
        _check_sizes(m, d)
        dtype = dtype or jnp.result_type(float)
        kz, kg = jax.random.split(key)
        z = jax.random.normal(kz, (m, d), dtype=dtype)
        df = 2.0 * self.nu
        g = 2.0 * jax.random.gamma(kg, df / 2.0, (m, 1), dtype=dtype)  # χ²_df
        return z / jnp.sqrt(g / df)


def _matern_bessel(z: np.ndarray, nu: float) -> np.ndarray:
    """2^{1−ν}/Γ(ν) z^ν K_ν(z) (1 at z = 0): the Matérn correlation, R&W 2006, eq. 4.14."""
    from scipy.special import gammaln, kv

    safe = np.where(z > 0, z, 1.0)
    out = np.exp((1.0 - nu) * math.log(2.0) - gammaln(nu) + nu * np.log(safe)) * kv(nu, safe)
    return np.where(z > 0, out, 1.0)


class Cauchy(SpectralDensity):
    """The separable exponential kernel k(τ) = σ_s² exp(−Σⱼ |τⱼ|/ℓⱼ), whose spectral density is a
    product of Cauchy densities: rⱼ ~ Cauchy(0, 1/2πℓⱼ) (the Fourier pair of exp(−|τ|/ℓ),
    Rasmussen & Williams 2006, §4.2.1). In one input it is Matérn ½."""

    name = "cauchy"
    doc = "separable exponential: k(τ) = σ² exp(−Σ |τⱼ|/ℓⱼ); rⱼ ~ Cauchy(0, 1/2πℓⱼ)"
    loc_scale = True

    def frequency_distribution(self, lengthscales, d: int) -> dist.Distribution:
        return dist.Cauchy(0.0, self.frequency_scale(lengthscales, d)).to_event(1)

    def kernel(self, tau, lengthscales, signal=1.0):
        return signal**2 * jnp.exp(-jnp.sum(jnp.abs(jnp.asarray(tau) / jnp.asarray(lengthscales)),
                                            axis=-1))


SE = SquaredExponential()
MATERN12 = Matern(0.5)
MATERN32 = Matern(1.5)
MATERN52 = Matern(2.5)
CAUCHY = Cauchy()

DENSITIES: Registry[SpectralDensity] = Registry(
    "spectral density", SpectralDensity, (SE, MATERN12, MATERN32, MATERN52, CAUCHY))


def register(density: SpectralDensity) -> SpectralDensity:
    """Add a spectral density to the registry (``ssgp_ppl.register_density``).

    The catalog then accepts its name in ``model.spectral_density`` (checked when an entry is
    loaded); registering the same object again does nothing.

    Parameters
    ----------
    density
        An instance of a `SpectralDensity` subclass, its ``name`` an identifier.

    Returns
    -------
    SpectralDensity
        ``density``.

    Raises
    ------
    SSGPError
        When ``density`` is not a `SpectralDensity`, its name is not an identifier, or another
        density has that name.
    """
    return DENSITIES.register(density)


def get(name: str) -> SpectralDensity:
    """The density registered as ``name`` (one SSGPError listing the known ones otherwise)."""
    return DENSITIES.get(name)


def names_where(test) -> str:
    """The registered densities for which ``test(density)`` holds, for messages (``"se, cauchy"``
    for ``lambda d: d.loc_scale``)."""
    return ", ".join(n for n, d in DENSITIES.items() if test(d))


__all__ = ["CAUCHY", "DENSITIES", "MATERN12", "MATERN32", "MATERN52", "SE", "Cauchy", "Matern",
           "SpectralDensity", "SquaredExponential", "get", "names_where", "register"]
