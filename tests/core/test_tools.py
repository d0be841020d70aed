"""Tool declarations: schema from the arguments model, validation messages, registry lookups."""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import BaseModel, Field

from botpsy_desktop.core.tools import Effect, ToolArgumentsError, ToolRegistry, make_tool


class GreetArgs(BaseModel):
    """Greet someone by name."""

    name: str = Field(description="Who to greet, e.g. Ann")
    times: int = Field(1, ge=1, le=5, description="How often")
    style: Literal["short", "long"] = "short"
    note: str | None = Field(None, description="Optional note")


class NoDoc(BaseModel):
    x: int


def nodoc(args: NoDoc) -> None:
    return None


def greet(args: GreetArgs) -> str:
    return ("hi " + args.name + " ") * args.times


def test_schema_comes_from_the_arguments_model() -> None:
    tool = make_tool(greet, effects=[Effect.READ])
    fn = tool.schema()["function"]
    assert fn["name"] == "greet"
    assert fn["description"] == "Greet someone by name."
    params = fn["parameters"]
    assert params["type"] == "object"
    assert params["required"] == ["name"]
    assert params["properties"]["name"] == {
        "description": "Who to greet, e.g. Ann",
        "type": "string",
    }
    assert params["properties"]["style"]["enum"] == ["short", "long"]
    # Optional[str] becomes a plain optional string: small models read it better
    assert params["properties"]["note"] == {"description": "Optional note", "type": "string"}
    assert "title" not in str(params)


def test_validation_errors_are_advice_for_the_model() -> None:
    tool = make_tool(greet, effects=[Effect.READ])
    assert tool.validate({"name": "Ann", "times": 2}).model_dump()["times"] == 2
    with pytest.raises(ToolArgumentsError, match="times") as info:
        tool.validate({"name": "Ann", "times": 9})
    assert "Call it again" in str(info.value)
    with pytest.raises(ToolArgumentsError, match="has no parameter"):
        tool.validate({"name": "Ann", "colour": "red"})
    with pytest.raises(ToolArgumentsError, match="name"):
        tool.validate({})


def test_a_tool_must_declare_effects_and_a_description() -> None:
    with pytest.raises(ValueError, match="effect"):
        make_tool(greet, effects=[])
    with pytest.raises(TypeError, match="docstring"):
        make_tool(nodoc, effects=[Effect.READ])


@pytest.mark.parametrize(
    "name", ["Greet", "greet ", " greet", "gr\u0435et", "gr\u200beet", "GREET"]
)
def test_registry_lookup_is_exact(name: str) -> None:
    registry = ToolRegistry([make_tool(greet, effects=[Effect.READ])])
    assert registry.get("greet") is not None
    assert registry.get(name) is None


def test_duplicate_names_are_refused() -> None:
    registry = ToolRegistry([make_tool(greet, effects=[Effect.READ])])
    with pytest.raises(ValueError, match="already registered"):
        registry.register(make_tool(greet, effects=[Effect.READ]))
