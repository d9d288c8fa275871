"""Running a fit: atomic writes, checkpoints, run directories, stop signals and status lines, the
memory estimate, sharding over devices and Dask clusters."""

__all__: list[str] = []
