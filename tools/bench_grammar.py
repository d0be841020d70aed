"""Decode speed with and without tool-call constraints, side by side on one model in one run.

    python tools/bench_grammar.py                      # builds/uses a BotPsy-shaped Q4_K_M
    python tools/bench_grammar.py --model FILE.gguf --tokens 64 --repeats 5 --threads 2

Prints a table and JSON: free decode tokens/s, constrained decode tokens/s (a forced tool call
against the app's real tool schemas), their ratio, how often the grammar rejected the freely
sampled token, and the cost of one full-vocabulary grammar pass (what every constrained token
would cost without rejection sampling). Runs alternate free/constrained; medians are quoted.
A random-weight model is a worst case for rejections: a trained model mostly writes valid calls.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from botpsy_desktop.adapters.files import files_tools  # noqa: E402
from botpsy_desktop.core.config import AgentSettings, ModelSettings  # noqa: E402
from botpsy_desktop.llm.engines.engine import LlamaBackend  # noqa: E402
from botpsy_desktop.llm.language.grammar_check import GrammarMatcher  # noqa: E402
from botpsy_desktop.llm.types import Completion  # noqa: E402

sys.path.insert(0, str(ROOT / "tools"))
from synthetic_models import synthetic_botpsy  # noqa: E402


def one_run(backend: LlamaBackend, prompt: str, grammar: str | None, tokens: int) -> Completion:
    done = None
    for item in backend.generate(
        prompt, grammar=grammar, force_tool_call=grammar is not None, max_tokens=tokens
    ):
        if isinstance(item, Completion):
            done = item
    assert done is not None
    return done


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", type=Path, help="GGUF file (default: synthetic BotPsy Q4_K_M)")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--temperature", type=float, default=0.6)
    args = ap.parse_args()

    path = args.model or synthetic_botpsy()
    settings = ModelSettings(
        n_ctx=4096,
        n_threads=args.threads,
        n_threads_batch=args.threads,
        temperature=args.temperature,
        seed=7,
    )
    backend = LlamaBackend(settings, path)
    tools = [t.schema() for t in files_tools([Path.home()])]
    messages = [
        {"role": "system", "content": AgentSettings().system_prompt},
        {"role": "user", "content": "find my tax pdfs from 2025"},
    ]
    prompt = backend.renderer.render(messages, tools).text
    grammar = backend._grammar_for(tools)
    if grammar is None:
        print("this model's template has no XML tool calls: nothing to constrain", file=sys.stderr)
        return 2

    free: list[float] = []
    constrained: list[float] = []
    resample_share: list[float] = []
    constrained_tokens: list[int] = []
    one_run(backend, prompt, None, 4)  # warm up
    for _ in range(args.repeats):
        f = one_run(backend, prompt, None, args.tokens)
        free.append(f.stats.decode_tokens_per_s)
        c = one_run(backend, prompt, grammar, args.tokens)
        constrained.append(c.stats.decode_tokens_per_s)
        constrained_tokens.append(c.stats.constrained_tokens)
        resample_share.append(c.stats.grammar_resamples / max(c.stats.constrained_tokens, 1))

    # A model that writes valid calls: its free choice passes the one-token check every time.
    # Replay such a call token by token and time the check + accept the engine adds per token.
    call_text = (
        "\n<function=find_files>\n<parameter=pattern>\n*.pdf\n</parameter>\n"
        "<parameter=folder>\n~/Documents/taxes/2025\n</parameter>\n<parameter=limit>\n20\n"
        "</parameter>\n</function>\n</tool_call>"
    )
    call_tokens = backend.tokenize(call_text)
    check_us: list[float] = []
    for _ in range(20):
        matcher = GrammarMatcher(backend._vocab, grammar)
        t = time.perf_counter()
        for token in call_tokens:
            if not matcher.accepts(token):
                raise SystemExit(f"the grammar rejected the reference call at token {token}")
            matcher.accept(token)
        check_us.append((time.perf_counter() - t) / len(call_tokens) * 1e6)
        matcher.close()

    matcher = GrammarMatcher(backend._vocab, grammar)
    full_pass: list[float] = []
    for _ in range(5):
        t = time.perf_counter()
        matcher.allowed_mask()
        full_pass.append((time.perf_counter() - t) * 1000)
    matcher.close()

    result: dict[str, Any] = {
        "model": str(path),
        "model_size_mib": round(path.stat().st_size / 2**20, 1),
        "threads": args.threads,
        "tokens_per_run": args.tokens,
        "repeats": args.repeats,
        "free_decode_tps_median": round(statistics.median(free), 2),
        "constrained_decode_tps_median": round(statistics.median(constrained), 2),
        "constrained_over_free": round(statistics.median(constrained) / statistics.median(free), 3),
        "constrained_tokens_median": statistics.median(constrained_tokens),
        "grammar_resample_share_median": round(statistics.median(resample_share), 3),
        "full_vocab_grammar_pass_ms_median": round(statistics.median(full_pass), 2),
        "free_decode_ms_per_token": round(1000 / statistics.median(free), 2),
        "valid_call_check_us_per_token": round(statistics.median(check_us), 1),
    }
    decode_ms = 1000 / statistics.median(free)
    result["valid_call_constrained_over_free"] = round(
        decode_ms / (decode_ms + statistics.median(check_us) / 1000), 4
    )
    backend.close()
    width = max(len(k) for k in result)
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
