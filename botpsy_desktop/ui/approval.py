"""The approval dialog: what will happen in plain words, the tool and JSON under Details."""

from __future__ import annotations

import json
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from botpsy_desktop.agent.events import ApprovalRequest


def _sentence(text: str) -> str:
    text = " ".join(text.split())
    if text and text[-1] not in ".!?…":
        text += "."
    return text[:1].upper() + text[1:]


def source_warning(request: ApprovalRequest) -> str:
    """The untrusted content this request has read, in words ("" in a clean context)."""
    if not request.sources:
        return ""
    shown = ", ".join(dict.fromkeys(request.sources))
    return (
        f"This request has read content you did not type ({shown}). It may have been written "
        "by someone else to make the assistant do this."
    )


def why_text(request: ApprovalRequest) -> str:
    """Why the gate asks, in one sentence ("" when it gave no reason)."""
    reasons = [r.strip().rstrip(".") for r in request.reasons if r.strip()]
    return "Why it asks: " + _sentence("; ".join(reasons)) if reasons else ""


def detail_lines(request: ApprovalRequest) -> list[str]:
    """The receipt's further plain lines (to whom, what leaves the computer), without the one
    naming the untrusted source, which is shown on its own."""
    shown = ", ".join(dict.fromkeys(request.sources))
    return [
        _sentence(line) for line in request.lines if line.strip() and not (shown and shown in line)
    ]


def whole_texts(request: ApprovalRequest) -> str:
    """Each long text argument whole, headed with its name and length ("" when none)."""
    return "\n\n".join(
        f"The whole {key} ({len(text):,} characters):\n{text}" for key, text in request.texts
    )


def plain_words(request: ApprovalRequest) -> str:
    """Everything a person reads before deciding, without tool names or JSON: what will happen,
    to whom, what leaves the computer, the untrusted source, why it asks."""
    parts = [_sentence(request.summary), *detail_lines(request)]
    parts += [source_warning(request), why_text(request), whole_texts(request)]
    return "\n".join(p for p in parts if p)


def technical_details(request: ApprovalRequest) -> str:
    """The programmer's view: the tool, its tier and effects (the JSON is shown editable)."""
    head = request.details.split("\nArguments:", 1)[0].strip() if request.details else ""
    return head or f"Tool: {request.tool}\nEffects: {', '.join(request.effects) or 'none'}"


class ApprovalDialog(QDialog):
    """Asks the person about one call, in their words. Deny is the default.

    The top says what will happen (the receipt's summary), to whom and what leaves the computer
    (its lines), the untrusted content the request has read (when its context is tainted) and
    why it asks. The tool's name and the exact JSON arguments are under a collapsed Details
    section; Edit opens it and lets the user change the arguments. "Allow for this
    conversation" is offered only where the gate offers a scope (never for an always-ask call),
    with exactly what it covers written beside it.

    The decision goes straight to the request (approve/deny); closing the dialog denies.
    Keyboard: Deny has the focus (Enter denies), Alt+A or Ctrl+Enter approves, Alt+E edits,
    Alt+D or Escape denies; Tab goes Deny, Edit, Approve, (Allow for this conversation), Details.
    """

    def __init__(self, request: ApprovalRequest, parent: Any = None) -> None:
        super().__init__(parent)
        self.request = request
        self.setObjectName("approvalDialog")
        self.setWindowTitle("Approve this action?")
        self.setModal(True)
        self.setMinimumWidth(540)
        layout = QVBoxLayout(self)

        self.summary = QLabel(_sentence(request.summary) or f"Run {request.tool}.")
        self.summary.setObjectName("approvalSummary")
        self.summary.setTextFormat(Qt.TextFormat.PlainText)
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.summary)
        lines = detail_lines(request)
        self.lines = QLabel("\n".join(f"• {line}" for line in lines))
        self.lines.setObjectName("approvalLines")
        self.lines.setTextFormat(Qt.TextFormat.PlainText)
        self.lines.setWordWrap(True)
        self.lines.setVisible(bool(lines))
        layout.addWidget(self.lines)
        # long text (a note, a message's body) whole, where the decision is made: the lines
        # above clip it with a count, and a planted part may be anywhere in it
        self.texts = QPlainTextEdit(whole_texts(request))
        self.texts.setObjectName("approvalTexts")
        self.texts.setReadOnly(True)
        self.texts.setMaximumHeight(220)
        self.texts.setVisible(bool(request.texts))
        layout.addWidget(self.texts)
        self.sources = QLabel(source_warning(request))
        self.sources.setObjectName("approvalSources")
        self.sources.setTextFormat(Qt.TextFormat.PlainText)
        self.sources.setWordWrap(True)
        self.sources.setVisible(bool(request.sources))
        layout.addWidget(self.sources)
        self.why = QLabel(why_text(request))
        self.why.setObjectName("approvalWhy")
        self.why.setTextFormat(Qt.TextFormat.PlainText)
        self.why.setWordWrap(True)
        self.why.setVisible(bool(self.why.text()))
        layout.addWidget(self.why)

        # what "allow for this conversation" covers, exactly; only where it is offered
        self.scope_text = QLabel(request.scope.describe() if request.scope is not None else "")
        self.scope_text.setObjectName("scopeCovers")
        self.scope_text.setTextFormat(Qt.TextFormat.PlainText)
        self.scope_text.setWordWrap(True)
        self.scope_text.setVisible(request.scope is not None)
        layout.addWidget(self.scope_text)

        # Details (collapsed): the tool, its tier and effects, the exact arguments as JSON
        self.details_toggle = QToolButton()
        self.details_toggle.setObjectName("approvalDetailsToggle")
        self.details_toggle.setText("De&tails: the tool and its exact arguments")
        self.details_toggle.setCheckable(True)
        self.details_toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.details_toggle.setArrowType(Qt.ArrowType.RightArrow)
        self.details_toggle.toggled.connect(self._show_details)
        layout.addWidget(self.details_toggle)
        self.details = QWidget()
        self.details.setObjectName("approvalDetails")
        dv = QVBoxLayout(self.details)
        dv.setContentsMargins(16, 0, 0, 0)
        self.technical = QLabel(technical_details(request))
        self.technical.setObjectName("approvalReceipt")
        self.technical.setTextFormat(Qt.TextFormat.PlainText)
        self.technical.setWordWrap(True)
        self.technical.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        dv.addWidget(self.technical)
        dv.addWidget(QLabel("Exactly these arguments:"))
        self.arguments = QPlainTextEdit()
        self.arguments.setObjectName("approvalArguments")
        self.arguments.setPlainText(json.dumps(request.arguments, ensure_ascii=False, indent=2))
        self.arguments.setReadOnly(True)
        self.arguments.setMinimumHeight(140)
        dv.addWidget(self.arguments)
        self.details.setVisible(False)
        layout.addWidget(self.details)

        self.error = QLabel("")
        self.error.setObjectName("approvalError")
        self.error.setWordWrap(True)
        self.error.setVisible(False)
        layout.addWidget(self.error)

        buttons = QDialogButtonBox()
        self.deny_button = QPushButton("&Deny")
        self.edit_button = QPushButton("&Edit")
        self.approve_button = QPushButton("&Approve")
        self.approve_button.setObjectName("approveButton")
        buttons.addButton(self.deny_button, QDialogButtonBox.ButtonRole.RejectRole)
        buttons.addButton(self.edit_button, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.addButton(self.approve_button, QDialogButtonBox.ButtonRole.AcceptRole)
        # "allow for this conversation": only where the gate offers it (never for always-ask
        # calls: sending, money, deleting, routines), bound to what it says it covers
        self.scope_button = QPushButton("Allow for this &conversation")
        self.scope_button.setObjectName("scopeButton")
        self.scope_button.setAutoDefault(False)
        if request.scope is not None:
            self.scope_button.setToolTip(request.scope.describe())
            self.scope_button.setAccessibleDescription(request.scope.describe())
            buttons.addButton(self.scope_button, QDialogButtonBox.ButtonRole.AcceptRole)
            self.scope_button.clicked.connect(self.approve_for_conversation)
        else:
            self.scope_button.setVisible(False)
        self.deny_button.setDefault(True)
        self.deny_button.setAutoDefault(True)
        self.approve_button.setAutoDefault(False)
        self.edit_button.setAutoDefault(False)
        self.deny_button.clicked.connect(self.deny)
        self.edit_button.clicked.connect(self.start_edit)
        self.approve_button.clicked.connect(self.approve)
        row = QHBoxLayout()
        row.addWidget(buttons)
        layout.addLayout(row)
        self._approve_shortcut = QShortcut(QKeySequence("Ctrl+Return"), self, self.approve)
        self._approve_enter = QShortcut(QKeySequence("Ctrl+Enter"), self, self.approve)
        for button, words in (
            (self.deny_button, "Deny: do not run it (Escape)"),
            (self.edit_button, "Edit the arguments before approving"),
            (self.approve_button, "Approve: run exactly this, once (Ctrl+Enter)"),
        ):
            button.setToolTip(words)
            button.setAccessibleDescription(words)
        self.arguments.setAccessibleName("Exact arguments")
        self.arguments.setTabChangesFocus(True)
        self.setTabOrder(self.deny_button, self.edit_button)
        self.setTabOrder(self.edit_button, self.approve_button)
        self.setTabOrder(self.approve_button, self.scope_button)
        self.setTabOrder(self.scope_button, self.details_toggle)
        self.setTabOrder(self.details_toggle, self.arguments)
        self.deny_button.setFocus()

    def _show_details(self, on: bool) -> None:
        self.details_toggle.setArrowType(Qt.ArrowType.DownArrow if on else Qt.ArrowType.RightArrow)
        self.details.setVisible(on)
        self.adjustSize()

    @property
    def details_shown(self) -> bool:
        return self.details_toggle.isChecked()

    def start_edit(self) -> None:
        self.details_toggle.setChecked(True)
        self.arguments.setReadOnly(False)
        self.arguments.setFocus()
        self.edit_button.setEnabled(False)
        self.scope_button.setEnabled(False)
        self.approve_button.setText("&Approve edited")

    def approve(self) -> None:
        if self.request.decided:
            self.accept()
            return
        if self.arguments.isReadOnly():
            self.request.approve(by="user")
            self.accept()
            return
        try:
            edited = json.loads(self.arguments.toPlainText())
        except json.JSONDecodeError as exc:
            self._show_error(f"The arguments are not valid JSON ({exc.msg}, line {exc.lineno}).")
            return
        if not isinstance(edited, dict):
            self._show_error('The arguments must be a JSON object: {"name": value, ...}.')
            return
        self.request.approve(by="user (edited)", arguments=edited)
        self.accept()

    def approve_for_conversation(self) -> None:
        if not self.request.decided and self.request.scope is not None:
            self.request.approve(by="user (for this conversation)", scope=True)
        self.accept()

    def deny(self) -> None:
        if not self.request.decided:
            self.request.deny(by="user")
        self.reject()

    def reject(self) -> None:  # Esc or closing the window denies
        if not self.request.decided:
            self.request.deny(by="user")
        super().reject()

    def _show_error(self, text: str) -> None:
        self.error.setText(text)
        self.error.setVisible(True)
