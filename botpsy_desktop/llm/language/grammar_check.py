"""A llama.cpp grammar sampler that tests and accepts single tokens, for rejection sampling."""

from __future__ import annotations

import ctypes
import math
import weakref
from types import TracebackType
from typing import Any

import llama_cpp
import numpy as np
import numpy.typing as npt

# Layout of llama_token_data {int32 id; float logit; float p;}.
_TOKEN_DATA = np.dtype([("id", np.intc), ("logit", np.single), ("p", np.single)], align=True)


class GrammarError(ValueError):
    """A grammar llama.cpp cannot parse, a token the grammar rejects, or a closed matcher."""


class GrammarMatcher:
    """Owns one llama.cpp grammar sampler over a vocabulary.

    Rejection sampling: sample a token from the free distribution, keep it when `accepts(token)`,
    else `constrain_logits(logits)` and sample again; then `accept(token)`. `accepts` costs one
    single-candidate grammar check, `constrain_logits` one check per vocabulary entry.

    Never call llama.cpp's accept with a token the grammar rejects: it throws a C++ exception
    through the C API (or aborts for an end-of-generation token), which kills the process.
    `accept` therefore checks first and raises `GrammarError` instead.
    Not thread-safe: use one matcher per generation.
    """

    def __init__(
        self, vocab: Any, grammar: str, *, root: str = "root", owner: object = None
    ) -> None:
        """Parse `grammar` for `vocab` (a `llama_vocab_p`); keep `owner` (the model) alive.

        Raises `GrammarError` when llama.cpp cannot parse it (its parser prints why on stderr).
        """
        self._vocab = vocab
        self._owner = owner
        self._n_vocab = int(llama_cpp.llama_vocab_n_tokens(vocab))
        sampler = llama_cpp.llama_sampler_init_grammar(
            vocab, grammar.encode("utf-8"), root.encode("utf-8")
        )
        if not sampler:
            raise GrammarError("llama.cpp could not parse the grammar (see its message on stderr)")
        self._sampler = sampler
        self._finalizer = weakref.finalize(self, llama_cpp.llama_sampler_free, sampler)
        self._one = (llama_cpp.llama_token_data * 1)()
        self._one_array = llama_cpp.llama_token_data_array(
            data=ctypes.cast(self._one, llama_cpp.llama_token_data_p),
            size=1,
            selected=-1,
            sorted=False,
        )
        self._full: npt.NDArray[np.void] | None = None
        eog = int(llama_cpp.llama_vocab_eos(vocab))
        self._eog = eog if eog >= 0 else int(llama_cpp.llama_vocab_eot(vocab))

    @classmethod
    def for_llama(cls, llama: Any, grammar: str, *, root: str = "root") -> GrammarMatcher:
        """A matcher over the vocabulary of a loaded `llama_cpp.Llama`."""
        vocab = llama_cpp.llama_model_get_vocab(llama.model)
        return cls(vocab, grammar, root=root, owner=llama)

    @property
    def n_vocab(self) -> int:
        return self._n_vocab

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def _check_open(self) -> None:
        if self.closed:
            raise GrammarError("the grammar matcher is closed")

    def accepts(self, token: int) -> bool:
        """Whether the grammar allows `token` next (out-of-range ids are simply not allowed)."""
        self._check_open()
        if not 0 <= token < self._n_vocab:
            return False
        self._one[0] = llama_cpp.llama_token_data(token, 0.0, 0.0)
        self._one_array.size = 1
        self._one_array.selected = -1
        self._one_array.sorted = False
        llama_cpp.llama_sampler_apply(self._sampler, ctypes.byref(self._one_array))
        return not math.isinf(self._one[0].logit)

    def accept(self, token: int) -> None:
        """Advance the grammar by `token`; `GrammarError` (state unchanged) if it is not allowed."""
        if not self.accepts(token):
            raise GrammarError(f"token {token} is not allowed by the grammar here")
        llama_cpp.llama_sampler_accept(self._sampler, token)

    def accept_all(self, tokens: list[int]) -> int:
        """Accept tokens in order until one is rejected; return how many were accepted."""
        for count, token in enumerate(tokens):
            if not self.accepts(token):
                return count
            llama_cpp.llama_sampler_accept(self._sampler, token)
        return len(tokens)

    def is_complete(self) -> bool:
        """Whether the grammar has matched all of `root` (llama.cpp then allows only end tokens)."""
        return self._eog >= 0 and self.accepts(self._eog)

    def apply(self, candidates: Any) -> None:
        """Set to -inf the logits of rejected tokens in a `llama_token_data_array` (or its byref).

        Every id in it must be within the vocabulary (llama.cpp does not check).
        """
        self._check_open()
        llama_cpp.llama_sampler_apply(self._sampler, candidates)

    def _apply_full(self, logits: npt.NDArray[np.floating[Any]] | None) -> npt.NDArray[np.void]:
        self._check_open()
        if self._full is None:
            self._full = np.zeros(self._n_vocab, dtype=_TOKEN_DATA)
            self._full["id"] = np.arange(self._n_vocab, dtype=np.intc)
        full = self._full
        if logits is None:
            full["logit"] = 0.0
        else:
            if logits.shape != (self._n_vocab,):
                raise ValueError(f"expected {self._n_vocab} logits, got shape {logits.shape}")
            full["logit"] = logits
        array = llama_cpp.llama_token_data_array(
            data=full.ctypes.data_as(llama_cpp.llama_token_data_p),
            size=self._n_vocab,
            selected=-1,
            sorted=False,
        )
        llama_cpp.llama_sampler_apply(self._sampler, ctypes.byref(array))
        return full

    def allowed_mask(self) -> npt.NDArray[np.bool_]:
        """A boolean array over the vocabulary: which tokens the grammar allows next."""
        full = self._apply_full(None)
        return np.asarray(np.isfinite(full["logit"]), dtype=np.bool_)

    def constrain_logits(self, logits: npt.NDArray[np.floating[Any]]) -> None:
        """Set, in place, the logits of every token the grammar rejects to -inf."""
        full = self._apply_full(logits)
        logits[np.isneginf(full["logit"])] = -np.inf

    def reset(self) -> None:
        """Back to the start of the grammar (llama.cpp re-parses the grammar text)."""
        self._check_open()
        llama_cpp.llama_sampler_reset(self._sampler)

    def close(self) -> None:
        """Free the sampler; further use raises `GrammarError`. Idempotent."""
        self._finalizer()
        self._owner = None

    def __enter__(self) -> GrammarMatcher:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
