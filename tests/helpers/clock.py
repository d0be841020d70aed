"""A clock the tests move by hand, for the alarm service's ``now``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


class Clock:
    """Reads ``current`` (UTC); a test sets it or moves it on with ``advance``."""

    def __init__(self, start: datetime) -> None:
        self.current = start.astimezone(UTC)

    def __call__(self) -> datetime:
        return self.current

    def advance(self, **kwargs: float) -> None:
        self.current += timedelta(**kwargs)
