"""The package's one error type: every bad input raises :class:`SSGPError` with one line naming it."""


class SSGPError(ValueError):
    """A bad input, a bad catalog entry, or a numerical failure the user can act on.

    The message is one line naming the problem (file and key for catalog errors, column for data).
    The CLI prints it and exits with status 2.
    """


class CatalogWarning(UserWarning):
    """A user catalog file that is not an entry (it does not validate, or its name is taken):
    ``ssgp_ppl.catalog()`` and ``ssgp-ppl models`` skip it with this warning; using it is an error."""
