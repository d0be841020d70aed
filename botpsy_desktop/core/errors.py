"""The application's own error types: each carries a sentence that says what to do."""

from __future__ import annotations


class BotpsyError(Exception):
    """Base error. ``str(err)`` is the message; ``hint`` says what the user can do about it."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} {self.hint}".strip()


class ConfigError(BotpsyError):
    """The configuration file or an option is invalid."""


class ModelError(BotpsyError):
    """A model file is missing, unreadable, unsupported or does not fit."""


class ToolError(BotpsyError):
    """An adapter refused or failed to carry out a tool call; the message goes to the model."""


class StoreError(BotpsyError):
    """The conversation database could not be read or written."""
