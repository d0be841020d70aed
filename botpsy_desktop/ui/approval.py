"""The approval dialog: what will happen, the exact arguments, and Approve / Edit / Deny."""

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
    QVBoxLayout,
)

from botpsy_desktop.agent.events import ApprovalRequest

EFFECT_WORDS = {
    "local-write": "changes something on this computer",
    "outbound": "sends something off this computer",
    "money": "involves money",
    "personal-data": "uses your personal data",
    "destructive": "deletes or overwrites something",
    "read": "only reads",
}


def plain_words(request: ApprovalRequest) -> str:
    """What will happen if approved, in plain words (the tool, its effects, the receipt)."""
    effects = "; ".join(EFFECT_WORDS.get(e, e) for e in request.effects) or "has effects"
    return f"This {effects}.\n{request.receipt}"


class ApprovalDialog(QDialog):
    """Shows the gate's receipt. Deny is the default; Edit lets the user change the arguments.

    The decision goes straight to the request (approve/deny); closing the dialog denies.
    Keyboard: Deny has the focus (Enter denies), Alt+A or Ctrl+Enter approves, Alt+E edits,
    Alt+D or Escape denies; Tab goes Deny, Edit, Approve, the arguments.
    """

    def __init__(self, request: ApprovalRequest, parent: Any = None) -> None:
        super().__init__(parent)
        self.request = request
        self.setObjectName("approvalDialog")
        self.setWindowTitle("Approve this action?")
        self.setModal(True)
        self.setMinimumWidth(520)
        layout = QVBoxLayout(self)

        title = QLabel(f"The assistant wants to run <b>{request.tool}</b>")
        title.setObjectName("approvalTitle")
        layout.addWidget(title)
        effects = "; ".join(EFFECT_WORDS.get(e, e) for e in request.effects)
        what = QLabel(f"This {effects}.")
        what.setWordWrap(True)
        layout.addWidget(what)
        receipt = QLabel(request.receipt)
        receipt.setTextFormat(Qt.TextFormat.PlainText)
        receipt.setObjectName("approvalReceipt")
        receipt.setWordWrap(True)
        receipt.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(receipt)

        layout.addWidget(QLabel("Exactly these arguments:"))
        self.arguments = QPlainTextEdit()
        self.arguments.setObjectName("approvalArguments")
        self.arguments.setPlainText(json.dumps(request.arguments, ensure_ascii=False, indent=2))
        self.arguments.setReadOnly(True)
        self.arguments.setMinimumHeight(140)
        layout.addWidget(self.arguments)
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
        # "allow for this conversation": only where the gate offers it (never money or deletion),
        # limited to this tool and these recipients/paths
        self.scope_button = QPushButton("Allow for this &conversation")
        self.scope_button.setObjectName("scopeButton")
        self.scope_button.setAutoDefault(False)
        if request.scope is not None:
            self.scope_button.setToolTip(request.scope.describe())
            buttons.addButton(self.scope_button, QDialogButtonBox.ButtonRole.AcceptRole)
            self.scope_button.clicked.connect(self.approve_for_conversation)
        else:
            self.scope_button.setVisible(False)
        self.deny_button.setDefault(True)
        self.deny_button.setAutoDefault(True)
        self.approve_button.setAutoDefault(False)
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
            (self.approve_button, "Approve: run exactly this (Ctrl+Enter)"),
        ):
            button.setToolTip(words)
            button.setAccessibleDescription(words)
        self.arguments.setAccessibleName("Exact arguments")
        self.arguments.setTabChangesFocus(True)
        self.setTabOrder(self.deny_button, self.edit_button)
        self.setTabOrder(self.edit_button, self.approve_button)
        self.setTabOrder(self.approve_button, self.scope_button)
        self.setTabOrder(self.scope_button, self.arguments)
        self.deny_button.setFocus()

    def start_edit(self) -> None:
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
