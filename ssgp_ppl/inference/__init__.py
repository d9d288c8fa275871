"""Inference: the methods (their registry and one module per method) and what they run: the SVI and
NUTS runners, tempered SMC, NCVMP, training objectives, multi-path runs and their stacking, β
selection, partitions, the fit's typed diagnostics."""

__all__: list[str] = []
