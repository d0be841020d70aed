"""Composition root: builds config, store, tools, gate and a model backend for a profile."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from botpsy_desktop import __version__
from botpsy_desktop.adapters.alarms import AlarmService, alarms_tools
from botpsy_desktop.adapters.files import files_tools
from botpsy_desktop.adapters.music import (
    MusicController,
    MusicLibrary,
    Player,
    headless_player,
    music_tools,
)
from botpsy_desktop.adapters.weather import OpenMeteo, weather_tools
from botpsy_desktop.agent.gate import Gate
from botpsy_desktop.agent.loop import AgentSession, LoopSettings
from botpsy_desktop.agent.store import ConversationStore
from botpsy_desktop.agent.tools import Tool, ToolRegistry
from botpsy_desktop.core.config import Config
from botpsy_desktop.core.errors import ModelError
from botpsy_desktop.core.paths import Paths
from botpsy_desktop.llm.backend import Backend

if TYPE_CHECKING:
    from botpsy_desktop.llm.models import ModelService


def build_registry(
    config: Config,
    paths: Paths | None = None,
    resources: ExitStack | None = None,
    *,
    player: Player | None = None,
    alarms: AlarmService | None = None,
) -> ToolRegistry:
    """Every tool the assistant can use, built from the configuration.

    Clients the tools hold (HTTP, the music player and index) are closed by ``resources``;
    ``player`` replaces the headless music player (the window passes its Qt one); the alarm
    tools are there when an ``alarms`` service is given.
    """
    resources = resources if resources is not None else ExitStack()
    registry = ToolRegistry()
    for tool in files_tools(
        config.file_roots(),
        max_read_bytes=config.files.max_read_bytes,
        max_search_bytes=config.files.max_search_bytes,
        data_dir=paths.data_dir if paths is not None else None,  # the action log (undo)
    ):
        registry.register(tool)
    for tool in _weather_tools(config, resources) + _music_tools(config, paths, resources, player):
        registry.register(tool)
    for tool in alarms_tools(alarms) if alarms is not None else []:
        registry.register(tool)
    return registry


def _weather_tools(config: Config, resources: ExitStack) -> list[Tool]:
    w = config.weather
    http = resources.enter_context(
        httpx.Client(
            timeout=httpx.Timeout(w.timeout_s),
            follow_redirects=False,
            headers={"User-Agent": f"botpsy-desktop/{__version__}"},
        )
    )
    client = OpenMeteo(
        http,
        geocoding_url=w.geocoding_url,
        forecast_url=w.forecast_url,
        forecast_days=w.forecast_days,
        cache_s=w.cache_s,
    )
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

    def backend(self, *, model: str | None = None, replay: str | None = None) -> Backend:
        """A replay backend if ``replay`` is given, else llama.cpp on ``model`` or the config's."""
        if replay is not None:
            from botpsy_desktop.llm.replay import ReplayBackend

            return ReplayBackend.from_file(replay)
        path = model or self.config.model.path
        if not path:
            raise ModelError(
                "No model is set up yet.",
                "Download BotPsy-0.8B with `botpsy model pull`, add a GGUF file with "
                "`botpsy model import PATH`, or pass --model PATH.",
            )
        from botpsy_desktop.llm.engine import LlamaBackend

        return LlamaBackend(self.config.model, path)

    def models(self) -> ModelService:
        """The installed-models service (pull, import, use, verify, remove) for this profile."""
        from botpsy_desktop.llm.models import ModelService

        return ModelService(self.paths, self.config)

    def loop_settings(self) -> LoopSettings:
        a = self.config.agent
        return LoopSettings(
            system_prompt=a.system_prompt,
            max_steps=a.max_steps,
            tool_timeout_s=a.tool_timeout_s,
            max_observation_chars=a.max_observation_chars,
        )

    def session(self, backend: Backend, conversation_id: str | None = None) -> AgentSession:
        return AgentSession(
            backend, self.registry, self.gate, self.store, self.loop_settings(), conversation_id
        )

    def close(self) -> None:
        if self.alarms is not None:
            self.alarms.shutdown()
        self.resources.close()
        self.store.close()


def build_app(home: str | Path | None = None, *, player: Player | None = None) -> App:
    """Assemble the app for a profile: ``home`` (or $BOTPSY_HOME) or the user's folders.

    ``player`` plays music instead of the headless player (the window passes its Qt player).
    """
    paths = Paths.resolve(home)
    paths.ensure()
    config = Config.load(paths)
    store = ConversationStore(paths.database)
    resources = ExitStack()
    alarms = AlarmService.from_settings(paths.data_dir / "alarms.sqlite3", config.alarms)
    registry = build_registry(config, paths, resources, player=player, alarms=alarms)
    return App(paths, config, store, registry, Gate(), resources, alarms)
