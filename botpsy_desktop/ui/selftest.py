"""`botpsy-desktop --self-test`: start Qt; check assets, llama.cpp, a model, a request."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import time
import wave
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TextIO

Status = Literal["ok", "skip", "FAIL"]

REQUEST = "List my Documents folder and make a new folder in it for this check."
ANSWER = "Your Documents folder holds notes.txt; I made the Self-test folder."
REPLAY = [
    "<tool_call>\n<function=list_folder>\n<parameter=path>\nDocuments\n</parameter>\n"
    "</function>\n</tool_call>",
    "<tool_call>\n<function=create_folder>\n<parameter=path>\nDocuments/Self-test\n"
    "</parameter>\n</function>\n</tool_call>",
    ANSWER,
]
"""One request: a read-only call the gate lets through, then a change it holds for approval:
after the read, the folder's name is the model's choice, not words the person typed."""


class SelfTestError(Exception):
    """A check failed; the message says what was found."""


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str

    def line(self) -> str:
        return f"{self.status:<4} {self.name}: {self.detail}"


def process_age_s() -> float | None:
    """Seconds since this process started (Linux: from /proc), or None where unknown."""
    try:
        stat = Path("/proc/self/stat").read_text(encoding="ascii")
        start_ticks = int(stat.rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text(encoding="ascii").split()[0])
        return uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def self_test_platform(environ: Mapping[str, str], platform: str) -> str:
    """The Qt platform plugin the self-test starts with.

    With an X display on Linux it is xcb, the plugin a desktop user gets, so that a missing xcb
    library or plugin fails the test instead of being hidden; without a display, offscreen (the
    self-test never needs one). An explicit QT_QPA_PLATFORM is kept.
    """
    chosen = environ.get("QT_QPA_PLATFORM", "").strip()
    if chosen:
        return chosen
    if platform.startswith("linux") and environ.get("DISPLAY"):
        return "xcb"
    return "offscreen"


def loaded_cpu_backend() -> str | None:
    """The file name of the ggml CPU backend this process loaded (Linux), e.g. the variant
    picked at run time for this CPU; None where it cannot be seen."""
    try:
        maps = Path("/proc/self/maps").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    names = sorted(set(re.findall(r"(libggml-cpu[\w.-]*\.so[\d.]*)", maps)))
    return ", ".join(names) or None


class SelfTest:
    """Runs the checks in order against a throw-away profile and prints one line per check."""

    def __init__(self, home: str | None, model: str | None, out: TextIO) -> None:
        self.model = model
        self.out = out
        self.checks: list[Check] = []
        self.keep_profile = home is not None
        self.profile = Path(home).expanduser().resolve() if home else None
        self.window: Any = None
        self.notifier: Any = None
        self.app: Any = None
        self.player: Any = None
        self.qt: Any = None

    # -- running ------------------------------------------------------------------------------
    def run(self) -> int:
        started = time.perf_counter()
        try:
            self.profile = self._make_profile()
        except SelfTestError as exc:
            print(f"FAIL profile: {exc}", file=self.out)
            return 2
        self.out.write(f"botpsy-desktop self-test, profile {self.profile}\n")
        self.out.flush()
        try:
            self._check("qt", self._qt)
            self._check("assets", self._assets)
            self._check("window", self._window)
            self._check("alarms", self._alarms)
            self._check("llama.cpp", self._llama)
            if self.model:
                self._check("model", self._model)
            else:
                self._record(Check("model", "skip", "no --model given (pass a GGUF to run it)"))
            self._check("agent", self._agent)
        finally:
            self._close()
        failed = [c.name for c in self.checks if c.status == "FAIL"]
        took = time.perf_counter() - started
        if failed:
            self.out.write(f"self-test FAILED ({', '.join(failed)}) in {took:.1f} s\n")
        else:
            ok = sum(c.status == "ok" for c in self.checks)
            self.out.write(f"self-test passed: {ok} ok in {took:.1f} s\n")
        self.out.flush()
        return 1 if failed else 0

    def _record(self, check: Check) -> None:
        self.checks.append(check)
        self.out.write(check.line() + "\n")
        self.out.flush()

    def _check(self, name: str, run: Callable[[], str]) -> None:
        try:
            self._record(Check(name, "ok", run()))
        except Exception as exc:  # every failure becomes a line, never a traceback
            from botpsy_desktop.core.errors import BotpsyError

            said = isinstance(exc, SelfTestError | BotpsyError)  # already a sentence
            detail = str(exc) if said else f"{type(exc).__name__}: {exc}"
            self._record(Check(name, "FAIL", detail))

    def _make_profile(self) -> Path:
        if self.profile is None:
            profile = Path(tempfile.mkdtemp(prefix="botpsy-self-test-"))
        else:
            profile = self.profile
            if profile.exists() and (not profile.is_dir() or any(profile.iterdir())):
                raise SelfTestError(
                    f"{profile} is not an empty folder; give --home a new or empty folder "
                    "(the self-test writes a throw-away profile there)"
                )
        documents = profile / "files" / "Documents"
        documents.mkdir(parents=True)
        (documents / "notes.txt").write_text("remember the milk\n", encoding="utf-8")
        (profile / "music").mkdir()
        (profile / "config").mkdir()
        config = {
            "files": {"roots": [str(profile / "files")]},
            "music": {"folders": [str(profile / "music")]},
            "model": {"n_ctx": 16384, "max_tokens": 8, "temperature": 0.0, "seed": 1},
        }
        (profile / "config" / "config.json").write_text(json.dumps(config), encoding="utf-8")
        return profile

    def _close(self) -> None:
        if self.notifier is not None:
            self.notifier.close()
        if self.window is not None:
            self.window.shutdown()
            self.window.close()
            self.window.deleteLater()
        if self.app is not None:
            self.app.close()
        if self.player is not None:
            self.player.close()
        if self.qt is not None:
            self.qt.processEvents()
        if not self.keep_profile and self.profile is not None:
            shutil.rmtree(self.profile, ignore_errors=True)

    def _wait(self, done: Callable[[], bool], timeout_s: float, what: str) -> None:
        from PySide6.QtCore import QEventLoop

        deadline = time.monotonic() + timeout_s
        while not done():
            if time.monotonic() > deadline:
                raise SelfTestError(f"timed out after {timeout_s:.0f} s waiting for {what}")
            self.qt.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 50)
            time.sleep(0.005)

    # -- checks -------------------------------------------------------------------------------
    def _qt(self) -> str:
        import PySide6
        from PySide6.QtCore import qVersion
        from PySide6.QtGui import QImageReader
        from PySide6.QtWidgets import QApplication

        existing = QApplication.instance()
        if existing is None:
            os.environ["QT_QPA_PLATFORM"] = self_test_platform(os.environ, sys.platform)
            existing = QApplication(sys.argv[:1])
        if not isinstance(existing, QApplication):
            raise SelfTestError("a non-widget Qt application is already running")
        self.qt = existing
        formats = {bytes(f.data()).decode() for f in QImageReader.supportedImageFormats()}
        if "png" not in formats:
            raise SelfTestError(f"Qt cannot read PNG images (formats: {sorted(formats)})")
        from PySide6 import QtMultimedia  # noqa: F401  (the music player and alarm sound)

        return (
            f"PySide6 {PySide6.__version__}, Qt {qVersion()}, platform "
            f"{existing.platformName()}, QtMultimedia loaded"
        )

    def _assets(self) -> str:
        from botpsy_desktop.llm.language.prompt import PromptRenderer
        from botpsy_desktop.llm.models.catalog import load_catalog
        from botpsy_desktop.ui.assets import asset
        from botpsy_desktop.ui.icons import (
            APP_SIZES,
            TEMPLATE_SIZES,
            TRAY_SIZES,
            app_icon,
            shipped_pixmaps,
        )

        catalog = load_catalog()
        renderer = PromptRenderer(None)  # the bundled ChatML tools template
        tool = {"type": "function", "function": {"name": "noop", "parameters": {}}}
        prompt = renderer.render([{"role": "user", "content": "hi"}], [tool]).text
        if not renderer.uses_fallback or "noop" not in prompt:
            raise SelfTestError("the bundled chat template did not render the tools")
        for name, sizes in (
            ("botpsy", APP_SIZES),
            ("tray-light", TRAY_SIZES),
            ("tray-dark", TRAY_SIZES),
            ("tray-template", TEMPLATE_SIZES),
        ):
            if not shipped_pixmaps(name, sizes):
                raise SelfTestError(f"the {name} icons are missing or unreadable")
        if app_icon().isNull():
            raise SelfTestError("the app icon is empty")
        sound = asset("sounds/alarm.wav")
        if sound is None:
            raise SelfTestError("assets/sounds/alarm.wav is missing")
        with wave.open(str(sound)) as w:
            seconds = w.getnframes() / w.getframerate()
        return (
            f"catalog.json ({len(catalog.models)} models), templates/chatml_tools.jinja, "
            f"app icon at {len(APP_SIZES)} sizes, tray icons (light, dark, macOS), "
            f"alarm.wav ({seconds:.1f} s)"
        )

    def _window(self) -> str:
        from PySide6.QtWidgets import QLabel

        from botpsy_desktop.app import build_app
        from botpsy_desktop.ui.main_window import MainWindow
        from botpsy_desktop.ui.player import QtPlayer

        if self.qt is None:
            raise SelfTestError("not run: Qt did not start")
        opened = time.perf_counter()
        self.player = QtPlayer()
        self.app = build_app(self.profile, player=self.player)
        if not str(self.app.paths.data_dir).startswith(str(self.profile)):
            raise SelfTestError(f"the profile's data went to {self.app.paths.data_dir}")
        replay = self._replay_file()
        if self.model:
            self.window = MainWindow(self.app, model=self.model)
        else:
            self.window = MainWindow(self.app, replay=str(replay))
        self.window.show()
        self._wait(lambda: self.window.model_label.text() != "Loading model…", 120, "the model")
        label = self.window.model_label.text()
        if label == "No model":
            notes = self.window.chat.widget().findChildren(QLabel, "errorNote")
            said = notes[-1].text().splitlines()[0] if notes else "no reason given"
            raise SelfTestError(f"the window could not load the model: {said}")
        ready = time.perf_counter() - opened
        age = process_age_s()
        since_start = f", {age:.2f} s after the process started" if age is not None else ""
        where = self.qt.platformName()
        return f"shown ({where}) with {label} in {ready:.2f} s{since_start}"

    def _alarms(self) -> str:
        from datetime import timedelta

        from PySide6.QtMultimedia import QMediaDevices, QSoundEffect

        from botpsy_desktop.adapters.alarms import AlarmKind
        from botpsy_desktop.ui.notify import AlarmNotifier, alarm_sound

        if self.app is None or self.app.alarms is None:
            raise SelfTestError("not run: the app did not start")
        service = self.app.alarms
        sound = alarm_sound(self.app.paths.cache_dir / "chime.wav")
        self.notifier = notifier = AlarmNotifier(service, sound, None, self.window)
        service.start()
        service.add(
            AlarmKind.TIMER,
            service.now() + timedelta(seconds=1),
            label="Self-test timer",
            duration=timedelta(seconds=1),
        )
        self._wait(lambda: bool(notifier.windows), 15, "the timer to ring")
        effect = notifier.sound
        if effect is None:
            raise SelfTestError("the alarm sound could not be loaded (QtMultimedia)")
        if QMediaDevices.audioOutputs():
            loading = (QSoundEffect.Status.Null, QSoundEffect.Status.Loading)
            self._wait(lambda: effect.status() not in loading, 10, "the alarm sound to load")
            if effect.status() != QSoundEffect.Status.Ready:
                raise SelfTestError(f"{sound.name} did not load: {effect.status().name}")
            played = f"{sound.name} played"
        else:  # a server or CI machine: QSoundEffect cannot open a file with no device
            played = f"no audio output here, {sound.name} not played"
        notifier.windows[0].dismiss_button.click()
        self._wait(lambda: not service.ringing(), 5, "the timer to stop ringing")
        return f"APScheduler rang a 1 s timer; alarm window shown, {played}, dismissed"

    def _llama(self) -> str:
        from botpsy_desktop.llm.engines import engine

        info = engine.system_info()
        if "CPU" not in info:
            raise SelfTestError(f"llama.cpp has no CPU backend loaded: {info!r}")
        features = [
            m for m in re.findall(r"(\w+) = 1", info) if m not in ("LLAMAFILE", "OPENMP", "REPACK")
        ]
        variant = loaded_cpu_backend()
        picked = f"; CPU backend {variant}" if variant else ""
        return (
            f"llama-cpp-python {engine.llama_cpp_version()}{picked}; "
            f"features {' '.join(features) or 'baseline'}"
        )

    def _model(self) -> str:
        from botpsy_desktop.llm.types import Completion

        if self.app is None:
            raise SelfTestError("not run: the app did not start")
        loading = time.perf_counter()
        backend = self.app.backend(model=self.model)
        try:
            loaded = time.perf_counter() - loading
            messages = [{"role": "user", "content": "Say hello."}]
            done: Completion | None = None
            for piece in backend.complete(messages, [], enable_thinking=False):
                if isinstance(piece, Completion):
                    done = piece
            if done is None or done.stats.completion_tokens == 0:
                raise SelfTestError("the model generated nothing")
            info = backend.info
            return (
                f"{info.path.name} ({info.architecture}, {info.file_type}) loaded in "
                f"{loaded:.2f} s; {done.stats.completion_tokens} tokens at "
                f"{done.stats.decode_tokens_per_s:.0f} tok/s after {done.stats.prefill_s:.2f} s "
                "of prompt"
            )
        finally:
            backend.close()

    def _agent(self) -> str:
        if self.window is None or self.profile is None:
            raise SelfTestError("not run: the window did not start")
        from botpsy_desktop.agent.events import ToolResult

        window = self.window
        window.engine.load("", str(self._replay_file()))
        self._wait(lambda: window.model_label.text().startswith("replay:"), 30, "the replay")
        results: list[ToolResult] = []
        asked: list[str] = []
        window.engine.worker.toolResult.connect(lambda _rid, result: results.append(result))
        started = time.perf_counter()
        window.input.setPlainText(REQUEST)
        window.send()

        def step() -> bool:
            for dialog in list(window.open_dialogs):
                if not dialog.request.decided:
                    asked.append(dialog.request.tool)
                    dialog.approve()  # the user's click
            return not window.busy

        self._wait(step, 60, "the request to finish")
        took = time.perf_counter() - started
        calls = {r.name: r for r in results}
        listing, created = calls.get("list_folder"), calls.get("create_folder")
        if listing is None or not listing.ok or "notes.txt" not in listing.output:
            raise SelfTestError(f"list_folder did not list notes.txt: {listing}")
        if listing.decision != "allowed" or "list_folder" in asked:
            raise SelfTestError("the gate asked before a read-only call")
        if asked != ["create_folder"] or created is None or created.decision != "approved":
            raise SelfTestError(f"the gate did not hold create_folder for approval (asked {asked})")
        folder = self.profile / "files" / "Documents" / "Self-test"
        if not created.ok or not folder.is_dir():
            raise SelfTestError(f"create_folder did not create {folder}: {created.output}")
        bubbles = window.chat.bubbles()
        if not bubbles or bubbles[-1].text != ANSWER:
            raise SelfTestError(f"the answer was not shown: {[b.text for b in bubbles]}")
        saved = window.app.store.conversations()
        if len(saved) != 1 or saved[0].message_count < 4:
            raise SelfTestError(f"the conversation was not saved: {saved}")
        if not (self.profile / "data" / "files-actions.jsonl").is_file():
            raise SelfTestError("the files adapter kept no action log")
        return (
            "list_folder ran unasked (read-only); create_folder waited for approval (the "
            "model named the folder after the read), was approved and made "
            "Documents/Self-test; answer shown, conversation saved "
            f"({took:.2f} s)"
        )

    def _replay_file(self) -> Path:
        assert self.profile is not None
        path = self.profile / "replay.json"
        if not path.exists():
            path.write_text(json.dumps(REPLAY), encoding="utf-8")
        return path


def run_self_test(home: str | None, model: str | None, out: TextIO | None = None) -> int:
    """Run every check; 0 if all passed (a skipped model check included), 1 if any failed.

    A windowed app started without a console (Windows) has no stdout: the lines then go to
    botpsy-self-test.txt in the temporary folder.
    """
    if out is not None:
        return SelfTest(home, model, out).run()
    if sys.stdout is not None:
        return SelfTest(home, model, sys.stdout).run()
    report = Path(tempfile.gettempdir()) / "botpsy-self-test.txt"
    with report.open("w", encoding="utf-8") as stream:
        return SelfTest(home, model, stream).run()
