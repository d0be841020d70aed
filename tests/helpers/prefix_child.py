"""A separate process that loads a model with a prefix store and evaluates one prompt.

    python -m tests.helpers.prefix_child MODEL STORE_DIR OUT.npy [--ctx N] [--tools N]

Prints one line of JSON: the prompt's tokens, how many came from the prefix state (on disk or
evaluated), and the engine's disk counters; writes the logits after the prompt to OUT.npy. Used
by the tests to prove that a new process restores what another one saved.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading

import llama_cpp
import numpy as np

from botpsy_desktop.core.config import ModelSettings
from botpsy_desktop.llm.cache.prefix_store import PrefixStore
from botpsy_desktop.llm.engines.engine import LlamaBackend, _prefix_at
from tests.helpers.prefix_prompts import SYSTEM, TOOLS, USER


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("store")
    ap.add_argument("out")
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--bound-mb", type=int, default=512)
    ap.add_argument("--user", default=USER)
    args = ap.parse_args()
    # one thread: llama.cpp threads waiting on each other crawl on a shared, loaded CPU
    settings = ModelSettings(
        n_ctx=args.ctx, temperature=0.0, max_tokens=8, seed=1, n_threads=1, n_threads_batch=1
    )
    store = PrefixStore(args.store, bound_bytes=args.bound_mb * 2**20)
    backend = LlamaBackend(settings, args.model, prefix_store=store)
    try:
        messages = [SYSTEM, {"role": "user", "content": args.user}]
        prompt = backend.renderer.render(messages, TOOLS).text
        cuts = backend._cuts(messages, TOOLS, False, prompt)
        tokens, marks = backend._tokenize_continuing(prompt, cuts)
        start = backend._prepare(tokens, prefix_at=_prefix_at(marks))
        assert backend._eval(tokens, start, marks, threading.Event())
        backend.flush_prefix_writes()
        ptr = llama_cpp.llama_get_logits_ith(backend._llama._ctx.ctx, -1)
        np.save(args.out, np.ctypeslib.as_array(ptr, shape=(backend._n_vocab,)).copy())
        print(
            json.dumps(
                {
                    "prompt_tokens": len(tokens),
                    "prefix_tokens": _prefix_at(marks),
                    "start": start,
                    "disk_restores": backend.disk_restores,
                    "disk_saves": backend.disk_saves,
                    "discarded": store.discarded,
                }
            )
        )
    finally:
        backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
