"""Alarm, timer and reminder tools for the model; times are resolved here, never by the model."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, Literal

from pydantic import BaseModel, Field

from botpsy_desktop.adapters.alarms.records import Alarm, AlarmKind
from botpsy_desktop.adapters.alarms.service import AlarmService
from botpsy_desktop.adapters.alarms.when import (
    duration_text,
    format_time,
    format_when,
    parse_duration,
    parse_repeat,
    parse_when,
    repeat_text,
    shift,
)
from botpsy_desktop.adapters.untrusted import neutralize
from botpsy_desktop.core.errors import ToolError
from botpsy_desktop.core.tools import (
    Effect,
    Inverse,
    Resolved,
    Tier,
    Tool,
    current_call_context,
    make_tool,
)

_TIME_FIELD = 'In the user\'s words, unconverted: "7:30 pm", "tomorrow at 9", "in 20 minutes".'
_REPEAT_FIELD = '"never" (default), "daily", "weekdays", "weekends", "monday,friday".'
_WHICH = "its number from list_alarms, its label or its time"


class SetAlarmArgs(BaseModel):
    """Set an alarm that rings at a time, once or repeating."""

    time: str = Field(description=_TIME_FIELD, min_length=1, max_length=100)
    label: str = Field("", max_length=100, description='e.g. "Wake up".')
    repeat: str = Field("never", max_length=100, description=_REPEAT_FIELD)


class SetTimerArgs(BaseModel):
    """Start a countdown timer."""

    duration: str = Field(
        description='e.g. "10 minutes", "1h30m", "half an hour".', min_length=1, max_length=100
    )
    label: str = Field("", max_length=100, description='e.g. "Pasta".')


class SetReminderArgs(BaseModel):
    """Remind the user of something at a time (a notification with the text)."""

    time: str = Field(description=_TIME_FIELD, min_length=1, max_length=100)
    text: str = Field(description='e.g. "Call the dentist".', min_length=1, max_length=300)
    repeat: str = Field("never", max_length=100, description=_REPEAT_FIELD)


class SetRoutineArgs(BaseModel):
    """Have the assistant carry out a request at a time, once or repeating (a routine), as if
    the user asked it then; changes still wait for the user's approval."""

    time: str = Field(description=_TIME_FIELD, min_length=1, max_length=100)
    request: str = Field(
        description='What to ask the assistant then, e.g. "What\'s the weather?".',
        min_length=1,
        max_length=500,
    )
    repeat: str = Field("never", max_length=100, description=_REPEAT_FIELD)
    if_missed: Literal["skip", "catch up"] = Field(
        "skip",
        description='When it was due while BotPsy was not running: "skip" that run, or '
        '"catch up" (run it once at the next start).',
    )


class ListAlarmsArgs(BaseModel):
    """List the alarms, timers, reminders and routines (set, ringing or missed), numbered."""


class CancelAlarmArgs(BaseModel):
    """Cancel an alarm, timer, reminder or routine, with all its repeats."""

    alarm: str = Field(description=f'Which one: {_WHICH}, or "all".', min_length=1, max_length=100)


class SnoozeAlarmArgs(BaseModel):
    """Snooze the ringing alarm: it rings again a few minutes later."""

    alarm: str = Field(
        "", max_length=100, description=f"Which one: {_WHICH}; leave empty for the ringing one."
    )
    minutes: int | None = Field(
        None, ge=1, le=120, description="Minutes until it rings again (default 9)."
    )


class DismissAlarmArgs(BaseModel):
    """Stop the ringing (or a snoozed or missed) alarm; a repeating one still rings next time."""

    alarm: str = Field(
        "", max_length=100, description=f"Which one: {_WHICH}; leave empty for the ringing ones."
    )


def alarms_tools(service: AlarmService) -> list[Tool]:
    """The alarm tools over ``service``: setting, cancelling, snoozing and dismissing are gated
    as local changes; listing is read-only."""

    def set_alarm(args: SetAlarmArgs) -> dict[str, Any]:
        return _set(service, AlarmKind.ALARM, args.time, args.label, args.repeat)

    def set_timer(args: SetTimerArgs) -> dict[str, Any]:
        length = parse_duration(args.duration)
        now = service.now()
        alarm = service.add(AlarmKind.TIMER, shift(now, length), label=args.label, duration=length)
        return _confirmation(service, alarm, f"Timer set for {duration_text(length)}")

    def set_reminder(args: SetReminderArgs) -> dict[str, Any]:
        text = args.text.strip()
        if not text:
            raise ToolError("The reminder text is empty.", 'Say what to remind, e.g. "Call Ann".')
        return _set(service, AlarmKind.REMINDER, args.time, text, args.repeat)

    def set_routine(args: SetRoutineArgs) -> dict[str, Any]:
        origin = current_call_context()
        note = (
            "a routine set while the assistant was reading " + "; ".join(origin.sources)
            if origin.tainted
            else None
        )
        return add_routine(
            service,
            args.time,
            args.request,
            args.repeat,
            origin=note,
            catch_up=args.if_missed == "catch up",
        )

    def list_alarms(args: ListAlarmsArgs) -> dict[str, Any]:
        now = service.now()
        items = service.alarms()
        result: dict[str, Any] = {
            "now": format_time(now, now),
            "time_zone": service.time_zone_name,
            "count": len(items),
            "alarms": [_describe(a, service) for a in items],
        }
        if not items:
            result["note"] = "No alarms, timers or reminders are set."
        broken = service.unreadable()
        if broken:  # only their numbers: what they hold cannot be trusted to be an alarm
            result["unreadable"] = (
                f"Stored entries {', '.join(str(b.id) for b in broken)} cannot be read and "
                "never ring; the person can remove them with `botpsy alarms remove ID`."
            )
        return result

    def cancel_alarm(args: CancelAlarmArgs) -> dict[str, Any]:
        chosen = _choose(service, args.alarm, purpose="cancel")
        done = [_describe(a, service) for a in service.cancel_many([a.id for a in chosen])]
        names = "; ".join(_title(a) for a in chosen)
        return {"summary": f"Cancelled {names}.", "cancelled": done}

    def snooze_alarm(args: SnoozeAlarmArgs) -> dict[str, Any]:
        chosen = _choose(service, args.alarm, purpose="snooze")
        length = timedelta(minutes=args.minutes) if args.minutes else None
        results = service.snooze_many([a.id for a in chosen], length)
        now = service.now()
        return {
            "summary": "; ".join(
                f"Snoozed {_title(a)} until {format_when(a.snoozed_until, now)}"
                for a in results
                if a.snoozed_until is not None
            )
            + ".",
            "snoozed": [_describe(a, service) for a in results],
        }

    def dismiss_alarm(args: DismissAlarmArgs) -> dict[str, Any]:
        chosen = _choose(service, args.alarm, purpose="dismiss")
        now = service.now()
        lines, after = [], []
        for alarm, left in zip(chosen, service.dismiss_many([a.id for a in chosen]), strict=True):
            line = f"Dismissed {_title(alarm)}"
            if left is not None and left.next_ring is not None:
                line += f"; it rings next {format_when(left.next_ring, now)}"
                after.append(_describe(left, service))
            lines.append(line)
        result: dict[str, Any] = {"summary": ". ".join(lines) + "."}
        if after:
            result["still_set"] = after
        return result

    local = {Effect.LOCAL_WRITE}
    # setting one answers with a confirmation of its own arguments: no content from outside
    return [
        make_tool(
            set_alarm,
            effects=local,
            tier=Tier.REVERSIBLE,
            inverse=_cancel_it,
            summary=_s_alarm,
            untrusted_output=False,
        ),
        make_tool(
            set_timer,
            effects=local,
            tier=Tier.REVERSIBLE,
            inverse=_cancel_it,
            summary=_s_timer,
            untrusted_output=False,
        ),
        make_tool(
            set_reminder,
            effects=local,
            tier=Tier.REVERSIBLE,
            inverse=_cancel_it,
            summary=_s_reminder,
            untrusted_output=False,
        ),
        # an unattended run later: always asks (its origin is kept, see _set)
        make_tool(
            set_routine, effects=local, tier=Tier.ASK, summary=_s_routine, untrusted_output=False
        ),
        make_tool(list_alarms, effects={Effect.READ}, tier=Tier.READ),
        # deletes (no inverse): always asks; the receipt names what the call selects
        make_tool(
            cancel_alarm,
            effects={Effect.LOCAL_WRITE, Effect.DESTRUCTIVE},
            tier=Tier.ASK,
            targets=("alarm",),
            summary=_selected_summary(service, "cancel"),
            resolve=_resolver(service, "cancel"),
        ),
        # quieting a ringing alarm: decided from what the call selects, not from its words
        make_tool(
            snooze_alarm,
            effects=local,
            tier=_quieting(service, "snooze"),
            targets=("alarm",),
            summary=_selected_summary(service, "snooze"),
            resolve=_resolver(service, "snooze"),
        ),
        make_tool(
            dismiss_alarm,
            effects=local,
            tier=_quieting(service, "dismiss"),
            targets=("alarm",),
            summary=_selected_summary(service, "dismiss"),
            resolve=_resolver(service, "dismiss"),
        ),
    ]


# --- the gate's declarations: tiers, inverses and receipts in plain words ---------------------


def _cancel_it(arguments: Mapping[str, Any], result: Any) -> Inverse | str:
    """Undo of setting one: cancel exactly the one it set (housekeeping, not a deletion)."""
    if isinstance(result, Mapping) and result.get("id") is not None:
        return Inverse("cancel_alarm", {"alarm": str(result["id"])}, tier=Tier.REVERSIBLE)
    return "the result does not say which one was set"


def _selected(service: AlarmService, arguments: Mapping[str, Any], purpose: str) -> list[Alarm]:
    """The alarms a call would act on, resolved as the tool resolves them (ToolError: none)."""
    return _choose(service, str(arguments.get("alarm") or ""), purpose=purpose)


def _resolver(service: AlarmService, purpose: str) -> Callable[[Mapping[str, Any]], list[Resolved]]:
    """What a call acts on now: each alarm it selects with its label, time and state (what an
    approval of it is bound to; another alarm set for the same time is another effect)."""

    def rule(arguments: Mapping[str, Any]) -> list[Resolved]:
        return [_resolved(a, service) for a in _selected(service, arguments, purpose)]

    return rule


def _resolved(alarm: Alarm, service: AlarmService) -> Resolved:
    now = service.now()
    when = alarm.next_ring or alarm.ringing_due or alarm.missed_due
    at = f", {format_when(when, now)}" if when is not None else ""
    label = f" “{alarm.label}”" if alarm.label else " (no label)"
    repeat = f", {repeat_text(alarm.days)}" if alarm.repeats else ", once"
    shown = f"{alarm.kind.value} {alarm.id}{label}{at}{repeat} ({alarm.status})"
    state = {
        "id": alarm.id,
        "kind": alarm.kind.value,
        "label": alarm.label,
        "days": sorted(alarm.days),
        "due": None if alarm.due is None else alarm.due.isoformat(),
        "snoozed_until": None if alarm.snoozed_until is None else alarm.snoozed_until.isoformat(),
        "ringing_due": None if alarm.ringing_due is None else alarm.ringing_due.isoformat(),
        "missed_due": None if alarm.missed_due is None else alarm.missed_due.isoformat(),
        "status": alarm.status,
        "created": alarm.created.isoformat(),
    }
    return Resolved("alarm", str(alarm.id), shown, state)


def _quieting(service: AlarmService, purpose: str) -> Callable[[Mapping[str, Any]], Tier]:
    """The tier of a snooze or dismissal from what it selects, whatever the words ("all",
    "everything", "all of them!"): more than one alarm asks, and so does dismissing one that
    does not repeat (a one-off alarm is deleted for good when dismissed; nothing brings it
    back). One snoozed, or one repeating alarm dismissed (it rings next time): at once."""

    def rule(arguments: Mapping[str, Any]) -> Tier:
        try:
            chosen = _selected(service, arguments, purpose)
        except ToolError:
            return Tier.REVERSIBLE  # it selects nothing: the call fails and changes nothing
        if len(chosen) > 1:
            return Tier.ASK
        if purpose == "dismiss" and any(not a.repeats for a in chosen):
            return Tier.ASK
        return Tier.REVERSIBLE

    rule.__doc__ = (
        "asks when what it selects is more than one alarm, or one that does not repeat "
        "(dismissed, it is deleted for good), whatever the words"
        if purpose == "dismiss"
        else "asks when what it selects is more than one alarm, whatever the words"
    )
    return rule


def _selected_summary(service: AlarmService, purpose: str) -> Callable[[Mapping[str, Any]], str]:
    """The call in plain words, naming the alarms it selects now."""
    verb = {"cancel": "Cancel", "snooze": "Snooze", "dismiss": "Stop"}[purpose]
    words = {"cancel": _s_cancel, "snooze": _s_snooze, "dismiss": _s_dismiss}[purpose]

    def summary(arguments: Mapping[str, Any]) -> str:
        try:
            chosen = _selected(service, arguments, purpose)
        except ToolError:
            return words(arguments)
        names = "; ".join(_named(a) for a in chosen[:10])
        more = f" and {len(chosen) - 10} more" if len(chosen) > 10 else ""
        what = f"{len(chosen)} alarms: {names}{more}" if len(chosen) > 1 else names
        minutes = arguments.get("minutes")
        later = f" for {minutes} minutes" if purpose == "snooze" and minutes else ""
        if purpose == "cancel":
            tail = " for good (it cannot be undone)"
        elif purpose == "dismiss" and any(not a.repeats for a in chosen):
            tail = " (one that does not repeat is deleted for good)"
        else:
            tail = ""
        return f"{verb} {what}{later}{tail}"

    return summary


def _label(arguments: Mapping[str, Any]) -> str:
    label = str(arguments.get("label") or "").strip()
    return f" “{label}”" if label else ""


def _repeat(arguments: Mapping[str, Any]) -> str:
    repeat = str(arguments.get("repeat") or "never").strip()
    return "" if repeat.casefold() in ("", "never") else f", repeating {repeat}"


def _s_alarm(a: Mapping[str, Any]) -> str:
    return f"Set an alarm{_label(a)} for {a.get('time')}{_repeat(a)}"


def _s_timer(a: Mapping[str, Any]) -> str:
    return f"Set a timer{_label(a)} for {a.get('duration')}"


def _s_reminder(a: Mapping[str, Any]) -> str:
    return f"Remind you “{a.get('text')}” at {a.get('time')}{_repeat(a)}"


def _s_routine(a: Mapping[str, Any]) -> str:
    missed = (
        "if it is missed while BotPsy is not running, it runs once at the next start"
        if a.get("if_missed") == "catch up"
        else "a run missed while BotPsy is not running is skipped"
    )
    return (
        f"Have the assistant run “{a.get('request')}” by itself at {a.get('time')}{_repeat(a)}, "
        f"without you watching; {missed}"
    )


def _which(a: Mapping[str, Any], none: str) -> str:
    which = str(a.get("alarm") or "").strip()
    if not which:
        return none
    if which.casefold() == "all":
        return "ALL alarms, timers, reminders and routines"
    return f"alarm {which}"


def _s_cancel(a: Mapping[str, Any]) -> str:
    return f"Cancel {_which(a, 'an alarm')} for good (it cannot be undone)"


def _s_snooze(a: Mapping[str, Any]) -> str:
    minutes = a.get("minutes")
    later = f" for {minutes} minutes" if minutes else ""
    return f"Snooze {_which(a, 'the ringing alarm')}{later}"


def _s_dismiss(a: Mapping[str, Any]) -> str:
    return f"Stop {_which(a, 'the ringing alarm')}"


def add_routine(
    service: AlarmService,
    when: str,
    request: str,
    repeat: str = "never",
    *,
    origin: str | None = None,
    catch_up: bool = False,
) -> dict[str, Any]:
    """Store a routine (``set_routine``, ``botpsy routines add``): ``request`` runs at ``when``
    (words or ISO), repeating as ``repeat`` says; ``catch_up``: a run missed while nothing ran
    runs once at the next start, else it is skipped. Returns the confirmation."""
    # stored, it runs later as a request: defused like any text from outside
    text = " ".join(neutralize(request).split())
    if not text:
        raise ToolError(
            "The routine's request is empty.", 'Say what to ask then, e.g. "the weather".'
        )
    return _set(service, AlarmKind.ROUTINE, when, text, repeat, origin=origin, catch_up=catch_up)


def describe_alarm(alarm: Alarm, service: AlarmService) -> dict[str, Any]:
    """One alarm as ``list_alarms`` shows it (a routine also says what happens if missed)."""
    item = _describe(alarm, service)
    if alarm.kind is AlarmKind.ROUTINE:
        item["if_missed"] = "catch up" if alarm.catch_up else "skip"
    return item


def _set(
    service: AlarmService,
    kind: AlarmKind,
    when: str,
    label: str,
    repeat: str,
    *,
    origin: str | None = None,
    catch_up: bool = False,
) -> dict[str, Any]:
    days = parse_repeat(repeat)
    now = service.now()
    resolved = parse_when(when, now, service.tz)
    if not days and resolved.days:
        days = resolved.days
    alarm = service.add(kind, resolved.at, label=label, days=days, origin=origin, catch_up=catch_up)
    noun = {AlarmKind.REMINDER: "Reminder", AlarmKind.ROUTINE: "Routine"}.get(kind, "Alarm")
    result = _confirmation(service, alarm, f"{noun} set")
    if resolved.note and not days:
        result["note"] = resolved.note
    return result


def _confirmation(service: AlarmService, alarm: Alarm, what: str) -> dict[str, Any]:
    now = service.now()
    assert alarm.next_ring is not None
    rings = format_when(alarm.next_ring, now)
    label = f" ({alarm.label})" if alarm.label else ""
    verb = "runs" if alarm.kind is AlarmKind.ROUTINE else "rings"
    summary = f"{what}{label}: {verb} {rings}"
    if alarm.repeats:
        summary += f", then {repeat_text(alarm.days)}"
    result: dict[str, Any] = {"summary": summary + ".", **_describe(alarm, service)}
    if alarm.kind is AlarmKind.ROUTINE:
        result["approval_note"] = (
            "It runs with nobody watching: anything it wants to change waits for the user's "
            "approval."
        )
        result["if_missed"] = "catch up" if alarm.catch_up else "skip"
    if not service.running:
        result["running_note"] = (
            f"It {verb} while BotPsy runs (the window or `botpsy daemon`); if neither runs "
            "then, it is reported as missed at the next start."
        )
    return result


def _describe(alarm: Alarm, service: AlarmService) -> dict[str, Any]:
    now = service.now()
    item: dict[str, Any] = {"id": alarm.id, "kind": alarm.kind.value}
    if alarm.label:
        key = {AlarmKind.REMINDER: "text", AlarmKind.ROUTINE: "request"}.get(alarm.kind, "label")
        item[key] = alarm.label
    item["status"] = alarm.status
    if alarm.ringing_since is not None:
        item["ringing_since"] = format_time(alarm.ringing_since, now)
    if alarm.next_ring is not None:
        item["runs" if alarm.kind is AlarmKind.ROUTINE else "rings"] = format_when(
            alarm.next_ring, now
        )
        item["at"] = alarm.next_ring.isoformat()
    item["repeat"] = repeat_text(alarm.days)
    if alarm.duration is not None:
        item["duration"] = duration_text(alarm.duration)
    if alarm.missed_due is not None:
        times = f" ({alarm.missed_count} times)" if alarm.missed_count > 1 else ""
        item["missed"] = f"{format_time(alarm.missed_due, now)}{times}"
    return item


def _named(alarm: Alarm) -> str:
    """An alarm for a receipt: "alarm 3 (timer “Pasta”)"."""
    label = f" “{alarm.label}”" if alarm.label else ""
    return f"alarm {alarm.id} ({alarm.kind.value}{label})"


def _title(alarm: Alarm) -> str:
    label = f" {alarm.label!r}" if alarm.label else ""
    return f"{alarm.kind.value} {alarm.id}{label}"


_NOISE = re.compile(r"\b(the|my|a|an|number|alarm|timer|reminder|routine)s?\b|#")
_KIND_WORDS = {
    "alarm": AlarmKind.ALARM,
    "timer": AlarmKind.TIMER,
    "reminder": AlarmKind.REMINDER,
    "routine": AlarmKind.ROUTINE,
}


def _choose(service: AlarmService, ref: str, *, purpose: str) -> list[Alarm]:
    """The alarms ``ref`` names: a number, "all", a label, a time, or "" for the ringing ones."""
    items = service.alarms()
    text = ref.strip().lower().strip(" .!?\"'")
    if not items:
        raise ToolError(f"There is nothing to {purpose}: no alarms, timers or reminders are set.")
    if not text:
        if purpose == "cancel":
            raise ToolError("Say which one to cancel.", _which_hint(items, service))
        ringing = [a for a in items if a.status == "ringing"]
        if not ringing and purpose == "dismiss":
            ringing = [a for a in items if a.status in ("snoozed", "missed")]
        if not ringing:
            raise ToolError(
                f"Nothing is ringing now, so there is nothing to {purpose}.",
                _which_hint(items, service),
            )
        return ringing
    if text in ("all", "everything", "all of them"):
        if purpose == "cancel":
            return items
        states = ("ringing",) if purpose == "snooze" else ("ringing", "snoozed", "missed")
        active = [a for a in items if a.status in states]
        if not active:
            raise ToolError(f"Nothing is ringing now, so there is nothing to {purpose}.")
        return active
    number = re.fullmatch(r"#?\s*(\d+)", _NOISE.sub(" ", text).strip())
    if number:
        wanted = int(number.group(1))
        found = [a for a in items if a.id == wanted]
        if not found:
            raise ToolError(
                f"There is no alarm, timer or reminder number {wanted}.",
                _which_hint(items, service),
            )
        return found
    by_label = [a for a in items if a.label.lower() == text]
    if not by_label:
        by_label = [a for a in items if a.label and text in a.label.lower()]
    if by_label:
        return _one(by_label, text, purpose, service)
    kinds = {k for w, k in _KIND_WORDS.items() if re.search(rf"\b{w}s?\b", text)}
    rest = _NOISE.sub(" ", text).strip()
    pool = [a for a in items if not kinds or a.kind in kinds]
    if not rest:
        if pool:
            return _one(pool, text, purpose, service)
    else:
        matched = _by_time(pool, rest, service)
        if matched is not None:
            if not matched:
                raise ToolError(
                    f"No alarm, timer or reminder is set for {rest}.",
                    _which_hint(items, service),
                )
            return _one(matched, text, purpose, service)
    raise ToolError(f"Nothing matches {ref.strip()!r}.", _which_hint(items, service))


def _by_time(items: list[Alarm], text: str, service: AlarmService) -> list[Alarm] | None:
    """Alarms at the time of day ``text`` names ("7:30", "7 pm"); None if it is not a time."""
    try:
        at = parse_when(text, service.now(), service.tz).at
    except ToolError:
        return None
    wanted = (at.hour, at.minute)
    found = []
    for alarm in items:
        times = [alarm.next_ring, alarm.due, alarm.ringing_due, alarm.missed_due]
        if any(t is not None and (t.hour, t.minute) == wanted for t in times):
            found.append(alarm)
    return found


def _one(found: list[Alarm], text: str, purpose: str, service: AlarmService) -> list[Alarm]:
    if len(found) == 1:
        return found
    raise ToolError(
        f"{len(found)} match {text!r}: {_listing(found, service)}.",
        f"Call {purpose}_alarm again with the number of the one you mean.",
    )


def _listing(items: list[Alarm], service: AlarmService) -> str:
    now = service.now()
    parts = []
    for alarm in items[:10]:
        when = alarm.next_ring or alarm.ringing_due or alarm.missed_due
        shown = f" {format_time(when, now)}" if when is not None else ""
        parts.append(f"{alarm.id} = {_title(alarm)}{shown} ({alarm.status})")
    return "; ".join(parts)


def _which_hint(items: list[Alarm], service: AlarmService) -> str:
    return f"Set now: {_listing(items, service)}. Give the number of the one you mean."
