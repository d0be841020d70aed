"""`botpsy doctor`: checks of llama.cpp, the model file, the keyring and the app's folders."""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from botpsy_desktop import __version__
from botpsy_desktop.app import App
from botpsy_desktop.core.errors import BotpsyError
from botpsy_desktop.core.secrets import keyring_status
from botpsy_desktop.llm.models import gpu_device

Status = Literal["ok", "warn", "fail", "info"]


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    hint: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"name": self.name, "status": self.status, "detail": self.detail, "hint": self.hint}


def _gpu_offload_check(app: App, engine: Any) -> Check:
    """Whether llama.cpp can offload to a GPU here: linked in, or a loadable backend module
    (llm/models/gpu_device.py; the engine loads it in its worker, not here)."""
    if engine.supports_gpu_offload():
        return Check("gpu offload", "info", "supported (a GPU backend is linked in)")
    folders = gpu_device.backend_folders(app.config.model.gpu_backend_dir, engine.llama_lib())
    module = gpu_device.find_module(folders)
    if module is not None:
        return Check("gpu offload", "info", f"llama.cpp's Vulkan backend: {module}")
    return Check(
        "gpu offload",
        "info",
        f"CPU only: no {gpu_device.VULKAN_MODULE} in "
        f"{', '.join(str(f) for f in folders) or 'llama-cpp-python'}",
    )


def _gib(n: int) -> str:
    return f"{n / 1024**3:.2f} GiB"


def _writable(folder: Path) -> bool:
    return folder.is_dir() and os.access(folder, os.W_OK)


def run_checks(
    app: App, model: str | None = None, *, retry_layout: bool = False, retry_gpu: bool = False
) -> list[Check]:
    """Every check, in order; ``retry_layout``: first try again the weight layout a crash in
    this model's first decode was blamed on, and forget that verdict if it decodes now;
    ``retry_gpu`` the same for a GPU the model was moved off."""
    checks = [
        Check("botpsy-desktop", "info", __version__),
        Check("python", "info", f"{platform.python_version()} on {platform.platform()}"),
    ]
    try:
        from botpsy_desktop.llm.engines import engine

        checks.append(
            Check(
                "llama.cpp",
                "ok",
                f"llama-cpp-python {engine.llama_cpp_version()}; {engine.system_info()}",
            )
        )
        checks.append(_gpu_offload_check(app, engine))
    except Exception as exc:
        checks.append(
            Check(
                "llama.cpp",
                "fail",
                f"cannot load llama-cpp-python: {exc}",
                "Reinstall botpsy-desktop (pip builds llama-cpp-python from source).",
            )
        )

    for label, folder in (
        ("config folder", app.paths.config_dir),
        ("data folder", app.paths.data_dir),
        ("models folder", app.paths.models_dir),
    ):
        ok = _writable(folder)
        checks.append(
            Check(
                label,
                "ok" if ok else "fail",
                str(folder),
                "" if ok else "Make the folder writable, or choose --home DIR.",
            )
        )
    checks.append(_conversations_check(app))
    problem = app.account_problem()
    if problem is not None:
        checks.append(Check("accounts", "fail", problem.message, problem.hint))
    checks.append(_integrity_check(app))
    checks.extend(_alarm_rows_check(app))

    checks.extend(_engine_checks(app))
    path = model or app.config.model.path
    if not path and app.config.engine.url and not model:
        checks.append(Check("model", "info", "none on this computer (the engine runs one)"))
    elif not path:
        checks.append(
            Check(
                "model",
                "warn",
                "no model configured",
                "Run `botpsy model pull` (BotPsy-0.8B) or `botpsy model import PATH`, or pass "
                f"--model PATH, or set model.path in {app.paths.config_file}.",
            )
        )
    else:
        model_checks = _model_checks(path, app.config.model.n_ctx)
        checks.extend(model_checks)
        if model_checks[0].status == "ok":
            if retry_layout:
                checks.append(_retry_layout(app, path))
            if retry_gpu:
                checks.append(_retry_gpu(app, path))
            checks.extend(_engine_check(app, path))
    checks.append(_installed_models_check(app))
    checks.append(_prefix_cache_check(app))

    ks = keyring_status()
    checks.append(
        Check(
            "keyring",
            "ok" if ks.usable else "warn",
            f"{ks.backend}: {ks.detail}",
            ""
            if ks.usable
            else "Install and unlock a Secret Service keyring (e.g. gnome-keyring) to "
            "store mail and calendar passwords.",
        )
    )
    for root in app.config.file_roots():
        checks.append(
            Check(
                "files root",
                "ok" if root.is_dir() else "warn",
                str(root),
                "" if root.is_dir() else "The folder does not exist; fix files.roots.",
            )
        )
    checks.extend(_device_checks(app))
    checks.append(Check("tools", "info", ", ".join(app.registry.names()) or "none"))
    checks.extend(_tool_server_checks(app))
    from botpsy_desktop.agent.logs import log_folder

    checks.append(
        Check("logs", "info", f"{log_folder(app.paths)} (`botpsy doctor --bundle` for a report)")
    )
    return checks


def _engine_checks(app: App) -> list[Check]:
    """Where the model runs; for a llama-server: its model, round trip and prefix caching."""
    url = app.config.engine.url
    if url is None:  # the local engine's own check proves it with a decode (_engine_check)
        return []
    try:
        backend = app.remote_backend(url)
    except BotpsyError as exc:
        return [Check("remote engine", "fail", f"llama-server at {url}: {exc.message}", exc.hint)]
    try:
        info = backend.info
        rtt = backend.round_trip_s()
        checks = [
            Check(
                "remote engine",
                "ok",
                f"llama-server at {url}: {info.model}, {info.n_ctx} tokens per slot, "
                f"{info.slots} slot(s), template: {info.template_source}; round trip "
                f"{rtt * 1000:.1f} ms",
            )
        ]
        try:
            works, detail = backend.prefix_cache_check()
        except BotpsyError as exc:
            works, detail = False, exc.message
        checks.append(
            Check(
                "engine prefix cache",
                "ok" if works else "warn",
                f"prefix caching {'works' if works else 'does not work'}: {detail}",
                ""
                if works
                else "Every request re-evaluates the whole prompt: run llama-server without "
                "--no-cache-prompt (and with --ctx-checkpoints for hybrid models).",
            )
        )
        return checks
    except BotpsyError as exc:
        return [Check("remote engine", "fail", f"llama-server at {url}: {exc.message}", exc.hint)]
    finally:
        backend.close()


def _engine_check(app: App, path: str) -> list[Check]:
    """A real decode in a worker process, as every request runs it: proves the engine here;
    then where it ran (the device check)."""
    from botpsy_desktop.llm.engines.engine_process import prove_model

    try:
        probe = prove_model(app.config.model, path, work_dir=app.paths.cache_dir / "engine")
    except BotpsyError as exc:
        return [Check("engine", "fail", exc.message, exc.hint)]
    return [_engine_result(probe), _device_check(probe)]


def _device_check(probe: dict[str, Any]) -> Check:
    """Where the proven model ran: its GPU, memory and layers, or the CPU and why."""
    detail = gpu_device.describe_device(probe.get("device") or {})
    crashed = probe.get("gpu_fallback")
    if crashed:
        return Check(
            "device",
            "warn",
            f"{detail}, since llama.cpp's GPU backend crashed ({crashed['reason']}) in this "
            f"model's first decode on {crashed['after']} on {crashed['at']}",
            "The CPU is slower but safe; it is remembered for this model and llama.cpp build. "
            "After a driver update, `botpsy doctor --retry-gpu` tries the GPU again in a worker "
            "process (a crash there costs nothing); or set model.device.",
        )
    return Check("device", "info", detail)


def _engine_result(probe: dict[str, Any]) -> Check:
    """The engine check of a probe that decoded."""
    layout = probe.get("layout") or "llama.cpp's default"
    detail = (
        f"loaded and decoded in a worker process: {probe['prompt_tokens']} prompt tokens in "
        f"{probe['prefill_s']:.2f} s, {probe['completion_tokens']} generated; weight layout "
        f"{layout}"
    )
    fallback = probe.get("fallback")
    if fallback:
        return Check(
            "engine",
            "warn",
            f"{detail}, since the {fallback['after']} layout crashed llama.cpp "
            f"({fallback['reason']}) in this model's first decode on {fallback['at']}",
            "The plain layout is slower but safe on this CPU; it is remembered for this model "
            "and llama.cpp build. If that crash was a one-off, `botpsy doctor --retry-layout` "
            f"tries the {fallback['after']} layout again in a worker process (a crash there "
            "costs nothing) and forgets this verdict if it decodes; or set model.cpu_layout.",
        )
    return Check("engine", "ok", detail)


def _retry_gpu(app: App, path: str) -> Check:
    """Try the GPU a first-decode crash was blamed on again; forget the verdict if it decodes."""
    from botpsy_desktop.llm.engines.engine_process import LayoutMemory, prove_model

    work_dir = app.paths.cache_dir / "engine"
    memory = LayoutMemory(work_dir)
    key = LayoutMemory.key(Path(path))
    verdict = memory.forget(key, "cpu")
    if not verdict:
        return Check("gpu", "info", "no GPU verdict to retry for this model")
    try:
        probe = prove_model(app.config.model, path, work_dir=work_dir)
    except BotpsyError as exc:
        return Check("gpu", "warn", f"the GPU was tried again: {exc.message}")
    if probe.get("gpu_fallback"):
        return Check(
            "gpu",
            "warn",
            f"llama.cpp's GPU backend crashed again on {verdict['after']}; the model stays on "
            "the CPU",
            "Nothing to do: the CPU is slower but safe. A driver update may help.",
        )
    return Check(
        "gpu",
        "ok",
        f"the verdict of {verdict['at']} ({verdict['reason']}) is forgotten: "
        f"{gpu_device.describe_device(probe.get('device') or {})}",
    )


def _retry_layout(app: App, path: str) -> Check:
    """Try the layout a first-decode crash was blamed on again; forget the verdict if it
    decodes (a stale verdict: the crash was not the layout's)."""
    from botpsy_desktop.llm.engines.engine_process import LayoutMemory, prove_model

    work_dir = app.paths.cache_dir / "engine"
    memory = LayoutMemory(work_dir)
    key = LayoutMemory.key(Path(path))
    verdict = memory.get(key).get("plain")
    if not verdict:
        return Check("weight layout", "info", "no layout verdict to retry for this model")
    blamed = verdict["after"]
    try:
        probe = prove_model(app.config.model, path, work_dir=work_dir, layout=blamed)
    except BotpsyError as exc:
        return Check("weight layout", "warn", f"the {blamed} layout was tried again: {exc.message}")
    if probe.get("layout") != blamed:  # it crashed again and fell back to plain
        return Check(
            "weight layout",
            "warn",
            f"the {blamed} layout crashed llama.cpp again; the plain layout stays for this model",
            "Nothing to do: the plain layout is slower but safe on this CPU.",
        )
    memory.forget(key)
    return Check(
        "weight layout",
        "ok",
        f"the {blamed} layout decodes with this model now: the verdict of {verdict['at']} "
        f"({verdict['reason']}) is forgotten and the model runs with it again",
    )


def _prefix_cache_check(app: App) -> Check:
    """The folder of prefix states on disk: where, how full, how many."""
    from botpsy_desktop.llm.cache.prefix_store import MiB, PrefixStore

    bound = app.config.model.prefix_cache_mb
    store = PrefixStore.for_profile(app.paths.cache_dir, bound)
    if store is None:
        return Check("prefix cache", "info", "off (model.prefix_cache_mb is 0)")
    stats = store.stats()
    detail = (
        f"{stats.folder}: {stats.total_bytes / MiB:.1f} of {bound} MiB, "
        f"{stats.entries} saved prefix state(s)"
    )
    writable = _writable(stats.folder) or (
        not stats.folder.exists() and _writable(app.paths.cache_dir)
    )
    if not writable:
        return Check(
            "prefix cache",
            "warn",
            detail,
            "Make the folder writable: without it every start evaluates the system prompt "
            "and tools again.",
        )
    return Check("prefix cache", "ok", detail)


def _device_checks(app: App) -> list[Check]:
    """What the device tools can reach here: the sound server, the desktop's settings, a
    backlight (each a warning or a note where missing: the other tools work without it)."""
    from botpsy_desktop.adapters.device.desktop import DesktopSettings
    from botpsy_desktop.adapters.device.power import Power
    from botpsy_desktop.adapters.device.sound import Sound
    from botpsy_desktop.core.errors import BotpsyError

    d = app.config.device
    if not d.enabled:
        return [Check("device", "info", "the device tools are off (device.enabled)")]
    checks: list[Check] = []
    try:
        state = Sound(d.pulse_server).state()
        muted = ", muted" if state["muted"] else ""
        checks.append(Check("sound", "ok", f"{state['output']} at {state['volume']}%{muted}"))
    except BotpsyError as exc:
        checks.append(Check("sound", "warn", exc.message, "Start PulseAudio or PipeWire."))
    try:
        desktop = DesktopSettings(d.gsettings)
        problem = desktop.check()
        if problem:
            raise BotpsyError(f"cannot be changed here: {problem}")
        checks.append(
            Check("desktop settings", "ok", f"GNOME settings ({desktop.appearance()} mode)")
        )
    except BotpsyError as exc:
        checks.append(Check("desktop settings", "info", exc.message))
    try:
        checks.append(Check("brightness", "ok", f"{Power(Path(d.sysfs)).brightness()}%"))
    except BotpsyError as exc:
        checks.append(Check("brightness", "info", exc.message))
    return checks


def _tool_server_checks(app: App) -> list[Check]:
    """Each tool server (MCP): started or reached now, its tools, and whether they changed."""
    hub = app.tool_servers
    if hub is None:
        return []
    if hub.problem:
        return [Check("tool servers", "fail", hub.problem, "Fix mcp.json in the config folder.")]
    out = []
    for server in hub.servers:
        name = f"tool server {server.name}"
        if not server.enabled:
            out.append(Check(name, "info", f"switched off ({server.transport})"))
            continue
        kept = hub.cached(server.name)
        try:
            live = hub.connection(server).list_tools()
        except BotpsyError as exc:
            out.append(
                Check(
                    name,
                    "warn",
                    f"{server.transport}: {server.where()}: {exc.message}",
                    "Check the command or address with `botpsy mcp test "
                    f"{server.name}`; its stderr is in the log.",
                )
            )
            continue
        on = [t for t in live if server.switch(t.name).enabled]
        detail = f"{server.transport}, {len(live)} tool(s), {len(on)} on: " + ", ".join(
            t.name for t in on
        )
        changed = kept is not None and sorted(t.fingerprint() for t in kept) != sorted(
            t.fingerprint() for t in live
        )
        if kept is None or changed:
            why = "never listed" if kept is None else "its tools changed since it was tested"
            out.append(
                Check(
                    name,
                    "warn",
                    f"{detail} ({why})",
                    f"Review them with `botpsy mcp test {server.name}`.",
                )
            )
        else:
            out.append(Check(name, "ok", detail))
    return out


def _conversations_check(app: App) -> Check:
    """The conversation database as the app opened it: healthy, or damaged (then read only)."""
    from botpsy_desktop.core.dbsafety import restore_hint

    store = app.store
    if store.damaged:
        return Check(
            "conversations",
            "fail",
            f"{app.paths.database} is damaged ({store.damaged[0]}); the app only reads it "
            "and writes nothing to it",
            restore_hint(app.paths.database),
        )
    try:
        return Check(
            "conversations", "ok", f"{app.paths.database} (journal {store.journal_mode()})"
        )
    except BotpsyError as exc:
        return Check("conversations", "fail", exc.message, exc.hint)


def _integrity_check(app: App) -> Check:
    """PRAGMA integrity_check of each SQLite file the app keeps (read-only)."""
    from botpsy_desktop.core.dbsafety import check_file, restore_hint

    data = app.paths.data_dir
    checked, bad = [], []
    for file in (app.paths.database, data / "alarms.sqlite3", data / "music.sqlite3"):
        if file.exists():
            problems = check_file(file)
            checked.append(file.name)
            if problems:
                bad.append((file, problems[0]))
    if bad:
        file, problem = bad[0]
        return Check(
            "database integrity", "fail", f"{file} is damaged: {problem}", restore_hint(file)
        )
    return Check("database integrity", "ok", f"{', '.join(checked) or 'no databases yet'}: ok")


def _alarm_rows_check(app: App) -> list[Check]:
    """Stored alarms, timers, reminders and routines that cannot be read (each skipped)."""
    if app.alarms is None or not (app.paths.data_dir / "alarms.sqlite3").exists():
        return []
    try:
        broken = app.alarms.unreadable()
    except BotpsyError as exc:  # a damaged file: the integrity check names it
        return [Check("alarm entries", "fail", exc.message, exc.hint)]
    if not broken:
        return [Check("alarm entries", "ok", "every stored alarm, timer and routine is readable")]
    return [
        Check("alarm entry", "fail", b.line(), b.hint() + " Doctor changes nothing by itself.")
        for b in broken
    ]


def _installed_models_check(app: App) -> Check:
    """The models `botpsy model` manages: ids, sizes, which is active, any missing file."""
    try:
        service = app.models()
        models, active = service.installed(), service.active()
    except BotpsyError as exc:
        return Check("installed models", "warn", exc.message, exc.hint)
    if not models:
        return Check("installed models", "info", "none yet (`botpsy model pull` gets BotPsy-0.8B)")
    missing = [m.id for m in models if not service.path_of(m).is_file()]
    detail = ", ".join(
        f"{m.id}{' (active)' if m == active else ''} {m.size / 1024**2:.0f} MiB" for m in models
    )
    if missing:
        return Check(
            "installed models",
            "warn",
            f"{detail}; file missing for {', '.join(missing)}",
            "Pull or import those again, or `botpsy model remove ID`.",
        )
    return Check("installed models", "ok", f"{detail} in {app.paths.models_dir}")


def _model_checks(path: str, n_ctx: int) -> list[Check]:
    from botpsy_desktop.llm.language.prompt import PromptRenderer
    from botpsy_desktop.llm.models.gguf_info import available_memory, read_gguf_info

    try:
        info = read_gguf_info(path)
    except BotpsyError as exc:
        return [Check("model", "fail", exc.message, exc.hint)]
    out = [
        Check(
            "model",
            "ok",
            f"{info.path} — {info.name}, {info.architecture}, "
            f"{info.file_type}, {_gib(info.file_size)}, complete",
        )
    ]
    need = info.estimate_memory(n_ctx)
    avail = available_memory()
    detail = (
        f"weights {_gib(need['weights'])} + KV {_gib(need['kv_cache'])} + recurrent "
        f"{_gib(need['recurrent_state'])} = {_gib(need['total'])} for {n_ctx} tokens"
    )
    if avail is None:
        out.append(Check("memory", "info", detail + "; available memory unknown"))
    else:
        fits = need["total"] <= avail
        out.append(
            Check(
                "memory",
                "ok" if fits else "fail",
                f"{detail}; {_gib(avail)} available",
                "" if fits else "Lower model.n_ctx or choose a smaller quantization.",
            )
        )
    try:
        renderer = PromptRenderer(info.chat_template)
    except BotpsyError as exc:
        out.append(Check("chat template", "fail", exc.message, exc.hint))
    else:
        if info.chat_template is None:
            out.append(
                Check("chat template", "warn", "none in the file; using the ChatML tool fallback")
            )
        elif renderer.uses_fallback:
            out.append(
                Check(
                    "chat template",
                    "warn",
                    "the model's template has no tool support; using the ChatML tool fallback",
                )
            )
        else:
            out.append(
                Check(
                    "chat template", "ok", f"the model's own, tool calls as {renderer.call_format}"
                )
            )
    return out


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run `botpsy doctor`")
