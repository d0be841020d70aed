"""The pinned PySide6 survives many signal emits (PySide6 6.12.0 lost a reference to True on
every Python ``Signal.emit()`` and aborted the interpreter after a few hundred of them: the
window streams replies through signals, so a long session would have crashed it)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent(
    """
    import sys

    from PySide6.QtCore import QCoreApplication, QObject, Signal

    class Emitter(QObject):
        text = Signal(str)
        bare = Signal()
        pair = Signal(int, bool)

    app = QCoreApplication([])
    emitter = Emitter()
    got = []
    emitter.text.connect(got.append)
    emitter.bare.connect(lambda: got.append(None))
    emitter.pair.connect(lambda n, flag: got.append(n))
    before = sys.getrefcount(True)
    for i in range(3000):
        emitter.text.emit("token")
        emitter.bare.emit()
        emitter.pair.emit(i, True)
    assert len(got) == 9000, len(got)
    drift = before - sys.getrefcount(True)
    print("drift", drift)
    sys.exit(0 if abs(drift) < 100 else 3)
    """
)


def test_thousands_of_signal_emits_keep_the_interpreter_alive() -> None:
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    done = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr[-2000:])
    assert "drift" in done.stdout
