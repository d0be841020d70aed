"""Prompt size with and without three tool servers, rendered and tokenized as the loop sends it.

    python tools/mcp_prompt_size.py [--model PATH.gguf]

Builds two throw-away profiles through ``build_app`` (the same tools config in both; the second
adds three servers: mcp-server-time, mcp-server-git and a hostile test server with two tools),
renders the first request's prompt (system prompt, the registry's tool schemas, a user message)
with the model's own chat template and counts its tokens with the model's tokenizer
(``LlamaBackend.count_tokens``, exactly what the agent loop budgets). Default model: the tiny
synthetic Qwen3.5 model of the tests (real Qwen tokenizer and template). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from botpsy_desktop.app import build_app  # noqa: E402


def _profile(folder: Path, servers: dict[str, object] | None) -> Path:
    (folder / "config").mkdir(parents=True)
    (folder / "config" / "config.json").write_text(
        json.dumps({"files": {"roots": [str(folder)]}, "music": {"player": "none"}}),
        encoding="utf-8",
    )
    if servers is not None:
        (folder / "config" / "mcp.json").write_text(
            json.dumps({"mcpServers": servers}), encoding="utf-8"
        )
    return folder


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", type=Path, help="a GGUF file (default: the tests' tiny model)")
    ap.add_argument("--request", default="What time is it in Tokyo?")
    args = ap.parse_args()
    if args.model is None:
        from tests.helpers.models import tiny_qwen35_gguf

        args.model = tiny_qwen35_gguf()
    hostile = str(ROOT / "tests" / "helpers" / "mcp_hostile.py")
    work = Path(tempfile.mkdtemp(prefix="botpsy-mcp-size-"))
    three = {
        "time": {"command": "mcp-server-time"},
        "git": {"command": "mcp-server-git"},
        "evil": {"command": sys.executable, "args": [hostile, "injector", str(work / "t.jsonl")]},
    }
    result: dict[str, object] = {"model": args.model.name, "request": args.request}
    backend = None
    for label, servers in (("without", None), ("with_three_servers", three)):
        app = build_app(_profile(work / label, servers))
        try:
            if backend is None:
                backend = app.backend(model=str(args.model))
            tools = app.registry.schemas()
            messages = [
                {"role": "system", "content": app.loop_settings().system_prompt},
                {"role": "user", "content": args.request},
            ]
            tokens = backend.count_tokens(messages, tools, enable_thinking=False)
            result[label] = {"tools": len(tools), "prompt_tokens": tokens}
        finally:
            app.close()
    if backend is not None:
        close = getattr(backend, "close", None)
        if close is not None:
            close()
    without = result["without"]
    with_three = result["with_three_servers"]
    assert isinstance(without, dict) and isinstance(with_three, dict)
    result["ratio"] = round(with_three["prompt_tokens"] / without["prompt_tokens"], 3)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
