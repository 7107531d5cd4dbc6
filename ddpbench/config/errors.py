"""The one error type of bad input: raised before any process starts, turned into exit code 2."""


class SpecError(ValueError):
    """A run was asked for with a value that is not allowed; the message says which and why."""
