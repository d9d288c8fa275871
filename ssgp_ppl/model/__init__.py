"""The model: spectral densities, likelihoods, the SSGP model with its predictive rules and feature
map, and the variational guides."""

__all__: list[str] = []
