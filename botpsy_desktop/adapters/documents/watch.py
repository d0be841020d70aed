"""Keeps the documents index current from the file system's own change events, where it has them.

watchdog (pinned in pyproject.toml) wraps each OS's notification API (inotify on Linux,
FSEvents on macOS, ReadDirectoryChangesW on Windows) behind one interface and is the
maintained library for it; writing three of those by hand is what it saves. Events are
collected and applied together after ``settle_s`` quiet seconds (a program saving a file
writes it in several steps): a file created, changed, moved or deleted is read or forgotten
(DocumentIndex.apply); a folder moved or deleted, or events lost, bring a full incremental
update. Where the OS gives no events (or too few watches are left), nothing is watched and the
rescan before each search keeps the index current (index.py ``refresh``).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from botpsy_desktop.adapters.documents.index import DocumentIndex

log = logging.getLogger(__name__)


class Watcher:
    """Applies the file-system events under the index's roots (see the module's notes)."""

    def __init__(
        self,
        index: DocumentIndex,
        settle_s: float = 2.0,
        pause: Callable[[], str] | None = None,
    ) -> None:
        self.index = index
        self.settle_s = settle_s
        self.pause = pause
        """Why changes wait now ('' when they need not): they are applied after the pause."""
        self._pending: set[str] = set()
        self._full = False
        self._lock = threading.Lock()
        self._event = threading.Event()
        self._observer: Any = None
        self._handler: Any = None
        self._new_tops: list[str] = []

    def _heard(self, event: Any) -> None:
        paths = [str(event.src_path)]
        if getattr(event, "dest_path", ""):
            paths.append(str(event.dest_path))
        with self._lock:
            if event.is_directory and event.event_type in ("moved", "deleted", "created"):
                self._full = True
                parent = os.path.dirname(paths[-1])
                if self.index.jail is not None and Path(parent) in self.index.jail.roots:
                    self._new_tops.append(paths[-1])  # a new folder at the top: watch it
            else:
                self._pending.update(p for p in paths if self.index.wanted(p))
        self._event.set()

    def start(self) -> bool:
        """Watch the roots; False (logged) when the OS or watchdog cannot.

        Each root itself is watched for its own files and new folders, and each of its
        folders that the index enters is watched with everything below it; hidden, cache and
        excluded folders at the top (a home's ``.cache``, ``.local``: most of its folders) are
        not, as inotify would add a watch for every folder in them."""
        if self.index.jail is None:
            return False
        try:
            from watchdog.events import FileSystemEvent, FileSystemEventHandler
            from watchdog.observers import Observer
        except ImportError as exc:
            log.info("documents index: no watcher (%s); searches rescan instead", exc)
            return False
        heard = self._heard

        class Handler(FileSystemEventHandler):
            def on_any_event(self, event: FileSystemEvent) -> None:
                if event.event_type not in ("opened", "closed_no_write"):
                    heard(event)

        self._handler = Handler()
        observer = Observer()
        try:
            for root in self.index.jail.roots:
                observer.schedule(self._handler, str(root), recursive=False)
                for folder in self._folders(root):
                    observer.schedule(self._handler, folder, recursive=True)
            observer.start()
        except (OSError, RuntimeError) as exc:  # e.g. inotify's watch limit
            log.warning("documents index: cannot watch the folders (%s); searches rescan", exc)
            observer.stop()
            return False
        self._observer = observer
        self.index.watched = True
        return True

    def _folders(self, root: Path) -> list[str]:
        """The folders right inside ``root`` that the index enters."""
        try:
            with os.scandir(root) as entries:
                return sorted(
                    e.path
                    for e in entries
                    if e.is_dir(follow_symlinks=False)
                    and not self.index.skipped_folder(e.path, e.name)
                )
        except OSError:
            return []

    def run(self, stop: threading.Event) -> None:
        """Apply events as they settle until ``stop`` is set; then stop watching."""
        try:
            while not stop.is_set():
                if not self._event.wait(0.5):
                    continue
                if stop.wait(self.settle_s):  # let a burst of events end
                    break
                if self._paused(stop):
                    break
                with self._lock:
                    paths, full = sorted(self._pending), self._full
                    tops, self._new_tops = self._new_tops, []
                    self._pending, self._full = set(), False
                    self._event.clear()
                for top in tops:
                    self._watch(top)
                try:
                    if full:
                        if not self.index.update(stop, pause=self.pause).complete:
                            with self._lock:  # paused or stopped midway: again after it
                                self._full = True
                                self._event.set()
                    elif paths:
                        self.index.apply(paths)
                except Exception:  # a full disk, a locked index: logged, tried at the next event
                    log.exception("documents index: applying changes failed")
        finally:
            self.close()

    def _paused(self, stop: threading.Event) -> bool:
        """Wait while :attr:`pause` gives a reason (the progress says it); whether ``stop``
        was set meanwhile."""
        while self.pause is not None and (why := self.pause()):
            self.index.progress.paused = why
            if stop.wait(0.5):
                return True
        self.index.progress.paused = ""
        return stop.is_set()

    def _watch(self, folder: str) -> None:
        name = os.path.basename(folder)
        if self._observer is None or self.index.skipped_folder(folder, name):
            return
        try:
            self._observer.schedule(self._handler, folder, recursive=True)
        except (OSError, RuntimeError) as exc:
            log.warning("documents index: cannot watch %s (%s)", folder, exc)

    def close(self) -> None:
        observer, self._observer = self._observer, None
        self.index.watched = False
        if observer is not None:
            observer.stop()
            observer.join(timeout=5)
