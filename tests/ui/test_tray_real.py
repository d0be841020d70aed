"""The tray icon on a real X server with a real tray host (Xvfb + trayer), when installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.helpers.services import needs, programs

pytestmark = needs(
    programs("xvfb-run", "trayer"),
    "xvfb-run or trayer (an X server and a tray host)",
    "apt install xvfb xauth trayer",
)

SCRIPT = textwrap.dedent(
    """
    import sys
    from PySide6.QtWidgets import QApplication
    app = QApplication(sys.argv[:1])
    from botpsy_desktop.app import build_app
    from botpsy_desktop.ui.main_window import MainWindow
    from botpsy_desktop.ui.quick import QuickCommandBox
    from botpsy_desktop.ui.tray import Tray
    core = build_app(sys.argv[1])
    window = MainWindow(core)
    quick = QuickCommandBox(window.engine)
    tray = Tray(window, quick)
    app.processEvents()
    print("available", tray.available)
    print("visible", tray.icon is not None and tray.icon.isVisible())
    print("menu", [a.text() for a in tray.menu.actions() if a.text()])
    tray.quit()
    core.close()
    """
)


def test_the_tray_icon_shows_in_a_real_tray(tmp_path: Path) -> None:
    script = tmp_path / "tray.py"
    script.write_text(SCRIPT, encoding="utf-8")
    shell = (
        "trayer --edge top --align right --widthtype request --height 24 & "
        "sleep 1.5; "
        f"{sys.executable} {script} {tmp_path / 'profile'}; code=$?; kill %1; exit $code"
    )
    env = {k: v for k, v in os.environ.items() if k != "QT_QPA_PLATFORM"}
    env["QT_QPA_PLATFORM"] = "xcb"
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    proc = subprocess.run(
        ["xvfb-run", "-a", "-s", "-screen 0 1024x768x24", "bash", "-c", shell],
        capture_output=True,
        text=True,
        timeout=90,
        env=env,
        check=False,
    )
    out = proc.stdout
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "available True" in out and "visible True" in out, out + proc.stderr[-1000:]
    menu = json.loads(out.split("menu ", 1)[1].splitlines()[0].replace("'", '"'))
    assert menu[:2] == ["Open BotPsy", "Quick command…"] and menu[-1] == "Quit BotPsy"
