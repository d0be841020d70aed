"""`botpsy bench`: a model's speed and memory, raw llama.cpp against the app's agent path."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any, TextIO

from botpsy_desktop.agent.events import Answer, ApprovalNeeded, TurnFinished
from botpsy_desktop.app import App, build_app
from botpsy_desktop.cli.common import EXIT_OK
from botpsy_desktop.core.errors import BotpsyError


def add_command(sub: Any) -> None:
    """The `bench` subcommand and its options."""
    bench = sub.add_parser(
        "bench", help="measure a model's speed and memory: raw llama.cpp against the app"
    )
    bench.add_argument("--model", metavar="PATH", help="GGUF file (default: the config's model)")
    bench.add_argument("--threads", type=int, default=2, metavar="N", help="threads (2)")
    bench.add_argument("--n-ctx", type=int, default=16384, metavar="N", help="context (16384)")
    bench.add_argument("--repeats", type=int, default=3, metavar="N", help="runs per figure (3)")
    bench.add_argument("--decode-tokens", type=int, default=64, metavar="N", help="(64)")
    bench.add_argument(
        "--prefill-tokens", type=int, default=512, metavar="N", help="raw prefill size (512)"
    )
    bench.add_argument("--requests", type=int, default=100, metavar="N", help="memory run (100)")
    bench.add_argument("--follow-ups", type=int, default=4, metavar="N", help="(4)")
    bench.add_argument(
        "--depths", default="", metavar="N,N", help="also raw speed at these contexts (1024,...)"
    )
    bench.add_argument(
        "--thread-counts", default="", metavar="N,N", help="also raw speed per thread count"
    )
    bench.add_argument(
        "--tools", default="", metavar="NAMES", help="only these tools (a,b), or none"
    )
    bench.add_argument("--json", action="store_true", help="print only the JSON")
    bench.add_argument(
        "--device",
        nargs="?",
        const="cpu,auto",
        default="",
        metavar="D,D",
        help="compare devices side by side instead (model.device values: cpu, auto = the GPU "
        "the app would choose, vulkan; default cpu,auto): prefill, decode and time to first "
        "token, raw against the app on each, and the tokens at temperature 0",
    )
    bench.add_argument(
        "--gpu-backend-dir",
        metavar="DIR",
        help="folder of llama.cpp's GPU backend module (default: the config's "
        "model.gpu_backend_dir)",
    )
    bench.add_argument(
        "--new-process-only",
        action="store_true",
        help="only time a new process's first request, cold and with the prefix on disk",
    )
    bench.add_argument(
        "--memory-only",
        action="store_true",
        help="only measure peak memory over --requests requests (a worker with a prefix store)",
    )


class BenchHarness:
    """The agent path for `botpsy bench`: an isolated profile in a temporary folder, with the
    app's tools (nothing of the user's is read, the network is a closed local port) and every
    approval denied."""

    def __init__(self, home: str, only: Sequence[str]) -> None:
        from pathlib import Path

        from botpsy_desktop.agent.tools import ToolRegistry
        from botpsy_desktop.core.config import Config
        from botpsy_desktop.core.paths import Paths

        paths = Paths.resolve(home)
        paths.ensure()
        for sub in ("files", "music"):
            (Path(home) / sub).mkdir()
        config = Config()
        config.files.roots = [str(Path(home) / "files")]
        config.music.folders = [str(Path(home) / "music")]
        config.music.player = "none"
        config.weather.geocoding_url = config.weather.forecast_url = "http://127.0.0.1:9/"
        # every request gets the same tools (all of them, or --tools): the figures are about
        # one prefix, evaluated once and then restored; per-request selection would give each
        # request its own prefix (`botpsy eval --selection` measures their sizes)
        config.agent.tool_selection = False
        config.save(paths)
        self.app = build_app(home)
        if list(only) == ["none"]:  # no tools: the shortest prompt (a software GPU's bench)
            self.app.registry = ToolRegistry([])
        elif only:
            unknown = sorted(set(only) - set(self.app.registry.names()))
            if unknown:
                self.app.close()
                raise BotpsyError(
                    f"No tool named {', '.join(unknown)}.", "See `botpsy tools` for the names."
                )
            self.app.registry = ToolRegistry([t for t in self.app.registry if t.name in only])

    @property
    def system_prompt(self) -> str:
        return self.app.loop_settings().system_prompt

    @property
    def tools(self) -> list[dict[str, Any]]:
        return self.app.registry.schemas()

    def run(self, backend: Any, text: str, conversation_id: str | None) -> Any:
        import time

        from botpsy_desktop.llm.bench.measure import AgentRun

        session = self.app.session(backend, conversation_id)
        run = AgentRun(session.conversation_id, 0.0)
        started = time.perf_counter()
        for event in session.run(text):
            if isinstance(event, ApprovalNeeded):
                event.request.deny(by="bench")
            elif isinstance(event, TurnFinished):
                run.turns.append(event.stats)
            elif isinstance(event, Answer):
                run.answered = True
        run.wall_s = time.perf_counter() - started
        return run

    def warm(self, backend: Any, conversation_id: str | None) -> None:
        self.app.warm(backend, conversation_id, think=False)

    def close(self) -> None:
        self.app.close()


def cmd_bench(app: App, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Speed and memory side by side in one run; a table and JSON (docs/PERFORMANCE.md)."""
    import tempfile
    import time
    from pathlib import Path

    from botpsy_desktop.llm.bench.measure import BenchOptions, format_table, run_bench

    model = args.model or app.config.model.path
    if not model or not Path(model).expanduser().is_file():
        raise BotpsyError(
            f"No model file to measure{f' at {model}' if model else ''}.",
            "Pass --model FILE.gguf (python tools/bench.py builds a BotPsy-shaped one).",
        )
    try:
        depths = tuple(int(d) for d in args.depths.split(",") if d.strip())
        counts = tuple(int(d) for d in args.thread_counts.split(",") if d.strip())
    except ValueError:
        raise BotpsyError(
            f"--depths {args.depths!r} or --thread-counts {args.thread_counts!r} is not a list "
            "of numbers.",
            "Use e.g. --depths 1024,4096 --thread-counts 1,2",
        ) from None
    from botpsy_desktop.llm.bench.device import DEVICES, format_device_table, run_device_bench

    devices = tuple(d.strip() for d in args.device.split(",") if d.strip())
    unknown = [d for d in devices if d not in DEVICES]
    if unknown or (args.device and not devices):
        raise BotpsyError(
            f"--device {args.device!r}: {', '.join(unknown) or 'no device'} is not a device.",
            f"Name some of {', '.join(DEVICES)}, e.g. --device cpu,auto",
        )
    options = BenchOptions(
        threads=args.threads,
        n_ctx=args.n_ctx,
        repeats=max(args.repeats, 1),
        decode_tokens=max(args.decode_tokens, 2),
        requests=max(args.requests, 1),
        follow_ups=max(args.follow_ups, 1),
        depths=depths,
        thread_counts=counts,
        new_process_only=args.new_process_only,
        memory_only=args.memory_only,
        devices=devices,
        prefill_tokens=max(args.prefill_tokens, 1),
        gpu_backend_dir=args.gpu_backend_dir or app.config.model.gpu_backend_dir,
    )
    started = time.perf_counter()

    def log(line: str) -> None:
        print(f"bench {time.perf_counter() - started:7.1f}s  {line}", file=err, flush=True)

    with tempfile.TemporaryDirectory(prefix="botpsy-bench-") as home:
        harness = BenchHarness(home, [t for t in args.tools.split(",") if t.strip()])
        try:
            if devices:
                result = run_device_bench(Path(model).expanduser(), harness, options, log=log)
            else:
                result = run_bench(Path(model).expanduser(), harness, options, log=log)
        finally:
            harness.close()
    if not args.json:
        print((format_device_table if devices else format_table)(result), file=out)
    print(json.dumps(result), file=out)
    return EXIT_OK
