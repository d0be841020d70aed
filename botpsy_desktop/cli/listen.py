"""`botpsy listen`: record from the microphone until Enter, print the words, then ask them."""

from __future__ import annotations

import argparse
import json
import sys
import threading
from typing import TYPE_CHECKING, Any, TextIO

from botpsy_desktop.app import App
from botpsy_desktop.cli.common import EXIT_CANCELLED, EXIT_ERROR, EXIT_OK, first_run
from botpsy_desktop.cli.turns import add_run_options, opened_session, run_request
from botpsy_desktop.core.text import terminal_safe

if TYPE_CHECKING:
    from botpsy_desktop.speech.capture import Microphone


def add_command(sub: Any) -> None:
    """The `listen` subcommand and its options."""
    listen = sub.add_parser(
        "listen", help="speak a request: record until Enter, show the words, then ask them"
    )
    add_run_options(listen)
    listen.add_argument("--microphones", action="store_true", help="list the microphones and exit")
    listen.add_argument(
        "--words-only",
        action="store_true",
        help="print the recognised words and stop (ask nothing)",
    )
    listen.add_argument(
        "--speak",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="read the answer aloud with espeak-ng (default: the voice.speak_replies setting)",
    )
    listen.add_argument(
        "--speak-to",
        metavar="FILE.wav",
        help="write the spoken answer to a WAV file instead of the loudspeaker (implies --speak)",
    )
    listen.add_argument(
        "--json",
        action="store_true",
        help="print the whole transcript as JSON (with the recognition's timings)",
    )


def _wait_for_enter(stop: threading.Event) -> None:
    try:
        sys.stdin.readline()
    finally:
        stop.set()


def cmd_listen(app: App, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    # speech (numpy, the audio library) is imported for this command only: every other
    # `botpsy` command starts without it
    from botpsy_desktop.speech.recognizer import SpeechError

    voice = app.voice()
    if args.microphones:
        chosen = app.config.voice.microphone
        for m in voice.microphones():
            flag = "*" if m.id == chosen else " "
            print(f"{flag} {m.id}  ({m.name})", file=out)
        return EXIT_OK
    if not args.words_only and not first_run(app, args, err):
        return EXIT_ERROR
    voice.prepare()  # a missing or damaged speech model is said before anyone speaks
    stop = threading.Event()

    def started(mic: Microphone) -> None:
        print(f"Listening ({mic.name}): speak, then press Enter.", file=err, flush=True)
        threading.Thread(target=_wait_for_enter, args=(stop,), daemon=True).start()

    try:
        rec = voice.record(stop, on_start=started)
        print("Recognising ...", file=err, flush=True)
        result = voice.recognise(rec)
    except KeyboardInterrupt:
        print("\nbotpsy: stopped; nothing was sent.", file=err)
        return EXIT_CANCELLED
    except SpeechError as exc:
        print(terminal_safe(f"botpsy: {exc.message}"), file=err)
        if exc.hint:
            print(terminal_safe(exc.hint), file=err)
        return EXIT_ERROR
    words = result.text.strip()
    timing = (
        f"{rec.seconds:.1f} s of speech recognised in {result.elapsed_s:.1f} s by {result.engine}"
        + (f", the model loaded in {result.load_s:.1f} s" if result.load_s else "")
    )
    if args.words_only:
        print(terminal_safe(words), file=out)
        print(timing, file=err)
        return EXIT_OK
    if not args.json:
        print(terminal_safe(f"> {words}"), file=out, flush=True)
    print(timing, file=err, flush=True)
    with opened_session(app, args) as (backend, session):
        code, transcript = run_request(app, args, words, session, out, err, args.json)
        if args.json:
            data = transcript.as_dict()
            data["model"] = backend.name
            data["conversation_id"] = session.conversation_id
            data["speech"] = {
                "engine": result.engine,
                "audio_s": round(rec.seconds, 3),
                "elapsed_s": round(result.elapsed_s, 3),
                "load_s": round(result.load_s, 3),
                "microphone": rec.microphone.name,
            }
            json.dump(data, out, ensure_ascii=False, indent=2)
            out.write("\n")
        if code == EXIT_OK:
            out.flush()
            app.keep_for_next(backend, session.conversation_id)
        speak = app.config.voice.speak_replies if args.speak is None else args.speak
        if (speak or args.speak_to) and transcript.answer:
            note = f"\n{transcript.note}" if transcript.note else ""
            speak_answer(app, transcript.answer + note, err, to=args.speak_to)
        return code


def speak_answer(app: App, text: str, err: TextIO, to: str | None = None) -> None:
    """Read ``text`` aloud (or into the WAV file ``to``) and wait until it has been heard;
    Ctrl+C stops it. A reply that cannot be spoken (no espeak-ng) is said on stderr: the answer
    was printed all the same."""
    from pathlib import Path

    from botpsy_desktop.speech.recognizer import SpeechError
    from botpsy_desktop.speech.tts import WavPlayer

    speaker = app.speaker()
    if to:
        speaker.output = WavPlayer(Path(to))
    failed: list[SpeechError] = []
    if not speaker.say(text, on_done=lambda error: failed.extend([error] if error else [])):
        return
    try:
        while not speaker.wait(0.2):
            pass
    except KeyboardInterrupt:
        speaker.stop()
        print("botpsy: the spoken reply was stopped.", file=err)
        return
    for exc in failed:
        print(terminal_safe(f"botpsy: {exc.message}"), file=err)
        if exc.hint:
            print(terminal_safe(exc.hint), file=err)
