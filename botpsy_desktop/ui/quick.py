"""The quick-command box: a small frameless popup that answers in place."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication, QKeyEvent
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QLineEdit, QVBoxLayout, QWidget

from botpsy_desktop.agent.events import (
    Answer,
    ApprovalRequest,
    ToolResult,
    outcome_line,
    progress_text,
)
from botpsy_desktop.agent.scheduler import Priority
from botpsy_desktop.agent.store import ConversationStore
from botpsy_desktop.llm.types import PromptProgress
from botpsy_desktop.ui.approval import ApprovalDialog
from botpsy_desktop.ui.bridge import EngineThread
from botpsy_desktop.ui.voice import MicButton, SpokenReplies, VoiceController

PLACEHOLDER = "Quick command — “timer 10 minutes”, “weather tomorrow”, “play some jazz”"
QUICK_TITLE = "Quick commands"
REUSE_S = 8 * 3600
"""Quick commands go on in one conversation while its last one is younger than this."""


def quick_conversation(store: ConversationStore, now: float | None = None) -> tuple[str, str]:
    """The conversation quick commands go to, and its title: the recent "Quick commands" one
    (so the sidebar does not fill with one conversation per command), or a new one, dated."""
    now = time.time() if now is None else now
    recent = [
        info
        for info in store.conversations()
        if store.setting(info.id, "quick", False) and now - info.updated_at < REUSE_S
    ]
    if recent:
        newest = max(recent, key=lambda info: info.updated_at)
        return newest.id, newest.title
    title = f"{QUICK_TITLE} · {datetime.fromtimestamp(now):%a %d %b}"
    conversation = store.create(title)
    store.set_setting(conversation, "quick", True)
    return conversation, title


class QuickCommandBox(QFrame):
    """One line in, the answer underneath. Enter runs, Esc hides (and stops a running request).

    Under the answer: what was carried out, not approved, failed or not run (one line each),
    and a note when the answer describes an action no tool carried out. While the model reads
    the request (or prepares itself after a model was chosen) the status line says how far.
    Commands go on in one "Quick commands" conversation (see :func:`quick_conversation`), so
    the window's list shows them without one entry per command.
    """

    def __init__(self, engine: EngineThread, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.engine = engine
        self.setObjectName("quickBox")
        self.setWindowFlags(
            Qt.WindowType.Tool
            | Qt.WindowType.FramelessWindowHint
            | Qt.WindowType.WindowStaysOnTopHint
        )
        self.setMinimumWidth(560)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(14, 12, 14, 12)
        self.line = QLineEdit()
        self.line.setObjectName("quickLine")
        self.line.setPlaceholderText(PLACEHOLDER)
        self.line.returnPressed.connect(self.run)
        self.status = QLabel("")
        self.status.setObjectName("quickStatus")
        self.status.setVisible(False)
        self.answer = QLabel("")
        self.answer.setObjectName("quickAnswer")
        self.answer.setWordWrap(True)
        self.answer.setTextFormat(Qt.TextFormat.MarkdownText)
        self.answer.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.answer.setVisible(False)
        self.outcomes = QLabel("")
        self.outcomes.setObjectName("quickOutcomes")
        self.outcomes.setWordWrap(True)
        self.outcomes.setTextFormat(Qt.TextFormat.PlainText)
        self.outcomes.setVisible(False)
        self.note = QLabel("")
        self.note.setObjectName("quickNote")
        self.note.setWordWrap(True)
        self.note.setTextFormat(Qt.TextFormat.PlainText)
        self.note.setVisible(False)
        row = QHBoxLayout()
        row.addWidget(self.line, 1)
        self.voice = VoiceController(engine.worker.app, self)
        self.mic = MicButton(self.voice)
        self.mic.setVisible(engine.worker.app.config.voice.enabled)
        row.addWidget(self.mic)
        layout.addLayout(row)
        layout.addWidget(self.status)
        layout.addWidget(self.answer)
        layout.addWidget(self.outcomes)
        layout.addWidget(self.note)
        self.request_id = ""
        self.results: list[ToolResult] = []
        self.warming = ""
        self.dialogs: list[ApprovalDialog] = []
        self._text = ""
        self.voice.listening.connect(self._on_listening)
        self.voice.recognising.connect(lambda: self._say("Recognising…"))
        self.voice.partial.connect(self.line.setText)
        self.voice.recognised.connect(self._on_recognised)
        self.voice.failed.connect(self._on_voice_failed)
        self.replies = SpokenReplies(engine.worker.app, self)
        self.replies.failed.connect(self._on_reply_failed)
        w = engine.worker
        w.queued.connect(self._on_queued)
        w.requestStarted.connect(self._on_started)
        w.token.connect(self._on_token)
        w.toolStarted.connect(self._on_tool_started)
        w.toolResult.connect(self._on_tool_result)
        w.approvalNeeded.connect(self._on_approval)
        w.answer.connect(self._on_answer)
        w.failed.connect(self._on_failed)
        w.requestFinished.connect(self._on_finished)
        w.promptProgress.connect(self._on_prompt_progress)
        w.warmProgress.connect(self._on_warm_progress)

    # -- showing -------------------------------------------------------------------------------
    def popup(self) -> None:
        screen = QGuiApplication.primaryScreen()
        if screen is not None:
            geo = screen.availableGeometry()
            self.adjustSize()
            self.move(geo.center().x() - self.width() // 2, geo.top() + geo.height() // 4)
        self.show()
        self.raise_()
        self.activateWindow()
        self.line.setFocus()
        self.line.selectAll()

    def shortcut_popup(self) -> None:
        """The global shortcut (or `botpsy-desktop --quick`): the box, listening at once when
        voice.listen_on_shortcut is on; pressed again while listening, it ends the recording
        (desktops deliver no key release for a global shortcut, so there is no holding it)."""
        voice = self.engine.worker.app.config.voice
        if voice.enabled and voice.listen_on_shortcut:
            if self.voice.active:
                self.voice.stop()
                return
            self.popup()
            if not self.request_id:
                self.voice.start()
            return
        self.popup()

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() == Qt.Key.Key_Escape:
            self.voice.cancel()
            if self.request_id:
                self.engine.stop(self.request_id)
            self.hide()
            return
        super().keyPressEvent(event)

    # -- speaking --------------------------------------------------------------------------
    def _on_listening(self, microphone: str) -> None:
        self.line.clear()
        self._say(f"Listening ({microphone})… release, or click again, when you are done")

    def _on_recognised(self, words: str) -> None:
        """The words are the person's own request: they run exactly as if typed."""
        self._say("")
        self.line.setText(words)
        self.run()

    def _on_voice_failed(self, _kind: str, message: str) -> None:
        self._say("")
        self.answer.setTextFormat(Qt.TextFormat.PlainText)
        self.answer.setText(message)
        self.answer.setVisible(True)
        self.adjustSize()

    # -- running ---------------------------------------------------------------------------
    def run(self) -> None:
        if self.voice.active:  # Enter while listening: the recording ends, its words run
            self.voice.stop()
            return
        text = self.line.text().strip()
        if not text or self.request_id:
            return
        self._text = ""
        self.answer.setTextFormat(Qt.TextFormat.MarkdownText)
        self.answer.setText("")
        self.answer.setVisible(False)
        self.results = []
        self._show_outcomes()
        self.note.setVisible(False)
        self._say("Working…")
        conversation, title = quick_conversation(self.engine.worker.app.store)
        self.request_id = self.engine.submit(conversation, text, False, Priority.QUICK, title=title)

    def _say(self, text: str) -> None:
        """The status line (queued, reading the request, working…), hidden when empty."""
        self.status.setText(text)
        self.status.setVisible(bool(text))
        self.adjustSize()

    def _mine(self, request_id: str) -> bool:
        return bool(request_id) and request_id == self.request_id

    def _on_queued(self, request_id: str, ahead: int) -> None:
        if self._mine(request_id):
            self._say(f"Queued ({ahead} ahead)…")

    def _on_started(self, request_id: str, _conversation: str) -> None:
        if self._mine(request_id):
            self._say("Working…")

    def _on_token(self, request_id: str, text: str) -> None:
        if self._mine(request_id):
            self._text += text
            self.answer.setText(self._text)
            self.answer.setVisible(True)
            self.adjustSize()

    def _on_tool_started(
        self, request_id: str, _call: str, name: str, _args: dict[str, Any]
    ) -> None:
        if self._mine(request_id):
            self._say(f"⚙ {name}…")

    def _on_tool_result(self, request_id: str, result: ToolResult) -> None:
        if self._mine(request_id):
            self.results.append(result)
            self._show_outcomes()
            self._say("Working…")

    def _show_outcomes(self) -> None:
        self.outcomes.setText("\n".join(outcome_line(r) for r in self.results))
        self.outcomes.setVisible(bool(self.results))
        self.adjustSize()

    def _on_prompt_progress(self, request_id: str, progress: PromptProgress) -> None:
        if self._mine(request_id):
            self._say(progress_text(progress))

    def _on_warm_progress(self, progress: PromptProgress | None, what: str) -> None:
        """The model prepares itself (after it was chosen): said while no command runs."""
        if self.request_id:
            return
        if progress is None or progress.done >= progress.total:
            if self.warming:
                self._say("")
            self.warming = ""
            return
        self.warming = progress_text(progress, what)
        self._say(self.warming)

    def _on_approval(self, request_id: str, request: ApprovalRequest) -> None:
        if not self._mine(request_id):
            return
        self._say(f"Waiting for your approval of {request.tool}…")
        dialog = ApprovalDialog(request, self)
        self.dialogs.append(dialog)
        dialog.open()

    def _on_answer(self, request_id: str, answer: Answer) -> None:
        if self._mine(request_id):
            self._text = answer.text
            self.answer.setText(answer.text or "(no answer)")
            self.answer.setVisible(True)
            self.note.setText(answer.note)
            self.note.setVisible(bool(answer.note))
            self.adjustSize()
            self.replies.answer(answer.text, answer.note)

    def _on_reply_failed(self, message: str) -> None:
        """The answer could not be read aloud: said under it (the answer stays)."""
        shown = self.note.text() if self.note.isVisible() else ""
        self.note.setText(f"{shown}\n{message}" if shown else message)
        self.note.setVisible(True)
        self.adjustSize()

    def _on_failed(self, request_id: str, kind: str, message: str) -> None:
        if self._mine(request_id):
            self.answer.setText(message)
            self.answer.setVisible(True)
            self.adjustSize()

    def _on_finished(self, request_id: str, _conversation: str) -> None:
        if self._mine(request_id):
            self.request_id = ""
            self._say("")
            for dialog in self.dialogs:
                if not dialog.request.decided:
                    dialog.deny()
            self.dialogs.clear()
