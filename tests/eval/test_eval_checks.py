"""The evaluation's argument checks and call matching: dates, tolerances, any-of, order groups."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from pydantic import BaseModel

from botpsy_desktop.agent.tools import Effect, ToolRegistry, make_tool
from botpsy_desktop.eval.checks import CheckError, Context, parse_check
from botpsy_desktop.eval.scoring import ActualCall, score_calls
from botpsy_desktop.eval.spec import Case

PARIS = ZoneInfo("Europe/Paris")
CTX = Context(datetime(2026, 3, 10, 22, 15, tzinfo=PARIS), PARIS, Path("/home/u"))  # a Tuesday


def passes(spec: dict[str, Any], value: Any) -> bool:
    return parse_check(spec, "test").passes(value, CTX)


@pytest.mark.parametrize(
    "value", ["6:45", "06:45", "6:45 am", "tomorrow 6:45", "2026-03-11T06:45", "6.45am"]
)
def test_a_time_check_accepts_every_way_of_saying_the_same_moment(value: str) -> None:
    assert passes({"time": "2026-03-11T06:45"}, value)


@pytest.mark.parametrize("value", ["6:45 pm", "7:45", "monday 6:45", "soon", "", 645])
def test_a_time_check_refuses_other_moments_and_nonsense(value: Any) -> None:
    assert not passes({"time": "2026-03-11T06:45"}, value)


def test_a_time_in_minutes_from_now_is_resolved_against_the_cases_clock() -> None:
    assert passes({"time": "2026-03-10T22:35"}, "in 20 minutes")
    assert not passes({"time": "2026-03-10T22:35"}, "in 25 minutes")


@pytest.mark.parametrize("value", ["friday", "Friday", "2026-03-13", "this friday", "fri"])
def test_a_date_check_resolves_day_words(value: str) -> None:
    assert passes({"date": "2026-03-13"}, value)


def test_a_date_check_refuses_another_day() -> None:
    assert not passes({"date": "2026-03-13"}, "thursday")
    assert passes({"date": "2026-03-11"}, "tomorrow")


@pytest.mark.parametrize("value", ["10 minutes", "10 min", "600 seconds", "0:10:00", "PT10M", 600])
def test_a_duration_check_compares_lengths(value: Any) -> None:
    assert passes({"duration": "PT10M"}, value)


def test_a_duration_check_refuses_another_length() -> None:
    assert not passes({"duration": "10 minutes"}, "11 minutes")
    assert not passes({"duration": "10 minutes"}, "ten-ish")


def test_numbers_pass_within_the_tolerance_and_only_there() -> None:
    assert passes({"number": 50, "tolerance": 5}, 54)
    assert passes({"number": 50, "tolerance": 5}, "45")
    assert not passes({"number": 50, "tolerance": 5}, 56)
    assert passes({"number": 30}, 30.0)
    assert not passes({"number": 30}, 31)
    assert not passes({"number": 30}, True)


def test_exact_and_any_of() -> None:
    assert passes({"exact": "Gym"}, " Gym ")
    assert not passes({"exact": "Gym"}, "gym")
    assert passes({"any_of": ["Gym", "1", 1]}, 1)
    assert passes({"any_of": ["Gym", "1"]}, "1")
    assert not passes({"any_of": ["Gym", "1"]}, "2")
    assert passes({"exact": 7}, 7.0)
    assert not passes({"exact": True}, 1)


def test_free_text_checks_ignore_case_and_spacing() -> None:
    assert passes({"text": "Call  Mum"}, "call mum")
    assert not passes({"text": "Call Mum"}, "call mum now")
    assert passes({"contains": ["mum", "call"]}, "Please CALL your Mum")
    assert not passes({"contains": ["mum", "call"]}, "mum")
    assert passes({"contains_any": ["10 min", "ten min"]}, "Ten minutes late")
    assert passes({"contains": "œufs"}, "Lait, ŒUFS")


def test_paths_are_normalised() -> None:
    spec = {"path": "~/Documents/Taxes"}
    for same_place in (
        "~/Documents/Taxes",
        "~/Documents/Taxes/",
        "/home/u/Documents/Taxes",
        "Documents/Taxes",
        "~/Documents/./x/../Taxes",
    ):
        assert passes(spec, same_place), same_place
    assert not passes(spec, "~/Documents/taxes")
    assert not passes(spec, "~/Taxes")


def test_addresses_compare_as_a_set() -> None:
    spec = {"email": ["ana@example.org", "bob@example.org"]}
    assert passes(spec, "Bob <BOB@example.org>, ana@example.org")
    assert passes(spec, ["ana@example.org", "bob@example.org"])
    assert not passes(spec, "ana@example.org")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({}, "exactly one of"),
        ({"exact": 1, "any_of": [1]}, "exactly one of"),
        ({"time": "tomorrow"}, "not a local time"),
        ({"time": "2026-03-11T06:45+01:00"}, "without an offset"),
        ({"date": "friday"}, "not a day"),
        ({"duration": "a while"}, "not a duration"),
        ({"exact": 1, "tolerance": 2}, "tolerance goes only with number"),
        ({"any_of": []}, "non-empty list"),
        ({"any": 1}, '{"any": true}'),
        ({"number": "five"}, "number needs a number"),
    ],
)
def test_a_bad_check_says_what_is_wrong(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(CheckError, match="test: .*" + message.replace("(", r"\(")):
        parse_check(spec, "test")


# --- matching calls: order, groups, tolerated extras, defaults ---------------------------------


class AlarmArgs(BaseModel):
    """Set an alarm."""

    time: str
    label: str = ""
    repeat: str = "never"


class ListArgs(BaseModel):
    """List the alarms."""


class WeatherArgs(BaseModel):
    """The weather."""

    place: str = ""


def _registry() -> ToolRegistry:
    def set_alarm(args: AlarmArgs) -> str:
        """Set an alarm."""
        return "ok"

    def list_alarms(args: ListArgs) -> str:
        """List alarms."""
        return "none"

    def get_weather(args: WeatherArgs) -> str:
        """Weather."""
        return "sunny"

    return ToolRegistry(
        [
            make_tool(set_alarm, effects={Effect.LOCAL_WRITE}),
            make_tool(list_alarms, effects={Effect.READ}),
            make_tool(get_weather, effects={Effect.READ}),
        ]
    )


def _case(expect: dict[str, Any]) -> Case:
    return Case.model_validate(
        {
            "id": "t",
            "domain": "alarms",
            "category": "multi_step" if len(expect["calls"]) > 1 else "simple",
            "language": "en",
            "now": "2026-03-10T22:15",
            "time_zone": "Europe/Paris",
            "request": "x",
            "expect": expect,
        }
    )


def alarm(time: str, **extra: Any) -> dict[str, Any]:
    return {
        "tool": "set_alarm",
        "arguments": {"time": time},
        "checks": {
            "time": {"time": f"2026-03-11T{time}"},
            "label": {"any": True, "optional": True},
        },
        **extra,
    }


SEQUENCE = {"calls": [alarm("06:00"), alarm("07:00")], "tolerate": ["list_alarms"]}
GROUPED = {"calls": [{"any_order": [alarm("06:00"), alarm("07:00")]}, alarm("08:00")]}


def score(expect: dict[str, Any], *calls: tuple[str, dict[str, Any]]) -> tuple[Any, Any]:
    tool_ok, args_ok, _ = score_calls(
        _case(expect), [ActualCall(n, a) for n, a in calls], 0, _registry(), CTX
    )
    return tool_ok, args_ok


def test_steps_must_come_in_order() -> None:
    assert score(SEQUENCE, ("set_alarm", {"time": "6:00"}), ("set_alarm", {"time": "7:00"})) == (
        True,
        True,
    )
    assert score(SEQUENCE, ("set_alarm", {"time": "7:00"}), ("set_alarm", {"time": "6:00"})) == (
        True,
        False,
    )


def test_an_any_order_group_takes_either_order_but_stays_before_the_next_step() -> None:
    six, seven, eight = ({"time": t} for t in ("6:00", "7:00", "8:00"))
    assert score(GROUPED, ("set_alarm", seven), ("set_alarm", six), ("set_alarm", eight)) == (
        True,
        True,
    )
    assert score(GROUPED, ("set_alarm", six), ("set_alarm", eight), ("set_alarm", seven)) == (
        True,
        False,
    )


def test_tolerated_read_only_calls_may_come_anywhere_other_extras_may_not() -> None:
    calls: tuple[tuple[str, dict[str, Any]], ...] = (
        ("list_alarms", {}),
        ("set_alarm", {"time": "6:00"}),
        ("list_alarms", {}),
        ("set_alarm", {"time": "7:00"}),
    )
    assert score(SEQUENCE, *calls) == (True, True)
    assert score(SEQUENCE, *calls, ("get_weather", {})) == (False, False)
    assert score(SEQUENCE, *calls, ("set_alarm", {"time": "6:00"})) == (False, False)
    assert score(SEQUENCE, ("set_alarm", {"time": "6:00"})) == (False, False)


def test_extra_arguments_pass_only_at_their_schema_default_unless_allowed() -> None:
    one = {"calls": [alarm("06:00")]}
    assert score(one, ("set_alarm", {"time": "6:00", "repeat": "never"})) == (True, True)
    assert score(one, ("set_alarm", {"time": "6:00", "repeat": "daily"})) == (True, False)
    loose = {"calls": [alarm("06:00", extra_arguments="any")]}
    assert score(loose, ("set_alarm", {"time": "6:00", "repeat": "daily"})) == (True, True)
    strict = {"calls": [alarm("06:00", extra_arguments="none")]}
    assert score(strict, ("set_alarm", {"time": "6:00", "repeat": "never"})) == (True, False)


def test_a_missing_required_argument_is_wrong_an_optional_one_is_not() -> None:
    one = {"calls": [alarm("06:00")]}
    assert score(one, ("set_alarm", {"label": "x"})) == (True, False)
    assert score(one, ("set_alarm", {"time": "6:00"})) == (True, True)


def test_no_call_cases_are_right_only_without_any_call() -> None:
    case = Case.model_validate(
        {
            "id": "n",
            "domain": "none",
            "category": "irrelevance",
            "language": "en",
            "now": "2026-03-10T10:00",
            "time_zone": "UTC",
            "request": "hi",
            "expect": {"no_call": True},
        }
    )
    assert score_calls(case, [], 0, _registry(), CTX)[:2] == (True, True)
    assert score_calls(case, [], 1, _registry(), CTX)[:2] == (False, False)
    assert score_calls(case, [ActualCall("get_weather", {})], 0, _registry(), CTX)[:2] == (
        False,
        False,
    )
