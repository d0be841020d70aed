"""`botpsy eval`: run the cases on a model or a replay, compare two reports, check fidelity."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from botpsy_desktop.core.errors import BotpsyError

if TYPE_CHECKING:
    from botpsy_desktop.app import App
    from botpsy_desktop.eval.runner import CaseResult
    from botpsy_desktop.eval.spec import Case
    from botpsy_desktop.llm.backend import Backend


def add_eval_command(sub: Any) -> None:
    """The `eval` subcommand and its options."""
    ev = sub.add_parser(
        "eval",
        help="score tool calling on realistic requests through the full app path",
        description="Run the evaluation cases (docs/EVALUATION.md) through the app on a "
        "sandbox profile and report tool choice, arguments, end state, malformed calls, "
        "irrelevance and timings per domain.",
    )
    what = ev.add_mutually_exclusive_group()
    what.add_argument("--model", metavar="PATH", help="GGUF file (default: the config's model)")
    what.add_argument(
        "--replay-oracle",
        action="store_true",
        help="replay each case's canonical calls (checks cases and scorer: must score 100%%)",
    )
    what.add_argument(
        "--replay-wrong",
        action="store_true",
        help="replay calls wrong in a fixed pattern (right, no call, wrong arguments, wrong tool)",
    )
    what.add_argument(
        "--compare", nargs=2, metavar=("A.json", "B.json"), help="differences of two reports"
    )
    ev.add_argument(
        "--fidelity",
        action="store_true",
        help="with --model: check the prompt tokens against the model's own template instead",
    )
    ev.add_argument(
        "--selection",
        action="store_true",
        help="only check tool selection: recall of the expected tools and prompt prefix sizes "
        "(tokens with --model or the config's model, else characters); no model run",
    )
    ev.add_argument(
        "--cases",
        metavar="DIR|FILE",
        help="case folder or file (default: shipped); with --selection also a selection set",
    )
    ev.add_argument(
        "--held-out",
        action="store_true",
        help="with --selection: the shipped held-out sets (885 requests in eleven languages)",
    )
    ev.add_argument(
        "--domain", action="append", default=[], metavar="D", help="only this domain (repeatable)"
    )
    ev.add_argument("--case", action="append", default=[], metavar="ID", help="only this case")
    ev.add_argument("--limit", type=int, metavar="N", help="only the first N cases")
    ev.add_argument("--json", metavar="OUT", help="write the report as JSON to OUT")
    ev.add_argument("--threads", type=int, metavar="N", help="CPU threads for the model")
    ev.add_argument("--n-ctx", type=int, metavar="N", help="context window (default: config)")
    ev.add_argument(
        "--max-tokens", type=int, metavar="N", help="most tokens per model turn (default: config)"
    )
    ev.add_argument(
        "--tools",
        choices=("app", "domain"),
        default="app",
        help="tools in the prompt: the app's full set (default) or only the case's domain",
    )
    ev.add_argument(
        "--think",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="let the model think (default from config)",
    )
    ev.add_argument("--quiet", action="store_true", help="no progress lines")


def _model_settings(app: App, args: argparse.Namespace) -> dict[str, Any]:
    settings = app.config.model.model_dump()
    settings.pop("path", None)
    if args.threads:
        settings["n_threads"] = settings["n_threads_batch"] = args.threads
    if args.n_ctx:
        settings["n_ctx"] = args.n_ctx
    if args.max_tokens:
        settings["max_tokens"] = args.max_tokens
    if settings.get("seed", -1) == -1:
        settings["seed"] = 0  # the same run twice gives the same report
    return settings


def _model_path(app: App, args: argparse.Namespace) -> Path:
    model = args.model or app.config.model.path
    if not model:
        raise BotpsyError(
            "No model to evaluate.",
            "Pass --model FILE.gguf, or --replay-oracle to check the cases without a model.",
        )
    path = Path(model).expanduser()
    if not path.is_file():
        raise BotpsyError(f"The model file {path} does not exist.", "Check --model.")
    return path


def cmd_eval(app: App, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Run `botpsy eval`; 0 when the run finished (and, for the oracle, scored 100%)."""
    from botpsy_desktop.eval import report as rep

    if args.compare:
        a, b = (rep.load_report(p) for p in args.compare)
        print(rep.compare(a, b), file=out)
        return 0
    if args.fidelity:
        return _fidelity(app, args, out)
    if args.selection:
        return _selection(app, args, out, err)
    from botpsy_desktop.core.config import ModelSettings
    from botpsy_desktop.eval.oracle import oracle_turns, wrong_turns
    from botpsy_desktop.eval.runner import check_cases, run_cases
    from botpsy_desktop.eval.sandbox import sandbox_tools
    from botpsy_desktop.eval.spec import load_cases
    from botpsy_desktop.llm.engines.replay import ReplayBackend

    if args.limit is not None and args.limit < 1:
        raise BotpsyError("--limit must be 1 or more.", "Give the number of cases to run.")
    cases = load_cases(args.cases, domains=args.domain, ids=args.case, limit=args.limit)
    if not cases:
        raise BotpsyError("No case matches.", "Check --domain, --case and --cases.")
    registry = sandbox_tools()
    check_cases(cases, registry)
    think = app.config.model.think if args.think is None else args.think
    settings = _model_settings(app, args)
    backend: Backend | None = None
    schemas = registry.schemas()
    if args.replay_oracle:
        label = "oracle (replayed canonical calls)"

        def backend_for(case: Case, index: int) -> Backend:
            return ReplayBackend(oracle_turns(case), source=f"oracle:{case.id}")

    elif args.replay_wrong:
        label = "wrong (replayed in a fixed pattern)"

        def backend_for(case: Case, index: int) -> Backend:
            return ReplayBackend(wrong_turns(case, index, schemas)[0], source=f"wrong:{case.id}")

    else:
        path = _model_path(app, args)
        label = str(path)
        print(f"loading {path.name}...", file=err, flush=True)
        # the profile's prefix states: each tool set's prefix is evaluated once, not per run
        loaded = app.backend(model=str(path), settings=ModelSettings.model_validate(settings))
        backend = loaded

        def backend_for(case: Case, index: int) -> Backend:
            return loaded

    started = time.perf_counter()

    def progress(result: CaseResult, done: int, total: int) -> None:
        if args.quiet:
            return
        mark = "ok" if result.passed else "WRONG" if result.error is None else "ERROR"
        print(f"[{done}/{total}] {result.id}: {mark} ({result.wall_s:.1f}s)", file=err, flush=True)

    try:
        results = run_cases(
            cases,
            backend_for,
            settings={"model": settings},
            tool_set=args.tools,
            think=think,
            progress=progress,
        )
    finally:
        if backend is not None:
            backend.close()
    meta = {
        "model": label,
        "cases_source": str(args.cases or "shipped"),
        "tools": args.tools,
        "think": think,
        "threads": settings.get("n_threads"),
        "n_ctx": settings.get("n_ctx"),
        "seconds": round(time.perf_counter() - started, 1),
    }
    report = rep.build_report(results, meta)
    print(rep.render_table(report), file=out)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=str), encoding="utf-8")
        print(f"report written to {args.json}", file=err)
    broken = [r for r in results if r.error is not None and r.error.startswith("sandbox:")]
    if broken:
        return 1
    if args.replay_oracle and not all(r.passed for r in results):
        print("botpsy: the oracle does not score 100%: a case or the scorer is wrong.", file=err)
        return 1
    return 0


def _fidelity(app: App, args: argparse.Namespace, out: TextIO) -> int:
    from botpsy_desktop.core.config import ModelSettings
    from botpsy_desktop.eval.fidelity import check_fidelity

    path = _model_path(app, args)
    backend = app.backend(
        model=str(path),
        settings=ModelSettings.model_validate(_model_settings(app, args)),
        prefix_states=False,
    )
    try:
        result = check_fidelity(path, backend)
    finally:
        backend.close()
    print(
        f"{path.name}: {result.prompts} prompts, {result.tokens} tokens checked against "
        f"{result.template}: {'identical' if result.ok else 'DIFFERENT'}",
        file=out,
    )
    for line in result.mismatches:
        print(f"  {line}", file=out)
    if args.json:
        Path(args.json).write_text(json.dumps(result.as_dict(), indent=1), encoding="utf-8")
    return 0 if result.ok else 1


def _selection(app: App, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """`botpsy eval --selection`: 0 when every request's expected tools were offered."""
    from botpsy_desktop.core.config import ModelSettings
    from botpsy_desktop.eval.sandbox import sandbox_tools
    from botpsy_desktop.eval.selection import (
        case_requests,
        heldout_path,
        is_selection_set,
        load_selection_set,
        render_selection,
        select_requests,
        selection_report,
    )
    from botpsy_desktop.eval.spec import load_cases

    # the app's tools (the sandbox's mail account), and the profile's own: tool servers and
    # tools added to it, so that their selection is measured too
    registry = sandbox_tools()
    for tool in app.registry:
        if registry.get(tool.name) is None:
            registry.register(tool)
    source = heldout_path() if args.held_out else Path(args.cases) if args.cases else None
    if source is not None and is_selection_set(source):
        requests = load_selection_set(source)
        if args.case:
            requests = [r for r in requests if r.id in set(args.case)]
        if args.domain:
            requests = [r for r in requests if set(args.domain) & set(r.domains)]
        requests = requests[: args.limit] if args.limit else requests
    else:
        cases = load_cases(args.cases, domains=args.domain, ids=args.case, limit=args.limit)
        requests = case_requests(cases, registry)
    if not requests:
        raise BotpsyError("No case matches.", "Check --domain, --case and --cases.")
    think = app.config.model.think if args.think is None else args.think
    backend = None
    if args.model or app.config.model.path:
        path = _model_path(app, args)
        print(f"counting tokens with {path.name}...", file=err, flush=True)
        backend = app.backend(
            model=str(path), settings=ModelSettings.model_validate(_model_settings(app, args))
        )
    try:
        count = (
            None
            if backend is None
            else lambda m, t: backend.count_tokens(m, t, enable_thinking=think)
        )
        selected = select_requests(requests, registry, app.config.agent.system_prompt, count)
    finally:
        if backend is not None:
            backend.close()
    report = selection_report(selected, "tokens" if backend is not None else "characters")
    print(render_selection(report), file=out)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1), encoding="utf-8")
        print(f"report written to {args.json}", file=err)
    return 0 if not report["misses"] else 1
