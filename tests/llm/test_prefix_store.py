"""Prefix states on disk: a new process restores them exactly; damage is found before use; LRU."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from botpsy_desktop.llm.cache.prefix_store import (
    MAGIC,
    TRAILER_SIZE,
    PrefixStore,
    file_identity,
    prefix_key,
)
from tests.helpers.models import REPO_ROOT

MiB = 2**20
COMPONENTS = {"model": {"sha256": "ab" * 32, "size": 1}, "n_ctx": 2048, "context": {"type_k": 1}}


def payload(n: int, seed: int = 0) -> npt.NDArray[np.uint8]:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def write(store: PrefixStore, tokens: list[int], size: int, seed: int = 0) -> str:
    key = prefix_key(COMPONENTS, tokens)
    assert store.save(key, tokens, payload(size, seed), {"n_tokens": len(tokens)}) is not None
    return key


# -- the container, without a model ------------------------------------------------------------
def test_an_entry_reads_back_exactly_and_is_keyed_by_tokens_and_settings(tmp_path: Path) -> None:
    store = PrefixStore(tmp_path, bound_bytes=64 * MiB)
    tokens = [5, 6, 7, 248045]
    key = write(store, tokens, 100_000)
    entry = store.load(key, tokens)
    assert entry is not None
    with entry:
        assert entry.tokens.tolist() == tokens
        assert entry.body_bytes == 100_000
        assert entry.read_body() == payload(100_000).tobytes()
        assert Path(entry.body_path).read_bytes()[:100_000] == payload(100_000).tobytes()
        assert entry.meta == {"n_tokens": 4}
    data = store.path_for(key).read_bytes()
    assert data[-TRAILER_SIZE:][:8] == MAGIC and data[:100_000] == payload(100_000).tobytes()
    # one more token, or one setting more, is another key
    assert prefix_key(COMPONENTS, [*tokens, 1]) != key
    assert prefix_key({**COMPONENTS, "n_ctx": 4096}, tokens) != key
    assert store.load(prefix_key(COMPONENTS, [*tokens, 1]), [*tokens, 1]) is None
    assert not list(tmp_path.glob("*.tmp"))  # the temporary file was renamed


def _damage(path: Path, how: str, other: Path) -> None:
    data = bytearray(path.read_bytes())
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "one byte short":
        path.write_bytes(data[:-1])
    elif how == "padded":
        path.write_bytes(bytes(data) + b"\0")
    elif how == "payload bit flipped":
        data[100] ^= 0x01  # llama.cpp's part
        path.write_bytes(bytes(data))
    elif how == "token changed":
        data[-TRAILER_SIZE - 8] ^= 0x01  # the tokens before the trailer, covered by the checksum
        path.write_bytes(bytes(data))
    elif how == "bad magic":
        data[-TRAILER_SIZE : -TRAILER_SIZE + 8] = b"GGUFxxxx"
        path.write_bytes(bytes(data))
    elif how == "newer format":
        data[-TRAILER_SIZE + 8] = 99
        path.write_bytes(bytes(data))
    elif how == "the older format":  # version 1 put its header first
        path.write_bytes(MAGIC + b"\1\0\0\0" + bytes(data[:-TRAILER_SIZE]))
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "another key's file":
        os.replace(other, path)
    else:
        raise AssertionError(how)


@pytest.mark.parametrize(
    "how",
    [
        "truncated",
        "one byte short",
        "padded",
        "payload bit flipped",
        "token changed",
        "bad magic",
        "newer format",
        "empty",
        "another key's file",
        "the older format",
    ],
)
def test_a_damaged_or_mismatched_file_is_discarded_before_use(
    tmp_path: Path, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = PrefixStore(tmp_path, bound_bytes=64 * MiB)
    tokens = list(range(40))
    key = write(store, tokens, 50_000)
    other = store.path_for(write(store, list(range(41)), 50_000, seed=1))
    _damage(store.path_for(key), how, other)
    with caplog.at_level("WARNING"):
        assert store.load(key, tokens) is None
    assert not store.path_for(key).exists()  # removed, never tried again
    assert store.discarded == 1
    assert "discarded" in caplog.text


def test_the_folder_keeps_its_bound_least_recently_used_first(tmp_path: Path) -> None:
    store = PrefixStore(tmp_path, bound_bytes=int(2.5 * MiB))
    a = write(store, [1], MiB, seed=1)
    b = write(store, [2], MiB, seed=2)
    past = time.time() - 100
    os.utime(store.path_for(a), (past, past))
    os.utime(store.path_for(b), (past + 10, past + 10))
    entry = store.load(a, [1])  # a is used: b is now the least recently used
    assert entry is not None
    entry.close()
    c = write(store, [3], MiB, seed=3)
    assert store.contains(a) and store.contains(c) and not store.contains(b)
    stats = store.stats()
    assert stats.entries == 2 and stats.total_bytes <= store.bound_bytes
    d = write(store, [4], MiB, seed=4)  # a was used before c was written: a goes
    assert {store.contains(k) for k in (c, d)} == {True} and not store.contains(a)
    # an entry larger than the whole bound is not written at all
    big = prefix_key(COMPONENTS, [5])
    assert store.save(big, [5], payload(3 * MiB), {}) is None
    assert not store.contains(big) and store.stats().entries == 2


def _writer(folder: str, rounds: int, seed: int) -> None:
    store = PrefixStore(folder, bound_bytes=256 * MiB)
    tokens = list(range(100))
    key = prefix_key(COMPONENTS, tokens)
    for _ in range(rounds):
        store.save(key, tokens, payload(4 * MiB), {"writer": seed})


def test_two_processes_writing_the_same_key_leave_a_valid_file(tmp_path: Path) -> None:
    tokens = list(range(100))
    key = prefix_key(COMPONENTS, tokens)
    spawn = multiprocessing.get_context("spawn")
    writers = [spawn.Process(target=_writer, args=(str(tmp_path), 15, s)) for s in (1, 2)]
    for w in writers:
        w.start()
    reader = PrefixStore(tmp_path, bound_bytes=256 * MiB)
    seen = 0
    while any(w.is_alive() for w in writers):
        entry = reader.load(key, tokens)  # a reader never sees a partial file
        seen += entry is not None
        if entry is not None:
            entry.close()
    for w in writers:
        w.join()
        assert w.exitcode == 0
    assert reader.discarded == 0
    entry = reader.load(key, tokens)
    assert entry is not None
    with entry:
        assert entry.read_body() == payload(4 * MiB).tobytes()
        assert entry.meta["writer"] in (1, 2)
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith(".lock")] == [
        store_name(key)
    ]


def store_name(key: str) -> str:
    return PrefixStore(".", bound_bytes=0).path_for(key).name


def test_a_model_file_is_identified_by_its_checked_hash_or_its_header(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF" + bytes(1000))
    assert file_identity(model, "cd" * 32) == {"sha256": "cd" * 32, "size": 1004}
    linked = file_identity(model)
    assert set(linked) == {"size", "mtime_ns", "head_sha256"}
    model.write_bytes(b"GGUF" + bytes(999) + b"\1")
    assert file_identity(model)["head_sha256"] != linked["head_sha256"]


# -- with a model: a new process restores what another saved -----------------------------------
def _child(model: Path, store: Path, out: Path, *extra: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.helpers.prefix_child",
            str(model),
            str(store),
            str(out),
            *extra,
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO_ROOT,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _assert_close(a: npt.NDArray[np.float32], b: npt.NDArray[np.float32]) -> None:
    assert a.shape == b.shape
    scale = float(np.max(np.abs(a))) or 1.0
    assert float(np.max(np.abs(a - b))) <= 1e-4 * scale
    assert int(np.argmax(a)) == int(np.argmax(b))


def _two_processes(model: Path, tmp_path: Path, *, hybrid: bool = False) -> None:
    # a hybrid model also keeps the tool list's end (its recurrent state alone,
    # llm/engines/engine.py TOOLS): a second, smaller entry beside the prefix's full state
    entries = 2 if hybrid else 1
    store = tmp_path / "prefix-states"
    first = _child(model, store, tmp_path / "fresh.npy")
    assert first["start"] == 0 and first["disk_saves"] == 1 and first["disk_restores"] == 0
    assert first["prefix_tokens"] > 0
    assert len(list(store.glob("*.prefix"))) == entries

    second = _child(model, store, tmp_path / "restored.npy")
    assert second["disk_restores"] == 1 and second["discarded"] == 0
    assert second["start"] == first["prefix_tokens"]  # the prefix was not evaluated
    _assert_close(np.load(tmp_path / "fresh.npy"), np.load(tmp_path / "restored.npy"))

    # a real cache file, damaged: found before use, the prefix evaluated and saved again
    path = max(store.glob("*.prefix"), key=lambda f: f.stat().st_size)  # the full state
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10
    path.write_bytes(bytes(data))
    third = _child(model, store, tmp_path / "after-damage.npy")
    assert third["discarded"] == 1 and third["start"] == 0 and third["disk_saves"] == 1
    _assert_close(np.load(tmp_path / "fresh.npy"), np.load(tmp_path / "after-damage.npy"))

    # other context settings: another key, the file is not used (nor removed)
    other = _child(model, store, tmp_path / "other.npy", "--ctx", "1024")
    assert other["start"] == 0 and other["disk_restores"] == 0 and other["discarded"] == 0
    assert len(list(store.glob("*.prefix"))) == 2 * entries


@pytest.mark.model
def test_a_new_process_restores_the_tiny_hybrid_models_prefix_from_disk(tmp_path: Path) -> None:
    from tests.helpers.models import tiny_qwen35_gguf

    _two_processes(tiny_qwen35_gguf(), tmp_path, hybrid=True)


@pytest.mark.model
def test_a_new_process_restores_smollm2s_prefix_from_disk(tmp_path: Path) -> None:
    from tests.helpers.models import smollm2_gguf

    _two_processes(smollm2_gguf(), tmp_path)


@pytest.mark.model
def test_a_state_llama_cpp_refuses_is_discarded_and_the_prefix_evaluated(tmp_path: Path) -> None:
    """A file whose container is sound but whose state llama.cpp cannot read (here: half of
    a real state, re-checksummed): the sequence is cleared and the prefix evaluated."""
    import llama_cpp

    from botpsy_desktop.core.config import ModelSettings
    from botpsy_desktop.llm.engines.engine import LlamaBackend, _prefix_at
    from tests.helpers.models import tiny_qwen35_gguf
    from tests.helpers.prefix_prompts import SYSTEM, TOOLS, USER

    model = tiny_qwen35_gguf()
    settings = ModelSettings(  # one thread: threads waiting on each other crawl when loaded
        n_ctx=2048, temperature=0.0, max_tokens=8, seed=1, n_threads=1, n_threads_batch=1
    )
    store = PrefixStore(tmp_path, bound_bytes=512 * MiB)
    messages = [SYSTEM, {"role": "user", "content": USER}]

    def evaluate(backend: LlamaBackend) -> tuple[int, npt.NDArray[np.float32]]:
        prompt = backend.renderer.render(messages, TOOLS).text
        tokens, marks = backend._tokenize_continuing(
            prompt, backend._cuts(messages, TOOLS, False, prompt)
        )
        start = backend._prepare(tokens, prefix_at=_prefix_at(marks))
        assert backend._eval(tokens, start, marks, threading.Event())
        backend.flush_prefix_writes()
        ptr = llama_cpp.llama_get_logits_ith(backend._llama._ctx.ctx, -1)
        return start, np.ctypeslib.as_array(ptr, shape=(backend._n_vocab,)).copy()

    writer = LlamaBackend(settings, model, prefix_store=store)
    try:
        start, fresh = evaluate(writer)
        assert start == 0 and writer.disk_saves == 1
        prefix_tokens = writer.tokenize(writer.prefix_text(messages, TOOLS))
        key = writer.prefix_state_key(prefix_tokens)
    finally:
        writer.close()
    entry = store.load(key, prefix_tokens)
    assert entry is not None
    with entry:
        body = entry.read_body()
        meta = entry.meta
    half = body[: len(body) // 2]
    assert store.save(key, prefix_tokens, half, meta) is not None

    reader = LlamaBackend(settings, model, prefix_store=store)  # a new context
    try:
        start, logits = evaluate(reader)
        assert start == 0 and reader.disk_restores == 0 and store.discarded == 1
        _assert_close(fresh, logits)
        assert reader.disk_saves == 1  # and saved whole again
    finally:
        reader.close()
    again = LlamaBackend(settings, model, prefix_store=store)
    try:
        start, logits = evaluate(again)
        assert start == len(prefix_tokens) and again.disk_restores == 1
        _assert_close(fresh, logits)
        # the request path too: the restored prefix is also kept in memory for the next one
        assert again.states is not None and any(c.pinned for c in again.states.checkpoints)
    finally:
        again.close()


def test_the_app_keeps_prefix_states_in_the_profiles_cache_and_doctor_shows_them(
    tmp_path: Path,
) -> None:
    from botpsy_desktop.app import build_app
    from botpsy_desktop.doctor import run_checks

    app = build_app(tmp_path / "home")
    try:
        store = PrefixStore.for_profile(app.paths.cache_dir, app.config.model.prefix_cache_mb)
        assert store is not None and store.bound_bytes == 1024 * MiB
        assert store.folder == app.paths.cache_dir / "prefix-states"
        write(store, [1, 2, 3], 200_000)
        (check,) = [c for c in run_checks(app) if c.name == "prefix cache"]
        assert check.status == "ok"
        assert str(store.folder) in check.detail
        assert "of 1024 MiB" in check.detail and "1 saved prefix state" in check.detail
    finally:
        app.close()
    assert PrefixStore.for_profile(tmp_path, 0) is None
