"""When the alarm service wakes: APScheduler (3.x, in-memory jobs) at each alarm's next ring,
and a poll every few seconds for what other processes changed."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta

# APScheduler (~6 MiB resident) is imported when the service starts, not with the app: a
# process that never starts it (`botpsy ask`, `botpsy bench`) does not hold it.


class WakeUps:
    """A background scheduler that calls ``fire`` at the times it is given and ``poll`` every
    ``poll_interval_s`` seconds, on its own threads, until ``shutdown``."""

    def __init__(
        self, fire: Callable[[], object], poll: Callable[[], None], poll_interval_s: float
    ) -> None:
        from apscheduler.executors.pool import ThreadPoolExecutor
        from apscheduler.schedulers.background import BackgroundScheduler
        from apscheduler.triggers.interval import IntervalTrigger

        self._fire = fire
        scheduler = BackgroundScheduler(
            timezone=UTC,
            executors={"default": ThreadPoolExecutor(2)},
            job_defaults={"misfire_grace_time": None, "coalesce": True, "max_instances": 1},
        )
        scheduler.add_jobstore("memory", alias="alarms")
        scheduler.add_job(poll, IntervalTrigger(seconds=poll_interval_s, timezone=UTC), id="poll")
        scheduler.start()
        self._scheduler = scheduler

    def schedule(self, rings: Iterable[tuple[int, float]], offset: timedelta) -> None:
        """Replace the wake-ups with one per (alarm id, ring time as a timestamp).

        Jobs run on the real clock; an injected clock is followed by its ``offset`` from it.
        """
        from apscheduler.triggers.date import DateTrigger

        margin = timedelta(milliseconds=5)
        self._scheduler.remove_all_jobs(jobstore="alarms")
        for alarm_id, ring in rings:
            run_at = datetime.fromtimestamp(ring, UTC) + offset + margin
            self._scheduler.add_job(
                self._fire,
                DateTrigger(run_at, timezone=UTC),
                id=f"alarm-{alarm_id}",
                jobstore="alarms",
            )

    def shutdown(self) -> None:
        """Stop, waiting for a job in progress."""
        self._scheduler.shutdown(wait=True)
