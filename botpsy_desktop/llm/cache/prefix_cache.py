"""Saved recurrent states of a hybrid model, so a prompt's known start is never evaluated twice."""

from __future__ import annotations

import ctypes
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import llama_cpp
import numpy as np
import numpy.typing as npt

from botpsy_desktop.core.errors import ModelError

# Only the recurrent (gated-DeltaNet) part of the sequence: the attention cache is not copied,
# it stays in the context, and a restore cuts it back to the checkpoint's length.
PARTIAL_ONLY = llama_cpp.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
SEQ = 0  # the engine evaluates everything in sequence 0

log = logging.getLogger(__name__)


def _empty() -> npt.NDArray[np.uint8]:
    return np.empty(0, dtype=np.uint8)


@dataclass(eq=False)
class Checkpoint:
    """The recurrent state right after ``tokens`` were evaluated.

    ``text`` is the text those tokens encode, when known (the engine then tokenizes only what
    follows it). ``pinned`` marks the system prompt + tool schemas prefix: it is evicted last.
    ``state`` is the state in memory (empty when it is only on disk); ``file``, when set, holds
    it on disk (see ``StateCache``); ``size`` is its size either way.
    """

    tokens: npt.NDArray[np.intc]
    state: npt.NDArray[np.uint8]
    label: str
    text: str | None = None
    pinned: bool = False
    last_used: int = 0
    file: BinaryIO | None = None
    size: int = 0

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    @property
    def nbytes(self) -> int:
        """The memory its state takes (0 while the state is on disk only)."""
        return int(self.state.nbytes)


def common_prefix(a: npt.NDArray[np.intc], b: npt.NDArray[np.intc]) -> int:
    """How many leading tokens two token arrays share."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if len(diff) else n


class StateCache:
    """Checkpoints of one llama.cpp context's sequence, restored with the PARTIAL_ONLY state API.

    A hybrid model's memory cannot be cut back to an earlier position: its recurrent layers keep
    one state for the whole sequence. A checkpoint saves that state (about 20 MB for BotPsy,
    a few ms); restoring it and cutting the attention cache back to the checkpoint's length puts
    the context exactly where it was after the checkpoint's tokens (logits are bit-identical to
    evaluating the same tokens afresh).

    The attention cache is *not* saved, so a checkpoint is usable only while the context still
    holds its tokens, i.e. while they are a prefix of the evaluated sequence. ``truncate`` is
    called whenever the evaluated sequence is cut back, and forgets every checkpoint beyond the
    cut: invalidation is exact and automatic. Whatever changes the tokens (another system prompt
    or tool set, another conversation, thinking on or off) therefore invalidates what it must and
    nothing more. A new model or new load settings means a new context and a new cache.

    At most ``limit`` checkpoints are kept; the least recently used unpinned one goes first.
    The memory of forgotten checkpoints is kept for the next ones (never more than ``limit``
    buffers in all), so checkpointing every turn neither allocates nor frees tens of MiB each
    time: the allocator would hand such blocks back late or not at all, and the process's peak
    would grow by a checkpoint or two beyond the limit.

    With a ``folder`` (the prefix store's: the disk cache is on), each checkpoint's state is
    written to a nameless temporary file there (the system removes it when it is closed or the
    process ends; it is in the page cache, not in this process's memory), and **no** state
    buffer stays in memory: a save copies the state into a new buffer, writes it and hands the
    buffer back; a restore reads the file into a new buffer, gives it to llama.cpp and hands it
    back (about 20 MiB from the page cache: a few ms). So the cache holds no state in memory
    while a request is evaluated or decoded, instead of ``limit``. When a file cannot be written
    (the disk is full, the folder is not writable) or ``limit`` states would not fit in
    ``room_bytes`` (the store's bound, ``model.prefix_cache_mb``), the checkpoint stays in
    memory as without a folder: the behaviour is the same, only the memory differs.
    """

    def __init__(
        self,
        ctx: Any,
        memory: Any,
        *,
        limit: int,
        folder: str | os.PathLike[str] | None = None,
        room_bytes: int = 0,
    ) -> None:
        if limit < 1:
            raise ValueError("a state cache needs room for at least one checkpoint")
        self._ctx = ctx
        self._memory = memory
        self.limit = limit
        self.folder = Path(folder) if folder is not None else None
        self.room_bytes = room_bytes
        self._items: list[Checkpoint] = []
        self._spare: list[npt.NDArray[np.uint8]] = []  # buffers of forgotten checkpoints
        self._spare_files: list[BinaryIO] = []  # files of forgotten checkpoints, written over
        self._clock = 0
        self.saves = 0
        self.restores = 0
        self.disk_writes = 0  # states written to their files
        self.disk_reads = 0  # restores that read the state from its file first
        self.disk_failures = 0  # states kept in memory because their file could not be written

    def __len__(self) -> int:
        return len(self._items)

    @property
    def checkpoints(self) -> list[Checkpoint]:
        """Kept checkpoints, shortest first."""
        return sorted(self._items, key=lambda c: c.n_tokens)

    @property
    def nbytes(self) -> int:
        """The memory the cache holds: its checkpoints' states in memory and the buffers kept for
        the next."""
        return sum(c.nbytes for c in self._items) + sum(int(b.nbytes) for b in self._spare)

    @property
    def on_disk(self) -> int:
        """How many kept checkpoints have their state in a file."""
        return sum(c.file is not None for c in self._items)

    @property
    def _resident_limit(self) -> int:
        """How many state buffers are kept in memory at most (checkpoints whose file could not
        be written come on top)."""
        return 0 if self.folder is not None else self.limit

    def _forget(self, checkpoints: list[Checkpoint]) -> None:
        for c in checkpoints:
            self._items.remove(c)
            resident = sum(1 for k in self._items if k.nbytes) + len(self._spare)
            if c.nbytes and resident < self._resident_limit:
                self._spare.append(c.state)
            c.state = _empty()  # a forgotten checkpoint can never restore
            if c.file is not None:
                if len(self._items) + len(self._spare_files) < self.limit:
                    self._spare_files.append(c.file)  # its pages are in the page cache already
                else:
                    c.file.close()
                c.file = None

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def state_size(self) -> int:
        return int(llama_cpp.llama_state_seq_get_size_ext(self._ctx, SEQ, PARTIAL_ONLY))

    def _buffer(self, size: int) -> npt.NDArray[np.uint8]:
        """A buffer of ``size`` bytes for a state: one in memory of a checkpoint that is also on
        disk (which then keeps its file only), a kept one, or a new one."""
        for c in self._items:
            if c.file is not None and c.nbytes == size:
                buffer, c.state = c.state, _empty()
                return buffer
        reusable = [i for i, b in enumerate(self._spare) if b.nbytes == size]
        if reusable:
            return self._spare.pop(reusable[0])  # reuse the memory rather than allocate
        self._spare.clear()  # another size: another context or model state
        if self.folder is not None:  # one buffer in memory: the others' states are on disk
            for c in self._items:
                if c.file is not None:
                    c.state = _empty()
        return np.empty(size, dtype=np.uint8)

    def _write(self, state: npt.NDArray[np.uint8]) -> BinaryIO | None:
        """``state`` in a new nameless temporary file in the folder, or None (in memory then)."""
        if self.folder is None or self.limit * int(state.nbytes) > self.room_bytes:
            return None
        f: BinaryIO | None = self._spare_files.pop() if self._spare_files else None
        try:
            if f is None:
                self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
                # kept open by the checkpoint, closed when it is forgotten
                f = tempfile.TemporaryFile(dir=self.folder, buffering=0)  # noqa: SIM115
            f.seek(0)
            view = memoryview(state.data)
            while view:
                view = view[f.write(view) or 0 :]
            f.truncate(int(state.nbytes))
        except OSError as exc:
            if f is not None:
                f.close()
            self.disk_failures += 1
            log.warning("a model state checkpoint stays in memory: %s", exc)
            return None
        self.disk_writes += 1
        return f

    def _load(self, checkpoint: Checkpoint) -> bool:
        """Bring a checkpoint's state into memory (from its file, into the one buffer)."""
        if checkpoint.nbytes:
            return True
        if checkpoint.file is None:
            return False
        buffer = self._buffer(checkpoint.size)
        view, got = memoryview(buffer.data), 0
        try:
            checkpoint.file.seek(0)
            while got < checkpoint.size:
                n = checkpoint.file.readinto(view[got:])  # type: ignore[attr-defined]
                if not n:
                    break
                got += n
        except OSError as exc:
            log.warning("a model state checkpoint could not be read back: %s", exc)
        if got != checkpoint.size:
            return False  # (a new buffer next time: files are read into none kept)
        checkpoint.state = buffer
        self.disk_reads += 1
        return True

    def _drop(self, checkpoint: Checkpoint) -> None:
        """Hand back the buffer of a checkpoint that is on disk (the next save or restore makes
        a new one; with the worker's allocator threshold, engine_process.WORKER_ENV, the memory
        goes back to the system at once)."""
        if checkpoint.file is not None:
            checkpoint.state = _empty()

    def release(self) -> None:
        """Hand back the state buffer of checkpoints that are on disk (the next save or restore
        makes a new one): before llama.cpp writes or reads a state file, whose temporary
        buffers (several MiB) would otherwise come on top of it at the process's peak."""
        if self.folder is None:
            return
        for c in self._items:
            if c.file is not None:
                c.state = _empty()
        self._spare.clear()

    def resident_state(self, checkpoint: Checkpoint) -> npt.NDArray[np.uint8] | None:
        """A kept checkpoint's state in memory (read from its file if need be), or None."""
        if not any(c is checkpoint for c in self._items) or not self._load(checkpoint):
            return None
        state = checkpoint.state
        self._drop(checkpoint)  # the caller's reference keeps it until the caller is done
        return state

    def save(
        self,
        tokens: npt.NDArray[np.intc],
        label: str,
        *,
        text: str | None = None,
        pinned: bool = False,
    ) -> Checkpoint:
        """Snapshot the state the context holds now, which must be the state after ``tokens``."""
        # the same tokens (all kept ones are prefixes) are saved again
        self._forget([old for old in self._items if old.n_tokens == len(tokens)][:1])
        if pinned:  # one pinned prefix at a time: a new system prompt or tool set replaces it
            for old in self._items:
                old.pinned = False
        while len(self._items) >= self.limit:
            self._forget([min(self._items, key=lambda c: (c.pinned, c.last_used))])
        size = self.state_size()
        buffer = self._buffer(size)
        ptr = buffer.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8))
        written = int(
            llama_cpp.llama_state_seq_get_data_ext(self._ctx, ptr, size, SEQ, PARTIAL_ONLY)
        )
        if written != size:
            self._spare.append(buffer)
            raise ModelError(f"llama.cpp saved {written} of {size} bytes of the model state.")
        checkpoint = Checkpoint(
            np.array(tokens, dtype=np.intc),
            buffer,
            label,
            text,
            pinned,
            self._tick(),
            self._write(buffer),
            size,
        )
        self._drop(checkpoint)  # on disk: the buffer goes back before the prompt goes on
        self._items.append(checkpoint)
        self.saves += 1
        return checkpoint

    def best(self, usable: int) -> Checkpoint | None:
        """The longest checkpoint of at most ``usable`` tokens.

        Every kept checkpoint is a prefix of the evaluated sequence, so when ``usable`` is how
        many leading tokens a new prompt shares with that sequence, the result is a prefix of
        the new prompt too.
        """
        fitting = [c for c in self._items if c.n_tokens <= usable]
        return max(fitting, key=lambda c: c.n_tokens) if fitting else None

    def restore(self, checkpoint: Checkpoint) -> bool:
        """Put the context back to the state after the checkpoint's tokens; False if it failed.

        The caller sets the evaluated-token count to ``checkpoint.n_tokens``. On failure the
        sequence is left in an unknown state and the caller must clear it.
        """
        if not any(c is checkpoint for c in self._items):
            return False  # forgotten: its memory may hold another checkpoint's state by now
        if not self._load(checkpoint):
            return False
        state = checkpoint.state
        self._drop(checkpoint)  # in llama.cpp's own memory once read
        ptr = state.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8))
        read = int(
            llama_cpp.llama_state_seq_set_data_ext(self._ctx, ptr, state.nbytes, SEQ, PARTIAL_ONLY)
        )
        if read != int(state.nbytes):
            return False
        if not llama_cpp.llama_memory_seq_rm(self._memory, SEQ, checkpoint.n_tokens, -1):
            return False
        checkpoint.last_used = self._tick()
        self.restores += 1
        return True

    def forget(self, checkpoint: Checkpoint) -> None:
        """Forget one checkpoint (its memory is kept for the next while states stay in memory)."""
        if any(c is checkpoint for c in self._items):
            self._forget([checkpoint])

    def truncate(self, n_tokens: int) -> None:
        """The evaluated sequence now keeps only its first ``n_tokens``: forget longer ones."""
        self._forget([c for c in self._items if c.n_tokens > n_tokens])

    def clear(self) -> None:
        self._forget(list(self._items))

    def close(self) -> None:
        """Forget every checkpoint and close their files (the system removes them)."""
        self.clear()
        for f in self._spare_files:
            f.close()
        self._spare_files.clear()
