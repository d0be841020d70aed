"""The bundled `botpsy` program: the command line (PyInstaller runs this file)."""

import sys

from botpsy_desktop.cli import main

sys.exit(main())
