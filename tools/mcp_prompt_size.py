"""Prompt size with and without three tool servers, rendered and tokenized as the loop sends it.

    python tools/mcp_prompt_size.py [--model PATH.gguf]

Builds two throw-away profiles through ``build_app`` (the same tools config in both; the second
adds three servers: mcp-server-time, mcp-server-git and a hostile test server with two tools),
renders the first prompt of a few requests (system prompt, the tool schemas the loop offers that
request: agent/selection.py, and once with every tool: selection off) with the model's own chat
template and counts its tokens with the model's tokenizer (``LlamaBackend.count_tokens``,
exactly what the agent loop budgets). Default model: the tiny synthetic Qwen3.5 model of the
tests (real Qwen tokenizer and template). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from botpsy_desktop.agent.selection import RequestTools, ToolSelector  # noqa: E402
from botpsy_desktop.app import build_app  # noqa: E402

OTHER_REQUESTS = (
    "Move the PDFs in Documents into a folder called Taxes",
    "Will it rain in Paris tomorrow?",
    "What changed in my git repository since yesterday?",
    "Hello!",
)


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
    requests = [args.request, *OTHER_REQUESTS]
    result: dict[str, object] = {"model": args.model.name}
    backend = None
    for label, servers in (("without_servers", None), ("with_three_servers", three)):
        app = build_app(_profile(work / label, servers))
        try:
            if backend is None:
                backend = app.backend(model=str(args.model))
            system = [{"role": "system", "content": app.loop_settings().system_prompt}]
            selector = ToolSelector(app.registry)
            rows: dict[str, object] = {}
            for text in ["(selection off)", *requests]:
                if text == "(selection off)":
                    tools = app.registry.schemas()
                    message = requests[0]
                else:
                    tools = RequestTools(app.registry, selector, text).schemas()
                    message = text
                messages = [*system, {"role": "user", "content": message}]
                tokens = backend.count_tokens(messages, tools, enable_thinking=False)
                rows[text] = {"tools": len(tools), "prompt_tokens": tokens}
            result[label] = rows
        finally:
            app.close()
    if backend is not None:
        close = getattr(backend, "close", None)
        if close is not None:
            close()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
