"""The first-run guide: get the model, choose folders, add accounts, set the weather place."""

from __future__ import annotations

from PySide6.QtCore import QCoreApplication, Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QVBoxLayout,
    QWidget,
    QWizard,
    QWizardPage,
)

from botpsy_desktop.app import App
from botpsy_desktop.core.config import Config
from botpsy_desktop.ui.accounts import AccountsPanel
from botpsy_desktop.ui.download import ModelDialog
from botpsy_desktop.ui.settings import FolderList


def needs_first_run(config: Config) -> bool:
    """No model set and the guide never finished or skipped."""
    return not config.model.path and not config.engine.url and not config.ui.first_run_done


class ModelPage(QWizardPage):
    """Step 1: download BotPsy or import a GGUF (the model dialog, embedded)."""

    def __init__(self, wizard: FirstRunWizard) -> None:
        super().__init__()
        self.guide = wizard
        self.setTitle("Get the model")
        self.setSubTitle(
            "BotPsy runs a language model on this computer. Download it (it can be cancelled "
            "and resumed) or import a GGUF file you have. Next skips this step."
        )
        layout = QVBoxLayout(self)
        self.current = QLabel("")
        self.current.setObjectName("firstRunModel")
        self.current.setWordWrap(True)
        layout.addWidget(self.current)
        self.dialog = self._embedded()
        layout.addWidget(self.dialog)
        layout.addStretch(1)
        self._show_current()

    def _embedded(self) -> ModelDialog:
        dialog = ModelDialog(self.guide.app)
        dialog.setWindowFlags(Qt.WindowType.Widget)
        dialog.later_button.setText("&Skip")
        dialog.modelReady.connect(self._on_ready)
        dialog.rejected.connect(self._on_skipped)
        dialog.finished.connect(self._on_closed)
        qt = QCoreApplication.instance()
        if qt is not None:  # quitting while it downloads: end its worker thread first
            qt.aboutToQuit.connect(dialog.shutdown)
        self.closed = False
        return dialog

    def _on_closed(self) -> None:
        self.closed = True  # the dialog hid itself and ended its worker

    def _show_current(self) -> None:
        path = self.guide.app.config.model.path
        self.current.setText(f"Model: {path}" if path else "")

    def _on_ready(self, path: str) -> None:
        self._show_current()
        self.guide.modelReady.emit(path)
        if self.guide.currentPage() is self:
            self.guide.next()

    def _on_skipped(self) -> None:
        if self.guide.currentPage() is self:
            self.guide.next()

    def revive(self) -> None:
        """Back on this page after Skip or a finished download: a fresh dialog to use again."""
        if self.closed:
            old, self.dialog = self.dialog, self._embedded()
            layout = self.layout()
            assert layout is not None
            layout.replaceWidget(old, self.dialog)
            old.deleteLater()
            self.dialog.show()
            self._show_current()


class FoldersPage(QWizardPage):
    """Step 2: the folders the files tools may touch and the music folders."""

    def __init__(self, wizard: FirstRunWizard) -> None:
        super().__init__()
        c = wizard.app.config
        self.setTitle("Choose folders")
        self.setSubTitle(
            "The assistant reads and changes files only inside these folders, and plays music "
            "from the music folders. The defaults are shown; change them now or later in "
            "Settings."
        )
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("Folders the assistant may use:"))
        self.roots = FolderList(list(c.files.roots), "Add a folder the assistant may use")
        layout.addWidget(self.roots)
        layout.addWidget(QLabel("Music folders:"))
        self.music = FolderList(list(c.music.folders), "Add a music folder")
        layout.addWidget(self.music)
        self.error = QLabel("")
        self.error.setObjectName("firstRunError")
        layout.addWidget(self.error)

    def validatePage(self) -> bool:
        if not self.roots.folders():
            self.error.setText("Keep at least one folder, or the files tools cannot work.")
            return False
        self.error.setText("")
        return True


class AccountsPage(QWizardPage):
    """Step 3 (optional): calendar and mail accounts."""

    def __init__(self, wizard: FirstRunWizard) -> None:
        super().__init__()
        self.setTitle("Add accounts (optional)")
        self.setSubTitle(
            "Connect a calendar (CalDAV) or a mailbox (IMAP/SMTP) so the assistant can use "
            "them; the local calendar needs no account. Next skips this step."
        )
        layout = QVBoxLayout(self)
        self.panel = AccountsPanel(wizard.app)
        layout.addWidget(self.panel)


class WeatherPage(QWizardPage):
    """Step 4: the weather's default place and units."""

    def __init__(self, wizard: FirstRunWizard) -> None:
        super().__init__()
        c = wizard.app.config
        self.setTitle("Weather")
        self.setSubTitle("Where to ask about when you name no place, and the units to answer in.")
        form = QFormLayout(self)
        self.location = QLineEdit(c.weather.default_location or "")
        self.location.setPlaceholderText("e.g. Lyon, France (optional)")
        self.units = QComboBox()
        self.units.addItems(["auto", "metric", "imperial"])
        self.units.setCurrentText(c.weather.units)
        form.addRow("Location:", self.location)
        form.addRow("Units:", self.units)
        form.addRow(QLabel("Settings (File ▸ Settings…) changes all of this later."))


class FirstRunWizard(QWizard):
    """Walks through the model, folders, accounts and weather; every step can be skipped.

    Finish writes the folders and weather to the config; Finish or "Skip the guide" marks the
    guide done so it is not shown again (File ▸ First-run guide… opens it again). A model
    downloaded or imported on the first page is announced with ``modelReady`` at once.
    """

    modelReady = Signal(str)

    def __init__(self, app: App, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.app = app
        self.setObjectName("firstRunWizard")
        self.setWindowTitle("Welcome to BotPsy")
        self.setWizardStyle(QWizard.WizardStyle.ModernStyle)
        self.setMinimumSize(680, 560)
        self.setButtonText(QWizard.WizardButton.CancelButton, "Skip the guide")
        self.model_page = ModelPage(self)
        self.folders_page = FoldersPage(self)
        self.accounts_page = AccountsPage(self)
        self.weather_page = WeatherPage(self)
        for page in (self.model_page, self.folders_page, self.accounts_page, self.weather_page):
            self.addPage(page)
        self.finished.connect(self._on_finished)
        self.currentIdChanged.connect(self._on_page)
        self.note = ""

    def _on_page(self, _: int) -> None:
        if self.currentPage() is self.model_page:
            self.model_page.revive()

    @property
    def model_dialog(self) -> ModelDialog:
        return self.model_page.dialog

    def accept(self) -> None:
        """Finish: save the folders and weather, and mark the guide done."""
        config = self.app.config
        data = config.model_dump()
        data["files"]["roots"] = self.folders_page.roots.folders() or data["files"]["roots"]
        data["music"]["folders"] = self.folders_page.music.folders()
        data["weather"].update(
            default_location=self.weather_page.location.text().strip() or None,
            units=self.weather_page.units.currentText(),
        )
        data["ui"]["first_run_done"] = True
        new = Config.model_validate(data)
        changed = new.files != config.files or new.music != config.music
        changed = changed or new.weather != config.weather
        for section in ("files", "music", "weather", "ui"):
            setattr(config, section, getattr(new, section))
        config.save(self.app.paths)
        self.note = (
            "Saved. Folders, weather and music settings apply at the next start."
            if changed
            else "Saved."
        )
        if self.model_dialog.busy:  # closing the guide stops its download (kept to resume)
            self.note += " The model download stopped; File ▸ Get a model… resumes it."
        super().accept()

    def reject(self) -> None:
        """Skip the guide: nothing more is changed, and it is not shown again."""
        if self.model_dialog.busy:  # Esc while downloading cancels the download first
            self.model_dialog.cancel()
            return
        if not self.app.config.ui.first_run_done:
            self.app.config.ui.first_run_done = True
            self.app.config.save(self.app.paths)
        super().reject()

    def _on_finished(self) -> None:
        self.model_dialog.shutdown()
