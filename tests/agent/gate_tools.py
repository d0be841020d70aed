"""Tools registered only for the gate tests: a payment and a mail tool with real side effects."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from botpsy_desktop.agent.events import ApprovalNeeded, Event
from botpsy_desktop.agent.gate import Gate
from botpsy_desktop.agent.loop import AgentSession, LoopSettings
from botpsy_desktop.agent.store import ConversationStore
from botpsy_desktop.app import build_gate
from botpsy_desktop.core.config import Config
from botpsy_desktop.core.tools import Effect, Tool, ToolRegistry, make_tool
from botpsy_desktop.llm.engines.replay import ReplayBackend


class SendPaymentArgs(BaseModel):
    """Send money to a payee.

    Example: {"amount": 12.5, "currency": "EUR", "payee": "ACME Ltd"}.
    """

    amount: float = Field(gt=0, description="How much, e.g. 12.5")
    currency: str = Field(description='Currency code, e.g. "EUR"')
    payee: str = Field(description='Who receives it, e.g. "ACME Ltd"')


class SendEmailArgs(BaseModel):
    """Send an e-mail.

    Example: {"to": ["ann@example.com"], "subject": "Hi", "body": "Hello"}.
    """

    to: list[str] = Field(description='Recipients, e.g. ["ann@example.com"]')
    subject: str = Field("", description="Subject line")
    body: str = Field("", description="The message")
    attachments: list[str] = Field(default_factory=list, description="Files to attach")


class FetchPageArgs(BaseModel):
    """Fetch a web page (declared read-only: the gate must still see the web address)."""

    url: str = Field(description='The address, e.g. "https://example.com"')


def ledger_lines(ledger: Path) -> list[dict[str, Any]]:
    if not ledger.exists():
        return []
    return [json.loads(line) for line in ledger.read_text(encoding="utf-8").splitlines()]


def payment_tool(ledger: Path) -> Tool:
    """send_payment: each payment is a line appended to ``ledger`` (the real side effect)."""

    def send_payment(args: SendPaymentArgs) -> dict[str, Any]:
        with ledger.open("a", encoding="utf-8") as f:
            f.write(json.dumps(args.model_dump()) + "\n")
        return {"paid": args.amount, "currency": args.currency, "payee": args.payee}

    return make_tool(send_payment, effects={Effect.MONEY})


def outbox_email_tool(outbox: Path) -> Tool:
    """send_email: each message (with its attachments' text) is appended to ``outbox``."""

    def send_email(args: SendEmailArgs) -> dict[str, Any]:
        attached = {a: Path(a).expanduser().read_text(encoding="utf-8") for a in args.attachments}
        with outbox.open("a", encoding="utf-8") as f:
            f.write(json.dumps({**args.model_dump(), "attached": attached}) + "\n")
        return {"sent_to": args.to}

    return make_tool(send_email, effects={Effect.OUTBOUND})


def xml_call(function: str, **params: Any) -> str:
    body = "".join(
        f"<parameter={k}>\n{json.dumps(v) if not isinstance(v, str) else v}\n</parameter>\n"
        for k, v in params.items()
    )
    return f"<tool_call>\n<function={function}>\n{body}</function>\n</tool_call>"


def shipped_gate(**agent: Any) -> Gate:
    """The gate ``build_app`` ships, for the default settings (``agent``: settings of the
    agent section, e.g. ``ask_before_every_change=True``)."""
    return build_gate(Config.model_validate({"agent": agent}))


def make_session(
    turns: list[Any],
    registry: ToolRegistry,
    store: ConversationStore,
    gate: Gate | None = None,
    conversation_id: str | None = None,
    **options: Any,
) -> AgentSession:
    background = bool(options.pop("background", False))
    settings: dict[str, Any] = {"system_prompt": "test", "max_steps": 6, "tool_timeout_s": 10.0}
    settings.update(options)
    return AgentSession(
        ReplayBackend(turns),
        registry,
        gate or shipped_gate(),
        store,
        LoopSettings(**settings),
        conversation_id,
        background=background,
    )


def drive(events: Iterator[Event], decide: str | None = "deny") -> list[Event]:
    """Collect events, answering each approval: "deny", "approve", or None (leave undecided)."""
    out: list[Event] = []
    for event in events:
        if isinstance(event, ApprovalNeeded) and decide is not None:
            if decide == "approve":
                event.request.approve(by="test")
            else:
                event.request.deny(by="test")
        out.append(event)
    return out
