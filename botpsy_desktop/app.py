"""Composition root: builds config, store, tools, gate and a model backend for a profile."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from botpsy_desktop import __version__
from botpsy_desktop.adapters.alarms import AlarmService, alarms_tools, time_zone
from botpsy_desktop.adapters.calendar import calendar_service, calendar_tools
from botpsy_desktop.adapters.contacts import ContactsService, contacts_service, contacts_tools
from botpsy_desktop.adapters.device.desktop import DesktopSettings
from botpsy_desktop.adapters.device.power import Power
from botpsy_desktop.adapters.device.sound import Sound
from botpsy_desktop.adapters.device.tools import device_tools
from botpsy_desktop.adapters.documents import INDEX_NAME, DocumentIndex, documents_tools
from botpsy_desktop.adapters.documents.index import Progress
from botpsy_desktop.adapters.email import email_tools, mail_service
from botpsy_desktop.adapters.files import files_tools
from botpsy_desktop.adapters.mcp import ServerBook, ServerHub
from botpsy_desktop.adapters.music import (
    MusicController,
    MusicLibrary,
    Player,
    headless_player,
    music_tools,
)
from botpsy_desktop.adapters.weather import OpenMeteo, weather_tools
from botpsy_desktop.agent.audit import AuditLog
from botpsy_desktop.agent.gate import ALWAYS_ASK, Gate
from botpsy_desktop.agent.restores import Restores
from botpsy_desktop.agent.store import ConversationStore
from botpsy_desktop.agent.tools import Tool, ToolRegistry
from botpsy_desktop.core.accounts import AccountBook, MailAccount
from botpsy_desktop.core.busy import PREPARING, Busy
from botpsy_desktop.core.config import Config, DocumentsSettings
from botpsy_desktop.core.errors import ConfigError, ModelError
from botpsy_desktop.core.paths import Paths
from botpsy_desktop.core.secrets import SecretStore

if TYPE_CHECKING:
    import httpx

    from botpsy_desktop.agent.approvals import ApprovalQueue
    from botpsy_desktop.agent.audit import Undone
    from botpsy_desktop.agent.loop import AgentSession, LoopSettings
    from botpsy_desktop.agent.undo import UndoPlan
    from botpsy_desktop.core.config import ModelSettings
    from botpsy_desktop.llm.backend import Backend
    from botpsy_desktop.llm.engines.engine_process import EngineProcess
    from botpsy_desktop.llm.engines.remote import RemoteBackend
    from botpsy_desktop.llm.engines.replay import ReplayBackend
    from botpsy_desktop.llm.models.installed import ModelService
    from botpsy_desktop.llm.types import GenerationStats, PromptProgress
    from botpsy_desktop.speech.tts import ReplySpeaker
    from botpsy_desktop.speech.voice import VoiceInput

log = logging.getLogger(__name__)

KEEP_FOR_NEXT_TOKENS = 256
"""At most this many tokens evaluated after `botpsy ask`'s answer to keep the conversation for
the next process (a second or two on a CPU); more, and nothing is kept (App.keep_for_next)."""


def build_registry(
    config: Config,
    paths: Paths | None = None,
    resources: ExitStack | None = None,
    *,
    player: Player | None = None,
    alarms: AlarmService | None = None,
    secrets: SecretStore | None = None,
    now: Callable[[], datetime] | None = None,
    servers: ServerHub | None = None,
    documents: DocumentIndex | None = None,
    contacts: ContactsService | None = None,
) -> ToolRegistry:
    """Every tool the assistant can use, built from the configuration.

    Clients the tools hold (HTTP, the music player and index) are closed by ``resources``;
    ``player`` replaces the headless music player (the window passes its Qt one); the alarm
    tools are there when an ``alarms`` service is given; calendar and mail accounts come from
    the accounts file (with ``paths``), their passwords from ``secrets`` when a tool runs;
    the address-book tools when ``contacts`` has books (:func:`build_contacts`); the tools
    of the tool servers (MCP) configured in ``servers`` come last. The documents index
    (``documents``, else one made for ``paths``) brings search_documents and read_document.
    """
    resources = resources if resources is not None else ExitStack()
    registry = ToolRegistry()
    for tool in files_tools(
        config.file_roots(),
        max_read_bytes=config.files.max_read_bytes,
        max_search_bytes=config.files.max_search_bytes,
        data_dir=paths.data_dir if paths is not None else None,  # the action log (undo)
        now=now,
    ):
        registry.register(tool)
    if documents is None and paths is not None:
        documents = documents_index(config, paths)
    if documents is not None:
        resources.callback(documents.close)
        d = config.documents
        for tool in documents_tools(documents, rescan_s=d.rescan_s, wait_s=d.search_wait_s):
            registry.register(tool)
    for tool in _weather_tools(config, resources) + _music_tools(config, paths, resources, player):
        registry.register(tool)
    for tool in alarms_tools(alarms) if alarms is not None else []:
        registry.register(tool)
    for tool in _device_tools(config, alarms):
        registry.register(tool)
    for tool in _account_tools(config, paths, secrets or SecretStore(), now) if paths else []:
        registry.register(tool)
    if contacts is not None and contacts.configured:
        tz = time_zone(config.calendar.time_zone or config.alarms.time_zone)
        for tool in contacts_tools(contacts, tz):
            registry.register(tool)
    for tool in servers.tools() if servers is not None else []:
        registry.register(tool)
    return registry


def documents_index(config: Config, paths: Paths) -> DocumentIndex | None:
    """The index of the documents in the files folders (None when the settings turn it off);
    it lives in the data folder, which is never indexed itself."""
    d = config.documents
    if not d.index:
        return None
    return DocumentIndex(
        paths.data_dir / INDEX_NAME,
        config.file_roots(),
        exclude=[Path(p).expanduser() for p in d.exclude],
        kinds=[f".{k}" for k in d.kinds],
        skip=[paths.data_dir, paths.cache_dir, paths.config_dir],
        max_bytes=int(d.max_file_mb * 1024 * 1024),
        read_timeout_s=d.read_timeout_s,
        readers=d.readers,
    )


def build_contacts(
    config: Config,
    paths: Paths,
    secrets: SecretStore,
    now: Callable[[], datetime] | None = None,
) -> ContactsService:
    """The profile's address books: its .vcf files and its accounts' CardDAV books, over the
    cache in the data folder (a broken accounts file leaves only the files)."""
    try:
        accounts, problem = AccountBook.for_paths(paths).load(), None
    except ConfigError as exc:
        accounts, problem = [], str(exc)
    return contacts_service(config.contacts, paths.data_dir, accounts, secrets, problem, now)


def _account_tools(
    config: Config, paths: Paths, secrets: SecretStore, now: Callable[[], datetime] | None = None
) -> list[Tool]:
    """Calendar and mail tools; a broken accounts file or keyring errs when used, not at start."""
    try:
        accounts, problem = AccountBook.for_paths(paths).load(), None
    except ConfigError as exc:
        accounts, problem = [], str(exc)
    tz = time_zone(config.calendar.time_zone or config.alarms.time_zone)
    folder = paths.data_dir / "calendar"
    calendar = calendar_service(config.calendar, tz, folder, accounts, secrets, problem, now)
    tools = calendar_tools(calendar) if calendar.sources or problem else []
    if problem or any(isinstance(a, MailAccount) for a in accounts):
        tools += email_tools(mail_service(config.email, tz, accounts, secrets, problem, now))
    return tools


def _device_tools(config: Config, alarms: AlarmService | None = None) -> list[Tool]:
    d = config.device
    if not d.enabled:
        return []
    return device_tools(
        config.file_roots(),
        sound=Sound(d.pulse_server),
        desktop=DesktopSettings(d.gsettings),
        power=Power(Path(d.sysfs)),
        alarms=alarms,
    )


def _weather_tools(config: Config, resources: ExitStack) -> list[Tool]:
    w = config.weather

    def http() -> httpx.Client:  # made on the first weather request: httpx is ~10 MiB resident
        import httpx

        return httpx.Client(
            timeout=httpx.Timeout(w.timeout_s),
            follow_redirects=False,
            headers={"User-Agent": f"botpsy-desktop/{__version__}"},
        )

    client = OpenMeteo(
        http,
        geocoding_url=w.geocoding_url,
        forecast_url=w.forecast_url,
        forecast_days=w.forecast_days,
        cache_s=w.cache_s,
    )
    resources.callback(client.close)
    return weather_tools(client, units=w.units, default_location=w.default_location)


def _music_tools(
    config: Config, paths: Paths | None, resources: ExitStack, player: Player | None
) -> list[Tool]:
    m = config.music
    index = paths.data_dir / "music.sqlite3" if paths is not None else None
    library = MusicLibrary([Path(f) for f in m.folders], index, rescan_s=m.rescan_s)
    resources.callback(library.close)
    if player is None:
        player = headless_player(m.player, m.player_args)
        resources.callback(player.close)
    return music_tools(MusicController(library, player, volume_percent=m.volume))


@dataclass
class App:
    """The assembled core, shared by the CLI and the window."""

    paths: Paths
    config: Config
    store: ConversationStore
    registry: ToolRegistry
    gate: Gate
    resources: ExitStack = field(default_factory=ExitStack)
    alarms: AlarmService | None = None
    """Alarms, timers and reminders; started only by long-running faces (window, daemon)."""
    secrets: SecretStore = field(default_factory=SecretStore)
    """Account passwords (OS keyring, or this session only when the user chooses that)."""
    tool_servers: ServerHub | None = None
    """The tool servers (MCP) of the profile, their connections and tools."""
    documents: DocumentIndex | None = None
    """The documents index (search_documents); None when the settings turn it off."""
    _indexing: threading.Thread | None = field(default=None, init=False, repr=False)
    _stop_indexing: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    contacts: ContactsService | None = None
    """The address books (vCard files, CardDAV) and their local cache."""
    restores: Restores | None = None
    """Timed ways back ("mute for an hour"), carried out when due while the alarms run."""
    _approvals: ApprovalQueue | None = field(default=None, init=False, repr=False)
    busy: Busy = field(default_factory=Busy)
    prepare_yielded: bool = False  # the last prepare_model stopped for another's request
    """Held while the model writes a reply or is prepared (sessions made here hold it); the
    documents index waits meanwhile (:meth:`start_indexing`)."""
    _voice: VoiceInput | None = field(default=None, init=False, repr=False)
    _speaker: ReplySpeaker | None = field(default=None, init=False, repr=False)

    def voice(self) -> VoiceInput:
        """Push-to-talk (microphone and speech-to-text), made on first use; the speech model
        loads only at the first recognition, never when the app starts."""
        if self._voice is None:
            from botpsy_desktop.speech.voice import VoiceInput

            self._voice = VoiceInput(self.config, self.paths)
        return self._voice

    def speaker(self) -> ReplySpeaker:
        """Spoken replies (espeak-ng), made on first use; whether answers are spoken is
        voice.speak_replies, read at each answer."""
        if self._speaker is None:
            from botpsy_desktop.speech.tts import ReplySpeaker

            self._speaker = ReplySpeaker(self.config, self.config.device.pulse_server)
        return self._speaker

    def stop_speaking(self) -> None:
        """End the reply being read aloud, if any (a new request, or the microphone)."""
        if self._speaker is not None:
            self._speaker.stop()

    def approvals(self) -> ApprovalQueue:
        """The stored queue of approvals that parked background runs wait for (shared by the
        window, ``botpsy daemon`` and ``botpsy approvals``), opened on first use; approvals of
        other processes show in the gate's inbox (the window's queue) while it is watched."""
        if self._approvals is None:
            from botpsy_desktop.agent.approvals import ApprovalQueue

            self._approvals = ApprovalQueue(self.store, inbox=self.gate.inbox)
        return self._approvals

    def backend(
        self,
        *,
        model: str | None = None,
        replay: str | None = None,
        engine: str | None = None,
        settings: ModelSettings | None = None,
        prefix_states: bool = True,
    ) -> EngineProcess | ReplayBackend | RemoteBackend:
        """A replay backend if ``replay`` is given; a llama-server at ``engine`` (or the
        configured engine, unless ``model`` is given); else llama.cpp on ``model`` or the
        config's, in its own worker process (llm/engines/engine_process.py). ``settings``
        replace the config's model settings (the evaluation's); ``prefix_states`` False keeps no
        prefix states on disk (the fidelity check)."""
        if replay is not None:
            from botpsy_desktop.llm.engines.replay import ReplayBackend

            return ReplayBackend.from_file(replay, n_ctx=self.config.model.n_ctx)
        url = engine or (None if model else self.config.engine.url)
        if url:
            return self.remote_backend(url)
        settings = settings or self.config.model
        path = model or self.config.model.path
        if not path:
            raise ModelError(
                "No model is set up yet.",
                "Download BotPsy-0.8B with `botpsy model pull`, add a GGUF file with "
                "`botpsy model import PATH`, or pass --model PATH.",
            )
        from botpsy_desktop.llm.engines.engine_process import EngineProcess

        # the engine runs in a worker process: a crash there costs one answer, not the app
        return EngineProcess(
            settings,
            path,
            prefix_cache_dir=self.paths.cache_dir if prefix_states else None,
            prefix_cache_mb=self.config.model.prefix_cache_mb,
            model_sha256=self._checked_sha256(path),
            work_dir=self.paths.cache_dir / "engine",
        )

    def remote_backend(self, url: str) -> RemoteBackend:
        """The llama-server at ``url`` as the engine, with its API key from the keyring."""
        from botpsy_desktop.core.config import engine_origin
        from botpsy_desktop.core.secrets import KeyringUnavailable, engine_entry
        from botpsy_desktop.llm.engines.remote import RemoteBackend

        try:
            key = self.secrets.get("", entry=engine_entry(engine_origin(url)))
        except KeyringUnavailable as exc:  # a server without a key still works; one with
            log.warning("engine API key not read: %s", exc)  # says it refused us
            key = None
        return RemoteBackend(self.config.engine, self.config.model, url=url, api_key=key)

    def _checked_sha256(self, path: str) -> str | None:
        """The SHA-256 the model registry checked for ``path`` if the file is in the models
        folder (a linked file may change behind its back: it is identified by its header)."""
        try:
            target = Path(path).expanduser().resolve()
            service = self.models()
            for model in service.installed():
                if model.managed and service.path_of(model).resolve() == target:
                    return model.sha256
        except (OSError, ModelError):
            return None
        return None

    def account_problem(self) -> ConfigError | None:
        """Why the accounts file cannot be used (calendar and mail are off until it is fixed),
        or None when it is fine or absent."""
        try:
            AccountBook.for_paths(self.paths).load()
        except ConfigError as exc:
            return exc
        return None

    def models(self) -> ModelService:
        """The installed-models service (pull, import, use, verify, remove) for this profile."""
        from botpsy_desktop.llm.models.installed import ModelService

        return ModelService(self.paths, self.config)

    def loop_settings(self) -> LoopSettings:
        from botpsy_desktop.agent.loop import LoopSettings

        a = self.config.agent
        return LoopSettings(
            system_prompt=a.system_prompt,
            max_steps=a.max_steps,
            tool_timeout_s=a.tool_timeout_s,
            tool_timeouts=dict(a.tool_timeouts),
            max_observation_chars=a.max_observation_chars,
            background_approval_timeout_s=a.background_approval_timeout_s,
            reply_tokens=a.reply_reserve_tokens or self.config.model.max_tokens,
            trim_chunk_turns=a.trim_chunk_turns,
            select_tools=a.tool_selection,
            conversation_tools=a.conversation_tools,
            prompt_tools=a.prompt_tools,
            max_calls_per_turn=a.max_calls_per_turn,
        )

    def session(
        self, backend: Backend, conversation_id: str | None = None, *, background: bool = False
    ) -> AgentSession:
        """A session; ``background`` (scheduled runs): approvals wait for the user, never auto."""
        from botpsy_desktop.agent.loop import AgentSession

        return AgentSession(
            backend,
            self.registry,
            self.gate,
            self.store,
            self.loop_settings(),
            conversation_id,
            background=background,
            busy=self.busy,
        )

    def warm(
        self,
        backend: Backend,
        conversation_id: str | None = None,
        *,
        think: bool | None = None,
        cancel: threading.Event | None = None,
        progress: Callable[[PromptProgress, str], None] | None = None,
        most: int | None = None,
    ) -> bool:
        """Let the model evaluate ahead what the next request will start with (llama.cpp only).

        No conversation: the system prompt with each tool set a request may be offered (one per
        domain, then all tools), once per model and tool set (call after loading a model). A
        conversation: its history as the next request renders it. Run it on the thread that
        owns the backend, when idle; ``cancel`` stops it early. ``progress`` hears how far each
        evaluation has come, with what is being prepared in words. ``most`` (a conversation on
        an engine that keeps states on disk): prepare nothing when more than that many tokens
        would need evaluating. Whether anything was prepared.
        """
        warm = getattr(backend, "warm", None)
        if warm is None:
            return False
        with self.busy.hold(PREPARING):  # the documents index waits meanwhile
            return self._warm(warm, backend, conversation_id, think, cancel, progress, most)

    def _warm(
        self,
        warm: Callable[..., GenerationStats | None],
        backend: Backend,
        conversation_id: str | None,
        think: bool | None,
        cancel: threading.Event | None,
        progress: Callable[[PromptProgress, str], None] | None,
        most: int | None = None,
    ) -> bool:
        import inspect

        from botpsy_desktop.agent.selection import ToolSelector, stable_schemas
        from botpsy_desktop.agent.steps.tools_offered import stable_prompt

        # a backend whose warm takes no ``progress`` (a wrapper, another process) warms silently
        hears = "progress" in inspect.signature(warm).parameters
        keeps = "keep" in inspect.signature(warm).parameters

        def told(what: str) -> dict[str, Callable[[PromptProgress], None]]:
            if progress is None or not hears:
                return {}
            return {"progress": lambda p: progress(p, what)}

        think = self.config.model.think if think is None else think
        settings = self.loop_settings()
        selector = ToolSelector(self.registry) if settings.select_tools else None
        if conversation_id:
            # the loop's own prompt (tool output framed as it frames it, older turns left out
            # as the context budget will leave them out), so the tokens match; with the tools
            # of the domains the conversation used, as a follow-up on them will be offered
            # with the conversation's tool set as its next request starts with it (unless that
            # request grows it), kept on disk for a new process (the next `botpsy ask`)
            session = self.session(backend, conversation_id)
            tools = session.warm_tools()
            stats = warm(
                session.warm_messages(tools, think),
                tools,
                enable_thinking=think,
                cancel=cancel,
                **told("Preparing this conversation"),
                **({"keep": conversation_id} if keeps else {}),
                **({"most": most} if keeps and most is not None else {}),
            )
            if most is not None and stats is not None:
                return bool(stats.prompt_tokens) and (
                    stats.evaluated_tokens > 0 or stats.reused_tokens == stats.prompt_tokens
                )
            return True
        system = [{"role": "system", "content": settings.system_prompt}]
        everything = self.registry.schemas()
        if selector is not None and stable_prompt(backend, self.registry, settings):
            # every request lists the app's own tools (agent/steps/tools_offered.py
            # stable_prompt): one prefix, after the list with the tool servers' tools when there
            # are some (a request about them), so that the context holds what most requests
            # start with
            own = stable_schemas(self.registry)
            every = [everything, own] if len(own) < len(everything) else [own]
        else:
            # the tool sets requests are offered (agent/selection.py): one per domain, then all
            # of them, the fallback, left in the context last (saved states keep the others)
            sets = [] if selector is None else [selector.schemas(c) for c in selector.warm_sets()]
            every = [*sets[:-1], everything]
        for i, tools in enumerate(every, 1):
            if cancel is not None and cancel.is_set():
                return i > 1
            what = "Preparing the model" + (
                f" (part {i} of {len(every)})" if len(every) > 1 else ""
            )
            warm(system, tools, enable_thinking=think, cancel=cancel, **told(what))
        return True

    def prepare_model(
        self,
        path: str | None = None,
        *,
        cancel: threading.Event | None = None,
        progress: Callable[[PromptProgress, str], None] | None = None,
    ) -> bool:
        """Prepare a model just installed (`botpsy model pull` / `import`) for its first
        question: load it in an engine worker with the settings every request uses, evaluate
        the prefixes of its usual tool sets (what :meth:`warm` does after a load) and keep their
        states on disk (llm/cache/prefix_store.py), so that the first request after installing,
        in whatever process, restores them instead of evaluating them, as a later one does.
        ``cancel`` stops it between two small batches (what was written stays good), and so
        does a request that another process of the profile starts meanwhile (the window,
        `botpsy ask`: :meth:`Busy.answering_elsewhere`), which then has the computer to itself;
        :attr:`prepare_yielded` says so. Only for llama.cpp run here (a llama-server keeps its
        own cache). Whether it finished."""
        self.prepare_yielded = False
        if self.config.engine.url:
            return False
        cancel = cancel or threading.Event()
        done = threading.Event()

        def yield_to_requests() -> None:
            while not done.wait(0.25):
                if self.busy.answering_elsewhere():
                    self.prepare_yielded = True
                    cancel.set()
                    return

        watcher = threading.Thread(target=yield_to_requests, name="prepare-yield", daemon=True)
        backend = self.backend(model=path or self.config.model.path)
        watcher.start()
        try:
            self.warm(backend, cancel=cancel, progress=progress)
            flush = getattr(backend, "flush_prefix_writes", None)
            if flush is not None:
                flush()  # the states are on disk before the worker goes
        finally:
            done.set()
            watcher.join()
            backend.close()
        return not cancel.is_set()

    def keep_for_next(self, backend: Backend, conversation_id: str) -> bool:
        """After a request in a process that ends with it (`botpsy ask`): warm the conversation
        as its next request will start and keep that state on disk, so that the next process
        (`botpsy ask --conversation`) evaluates only its own message. Only for an engine that
        keeps states on disk (llama.cpp here), and only when that costs next to nothing (at
        most KEEP_FOR_NEXT_TOKENS to evaluate beyond what the request left in the context):
        the person waits for the process to end, and a next request that needs more pays it
        itself, from the prefix kept on disk. Whether it kept the state."""
        warm = getattr(backend, "warm", None)
        if warm is None:
            return False
        import inspect

        if "keep" not in inspect.signature(warm).parameters:
            return False  # a llama-server keeps its slot itself
        return self.warm(backend, conversation_id, most=KEEP_FOR_NEXT_TOKENS)

    def plan_undo(self, action_id: int | None = None) -> UndoPlan:
        """Undo, judged by the gate: the plan to undo audit entry ``action_id`` (None: the
        newest reversible action). If ``plan.needs_approval``, show ``plan.request`` (summary,
        details) and let the person decide before :meth:`undo`; else :meth:`undo` at once."""
        from botpsy_desktop.agent.audit import AuditLog
        from botpsy_desktop.agent.undo import plan_undo

        return plan_undo(AuditLog(self.store), self.registry, self.gate, action_id)

    def undo(self, plan: UndoPlan, by: str = "user (undo)") -> Undone:
        """Carry out an undo plan (approved first where it asks); raises BotpsyError if not."""
        from botpsy_desktop.agent.audit import AuditLog
        from botpsy_desktop.agent.undo import carry_out

        return carry_out(AuditLog(self.store), plan, by)

    def start_indexing(self) -> bool:
        """Bring the documents index up to date in a background thread (at a lower CPU
        priority where the OS allows), then keep it current from the file system's change
        events (adapters/documents/watch.py, unless ``documents.watch`` is off), unless that
        runs already; it stops, keeping what it did, when the app closes. The one place the
        window, ``botpsy chat`` and ``botpsy daemon`` index from. Whether a thread was started.

        It pauses (between two files, keeping what it did; searches go on) while the model
        answers or is prepared (:attr:`busy`) and while the computer runs on its battery
        (unless ``documents.pause_on_battery`` is off), and goes on by itself after;
        ``documents.progress.paused`` and `botpsy index status` say why it waits."""
        index = self.documents
        if index is None or (self._indexing is not None and self._indexing.is_alive()):
            return False

        from botpsy_desktop.adapters.documents.watch import Watcher

        on_battery = _battery_check(Path(self.config.device.sysfs), self.config.documents)
        busy = self.busy

        def paused() -> str:
            return busy.reason() or on_battery()

        watcher = Watcher(index, pause=paused) if self.config.documents.watch else None

        def run() -> None:
            _lower_priority()
            # watching starts before the scan (no change falls in between), off the caller's
            # thread (adding a watch per folder takes a while in a large home)
            watching = watcher is not None and watcher.start()
            stop = self._stop_indexing
            try:
                while not index.update(stop, pause=paused).complete and not stop.is_set():
                    wait_while(paused, stop, busy)
            except Exception:  # a full disk, a damaged index: logged; searching says so
                log.exception("documents index: the update failed")
            if watcher is not None and watching:
                watcher.run(self._stop_indexing)  # then changes as they happen, until close

        self._indexing = threading.Thread(target=run, name="documents-index", daemon=True)
        self._indexing.start()
        return True

    def indexing_progress(self) -> Progress | None:
        """How far the documents index has come (its scan, or why it waits), once
        :meth:`start_indexing` has started it; None before, or with no index."""
        if self.documents is None or self._indexing is None:
            return None
        return self.documents.progress

    def close(self) -> None:
        self._stop_indexing.set()
        if self._indexing is not None:
            self._indexing.join(timeout=10)
        if self._approvals is not None:
            self._approvals.close()
        if self._voice is not None:
            self._voice.close()
        if self._speaker is not None:
            self._speaker.close()
        if self.alarms is not None:
            self.alarms.shutdown()
        self.resources.close()
        self.store.close()


def wait_while(paused: Callable[[], str], stop: threading.Event, busy: Busy) -> None:
    """Wait while ``paused`` gives a reason, until ``stop``; woken early when ``busy`` is
    released (a request's end), else looked at again every second (the battery)."""
    while paused() and not stop.is_set():
        busy.wait(1.0)


def _battery_check(sysfs: Path, settings: DocumentsSettings) -> Callable[[], str]:
    """ "on battery power" while the computer runs on its battery (checked every 5 s at most,
    through the device tools' reading of the power supply), else ''; always '' when the
    settings say to index on battery too."""
    checked: list[float] = []
    answer = [""]

    def on_battery() -> str:
        if not settings.pause_on_battery:
            return ""
        now = time.monotonic()
        if not checked or now - checked[0] >= 5:
            try:
                plugged = Power(sysfs).battery().get("plugged_in", True)
            except Exception:  # no way to tell: index as on mains
                plugged = True
            answer[0] = "" if plugged else "on battery power"
            checked[:] = [now]
        return answer[0]

    return on_battery


def _lower_priority() -> None:
    """The calling thread at a lower CPU priority (Linux: a thread's own nice value), so that
    indexing yields to the model and the window."""
    if not sys.platform.startswith("linux"):  # elsewhere the id would name a process
        return
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)


def build_gate(config: Config, people: ContactsService | None = None) -> Gate:
    """The gate the app ships, for these settings (the only place a Gate is configured);
    ``people``: the address books it weighs recipients against (agent/people.py)."""
    return Gate(
        offer_scopes=config.agent.allow_for_conversation,
        never_scoped=ALWAYS_ASK,
        ask_every_change=config.agent.ask_before_every_change,
        folders=tuple(str(p) for p in config.file_roots()),
        people=people if people is not None and people.configured else None,
    )


def build_app(
    home: str | Path | None = None,
    *,
    player: Player | None = None,
    now: Callable[[], datetime] | None = None,
) -> App:
    """Assemble the app for a profile: ``home`` (or $BOTPSY_HOME) or the user's folders.

    ``player`` plays music instead of the headless player (the window passes its Qt player);
    ``now`` (aware) replaces the wall clock of alarms, calendar, mail and files (the evaluation
    harness fixes it per case).
    """
    paths = Paths.resolve(home)
    paths.ensure()
    config = Config.load(paths)
    store = ConversationStore(paths.database)
    resources = ExitStack()
    alarms = AlarmService.from_settings(paths.data_dir / "alarms.sqlite3", config.alarms, now=now)
    secrets = SecretStore()
    servers = ServerHub(ServerBook.for_paths(paths, secrets))
    resources.callback(servers.close)
    documents = documents_index(config, paths)
    contacts = build_contacts(config, paths, secrets, now)
    resources.callback(contacts.close)
    registry = build_registry(
        config,
        paths,
        resources,
        player=player,
        alarms=alarms,
        secrets=secrets,
        now=now,
        servers=servers,
        documents=documents,
        contacts=contacts,
    )
    gate = build_gate(config, contacts)
    restores = Restores(alarms, AuditLog(store), registry, gate)
    # requests of every process of the profile are seen by the others (core/busy.py)
    busy = Busy(shared=paths.data_dir / "answering.lock")
    return App(
        paths,
        config,
        store,
        registry,
        gate,
        resources,
        alarms,
        secrets=secrets,
        tool_servers=servers,
        documents=documents,
        contacts=contacts,
        restores=restores,
        busy=busy,
    )
