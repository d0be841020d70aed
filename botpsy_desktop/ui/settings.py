"""The settings dialog: model, folders, weather, music, accounts, tool servers, approvals, look."""

from __future__ import annotations

import os
from typing import Any

from pydantic import ValidationError
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QPushButton,
    QSpinBox,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from botpsy_desktop.app import App
from botpsy_desktop.core import autostart
from botpsy_desktop.core.config import Config, engine_origin, plain_http_problem
from botpsy_desktop.core.errors import BotpsyError
from botpsy_desktop.core.secrets import engine_entry
from botpsy_desktop.llm.models import gpu_device
from botpsy_desktop.speech import tts
from botpsy_desktop.ui.accounts import AccountsPanel
from botpsy_desktop.ui.style import style_for
from botpsy_desktop.ui.tool_servers import ToolServersPanel


def context_note(configured: int, running: int | None) -> str:
    """What the context setting means for the model that runs now ("" when they agree)."""
    if running is None or running == configured:
        return ""
    if running < configured:
        return (
            f"The model in use runs at {running:,} tokens: its file allows no more than that, "
            "so a larger setting has no effect with it."
        )
    return f"The model in use runs at {running:,} tokens until it is loaded again."


def system_is_dark() -> bool:
    hints = QGuiApplication.styleHints()
    return bool(hints.colorScheme() == Qt.ColorScheme.Dark)


class FolderList(QWidget):
    """A list of folders with Add… and Remove."""

    def __init__(self, folders: list[str], title: str) -> None:
        super().__init__()
        self.title = title
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.list = QListWidget()
        self.list.addItems(folders)
        row = QHBoxLayout()
        add = QPushButton("Add…")
        remove = QPushButton("Remove")
        add.clicked.connect(self._add)
        remove.clicked.connect(self._remove)
        row.addWidget(add)
        row.addWidget(remove)
        row.addStretch(1)
        layout.addWidget(self.list)
        layout.addLayout(row)

    def _add(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, self.title, os.path.expanduser("~"))
        if folder:
            self.add(folder)

    def add(self, folder: str) -> None:
        if folder not in self.folders():
            self.list.addItem(folder)

    def _remove(self) -> None:
        for item in self.list.selectedItems():
            self.list.takeItem(self.list.row(item))

    def folders(self) -> list[str]:
        return [self.list.item(i).text() for i in range(self.list.count())]


class SettingsDialog(QDialog):
    """Edits a copy of the config; Save validates it, writes config.json and says what applies.

    Model settings reload the model at once (``modelSettingsChanged``); folders, weather and
    music take effect at the next start, as the dialog says; approval preferences apply to the
    next request. Accounts are changed at once by their own tab (passwords to the keyring).
    """

    modelSettingsChanged = Signal()
    modelChosen = Signal(str)  # an installed model was made the active one: load it

    def __init__(
        self,
        app: App,
        parent: QWidget | None = None,
        *,
        running_n_ctx: int | None = None,
        running_device: dict[str, Any] | None = None,
    ) -> None:
        """``running_n_ctx``: the context the loaded model actually runs at (the window's);
        ``running_device``: where it runs (gpu_device.Placement.describe())."""
        super().__init__(parent)
        self.app = app
        self.setObjectName("settingsDialog")
        self.setWindowTitle("Settings")
        self.setMinimumWidth(560)
        c = app.config
        tabs = self.tabs = QTabWidget()

        model = QWidget()
        mf = QFormLayout(model)
        self.model_path = QLabel(c.model.path or "none yet (File ▸ Get a model…)")
        self.model_path.setWordWrap(True)
        self.model_path.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.n_ctx = QSpinBox()
        self.n_ctx.setRange(256, 262144)
        self.n_ctx.setSingleStep(1024)
        self.n_ctx.setValue(c.model.n_ctx)
        self.n_ctx_note = QLabel(context_note(c.model.n_ctx, running_n_ctx))
        self.n_ctx_note.setObjectName("contextNote")
        self.n_ctx_note.setWordWrap(True)
        self.n_ctx_note.setVisible(bool(self.n_ctx_note.text()))
        self.max_tokens = QSpinBox()
        self.max_tokens.setRange(16, 32768)
        self.max_tokens.setSingleStep(256)
        self.max_tokens.setValue(c.model.max_tokens)
        self.max_tokens.setToolTip(
            "Most tokens the model writes in one reply (model.max_tokens); a longer answer is "
            "cut off"
        )
        cores = os.cpu_count() or 1
        self.n_threads = QSpinBox()
        self.n_threads.setRange(0, cores)
        self.n_threads.setSpecialValueText("automatic")
        self.n_threads.setValue(c.model.n_threads or 0)
        self.n_threads_batch = QSpinBox()
        self.n_threads_batch.setRange(0, cores)
        self.n_threads_batch.setSpecialValueText("automatic")
        self.n_threads_batch.setValue(c.model.n_threads_batch or 0)
        self.n_gpu_layers = QSpinBox()
        self.n_gpu_layers.setRange(-1, 999)
        self.n_gpu_layers.setSpecialValueText("all")
        self.n_gpu_layers.setValue(c.model.n_gpu_layers)
        self.n_gpu_layers.setToolTip(
            "Most layers offloaded to the GPU (model.n_gpu_layers): all that fit its free "
            "memory, or fewer; 0 keeps the model on the CPU"
        )
        self.device = QComboBox()
        self.device.addItems(list(gpu_device.DEVICES))
        self.device.setCurrentText(c.model.device)
        self.device.setToolTip(
            "Where the model runs (model.device): auto uses a GPU through llama.cpp's Vulkan "
            "backend when it is installed and a GPU has room, else the CPU"
        )
        self.device_note = QLabel(
            "Now: " + gpu_device.describe_device(running_device) if running_device else ""
        )
        self.device_note.setObjectName("deviceNote")
        self.device_note.setWordWrap(True)
        self.device_note.setVisible(bool(running_device))
        self.temperature = QDoubleSpinBox()
        self.temperature.setRange(0.0, 2.0)
        self.temperature.setSingleStep(0.1)
        self.temperature.setValue(c.model.temperature)
        self.think = QCheckBox("Let the model think before answering by default")
        self.think.setChecked(c.model.think)
        from botpsy_desktop.ui.installed import InstalledModels

        self.installed = InstalledModels(app)
        self.installed.modelChosen.connect(self._on_model_chosen)
        self.installed.modelRemoved.connect(lambda: self.model_path.setText("none"))
        mf.addRow("Model file:", self.model_path)
        mf.addRow("Installed:", self.installed)
        mf.addRow("Context (tokens):", self.n_ctx)
        mf.addRow("", self.n_ctx_note)
        mf.addRow("Longest reply (tokens):", self.max_tokens)
        mf.addRow("Decode threads:", self.n_threads)
        mf.addRow("Prompt threads:", self.n_threads_batch)
        mf.addRow("Device:", self.device)
        mf.addRow("", self.device_note)
        mf.addRow("GPU layers:", self.n_gpu_layers)
        mf.addRow("Temperature:", self.temperature)
        mf.addRow("", self.think)
        self.engine_kind = QComboBox()
        self.engine_kind.addItems(["This computer", "A llama-server"])
        self.engine_kind.setCurrentIndex(1 if c.engine.url else 0)
        self.engine_url = QLineEdit(c.engine.url or "")
        self.engine_url.setPlaceholderText("https://gpu-box:8080 or http://127.0.0.1:8080")
        self.engine_key = QLineEdit()
        self.engine_key.setEchoMode(QLineEdit.EchoMode.Password)
        self.engine_key.setPlaceholderText("unchanged (kept in the OS keyring); empty: none")
        self.engine_plain_http = QCheckBox(
            "Allow plain http:// to another computer: prompts (mail, calendar and file "
            "contents) and the API key would travel unencrypted"
        )
        self.engine_plain_http.setChecked(c.engine.allow_plain_http)
        engine_note = QLabel(
            "Only the prompt travels to the server; tools, approvals, files and passwords "
            "stay on this computer."
        )
        engine_note.setWordWrap(True)
        self.engine_kind.currentIndexChanged.connect(self._engine_kind_changed)
        mf.addRow("Runs on:", self.engine_kind)
        mf.addRow("Server address:", self.engine_url)
        mf.addRow("API key:", self.engine_key)
        mf.addRow("", self.engine_plain_http)
        mf.addRow("", engine_note)
        self._engine_kind_changed()
        tabs.addTab(model, "Model")

        folders = QWidget()
        fl = QVBoxLayout(folders)
        fl.addWidget(
            QLabel("Folders the assistant may use (nothing outside them is read or changed):")
        )
        self.roots = FolderList(list(c.files.roots), "Add a folder the assistant may use")
        fl.addWidget(self.roots)
        tabs.addTab(folders, "Folders")

        more = QWidget()
        wf = QFormLayout(more)
        self.location = QLineEdit(c.weather.default_location or "")
        self.location.setPlaceholderText("e.g. Lyon, France")
        self.units = QComboBox()
        self.units.addItems(["auto", "metric", "imperial"])
        self.units.setCurrentText(c.weather.units)
        self.music = FolderList(list(c.music.folders), "Add a music folder")
        wf.addRow("Weather location:", self.location)
        wf.addRow("Units:", self.units)
        wf.addRow("Music folders:", self.music)
        tabs.addTab(more, "Weather && music")

        voice = QWidget()
        vf = QFormLayout(voice)
        self.microphone = QComboBox()
        self.microphone.setObjectName("microphone")
        self.microphone.addItem("The system's default", None)
        self.microphone_note = QLabel("")
        self.microphone_note.setWordWrap(True)
        try:  # the sound server is local: asking it is quick
            mics = app.voice().microphones()
        except BotpsyError as exc:
            mics = []
            self.microphone_note.setText(str(exc))
        for mic in mics:
            self.microphone.addItem(mic.name, mic.id)
        if c.voice.microphone and self.microphone.findData(c.voice.microphone) < 0:
            self.microphone.addItem(f"{c.voice.microphone} (not connected)", c.voice.microphone)
        self.microphone.setCurrentIndex(max(0, self.microphone.findData(c.voice.microphone)))
        self.speech_engine = QComboBox()
        self.speech_engine.setObjectName("speechEngine")
        self.speech_engine.addItem("whisper.cpp (a Whisper model: many languages)", "whisper.cpp")
        self.speech_engine.addItem(
            "PocketSphinx (US English only, built in, less accurate)", "pocketsphinx"
        )
        if c.voice.engine == "replay":
            self.speech_engine.addItem("replay (tests and demos: not speech recognition)", "replay")
        self.speech_engine.setCurrentIndex(max(0, self.speech_engine.findData(c.voice.engine)))
        self.speech_model = QComboBox()
        for st in app.voice().models.states():
            shown = st.entry.name + ("" if st.present else " — not installed")
            self.speech_model.addItem(shown, st.entry.id)
        self.speech_model.setCurrentIndex(max(0, self.speech_model.findData(c.voice.model)))
        self.speech_language = QLineEdit(c.voice.language)
        self.speech_language.setPlaceholderText('"auto", or a code such as en, de, es, fr')
        self.keep_audio = QCheckBox("Keep each recording as a WAV file (off: never kept)")
        self.keep_audio.setChecked(c.voice.keep_audio)
        self.listen_on_shortcut = QCheckBox(
            "The quick-command key opens the box listening (Enter, or the key again, sends)"
        )
        self.listen_on_shortcut.setChecked(c.voice.listen_on_shortcut)
        self.speak_replies = QCheckBox("Read answers aloud (espeak-ng; off by default)")
        self.speak_replies.setObjectName("speakReplies")
        self.speak_replies.setChecked(c.voice.speak_replies)
        self.reply_voice = QLineEdit(c.voice.reply_voice)
        self.reply_voice.setObjectName("replyVoice")
        self.reply_voice.setPlaceholderText("en-us, de, es, fr… (`espeak-ng --voices` lists them)")
        self.speaker = QComboBox()
        self.speaker.setObjectName("speaker")
        self.speaker.addItem("The system's default", None)
        self.speaker_note = QLabel("")
        self.speaker_note.setWordWrap(True)
        problems = []
        try:
            tts.engine_path()
        except BotpsyError as exc:
            problems.append(str(exc))
        try:  # the sound server is local: asking it is quick
            outputs = tts.loudspeakers(app.config.device.pulse_server)
        except BotpsyError as exc:
            outputs = []
            problems.append(str(exc))
        self.speaker_note.setText("\n".join(problems))
        for out in outputs:
            self.speaker.addItem(out.name, out.id)
        if c.voice.speaker and self.speaker.findData(c.voice.speaker) < 0:
            self.speaker.addItem(f"{c.voice.speaker} (not connected)", c.voice.speaker)
        self.speaker.setCurrentIndex(max(0, self.speaker.findData(c.voice.speaker)))
        languages = QLabel(
            "Whisper models understand many languages (set one, or auto-detect); accuracy "
            "differs between them. A model is downloaded only when you ask: "
            "`botpsy model pull whisper-base`."
        )
        languages.setWordWrap(True)
        vf.addRow("Microphone:", self.microphone)
        vf.addRow("", self.microphone_note)
        vf.addRow("Speech engine:", self.speech_engine)
        vf.addRow("Speech model:", self.speech_model)
        vf.addRow("Language:", self.speech_language)
        vf.addRow("", self.keep_audio)
        vf.addRow("", self.listen_on_shortcut)
        vf.addRow("", languages)
        vf.addRow("", self.speak_replies)
        vf.addRow("Reply voice:", self.reply_voice)
        vf.addRow("Loudspeaker:", self.speaker)
        vf.addRow("", self.speaker_note)
        tabs.addTab(voice, "Voice")

        self.accounts = AccountsPanel(app)
        tabs.addTab(self.accounts, "Accounts")
        self.tool_servers: ToolServersPanel | None = None
        if app.tool_servers is not None:
            self.tool_servers = ToolServersPanel(app)
            tabs.addTab(self.tool_servers, "Tool servers")

        approvals = QWidget()
        av = QVBoxLayout(approvals)

        def note(text: str) -> QLabel:
            label = QLabel(text)
            label.setWordWrap(True)
            return label

        self.ask_every_change = QCheckBox("Ask before every change")
        self.ask_every_change.setObjectName("askBeforeEveryChange")
        self.ask_every_change.setChecked(c.agent.ask_before_every_change)
        self.allow_for_conversation = QCheckBox(
            "Offer “Allow for this conversation” for changes on this computer"
        )
        self.allow_for_conversation.setObjectName("allowForConversation")
        self.allow_for_conversation.setChecked(c.agent.allow_for_conversation)
        self.background_wait = QSpinBox()
        self.background_wait.setObjectName("backgroundWait")
        self.background_wait.setRange(0, 7 * 24 * 60)
        self.background_wait.setSuffix(" min")
        self.background_wait.setSpecialValueText("until I decide")
        timeout = c.agent.background_approval_timeout_s
        self.background_wait.setValue(0 if timeout is None else max(1, round(timeout / 60)))
        always = note(
            "<b>Always asked, every time, whatever is set here:</b> sending anything off this "
            "computer (mail, invitations, replies, uploads, web requests), anything involving "
            "money or your personal data leaving, deleting, cancelling or bulk changes (moving "
            "mail to Trash or Junk, “all”), scheduling routines, and these settings. Each such "
            "request says in plain words what will happen, and Deny is the default. Looking "
            "things up never asks, unless it would send text you are not typing in that "
            "request to an online service after content you did not type was read."
        )
        always.setObjectName("alwaysAsk")
        av.addWidget(self.ask_every_change)
        av.addWidget(
            note(
                "Off (the default): small changes you ask for that can be undone (a timer, an "
                "alarm, a note, a task, a folder, pausing the music) run at once, and their card "
                "in the chat offers Undo. On: every change asks first. Once a conversation "
                "has read content you did not type (a file, a mail, a web answer), a change "
                "runs at once only when you typed it, with all its values, in the request; "
                "any other change asks."
            )
        )
        av.addWidget(self.allow_for_conversation)
        av.addWidget(
            note(
                "A change that asks can then be allowed for the rest of a conversation, for "
                "exactly what the dialog says it covers (the same alarm, file or list; else the "
                "same call). Always-asked actions are never allowed so."
            )
        )
        wait_row = QFormLayout()
        wait_row.addRow("Requests from background runs wait:", self.background_wait)
        av.addLayout(wait_row)
        av.addWidget(
            note(
                "Background runs are routines and scheduled tasks. Their requests wait in "
                "Pending approvals without holding up your own chat; when the time is up, the "
                "run gives up and says so. Nothing is ever approved on its own."
            )
        )
        av.addWidget(always)
        av.addStretch(1)
        tabs.addTab(approvals, "Approvals")

        look = QWidget()
        lf = QFormLayout(look)
        self.theme = QComboBox()
        self.theme.addItems(["system", "light", "dark"])
        self.theme.setCurrentText(c.ui.theme)
        self.close_to_tray = QCheckBox("Closing the window keeps BotPsy in the tray")
        self.close_to_tray.setChecked(c.ui.close_to_tray)
        self.autostart = QCheckBox("Start BotPsy (in the tray) when I log in")
        self.autostart.setChecked(autostart.is_enabled())
        self.quick_shortcut = QLineEdit(c.ui.quick_shortcut)
        self.quick_shortcut.setPlaceholderText("none")
        self.quick_shortcut.setToolTip(
            "Opens the quick-command box from any program, e.g. Ctrl+Alt+Space; empty: none"
        )
        shortcut = getattr(parent, "global_shortcut", None)
        self.shortcut_note = QLabel(
            shortcut.note()
            if shortcut is not None
            else "Bind the command `botpsy-desktop --quick` to a key in the system's keyboard "
            "settings."
        )
        self.shortcut_note.setWordWrap(True)
        if shortcut is not None:  # the desktop may answer later (it asked the person)
            shortcut.changed.connect(self._shortcut_changed)
        lf.addRow("Appearance:", self.theme)
        lf.addRow("", self.close_to_tray)
        lf.addRow("", self.autostart)
        lf.addRow("Quick command key:", self.quick_shortcut)
        lf.addRow("", self.shortcut_note)
        tabs.addTab(look, "Appearance")

        self.error = QLabel("")
        self.error.setObjectName("settingsError")
        self.error.setWordWrap(True)
        self.note = QLabel("")
        self.note.setWordWrap(True)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.accepted.connect(self.save)
        buttons.rejected.connect(self.reject)
        self.save_button = buttons.button(QDialogButtonBox.StandardButton.Save)
        layout = QVBoxLayout(self)
        layout.addWidget(tabs)
        layout.addWidget(self.error)
        layout.addWidget(self.note)
        layout.addWidget(buttons)

    def _shortcut_changed(self) -> None:
        shortcut = getattr(self.parent(), "global_shortcut", None)
        if shortcut is not None:
            self.shortcut_note.setText(shortcut.note())

    def _engine_kind_changed(self) -> None:
        remote = self.engine_kind.currentIndex() == 1
        for widget in (self.engine_url, self.engine_key, self.engine_plain_http):
            widget.setEnabled(remote)

    def _on_model_chosen(self, path: str) -> None:
        self.model_path.setText(path)
        self.modelChosen.emit(path)

    def edited(self) -> dict[str, Any]:
        data = self.app.config.model_dump()
        m = data["model"]
        m.update(
            n_ctx=self.n_ctx.value(),
            max_tokens=self.max_tokens.value(),
            n_threads=self.n_threads.value() or None,
            n_threads_batch=self.n_threads_batch.value() or None,
            n_gpu_layers=self.n_gpu_layers.value(),
            device=self.device.currentText(),
            temperature=round(self.temperature.value(), 2),
            think=self.think.isChecked(),
        )
        data["engine"].update(
            url=self.engine_url.text().strip() or None
            if self.engine_kind.currentIndex() == 1
            else None,
            allow_plain_http=self.engine_plain_http.isChecked(),
        )
        data["files"]["roots"] = self.roots.folders()
        data["weather"].update(
            default_location=self.location.text().strip() or None, units=self.units.currentText()
        )
        data["music"]["folders"] = self.music.folders()
        data["voice"].update(
            engine=self.speech_engine.currentData() or data["voice"]["engine"],
            microphone=self.microphone.currentData(),
            model=self.speech_model.currentData() or data["voice"]["model"],
            language=self.speech_language.text().strip().lower() or "auto",
            keep_audio=self.keep_audio.isChecked(),
            listen_on_shortcut=self.listen_on_shortcut.isChecked(),
            speak_replies=self.speak_replies.isChecked(),
            reply_voice=self.reply_voice.text().strip() or "en-us",
            speaker=self.speaker.currentData(),
        )
        wait = self.background_wait.value()
        data["agent"].update(
            allow_for_conversation=self.allow_for_conversation.isChecked(),
            ask_before_every_change=self.ask_every_change.isChecked(),
            background_approval_timeout_s=float(wait * 60) if wait else None,
        )
        data["ui"].update(
            theme=self.theme.currentText(),
            close_to_tray=self.close_to_tray.isChecked(),
            quick_shortcut=self.quick_shortcut.text().strip(),
        )
        return data

    def save(self) -> None:
        data = self.edited()
        if not data["files"]["roots"]:
            self.error.setText("Keep at least one folder, or the files tools cannot work.")
            return
        try:
            new = Config.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
            )
            self.error.setText(f"Not saved: {problems}.")
            return
        if self.engine_kind.currentIndex() == 1 and new.engine.url is None:
            self.error.setText(
                "Not saved: give the llama-server's address, or choose This computer."
            )
            return
        if new.engine.url is not None:
            problem = plain_http_problem(new.engine.url, new.engine.allow_plain_http)
            if problem:
                self.error.setText(
                    f"Not saved: {problem}. Use https:// or an SSH tunnel to 127.0.0.1, or "
                    "allow plain http:// knowing that."
                )
                return
            key = self.engine_key.text().strip()
            if key:
                try:
                    self.app.secrets.set("", key, entry=engine_entry(engine_origin(new.engine.url)))
                except BotpsyError as exc:
                    self.error.setText(f"Not saved: the API key could not be stored: {exc}")
                    return
        old = self.app.config
        old_key = old.ui.quick_shortcut
        model_changed = new.model != old.model or new.engine != old.engine
        if self.engine_key.text().strip():
            model_changed = True  # reconnect with the new key
        later = new.files != old.files or new.weather != old.weather or new.music != old.music
        if (new.voice.model, new.voice.engine) != (old.voice.model, old.voice.engine):
            self.app.voice().close()  # the next recognition loads the newly chosen model
        for section in ("model", "engine", "files", "weather", "music", "ui", "agent", "voice"):
            setattr(old, section, getattr(new, section))
        old.save(self.app.paths)
        gate = self.app.gate
        gate.offer_scopes = new.agent.allow_for_conversation
        gate.ask_every_change = new.agent.ask_before_every_change
        if not gate.offer_scopes:
            gate.grants.clear()  # allowances already given stop at once
        if self.autostart.isChecked() != autostart.is_enabled():
            try:
                autostart.set_enabled(self.autostart.isChecked())
            except BotpsyError as exc:
                self.error.setText(str(exc))
        app = QGuiApplication.instance()
        if isinstance(app, QGuiApplication) and hasattr(app, "setStyleSheet"):
            app.setStyleSheet(style_for(new.ui.theme, system_is_dark()))
        if model_changed:
            self.modelSettingsChanged.emit()
        shortcut = getattr(self.parent(), "global_shortcut", None)
        if shortcut is not None and new.ui.quick_shortcut != old_key:
            problem = shortcut.start(new.ui.quick_shortcut)
            self.shortcut_note.setText(shortcut.note())
            if problem:
                self.error.setText(f"Saved, but the quick command key does not work: {problem}")
                return
        self.note.setText(
            "Saved. Folders, weather and music settings apply at the next start."
            if later
            else "Saved."
        )
        self.accept()
