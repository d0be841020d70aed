"""The main window: conversations on the left, the streaming chat, the input box, a status bar."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QEvent, QObject, Qt, QTimer, QUrl, Signal, Slot
from PySide6.QtGui import QAction, QDesktopServices, QKeyEvent, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QCheckBox,
    QFileDialog,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMainWindow,
    QMenu,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from botpsy_desktop.adapters.documents.tools import named_documents, openable
from botpsy_desktop.agent.events import (
    Answer,
    ApprovalRequest,
    ToolResult,
    TurnFinished,
    progress_text,
)
from botpsy_desktop.app import App
from botpsy_desktop.core.errors import BotpsyError
from botpsy_desktop.llm.types import PromptProgress
from botpsy_desktop.ui.approval import ApprovalDialog
from botpsy_desktop.ui.approvals import ApprovalsPanel, PendingApprovals
from botpsy_desktop.ui.bridge import EngineThread
from botpsy_desktop.ui.chat_view import ChatView, ToolCard
from botpsy_desktop.ui.download import ModelDialog
from botpsy_desktop.ui.firstrun import FirstRunWizard, needs_first_run
from botpsy_desktop.ui.hotkey import GlobalShortcut
from botpsy_desktop.ui.settings import SettingsDialog
from botpsy_desktop.ui.voice import MicButton, SpokenReplies, VoiceController

if TYPE_CHECKING:
    from botpsy_desktop.agent.undo import UndoPlan


def rss_bytes() -> int | None:
    """Resident memory of this process (model included), or None where unknown."""
    if sys.platform.startswith("linux"):
        try:
            with open("/proc/self/statm", encoding="ascii") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            return None
    try:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak) if sys.platform == "darwin" else int(peak) * 1024
    except (ImportError, OSError):
        return None


CUT_OFF = (
    "The answer was cut off at the reply length limit: raise “Longest reply” in "
    "File ▸ Settings… ▸ Model (model.max_tokens)."
)


class _EnterSends(QObject):
    """Enter sends, Shift+Enter inserts a new line."""

    def __init__(self, send: Any) -> None:
        super().__init__()
        self._send = send

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.KeyPress and isinstance(event, QKeyEvent):
            enter = event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter)
            if enter and not event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
                self._send()
                return True
        return False


class MainWindow(QMainWindow):
    """The assistant's window. All model work happens on the engine thread."""

    undone = Signal(object, str, bool)  # ToolCard, what happened, whether it was undone

    def __init__(
        self,
        app: App,
        *,
        model: str | None = None,
        replay: str | None = None,
        opener: Callable[[QUrl], bool] = QDesktopServices.openUrl,
    ) -> None:
        super().__init__()
        self.app = app
        self.opener = opener
        """Opens a document with the desktop's usual application for it (a card's Open)."""
        self.setWindowTitle("BotPsy")
        self.resize(1100, 760)
        self.conversation_id = ""
        self.busy = False
        self.model_details: dict[str, Any] = {}
        self.last_stats: TurnFinished | None = None
        self.open_dialogs: list[ApprovalDialog] = []
        self.model_dialog: ModelDialog | None = None
        self.hide_on_close = False  # set when a tray icon keeps the app running
        self.global_shortcut: GlobalShortcut | None = None  # set by main(): the quick box's key
        self.quitting = False
        self.engine_closed = False

        self.request_id = ""
        self.undo_threads: list[threading.Thread] = []
        self.engine = EngineThread(app)
        w = self.engine.worker
        w.modelLoaded.connect(self._on_model_loaded)
        w.modelFailed.connect(self._on_model_failed)
        w.requestStarted.connect(self._on_request_started)
        # bound methods of this GUI-thread object, so every signal is queued to the GUI thread
        w.thinking.connect(self._on_thinking)
        w.token.connect(self._on_token)
        w.toolStarted.connect(self._on_tool_started)
        w.toolResult.connect(self._on_tool_result)
        w.approvalNeeded.connect(self._on_approval)
        w.turnFinished.connect(self._on_turn_finished)
        w.answer.connect(self._on_answer)
        w.failed.connect(self._on_failed)
        w.contextTrimmed.connect(self._on_context_trimmed)
        w.requestFinished.connect(self._on_request_finished)
        w.queued.connect(self._on_queued)
        w.promptProgress.connect(self._on_prompt_progress)
        w.warmProgress.connect(self._on_warm_progress)
        w.streamed.connect(self._on_streamed)
        # the status bar's figures of each conversation's last reply (by conversation id)
        self.figures: dict[str, tuple[str, str]] = {}
        self.warming = ""  # what a warm-up prepares now, as the status bar says it

        # approvals that background runs wait for (the gate's inbox), counted live
        self.pending = PendingApprovals(app.gate.inbox, app.store.title, self)
        self.approvals_panel: ApprovalsPanel | None = None

        self._build()
        self.chat.undo_handler = self.undo_change
        self.chat.open_handler = self.open_document
        self.chat.sources_of = self.document_sources
        self.undone.connect(self._on_undone)
        self.pending.changed.connect(self._on_pending_changed)
        self._on_pending_changed(self.pending.count())
        self.refresh_conversations()
        local = "" if app.config.engine.url else app.config.model.path  # a server: its model
        self.engine.load(model or local or "", replay or "")
        self.memory_timer = QTimer(self)
        self.memory_timer.timeout.connect(self._update_memory)
        self.memory_timer.start(2000)
        self._update_memory()
        self.index_timer = QTimer(self)  # the documents index's progress, read from memory
        self.index_timer.timeout.connect(self._update_index)
        self.index_timer.start(1000)
        self._update_index()

    # -- layout -------------------------------------------------------------------------------
    def _build(self) -> None:
        left = QWidget()
        left.setObjectName("sidebar")
        lv = QVBoxLayout(left)
        self.new_button = QPushButton("+  New chat")
        self.new_button.setObjectName("newChat")
        self.new_button.clicked.connect(self.new_conversation)
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search conversations")
        self.search.setClearButtonEnabled(True)
        self.search.textChanged.connect(self.refresh_conversations)
        self.conversations = QListWidget()
        self.conversations.setObjectName("conversations")
        self.conversations.itemClicked.connect(self._on_pick)
        self.conversations.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.conversations.customContextMenuRequested.connect(self._conversation_menu)
        lv.addWidget(self.new_button)
        lv.addWidget(self.search)
        lv.addWidget(self.conversations, 1)

        right = QWidget()
        rv = QVBoxLayout(right)
        rv.setContentsMargins(0, 0, 0, 0)
        self.chat = ChatView()
        self.banner = QWidget()  # missed alarms at start: stays until dismissed
        self.banner.setObjectName("missedBanner")
        bv = QHBoxLayout(self.banner)
        self.banner_text = QLabel("")
        self.banner_text.setObjectName("missedText")
        self.banner_text.setWordWrap(True)
        self.banner_text.setTextFormat(Qt.TextFormat.PlainText)
        self.banner_close = QPushButton("&OK")
        self.banner_close.setToolTip("Hide this list")
        self.banner_close.clicked.connect(self.banner.hide)
        bv.addWidget(self.banner_text, 1)
        bv.addWidget(self.banner_close, 0, Qt.AlignmentFlag.AlignTop)
        self.banner.setVisible(False)
        rv.addWidget(self.banner)
        rv.addWidget(self.chat, 1)
        composer = QWidget()
        composer.setObjectName("composer")
        cv = QHBoxLayout(composer)
        self.input = QPlainTextEdit()
        self.input.setObjectName("input")
        self.input.setPlaceholderText("Ask BotPsy… (Enter sends, Shift+Enter for a new line)")
        self.input.setFixedHeight(72)
        self._enter = _EnterSends(self.send)
        self.input.installEventFilter(self._enter)
        side = QVBoxLayout()
        self.think = QCheckBox("Think")
        self.think.setToolTip("Let the model think before answering (slower, sometimes better)")
        self.think.setChecked(self.app.config.model.think)
        self.think.toggled.connect(self._on_think_toggled)  # kept per conversation
        self.send_button = QPushButton("Send")
        self.send_button.setObjectName("sendButton")
        self.send_button.clicked.connect(self.send)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setObjectName("stopButton")
        self.stop_button.clicked.connect(self.stop)
        self.stop_button.setVisible(False)
        self.voice = VoiceController(self.app, self)
        self.mic_button = MicButton(self.voice)
        self.mic_button.setVisible(self.app.config.voice.enabled)
        self.voice.listening.connect(
            lambda mic: self.statusBar().showMessage(
                f"Listening ({mic})… release, or click again, when you are done"
            )
        )
        self.voice.recognising.connect(lambda: self.statusBar().showMessage("Recognising…"))
        self.voice.partial.connect(self.input.setPlainText)
        self.voice.recognised.connect(self._on_spoken)
        self.voice.failed.connect(lambda _kind, message: self.statusBar().showMessage(message))
        self.replies = SpokenReplies(self.app, self)
        self.replies.failed.connect(lambda message: self.chat.add_note(message, kind="info"))
        side.addWidget(self.think)
        side.addWidget(self.mic_button)
        side.addWidget(self.send_button)
        side.addWidget(self.stop_button)
        cv.addWidget(self.input, 1)
        cv.addLayout(side)
        rv.addWidget(composer)

        split = QSplitter()
        split.addWidget(left)
        split.addWidget(right)
        split.setStretchFactor(1, 1)
        split.setSizes([260, 840])
        self.setCentralWidget(split)

        self.model_label = QLabel("Loading model…")
        self.context_label = QLabel("")
        self.speed_label = QLabel("")
        self.memory_label = QLabel("")
        self.model_label.setToolTip("The model and its quantization")
        self.context_label.setToolTip("Context used by the last reply: tokens of the model's n_ctx")
        self.speed_label.setToolTip("Last reply: time to first token and decoding speed")
        self.memory_label.setToolTip("Memory this app uses, model included")
        self.approvals_button = QToolButton()
        self.approvals_button.setObjectName("approvalsButton")
        self.approvals_button.setToolTip("Actions from background runs waiting for your approval")
        self.approvals_button.clicked.connect(self.show_approvals)
        self.statusBar().addPermanentWidget(self.approvals_button)
        self.index_label = QLabel("")
        self.index_label.setObjectName("indexProgress")
        self.index_label.setVisible(False)
        self.statusBar().addPermanentWidget(self.index_label)
        for label in (self.model_label, self.context_label, self.speed_label, self.memory_label):
            self.statusBar().addPermanentWidget(label)

        menu = self.menuBar().addMenu("&File")
        new = QAction("&New chat", self, shortcut=QKeySequence(QKeySequence.StandardKey.New))
        new.triggered.connect(self.new_conversation)
        open_model = QAction("&Open model file…", self, shortcut=QKeySequence("Ctrl+O"))
        open_model.triggered.connect(self.choose_model)
        get_model = QAction("&Get a model…", self)
        get_model.triggered.connect(self.get_model)
        settings = QAction("&Settings…", self, shortcut=QKeySequence("Ctrl+,"))
        settings.triggered.connect(self.open_settings)
        guide = QAction("First-run &guide…", self)
        guide.triggered.connect(self.first_run)
        self.menuBar().addMenu("&Help").addAction(guide)
        quit_action = QAction("&Quit", self, shortcut=QKeySequence(QKeySequence.StandardKey.Quit))
        quit_action.triggered.connect(self.quit)
        approvals = QAction("Pending &approvals…", self, shortcut=QKeySequence("Ctrl+Shift+A"))
        approvals.triggered.connect(self.show_approvals)
        for action in (new, get_model, open_model, settings, approvals, quit_action):
            menu.addAction(action)

    # -- documents ------------------------------------------------------------------------
    def _update_index(self) -> None:
        """The documents index's progress in the status bar: files done of total, paused and
        why, files it could not read (hidden until indexing has started)."""
        progress = self.app.indexing_progress()
        self.index_label.setVisible(progress is not None)
        if progress is not None:
            self.index_label.setText(progress.summary())
            self.index_label.setToolTip(
                f"The index of your documents: {progress.line()}. "
                "`botpsy index status` lists the files it could not read, and why."
            )

    def document_sources(self, tool: str, output: str) -> list[str]:
        """The documents a search_documents or read_document result names that Open may open:
        files inside the allowed folders (files.roots)."""
        roots = self.app.config.file_roots()
        return [s for s in named_documents(tool, output) if openable(s, roots) is not None]

    def open_document(self, shown: str) -> bool:
        """Open the document ``shown`` (as a result names it) with the desktop's usual
        application, only when it is a file inside the allowed folders; whether it was."""
        path = openable(shown, self.app.config.file_roots())
        if path is None:
            self.statusBar().showMessage(
                f"Not opened: {shown} is not a file in the folders the assistant may use.", 8000
            )
            return False
        if not self.opener(QUrl.fromLocalFile(str(path))):
            self.statusBar().showMessage(f"No application opened {shown}.", 8000)
            return False
        return True

    # -- conversations ------------------------------------------------------------------
    def refresh_conversations(self) -> None:
        if self.engine_closed:  # a run's last signal after shutdown: the store may be closed
            return
        query = self.search.text().strip()
        allowed = set(self.app.store.search(query)) if query else None
        self.conversations.clear()
        for info in self.app.store.conversations():
            if allowed is not None and info.id not in allowed:
                continue
            item = QListWidgetItem(info.title)
            item.setData(Qt.ItemDataRole.UserRole, info.id)
            item.setToolTip(f"{info.message_count} messages")
            self.conversations.addItem(item)
            if info.id == self.conversation_id:
                item.setSelected(True)

    def new_conversation(self) -> None:
        if self.busy:
            return
        self.conversation_id = ""
        self.chat.clear()
        self.conversations.clearSelection()
        self._restore_think()
        self._show_figures()
        self.input.setFocus()

    def open_conversation(self, conversation_id: str) -> None:
        if self.busy:
            return
        self.conversation_id = conversation_id
        self.chat.show_history(
            self.app.store.messages(conversation_id), self.app.store.tool_calls(conversation_id)
        )
        self._show_changes(conversation_id)
        self._restore_think()
        self._show_figures()
        self.refresh_conversations()  # the list marks the conversation shown

    def _show_changes(self, conversation_id: str, recent: int = 500) -> None:
        """On the cards of a reopened conversation: what its changes did, from the action log
        (the ``recent`` newest actions), with Undo where one can still be undone."""
        from botpsy_desktop.agent.audit import AuditLog

        cards = self.chat.cards
        for entry in reversed(AuditLog(self.app.store).entries(recent)):
            card = cards.get(str(entry.get("call_id")))
            if entry.get("conversation_id") != conversation_id or card is None:
                continue
            if not entry.get("ok") or entry.get("undoes") is not None:
                continue
            tool = self.app.registry.get(str(entry["tool"]))
            arguments = dict(entry.get("arguments") or {})
            summary = tool.summarize(arguments) if tool is not None else str(entry["tool"])
            inverse = entry.get("inverse")
            undo = ""
            if isinstance(inverse, dict):
                back = self.app.registry.get(str(inverse.get("tool")))
                undo = back.summarize(dict(inverse.get("arguments") or {})) if back else ""
            asked = not str(entry.get("approved_by") or "").startswith("ran at once")
            card.show_change(
                summary,
                asked=asked,
                undo=undo,
                action_id=int(entry["id"]),
                decided_by=str(entry.get("approved_by") or ""),
            )
            if entry.get("undone_by") is not None:
                card.show_undone("↶ Undone.", ok=True)

    def _restore_think(self) -> None:
        """The Think box as this conversation left it (a new one: ``model.think``)."""
        default = self.app.config.model.think
        think = default
        if self.conversation_id:
            think = bool(self.app.store.setting(self.conversation_id, "think", default))
        self.think.blockSignals(True)
        self.think.setChecked(think)
        self.think.blockSignals(False)

    def _on_think_toggled(self, checked: bool) -> None:
        if self.conversation_id and self.app.store.exists(self.conversation_id):
            self.app.store.set_setting(self.conversation_id, "think", bool(checked))

    # -- approvals from background runs ---------------------------------------------------
    def _on_pending_changed(self, count: int) -> None:
        self.approvals_button.setText(
            f"⚠ {count} approval{'s' if count != 1 else ''} waiting" if count else ""
        )
        self.approvals_button.setVisible(count > 0)

    def show_approvals(self) -> ApprovalsPanel:
        """The pending-approvals panel (one per window), raised and focused."""
        if self.approvals_panel is None:
            self.approvals_panel = ApprovalsPanel(self.pending, self)
        panel = self.approvals_panel
        panel.reload()
        panel.show()
        panel.raise_()
        panel.activateWindow()
        panel.list.setFocus()
        return panel

    def show_missed(self, text: str) -> None:
        """List alarms that rang while the app was closed, above the chat, until dismissed."""
        self.show_banner("Missed while BotPsy was closed:\n" + text)

    def show_banner(self, text: str) -> None:
        """Add ``text`` to the note above the chat (shown until dismissed)."""
        shown = "" if self.banner.isHidden() else self.banner_text.text()
        self.banner_text.setText(f"{shown}\n{text}" if shown else text)
        self.banner.setVisible(True)

    def _on_pick(self, item: QListWidgetItem) -> None:
        self.open_conversation(str(item.data(Qt.ItemDataRole.UserRole)))

    def _conversation_menu(self, pos: Any) -> None:
        item = self.conversations.itemAt(pos)
        if item is None:
            return
        conv = str(item.data(Qt.ItemDataRole.UserRole))
        menu = QMenu(self)
        rename = menu.addAction("Rename…")
        delete = menu.addAction("Delete")
        chosen = menu.exec(self.conversations.mapToGlobal(pos))
        if chosen is rename:
            title, ok = QInputDialog.getText(
                self, "Rename conversation", "Title:", text=item.text()
            )
            if ok:
                self.app.store.rename(conv, title)
        elif chosen is delete and not (self.busy and conv == self.conversation_id):
            answer = QMessageBox.question(
                self, "Delete conversation", f"Delete “{item.text()}” and all its messages?"
            )
            if answer == QMessageBox.StandardButton.Yes:
                self.app.store.delete(conv)
                if conv == self.conversation_id:
                    self.new_conversation()
        self.refresh_conversations()

    # -- requests -------------------------------------------------------------------------
    def send(self) -> None:
        text = self.input.toPlainText().strip()
        if not text or self.busy:
            return
        self.input.clear()
        self.chat.add_user(text)
        self._set_busy(True)
        self.request_id = self.engine.submit(self.conversation_id, text, self.think.isChecked())

    def _on_spoken(self, words: str) -> None:
        """Recognised words run as the person's own request, exactly as if typed."""
        self.statusBar().clearMessage()
        self.input.setPlainText(words)
        self.send()

    def stop(self) -> None:
        if self.request_id:
            self.engine.stop(self.request_id)
        for dialog in list(self.open_dialogs):
            dialog.deny()

    def _set_busy(self, busy: bool) -> None:
        self.busy = busy
        self.send_button.setVisible(not busy)
        self.stop_button.setVisible(busy)
        self.new_button.setEnabled(not busy)

    def _mine(self, request_id: str) -> bool:
        return bool(request_id) and request_id == self.request_id

    def _on_queued(self, request_id: str, ahead: int) -> None:
        if self._mine(request_id):
            self.statusBar().showMessage(f"queued ({ahead} ahead)")

    def _on_request_started(self, request_id: str, conversation_id: str) -> None:
        if not self._mine(request_id):
            return
        self.statusBar().clearMessage()
        if not self.conversation_id:
            self.conversation_id = conversation_id
            self._on_think_toggled(self.think.isChecked())  # a new conversation keeps its choice
            self.refresh_conversations()

    @Slot(str, str)
    def _on_thinking(self, request_id: str, text: str) -> None:
        if self._mine(request_id):
            self.chat.stream_thinking(text)

    @Slot(str, str)
    def _on_token(self, request_id: str, text: str) -> None:
        if self._mine(request_id):
            self.chat.stream_token(text)

    @Slot(str, str, str, dict)
    def _on_tool_started(
        self, request_id: str, call_id: str, name: str, arguments: dict[str, Any]
    ) -> None:
        if self._mine(request_id):
            self.chat.tool_started(call_id, name, arguments)

    def _on_tool_result(self, request_id: str, result: ToolResult) -> None:
        if not self._mine(request_id):
            return
        self.chat.tool_finished(
            result.call_id,
            result.name,
            result.arguments,
            result.ok,
            result.output,
            result.decision,
            result.duration_s,
            summary=result.summary,
            undo=result.undo,
            action_id=result.action_id,
            decided_by=result.decided_by,
        )

    # -- undo, through the gate ------------------------------------------------------------
    def undo_change(self, card: ToolCard, action_id: int) -> ApprovalDialog | None:
        """Undo the change ``card`` shows: the gate judges its inverse (App.plan_undo); one that
        asks (it sends something, deletes, or every change asks) opens the approval dialog with
        the inverse's receipt, and runs only if approved. Returns that dialog, if any."""
        try:
            plan = self.app.plan_undo(action_id)
        except BotpsyError as exc:
            card.show_undone(f"Not undone: {exc}", ok=False)
            return None
        request = plan.request
        if request is None:
            self._carry_out(card, plan)
            return None
        dialog = ApprovalDialog(request, self)
        dialog.setWindowTitle("Approve this undo?")
        self.open_dialogs.append(dialog)
        dialog.finished.connect(lambda _result: self._undo_decided(card, plan))
        dialog.open()
        return dialog

    def _undo_decided(self, card: ToolCard, plan: UndoPlan) -> None:
        self._forget_dialogs()
        if plan.request is not None and plan.request.approved:
            self._carry_out(card, plan)
        else:
            card.show_undone(f"Not undone: you did not approve this ({plan.summary}).", ok=False)

    def _carry_out(self, card: ToolCard, plan: UndoPlan) -> None:
        """Run the inverse off the GUI thread (it may reach a server); the outcome comes back
        through ``undone``."""

        def work() -> None:
            try:
                self.app.undo(plan)
            except BotpsyError as exc:
                self.undone.emit(card, f"Not undone: {exc}", False)
                return
            what = plan.undoes or plan.summary.strip().rstrip(".")
            self.undone.emit(card, f"↶ Undone: {what}.", True)

        thread = threading.Thread(target=work, name="botpsy-undo", daemon=True)
        self.undo_threads = [t for t in self.undo_threads if t.is_alive()] + [thread]
        thread.start()

    def _on_undone(self, card: ToolCard, text: str, ok: bool) -> None:
        with contextlib.suppress(RuntimeError):  # the card left the view meanwhile
            card.show_undone(text, ok=ok)

    def _on_approval(self, request_id: str, request: ApprovalRequest) -> None:
        if not self._mine(request_id):
            return
        card = self.chat.cards.get(request.call_id)
        if card is not None:
            card.set_status("waiting")
        dialog = ApprovalDialog(request, self)
        self.open_dialogs.append(dialog)
        dialog.finished.connect(self._forget_dialogs)
        dialog.open()

    def _forget_dialogs(self) -> None:
        self.open_dialogs = [d for d in self.open_dialogs if d.isVisible()]

    # -- the status bar: the figures of the conversation shown -----------------------------
    def _show_figures(self) -> None:
        """The context and speed of this conversation's last reply (a new one: none yet)."""
        context, speed = self.figures.get(self.conversation_id, ("", ""))
        n_ctx = self.model_details.get("n_ctx")
        if (
            not context
            and n_ctx
            and not str(self.model_details.get("name", "")).startswith("replay:")
        ):
            context = f"context 0/{n_ctx:,}"
        self.context_label.setText(context)
        self.speed_label.setText(speed)

    def _on_prompt_progress(self, request_id: str, progress: PromptProgress) -> None:
        if not self._mine(request_id):
            return
        self.chat.show_prompt_progress(progress_text(progress), progress.fraction)
        self.speed_label.setText(f"reading the request {progress.fraction:.0%}")

    def _on_warm_progress(self, progress: PromptProgress | None, what: str) -> None:
        """A warm-up (the prefix after a model is chosen, a conversation after a reply): said
        in the status bar while it runs; a request takes over from it at once."""
        if progress is None or progress.done >= progress.total:
            if self.warming:
                self.statusBar().clearMessage()
            self.warming = ""
            return
        self.warming = progress_text(progress, what)
        if not self.busy:
            self.statusBar().showMessage(self.warming)

    def _on_streamed(self, request_id: str, tokens: int, seconds: float) -> None:
        """While the reply streams: how much has come and how fast."""
        if self._mine(request_id) and tokens:
            rate = f" · {tokens / seconds:.1f} tok/s" if seconds > 0.2 else ""
            self.speed_label.setText(f"replying · {tokens:,} tokens{rate}")

    def _on_turn_finished(self, request_id: str, event: TurnFinished) -> None:
        if not self._mine(request_id):
            return  # another face's request (the quick box): not this conversation's figures
        self.last_stats = event
        st = event.stats
        n_ctx = self.model_details.get("n_ctx")
        used = st.prompt_tokens + st.completion_tokens
        context, speed = self.figures.get(self.conversation_id, ("", ""))
        if n_ctx and used:  # a replay counts no tokens
            context = f"context {used:,}/{n_ctx:,}"
        if st.completion_tokens:
            speed = (
                f"first token {st.time_to_first_token_s:.2f} s · {st.decode_tokens_per_s:.1f} tok/s"
            )
        if self.conversation_id:
            self.figures[self.conversation_id] = (context, speed)
        self.context_label.setText(context)
        self.speed_label.setText(speed)

    def _on_answer(self, request_id: str, answer: Answer) -> None:
        if not self._mine(request_id):
            return
        self.chat.finish_answer(answer.text)
        self.replies.answer(answer.text, answer.note)
        if answer.note:
            self.chat.add_note(answer.note, kind="warning")
        if not answer.text.strip():
            self.chat.add_note("The model gave an empty answer.", kind="info")
        if self.last_stats is not None and self.last_stats.finish_reason == "length":
            self.chat.add_note(CUT_OFF, kind="info")

    def _on_context_trimmed(self, request_id: str, message: str) -> None:
        if self._mine(request_id):
            self.chat.add_note(message, kind="info")

    def _on_failed(self, request_id: str, kind: str, message: str) -> None:
        if not self._mine(request_id):
            return
        self.chat.current = None
        self.chat.end_prompt_progress()
        if kind == "cancelled":
            self.chat.add_note("Stopped.", kind="info")
            kept = (
                message.removeprefix("Stopped.").strip() if message.startswith("Stopped.") else ""
            )
            if kept:  # what of the request was kept
                self.chat.add_note(kept, kind="info")
        else:
            self.chat.add_note(message)

    def _on_request_finished(self, request_id: str, conversation_id: str) -> None:
        if not self._mine(request_id):
            self.refresh_conversations()
            return
        self.request_id = ""
        self._set_busy(False)
        self.statusBar().clearMessage()
        self.chat.end_prompt_progress()
        self._show_figures()
        self.refresh_conversations()
        self.input.setFocus()

    # -- model ----------------------------------------------------------------------------
    def choose_model(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open a GGUF model", "", "GGUF models (*.gguf)")
        if path:
            self.model_label.setText("Loading model…")
            self.engine.load(path, "")

    def _on_model_loaded(self, name: str, details: dict[str, Any]) -> None:
        self.model_details = details
        if "quantization" in details:
            text = f"{details.get('model', name)} · {details['quantization']}"
        elif name.startswith("replay:"):  # the file's name; the whole path in the tooltip
            text = f"replay: {os.path.basename(name.removeprefix('replay:'))}"
        else:
            text = name
        self.model_label.setText(text)
        raw = details.get("metadata_name")
        self.model_label.setToolTip(
            f"The model and its quantization\n{name}"
            + (f"\n(named in its file: {raw})" if raw else "")
        )
        self.context_label.setText("")
        if details.get("n_ctx") and not name.startswith("replay:"):
            self.context_label.setText(f"context 0/{details['n_ctx']:,}")

    def get_model(self) -> ModelDialog:
        """Download BotPsy (progress, cancel, resume) or import a GGUF, then load it."""
        dialog = ModelDialog(self.app, self)
        dialog.modelReady.connect(self._on_model_ready)
        self.model_dialog = dialog
        dialog.open()
        return dialog

    def first_run(self) -> FirstRunWizard:
        """The guide: get the model, choose folders, add accounts, weather (Help menu too)."""
        wizard = FirstRunWizard(self.app, self)
        wizard.modelReady.connect(self._on_model_ready)
        wizard.accepted.connect(lambda: self.chat.add_note(wizard.note, kind="info"))
        self.model_dialog = wizard.model_dialog
        wizard.open()
        return wizard

    def open_settings(self) -> SettingsDialog:
        n_ctx = self.model_details.get("n_ctx")
        device = self.model_details.get("device")
        dialog = SettingsDialog(
            self.app,
            self,
            running_n_ctx=n_ctx if isinstance(n_ctx, int) else None,
            running_device=device if isinstance(device, dict) else None,
        )
        dialog.modelSettingsChanged.connect(self._reload_model)
        dialog.modelChosen.connect(self._on_model_ready)
        dialog.open()
        return dialog

    def _reload_model(self) -> None:
        remote = self.app.config.engine.url
        path = "" if remote else self.app.config.model.path or ""
        if (path or remote) and not self.busy:
            self.model_label.setText("Loading model…")
            self.engine.load(path, "")

    def _on_model_ready(self, path: str) -> None:
        self.model_label.setText("Loading model…")
        self.engine.load(path, "")

    def _on_model_failed(self, message: str) -> None:
        self.model_label.setText("No model")
        self.chat.add_note(
            f"{message}\nUse File ▸ Get a model… to choose a model on this computer, download "
            "BotPsy or import a GGUF file."
        )
        if self.engine_closed:  # the news came after shutdown: open no dialog (or thread) now
            return
        if not self.app.config.model.path and self.model_dialog is None:
            if needs_first_run(self.app.config):
                self.first_run()  # first run: the guide, which starts with getting the model
            else:
                self.get_model()  # no model yet: offer the download right away

    def _update_memory(self) -> None:
        rss = rss_bytes()
        if rss is not None:
            self.memory_label.setText(f"memory {rss / 2**20:,.0f} MiB")

    def closeEvent(self, event: Any) -> None:
        if self.hide_on_close and not self.quitting:
            # the app lives on in the tray; Quit from the tray menu ends it
            event.ignore()
            self.hide()
            return
        self.shutdown()
        super().closeEvent(event)

    def quit(self) -> None:
        self.quitting = True
        self.close()
        app = QApplication.instance()
        if app is not None:
            app.quit()

    def shutdown(self) -> None:
        """Stop the running request and the engine thread (idempotent)."""
        if self.engine_closed:
            return
        self.engine_closed = True
        if self.model_dialog is not None:
            self.model_dialog.shutdown()
        self.memory_timer.stop()
        self.pending.close()
        self.voice.shutdown()
        self.stop()
        for thread in self.undo_threads:  # an undo in progress finishes (and is logged)
            thread.join(5)
        self.engine.close()
