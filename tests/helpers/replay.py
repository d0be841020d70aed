"""Model replies for the tests' replay files: a tool call written as BotPsy-0.8B writes one."""

from __future__ import annotations


def xml_call(function: str, **params: object) -> str:
    """``<tool_call>`` for ``function`` with each parameter's value on its own lines."""
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={function}>\n{body}</function>\n</tool_call>"
