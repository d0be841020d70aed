"""A realistic day through the app's own path: per request, prompt tokens evaluated and reused,
and time to first token, with per-request tool selection as shipped (issue 35).

    python tools/bench_day.py                       # BotPsy-shaped Q4_K_M, every mode
    python tools/bench_day.py --model tiny          # the tiny hybrid model (32k context)
    python tools/bench_day.py --modes window --warm on --policy conversation --cap 24
    python tools/bench_day.py --app-root OLD_CHECKOUT    # the code before, side by side

Three conversations of nine requests (English, French, German) across every domain and a tool
server (a stdio MCP server written into the profile), in a temporary profile:

* ``window``: one long-lived process, as the window runs them: one App and one engine worker;
  with warm-up, the usual tool sets are prepared after loading (``App.warm``) and each
  conversation after each answer, as the window does when idle (not counted in the request).
* ``process``: every request in a new process, as `botpsy ask --conversation ID` runs it
  (``build_app``, ``app.backend()``, ``app.session``, ``session.run``; with warm-up, then
  ``App.keep_for_next``, what `botpsy ask` does after its answer, and the usual sets prepared
  once before the day; without, neither).

``--policy stable`` (the app's default, agent.prompt_tools auto) lists every tool of the app's
own in every prompt and lets a request call its own set; ``request`` lists only each request's
own set (prompt_tools selected, the default before); ``conversation`` keeps a conversation's
tool set up to ``--cap`` tools (prompt_tools selected).

A random-weight model cannot choose a tool, so a script stands in for its output: each model
turn runs through the engine as usual (the whole prompt rendered, restored or evaluated, one
token sampled: its time to first token is real), then the script's text for that step (a tool
call in the model's XML format, or a short answer) is what the loop receives. The tools really
run (files, alarms, music, the tool server; calendar and mail have no account, weather a closed
port: their errors are short observations). What the script changes against a real model: the
step after a tool call evaluates the scripted call again (the engine evaluated its own one
sampled token instead), a few dozen tokens; the first step of each request, the one the
figures are about, is exact.

Prints one line of JSON per request and a summary per run (medians and p90), and writes
everything to ``--out`` (JSON). Counts of tokens are deterministic; times depend on the load.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path.home() / ".cache" / "botpsy-desktop-tools"

# -- the day ---------------------------------------------------------------------------------


def call(name: str, **args: Any) -> str:
    """A tool call as the model writes it (Qwen3-Coder XML)."""
    params = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in args.items())
    return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"


@dataclass(frozen=True)
class Request:
    text: str
    turns: tuple[str, ...]  # the scripted model turns: tool calls, then the answer


def req(text: str, *turns: str) -> Request:
    return Request(text, turns)


W, E, T = "get_weather", "search_emails", "set_timer"
DAY: list[tuple[str, list[Request]]] = [
    ("en", [
        req("What's the weather in Paris today?", call(W, place="Paris"), "Mild, 14 °C."),
        req("What's on my calendar tomorrow?", call("list_events", when="tomorrow"), "Two."),
        req("Set a timer for 10 minutes.", call(T, duration="10 minutes"), "Timer set."),
        req("Any mail from Marco?", call(E, sender="Marco"), "None today."),
        req("Find my tax PDFs from last year.", call("find_files", pattern="*tax*.pdf"), "Two."),
        req("Play some jazz.", call("search_music", query="jazz"), "Playing jazz."),
        req("And on Sunday?", call(W, place="Paris", when="Sunday"), "Sunny."),
        req("Remind me to call mum at 6 pm.", call("set_reminder", time="18:00", text="call mum"),
            "Done."),
        req("Find a recipe for a lemon tart.", call("recipes__find_recipe", query="lemon tart"),
            "Here is one."),
    ]),
    ("fr", [
        req("Quel temps fera-t-il à Lyon demain ?", call(W, place="Lyon", when="demain"), "Gris."),
        req("Ajoute une réunion avec Claire jeudi à 10 h.",
            call("create_event", title="Réunion avec Claire", start="jeudi 10:00"), "Noté."),
        req("Mets un réveil à 7 h demain.", call("set_alarm", time="07:00"), "Réveil à 7 h."),
        req("Lis-moi le dernier mail de ma banque.", call(E, text="banque"), "Aucun mail."),
        req("Montre les fichiers de mon dossier Documents.", call("list_folder", path="Documents"),
            "Cinq fichiers."),
        req("Mets de la musique classique.", call("search_music", query="classique"), "Voilà."),
        req("Et samedi, il pleuvra ?", call(W, place="Lyon", when="samedi"), "Un peu."),
        req("Quels sont mes rendez-vous cette semaine ?", call("list_events", when="this week"),
            "Deux."),
        req("Trouve une recette de ratatouille.",
            call("recipes__find_recipe", query="ratatouille"), "Voici."),
    ]),
    ("de", [
        req("Wie wird das Wetter morgen in Berlin?", call(W, place="Berlin", when="morgen"),
            "Nass."),
        req("Stell einen Timer auf 25 Minuten.", call(T, duration="25 minutes"), "Läuft."),
        req("Habe ich neue E-Mails von Anna?", call(E, sender="Anna"), "Keine neuen."),
        req("Was steht heute in meinem Kalender?", call("list_events", when="today"), "Einer."),
        req("Such meine Rechnungen als PDF.", call("find_files", pattern="*rechnung*.pdf"),
            "Zwei."),
        req("Spiel etwas von Bach.", call("search_music", query="Bach"), "Bach läuft."),
        req("Und am Wochenende?", call(W, place="Berlin", when="Samstag"), "Sonnig."),
        req("Erinnere mich um 17 Uhr an den Einkauf.",
            call("set_reminder", time="17:00", text="Einkauf"), "Erledigt."),
        req("Schreib Eier auf die Einkaufsliste.", call("recipes__add_to_list", item="Eier"),
            "Notiert."),
    ]),
]  # fmt: skip

TOOL_SERVER = '''"""A small stdio tool server for the bench: recipes and a shopping list."""
from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

server = MCPServer("recipes", log_level="WARNING")
shopping: list[str] = []


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def find_recipe(query: str) -> str:
    """Find a recipe by dish name or ingredient; returns its title and steps."""
    return f"{query.title()}: mix, bake 30 minutes at 180 C, serve."


@server.tool()
def add_to_list(item: str) -> str:
    """Add an item to the shopping list."""
    shopping.append(item)
    return f"{item} added ({len(shopping)} items)."


if __name__ == "__main__":
    server.run("stdio")
'''


# -- the scripted model ----------------------------------------------------------------------


def scripted(inner: Any, script: Mapping[str, Sequence[str]]) -> Any:
    """The engine, its output replaced by the script's (see the module's notes)."""
    from botpsy_desktop.llm.backend import BackendWrapper
    from botpsy_desktop.llm.types import Completion, PromptProgress, TextPiece

    class Scripted(BackendWrapper[Any]):
        def __init__(self) -> None:
            super().__init__(inner)
            self.turns: list[dict[str, Any]] = []
            self.started = math.nan  # set by the runner when a request starts

        def complete(
            self,
            messages: Sequence[Mapping[str, Any]],
            tools: Sequence[Mapping[str, Any]],
            *,
            enable_thinking: bool,
            cancel: threading.Event | None = None,
            may_call: Any = None,
        ) -> Iterator[Any]:
            users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
            text = str(messages[users[-1]].get("content") or "") if users else ""
            step = sum(1 for m in messages[users[-1] :] if m.get("role") == "assistant")
            outputs = script.get(text) or ("OK.",)
            out = outputs[min(step, len(outputs) - 1)]
            done = None
            first = math.nan
            for item in self.inner.complete(
                messages,
                tools,
                enable_thinking=enable_thinking,
                cancel=cancel,
                max_tokens=1,
                may_call=may_call,
            ):
                if isinstance(item, PromptProgress):
                    yield item
                    continue
                if math.isnan(first):
                    first = time.perf_counter()
                if isinstance(item, Completion):
                    done = item
            if done is None:
                raise RuntimeError("the engine gave no completion")
            self.turns.append(
                {
                    "step": step,
                    "tools": len(tools),
                    "wall_first_s": first - self.started if step == 0 else math.nan,
                    **done.stats.as_dict(),
                }
            )
            yield TextPiece(out, done.started_in_thinking)
            yield Completion(out, "stop", done.stats, done.started_in_thinking)

        def warm(
            self,
            messages: Sequence[Mapping[str, Any]],
            tools: Sequence[Mapping[str, Any]],
            *,
            enable_thinking: bool = False,
            cancel: threading.Event | None = None,
            keep: str | None = None,
        ) -> Any:
            kw = {"keep": keep} if keep is not None else {}
            return self.inner.warm(
                messages, tools, enable_thinking=enable_thinking, cancel=cancel, **kw
            )

    return Scripted()


# -- one request, and one run ----------------------------------------------------------------


def _script() -> dict[str, tuple[str, ...]]:
    return {r.text: r.turns for _, reqs in DAY for r in reqs}


def run_request(app: Any, backend: Any, conversation: str | None, text: str) -> dict[str, Any]:
    """One request through the session (approvals denied); the first step's figures."""
    from botpsy_desktop.agent.events import ApprovalNeeded, Error

    session = app.session(backend, conversation)
    backend.turns.clear()
    backend.started = time.perf_counter()
    error = ""
    for event in session.run(text):
        if isinstance(event, ApprovalNeeded):
            event.request.deny(by="bench")
        elif isinstance(event, Error):
            error = event.message
    wall = time.perf_counter() - backend.started
    first = backend.turns[0] if backend.turns else {}
    stored = app.store.setting(session.conversation_id, "tool_domains")
    return {
        "conversation_id": session.conversation_id,
        "steps": len(backend.turns),
        "tools": first.get("tools", 0),
        "domains": stored if isinstance(stored, list) else None,
        "prompt_tokens": first.get("prompt_tokens", 0),
        "reused_tokens": first.get("reused_tokens", 0),
        "evaluated_tokens": first.get("evaluated_tokens", 0),
        "ttft_s": first.get("time_to_first_token_s", math.nan),
        "wall_first_s": first.get("wall_first_s", math.nan),
        "later_steps_evaluated": sum(t["evaluated_tokens"] for t in backend.turns[1:]),
        "request_s": round(wall, 3),
        "error": error,
    }


def warm_conversation(app: Any, backend: Any, conversation: str) -> float:
    started = time.perf_counter()
    keep = getattr(app, "keep_for_next", None)
    if keep is not None:
        keep(backend, conversation)
    else:
        app.warm(backend, conversation)
    return time.perf_counter() - started


def child(spec_path: str) -> int:
    """One request in this (new) process, as `botpsy ask --conversation` runs it."""
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    sys.path.insert(0, spec["app_root"])
    from botpsy_desktop.app import build_app

    started = time.perf_counter()
    app = build_app(spec["home"])
    engine = app.backend()
    backend = scripted(engine, _script())
    load_s = time.perf_counter() - started
    try:
        if spec.get("prepare"):
            app.warm(backend)
            engine.flush_prefix_writes()
            print(json.dumps({"prepared_s": round(time.perf_counter() - started, 2)}))
            return 0
        row = run_request(app, backend, spec.get("conversation"), spec["text"])
        row["load_s"] = round(load_s, 3)
        if spec.get("warm") and hasattr(app, "keep_for_next"):
            row["after_s"] = round(warm_conversation(app, backend, row["conversation_id"]), 3)
        started = time.perf_counter()
        engine.flush_prefix_writes()
        row["write_wait_s"] = round(time.perf_counter() - started, 3)
        print(json.dumps(row))
        return 0
    finally:
        engine.close()
        app.close()


def make_profile(
    home: Path, model: Path, policy: str, threads: int, cap: int | None, app_root: str
) -> None:
    (home / "config").mkdir(parents=True, exist_ok=True)
    work = home / "work"
    for folder in ("Documents", "Music"):
        (work / folder).mkdir(parents=True, exist_ok=True)
    for name in ("tax-2025.pdf", "tax-2024.pdf", "rechnung-03.pdf", "rechnung-04.pdf", "notes.txt"):
        (work / "Documents" / name).write_bytes(
            b"%PDF-1.4\n% bench\n" if name.endswith(".pdf") else b"hi"
        )
    agent: dict[str, Any] = {}
    config_source = Path(app_root, "botpsy_desktop", "core", "config.py").read_text("utf-8")
    if "conversation_tools" not in config_source:
        pass  # an older checkout: every request has its own set
    elif policy in ("request", "stable"):
        agent["conversation_tools"] = 0
    elif cap is not None:
        agent["conversation_tools"] = cap
    if "prompt_tools" in config_source:  # a checkout with stable prompts (the default since)
        agent["prompt_tools"] = "auto" if policy == "stable" else "selected"
    settings = {
        "files": {"roots": [str(work)]},
        "music": {"folders": [str(work / "Music")]},
        "alarms": {"time_zone": "Europe/Paris"},
        "weather": {"forecast_url": "http://127.0.0.1:9", "geocoding_url": "http://127.0.0.1:9"},
        "agent": agent,
        "model": {
            "path": str(model),
            "seed": 7,
            "temperature": 0.0,
            "n_ctx": 16384,
            "n_threads": threads,
            "n_threads_batch": threads,
        },
    }
    (home / "config" / "config.json").write_text(json.dumps(settings), encoding="utf-8")
    mail = {
        "name": "home",
        "kind": "mail",
        "username": "me@example.org",
        "address": "me@example.org",
        "imap_host": "127.0.0.1",
        "imap_port": 9,
        "imap_security": "none",
        "smtp_host": "127.0.0.1",
        "smtp_port": 9,
        "smtp_security": "none",
    }  # a closed port: the mail tools are offered, and fail fast when they run
    (home / "config" / "accounts.json").write_text(json.dumps([mail]), encoding="utf-8")
    server = home / "recipes_server.py"
    server.write_text(TOOL_SERVER, encoding="utf-8")
    mcp = {"mcpServers": {"recipes": {"command": sys.executable, "args": [str(server)]}}}
    (home / "config" / "mcp.json").write_text(json.dumps(mcp), encoding="utf-8")


def disk_use(home: Path) -> dict[str, Any]:
    folder = home / "cache" / "prefix-states"
    files = list(folder.glob("*.prefix")) if folder.is_dir() else []
    return {"files": len(files), "mib": round(sum(f.stat().st_size for f in files) / 2**20, 1)}


def run_window(args: argparse.Namespace, home: Path, warm: bool) -> dict[str, Any]:
    sys.path.insert(0, args.app_root)
    from botpsy_desktop.app import build_app

    app = build_app(home)
    engine = app.backend()
    backend = scripted(engine, _script())
    rows: list[dict[str, Any]] = []
    prepared = math.nan
    try:
        if warm:
            started = time.perf_counter()
            app.warm(backend)
            prepared = time.perf_counter() - started
        for c, (lang, requests) in enumerate(DAY[: args.conversations]):
            conversation = None
            for i, r in enumerate(requests):
                row = run_request(app, backend, conversation, r.text)
                conversation = row["conversation_id"]
                if warm:
                    started = time.perf_counter()
                    app.warm(backend, conversation)
                    row["after_s"] = round(time.perf_counter() - started, 3)
                row.update(conversation=c, request=i, language=lang, text=r.text)
                print(json.dumps(row, ensure_ascii=False), flush=True)
                rows.append(row)
        engine.flush_prefix_writes()
    finally:
        engine.close()
        app.close()
    return {"prepare_s": prepared, "rows": rows}


def run_processes(args: argparse.Namespace, home: Path, warm: bool) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    prepared = math.nan

    def spawn(spec: dict[str, Any]) -> dict[str, Any]:
        path = home / "spec.json"
        path.write_text(json.dumps(spec), encoding="utf-8")
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(path)]
        # (the environment names the checkout: PYTHONPATH, set in main)
        done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=1800)
        if done.returncode != 0:
            raise RuntimeError(f"a request process failed:\n{done.stderr[-4000:]}")
        result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return result

    base = {"home": str(home), "app_root": args.app_root}
    if warm:
        started = time.perf_counter()
        spawn({**base, "prepare": True})
        prepared = time.perf_counter() - started
    for c, (lang, requests) in enumerate(DAY[: args.conversations]):
        conversation = None
        for i, r in enumerate(requests):
            row = spawn({**base, "conversation": conversation, "text": r.text, "warm": warm})
            conversation = row["conversation_id"]
            row.update(conversation=c, request=i, language=lang, text=r.text)
            print(json.dumps(row, ensure_ascii=False), flush=True)
            rows.append(row)
    return {"prepare_s": prepared, "rows": rows}


def pct(values: Sequence[float], q: float) -> float:
    finite = sorted(v for v in values if isinstance(v, int | float) and math.isfinite(v))
    if not finite:
        return math.nan
    k = (len(finite) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return finite[lo] + (finite[hi] - finite[lo]) * (k - lo)


def summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    later = [r for r in rows if r["request"] > 0]
    out: dict[str, Any] = {"requests": len(rows)}
    for name, part in (("all", rows), ("after_first", later)):
        out[name] = {
            "prompt_tokens": sum(r["prompt_tokens"] for r in part),
            "evaluated_tokens": sum(r["evaluated_tokens"] for r in part),
            "reused_tokens": sum(r["reused_tokens"] for r in part),
            "evaluated_median": statistics.median(r["evaluated_tokens"] for r in part),
            "evaluated_p90": round(pct([r["evaluated_tokens"] for r in part], 0.9), 1),
            "fully_reused_requests": sum(r["evaluated_tokens"] <= 40 for r in part),
            "ttft_median_s": round(pct([r["ttft_s"] for r in part], 0.5), 3),
            "ttft_p90_s": round(pct([r["ttft_s"] for r in part], 0.9), 3),
            "wall_first_median_s": round(pct([r["wall_first_s"] for r in part], 0.5), 3),
            "wall_first_p90_s": round(pct([r["wall_first_s"] for r in part], 0.9), 3),
            "tools_median": statistics.median(r["tools"] for r in part),
            "tools_max": max(r["tools"] for r in part),
        }
    return out


def ensure_model(kind: str, quant: str) -> Path:
    """The model, built in a child process when missing (tools/make_synthetic_model.py)."""
    if kind not in ("tiny", "botpsy"):
        return Path(kind)
    out = CACHE / (f"tiny-32k-{quant}.gguf" if kind == "tiny" else f"botpsy-synthetic-{quant}.gguf")
    if out.exists():
        return out
    code = (
        "import dataclasses, sys; sys.path.insert(0, 'tools');"
        "from synthetic_models import make_synthetic_model, CACHE; m = make_synthetic_model();"
        "m.PRESETS['tiny-32k'] = dataclasses.replace(m.PRESETS['tiny'], name='tiny-32k',"
        " context_length=32768);"
        f"m.build_model({'tiny-32k' if kind == 'tiny' else 'botpsy'!r}, "
        f"__import__('pathlib').Path({str(out)!r}), {quant!r}, CACHE / 'sdist', 0)"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--model", default="botpsy", help="botpsy (BotPsy-shaped), tiny, or a GGUF")
    ap.add_argument("--quant", default="q4_k_m", choices=("q4_k_m", "q8_0", "f16"))
    ap.add_argument("--modes", default="window,process")
    ap.add_argument("--warm", default="on,off", help="on, off or on,off")
    ap.add_argument(
        "--policy", default="stable", help="stable, request, conversation, or several (a,b)"
    )
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--conversations", type=int, default=len(DAY), help="only the first N")
    ap.add_argument(
        "--cap",
        type=int,
        default=24,
        help="agent.conversation_tools for policy conversation (tools)",
    )
    ap.add_argument("--app-root", default=str(ROOT), help="the checkout whose app is measured")
    ap.add_argument("--out", type=Path, default=None, help="write every figure here (JSON)")
    args = ap.parse_args(argv)
    if args.child:
        return child(args.child)
    args.app_root = str(Path(args.app_root).resolve())
    # the engine's worker (python -m botpsy_desktop.llm.engines.worker) and the request processes
    # import the checkout being measured, not an installed copy or the current folder's
    os.environ["PYTHONPATH"] = args.app_root
    os.chdir(args.app_root)
    model = ensure_model(args.model, args.quant)
    policies = args.policy.split(",")
    results: list[dict[str, Any]] = []
    for policy in policies:
        for mode in args.modes.split(","):
            for warm in (w == "on" for w in args.warm.split(",")):
                home = Path(tempfile.mkdtemp(prefix="botpsy-day-"))
                try:
                    make_profile(home, model, policy, args.threads, args.cap, args.app_root)
                    print(
                        f"# {mode}, policy {policy}, warm-up {'on' if warm else 'off'}", flush=True
                    )
                    started = time.perf_counter()
                    runner = run_window if mode == "window" else run_processes
                    run = runner(args, home, warm)
                    result = {
                        "mode": mode,
                        "policy": policy,
                        "cap": args.cap,
                        "warm": warm,
                        "app_root": args.app_root,
                        "model": str(model),
                        "threads": args.threads,
                        "seconds": round(time.perf_counter() - started, 1),
                        "prepare_s": run["prepare_s"],
                        "disk": disk_use(home),
                        "load_average": os.getloadavg(),
                        "summary": summary(run["rows"]),
                        "rows": run["rows"],
                    }
                    print(json.dumps({k: v for k, v in result.items() if k != "rows"}), flush=True)
                    results.append(result)
                finally:
                    shutil.rmtree(home, ignore_errors=True)
    if args.out is not None:
        args.out.write_text(json.dumps(results, ensure_ascii=False, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
