"""Diagnostics: predictive metrics, calibration (PSIS-LOO, PIT), the invariant quantities VI is
compared with its reference on, log evidence checks, the gold references and the ArviZ DataTree of
a fit."""

__all__: list[str] = []
