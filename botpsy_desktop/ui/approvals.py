"""The queue of approvals that background runs are waiting for, and the panel that decides them."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import (
    QDialog,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from botpsy_desktop.agent.events import ApprovalRequest
from botpsy_desktop.agent.gate import ApprovalInbox, InboxEntry
from botpsy_desktop.agent.mcp_serve import ORIGIN as SERVE_ORIGIN
from botpsy_desktop.ui.approval import ApprovalDialog, plain_words, technical_details


def waited(seconds: float) -> str:
    """How long something has waited, in a few words: "12 s", "3 min", "2 h 5 min"."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    hours, minutes = divmod(s // 60, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


class PendingApprovals(QObject):
    """The gate's inbox as seen from the GUI thread, with a live count.

    The inbox is Qt-free and calls its listeners on whichever thread posts or removes a
    request; the listener here only emits a signal, which Qt queues to the GUI thread.
    """

    changed = Signal(int)  # how many wait now
    arrived = Signal(object)  # InboxEntry: a request that was not there before
    _touched = Signal(object)  # ApprovalRequest, from any thread

    def __init__(
        self, inbox: ApprovalInbox, title_of: Callable[[str], str | None], parent: QObject | None
    ) -> None:
        super().__init__(parent)
        self.inbox = inbox
        self.title_of = title_of
        self._seen: set[int] = set()
        self._touched.connect(self._on_touched, Qt.ConnectionType.QueuedConnection)
        self._listener = self._touched.emit  # one object, so remove_listener finds it
        inbox.add_listener(self._listener)

    def entries(self) -> list[InboxEntry]:
        return self.inbox.entries()

    def count(self) -> int:
        return len(self.entries())

    def origin_text(self, entry: InboxEntry) -> str:
        if entry.origin == SERVE_ORIGIN:
            return "another app, through the tools this computer offers (MCP)"
        title = self.title_of(entry.origin) if entry.origin else None
        return f"the background run in “{title}”" if title else "a background run"

    def _on_touched(self, request: ApprovalRequest) -> None:
        entries = self.entries()
        for entry in entries:
            if id(entry.request) not in self._seen and entry.request is request:
                self.arrived.emit(entry)
        self._seen = {id(e.request) for e in entries}
        self.changed.emit(len(entries))

    def refresh(self) -> None:
        """Re-count (after a decision made here, which the inbox reports only on removal)."""
        self.changed.emit(self.count())

    def close(self) -> None:
        self.inbox.remove_listener(self._listener)


class ApprovalsPanel(QDialog):
    """Every waiting request: what will happen, the exact arguments, which run asked and for
    how long; Approve, Edit… (the approval dialog, in edit mode) and Deny. Closing the panel
    decides nothing: the requests keep waiting."""

    def __init__(self, pending: PendingApprovals, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.pending = pending
        self.setObjectName("approvalsPanel")
        self.setWindowTitle("Pending approvals")
        self.setModal(False)
        self.resize(760, 460)
        self.dialog: ApprovalDialog | None = None
        layout = QVBoxLayout(self)
        self.header = QLabel("")
        self.header.setObjectName("approvalsHeader")
        self.header.setWordWrap(True)
        layout.addWidget(self.header)

        self.list = QListWidget()
        self.list.setObjectName("approvalsList")
        self.list.setAccessibleName("Waiting approvals")
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.list.currentRowChanged.connect(self._show_current)
        self.list.itemActivated.connect(lambda _item: self.review())
        detail = QWidget()
        dv = QVBoxLayout(detail)
        dv.setContentsMargins(0, 0, 0, 0)
        self.title = QLabel("")
        self.title.setObjectName("approvalTitle")
        self.title.setTextFormat(Qt.TextFormat.PlainText)
        self.origin = QLabel("")
        self.origin.setObjectName("approvalsOrigin")
        self.origin.setWordWrap(True)
        self.origin.setTextFormat(Qt.TextFormat.PlainText)
        self.what = QLabel("")  # the plain words, as in the dialog
        self.what.setObjectName("approvalsWhat")
        self.what.setWordWrap(True)
        self.what.setTextFormat(Qt.TextFormat.PlainText)
        self.what.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.arguments = QPlainTextEdit()
        self.arguments.setObjectName("approvalsArguments")
        self.arguments.setReadOnly(True)
        self.arguments.setAccessibleName("Exact arguments")
        dv.addWidget(self.title)
        dv.addWidget(self.origin)
        dv.addWidget(self.what)
        self.technical = QLabel("")
        self.technical.setObjectName("approvalsTechnical")
        self.technical.setTextFormat(Qt.TextFormat.PlainText)
        self.technical.setWordWrap(True)
        dv.addWidget(self.technical)
        dv.addWidget(QLabel("Details: exactly these arguments"))
        dv.addWidget(self.arguments, 1)
        split = QSplitter()
        split.addWidget(self.list)
        split.addWidget(detail)
        split.setStretchFactor(1, 1)
        split.setSizes([220, 540])
        layout.addWidget(split, 1)

        row = QHBoxLayout()
        self.empty = QLabel("Nothing is waiting for your approval.")
        self.empty.setObjectName("approvalsEmpty")
        row.addWidget(self.empty)
        row.addStretch(1)
        self.deny_button = QPushButton("&Deny")
        self.edit_button = QPushButton("&Edit…")
        self.approve_button = QPushButton("&Approve")
        self.approve_button.setObjectName("approveButton")
        self.close_button = QPushButton("Close")
        for button in (self.deny_button, self.edit_button, self.approve_button):
            button.setAutoDefault(False)
            row.addWidget(button)
        row.addWidget(self.close_button)
        self.close_button.setAutoDefault(False)
        layout.addLayout(row)
        self.deny_button.clicked.connect(self.deny)
        self.edit_button.clicked.connect(self.edit)
        self.approve_button.clicked.connect(self.approve)
        self.close_button.clicked.connect(self.close)
        self.setTabOrder(self.list, self.arguments)
        self.setTabOrder(self.arguments, self.deny_button)
        self.setTabOrder(self.deny_button, self.edit_button)
        self.setTabOrder(self.edit_button, self.approve_button)
        self.setTabOrder(self.approve_button, self.close_button)

        self.entries: list[InboxEntry] = []
        pending.changed.connect(lambda _n: self.reload())
        self.clock = QTimer(self)
        self.clock.timeout.connect(self._tick)
        self.clock.start(1000)
        self.reload()

    # -- contents ---------------------------------------------------------------------------
    def reload(self) -> None:
        """Re-list the waiting requests, keeping the selection where it still exists."""
        current = self.current()
        self.entries = self.pending.entries()
        self.list.blockSignals(True)
        self.list.clear()
        for entry in self.entries:
            item = QListWidgetItem(self._item_text(entry))
            item.setToolTip(plain_words(entry.request))
            self.list.addItem(item)
        self.list.blockSignals(False)
        row = 0
        if current is not None:
            for i, entry in enumerate(self.entries):
                if entry.request is current.request:
                    row = i
        n = len(self.entries)
        self.header.setText(
            f"{n} action{'s' if n != 1 else ''} from background runs "
            f"{'are' if n != 1 else 'is'} waiting for you. Nothing runs until you approve it."
            if n
            else "No background run is waiting for your approval."
        )
        self.empty.setVisible(n == 0)
        for button in (self.deny_button, self.edit_button, self.approve_button):
            button.setEnabled(n > 0)
        if n:
            self.list.setCurrentRow(row)
        self._show_current(self.list.currentRow())

    def _item_text(self, entry: InboxEntry) -> str:
        age = waited(time.time() - entry.posted_at) if entry.posted_at else "?"
        title = self.pending.title_of(entry.origin) if entry.origin else None
        run = title or "background run"
        run = run if len(run) <= 30 else run[:29] + "…"
        what = " ".join(entry.request.summary.split()) or entry.request.tool
        what = what if len(what) <= 40 else what[:39] + "…"
        return f"{what} · waiting {age}\n{run}"

    def _tick(self) -> None:
        if not self.isVisible():
            return
        for i, entry in enumerate(self.entries):
            item = self.list.item(i)
            if item is not None:
                item.setText(self._item_text(entry))
        self._show_origin(self.current())

    def _show_current(self, row: int) -> None:
        entry = self.entries[row] if 0 <= row < len(self.entries) else None
        if entry is None:
            self.title.setText("")
            self.what.setText("")
            self.technical.setText("")
            self.arguments.setPlainText("")
            self.origin.setText("")
            return
        self.title.setText("Waiting for your approval:")
        self.what.setText(plain_words(entry.request))
        self.technical.setText(technical_details(entry.request).replace("\n", " · "))
        self.arguments.setPlainText(
            json.dumps(entry.request.arguments, ensure_ascii=False, indent=2)
        )
        self._show_origin(entry)

    def _show_origin(self, entry: InboxEntry | None) -> None:
        if entry is None:
            return
        since = waited(time.time() - entry.posted_at) if entry.posted_at else "a while"
        self.origin.setText(f"Asked by {self.pending.origin_text(entry)}, waiting {since}.")

    def current(self) -> InboxEntry | None:
        row = self.list.currentRow()
        return self.entries[row] if 0 <= row < len(self.entries) else None

    def keyPressEvent(self, event: QKeyEvent) -> None:
        # Enter opens the selected request (the list's activation); never QDialog's default
        # button search, which would reach into the approval dialog it just opened
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            event.accept()
            return
        super().keyPressEvent(event)

    # -- decisions --------------------------------------------------------------------------
    def approve(self) -> None:
        entry = self.current()
        if entry is not None and not entry.request.decided:
            entry.request.approve(by="user")
        self._decided()

    def deny(self) -> None:
        entry = self.current()
        if entry is not None and not entry.request.decided:
            entry.request.deny(by="user")
        self._decided()

    def edit(self) -> ApprovalDialog | None:
        """The approval dialog for the selected request, its arguments open for editing."""
        dialog = self.review()
        if dialog is not None:
            dialog.start_edit()
        return dialog

    def review(self) -> ApprovalDialog | None:
        """The full approval dialog for the selected request (Enter or double-click)."""
        entry = self.current()
        if entry is None or entry.request.decided:
            return None
        dialog = ApprovalDialog(entry.request, self)
        dialog.finished.connect(lambda _r: self._decided())
        self.dialog = dialog
        dialog.open()
        return dialog

    def _decided(self) -> None:
        self.pending.refresh()
        self.reload()
        self.list.setFocus()
