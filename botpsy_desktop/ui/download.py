"""Getting a model from the window: download (with progress, cancel and resume) or import."""

from __future__ import annotations

import re
import threading

from PySide6.QtCore import QObject, Qt, QThread, Signal, Slot
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from botpsy_desktop.app import App
from botpsy_desktop.core.errors import BotpsyError
from botpsy_desktop.llm.models.download import DownloadError, Progress
from botpsy_desktop.llm.models.installed import ModelEvent, Status


def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def progress_text(p: Progress) -> str:
    """ "120.3 MiB of 502.8 MiB · 8.1 MiB/s · about 47 s left" (the check phase says so)."""
    verb = {"download": "", "check": "Checking: ", "copy": "Copying: "}.get(p.phase, "")
    text = f"{verb}{_mib(p.done)} of {_mib(p.total)}"
    if p.bytes_per_s > 0:
        text += f" · {_mib(p.bytes_per_s)}/s"
    eta = p.eta_s
    if eta is not None and not p.finished:
        text += f" · about {eta:.0f} s left" if eta < 90 else f" · about {eta / 60:.0f} min left"
    return text


def window_advice(exc: BotpsyError) -> str:
    """An error's advice in the words of this dialog's buttons, not the command line's."""
    if isinstance(exc, DownloadError) and exc.kind == "offline":
        return (
            "Check the internet connection and press Download again (a partial download "
            "resumes where it stopped), or use Import a GGUF… for a model file you already "
            "have, or choose a model already on this computer above."
        )
    hint = exc.hint
    hint = re.sub(r"\brun the (?:same )?command again\b", "press Download again", hint)
    hint = re.sub(r"\bRun the (?:same )?command again\b", "Press Download again", hint)
    hint = re.sub(r"`botpsy model import PATH`", "Import a GGUF…", hint)
    return re.sub(r"`botpsy model pull[^`]*`", "Download", hint)


class ErrorDialog(QDialog):
    """A failure said whole: the message and what to do, selectable, in a dialog that resizes."""

    def __init__(self, title: str, message: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("errorDialog")
        self.setWindowTitle(title)
        self.setSizeGripEnabled(True)
        self.setMinimumSize(420, 180)
        self.resize(560, 260)
        layout = QVBoxLayout(self)
        self.text = QLabel(message)
        self.text.setObjectName("errorText")
        self.text.setWordWrap(True)
        self.text.setTextFormat(Qt.TextFormat.PlainText)
        self.text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.text.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(self.text)
        layout.addWidget(scroll, 1)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok)
        buttons.accepted.connect(self.accept)
        layout.addWidget(buttons)


class _Worker(QObject):
    """Runs one pull or import on its own thread and reports through signals."""

    news = Signal(object)  # Status | Progress (never `event`: that is QObject.event)
    done = Signal(str)  # path of the now active model
    failed = Signal(str)

    def __init__(self, app: App) -> None:
        super().__init__()
        self.app = app
        self.cancel = threading.Event()

    @Slot(str)
    def pull(self, source: str) -> None:
        self._run(
            lambda: self.app.models().pull(
                source or None, use=True, on_event=self.news.emit, cancel=self.cancel
            )
        )

    @Slot(str)
    def import_file(self, path: str) -> None:
        self._run(
            lambda: self.app.models().import_file(
                path, use=True, on_event=self.news.emit, cancel=self.cancel
            )
        )

    def _run(self, job: object) -> None:
        try:
            job()  # type: ignore[operator]
        except BotpsyError as exc:
            self.failed.emit(f"{exc.message}\n\n{window_advice(exc)}".strip())
            return
        except Exception as exc:  # shown to the user, never lost on a thread
            self.failed.emit(f"{type(exc).__name__}: {exc}")
            return
        self.done.emit(self.app.config.model.path or "")


class ModelDialog(QDialog):
    """Says in one sentence how to get a model and does it: Download, Import a GGUF, or Later;
    the models already on this computer are listed to choose from (those installed, with Use,
    and a model an installed package ships, such as the demo model, with one button).

    A cancelled or failed download keeps its partial file; Download again resumes it. A failure
    is said whole in a resizable dialog (``error_dialog``), with advice in the words of these
    buttons.
    """

    modelReady = Signal(str)
    _pull = Signal(str)
    _import = Signal(str)

    def __init__(self, app: App, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.app = app
        self.setObjectName("modelDialog")
        self.setWindowTitle("Get a model")
        self.setMinimumWidth(560)
        service = app.models()
        entry = service.catalog.default_entry
        self.quantization = entry.default_quantization
        layout = QVBoxLayout(self)
        self.message = QLabel(service.first_run_message(window=True))
        self.message.setWordWrap(True)
        layout.addWidget(self.message)
        # the models on this computer: installed ones (Use) and packaged ones (the demo model)
        from botpsy_desktop.ui.installed import InstalledModels

        self.installed = InstalledModels(app)
        self.installed.modelChosen.connect(self._on_done)
        self.installed.setVisible(bool(service.installed()))
        layout.addWidget(self.installed)
        self.local_buttons: list[QPushButton] = []
        for local in service.local_entries():
            size = next(iter(local.approx_size_mib.values()), None)
            button = QPushButton(
                f"Use {local.name} (on this computer{f', {size} MiB' if size else ''})"
            )
            button.setObjectName("localModelButton")
            button.setToolTip(f"{local.description}\n{local.note}".strip())
            button.clicked.connect(lambda _=False, ref=local.id: self.download(ref))
            layout.addWidget(button)
            self.local_buttons.append(button)
        self.error_dialog: ErrorDialog | None = None
        self.status = QLabel("")
        self.status.setObjectName("modelStatus")
        self.status.setWordWrap(True)
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.bar.setVisible(False)
        layout.addWidget(self.bar)
        layout.addWidget(self.status)
        row = QHBoxLayout()
        self.download_button = QPushButton(f"&Download {entry.name} ({self.quantization})")
        self.import_button = QPushButton("&Import a GGUF…")
        self.cancel_button = QPushButton("&Cancel download")
        self.later_button = QPushButton("&Later")
        self.cancel_button.setVisible(False)
        self.download_button.setDefault(True)
        for b in (self.download_button, self.import_button, self.cancel_button, self.later_button):
            row.addWidget(b)
        layout.addLayout(row)
        self.download_button.clicked.connect(self.download)
        self.import_button.clicked.connect(self.choose_file)
        self.cancel_button.clicked.connect(self.cancel)
        self.later_button.clicked.connect(self.reject)

        self.qthread = QThread(self)
        self.worker = _Worker(app)
        self.worker.moveToThread(self.qthread)
        self._pull.connect(self.worker.pull)
        self._import.connect(self.worker.import_file)
        self.worker.news.connect(self._on_event)
        self.worker.done.connect(self._on_done)
        self.worker.failed.connect(self._on_failed)
        self.qthread.start()
        self.finished.connect(self.shutdown)
        self.busy = False

    def download(self, source: str = "") -> None:
        self._start()
        self._pull.emit(source or "")

    def choose_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self, "Import a GGUF model", "", "GGUF models (*.gguf)"
        )
        if path:
            self.import_path(path)

    def import_path(self, path: str) -> None:
        self._start()
        self._import.emit(path)

    def _start(self) -> None:
        self.busy = True
        self.worker.cancel.clear()
        self.bar.setVisible(True)
        self.bar.setValue(0)
        self.status.setText("Starting…")
        self.cancel_button.setVisible(True)
        for b in (self.download_button, self.import_button, self.later_button, *self.local_buttons):
            b.setEnabled(False)

    def cancel(self) -> None:
        self.worker.cancel.set()

    def _idle(self) -> None:
        self.busy = False
        self.cancel_button.setVisible(False)
        for b in (self.download_button, self.import_button, self.later_button, *self.local_buttons):
            b.setEnabled(True)

    def _on_event(self, event: ModelEvent) -> None:
        if isinstance(event, Progress):
            self.bar.setValue(int(event.fraction * 1000))
            self.status.setText(progress_text(event))
        elif isinstance(event, Status):
            self.status.setText(event.message)

    def _on_done(self, path: str) -> None:
        self._idle()
        self.bar.setValue(1000)
        self.status.setText("Ready.")
        self.modelReady.emit(path)
        self.accept()

    def _on_failed(self, message: str) -> None:
        self._idle()
        self.download_button.setText("&Download again (resumes)")
        self.status.setText(message.split("\n", 1)[0])
        if self.worker.cancel.is_set():  # the user cancelled: the status line says so
            return
        self.error_dialog = ErrorDialog("The model could not be downloaded", message, self)
        self.error_dialog.open()

    def shutdown(self) -> None:
        """Cancel a running job and end the worker thread (the window calls this on quit)."""
        self.worker.cancel.set()
        if self.qthread.isRunning():
            self.qthread.quit()
            self.qthread.wait(10000)

    def reject(self) -> None:
        if self.busy:  # Esc while downloading cancels the download first
            self.cancel()
            return
        super().reject()
