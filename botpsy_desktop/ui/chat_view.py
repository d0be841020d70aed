"""The conversation view: message bubbles, collapsible thinking and expandable tool-call cards."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, ClassVar

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QResizeEvent, QTextCursor
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QTextBrowser,
    QToolButton,
    QVBoxLayout,
    QWidget,
)


def _label(text: str, *, markdown: bool = False, name: str = "") -> QLabel:
    label = QLabel()
    label.setWordWrap(True)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    label.setTextFormat(Qt.TextFormat.MarkdownText if markdown else Qt.TextFormat.PlainText)
    label.setText(text)
    label.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)
    if name:
        label.setObjectName(name)
    return label


class _GrowingText(QTextBrowser):
    """Read-only rich text that is as tall as its content (no inner scroll bar).

    Streaming appends at the end of the document, so Qt lays out only the last block: the cost
    of a new piece does not grow with the length of the answer.
    """

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("bubbleText")
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setOpenExternalLinks(True)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.document().setDocumentMargin(2)
        layout = self.document().documentLayout()
        if layout is not None:
            layout.documentSizeChanged.connect(self._fit)
        self._fit()

    def _fit(self, *_: object) -> None:
        self.setFixedHeight(int(self.document().size().height()) + 4)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self.document().setTextWidth(self.viewport().width())
        self._fit()

    def append_plain(self, piece: str) -> None:
        cursor = self.textCursor()
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.insertText(piece)


class MessageBubble(QFrame):
    """One user or assistant message. Streams as plain text; shown as Markdown when complete."""

    def __init__(self, role: str, text: str = "") -> None:
        super().__init__()
        self.role = role
        self.setObjectName("userBubble" if role == "user" else "assistantBubble")
        self._text = ""
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 6, 10, 6)
        self.body = _GrowingText()
        layout.addWidget(self.body)
        self.set_text(text)

    @property
    def text(self) -> str:
        return self._text

    def append(self, piece: str) -> None:
        self._text += piece
        self.body.append_plain(piece)

    def set_text(self, text: str) -> None:
        self._text = text
        if self.role == "user":
            self.body.setPlainText(text)
        else:
            self.body.setMarkdown(text)


class Collapsible(QFrame):
    """A header button that shows or hides a read-only text body."""

    def __init__(self, title: str, body: str = "", *, name: str = "collapsible") -> None:
        super().__init__()
        self.setObjectName(name)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 4, 8, 4)
        layout.setSpacing(2)
        self.toggle = QToolButton()
        self.toggle.setObjectName("collapsibleToggle")
        self.toggle.setCheckable(True)
        self.toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.toggle.setArrowType(Qt.ArrowType.RightArrow)
        self.toggle.setText(title)
        # a long header is cut at the card's edge instead of widening the whole chat
        self.toggle.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.toggle.toggled.connect(self._on_toggled)
        self.body = QPlainTextEdit()
        self.body.setReadOnly(True)
        self.body.setPlainText(body)
        self.body.setVisible(False)
        self.body.setMaximumHeight(220)
        layout.addWidget(self.toggle)
        layout.addWidget(self.body)

    def _on_toggled(self, on: bool) -> None:
        self.toggle.setArrowType(Qt.ArrowType.DownArrow if on else Qt.ArrowType.RightArrow)
        self.body.setVisible(on)

    @property
    def expanded(self) -> bool:
        return self.toggle.isChecked()

    def append(self, text: str) -> None:
        self.body.moveCursor(self.body.textCursor().MoveOperation.End)
        self.body.insertPlainText(text)


class ToolCard(Collapsible):
    """A tool call: name and arguments in the header; status, duration and result inside.

    A change that ran also says what was done in plain words, under the header; where it can be
    undone (the gate logged its inverse), an Undo button asks for it (``undoRequested``).
    """

    undoRequested = Signal(str, int)  # call id, audit log entry of the change
    openRequested = Signal(str)  # a document the result names, as it shows it (~/...)

    STATUS: ClassVar[dict[str, str]] = {
        "running": "running…",
        "ok": "done",
        "failed": "failed",
        "denied": "not approved, not carried out",
        "not-run": "not run",
        "waiting": "waiting for your approval",
        "interrupted": "interrupted",
        "unknown": "outcome not recorded",
    }

    def __init__(self, call_id: str, name: str, arguments: dict[str, Any]) -> None:
        self.call_id = call_id
        self.name = name
        self.arguments = arguments
        self.status = "running"
        self.result = ""
        self.duration_s = 0.0
        self.action_id: int | None = None
        super().__init__(self._title(), self._details(), name="toolCard")
        # what was done, in words, and Undo: shown once a change has run
        self.change = QWidget()
        self.change.setObjectName("toolChange")
        row = QHBoxLayout(self.change)
        row.setContentsMargins(22, 0, 0, 2)
        self.summary = _label("", name="toolSummary")
        self.undo_button = QPushButton("&Undo")
        self.undo_button.setObjectName("undoButton")
        self.undo_button.setAutoDefault(False)
        self.undo_button.clicked.connect(self._undo_clicked)
        self.undo_button.setVisible(False)
        row.addWidget(self.summary, 1)
        row.addWidget(self.undo_button, 0, Qt.AlignmentFlag.AlignTop)
        self.change.setVisible(False)
        layout = self.layout()
        assert isinstance(layout, QVBoxLayout)
        layout.insertWidget(1, self.change)
        # the documents a search or read found, each with Open (the window decides which)
        self.sources_of: Callable[[str, str], list[str]] | None = None
        self.sources = QWidget()
        self.sources.setObjectName("toolSources")
        self.sources_row = QHBoxLayout(self.sources)
        self.sources_row.setContentsMargins(22, 0, 0, 2)
        self.open_buttons: dict[str, QPushButton] = {}
        self.sources.setVisible(False)
        layout.insertWidget(2, self.sources)

    def _title(self) -> str:
        args = ", ".join(
            f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in self.arguments.items()
        )
        if len(args) > 80:
            args = args[:77] + "…"
        timing = f" · {self.duration_s:.2f} s" if self.duration_s else ""
        return f"⚙ {self.name}({args}) — {self.STATUS.get(self.status, self.status)}{timing}"

    def _details(self) -> str:
        args = json.dumps(self.arguments, ensure_ascii=False, indent=2)
        out = f"Arguments:\n{args}"
        if self.result:
            out += f"\n\nResult:\n{_pretty(self.result)}"
        return out

    def set_status(
        self,
        status: str,
        result: str = "",
        duration_s: float = 0.0,
        arguments: dict[str, Any] | None = None,
    ) -> None:
        self.status = status
        self.result = result
        self.duration_s = duration_s
        if arguments is not None:
            self.arguments = arguments
        self.toggle.setText(self._title())
        self.body.setPlainText(self._details())
        self.setProperty("status", status)
        self.style().unpolish(self)
        self.style().polish(self)
        if status == "ok" and self.sources_of is not None:
            self.offer_sources(self.sources_of(self.name, result))

    def offer_sources(self, shown: list[str]) -> None:
        """An Open button for each document in ``shown`` (as the result names it)."""
        for path in shown:
            if path in self.open_buttons:
                continue
            name = path.replace("\\", "/").rsplit("/", 1)[-1]
            button = QPushButton(f"Open {name}")
            button.setObjectName("openSource")
            button.setAutoDefault(False)
            button.setToolTip(f"Open {path} with its usual application")
            button.clicked.connect(lambda _=False, p=path: self.openRequested.emit(p))
            self.open_buttons[path] = button
            self.sources_row.addWidget(button)
        if self.open_buttons and not self.sources.isVisibleTo(self):
            self.sources_row.addStretch(1)
            self.sources.setVisible(True)

    def show_change(
        self,
        summary: str,
        *,
        asked: bool,
        undo: str = "",
        action_id: int | None = None,
        decided_by: str = "",
    ) -> None:
        """Say in words what the change did; offer Undo where it can be undone."""
        done = summary.strip().rstrip(".")
        how = "approved by you" if asked else "done at once: you asked for it, and it can be undone"
        if not undo or action_id is None:
            how = "approved by you" if asked else "done"
        if decided_by.startswith("allowed for this conversation"):
            how = "allowed for this conversation"
        self.summary.setText(f"✓ {done}. ({how})")
        self.action_id = action_id if undo else None
        self.undo_button.setVisible(self.action_id is not None)
        self.undo_button.setEnabled(True)
        self.undo_button.setToolTip(f"{undo}. Undo goes through the same checks as any change.")
        self.undo_button.setAccessibleDescription(undo)
        self.change.setVisible(True)

    def show_undone(self, text: str, *, ok: bool) -> None:
        """The outcome of Undo: undone, not approved, or why it could not be undone."""
        self.summary.setText(text)
        self.summary.setObjectName("toolSummary" if ok else "toolUndoFailed")
        self.summary.style().unpolish(self.summary)
        self.summary.style().polish(self.summary)
        self.undo_button.setVisible(not ok and self.action_id is not None)
        self.undo_button.setEnabled(True)
        if ok:
            self.action_id = None

    def _undo_clicked(self) -> None:
        if self.action_id is not None:
            self.undo_button.setEnabled(False)  # once; the outcome comes back to show_undone
            self.summary.setText(self.summary.text() + " Undoing…")
            self.undoRequested.emit(self.call_id, self.action_id)


def _status_of(ok: bool, decision: str) -> str:
    """A card's status from how a call ended (the same live and reopened)."""
    if ok:
        return "ok"
    return {"denied": "denied", "not-run": "not-run"}.get(decision, "failed")


def _pretty(text: str) -> str:
    try:
        return json.dumps(json.loads(text), ensure_ascii=False, indent=2)
    except (ValueError, TypeError):
        return text


class PromptProgressRow(QFrame):
    """Where the reply will appear: how far the model has read the request (tokens of total,
    time left), until the reply starts."""

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("promptProgress")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 6, 10, 6)
        self.text = _label("", name="promptProgressText")
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.bar.setTextVisible(False)
        self.bar.setMaximumHeight(8)
        layout.addWidget(self.text)
        layout.addWidget(self.bar)

    def show_progress(self, text: str, fraction: float) -> None:
        self.text.setText(text)
        self.bar.setValue(int(fraction * 1000))


class ChatView(QScrollArea):
    """A vertical list of bubbles and cards that follows the newest content."""

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("chatView")
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        inner = QWidget()
        inner.setObjectName("chatInner")
        self._layout = QVBoxLayout(inner)
        self._layout.setContentsMargins(16, 16, 16, 16)
        self._layout.setSpacing(10)
        self._layout.addStretch(1)
        self.setWidget(inner)
        self.current: MessageBubble | None = None
        self.current_thinking: Collapsible | None = None
        self.cards: dict[str, ToolCard] = {}
        self.progress: PromptProgressRow | None = None
        self.undo_handler: Any = None  # called with (card, action id) when Undo is clicked
        self.open_handler: Callable[[str], object] | None = None  # Open on a card's document
        self.sources_of: Callable[[str, str], list[str]] | None = None
        """The documents a tool's result names that may be opened (tool name, its output)."""
        self._follow = True
        self.verticalScrollBar().rangeChanged.connect(self._on_range)
        self.verticalScrollBar().valueChanged.connect(self._on_scroll)

    # -- building ---------------------------------------------------------------------------
    def _add(self, widget: QWidget, role: str = "assistant") -> None:
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        if role == "user":
            row.addStretch(1)
            row.addWidget(widget, 4)
        else:
            row.addWidget(widget, 5)
            row.addStretch(1)
        holder = QWidget()
        holder.setLayout(row)
        self._layout.insertWidget(self._layout.count() - 1, holder)

    def clear(self) -> None:
        while self._layout.count() > 1:
            item = self._layout.takeAt(0)
            widget = item.widget() if item is not None else None
            if widget is not None:
                widget.setParent(None)  # gone from the view now, freed by Qt later
                widget.deleteLater()
        self.current = None
        self.current_thinking = None
        self.progress = None
        self.cards.clear()

    def add_user(self, text: str) -> MessageBubble:
        bubble = MessageBubble("user", text)
        self._add(bubble, "user")
        self.current = None
        self.current_thinking = None
        self._follow = True
        return bubble

    def add_assistant(self, text: str = "") -> MessageBubble:
        bubble = MessageBubble("assistant", text)
        self._add(bubble)
        return bubble

    def add_note(self, text: str, kind: str = "error") -> QLabel:
        """A line under the conversation: "error", "info", or "warning" (a claim not carried
        out)."""
        self.end_prompt_progress()
        names = {"error": "errorNote", "warning": "warningNote"}
        label = _label(text, name=names.get(kind, "infoNote"))
        self._add(label)
        return label

    # -- streaming ------------------------------------------------------------------------
    def show_prompt_progress(self, text: str, fraction: float) -> PromptProgressRow:
        """How far the request has been read, where the reply will appear."""
        if self.progress is None:
            self.progress = PromptProgressRow()
            self._add(self.progress)
        self.progress.show_progress(text, fraction)
        return self.progress

    def end_prompt_progress(self) -> None:
        """The reply (or its end) has come: the progress row goes."""
        if self.progress is None:
            return
        holder = self.progress.parentWidget()
        self.progress = None
        if holder is not None:
            holder.setParent(None)
            holder.deleteLater()

    def stream_thinking(self, text: str) -> None:
        self.end_prompt_progress()
        if self.current_thinking is None:
            self.current_thinking = Collapsible("Thinking", name="thinking")
            self._add(self.current_thinking)
        self.current_thinking.append(text)

    def stream_token(self, text: str) -> None:
        self.end_prompt_progress()
        if self.current is None:
            self.current = self.add_assistant()
        self.current.append(text)

    def tool_started(self, call_id: str, name: str, arguments: dict[str, Any]) -> ToolCard:
        self.end_prompt_progress()
        card = ToolCard(call_id, name, arguments)
        card.undoRequested.connect(self._on_undo)
        card.sources_of = self.sources_of
        card.openRequested.connect(self._on_open)
        self.cards[call_id] = card
        self._add(card)
        self.current = None  # text after a tool call starts a new bubble
        self.current_thinking = None
        return card

    def tool_finished(
        self,
        call_id: str,
        name: str | None,
        arguments: dict[str, Any],
        ok: bool,
        output: str,
        decision: str,
        duration_s: float,
        *,
        summary: str = "",
        undo: str = "",
        action_id: int | None = None,
        decided_by: str = "",
    ) -> ToolCard:
        card = self.cards.get(call_id)
        if card is None:  # a call that never started (malformed, unknown): show it anyway
            card = self.tool_started(call_id, name or "(unreadable call)", arguments)
        card.set_status(_status_of(ok, decision), output, duration_s, arguments)
        if ok and summary and action_id is not None:  # a change ran: say what it did
            card.show_change(
                summary,
                asked=decision == "approved",
                undo=undo,
                action_id=action_id,
                decided_by=decided_by,
            )
        return card

    def _on_open(self, shown: str) -> None:
        if self.open_handler is not None:
            self.open_handler(shown)

    def _on_undo(self, call_id: str, action_id: int) -> None:
        card = self.cards.get(call_id)
        if card is not None and self.undo_handler is not None:
            self.undo_handler(card, action_id)

    def finish_answer(self, text: str) -> None:
        self.end_prompt_progress()
        if self.current is not None:
            self.current.set_text(text)
        elif text:
            self.add_assistant(text)
        self.current = None
        self.current_thinking = None

    # -- history ----------------------------------------------------------------------------
    def show_history(
        self, messages: list[dict[str, Any]], calls: list[dict[str, Any]] | None = None
    ) -> None:
        """A saved conversation as it happened: each tool card with the outcome the store
        recorded for its call (done, not approved, failed, not run), and the note of an answer
        that described an action no tool carried out."""
        self.clear()
        results = {m.get("tool_call_id"): m for m in messages if m.get("role") == "tool"}
        outcomes = {c.get("call_id"): c for c in calls or []}
        for m in messages:
            role = m.get("role")
            if role == "user":
                self.add_user(str(m.get("content", "")))
            elif role == "assistant":
                if m.get("reasoning_content"):
                    thinking = Collapsible("Thinking", str(m["reasoning_content"]), name="thinking")
                    self._add(thinking)
                if m.get("content"):
                    bubble = self.add_assistant(str(m["content"]))
                    if m.get("interrupted"):
                        bubble.append("\n\n*(interrupted)*")
                elif m.get("interrupted"):  # cut off before it said anything: still shown
                    self.add_assistant("*(interrupted before the reply started)*")
                if m.get("note"):
                    self.add_note(str(m["note"]), kind="warning")
                for call in m.get("tool_calls") or []:
                    fn = call.get("function", {})
                    card = self.tool_started(
                        call.get("id", ""), fn.get("name", "?"), dict(fn.get("arguments") or {})
                    )
                    result = results.get(call.get("id"))
                    outcome = outcomes.get(call.get("id"))
                    if result is not None and result.get("interrupted"):
                        card.set_status(
                            "interrupted", "The app stopped while this ran; its result is unknown."
                        )
                    elif outcome is not None:
                        card.set_status(
                            _status_of(bool(outcome.get("ok")), str(outcome.get("decision"))),
                            str(outcome.get("result", "")),
                            arguments=dict(outcome.get("arguments") or card.arguments),
                        )
                    elif result is not None:  # no record of how it ended: say so, never "done"
                        card.set_status("unknown", str(result.get("content", "")))
        self.current = None
        self.current_thinking = None

    # -- following the newest content ------------------------------------------------------
    def _on_range(self, _min: int, maximum: int) -> None:
        if self._follow:
            QTimer.singleShot(
                0, lambda: self.verticalScrollBar().setValue(self.verticalScrollBar().maximum())
            )

    def _on_scroll(self, value: int) -> None:
        # follow new content only while the user is at the bottom
        self._follow = value >= self.verticalScrollBar().maximum() - 40

    def bubbles(self) -> list[MessageBubble]:
        inner = self.widget()
        return [] if inner is None else inner.findChildren(MessageBubble)
