"""The errors `matcher/` raises: each message is a sentence a person can act on.

`MatcherError` is the root, so that a caller can catch everything the library
refuses in one place; it is a `ValueError`, as each of them is a value that
cannot be used.
"""


class MatcherError(ValueError):
    """Something given to `matcher/` that it cannot use."""


class FilterError(MatcherError):
    """A `where` or `filter` that cannot be parsed or exceeds a limit."""


class RecordError(MatcherError):
    """A topic record that cannot be accepted (it goes to the dead letters)."""


class SettingError(MatcherError):
    """A setting of the engine (a shard grid, an allowed lateness) that cannot be used."""
