"""The speech models of the catalog: where each lives, its check, and its download."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path

from botpsy_desktop.core.config import Config
from botpsy_desktop.core.paths import Paths
from botpsy_desktop.llm.models.catalog import SpeechEntry, load_catalog
from botpsy_desktop.llm.models.download import HubClient, OnProgress, hash_file, human_bytes
from botpsy_desktop.speech.recognizer import SpeechError


@dataclass(frozen=True)
class SpeechModelState:
    entry: SpeechEntry
    path: Path
    present: bool


class SpeechModels:
    """Speech models live in ``models/speech/`` under the catalog's file name. A file is used
    only after its size and SHA-256 matched the catalog; the check is remembered next to it
    (size and modification time), so it runs again only when the file changed."""

    def __init__(self, paths: Paths, config: Config) -> None:
        self.paths, self.config = paths, config
        self.dir = paths.models_dir / "speech"
        self.catalog = load_catalog()

    def entry(self, model_id: str) -> SpeechEntry:
        entry = self.catalog.speech(model_id)
        if entry is None:
            known = ", ".join(m.id for m in self.catalog.speech_models)
            raise SpeechError(
                f"There is no speech model called {model_id!r}.",
                f"Choose one of {known} (voice.model in the settings).",
                kind="model_missing",
            )
        return entry

    def path_of(self, entry: SpeechEntry) -> Path:
        return self.dir / entry.file

    def states(self) -> list[SpeechModelState]:
        return [
            SpeechModelState(e, self.path_of(e), self.path_of(e).is_file())
            for e in self.catalog.speech_models
        ]

    def _stamp(self, path: Path) -> Path:
        return path.with_name(f".{path.name}.verified")

    def _stamp_matches(self, path: Path, entry: SpeechEntry) -> bool:
        try:
            st = path.stat()
            data = json.loads(self._stamp(path).read_text("utf-8"))
        except (OSError, ValueError):
            return False
        return bool(
            data == {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": entry.sha256}
        )

    def _write_stamp(self, path: Path, entry: SpeechEntry) -> None:
        st = path.stat()
        stamp = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": entry.sha256}
        self._stamp(path).write_text(json.dumps(stamp), "utf-8")

    def require(self, model_id: str, *, on_progress: OnProgress | None = None) -> Path:
        """The verified file of ``model_id``, or SpeechError saying what to do."""
        entry = self.entry(model_id)
        path = self.path_of(entry)
        pull = f"`botpsy model pull {entry.id}`"
        if not path.is_file():
            raise SpeechError(
                f"The speech model {entry.name} is not installed.",
                f"Get it with {pull} ({human_bytes(entry.size)}, from huggingface.co/"
                f"{entry.source.repo}).",
                kind="model_missing",
            )
        if self._stamp_matches(path, entry):
            return path
        size = path.stat().st_size
        if size != entry.size:
            raise SpeechError(
                f"The speech model file {path} is damaged: it has {size:,} bytes where "
                f"{entry.name} has {entry.size:,}.",
                f"Download it again with {pull}.",
                kind="model_damaged",
            )
        got = hash_file(path, on_progress=on_progress)
        if got != entry.sha256:
            raise SpeechError(
                f"The speech model file {path} is damaged: its SHA-256 is {got[:12]}… where "
                f"{entry.name}'s is {entry.sha256[:12]}….",
                f"Download it again with {pull}.",
                kind="model_damaged",
            )
        self._write_stamp(path, entry)
        return path

    def pull(
        self,
        model_id: str,
        *,
        on_progress: OnProgress | None = None,
        cancel: threading.Event | None = None,
    ) -> Path:
        """Download ``model_id`` (resuming a partial download) and check it, unless a good copy
        is already there; a damaged copy is replaced only by a download that checks out."""
        entry = self.entry(model_id)
        path = self.path_of(entry)
        if path.is_file():
            try:
                return self.require(model_id, on_progress=on_progress)
            except SpeechError as exc:
                if exc.kind != "model_damaged":
                    raise
        d = self.config.downloads
        with HubClient(
            d.hub_endpoint,
            connect_timeout_s=d.connect_timeout_s,
            stall_timeout_s=d.stall_timeout_s,
            retries=d.retries,
        ) as client:
            client.download(entry.hub_file(), path, on_progress=on_progress, cancel=cancel)
        self._write_stamp(path, entry)
        return path
