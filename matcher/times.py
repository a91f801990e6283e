"""ISO-8601 times as epoch milliseconds, the one time unit of the matcher."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# The times a record may carry: ISO-8601's years 1 to 9999, which Python's datetime
# and Spark's timestamps hold. (A ts of 10**30 ms overflowed the 64-bit microseconds
# of the job's event-time column and stopped it.)
MIN_MS = -62_135_596_800_000  # 0001-01-01T00:00:00Z
MAX_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
# An allowed lateness longer than the years 1 to 9999 would keep everything anyway.
MAX_LATENESS_MS = MAX_MS - MIN_MS


def epoch_ms(text: str) -> int:
    """Exact epoch milliseconds of an ISO-8601 time (naive means UTC).

    Integer arithmetic on the timedelta, not `timestamp() * 1000`, which is
    off by one for some millisecond times. Raises ValueError.
    """
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // timedelta(milliseconds=1)
