"""Parley's one clock and its one way of writing a moment: what every record stores and every resource shows."""

from __future__ import annotations

from datetime import UTC, datetime


def now() -> datetime:
    """The current moment in UTC, to the millisecond.

    BSON keeps milliseconds, so a record returned by the write that stored it equals the same record read back
    (and a page cursor made from either finds the same place).
    """
    moment = datetime.now(UTC)
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def iso(moment: datetime | None) -> str | None:
    """`moment` as every resource the API returns shows a time: ISO-8601 in UTC with milliseconds and `Z`.

    The round table's wire contract spells it `2026-10-09T10:02:44.318Z`; every other resource uses the same
    shape. A naive datetime is taken as UTC (what pymongo returns unless its client is `tz_aware`); None stays None.

    >>> iso(datetime(2026, 10, 9, 10, 2, 44, 318999, tzinfo=UTC))
    '2026-10-09T10:02:44.318Z'
    """
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
