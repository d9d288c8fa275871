"""Data: the named data sets (their registry), the readers, splits and scaling, a user's tables;
the bundled data files are in ``bundled/``."""

__all__: list[str] = []
