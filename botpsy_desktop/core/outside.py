"""Values that came from outside (a server, another person), marked where they are made."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class Outside(str):
    """Text someone other than the person set (a shared calendar's display name, set by its
    owner on the server): a tool result that carries one is outside content, whatever the
    tool declares (``untrusted_output=False`` covers only what the app itself wrote).

    Made where the value is read (the adapter that fetched it), so no tool that later puts it
    in a result can forget to say so. Text built from it by formatting is plain ``str``
    again: wrap such text with :func:`outside` too (see :func:`outside_if`)."""

    __slots__ = ()


def outside(text: str) -> Outside:
    """``text`` marked as set by someone else."""
    return text if isinstance(text, Outside) else Outside(text)


def outside_if(text: str, *parts: Any) -> str:
    """``text`` (built from ``parts``) marked as outside when any part was."""
    return outside(text) if any(isinstance(p, Outside) for p in parts) else text


def carries_outside(value: Any, _depth: int = 0) -> bool:
    """Whether a tool's result holds an :class:`Outside` value anywhere (keys included)."""
    if isinstance(value, Outside):
        return True
    if _depth > 32:
        return True  # too deep to look at: assume the worst
    if isinstance(value, Mapping):
        return any(
            carries_outside(k, _depth + 1) or carries_outside(v, _depth + 1)
            for k, v in value.items()
        )
    if isinstance(value, list | tuple | set | frozenset):
        return any(carries_outside(v, _depth + 1) for v in value)
    return False
