"""The llama-server engine measured on 127.0.0.1: the app's RemoteBackend against the server.

    python tools/bench_remote.py                      # the tiny qwen35 model and SmolLM2-135M
    python tools/bench_remote.py --model FILE.gguf    # any BotPsy-compatible GGUF
    python tools/bench_remote.py --json

llama-server is built from the llama.cpp that the installed llama-cpp-python vendors (once,
cached like the test models: tests/helpers/llama_server.py) and started on a free port with one
slot. Per model it prints: the prompt tokens the server itself evaluated (its `timings`) for a
cold request, a follow-up in the same conversation and a new process of the app; time to first
token cold, with the prefix cached, and for the follow-up; decode tokens/s through the app
against the same server driven directly (interleaved, medians); and how many tool calls parse
under the grammar the app sends. docs/PERFORMANCE.md has the figures for this machine class.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from botpsy_desktop.app import build_app  # noqa: E402
from botpsy_desktop.core.config import EngineSettings, ModelSettings  # noqa: E402
from botpsy_desktop.llm.engines.remote import RemoteBackend  # noqa: E402
from botpsy_desktop.llm.language.parser import parse_turn  # noqa: E402
from botpsy_desktop.llm.types import Completion  # noqa: E402
from tests.helpers import llama_server  # noqa: E402
from tests.helpers.models import smollm2_gguf, tiny_qwen35_gguf  # noqa: E402

QUESTION = "What files are in my notes folder?"  # the files tools: about 1.6k prompt tokens
STORY = "Tell me a long story about a lighthouse keeper and a storm, in many paragraphs."

# A new process of the app: its own backend, the same system prompt and tools, a new question.
CHILD = """
import json, sys
sys.path.insert(0, sys.argv[1])
from botpsy_desktop.core.config import EngineSettings, ModelSettings
from botpsy_desktop.llm.engines.remote import RemoteBackend
from botpsy_desktop.llm.types import Completion
url, messages, tools = sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
b = RemoteBackend(EngineSettings(), ModelSettings(temperature=0.0, max_tokens=8), url=url)
for item in b.complete(messages, tools, enable_thinking=False):
    if isinstance(item, Completion):
        print(json.dumps(item.stats.as_dict()))
b.close()
"""


def _tools() -> tuple[list[dict[str, Any]], str]:
    """The tools the app offers a files request (per-request selection), and its system prompt."""
    from botpsy_desktop.agent.selection import RequestTools, ToolSelector

    with tempfile.TemporaryDirectory(prefix="botpsy-bench-home-") as home:
        app = build_app(home)
        try:
            offer = RequestTools(app.registry, ToolSelector(app.registry), QUESTION, [])
            return offer.schemas(), app.config.agent.system_prompt
        finally:
            app.close()


def _run(
    backend: RemoteBackend, messages: list[dict[str, Any]], tools: Any, **kw: Any
) -> Completion:
    for item in backend.complete(messages, tools, enable_thinking=False, **kw):
        if isinstance(item, Completion):
            return item
    raise RuntimeError("no completion")


def _direct_decode(url: str, body: dict[str, Any]) -> tuple[float, float]:
    """The same request driven directly (streamed, nothing parsed), timed like the app times
    its own (first token to last, at this end); and the server's own decode rate."""
    final: dict[str, Any] = {}
    t_first = t_last = 0.0
    n = 0
    with httpx.stream("POST", f"{url}/completion", json=body, timeout=600) as response:
        for line in response.iter_lines():
            if line.startswith("data:"):
                chunk = json.loads(line[5:])
                if chunk.get("tokens"):
                    n += len(chunk["tokens"])
                    t_first = t_first or time.perf_counter()
                if chunk.get("content"):
                    t_last = time.perf_counter()
                if chunk.get("stop"):
                    final = chunk
    if final.get("stop_type") == "eos":
        n -= 1  # the end-of-turn token is listed, not decoded into text
    timings = final.get("timings") or {}
    server = timings.get("predicted_per_second", 0.0)
    return ((n - 1) / (t_last - t_first) if t_last > t_first else 0.0), server


def measure(
    model: Path,
    *,
    n_ctx: int,
    decode_tokens: int,
    repeats: int,
    threads: int,
    opened_tokens: int = 400,
) -> dict[str, Any]:
    tools, system = _tools()
    settings = ModelSettings(temperature=0.0, max_tokens=16, seed=1)
    out: dict[str, Any] = {"model": model.name}
    with (
        tempfile.TemporaryDirectory(prefix="bench-server-") as logs,
        llama_server.start_server(model, n_ctx=n_ctx, slots=1, log_dir=Path(logs)) as server,
    ):
        backend = RemoteBackend(EngineSettings(), settings, url=server.url)
        try:
            out["server_rtt_ms"] = round(backend.round_trip_s(5) * 1000, 2)
            conv = [
                {"role": "system", "content": system},
                {"role": "user", "content": QUESTION},
            ]
            cold = _run(backend, conv, tools)
            out["prompt_tokens"] = cold.stats.prompt_tokens
            out["cold"] = {
                "evaluated": cold.stats.evaluated_tokens,
                "ttft_s": round(cold.stats.time_to_first_token_s, 4),
            }
            follow = [
                *conv,
                {"role": "assistant", "content": cold.text},
                {"role": "user", "content": "And set a timer for ten minutes."},
            ]
            again = _run(backend, follow, tools)
            out["follow_up"] = {
                "prompt_tokens": again.stats.prompt_tokens,
                "evaluated": again.stats.evaluated_tokens,
                "ttft_s": round(again.stats.time_to_first_token_s, 4),
            }
            # the window warms the conversation when idle (App.warm): the next follow-up
            history = [*follow, {"role": "assistant", "content": again.text}]
            warmed = backend.warm(history, tools)
            third = _run(backend, [*history, {"role": "user", "content": "Thanks."}], tools)
            out["warmed_follow_up"] = {
                "prompt_tokens": third.stats.prompt_tokens,
                "evaluated": third.stats.evaluated_tokens,
                "warm_evaluated": warmed.evaluated_tokens,
                "ttft_s": round(third.stats.time_to_first_token_s, 4),
            }
            child = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    CHILD,
                    str(ROOT),
                    server.url,
                    json.dumps([conv[0], {"role": "user", "content": "Any alarms tomorrow?"}]),
                    json.dumps(tools),
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            stats = json.loads(child.stdout.strip().splitlines()[-1])
            out["new_process"] = {
                "prompt_tokens": stats["prompt_tokens"],
                "evaluated": stats["evaluated_tokens"],
                "ttft_s": stats["time_to_first_token_s"],
            }
            # decode: the same prompt (cached) through the app and directly, interleaved
            story = [{"role": "user", "content": STORY}]
            backend.settings = ModelSettings(temperature=0.0, max_tokens=decode_tokens, seed=1)
            text = backend.renderer.render(story).text
            tokens = backend.tokenize(text)
            body = backend.request_body(tokens, decode_tokens, None, None, False, False)
            body["id_slot"] = 0
            app_rates, direct_rates, n_decoded = [], [], []
            app_server, direct_server = [], []
            for _ in range(repeats):
                done = _run(backend, story, [])
                app_rates.append(done.stats.decode_tokens_per_s)
                app_server.append(backend.last_timings.get("predicted_per_second", 0.0))
                n_decoded.append(done.stats.completion_tokens)
                client, server_rate = _direct_decode(server.url, body)
                direct_rates.append(client)
                direct_server.append(server_rate)
            app_rate = statistics.median(app_rates)
            direct_rate = statistics.median(direct_rates)
            out["decode"] = {
                "tokens": int(statistics.median(n_decoded)),
                "app_tok_s": round(app_rate, 2),
                "direct_tok_s": round(direct_rate, 2),
                "app_over_direct": round(app_rate / direct_rate, 3) if direct_rate else None,
                "server_side_app_over_direct": round(
                    statistics.median(app_server) / statistics.median(direct_server), 3
                ),
                "app_rates": [round(r, 2) for r in app_rates],
                "direct_rates": [round(r, 2) for r in direct_rates],
            }
            out["tool_calls"] = _tool_calls(backend, system, CALL_TOOLS, opened_tokens)
        finally:
            backend.close()
    return out


# Tool calls are measured on schemas random weights can finish (enums, integers, booleans): in a
# free-text value they write on until the token limit (the grammar only keeps the closing tags
# out of it).
CALL_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "set_alarm",
            "description": "Set an alarm.",
            "parameters": {
                "type": "object",
                "properties": {
                    "hour": {"type": "integer", "minimum": 0, "maximum": 23},
                    "minute": {"type": "integer"},
                    "repeat": {"type": "string", "enum": ["never", "daily", "weekdays"]},
                    "loud": {"type": "boolean"},
                },
                "required": ["hour", "minute", "repeat", "loud"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {"unit": {"type": "string", "enum": ["c", "f"]}},
                "required": ["unit"],
            },
        },
    },
]
CALL_QUESTIONS = (
    "Wake me at seven.",
    "Set an alarm for 6:30 every weekday.",
    "Is it cold outside?",
    "Alarm at noon, loud please.",
    "Weather in Fahrenheit?",
)


def _tool_calls(
    backend: RemoteBackend, system: str, tools: Any, opened_tokens: int = 400
) -> dict[str, Any]:
    """Tool calls under the grammar the app sends, greedy, one per question: forced (grammar
    from the first token, up to 400 tokens) and opened by the model itself (the lazy grammar
    from <tool_call>, made likely with a logit bias: random weights would never open a call).
    A call cut off by the token limit (random weights may write a string value forever) is
    counted apart. The bias opens call after call, so each opened request runs to its limit,
    ``opened_tokens``: at a few tokens a second under the grammar, most of the bench's time."""
    grammar = backend._grammar_for(tools)
    if grammar is None:
        return {"grammar": "none (the model's template has no XML tool calls)"}
    backend.settings = ModelSettings(temperature=0.0, max_tokens=400, seed=1)
    counts = {"forced": [0, 0, 0], "opened": [0, 0, 0]}  # parsed, cut off, attempts
    bias = [[backend.tokenize("<tool_call>")[0], 30.0]]
    for question in CALL_QUESTIONS:
        conv = [{"role": "system", "content": system}, {"role": "user", "content": question}]
        text = backend.renderer.render(conv, tools).text
        done = None
        for item in backend.generate(text, grammar=grammar, force_tool_call=True):
            if isinstance(item, Completion):
                done = item
        assert done is not None
        _count(counts["forced"], done.text, tools, done.finish_reason == "length")
        body = backend.request_body(
            backend.tokenize(text), opened_tokens, None, grammar, False, False
        )
        body.update(stream=False, logit_bias=bias)
        answer = httpx.post(f"{backend.url}/completion", json=body, timeout=600).json()
        # the bias also opens call after call until the limit: the finished ones must parse
        parsed = parse_turn(answer["content"], tools)
        finished = parsed.calls[:-1] if answer["stop_type"] == "limit" else parsed.calls
        counts["opened"][2] += 1
        counts["opened"][1] += len(finished)
        counts["opened"][0] += sum(1 for c in finished if c in parsed.tool_calls)
    forced = counts["forced"]
    opened = counts["opened"]
    return {
        "forced": f"{forced[0]}/{forced[2] - forced[1]} parsed ({forced[1]} of {forced[2]} "
        "cut off by the token limit)",
        "opened_by_the_model": f"{opened[0]}/{opened[1]} finished calls parsed "
        f"({opened[2]} requests)",
    }


def _count(count: list[int], text: str, tools: Any, cut_off: bool) -> None:
    parsed = parse_turn(text, tools)
    count[2] += 1
    if cut_off:
        count[1] += 1
    elif parsed.tool_calls and not parsed.errors:
        count[0] += 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--model", action="append", type=Path, help="GGUF file(s) (default: tiny, SmolLM2)"
    )
    ap.add_argument("--ctx", type=int, default=8192, help="context per slot (default 8192)")
    ap.add_argument("--decode-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="llama-server threads (default 1)")
    ap.add_argument(
        "--opened-tokens",
        type=int,
        default=400,
        help="token limit of each request in which the model opens tool calls itself (default "
        "400; each runs to it, a few tokens a second under the grammar)",
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    models = args.model or [tiny_qwen35_gguf(), smollm2_gguf()]
    started = time.perf_counter()
    results = [
        measure(
            m,
            n_ctx=args.ctx,
            decode_tokens=args.decode_tokens,
            repeats=args.repeats,
            threads=args.threads,
            opened_tokens=args.opened_tokens,
        )
        for m in models
    ]
    if args.json:
        json.dump(results, sys.stdout, indent=2)
        print()
        return 0
    for r in results:
        print(f"== {r['model']} (server round trip {r['server_rtt_ms']} ms)")
        print(
            f"   prompt {r['prompt_tokens']} tokens; the server evaluated, cold: "
            f"{r['cold']['evaluated']}"
        )
        f = r["follow_up"]
        print(
            f"   follow-up, same conversation: {f['evaluated']} of {f['prompt_tokens']} evaluated"
        )
        w = r["warmed_follow_up"]
        print(
            f"   follow-up after the window's idle warm-up ({w['warm_evaluated']} evaluated "
            f"then): {w['evaluated']} of {w['prompt_tokens']} evaluated"
        )
        n = r["new_process"]
        print(f"   new process of the app: {n['evaluated']} of {n['prompt_tokens']} evaluated")
        print(
            f"   time to first token: cold {r['cold']['ttft_s']} s, new process (prefix cached) "
            f"{n['ttft_s']} s, follow-up {f['ttft_s']} s, warmed follow-up {w['ttft_s']} s"
        )
        d = r["decode"]
        print(
            f"   decode ({d['tokens']} tokens): app {d['app_tok_s']} tok/s, direct "
            f"{d['direct_tok_s']} tok/s, app/direct {d['app_over_direct']} (server-side "
            f"{d['server_side_app_over_direct']})"
        )
        print(f"   tool calls under the grammar: {r['tool_calls']}")
    print(f"({time.perf_counter() - started:.0f} s)")
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
