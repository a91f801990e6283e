"""ISO-8601 times as epoch milliseconds, the one time unit of the matcher."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def epoch_ms(text: str) -> int:
    """Exact epoch milliseconds of an ISO-8601 time (naive means UTC).

    Integer arithmetic on the timedelta, not `timestamp() * 1000`, which is
    off by one for some millisecond times. Raises ValueError.
    """
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // timedelta(milliseconds=1)
