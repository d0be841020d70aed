"""Calendar and mail accounts in the window: list, add, test, change password, remove."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from PySide6.QtCore import QObject, Qt, QThreadPool, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QPushButton,
    QSpinBox,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from botpsy_desktop.adapters.accounts import check_account
from botpsy_desktop.app import App
from botpsy_desktop.core.accounts import (
    AccountBook,
    CalDAVAccount,
    MailAccount,
    validation_sentence,
)
from botpsy_desktop.core.errors import BotpsyError
from botpsy_desktop.core.secrets import KeyringUnavailable

LOCAL_NAME = "local"
"""The row standing for the local calendar (.ics files, no account, no password)."""

AnyAccount = CalDAVAccount | MailAccount


def check_local_calendar(app: App) -> tuple[bool, str]:
    """The local calendar's check (it has no server and no password)."""
    from botpsy_desktop.adapters.calendar import LocalSource

    try:
        return True, f"local (calendar): {LocalSource(app.paths.data_dir / 'calendar').check()}"
    except BotpsyError as exc:
        return False, f"local (calendar): failed: {exc}"


@dataclass(frozen=True)
class Row:
    """One line of the accounts list."""

    name: str
    kind: str
    summary: str
    password: str
    """"keyring", "this session only", "none", or why it is unknown."""

    @property
    def text(self) -> str:
        if self.name == LOCAL_NAME and self.kind == "calendar":
            return f"{self.name} · {self.summary}"
        return f"{self.name} · {self.kind} · {self.summary} · password: {self.password}"


@dataclass(frozen=True)
class Result:
    """What one job did: its action, whether it worked, the sentence to show."""

    action: str
    ok: bool
    message: str
    keyring_missing: bool = False


class AccountsWorker(QObject):
    """The accounts jobs (file, keyring, network); the panel runs each on a pool thread.

    Results come back through the signals, queued to the panel on the GUI thread.
    """

    listed = Signal(object)  # list[Row], or a str saying why the accounts cannot be read
    result = Signal(object)  # Result

    def __init__(self, app: App) -> None:
        super().__init__()
        self.app = app
        self.book = AccountBook.for_paths(app.paths)

    def load(self) -> None:
        try:
            accounts = self.book.load()
        except BotpsyError as exc:
            self.listed.emit(str(exc))
            return
        rows: list[Row] = []
        if self.app.config.calendar.local:
            rows.append(Row(LOCAL_NAME, "calendar", "calendar on this computer, no account", ""))
        for a in accounts:
            if self.app.secrets.in_session(a.name):
                stored = "this session only"
            else:
                try:
                    stored = "keyring" if self.app.secrets.get(a.name) else "none"
                except KeyringUnavailable:
                    stored = "unknown (no keyring)"
            server = a.url if isinstance(a, CalDAVAccount) else f"{a.imap_host}, {a.smtp_host}"
            rows.append(Row(a.name, a.kind, f"{a.username} @ {server}", stored))
        self.listed.emit(rows)

    def add(self, account: AnyAccount, password: str, session_only: bool) -> None:
        def job() -> Result:
            if self.book.get(account.name) is not None:
                raise BotpsyError(
                    f"There is already an account named {account.name!r}.",
                    "Choose another name, or remove that account first.",
                )
            # the password first: if the keyring refuses it, nothing is saved
            self.app.secrets.set(account.name, password, session_only=session_only)
            self.book.add(account)
            where = "for this session only" if session_only else "in the OS keyring"
            return Result(
                "add",
                True,
                f"Added {account.kind} account {account.name!r}; password {where}. "
                "Test checks it; the assistant uses it from the next start.",
            )

        self._run("add", job)

    def set_password(self, name: str, password: str, session_only: bool) -> None:
        def job() -> Result:
            self.app.secrets.set(name, password, session_only=session_only)
            where = "for this session only" if session_only else "in the OS keyring"
            return Result("password", True, f"Stored a new password for {name!r} {where}.")

        self._run("password", job)

    def test(self, name: str) -> None:
        def job() -> Result:
            if name == LOCAL_NAME and self.book.get(name) is None:
                return Result("test", *check_local_calendar(self.app))
            found = self.book.get(name)
            if found is None:
                raise BotpsyError(f"There is no account {name!r} any more.")
            ok, line = check_account(found, self.app.secrets, self.app.config)
            return Result("test", ok, line)

        self._run("test", job)

    def remove(self, name: str) -> None:
        def job() -> Result:
            found = self.book.remove(name)
            try:
                gone = self.app.secrets.delete(found.name)
            except KeyringUnavailable as exc:
                return Result(
                    "remove", True, f"Removed {found.name!r}; its keyring entry stays: {exc}"
                )
            note = " and its password" if gone else ""
            return Result("remove", True, f"Removed account {found.name!r}{note}.")

        self._run("remove", job)

    def _run(self, action: str, job: Callable[[], Result]) -> None:
        try:
            outcome = job()
        except KeyringUnavailable as exc:
            outcome = Result(action, False, str(exc), keyring_missing=True)
        except BotpsyError as exc:
            outcome = Result(action, False, str(exc))
        except Exception as exc:  # shown to the user, never lost on a thread
            outcome = Result(action, False, f"{type(exc).__name__}: {exc}")
        self.result.emit(outcome)
        if action != "test":
            self.load()


def _optional(edit: QLineEdit) -> str | None:
    return edit.text().strip() or None


def _port(spin: QSpinBox) -> int | None:
    return spin.value() or None


class PasswordFields(QWidget):
    """A masked password field and the "this session only" choice."""

    def __init__(self) -> None:
        super().__init__()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.password = QLineEdit()
        self.password.setObjectName("accountPassword")
        self.password.setEchoMode(QLineEdit.EchoMode.Password)
        self.password.setPlaceholderText("goes to the OS keyring, never to a file")
        self.session_only = QCheckBox("Keep it for this session only (not stored anywhere)")
        layout.addWidget(self.password)
        layout.addWidget(self.session_only)


class AccountForm(QDialog):
    """The fields `botpsy account add caldav|mail` asks for; OK only when they are valid."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("accountForm")
        self.setWindowTitle("Add an account")
        self.setMinimumWidth(520)
        self.kind = QComboBox()
        self.kind.addItem("Calendar (CalDAV: Nextcloud, Fastmail, iCloud…)", "caldav")
        self.kind.addItem("Mail (IMAP to read, SMTP to send)", "mail")
        self.name = QLineEdit()
        self.name.setPlaceholderText("a short name, e.g. work")
        self.ca_file = QLineEdit()
        self.ca_file.setPlaceholderText("optional: extra CA certificate (PEM) to trust")

        dav = QWidget()
        df = QFormLayout(dav)
        self.url = QLineEdit()
        self.url.setPlaceholderText("https://cloud.example.com/remote.php/dav")
        self.dav_username = QLineEdit()
        self.calendar = QLineEdit()
        self.calendar.setPlaceholderText("optional: where new events go (default: the first)")
        self.dav_email = QLineEdit()
        self.dav_email.setPlaceholderText("optional: your address as organizer of invitations")
        self.dav_contacts = QComboBox()
        for label, value in (
            ("not read", None),
            ("yours: only you write them", "own"),
            ("shared: others can change them", "shared"),
        ):
            self.dav_contacts.addItem(label, value)
        df.addRow("URL:", self.url)
        df.addRow("User name:", self.dav_username)
        df.addRow("Calendar:", self.calendar)
        df.addRow("Email:", self.dav_email)
        df.addRow("Address books:", self.dav_contacts)

        mail = QWidget()
        mf = QFormLayout(mail)
        self.address = QLineEdit()
        self.address.setPlaceholderText("you@example.org")
        self.mail_username = QLineEdit()
        self.mail_username.setPlaceholderText("default: the address")
        self.display_name = QLineEdit()
        self.display_name.setPlaceholderText("optional: your name, shown to recipients")
        mf.addRow("Address:", self.address)
        mf.addRow("User name:", self.mail_username)
        mf.addRow("Your name:", self.display_name)
        self.hosts: dict[str, QLineEdit] = {}
        self.ports: dict[str, QSpinBox] = {}
        self.security: dict[str, QComboBox] = {}
        for side, default in (("imap", "993 ssl, 143 starttls"), ("smtp", "465 ssl, 587 starttls")):
            host, port, sec = QLineEdit(), QSpinBox(), QComboBox()
            host.setPlaceholderText(f"{side}.example.org")
            port.setRange(0, 65535)
            port.setSpecialValueText(f"default ({default})")
            sec.addItems(["ssl", "starttls", "none"])
            row = QHBoxLayout()
            row.addWidget(host, 1)
            row.addWidget(port)
            row.addWidget(sec)
            mf.addRow(f"{side.upper()} server:", row)
            self.hosts[side], self.ports[side], self.security[side] = host, port, sec
        self.drafts_folder = QLineEdit()
        self.drafts_folder.setPlaceholderText("optional: default the server's Drafts folder")
        self.sent_folder = QLineEdit()
        self.sent_folder.setPlaceholderText("optional: keep a copy of sent mail there (not Gmail)")
        mf.addRow("Drafts folder:", self.drafts_folder)
        mf.addRow("Sent folder:", self.sent_folder)

        self.pages = QStackedWidget()
        self.pages.addWidget(dav)
        self.pages.addWidget(mail)
        self.kind.currentIndexChanged.connect(self.pages.setCurrentIndex)
        self.secret = PasswordFields()
        self.error = QLabel("")
        self.error.setObjectName("accountFormError")
        self.error.setWordWrap(True)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        self.ok_button = buttons.button(QDialogButtonBox.StandardButton.Ok)
        self.ok_button.setText("&Add")
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)

        top = QFormLayout()
        top.addRow("Kind:", self.kind)
        top.addRow("Name:", self.name)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.pages)
        bottom = QFormLayout()
        bottom.addRow("CA file:", self.ca_file)
        bottom.addRow("Password:", self.secret)
        layout.addLayout(bottom)
        layout.addWidget(self.error)
        layout.addWidget(buttons)
        self.result_account: AnyAccount | None = None

    def set_kind(self, kind: str) -> None:
        self.kind.setCurrentIndex(self.kind.findData(kind))

    def account(self) -> AnyAccount:
        """The account the fields describe; BotpsyError naming each wrong field."""
        common: dict[str, Any] = {
            "name": self.name.text().strip(),
            "ca_file": _optional(self.ca_file),
        }
        try:
            if self.kind.currentData() == "caldav":
                return CalDAVAccount.model_validate(
                    {
                        **common,
                        "url": self.url.text().strip(),
                        "username": self.dav_username.text().strip(),
                        "calendar": _optional(self.calendar),
                        "email": _optional(self.dav_email),
                        "contacts": self.dav_contacts.currentData(),
                    }
                )
            address = self.address.text().strip()
            return MailAccount.model_validate(
                {
                    **common,
                    "address": address,
                    "username": self.mail_username.text().strip() or address,
                    "display_name": self.display_name.text().strip(),
                    "imap_host": self.hosts["imap"].text().strip(),
                    "imap_port": _port(self.ports["imap"]),
                    "imap_security": self.security["imap"].currentText(),
                    "smtp_host": self.hosts["smtp"].text().strip(),
                    "smtp_port": _port(self.ports["smtp"]),
                    "smtp_security": self.security["smtp"].currentText(),
                    "drafts_folder": _optional(self.drafts_folder),
                    "sent_folder": _optional(self.sent_folder),
                }
            )
        except ValidationError as exc:
            raise BotpsyError(
                f"Not added: {validation_sentence(exc)}.", "Correct the fields."
            ) from None

    def accept(self) -> None:
        try:
            account = self.account()
        except BotpsyError as exc:
            self.error.setText(str(exc))
            return
        if not self.secret.password.text():
            self.error.setText("Enter the account's password (it is needed to connect).")
            return
        self.result_account = account
        super().accept()


class PasswordDialog(QDialog):
    """Asks for an account's new password (masked), with the "this session only" choice."""

    def __init__(self, name: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("passwordDialog")
        self.setWindowTitle(f"New password for {name}")
        self.secret = PasswordFields()
        self.error = QLabel("")
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        self.ok_button = buttons.button(QDialogButtonBox.StandardButton.Ok)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel(f"The new password for account {name!r}:"))
        layout.addWidget(self.secret)
        layout.addWidget(self.error)
        layout.addWidget(buttons)

    def accept(self) -> None:
        if not self.secret.password.text():
            self.error.setText("Enter the password.")
            return
        super().accept()


class AccountsPanel(QWidget):
    """The accounts list with Add…, Test, Change password… and Remove.

    Every job (accounts file, keyring, connecting to the server) runs on a pool thread, never
    on the GUI thread; results come back as signals; ``finished`` carries each job's Result.
    When no keyring can store a password, the panel says so and offers to keep it for this
    session only; nothing is ever written in plain text.
    """

    finished = Signal(object)  # Result

    def __init__(self, app: App, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.app = app
        self.setObjectName("accountsPanel")
        self.rows: list[Row] = []
        self.busy = False
        self.form: AccountForm | None = None
        self.password_dialog: PasswordDialog | None = None
        self.confirm_box: QMessageBox | None = None
        self._retry: tuple[str, tuple[Any, ...]] | None = None

        intro = QLabel(
            "Calendars (CalDAV) and mailboxes (IMAP/SMTP) the assistant may use. Passwords go "
            "to the OS keyring, never to a file. Changes here apply at once; the assistant "
            "uses new accounts from the next start."
        )
        intro.setWordWrap(True)
        self.list = QListWidget()
        self.list.setObjectName("accountsList")
        self.list.currentRowChanged.connect(self._update_buttons)
        self.add_button = QPushButton("&Add…")
        self.test_button = QPushButton("&Test")
        self.password_button = QPushButton("Change &password…")
        self.remove_button = QPushButton("&Remove")
        row = QHBoxLayout()
        for b in (self.add_button, self.test_button, self.password_button, self.remove_button):
            row.addWidget(b)
        row.addStretch(1)
        self.status = QLabel("")
        self.status.setObjectName("accountsStatus")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.session_button = QPushButton("Keep the password for this &session only")
        self.session_button.setVisible(False)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addWidget(self.list, 1)
        layout.addLayout(row)
        layout.addWidget(self.status)
        layout.addWidget(self.session_button)

        self.add_button.clicked.connect(self.add)
        self.test_button.clicked.connect(self.test)
        self.password_button.clicked.connect(self.change_password)
        self.remove_button.clicked.connect(self.remove)
        self.session_button.clicked.connect(self.retry_for_session)

        # no parent: a job still running when the panel goes keeps its worker alive
        self.worker = AccountsWorker(app)
        self.worker.listed.connect(self._on_listed)
        self.worker.result.connect(self._on_result)
        self.pool = QThreadPool.globalInstance()
        self._update_buttons()
        self.refresh()

    # -- actions ----------------------------------------------------------------------------
    def refresh(self) -> None:
        self._in_pool(self.worker.load)

    def selected(self) -> Row | None:
        i = self.list.currentRow()
        return self.rows[i] if 0 <= i < len(self.rows) else None

    def select(self, name: str) -> None:
        for i, r in enumerate(self.rows):
            if r.name == name:
                self.list.setCurrentRow(i)

    def add(self) -> AccountForm:
        form = AccountForm(self)
        form.accepted.connect(lambda: self._add_from(form))
        self.form = form
        form.open()
        return form

    def _add_from(self, form: AccountForm) -> None:
        account = form.result_account
        if account is None:
            return
        self._start(
            f"Adding {account.name!r}…",
            "add",
            (account, form.secret.password.text(), form.secret.session_only.isChecked()),
        )

    def test(self) -> None:
        row = self.selected()
        if row is not None:
            self._start(f"Testing {row.name!r}…", "test", (row.name,))

    def change_password(self) -> PasswordDialog | None:
        row = self.selected()
        if row is None or not self._is_account(row):
            return None
        dialog = PasswordDialog(row.name, self)
        dialog.accepted.connect(
            lambda: self._start(
                f"Storing the password of {row.name!r}…",
                "password",
                (row.name, dialog.secret.password.text(), dialog.secret.session_only.isChecked()),
            )
        )
        self.password_dialog = dialog
        dialog.open()
        return dialog

    def remove(self) -> QMessageBox | None:
        row = self.selected()
        if row is None or not self._is_account(row):
            return None
        box = QMessageBox(
            QMessageBox.Icon.Question,
            "Remove account",
            f"Remove account {row.name!r} and its stored password? The calendar or mailbox "
            "on the server is not touched.",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
            self,
        )
        box.setDefaultButton(QMessageBox.StandardButton.No)
        box.accepted.connect(lambda: self._start(f"Removing {row.name!r}…", "remove", (row.name,)))
        self.confirm_box = box
        box.open()
        return box

    def retry_for_session(self) -> None:
        """After the keyring refused a password: keep it in memory until the app quits."""
        if self._retry is None:
            return
        action, args = self._retry
        self._start("Keeping the password for this session only…", action, (*args[:-1], True))

    # -- plumbing ---------------------------------------------------------------------------
    @staticmethod
    def _is_account(row: Row) -> bool:
        return row.kind in ("caldav", "mail")

    def _start(self, text: str, action: str, args: tuple[Any, ...]) -> None:
        self.busy = True
        self.status.setText(text)
        self.session_button.setVisible(False)
        self._retry = (action, args) if action in ("add", "password") else None
        self._update_buttons()
        jobs: dict[str, Callable[..., None]] = {
            "add": self.worker.add,
            "test": self.worker.test,
            "remove": self.worker.remove,
            "password": self.worker.set_password,
        }
        job = jobs[action]
        self._in_pool(lambda: job(*args))

    def _in_pool(self, job: Callable[[], None]) -> None:
        self.pool.start(job)

    def _on_listed(self, rows: object) -> None:
        current = self.selected()
        self.list.clear()
        if isinstance(rows, str):
            self.rows = []
            self.status.setText(rows)
        else:
            assert isinstance(rows, list)
            self.rows = rows
            for r in self.rows:
                QListWidgetItem(r.text, self.list)
            if current is not None:
                self.select(current.name)
        self._update_buttons()

    def _on_result(self, result: object) -> None:
        assert isinstance(result, Result)
        self.busy = False
        self.status.setText(("" if result.ok else "⚠ ") + result.message)
        self.status.setProperty("ok", result.ok)
        self.session_button.setVisible(result.keyring_missing and self._retry is not None)
        if result.ok:
            self._retry = None
        self._update_buttons()
        self.finished.emit(result)

    def _update_buttons(self, *_: object) -> None:
        row = self.selected()
        self.add_button.setEnabled(not self.busy)
        self.test_button.setEnabled(not self.busy and row is not None)
        for b in (self.password_button, self.remove_button):
            b.setEnabled(not self.busy and row is not None and self._is_account(row))
