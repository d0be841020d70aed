"""Settings > Tool servers: add, edit, import, test, status, per-tool switches and trust (MCP)."""

from __future__ import annotations

import logging
import shlex
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Qt, QThreadPool, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QListWidget,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from botpsy_desktop.adapters.mcp import (
    RemoteTool,
    ServeConfig,
    ServerConfig,
    ServerHub,
    ToolSwitch,
    default_import_sources,
    hint_words,
    namespaced,
)
from botpsy_desktop.agent.mcp_serve import HttpService, ServeSettings, ToolServer
from botpsy_desktop.app import App
from botpsy_desktop.core.errors import BotpsyError
from botpsy_desktop.core.tools import Effect

log = logging.getLogger(__name__)
RESTART_NOTE = "Changes to servers and tools apply to the next request after a restart."


def start_serving(app: App) -> HttpService | None:
    """Offer our tools to other apps while the window runs, when the user switched it on.

    Calls that ask wait in this window's approval queue (the gate's inbox)."""
    if app.tool_servers is None:
        return None
    book = app.tool_servers.book
    try:
        serve = book.serve_config()
        if not serve.window:
            return None
        token = book.serve_token()
    except BotpsyError as exc:
        log.warning("serving tools: %s", exc)
        return None
    settings = ServeSettings(
        allow_approvals=serve.allow_approvals,
        approval_timeout_s=app.config.agent.background_approval_timeout_s or 600.0,
        tool_timeout_s=app.config.agent.tool_timeout_s,
    )
    tools = ToolServer(app.registry, app.gate, settings, secrets=app.secrets.known_values)
    service = HttpService(tools, token, serve.port)
    if not service.start():
        return None
    log.info("serving tools to other apps at %s", service.url)
    return service


class ToolServersWorker(QObject):
    """File, keyring and process work of the panel, run on pool threads; results by signal."""

    listed = Signal(object)  # list[tuple[ServerConfig, list[RemoteTool] | None, str]] or str
    done = Signal(bool, str)

    def __init__(self, hub: ServerHub) -> None:
        super().__init__()
        self.hub = hub

    def load(self) -> None:
        try:
            servers = self.hub.book.load()
        except BotpsyError as exc:
            self.listed.emit(str(exc))
            return
        self.listed.emit([(s, self.hub.cached(s.name), self.hub.status(s.name)) for s in servers])

    def run(self, job: Callable[[], str]) -> None:
        try:
            message = job()
        except BotpsyError as exc:
            self.done.emit(False, str(exc))
        except Exception as exc:  # a job must never take the window down
            self.done.emit(False, f"{type(exc).__name__}: {exc}")
        else:
            self.done.emit(True, message)
        self.load()


class ServerForm(QDialog):
    """Add or edit one server: a command (stdio) or an address (streamable HTTP)."""

    def __init__(self, parent: QWidget, server: ServerConfig | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Edit tool server" if server else "Add a tool server")
        form = QFormLayout(self)
        self.name = QLineEdit(server.name if server else "")
        self.name.setReadOnly(server is not None)
        self.command = QLineEdit(
            shlex.join([server.command, *server.args]) if server and server.command else ""
        )
        self.command.setPlaceholderText("e.g. uvx mcp-server-time")
        self.url = QLineEdit(server.url if server else "")
        self.url.setPlaceholderText("or an address, e.g. https://example.org/mcp")
        self.token = QLineEdit()
        self.token.setEchoMode(QLineEdit.EchoMode.Password)
        self.token.setPlaceholderText("kept in the keyring, never in the file")
        self.domain = QLineEdit(server.domain if server else "")
        self.domain.setPlaceholderText("default: the server's name")
        self.trust = QCheckBox("Trust this server's read-only hints (its own claims)")
        self.trust.setChecked(bool(server and server.trust_read_only_hints))
        form.addRow("Name:", self.name)
        form.addRow("Command:", self.command)
        form.addRow("Address:", self.url)
        form.addRow("Bearer token:", self.token)
        form.addRow("Domain:", self.domain)
        form.addRow(self.trust)
        self.error = QLabel("")
        self.error.setWordWrap(True)
        form.addRow(self.error)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.accepted.connect(self._accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)
        self.original = server
        self.result_server: ServerConfig | None = None

    def _accept(self) -> None:
        try:
            parts = shlex.split(self.command.text().strip())
        except ValueError as exc:
            self.error.setText(f"The command cannot be read: {exc}.")
            return
        headers = dict(self.original.headers) if self.original else {}
        if self.token.text().strip():
            headers["Authorization"] = f"Bearer {self.token.text().strip()}"
        try:
            base = self.original or ServerConfig(self.name.text().strip(), command="placeholder")
            self.result_server = replace(
                base,
                command=parts[0] if parts else "",
                args=tuple(parts[1:]),
                url=self.url.text().strip(),
                headers=headers if self.url.text().strip() else {},
                domain=self.domain.text().strip(),
                trust_read_only_hints=self.trust.isChecked(),
            )
        except BotpsyError as exc:
            self.error.setText(str(exc))
            return
        self.accept()


class ToolServersPanel(QWidget):
    """The servers, each one's status and tools; switches and trust saved at once."""

    token_ready = Signal(str)  # the serving token, read off the GUI thread

    def __init__(self, app: App) -> None:
        super().__init__()
        self.setObjectName("toolServersPanel")
        self.app = app
        assert app.tool_servers is not None
        self.hub = app.tool_servers
        self.rows: list[tuple[ServerConfig, list[RemoteTool] | None, str]] = []
        layout = QVBoxLayout(self)
        intro = QLabel(
            "Tool servers (MCP) add tools from other programs, such as Claude Desktop's or "
            "LM Studio's servers. Their tools ask before every call unless you declare that one "
            "only reads; what a server says about its own tools is shown, not trusted."
        )
        intro.setWordWrap(True)
        layout.addWidget(intro)
        self.list = QListWidget()
        self.list.setMaximumHeight(110)
        self.list.currentRowChanged.connect(self._show_selected)
        layout.addWidget(self.list)
        row = QHBoxLayout()
        self.add_button = QPushButton("Add…")
        self.edit_button = QPushButton("Edit…")
        self.import_button = QPushButton("Import…")
        self.test_button = QPushButton("Test")
        self.remove_button = QPushButton("Remove")
        for b in (
            self.add_button,
            self.edit_button,
            self.import_button,
            self.test_button,
            self.remove_button,
        ):
            row.addWidget(b)
        row.addStretch(1)
        layout.addLayout(row)
        self.enabled = QCheckBox("Use this server")
        self.trust = QCheckBox("Trust this server's read-only hints (its own claims decide)")
        self.enabled.clicked.connect(self._save_switches)
        self.trust.clicked.connect(self._save_switches)
        layout.addWidget(self.enabled)
        layout.addWidget(self.trust)
        self.tools = QTableWidget(0, 3)
        self.tools.setHorizontalHeaderLabels(
            ["Tool (on/off)", "Runs without asking", "Server says"]
        )
        header = self.tools.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)
        self.tools.verticalHeader().setVisible(False)
        self.tools.itemChanged.connect(self._tool_changed)
        layout.addWidget(self.tools, 1)
        serve_row = QHBoxLayout()
        self.serve = QCheckBox("Offer my read-only tools to other apps on port")
        self.serve_port = QSpinBox()
        self.serve_port.setRange(1024, 65535)
        self.serve_approvals = QCheckBox("and tools that ask (calls wait in Approvals)")
        self.copy_token = QPushButton("Copy token")
        for w in (self.serve, self.serve_port, self.serve_approvals, self.copy_token):
            serve_row.addWidget(w)
        serve_row.addStretch(1)
        layout.addLayout(serve_row)
        self.serve.clicked.connect(self._save_serve)
        self.serve_approvals.clicked.connect(self._save_serve)
        self.serve_port.editingFinished.connect(self._save_serve)
        self.copy_token.clicked.connect(self._copy_token)
        self.status = QLabel(RESTART_NOTE)
        self.status.setWordWrap(True)
        layout.addWidget(self.status)

        self.add_button.clicked.connect(self.add)
        self.edit_button.clicked.connect(self.edit)
        self.import_button.clicked.connect(self.import_)
        self.test_button.clicked.connect(self.test)
        self.remove_button.clicked.connect(self.remove)
        self.worker = ToolServersWorker(self.hub)  # no parent: outlives a closed panel's jobs
        self.worker.listed.connect(self._on_listed)
        self.worker.done.connect(self._on_done)
        self.token_ready.connect(self._on_token)
        self.pool = QThreadPool.globalInstance()
        self._filling = False
        self.busy = False
        self._book_lock = threading.Lock()  # one change of mcp.json at a time
        self.refresh()

    # -- jobs -------------------------------------------------------------------------------
    def refresh(self) -> None:
        self.pool.start(self.worker.load)

    def _job(self, text: str, job: Callable[[], str]) -> None:
        self.busy = True
        self.status.setText(text)
        self.pool.start(lambda: self.worker.run(job))

    def selected(self) -> tuple[ServerConfig, list[RemoteTool] | None, str] | None:
        i = self.list.currentRow()
        return self.rows[i] if 0 <= i < len(self.rows) else None

    def add(self) -> ServerForm:
        form = ServerForm(self)
        form.accepted.connect(lambda: self._save_form(form, new=True))
        self.form = form
        form.open()
        return form

    def edit(self) -> ServerForm | None:
        row = self.selected()
        if row is None:
            return None
        form = ServerForm(self, row[0])
        form.accepted.connect(lambda: self._save_form(form, new=False))
        self.form = form
        form.open()
        return form

    def _save_form(self, form: ServerForm, *, new: bool) -> None:
        server = form.result_server
        if server is None:
            return

        def job() -> str:
            book = self.hub.book
            if new:
                book.add(server)
            else:
                book.update(server)
            tools = self.hub.refresh(book.get(server.name))
            return f"{server.name}: saved; {len(tools)} tool(s) listed. {RESTART_NOTE}"

        self._job(f"Saving and testing {server.name!r}…", job)

    def import_(self, path: str | None = None) -> None:
        if path is None:
            found = default_import_sources()
            start = str(found[0]) if found else str(Path.home())
            path, _ = QFileDialog.getOpenFileName(
                self, "Import tool servers (claude_desktop_config.json, mcp.json)", start, "*.json"
            )
        if not path:
            return
        chosen = Path(path)

        def job() -> str:
            added = self.hub.book.import_file(chosen)
            for name in added:
                self.hub.forget(name)
            return f"Imported {', '.join(added) or 'nothing new'} from {chosen.name}; test each."

        self._job(f"Importing {chosen.name}…", job)

    def test(self) -> None:
        row = self.selected()
        if row is None:
            return
        server = row[0]

        def job() -> str:
            tools = self.hub.refresh(server)
            names = ", ".join(t.name for t in tools) or "no tools"
            return f"{server.name}: ok, {len(tools)} tool(s): {names}."

        self._job(f"Starting {server.name!r} and listing its tools…", job)

    def remove(self) -> None:
        row = self.selected()
        if row is None:
            return
        name = row[0].name

        def job() -> str:
            self.hub.book.remove(name)
            self.hub.forget(name)
            return f"Removed {name}."

        self._job(f"Removing {name!r}…", job)

    # -- switches ---------------------------------------------------------------------------
    def _save_switches(self) -> None:
        row = self.selected()
        if row is None:
            return
        enabled, trust = self.enabled.isChecked(), self.trust.isChecked()
        self._job(
            "Saving…",
            lambda: self._change(
                row[0].name, lambda s: replace(s, enabled=enabled, trust_read_only_hints=trust)
            ),
        )

    def _change(self, name: str, change: Callable[[ServerConfig], ServerConfig]) -> str:
        """Apply ``change`` to the server as saved now, not as last listed: a second switch
        flipped before the first one's save was listed again must not undo the first."""
        with self._book_lock:
            self.hub.book.update(change(self.hub.book.get(name)))
        return RESTART_NOTE

    def _tool_changed(self, item: QTableWidgetItem) -> None:
        row = self.selected()
        if self._filling or row is None or item.column() > 1:
            return
        server = row[0]
        first, second = self.tools.item(item.row(), 0), self.tools.item(item.row(), 1)
        if first is None or second is None:
            return
        name = str(first.data(Qt.ItemDataRole.UserRole))
        on = first.checkState() == Qt.CheckState.Checked
        read = second.checkState() == Qt.CheckState.Checked

        def switched(current: ServerConfig) -> ServerConfig:
            previous = current.switch(name).effects
            effects = frozenset({Effect.READ}) if read else None
            if not read and previous is not None and previous != frozenset({Effect.READ}):
                effects = previous  # declared otherwise in the file: keep it
            return current.with_tool(name, ToolSwitch(enabled=on, effects=effects))

        self._job("Saving…", lambda: self._change(server.name, switched))

    def _save_serve(self) -> None:
        serve = ServeConfig(
            window=self.serve.isChecked(),
            port=self.serve_port.value(),
            allow_approvals=self.serve_approvals.isChecked(),
        )

        def job() -> str:
            self.hub.book.save_serve(serve)
            if serve.window:
                self.hub.book.serve_token()  # made now, so it can be copied
            return "Serving to other apps changes at the next start of the window."

        self._job("Saving…", job)

    def _copy_token(self) -> None:
        def job() -> str:
            self.token_ready.emit(self.hub.book.serve_token())
            return (
                "The bearer token is on the clipboard: other apps send it as "
                "'Authorization: Bearer TOKEN'."
            )

        self._job("Reading the token from the keyring…", job)

    def _on_token(self, token: str) -> None:
        clipboard = QGuiApplication.clipboard()
        if clipboard is not None:
            clipboard.setText(token)

    # -- display ----------------------------------------------------------------------------
    def _on_listed(self, rows: object) -> None:
        current = self.selected()
        self._show_serve()
        self.list.clear()
        if isinstance(rows, str):
            self.rows = []
            self.status.setText(rows)
            return
        assert isinstance(rows, list)
        self.rows = rows
        for server, tools, status in self.rows:
            state = "on" if server.enabled else "off"
            count = "not listed yet" if tools is None else f"{len(tools)} tools"
            trust = ", trusts its hints" if server.trust_read_only_hints else ""
            self.list.addItem(
                f"{server.name} [{state}] — {server.transport}: {server.where()} — "
                f"{count}, {status}{trust}"
            )
        names = [r[0].name for r in self.rows]
        if current is not None and current[0].name in names:
            self.list.setCurrentRow(names.index(current[0].name))
        elif self.rows:
            self.list.setCurrentRow(0)
        self._show_selected()

    def _show_selected(self, *_: Any) -> None:
        row = self.selected()
        self._filling = True
        try:
            self.tools.setRowCount(0)
            for b in (self.edit_button, self.test_button, self.remove_button):
                b.setEnabled(row is not None and not self.busy)
            self.enabled.setEnabled(row is not None)
            self.trust.setEnabled(row is not None)
            if row is None:
                return
            server, tools, _status = row
            self.enabled.setChecked(server.enabled)
            self.trust.setChecked(server.trust_read_only_hints)
            for remote in tools or []:
                switch = server.switch(remote.name)
                i = self.tools.rowCount()
                self.tools.insertRow(i)
                name = QTableWidgetItem(namespaced(server.name, remote.name))
                name.setData(Qt.ItemDataRole.UserRole, remote.name)
                name.setToolTip(remote.description)
                name.setFlags(Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsUserCheckable)
                name.setCheckState(
                    Qt.CheckState.Checked if switch.enabled else Qt.CheckState.Unchecked
                )
                read = QTableWidgetItem("I declare it only reads")
                read.setFlags(Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsUserCheckable)
                declared_read = switch.effects == frozenset({Effect.READ})
                read.setCheckState(
                    Qt.CheckState.Checked if declared_read else Qt.CheckState.Unchecked
                )
                said = QTableWidgetItem(hint_words(remote.annotations) or "nothing")
                said.setFlags(Qt.ItemFlag.ItemIsEnabled)
                self.tools.setItem(i, 0, name)
                self.tools.setItem(i, 1, read)
                self.tools.setItem(i, 2, said)
        finally:
            self._filling = False

    def _show_serve(self) -> None:
        try:
            serve = self.hub.book.serve_config()
        except BotpsyError:
            serve = ServeConfig()
        self.serve.setChecked(serve.window)
        self.serve_port.setValue(serve.port)
        self.serve_approvals.setChecked(serve.allow_approvals)

    def _on_done(self, ok: bool, message: str) -> None:
        self.busy = False
        self.status.setText(message if ok else f"Failed: {message}")
        self._show_selected()
