"""Errors for bad input: each message is a sentence a person can act on."""


class FilterError(ValueError):
    """A `where` or `filter` that cannot be parsed or exceeds a limit."""


class RecordError(ValueError):
    """A topic record that cannot be accepted (it goes to the dead letters)."""
