"""`python -m botpsy_desktop.cli`: the `botpsy` command."""

import sys

from botpsy_desktop.cli import main

sys.exit(main())
