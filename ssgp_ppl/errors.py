"""The package's one error type: every bad input raises :class:`SSGPError` with one line naming it."""


class SSGPError(ValueError):
    """A bad input, a bad catalog entry, or a numerical failure the user can act on.

    The message is one line naming the problem (file and key for catalog errors, column for data).
    The CLI prints it and exits with status 2.
    """
