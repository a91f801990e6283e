"""Event time as Spark holds it: counted from year 1, not from 1970.

Spark's watermark starts at 0 and never goes below it, so a record time
before 1970 (a negative epoch millisecond, which SEMANTICS allows: times are
epoch milliseconds of the years 1 to 9999) would be late in every batch of
the job while `tsm replay` accepts it. The job's event-time column and its
timers therefore count milliseconds from `ORIGIN_MS`, the earliest time a
record may carry (`matcher.times.MIN_MS`), and the operator reads the
watermark back in record time. Every valid time is then at or above Spark's
starting watermark, and the job and the replay judge lateness alike.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from matcher.times import MIN_MS

ORIGIN_MS = MIN_MS  # 0001-01-01T00:00:00Z: Spark's event time 0
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ERA_MS = 5 * 146_097 * 86_400_000  # 2,000 Gregorian years


def to_spark_ms(ts: float) -> int:
    """A record time as Spark's event time in milliseconds (never negative)."""
    return int(ts) - ORIGIN_MS


def to_spark_us(ts: int) -> int:
    """A record time as the microseconds of the event-time column."""
    return (ts - ORIGIN_MS) * 1000


def from_spark_ms(ms: int) -> int:
    """Spark's watermark (event time in milliseconds) as a record time."""
    return ms + ORIGIN_MS


def from_spark_text(text: str | None) -> str | None:
    """A watermark as Spark's progress reports write it (an ISO-8601 time of the
    event-time column, up to the year 11969) as the record time it stands for, in
    the same form; text it cannot read is returned as it is."""
    if not text:
        return text
    try:
        year, rest = text.lstrip("+").split("-", 1)
        # (Python's datetime stops at 9999: read it 2,000 years earlier, which is a
        # whole number of 400-year Gregorian cycles, the same weekday and calendar)
        eras = max(0, (int(year) - 9000) // 2000 + 1)
        moment = datetime.fromisoformat(f"{int(year) - 2000 * eras:04d}-{rest}")
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        ms = (moment - _EPOCH) // timedelta(milliseconds=1) + eras * _ERA_MS
        real = _EPOCH + timedelta(milliseconds=from_spark_ms(ms))
    except (ValueError, OverflowError):
        return text
    return real.isoformat(timespec="milliseconds").replace("+00:00", "Z")
