"""The engine in its own process, as the app makes it (``build_app(...).backend()``): it streams,
counts and cancels like the in-process engine, and a crash of the worker (a real signal, mid-
answer or while idle) costs one call, is logged with the worker's stack, and the next call
starts a new worker; crashes in a row back off and say what to do."""

from __future__ import annotations

import logging
import multiprocessing
import os
import pickle
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from botpsy_desktop.app import App, build_app
from botpsy_desktop.core.config import ModelSettings
from botpsy_desktop.core.errors import ModelError
from botpsy_desktop.llm.engines import engine_process
from botpsy_desktop.llm.engines.engine_process import EngineCrashed, EngineProcess, describe_exit
from botpsy_desktop.llm.engines.worker import HOLD_MAX_S, HOLD_S, PieceSender, _Sender
from botpsy_desktop.llm.engines.worker_protocol import (
    CRASH_FILE_ENV,
    Done,
    Item,
    LogLine,
    item_of,
    piece_message,
)
from botpsy_desktop.llm.types import Completion, TextPiece
from tests.helpers.hub import write_gguf
from tests.helpers.models import tiny_qwen35_gguf

pytestmark = pytest.mark.model

MESSAGES = [
    {"role": "system", "content": "You are a test."},
    {"role": "user", "content": "Say something long."},
]
# one thread, the prefill's too: llama.cpp threads waiting on each other crawl on a loaded CPU
SETTINGS = {
    "n_ctx": 1024,
    "temperature": 0.0,
    "max_tokens": 24,
    "seed": 1,
    "n_threads": 1,
    "n_threads_batch": 1,
}


@pytest.fixture
def app(tmp_path: Path) -> Iterator[App]:
    app = build_app(tmp_path / "home")
    app.config.model = ModelSettings(**SETTINGS)  # type: ignore[arg-type]
    yield app
    app.close()


@pytest.fixture
def crash_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "crash-now"
    monkeypatch.setenv(CRASH_FILE_ENV, str(path))  # the workers started from now on see it
    return path


def answer(backend: EngineProcess, cancel: threading.Event | None = None) -> tuple[str, Completion]:
    text, completion = "", None
    for item in backend.complete(MESSAGES, [], enable_thinking=False, cancel=cancel):
        if isinstance(item, TextPiece):
            text += item.text
        else:
            completion = item
    assert isinstance(completion, Completion)
    return text, completion


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads /proc/PID/environ")
@pytest.mark.parametrize("preset", [None, "65536"])
def test_the_worker_starts_with_a_fixed_mmap_threshold_unless_one_is_set(
    app: App, monkeypatch: pytest.MonkeyPatch, preset: str | None
) -> None:
    """glibc's allocator reads MALLOC_MMAP_THRESHOLD_ at start: the app sets it for its engine
    worker (engine_process.WORKER_ENV) and keeps a value the person set."""
    if preset is None:
        monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    else:
        monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", preset)
    backend = app.backend(model=str(tiny_qwen35_gguf()))
    assert isinstance(backend, EngineProcess)
    try:
        assert backend.pid is not None
        environ = Path(f"/proc/{backend.pid}/environ").read_bytes().split(b"\0")
        want = preset or engine_process.WORKER_ENV["MALLOC_MMAP_THRESHOLD_"]
        assert f"MALLOC_MMAP_THRESHOLD_={want}".encode() in environ
        assert answer(backend)[1].stats.completion_tokens > 0
    finally:
        backend.close()
    assert "MALLOC_MMAP_THRESHOLD_" not in os.environ or preset is not None  # not this process


def test_the_app_runs_the_engine_in_a_worker_that_streams_counts_and_cancels(app: App) -> None:
    backend = app.backend(model=str(tiny_qwen35_gguf()))
    assert isinstance(backend, EngineProcess)
    try:
        assert backend.pid is not None and backend.pid != os.getpid()
        assert backend.name == f"llama.cpp:{tiny_qwen35_gguf().name}"
        assert backend.n_ctx == 1024 and backend.hybrid
        assert backend.info.architecture == "qwen35"
        tokens = backend.prompt_tokens(MESSAGES, [], enable_thinking=False)
        assert backend.count_tokens(MESSAGES, [], enable_thinking=False) == len(tokens) > 5
        # the renderer the app sees is the one the worker uses
        prompt = backend.renderer.render(MESSAGES, [], enable_thinking=False).text
        assert backend.tokenize(prompt) == tokens

        text, completion = answer(backend)
        assert completion.finish_reason == "length" and completion.text == text
        assert completion.stats.completion_tokens == 24
        assert backend.last_prompt_tokens == tokens
        # the worker takes the settings the app validated as plain data (the context and token
        # limit above are theirs): pydantic and the settings' models, about 11 MiB of its
        # memory, stay in the app's process
        maps = Path(f"/proc/{backend.pid}/maps")
        if maps.is_file():  # Linux
            text_maps = maps.read_text(encoding="utf-8")
            assert "libllama" in text_maps and "pydantic_core" not in text_maps

        # cancel within a token: set after the first piece
        cancel = threading.Event()
        pieces = 0
        last = None
        for item in backend.complete(MESSAGES, [], enable_thinking=False, cancel=cancel):
            last = item
            if isinstance(item, TextPiece):
                pieces += 1
                cancel.set()
        assert isinstance(last, Completion) and last.finish_reason == "cancelled"
        assert last.stats.completion_tokens < 24

        # a stream dropped half-way is cancelled and read to its end: the next call is whole
        stream = backend.complete(MESSAGES, [], enable_thinking=False)
        assert isinstance(next(stream), TextPiece)
        stream.close()
        again, completion = answer(backend)
        assert again == text and completion.finish_reason == "length"  # greedy: the same
        stats = backend.warm(MESSAGES, [], enable_thinking=False)
        assert stats.prompt_tokens > 0
        assert backend.probe()["completion_tokens"] >= 1
    finally:
        backend.close()
    with pytest.raises(ModelError, match="closed"):
        answer(backend)


@pytest.mark.parametrize("how", ["SIGSEGV", "SIGKILL", "SIGABRT"])
def test_a_crash_mid_answer_costs_that_answer_and_the_next_one_starts_a_new_worker(
    app: App, crash_file: Path, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    backend = app.backend(model=str(tiny_qwen35_gguf()))
    assert isinstance(backend, EngineProcess)
    try:
        first = backend.pid
        answer(backend)  # the model has answered with this layout: a crash is not blamed on it
        crash_file.write_text(how, encoding="utf-8")
        pieces: list[str] = []
        with pytest.raises(EngineCrashed) as err:
            for item in backend.complete(MESSAGES, [], enable_thinking=False):
                if isinstance(item, TextPiece):
                    pieces.append(item.text)
        assert pieces  # it crashed mid-answer, after streaming some of it
        reason = describe_exit(-getattr(signal, how))
        assert err.value.message == (
            f"The model engine stopped unexpectedly ({reason}) while answering. It will "
            "restart for your next request; nothing was lost."
        )
        assert backend.pid is None and not crash_file.exists()
        # the reason and the worker's last words are in the log
        crashed = [r for r in caplog.records if "stopped while answering" in r.getMessage()]
        assert len(crashed) == 1 and reason in crashed[0].getMessage()
        assert "crashing on purpose" in crashed[0].getMessage()
        if how == "SIGSEGV":  # faulthandler's report: the stack of every thread
            assert "Fatal Python error: Segmentation fault" in crashed[0].getMessage()

        text, completion = answer(backend)  # a new worker
        assert completion.finish_reason == "length" and text
        assert backend.pid not in (None, first) and backend.restarts == 1
    finally:
        backend.close()


def test_a_worker_killed_while_idle_is_replaced_without_costing_the_next_call(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    backend = app.backend(model=str(tiny_qwen35_gguf()))
    assert isinstance(backend, EngineProcess)
    try:
        pid = backend.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)  # dead, not yet reaped
        _, completion = answer(backend)
        assert completion.finish_reason == "length" and backend.pid != pid
        assert any(
            "stopped while idle: killed, perhaps for lack of memory" in r.getMessage()
            for r in caplog.records
        )
    finally:
        backend.close()


def test_crashes_in_a_row_back_off_and_say_what_to_do(
    app: App, crash_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = app.backend(model=str(tiny_qwen35_gguf()))
    assert isinstance(backend, EngineProcess)
    try:
        errors = []
        for _ in range(engine_process.CRASHES_BEFORE_BACKOFF):
            crash_file.write_text("SIGKILL", encoding="utf-8")
            with pytest.raises(EngineCrashed) as err:
                answer(backend)
            errors.append(err.value)
        assert "It will restart for your next request" in errors[0].message
        last = errors[-1]
        assert last.message == (
            "The model engine stopped unexpectedly (killed, perhaps for lack of memory) while "
            "answering, 3 times in a row. Nothing was lost."
        )
        assert "`botpsy doctor`" in last.hint and "`botpsy doctor --bundle`" in last.hint
        # the next call does not start a worker during the pause
        with pytest.raises(EngineCrashed, match=r"3 times in a row .* tried again in 30 s"):
            answer(backend)
        assert backend.pid is None
        # after the pause it tries again, and a finished call ends the count
        monkeypatch.setattr(engine_process, "BACKOFF_S", 0.0)
        _, completion = answer(backend)
        assert completion.finish_reason == "length"
        crash_file.write_text("SIGKILL", encoding="utf-8")
        with pytest.raises(EngineCrashed, match="It will restart for your next request"):
            answer(backend)
    finally:
        backend.close()


def test_a_model_llama_cpp_cannot_load_is_refused_with_its_reason(app: App, tmp_path: Path) -> None:
    fake = write_gguf(tmp_path / "not-a-model.gguf", 1 << 20)  # a valid header, no real model
    with pytest.raises(ModelError, match=r"llama\.cpp could not load not-a-model\.gguf"):
        app.backend(model=str(fake))
    assert not list((app.paths.cache_dir / "engine").glob("engine-worker-*.log"))  # cleaned up


def test_a_fault_in_a_models_first_decode_falls_back_to_the_plain_layout_for_good(
    app: App, crash_file: Path
) -> None:
    from botpsy_desktop.doctor import run_checks

    model = str(tiny_qwen35_gguf())
    backend = app.backend(model=model)
    assert isinstance(backend, EngineProcess)
    try:
        chosen = backend.layout  # from llama.cpp's feature report: repack with AMX, else extra
        assert chosen in ("repack", "extra")
        crash_file.write_text("SIGSEGV 0", encoding="utf-8")  # before its first token streams
        with pytest.raises(EngineCrashed) as err:
            answer(backend)
        assert err.value.message == (
            "The model engine stopped unexpectedly (segmentation fault) while answering, the "
            f"first time it ran {tiny_qwen35_gguf().name} with the {chosen} weight layout. It "
            "will restart with the plain layout for your next request (slower, but safe here; "
            "`botpsy doctor` shows it); nothing was lost."
        )
        _, completion = answer(backend)
        assert completion.finish_reason == "length" and backend.layout == "plain"
    finally:
        backend.close()
    # remembered for this model and llama.cpp build: the next load is plain at once
    again = app.backend(model=model)
    try:
        assert isinstance(again, EngineProcess) and again.layout == "plain"
        assert again.fallback is not None and again.fallback["after"] == chosen
    finally:
        again.close()
    app.config.model.path = model
    (engine,) = [c for c in run_checks(app) if c.name == "engine"]
    assert engine.status == "warn" and "weight layout plain, since the " in engine.detail
    assert f"the {chosen} layout crashed llama.cpp (segmentation fault)" in engine.detail
    # a layout the model has already answered with is not blamed for a later crash
    other = build_app(app.paths.config_dir.parent / "other")
    other.config.model = ModelSettings(**SETTINGS)  # type: ignore[arg-type]
    try:
        fresh = other.backend(model=model)
        assert isinstance(fresh, EngineProcess) and fresh.layout == chosen
        try:
            answer(fresh)
            fresh.close()
            fresh = other.backend(model=model)
            crash_file.write_text("SIGSEGV", encoding="utf-8")
            with pytest.raises(EngineCrashed, match="It will restart for your next request"):
                answer(fresh)
            answer(fresh)
            assert fresh.layout == chosen
        finally:
            fresh.close()
    finally:
        other.close()


def test_streamed_text_pieces_travel_compact_and_arrive_as_the_same_items() -> None:
    """A piece of text, one per token, crosses as a plain tuple (cheaper to pickle than an Item
    around a TextPiece); the app's side turns it back into the very item the engine yielded."""
    compact = pickle.dumps(piece_message(7, " h\u00e9", True))
    assert item_of(pickle.loads(compact)) == Item(7, TextPiece(" h\u00e9", True))
    assert len(compact) < len(pickle.dumps(Item(7, TextPiece(" h\u00e9", True))))
    for other in (Done(7), Item(7, TextPiece("x")), LogLine(20, "a", "b"), ("x", 1, "y", False)):
        assert item_of(other) is other


@pytest.mark.skipif(sys.platform == "win32", reason="a named pipe: the connection's own reads")
def test_both_ends_keep_the_connections_framing_however_the_bytes_arrive(tmp_path: Path) -> None:
    """The worker writes a piece as one frame and the app reads whatever the socket holds
    (engine_process._Worker.receive): frames the connection wrote, several read at once, one
    split across writes and one longer than a read come back whole and in order, and a piece
    the worker wrote is what the connection's own ``recv`` reads."""
    ours, theirs = multiprocessing.Pipe()
    worker = engine_process._Worker(cast(Any, None), ours, tmp_path / "stderr")
    theirs.send(Done(1))
    theirs.send(piece_message(2, "a", False))
    assert worker.readable(1.0)
    assert worker.receive() == Done(1)
    assert worker.readable(0.0)  # read with the one before: no system call needed
    assert item_of(worker.receive()) == Item(2, TextPiece("a"))
    big = Item(3, TextPiece("\u00e9x" * 200_000))  # several reads, more than a socket holds
    writer = threading.Thread(target=theirs.send, args=(big,))
    writer.start()
    assert worker.receive() == big
    writer.join()
    assert not worker.readable(0.0)

    data = pickle.dumps(piece_message(4, " h\u00e9", True))
    frame = len(data).to_bytes(4, "big") + data
    os.write(theirs.fileno(), frame[:3])  # the length cut short: not a message yet
    rest = threading.Timer(0.05, lambda: os.write(theirs.fileno(), frame[3:]))
    rest.start()
    assert item_of(worker.receive()) == Item(4, TextPiece(" h\u00e9", True))
    rest.join()

    _Sender(theirs).send_plain(piece_message(5, "b", False))
    assert ours.recv() == piece_message(5, "b", False)
    ours.close()
    theirs.close()


def test_the_pieces_of_tokens_that_come_fast_share_a_message_and_slow_ones_go_at_once() -> None:
    """The worker's side of streaming (``PieceSender``), on given times: each piece goes out
    at once while tokens come slower than ``HOLD_S`` apart (a CPU's pace), the first one
    always; faster (a GPU's pace), a few go together, none held past ``HOLD_MAX_S`` as the
    pace predicts, nor past a slow token, a change of kind or the end."""
    sent: list[tuple[str, int, str, bool]] = []
    pieces = PieceSender(3, sent.append)
    slow = HOLD_S * 2
    for i in range(3):
        pieces.add(f"s{i}", False, 10.0 + i * slow)
    assert sent == [piece_message(3, f"s{i}", False) for i in range(3)]

    sent.clear()
    fast, t = HOLD_S / 2, 20.0
    pieces.add("a", False, t)  # after a slow gap: at once
    for text in "bcdefgh":
        t += fast
        pieces.add(text, False, t)
    pieces.flush()
    assert "".join(m[2] for m in sent) == "abcdefgh"
    assert sent[0] == piece_message(3, "a", False)
    assert 2 < len(sent) < 8  # a few to a message
    # none waited longer than HOLD_MAX_S: a message goes out when its last piece comes
    at = {text: 20.0 + i * fast for i, text in enumerate("abcdefgh")}
    assert all(at[m[2][-1]] - at[m[2][0]] <= HOLD_MAX_S + 1e-9 for m in sent), sent

    sent.clear()
    pieces.add("i", False, t + fast)
    pieces.add("j", False, t + 2 * fast)
    pieces.add("k", False, t + 2 * fast + slow)  # a slow token: what is held goes with it
    assert "".join(m[2] for m in sent) == "ijk"
    pieces.add("l", False, t + 2 * fast + slow + fast)
    pieces.add("m", True, t + 2 * fast + slow + 2 * fast)  # another kind: not joined
    pieces.flush()
    assert [m[2:] for m in sent[-2:]] == [("l", False), ("m", True)]


def test_pieces_streamed_back_to_back_arrive_whole_in_order_in_fewer_messages(app: App) -> None:
    """Through the real worker: 2,000 pieces yielded with no model work between them (far
    faster than any GPU) reach the app as the same text, in order, a few to a message."""
    backend = app.backend(model=str(tiny_qwen35_gguf()))
    assert isinstance(backend, EngineProcess)
    try:
        items = list(backend.stream("bench_stream", (2000,), {}, None))
        assert all(isinstance(item, TextPiece) for item in items)
        assert "".join(item.text for item in items) == " x" * 2000
        assert len(items) < 1000
        text, completion = answer(backend)  # and the next call is whole
        assert completion.text == text and completion.stats.completion_tokens == 24
    finally:
        backend.close()
