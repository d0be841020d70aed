"""`botpsy-desktop`: start the window over the same core as the `botpsy` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from PySide6.QtWidgets import QApplication, QMessageBox

from botpsy_desktop import __version__
from botpsy_desktop.app import build_app
from botpsy_desktop.core.errors import BotpsyError
from botpsy_desktop.ui.style import STYLE


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
    args = parser.parse_args(argv)

    qt = QApplication.instance() or QApplication(sys.argv[:1])
    assert isinstance(qt, QApplication)
    qt.setApplicationName("BotPsy")
    qt.setStyleSheet(STYLE)
    try:
        app = build_app(args.home)
    except BotpsyError as exc:
        QMessageBox.critical(None, "BotPsy cannot start", str(exc))
        return 1
    from botpsy_desktop.ui.main_window import MainWindow

    window = MainWindow(app, model=args.model, replay=args.replay)
    window.show()
    try:
        return int(qt.exec())
    finally:
        app.close()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
