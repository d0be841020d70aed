"""`botpsy-desktop`: the window, tray and quick-command box over the same core as `botpsy`."""

from __future__ import annotations

import argparse
import getpass
import hashlib
import logging
import sys
from collections.abc import Sequence

from PySide6.QtCore import QByteArray
from PySide6.QtNetwork import QLocalServer, QLocalSocket
from PySide6.QtWidgets import QApplication, QMessageBox

from botpsy_desktop import __version__
from botpsy_desktop.app import build_app
from botpsy_desktop.core.errors import BotpsyError
from botpsy_desktop.core.paths import Paths
from botpsy_desktop.ui.icons import app_icon
from botpsy_desktop.ui.style import style_for


def instance_name(paths: Paths) -> str:
    """One running app per user and profile; a second start hands its request over."""
    key = f"{getpass.getuser()}:{paths.data_dir}".encode()
    return f"botpsy-desktop-{hashlib.sha256(key).hexdigest()[:16]}"


def hand_over(name: str, message: str) -> bool:
    """Send ``message`` ("show" or "quick") to a running instance; False if none answers."""
    socket = QLocalSocket()
    socket.connectToServer(name)
    if not socket.waitForConnected(300):
        return False
    socket.write(QByteArray(message.encode()))
    socket.waitForBytesWritten(300)
    socket.disconnectFromServer()
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="botpsy-desktop", description="The BotPsy desktop assistant."
    )
    parser.add_argument("--version", action="version", version=f"botpsy-desktop {__version__}")
    parser.add_argument(
        "--home", metavar="DIR", help="profile folder (default: $BOTPSY_HOME or the user's folders)"
    )
    parser.add_argument("--model", metavar="PATH", help="GGUF model to load")
    parser.add_argument("--replay", metavar="FILE", help="replay raw model output instead")
    parser.add_argument(
        "--minimized",
        action="store_true",
        help="start in the tray without showing the window (used at login)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="open the quick-command box (of the running app, if there is one); "
        "bind this to a keyboard shortcut in your desktop's settings",
    )
    parser.add_argument(
        "--approvals",
        action="store_true",
        help="show the actions waiting for your approval (in the running app, if there is one)",
    )
    parser.add_argument(
        "--self-test",
        action="store_true",
        help="check this installation without a display (assets, llama.cpp, --model if given, "
        "one replayed request) in a throw-away profile (--home: a new folder to keep it in); "
        "one line per check, exit status 1 if any fails",
    )
    args = parser.parse_args(argv)
    if args.self_test:
        from botpsy_desktop.ui.selftest import run_self_test

        return run_self_test(args.home, args.model)

    qt = QApplication.instance() or QApplication(sys.argv[:1])
    assert isinstance(qt, QApplication)
    qt.setApplicationName("BotPsy")
    qt.setDesktopFileName("botpsy-desktop")  # Wayland: the installed menu entry and its icon
    qt.setWindowIcon(app_icon())

    name = instance_name(Paths.resolve(args.home))
    if hand_over(name, "quick" if args.quick else "approvals" if args.approvals else "show"):
        return 0
    from botpsy_desktop.ui.player import QtPlayer

    player = QtPlayer()  # the window's own: closed here, after the app
    try:
        app = build_app(args.home, player=player)
    except BotpsyError as exc:
        player.close()
        QMessageBox.critical(None, "BotPsy cannot start", str(exc))
        return 1
    from botpsy_desktop.agent.logs import setup_logging

    setup_logging(app.paths, app.config.logs, app.secrets.known_values, face="window")
    from botpsy_desktop.ui.settings import system_is_dark

    qt.setStyleSheet(style_for(app.config.ui.theme, system_is_dark()))
    from botpsy_desktop.ui.main_window import MainWindow
    from botpsy_desktop.ui.notify import AlarmNotifier, alarm_sound
    from botpsy_desktop.ui.quick import QuickCommandBox
    from botpsy_desktop.ui.tray import Tray

    window = MainWindow(app, model=args.model, replay=args.replay)
    quick = QuickCommandBox(window.engine)
    tray = Tray(window, quick)
    window.hide_on_close = tray.available and app.config.ui.close_to_tray
    qt.setQuitOnLastWindowClosed(not window.hide_on_close)

    notifier = None
    approval_notes = None
    if app.alarms is not None:
        # alarms ring while the app runs, window closed or not; missed ones are listed at start
        sound = alarm_sound(app.paths.cache_dir / "chime.wav")  # shipped, or generated
        from botpsy_desktop.ui.desktop_notify import FreedesktopNotifications

        # native notifications while the window is hidden, with buttons: the desktop's D-Bus
        # notification server (Linux), Windows' toasts, macOS' notifications; else the tray's
        desktop = FreedesktopNotifications(parent=window)
        notifier = AlarmNotifier(app.alarms, sound, tray.icon, window, desktop=desktop)
        from botpsy_desktop.agent.approval_notes import ApprovalNotifications
        from botpsy_desktop.agent.routines import catch_up
        from botpsy_desktop.ui.routines import RoutineRunner

        # routines run their request on the window's engine (background runs), never ring;
        # their approvals are stored (shared with `botpsy daemon` and `botpsy approvals`)
        queue = app.approvals()
        runner = RoutineRunner(
            window.engine,
            notifier,
            app.store,
            app.alarms,
            think=app.config.model.think,
            parent=window,  # kept alive (and ended) with the window
            queue=queue,
        )
        # a waiting approval raises a notification (Approve / Deny / Open where offered)

        def open_approvals(_stored: object) -> None:
            tray.show_window()
            window.show_approvals()

        runner.openRequested.connect(open_approvals)
        approval_notes = ApprovalNotifications(
            queue, desktop.client, open_app=runner.openRequested.emit, tz=app.alarms.tz
        )
        tray.native_approvals = lambda: desktop.available  # else the tray's message says it
        missed = app.alarms.start()
        if app.restores is not None:
            app.restores.catch_up(missed)  # ways back ("mute for an hour") due while closed
        if notifier.missed_text(missed):
            window.show_missed(notifier.missed_text(missed))
        for broken in app.alarms.unreadable():  # skipped; the others ring
            window.show_banner(f"{broken.line()[0].upper()}{broken.line()[1:]}. {broken.hint()}")
        for fired in catch_up(app.alarms, missed):  # missed routines that catch up run once
            runner.run(fired)
        queue.watch(adopt=True)  # parked runs of ended processes go on here once decided

    from botpsy_desktop.ui.tool_servers import start_serving

    # our tools for other apps (Settings > Tool servers), approvals in this window's queue
    serving = start_serving(app)
    app.start_indexing()  # the documents index catches up in a background thread (not Qt's)

    from botpsy_desktop.ui.hotkey import GlobalShortcut

    # the global shortcut for the quick box (X11); elsewhere the reason is logged and shown in
    # the settings, and `botpsy-desktop --quick` can be bound in the desktop's own settings
    shortcut = GlobalShortcut(window)
    shortcut.activated.connect(quick.shortcut_popup)
    window.global_shortcut = shortcut
    problem = shortcut.start(app.config.ui.quick_shortcut)
    if problem:
        logging.getLogger("botpsy_desktop").info("global shortcut: %s", problem)

    server = QLocalServer()
    QLocalServer.removeServer(name)  # a stale socket left by a crash

    def on_connection() -> None:
        conn = server.nextPendingConnection()
        if conn is None:
            return
        conn.waitForReadyRead(300)
        message = bytes(conn.readAll().data()).decode(errors="replace").strip()
        if message == "quick":
            quick.shortcut_popup()
        elif message == "approvals":
            tray.show_window()
            window.show_approvals()
        else:
            tray.show_window()
        conn.disconnectFromServer()

    server.newConnection.connect(on_connection)
    server.listen(name)

    if args.quick:
        quick.shortcut_popup()
    elif not (args.minimized and tray.available):
        window.show()
    if args.approvals:
        window.show_approvals()
    try:
        return int(qt.exec())
    finally:
        shortcut.stop()
        if serving is not None:
            serving.stop()
        window.shutdown()
        if notifier is not None:
            notifier.close()
            if approval_notes is not None:
                approval_notes.close()
            if notifier.desktop is not None:
                notifier.desktop.shutdown()
        server.close()
        app.close()
        player.close()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
