"""Calendar and task tools for the model; times are resolved in code, never by the model."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field

from botpsy_desktop.adapters.calendar.service import CalendarService, EventChanges
from botpsy_desktop.core.addresses import parse_addresses
from botpsy_desktop.core.tools import (
    Effect,
    Inverse,
    Resolved,
    Tier,
    Tool,
    from_result,
    given,
    make_tool,
)

_START = 'As the user said it: "tomorrow 9am", "friday 14:30"; a day alone: all day.'
_END = 'e.g. "11am", or an all-day event\'s last day.'
_DURATION = 'Instead of end, e.g. "30 minutes" (default 1 hour).'
_CALENDAR = '"local" or an account name (default: the main calendar).'
_EVENT = "Its id from list_events or find_events, or its title."
_EMAILS = 'Comma-separated addresses: "ana@example.com, Bob <bob@example.com>".'


class ListEventsArgs(BaseModel):
    """List calendar events for some days."""

    when: str = Field(
        "next 7 days", description='e.g. "today", "friday", "next week", "2026-06-01 to 06-07".'
    )
    calendar: str | None = Field(None, description=_CALENDAR)


class FindEventsArgs(BaseModel):
    """Find events by words in their title, place or notes."""

    text: str = Field(min_length=1, description='e.g. "dentist".')
    when: str | None = Field(
        None, description="Days to look in (default: a month back, a year on)."
    )


class FreeBusyArgs(BaseModel):
    """When the user is busy and free on one day."""

    day: str = Field("today", description='e.g. "today", "friday", "2026-06-01".')
    start_hour: int = Field(8, ge=0, le=23, description="Day starts at this hour.")
    end_hour: int = Field(20, ge=1, le=24, description="Day ends at this hour.")


class CreateEventArgs(BaseModel):
    """Add an event for the user alone (to invite people, use create_meeting)."""

    title: str = Field(min_length=1, description='e.g. "Dentist".')
    start: str = Field(min_length=1, description=_START)
    end: str | None = Field(None, description=_END)
    duration: str | None = Field(None, description=_DURATION)
    location: str = ""
    description: str = Field("", description="Notes.")
    reminder_minutes: int | None = Field(None, ge=0, description="Reminder, minutes before.")
    repeat: str = Field(
        "never", description='"never" (default), "daily", "weekly", "weekdays", "monday,friday".'
    )
    calendar: str | None = Field(None, description=_CALENDAR)


class CreateMeetingArgs(BaseModel):
    """Create an event and invite people (their addresses go to the calendar server)."""

    title: str = Field(min_length=1, description='e.g. "Project review".')
    start: str = Field(min_length=1, description=_START)
    attendees: str = Field(min_length=3, description=_EMAILS)
    end: str | None = Field(None, description=_END)
    duration: str | None = Field(None, description=_DURATION)
    location: str = ""
    description: str = Field("", description="Notes.")
    calendar: str | None = Field(None, description=_CALENDAR)


class _EventEdit(BaseModel):
    """What both update tools can change about an event (unset fields stay)."""

    event: str = Field(min_length=1, description=_EVENT)
    start: str | None = Field(None, description="New start, as the user said it.")
    end: str | None = Field(None, description=_END)
    duration: str | None = Field(None, description=_DURATION)
    title: str | None = None
    location: str | None = None
    description: str | None = None


class UpdateEventArgs(_EventEdit):
    """Move or change an event without attendees; fields left out stay (a move keeps its length)."""

    reminder_minutes: int | None = Field(None, ge=0, description="Minutes before; 0 removes it.")


class UpdateMeetingArgs(_EventEdit):
    """Move or change an event with attendees, or add or remove attendees (they may be told)."""

    add_attendees: str = Field("", description=_EMAILS)
    remove_attendees: str = Field("", description="Addresses to remove, comma-separated.")


class DeleteEventArgs(BaseModel):
    """Delete an event."""

    event: str = Field(min_length=1, description=_EVENT)
    all_occurrences: bool = Field(False, description="Must be true for a repeating event.")


class AddTaskArgs(BaseModel):
    """Add a to-do."""

    title: str = Field(min_length=1, description='e.g. "Renew passport".')
    due: str | None = Field(None, description='e.g. "friday", "tomorrow 5pm".')
    calendar: str | None = Field(None, description=_CALENDAR)


class ListTasksArgs(BaseModel):
    """List the open to-dos, soonest due first."""

    include_done: bool = Field(False, description="Also completed ones.")
    calendar: str | None = Field(None, description=_CALENDAR)


class CompleteTaskArgs(BaseModel):
    """Mark a to-do done."""

    task: str = Field(min_length=1, description="Its id from list_tasks, or its title.")


def calendar_tools(service: CalendarService) -> list[Tool]:
    """The calendar and task tools over ``service``.

    Reading is read-only; events and tasks for the user alone are local changes; anything with
    attendees sends their addresses out (outbound, personal data); deleting is destructive.
    """

    def list_events(args: ListEventsArgs) -> dict[str, Any]:
        return service.list_events(args.when, args.calendar)

    def find_events(args: FindEventsArgs) -> dict[str, Any]:
        return service.find_events(args.text, args.when)

    def free_busy(args: FreeBusyArgs) -> dict[str, Any]:
        return service.free_busy(args.day, args.start_hour, args.end_hour)

    def create_event(args: CreateEventArgs) -> dict[str, Any]:
        return service.create_event(
            title=args.title,
            start=args.start,
            end=args.end,
            duration=args.duration,
            location=args.location,
            description=args.description,
            reminder_minutes=args.reminder_minutes,
            repeat=args.repeat,
            calendar=args.calendar,
        )

    def create_meeting(args: CreateMeetingArgs) -> dict[str, Any]:
        return service.create_event(
            title=args.title,
            start=args.start,
            end=args.end,
            duration=args.duration,
            location=args.location,
            description=args.description,
            calendar=args.calendar,
            attendees=parse_addresses(args.attendees, "attendees"),
        )

    def _changes(
        args: UpdateEventArgs | UpdateMeetingArgs, add: str = "", remove: str = ""
    ) -> EventChanges:
        return EventChanges(
            start=args.start,
            end=args.end,
            duration=args.duration,
            title=args.title,
            location=args.location,
            description=args.description,
            reminder_minutes=args.reminder_minutes if isinstance(args, UpdateEventArgs) else None,
            add_attendees=parse_addresses(add, "add_attendees") if add.strip() else (),
            remove_attendees=[a for _, a in parse_addresses(remove, "remove_attendees")]
            if remove.strip()
            else (),
        )

    def update_event(args: UpdateEventArgs) -> dict[str, Any]:
        return service.update_event(args.event, _changes(args), meeting=False)

    def update_meeting(args: UpdateMeetingArgs) -> dict[str, Any]:
        changes = _changes(args, args.add_attendees, args.remove_attendees)
        return service.update_event(args.event, changes, meeting=True)

    def delete_event(args: DeleteEventArgs) -> dict[str, Any]:
        return service.delete_event(args.event, all_occurrences=args.all_occurrences)

    def add_task(args: AddTaskArgs) -> dict[str, Any]:
        return service.add_task(args.title, args.due, args.calendar)

    def list_tasks(args: ListTasksArgs) -> dict[str, Any]:
        return service.list_tasks(args.include_done, args.calendar)

    def complete_task(args: CompleteTaskArgs) -> dict[str, Any]:
        return service.complete_task(args.task)

    def state(arguments: Mapping[str, Any]) -> dict[str, Any] | None:
        """The event a call names, as it is now: what an undo checks before it runs."""
        return service.state_of(str(arguments.get("event") or ""))

    def event(arguments: Mapping[str, Any]) -> list[Resolved]:
        """The event a call names, as the receipt shows it and an approval binds to."""
        return [service.resolve_event(str(arguments.get("event") or ""))]

    def task(arguments: Mapping[str, Any]) -> list[Resolved]:
        return [service.resolve_task(str(arguments.get("task") or ""))]

    read, local = {Effect.READ}, {Effect.LOCAL_WRITE}
    shared = {Effect.LOCAL_WRITE, Effect.OUTBOUND, Effect.PERSONAL_DATA}
    rev, ask = Tier.REVERSIBLE, Tier.ASK
    return [
        make_tool(list_events, effects=read, tier=Tier.READ),
        make_tool(find_events, effects=read, tier=Tier.READ),
        make_tool(free_busy, effects=read, tier=Tier.READ),
        # a personal event (this tool has no attendees): undone by deleting exactly it
        make_tool(
            create_event,
            effects=local,
            tier=rev,
            inverse=from_result(rev, "the result does not name the created event"),
            summary=_s_create,
            untrusted_output=False,  # the new event as given: its own arguments
        ),
        # invitations go out: always asks
        make_tool(
            create_meeting, effects=shared, tier=ask, targets=("attendees",), summary=_s_meeting
        ),
        make_tool(
            update_event,
            effects=local,
            tier=rev,
            targets=("event",),
            inverse=from_result(None, "the result does not say what to restore"),
            summary=_s_update,
            state=state,
            resolve=event,
        ),
        make_tool(
            update_meeting,
            effects=shared,
            tier=ask,
            targets=("event", "add_attendees", "remove_attendees"),
            summary=_s_update,
            state=state,
            resolve=event,
        ),
        make_tool(
            delete_event,
            effects={Effect.DESTRUCTIVE},
            tier=ask,
            targets=("event",),
            summary=_s_delete,
            state=state,
            resolve=event,
        ),
        # a new to-do: Undo marks it done (there is no deleting a task from here)
        make_tool(
            add_task,
            effects=local,
            tier=rev,
            inverse=_complete_added,
            summary=lambda a: f"Add the task “{a.get('title')}”" + given(a, "due", ", due {}"),
            untrusted_output=False,
        ),
        make_tool(list_tasks, effects=read, tier=Tier.READ),
        # no way back (a task cannot be reopened from here): asks
        make_tool(
            complete_task,
            effects=local,
            tier=ask,
            targets=("task",),
            summary=lambda a: f"Mark the task {a.get('task')} as done",
            resolve=task,
        ),
    ]


# --- the gate's declarations: inverses and receipts in plain words ---------------------------


def _complete_added(arguments: Mapping[str, Any], result: Any) -> Inverse | str:
    added = result.get("added") if isinstance(result, Mapping) else None
    if isinstance(added, Mapping) and added.get("id"):
        return Inverse("complete_task", {"task": str(added["id"])}, tier=Tier.REVERSIBLE)
    return "the result does not name the added task"


def _when(a: Mapping[str, Any]) -> str:
    until = given(a, "end", " until {}") or given(a, "duration", " for {}")
    return f" on {a.get('start')}{until}"


def _s_create(a: Mapping[str, Any]) -> str:
    where = given(a, "location", " at {}")
    return f"Add “{a.get('title')}” to your calendar{_when(a)}{where} (no one is invited)"


def _s_meeting(a: Mapping[str, Any]) -> str:
    return (
        f"Invite {a.get('attendees')} to “{a.get('title')}”{_when(a)}: invitations are sent to them"
    )


def _s_update(a: Mapping[str, Any]) -> str:
    changes = [
        f"{k.replace('_', ' ')} to {a[k]}"
        for k in ("title", "start", "end", "duration", "location", "description")
        if a.get(k) not in (None, "")
    ]
    people = []
    if a.get("add_attendees"):
        people.append(f"invite {a['add_attendees']} (they are sent an invitation)")
    if a.get("remove_attendees"):
        people.append(f"uninvite {a['remove_attendees']} (they are told)")
    what = (
        "; ".join([*(["change " + ", ".join(changes)] if changes else []), *people])
        or "change nothing"
    )
    return f"In the event {a.get('event')}: {what}"


def _s_delete(a: Mapping[str, Any]) -> str:
    every = " and all its repeats" if a.get("all_occurrences") else ""
    return f"Delete the event {a.get('event')}{every} from your calendar"
