"""Saved recurrent states of a hybrid model, so a prompt's known start is never evaluated twice."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

import llama_cpp
import numpy as np
import numpy.typing as npt

from botpsy_desktop.core.errors import ModelError

# Only the recurrent (gated-DeltaNet) part of the sequence: the attention cache is not copied,
# it stays in the context, and a restore cuts it back to the checkpoint's length.
PARTIAL_ONLY = llama_cpp.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
SEQ = 0  # the engine evaluates everything in sequence 0


@dataclass(eq=False)
class Checkpoint:
    """The recurrent state right after ``tokens`` were evaluated.

    ``text`` is the text those tokens encode, when known (the engine then tokenizes only what
    follows it). ``pinned`` marks the system prompt + tool schemas prefix: it is evicted last.
    """

    tokens: npt.NDArray[np.intc]
    state: npt.NDArray[np.uint8]
    label: str
    text: str | None = None
    pinned: bool = False
    last_used: int = 0

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    @property
    def nbytes(self) -> int:
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
    """

    def __init__(self, ctx: Any, memory: Any, *, limit: int) -> None:
        if limit < 1:
            raise ValueError("a state cache needs room for at least one checkpoint")
        self._ctx = ctx
        self._memory = memory
        self.limit = limit
        self._items: list[Checkpoint] = []
        self._spare: list[npt.NDArray[np.uint8]] = []  # buffers of forgotten checkpoints
        self._clock = 0
        self.saves = 0
        self.restores = 0

    def __len__(self) -> int:
        return len(self._items)

    @property
    def checkpoints(self) -> list[Checkpoint]:
        """Kept checkpoints, shortest first."""
        return sorted(self._items, key=lambda c: c.n_tokens)

    @property
    def nbytes(self) -> int:
        """The memory the cache holds: its checkpoints and the buffers kept for the next."""
        return sum(c.nbytes for c in self._items) + sum(int(b.nbytes) for b in self._spare)

    def _forget(self, checkpoints: list[Checkpoint]) -> None:
        for c in checkpoints:
            self._items.remove(c)
            if len(self._items) + len(self._spare) < self.limit:
                self._spare.append(c.state)
            c.state = np.empty(0, dtype=np.uint8)  # a forgotten checkpoint can never restore

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def state_size(self) -> int:
        return int(llama_cpp.llama_state_seq_get_size_ext(self._ctx, SEQ, PARTIAL_ONLY))

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
        reusable = [i for i, b in enumerate(self._spare) if b.nbytes == size]
        if reusable:
            buffer = self._spare.pop(reusable[0])  # reuse the memory rather than allocate
        else:
            self._spare.clear()  # another size: another context or model state
            buffer = np.empty(size, dtype=np.uint8)
        ptr = buffer.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8))
        written = int(
            llama_cpp.llama_state_seq_get_data_ext(self._ctx, ptr, size, SEQ, PARTIAL_ONLY)
        )
        if written != size:
            raise ModelError(f"llama.cpp saved {written} of {size} bytes of the model state.")
        checkpoint = Checkpoint(
            np.array(tokens, dtype=np.intc), buffer, label, text, pinned, self._tick()
        )
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
        ptr = checkpoint.state.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8))
        read = int(
            llama_cpp.llama_state_seq_set_data_ext(
                self._ctx, ptr, checkpoint.nbytes, SEQ, PARTIAL_ONLY
            )
        )
        if read != checkpoint.nbytes:
            return False
        if not llama_cpp.llama_memory_seq_rm(self._memory, SEQ, checkpoint.n_tokens, -1):
            return False
        checkpoint.last_used = self._tick()
        self.restores += 1
        return True

    def forget(self, checkpoint: Checkpoint) -> None:
        """Forget one checkpoint (its memory is kept for the next)."""
        if any(c is checkpoint for c in self._items):
            self._forget([checkpoint])

    def truncate(self, n_tokens: int) -> None:
        """The evaluated sequence now keeps only its first ``n_tokens``: forget longer ones."""
        self._forget([c for c in self._items if c.n_tokens > n_tokens])

    def clear(self) -> None:
        self._forget(list(self._items))
