"""The bundled `botpsy-desktop` program: the window and tray (PyInstaller runs this file)."""

import sys

if len(sys.argv) > 1 and sys.argv[1] == "--engine-worker":  # the engine's worker process
    from botpsy_desktop.llm.engines.worker import main as worker_main

    sys.exit(worker_main(sys.argv[1:]))

if len(sys.argv) > 1 and sys.argv[1] == "--speech-worker":  # whisper.cpp's worker process
    from botpsy_desktop.speech.whisper_worker import main as speech_main

    sys.exit(speech_main(sys.argv[2:]))

if len(sys.argv) > 1 and sys.argv[1] == "--sphinx-worker":  # PocketSphinx's worker process
    from botpsy_desktop.speech.sphinx_worker import main as sphinx_main

    sys.exit(sphinx_main(sys.argv[2:]))

from botpsy_desktop.ui.main import main

sys.exit(main())
