"""The one error type that the CLI turns into a single line and a non-zero exit."""


class SpcError(Exception):
    """A user-facing failure: the message names the file or node and says what to do."""
