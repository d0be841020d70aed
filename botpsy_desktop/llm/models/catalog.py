"""The models the app knows how to get (catalog.json) and how a pull request names a file."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from botpsy_desktop.core.errors import ModelError
from botpsy_desktop.llm.models.download import HubFile
from botpsy_desktop.llm.models.gguf_info import FILE_TYPES


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HubSource(_Strict):
    """A repository on the Hugging Face Hub. The files are not listed here: at pull time the
    Hub's file list is searched for the quantization's name, and the expected SHA-256 is taken
    from the Hub's LFS metadata, so a re-upload never meets a stale checksum."""

    kind: Literal["hub"]
    repo: str = Field(pattern=r"^[\w.-]+/[\w.-]+$")
    revision: str = "main"
    quantizations: list[str] = Field(min_length=1)
    default_quantization: str


class PackageSource(_Strict):
    """A GGUF shipped inside a Python distribution, found through its installed RECORD."""

    kind: Literal["package"]
    distribution: str
    file: str
    install: str
    quantization: str


class CatalogEntry(_Strict):
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    name: str
    description: str
    license: str
    tool_use: Literal["good", "unreliable"]
    note: str = ""
    source: Annotated[HubSource | PackageSource, Field(discriminator="kind")]
    # Sizes measured on BotPsy-shaped GGUFs (see docs/botpsy-model.md), shown before a pull is
    # offered; the real size comes from the Hub at pull time.
    approx_size_mib: dict[str, int] = Field(default_factory=dict)

    @property
    def default_quantization(self) -> str:
        if isinstance(self.source, HubSource):
            return self.source.default_quantization
        return self.source.quantization


class SpeechSource(_Strict):
    """One file of a Hugging Face repository, its size and SHA-256 pinned here (the Hub's LFS
    metadata of ggerganov/whisper.cpp, as published by several projects that pin these files),
    so a pull checks exactly these bytes whatever the repository's tip holds."""

    kind: Literal["hub"]
    repo: str = Field(pattern=r"^[\w.-]+/[\w.-]+$")
    revision: str = "main"


class SpeechEntry(_Strict):
    """A speech-to-text model (voice input): never run by llama.cpp, never a chat model."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    name: str
    description: str
    license: str
    engine: Literal["whisper.cpp"]
    languages: str
    source: SpeechSource
    file: str
    size: int = Field(gt=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")

    def hub_file(self) -> HubFile:
        return HubFile(
            self.source.repo, self.source.revision, self.file, self.size, self.sha256, None
        )


class Catalog(_Strict):
    default: str
    models: list[CatalogEntry]
    default_speech: str = ""
    speech_models: list[SpeechEntry] = Field(default_factory=list)

    def speech(self, model_id: str) -> SpeechEntry | None:
        return next((m for m in self.speech_models if m.id == model_id.lower()), None)

    def get(self, model_id: str) -> CatalogEntry | None:
        return next((m for m in self.models if m.id == model_id.lower()), None)

    @property
    def default_entry(self) -> CatalogEntry:
        entry = self.get(self.default)
        if entry is None:  # pragma: no cover - guarded by a test of the shipped catalog
            raise ModelError(f"The catalog's default model {self.default!r} is not in it.")
        return entry


@cache
def load_catalog() -> Catalog:
    """The catalog shipped with the app (botpsy_desktop/llm/models/catalog.json)."""
    text = resources.files("botpsy_desktop.llm.models").joinpath("catalog.json").read_text("utf-8")
    try:
        return Catalog.model_validate_json(text)
    except ValidationError as exc:  # pragma: no cover - guarded by a test of the shipped catalog
        raise ModelError(
            f"The model catalog is invalid: {exc}", "Reinstall botpsy-desktop."
        ) from exc


# Quantization names as they appear in GGUF file names, longest first so that "Q4_K_M" wins over
# "Q4_K" and "IQ4_XS" is never read as "Q4_...".
QUANTIZATIONS = tuple(
    sorted(
        {*FILE_TYPES.values(), "Q4_K", "Q5_K", "Q3_K", "Q2_K", "MXFP4"},
        key=lambda q: (-len(q), q),
    )
)
_SHARD = re.compile(r"-\d{5}-of-\d{5}\.gguf$", re.IGNORECASE)


def quantization_of(filename: str) -> str | None:
    """The quantization named in a GGUF file name ("BotPsy-0.8B-Q4_K_M.gguf" -> "Q4_K_M")."""
    base = filename.rsplit("/", 1)[-1]
    upper = base.upper()
    for q in QUANTIZATIONS:
        for m in re.finditer(re.escape(q), upper):
            before = upper[m.start() - 1] if m.start() else ""
            after = upper[m.end()] if m.end() < len(upper) else ""
            if not before.isalnum() and not after.isalnum():
                return q
    return None


def model_files(files: Sequence[HubFile]) -> list[HubFile]:
    """The loadable GGUF files of a repository: not vision projectors, not split shards."""
    return [
        f
        for f in files
        if f.path.lower().endswith(".gguf")
        and not f.name.lower().startswith("mmproj")
        and not _SHARD.search(f.path)
    ]


def pick_file(files: Sequence[HubFile], repo: str, quantization: str, hint: str) -> HubFile:
    """The one model file of ``repo`` whose name carries ``quantization``."""
    wanted = quantization.upper()
    candidates = model_files(files)
    matches = [f for f in candidates if quantization_of(f.path) == wanted]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        have = sorted({q for f in candidates if (q := quantization_of(f.path))})
        listed = ", ".join(have) if have else "none"
        raise ModelError(
            f"{repo} has no {wanted} GGUF file (quantizations there: {listed}).",
            hint.format(quants=listed),
        )
    names = ", ".join(f.path for f in matches)
    raise ModelError(
        f"{repo} has several {wanted} files ({names}).",
        f"Name one: `botpsy model pull hf://{repo}/FILE`.",
    )


@dataclass(frozen=True)
class PullRef:
    """What `botpsy model pull` was asked for, before the Hub is asked anything."""

    entry: CatalogEntry | None  # a catalog model, or None for a plain hf:// reference
    repo: str | None
    revision: str
    path: str | None  # an exact file in the repository, when given
    quantization: str | None


_HF = re.compile(
    r"^hf://(?P<repo>[\w.-]+/[\w.-]+?)(?::(?P<quant>[\w]+))?(?:@(?P<rev>[^/]+))?(?:/(?P<path>.+))?$"
)


def parse_ref(ref: str | None, quantization: str | None = None) -> PullRef:
    """Read ``ID[:QUANT]`` (a catalog model) or ``hf://OWNER/REPO[@REV][/FILE]``."""
    catalog = load_catalog()
    text = (ref or catalog.default).strip()
    if text.startswith("hf://"):
        m = _HF.match(text)
        if m is None:
            raise ModelError(
                f"{text!r} is not a Hugging Face reference.",
                "Write hf://OWNER/REPO/FILE.gguf, optionally with @REVISION after the repository.",
            )
        quant = quantization or m["quant"]
        if m["path"] and not m["path"].lower().endswith(".gguf"):
            raise ModelError(
                f"{m['path']} is not a GGUF file.", "botpsy runs .gguf files (llama.cpp format)."
            )
        return PullRef(None, m["repo"], m["rev"] or "main", m["path"], quant)
    model_id, _, quant_suffix = text.partition(":")
    entry = catalog.get(model_id)
    if entry is None:
        known = ", ".join(m.id for m in catalog.models)
        raise ModelError(
            f"There is no model called {model_id!r} in the catalog.",
            f"Choose one of {known}, or pull any GGUF with hf://OWNER/REPO/FILE.gguf.",
        )
    quant = (quantization or quant_suffix or entry.default_quantization).upper()
    if isinstance(entry.source, HubSource):
        return PullRef(entry, entry.source.repo, entry.source.revision, None, quant)
    if quant != entry.source.quantization.upper():
        raise ModelError(
            f"{entry.name} comes only as {entry.source.quantization}.",
            f"Run `botpsy model pull {entry.id}`.",
        )
    return PullRef(entry, None, "", None, quant)
