"""The installed models in Settings > Model: which one is active, use another, remove one."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Qt, QThreadPool, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from botpsy_desktop.core.errors import BotpsyError

if TYPE_CHECKING:
    from botpsy_desktop.app import App
    from botpsy_desktop.llm.models.installed import InstalledModel


def describe(model: InstalledModel, active: bool, name: str | None = None) -> str:
    """One line of the list: the model's readable ``name`` (else its id), quantization, size,
    and "in use" for the active one."""
    quant = f" · {model.quantization}" if model.quantization else ""
    tools = {"good": "", "unreliable": " · unreliable tool use", "unknown": ""}[model.tool_use]
    mark = "● " if active else ""
    using = " · in use" if active else ""
    shown = name or model.id
    if not model.catalog_id and shown.casefold() != model.id.casefold():
        shown = f"{shown} ({model.id})"  # the id `botpsy model use` takes
    return f"{mark}{shown}{quant} · {model.size / 2**20:,.0f} MiB{tools}{using}"


class _Jobs(QObject):
    """Runs the model service's slow calls (hashing, deleting) off the GUI thread."""

    done = Signal(bool, str, str)  # ok, message, path of the model now in use ("" if none)

    def __init__(self, app: App) -> None:
        super().__init__()
        self.app = app

    def run(self, job: Callable[[], tuple[str, str]]) -> None:
        def work() -> None:
            try:
                message, path = job()
            except BotpsyError as exc:
                self.done.emit(False, str(exc), "")
            except Exception as exc:  # shown to the user, never lost on a pool thread
                self.done.emit(False, f"{type(exc).__name__}: {exc}", "")
            else:
                self.done.emit(True, message, path)

        QThreadPool.globalInstance().start(work)


class InstalledModels(QWidget):
    """The installed models, the active one marked; Use checks the file's SHA-256 first.

    ``modelChosen(path)`` fires after Use (the window loads it), ``modelRemoved`` after the
    active model was removed.
    """

    modelChosen = Signal(str)
    modelRemoved = Signal()

    def __init__(self, app: App, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.app = app
        self.service = app.models()
        self.list = QListWidget()
        self.list.setObjectName("installedModels")
        self.list.setMaximumHeight(110)
        self.list.currentItemChanged.connect(lambda *_: self._update_buttons())
        self.use_button = QPushButton("&Use")
        self.use_button.setToolTip("Check the file against its SHA-256, then load it")
        self.use_button.clicked.connect(self.use_selected)
        self.remove_button = QPushButton("&Remove…")
        self.remove_button.clicked.connect(self.remove_selected)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        buttons = QHBoxLayout()
        buttons.addWidget(self.use_button)
        buttons.addWidget(self.remove_button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.list)
        layout.addLayout(buttons)
        layout.addWidget(self.status)
        self.jobs = _Jobs(app)
        self.jobs.done.connect(self._on_done)
        self.busy = False
        self.refresh()

    def refresh(self) -> None:
        keep = self.selected() if self.list.count() else None
        self.list.clear()
        try:
            models, active = self.service.installed(), self.service.active()
        except BotpsyError as exc:
            self.status.setText(str(exc))
            models, active = [], None
        for model in models:
            path = self.service.path_of(model)
            item = QListWidgetItem(
                describe(model, model == active, self.service.display_name(path))
            )
            item.setData(Qt.ItemDataRole.UserRole, model.id)
            item.setToolTip(f"{model.id}: {model.name}\n{path}\n{model.note}".strip())
            self.list.addItem(item)
            if model.id == keep:
                self.list.setCurrentItem(item)
        if not models:
            self.status.setText("No model installed yet: File ▸ Get a model… downloads one.")
        self._update_buttons()

    def selected(self) -> str | None:
        item = self.list.currentItem()
        return None if item is None else str(item.data(Qt.ItemDataRole.UserRole))

    def _update_buttons(self) -> None:
        chosen = self.selected() is not None and not self.busy
        self.use_button.setEnabled(chosen)
        self.remove_button.setEnabled(chosen)

    def _start(self, text: str, job: Callable[[], tuple[str, str]]) -> None:
        self.busy = True
        self._update_buttons()
        self.status.setText(text)
        self.jobs.run(job)

    def use_selected(self) -> None:
        ref = self.selected()
        if ref is None:
            return

        def job() -> tuple[str, str]:
            model = self.service.use(ref)
            return f"Using {model.id}.", str(self.service.path_of(model))

        self._start(f"Checking {ref}…", job)

    def remove_selected(self) -> None:
        ref = self.selected()
        if ref is None:
            return
        model = self.service.find(ref)
        where = (
            "Its file in the models folder is deleted."
            if model.managed
            else f"Its file stays where it is ({self.service.path_of(model)})."
        )
        answer = QMessageBox.question(
            self,
            "Remove model",
            f"Remove {model.id} from the installed models? {where}",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
            QMessageBox.StandardButton.No,
        )
        if answer != QMessageBox.StandardButton.Yes:
            return
        was_active = self.service.active() == model

        def job() -> tuple[str, str]:
            self.service.remove(ref)
            return f"Removed {ref}.", "" if was_active else "-"

        self._start(f"Removing {ref}…", job)

    def _on_done(self, ok: bool, message: str, path: str) -> None:
        self.busy = False
        self.status.setText(message)
        self.refresh()
        self.status.setText(message)
        if ok and path not in ("", "-"):
            self.modelChosen.emit(path)
        elif ok and path == "":
            self.modelRemoved.emit()
