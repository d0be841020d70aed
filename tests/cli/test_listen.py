"""`botpsy listen` end to end through the real CLI: a WAV played into a virtual microphone (a
PulseAudio null sink remapped into a source) becomes the person's request and sets a timer.

The words come from the "replay" recogniser, a labelled test stand-in behind the same
Recognizer interface (botpsy_desktop/speech/replay.py): no speech model can be downloaded
here, so these tests check the microphone, the CLI, the gate and the agent, not recognition.
The whisper.cpp engine is checked for what can be checked without its model: nothing loads
before use, a missing model names `botpsy model pull`, a damaged one is refused before anyone
speaks, and a file that crashes whisper.cpp costs its worker process, not the app.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import numpy as np
import pytest

from botpsy_desktop.adapters.alarms import AlarmKind, AlarmService
from botpsy_desktop.app import build_app
from botpsy_desktop.speech.recognizer import SpeechError
from botpsy_desktop.speech.replay import ReplayRecognizer, read_wav
from botpsy_desktop.speech.tts import speakable
from botpsy_desktop.speech.whisper import WhisperRecognizer
from tests.helpers import desktop_session, voice
from tests.helpers.desktop_session import DesktopSession
from tests.helpers.replay import xml_call
from tests.helpers.services import missing

ROOT = Path(__file__).resolve().parents[2]
WORDS = "set a timer for five minutes"


@pytest.fixture
def session(tmp_path: Path) -> Iterator[DesktopSession]:
    if not desktop_session.available():
        missing("a desktop session (D-Bus, PulseAudio, gsettings, gio)", desktop_session.INSTALL)
    if not voice.available():
        missing("espeak-ng and paplay", voice.INSTALL)
    with desktop_session.desktop_session(tmp_path / "session") as running:
        voice.add_microphone(running)
        yield running


@pytest.fixture
def spoken(tmp_path: Path) -> Path:
    return voice.speak(WORDS, tmp_path / "timer.wav")


def make_profile(tmp_path: Path, session: DesktopSession, **settings: Any) -> Path:
    home = tmp_path / "profile"
    (home / "config").mkdir(parents=True, exist_ok=True)
    config = {
        "files": {"roots": [str(tmp_path)]},
        "device": {"pulse_server": session.pulse_server},
        "alarms": {"time_zone": "UTC"},
        "voice": {"microphone": voice.MIC, **settings},
    }
    (home / "config" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return home


def listen(
    session: DesktopSession,
    home: Path,
    *args: str,
    play: Path | None = None,
    enter: bool = True,
    path: str | None = None,
    python_path: Path | None = None,
) -> tuple[int, str, str]:
    """Run `botpsy listen`; once it listens, play ``play`` into the microphone, then press
    Enter (or not, for the time limit). ``path``: its PATH. Returns (exit code, stdout,
    stderr)."""
    env = {**os.environ, **session.env, "PYTHONPATH": str(ROOT)}
    if python_path is not None:  # modules found there first
        env["PYTHONPATH"] = os.pathsep.join([str(python_path), str(ROOT)])
    if path is not None:
        env["PATH"] = path
    proc = subprocess.Popen(
        [sys.executable, "-m", "botpsy_desktop", "--home", str(home), "listen", *args],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stderr is not None
    said: list[str] = []
    for line in proc.stderr:
        said.append(line)
        if line.startswith("Listening"):
            if play is not None:
                voice.play(session, play)
            if enter:
                proc.stdin.write("\n")
                proc.stdin.flush()
            break
    out, rest = proc.communicate(timeout=120)
    return proc.returncode, out, "".join(said) + rest


def test_a_spoken_request_sets_a_timer(
    tmp_path: Path, session: DesktopSession, spoken: Path
) -> None:
    replay = voice.replay_file(tmp_path, (spoken, WORDS))
    home = make_profile(tmp_path, session, engine="replay", replay_file=str(replay))
    answers = tmp_path / "answers.json"
    turns = [xml_call("set_timer", duration="5 minutes"), "A 5-minute timer is set."]
    answers.write_text(json.dumps(turns), encoding="utf-8")
    code, out, err = listen(
        session, home, "--replay", str(answers), "--json", "--approve", "deny", play=spoken
    )
    assert code == 0, err
    assert "Listening (Test_microphone)" in err
    data = json.loads(out)
    assert data["request"] == WORDS  # the recognised words are the request, as if typed
    [call] = data["tool_calls"]
    # the person's own request: a timer (small, reversible) runs without asking
    assert call["name"] == "set_timer" and call["ok"], call
    assert data["speech"]["microphone"] == "Test_microphone"
    assert data["speech"]["audio_s"] >= 1.0
    store = AlarmService(home / "data" / "alarms.sqlite3", tz=ZoneInfo("UTC"))
    try:
        [timer] = store.alarms()
        assert timer.kind is AlarmKind.TIMER
    finally:
        store.shutdown()
    # nothing of the recording was kept (voice.keep_audio is off)
    assert not list(home.rglob("*.wav"))


ANSWER = "A **5-minute** timer is set: it rings at `12:05`."


def test_speak_to_writes_the_answer_read_aloud(
    tmp_path: Path, session: DesktopSession, spoken: Path
) -> None:
    replay = voice.replay_file(tmp_path, (spoken, WORDS))
    home = make_profile(tmp_path, session, engine="replay", replay_file=str(replay))
    answers = tmp_path / "answers.json"
    answers.write_text(json.dumps([xml_call("set_timer", duration="5 minutes"), ANSWER]), "utf-8")
    reply = tmp_path / "reply.wav"
    code, out, err = listen(
        session, home, "--replay", str(answers), "--speak-to", str(reply), play=spoken
    )
    assert code == 0, err
    assert ANSWER in out
    app = build_app(home)
    try:  # what the answer's words (not its stars and backquotes, nor the tool call) take
        words = voice.voiced_s(*app.speaker().synthesise(speakable(ANSWER)))
        raw = voice.voiced_s(*app.speaker().synthesise(ANSWER))
    finally:
        app.close()
    heard = voice.voiced_s(*voice.read_wav(reply))
    assert words < raw - 0.5
    assert heard > 1.0 and abs(heard - words) <= 0.2, (heard, words)


def test_spoken_replies_without_espeak_say_what_to_install(
    tmp_path: Path, session: DesktopSession, spoken: Path
) -> None:
    replay = voice.replay_file(tmp_path, (spoken, WORDS))
    home = make_profile(
        tmp_path, session, engine="replay", replay_file=str(replay), speak_replies=True
    )
    answers = tmp_path / "answers.json"
    answers.write_text(json.dumps([ANSWER]), "utf-8")
    code, out, err = listen(
        session, home, "--replay", str(answers), play=spoken, path=voice.without_espeak(tmp_path)
    )
    assert code == 0, err  # the answer was given: only the reading of it failed
    assert ANSWER in out
    assert "Spoken replies need espeak-ng, which is not installed" in err
    assert "sudo apt install espeak-ng" in err


def test_words_only_prints_them_and_a_recording_is_kept_only_when_asked(
    tmp_path: Path, session: DesktopSession, spoken: Path
) -> None:
    replay = voice.replay_file(tmp_path, (spoken, WORDS))
    home = make_profile(
        tmp_path, session, engine="replay", replay_file=str(replay), keep_audio=True
    )
    code, out, err = listen(session, home, "--words-only", play=spoken)
    assert code == 0, err
    assert out == WORDS + "\n"
    [kept] = (home / "data" / "recordings").glob("*.wav")
    # the kept recording is what the microphone heard: the replay matches it to the words
    again = voice.replay_file(tmp_path, (kept, "kept"))
    assert ReplayRecognizer(again).transcribe(read_wav(spoken)).text == "kept"


@pytest.mark.parametrize(
    ("heard", "written"),
    [
        ("email ana at example dot org what I have on friday",
         "email ana@example.org what I have on friday"),
        ("move report dot pdf from downloads slash inbox to tilde slash documents",
         "move report.pdf from downloads/inbox to ~/documents"),
    ],
)  # fmt: skip
def test_an_address_or_a_path_said_aloud_comes_out_written(
    tmp_path: Path, session: DesktopSession, spoken: Path, heard: str, written: str
) -> None:
    replay = voice.replay_file(tmp_path, (spoken, heard))
    home = make_profile(tmp_path, session, engine="replay", replay_file=str(replay))
    code, out, err = listen(session, home, "--words-only", play=spoken)
    assert code == 0, err
    assert out == written + "\n"


def test_silence_sends_nothing(tmp_path: Path, session: DesktopSession, spoken: Path) -> None:
    replay = voice.replay_file(tmp_path, (spoken, WORDS))
    home = make_profile(tmp_path, session, engine="replay", replay_file=str(replay))
    code, out, err = listen(session, home, "--replay", str(replay))
    assert code == 1
    assert "Nothing was heard: the microphone Test_microphone gave only silence" in err
    assert "nothing was sent" in err and out == ""


def test_the_time_limit_drops_the_recording(
    tmp_path: Path, session: DesktopSession, spoken: Path
) -> None:
    replay = voice.replay_file(tmp_path, (spoken, WORDS))
    home = make_profile(tmp_path, session, engine="replay", replay_file=str(replay), max_record_s=1)
    code, out, err = listen(session, home, "--replay", str(replay), play=spoken, enter=False)
    assert code == 1
    assert "The recording reached its 1 second limit and was dropped; nothing was sent." in err
    assert out == ""


def test_a_missing_microphone_is_named(tmp_path: Path, session: DesktopSession) -> None:
    home = make_profile(tmp_path, session, engine="replay", replay_file="unused.json")
    config = json.loads((home / "config" / "config.json").read_text("utf-8"))
    config["voice"]["microphone"] = "usb_headset"
    (home / "config" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    code, _out, err = listen(session, home, "--replay", "unused.json")
    assert code == 1
    assert "The microphone 'usb_headset' chosen in the settings is not connected" in err
    assert "test_mic" in err and "Listening" not in err


def test_a_sound_library_without_its_declarations_says_so(
    tmp_path: Path, session: DesktopSession, spoken: Path
) -> None:
    """A soundcard without its C declarations (soundcard/*.py.h, as a bundle made where its
    PyInstaller hook could not load had it) is named as such, not as an unreachable server."""
    import importlib.util

    spec = importlib.util.find_spec("soundcard")  # found, not imported: that would connect
    assert spec is not None and spec.submodule_search_locations
    source = Path(next(iter(spec.submodule_search_locations)))
    site = tmp_path / "site"
    shutil.copytree(source, site / "soundcard", ignore=shutil.ignore_patterns("*.py.h"))
    replay = voice.replay_file(tmp_path, (spoken, WORDS))
    home = make_profile(tmp_path, session, engine="replay", replay_file=str(replay))
    code, out, err = listen(session, home, "--words-only", play=spoken, python_path=site)
    assert code == 1 and out == ""
    assert "The soundcard library is incomplete" in err and "pulseaudio.py.h is missing" in err
    assert "Cannot reach the sound server" not in err


def test_the_microphones_are_listed(tmp_path: Path, session: DesktopSession) -> None:
    home = make_profile(tmp_path, session)
    code, out, err = listen(session, home, "--microphones")
    assert code == 0, err
    assert "* test_mic  (Test_microphone)" in out


def test_a_missing_speech_model_says_how_to_get_it(tmp_path: Path, session: DesktopSession) -> None:
    home = make_profile(tmp_path, session)  # whisper.cpp, whisper-base: not installed here
    code, _out, err = listen(session, home, "--replay", "unused.json")
    assert code == 1
    assert "The speech model Whisper base (multilingual, whisper.cpp) is not installed." in err
    assert "`botpsy model pull whisper-base`" in err
    assert "Listening" not in err  # said before anyone speaks


def test_a_damaged_speech_model_is_refused_before_use(
    tmp_path: Path, session: DesktopSession
) -> None:
    home = make_profile(tmp_path, session, model="whisper-tiny")
    model = home / "data" / "models" / "speech" / "ggml-tiny.bin"
    model.parent.mkdir(parents=True)
    model.write_bytes(b"lmgg" + bytes(1000))  # truncated: a download cut short
    code, _out, err = listen(session, home, "--replay", "unused.json")
    assert code == 1
    assert f"The speech model file {model} is damaged: it has 1,004 bytes" in err
    assert "Download it again with `botpsy model pull whisper-tiny`" in err
    assert "Listening" not in err


def test_the_speech_model_loads_only_when_first_used(tmp_path: Path) -> None:
    app = build_app(tmp_path / "profile")
    try:
        voice_input = app.voice()
        assert voice_input._recognizer is None  # building the app loaded nothing
        with pytest.raises(SpeechError) as raised:
            voice_input.recognizer()
        assert raised.value.kind == "model_missing"
    finally:
        app.close()


def test_a_file_that_crashes_whisper_cpp_costs_only_its_worker(tmp_path: Path) -> None:
    pytest.importorskip("pywhispercpp")
    bad = tmp_path / "ggml-base.bin"
    # the ggml magic, then garbage: whisper.cpp calls ggml_abort() on it (the process dies)
    bad.write_bytes(b"lmgg" + np.random.default_rng(1).bytes(5000))
    rec = WhisperRecognizer(bad, threads=1, pull_hint="Run `botpsy model pull whisper-base`.")
    try:
        assert not rec.loaded
        with pytest.raises(SpeechError) as raised:
            rec.transcribe(np.zeros(16000, dtype=np.float32))
        assert raised.value.kind == "model_damaged"
        assert "could not load the speech model ggml-base.bin" in raised.value.message
        assert raised.value.hint == "Run `botpsy model pull whisper-base`."
    finally:
        rec.close()
