"""Composition root: builds config, store, tools, gate and a model backend for a profile."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from botpsy_desktop.adapters.files import files_tools
from botpsy_desktop.agent.gate import Gate
from botpsy_desktop.agent.loop import AgentSession, LoopSettings
from botpsy_desktop.agent.store import ConversationStore
from botpsy_desktop.agent.tools import ToolRegistry
from botpsy_desktop.core.config import Config
from botpsy_desktop.core.errors import ModelError
from botpsy_desktop.core.paths import Paths
from botpsy_desktop.llm.backend import Backend


def build_registry(config: Config) -> ToolRegistry:
    """Every tool the assistant can use, built from the configuration."""
    registry = ToolRegistry()
    for tool in files_tools(config.file_roots(), max_read_bytes=config.files.max_read_bytes):
        registry.register(tool)
    return registry


@dataclass
class App:
    """The assembled core, shared by the CLI and the window."""

    paths: Paths
    config: Config
    store: ConversationStore
    registry: ToolRegistry
    gate: Gate

    def backend(self, *, model: str | None = None, replay: str | None = None) -> Backend:
        """A replay backend if ``replay`` is given, else llama.cpp on ``model`` or the config's."""
        if replay is not None:
            from botpsy_desktop.llm.replay import ReplayBackend

            return ReplayBackend.from_file(replay)
        path = model or self.config.model.path
        if not path:
            raise ModelError(
                "No model is set up yet.",
                "Pass --model PATH to a GGUF file (e.g. BotPsy-0.8B Q4_K_M), or set model.path "
                f"in {self.paths.config_file}.",
            )
        from botpsy_desktop.llm.engine import LlamaBackend

        return LlamaBackend(self.config.model, path)

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
        self.store.close()


def build_app(home: str | Path | None = None) -> App:
    """Assemble the app for a profile: ``home`` (or $BOTPSY_HOME) or the user's folders."""
    paths = Paths.resolve(home)
    paths.ensure()
    config = Config.load(paths)
    store = ConversationStore(paths.database)
    return App(paths, config, store, build_registry(config), Gate())
