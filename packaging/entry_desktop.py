"""The bundled `botpsy-desktop` program: the window and tray (PyInstaller runs this file)."""

import sys

from botpsy_desktop.ui.main import main

sys.exit(main())
