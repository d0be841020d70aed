"""Download model files from the Hugging Face Hub: resume, progress, stall timeouts, SHA-256."""

# Why a hand-written httpx download and not huggingface_hub's hf_hub_download:
# - Resume across runs is a requirement, and current huggingface_hub no longer gives it: since
#   huggingface/huggingface_hub#4228 `_download_to_tmp_and_move` writes to a process-unique
#   `*.incomplete` file and deletes it on failure, so an interrupted 500 MB pull starts over.
# - For Xet-backed repositories (new Hub repos are) hf_hub_download switches to the `hf_xet`
#   native client, a protocol a local stand-in server cannot speak: the code path tested here
#   would not be the one users run. The Hub's /resolve URL still redirects Xet files to a plain
#   HTTPS CDN that honours Range, which is what this module uses, in tests and in production.
# - We need what hf_hub_download does not offer: a whole-file SHA-256 check against the LFS
#   metadata before the file is used, progress events (bytes, speed, time left) for the window,
#   a bounded stall timeout, and one plain sentence per failure instead of a stack of HTTP errors.
# httpx is already a dependency. The endpoints and headers are the ones huggingface_hub uses:
# GET /api/models/{repo}/revision/{rev}?blobs=true (= model_info(files_metadata=True)),
# GET /{repo}/resolve/{commit}/{file} (302 to the CDN), X-Error-Code for RepoNotFound,
# RevisionNotFound, EntryNotFound and GatedRepo, and its token and offline environment variables.

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal
from urllib.parse import quote

from botpsy_desktop import __version__
from botpsy_desktop.core.errors import ModelError

if TYPE_CHECKING:
    # imported where a download runs: the helpers here (locks, sizes) are used without one
    import httpx

DEFAULT_ENDPOINT = "https://huggingface.co"
# Room left free on the disk after a download, so the system is not starved.
DISK_RESERVE = 64 * 1024 * 1024
# A connection that delivers less than this in a whole stall window counts as stalled.
MIN_BYTES_PER_WINDOW = 1024
_TRUE = {"1", "ON", "YES", "TRUE"}

ErrorKind = Literal[
    "offline", "auth", "gated", "not_found", "stalled", "interrupted", "integrity", "disk",
    "busy", "cancelled", "server",
]  # fmt: skip
Phase = Literal["download", "check", "copy"]


class DownloadError(ModelError):
    """A download failed; ``kind`` says how, so a window can react (e.g. offer to resume)."""

    def __init__(self, message: str, hint: str = "", kind: ErrorKind = "server") -> None:
        super().__init__(message, hint)
        self.kind: ErrorKind = kind


def hub_endpoint(configured: str | None = None) -> str:
    """$HF_ENDPOINT (as huggingface_hub reads it), else the configured URL, else the Hub."""
    return (os.environ.get("HF_ENDPOINT") or configured or DEFAULT_ENDPOINT).rstrip("/")


def hub_token() -> str | None:
    """The user's Hugging Face token, found where huggingface_hub looks: $HF_TOKEN, token file."""
    token = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    if not token:
        cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        home = os.environ.get("HF_HOME") or os.path.join(cache, "huggingface")
        file = os.environ.get("HF_TOKEN_PATH") or os.path.join(home, "token")
        try:
            token = Path(os.path.expanduser(os.path.expandvars(file))).read_text("utf-8")
        except (OSError, UnicodeDecodeError):
            return None
    return token.strip() or None


def offline_mode() -> bool:
    """True when $HF_HUB_OFFLINE (or $TRANSFORMERS_OFFLINE) asks for no network."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.upper() in _TRUE


@dataclass(frozen=True)
class HubFile:
    """One file of a repository at a fixed commit, with the checksum the Hub lists for it."""

    repo: str
    commit: str
    path: str
    size: int
    sha256: str | None  # from the LFS pointer; None for small files kept in git itself
    blob_id: str | None  # git object id: checks files that have no LFS pointer

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    @property
    def uri(self) -> str:
        return f"hf://{self.repo}@{self.commit}/{self.path}"


@dataclass(frozen=True)
class RepoInfo:
    repo: str
    commit: str
    gated: bool
    files: tuple[HubFile, ...]


@dataclass(frozen=True)
class Progress:
    """Where a transfer or a checksum pass stands. Sent at most ~10 times a second."""

    phase: Phase
    filename: str
    done: int
    total: int
    resumed_from: int = 0
    bytes_per_s: float = 0.0
    elapsed_s: float = 0.0
    finished: bool = False

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 1.0

    @property
    def eta_s(self) -> float | None:
        if self.finished:
            return 0.0
        if self.bytes_per_s <= 0:
            return None
        return (self.total - self.done) / self.bytes_per_s


OnProgress = Callable[[Progress], None]


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError  # pragma: no cover


def _clock(seconds: float) -> str:
    s = int(seconds + 0.5)
    return (
        f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
    )


def format_progress(p: Progress, width: int = 24) -> str:
    """One terminal line: bar, percentage, bytes, speed and time left."""
    filled = int(width * p.fraction)
    bar = "#" * filled + "-" * (width - filled)
    verb = {"download": "", "check": "checking ", "copy": "copying "}[p.phase]
    line = (
        f"{verb}{p.filename} [{bar}] {100 * p.fraction:5.1f}% "
        f"{human_bytes(p.done)}/{human_bytes(p.total)}"
    )
    if p.finished:
        return f"{line} in {_clock(p.elapsed_s)}"
    if p.bytes_per_s > 0:
        line += f" {human_bytes(p.bytes_per_s)}/s"
    eta = p.eta_s
    return line + (f" {_clock(eta)} left" if eta is not None else " --:-- left")


class ProgressMeter:
    """Turns byte counts into throttled Progress events with a speed over the last few seconds."""

    def __init__(
        self, phase: Phase, name: str, total: int, start: int, cb: OnProgress | None
    ) -> None:
        self.phase, self.name, self.total, self.start, self.cb = phase, name, total, start, cb
        self.t0 = self.last_emit = time.monotonic()
        self.samples: collections.deque[tuple[float, int]] = collections.deque([(self.t0, start)])
        self.done = start
        self.emit()

    def speed(self, now: float) -> float:
        while len(self.samples) > 2 and now - self.samples[0][0] > 5.0:
            self.samples.popleft()
        t, n = self.samples[0]
        return (self.done - n) / (now - t) if now - t >= 0.5 else 0.0  # no guess from a blip

    def update(self, done: int) -> None:
        self.done = done
        now = time.monotonic()
        if now - self.last_emit >= 0.1:
            self.samples.append((now, done))
            self.emit()

    def emit(self, finished: bool = False) -> None:
        now = time.monotonic()
        self.last_emit = now
        if self.cb is None:
            return
        elapsed = now - self.t0
        speed = (self.done - self.start) / elapsed if finished and elapsed > 0 else self.speed(now)
        self.cb(
            Progress(
                self.phase, self.name, self.done, self.total, self.start, speed, elapsed, finished
            )
        )

    def finish(self) -> None:
        self.emit(finished=True)


def hash_file(
    path: Path,
    algorithm: str = "sha256",
    on_progress: OnProgress | None = None,
    cancel: threading.Event | None = None,
) -> str:
    """Hex digest of a file, reading it in chunks and reporting progress (phase "check")."""
    digest = hashlib.new(algorithm)
    total = path.stat().st_size
    meter = ProgressMeter("check", path.name, total, 0, on_progress)
    done = 0
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            if cancel is not None and cancel.is_set():
                raise DownloadError(f"Checking {path.name} was stopped.", kind="cancelled")
            digest.update(chunk)
            done += len(chunk)
            meter.update(done)
    meter.finish()
    return digest.hexdigest()


def check_disk_space(folder: Path, needed: int, what: str) -> None:
    """Raise before writing anything if ``needed`` bytes (plus a reserve) do not fit."""
    folder.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(folder).free
    if needed + DISK_RESERVE > free:
        raise DownloadError(
            f"Not enough disk space for {what}: it needs {human_bytes(needed)} more and "
            f"{folder} has {human_bytes(free)} free.",
            "Free some space, or keep models on another disk with --home DIR.",
            kind="disk",
        )


@contextlib.contextmanager
def exclusive_lock(path: Path, what: str, *, wait: bool = False) -> Iterator[None]:
    """Hold an exclusive lock file; if another process holds it, wait or fail at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
                import msvcrt

                msvcrt.locking(fd, msvcrt.LK_LOCK if wait else msvcrt.LK_NBLCK, 1)
            else:
                import fcntl

                fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise DownloadError(
                f"Another botpsy is already busy with {what}.",
                "Wait for it to finish, then run the command again.",
                kind="busy",
            ) from None
        yield
    finally:
        os.close(fd)


class _Stalled(Exception):
    pass


class _Interrupted(Exception):
    pass


def _git_blob_sha1(path: Path) -> str:
    digest = hashlib.sha1(f"blob {path.stat().st_size}\0".encode(), usedforsecurity=False)
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


class _Job:
    """One file being downloaded: the partial file and the running SHA-256 of its bytes."""

    def __init__(
        self,
        file: HubFile,
        part: Path,
        meta: Path,
        cancel: threading.Event | None,
        on_progress: OnProgress | None,
    ) -> None:
        self.file, self.part, self.meta, self.cancel = file, part, meta, cancel
        self.digest = hashlib.sha256()
        if part.exists():  # resuming: the checksum covers the bytes saved by an earlier run
            checked = ProgressMeter("check", part.name, part.stat().st_size, 0, on_progress)
            with part.open("rb") as existing:
                while chunk := existing.read(1 << 20):
                    self.digest.update(chunk)
                    checked.update(checked.done + len(chunk))
            checked.finish()
        self.meter = ProgressMeter("download", file.name, file.size, self.have(), on_progress)

    def have(self) -> int:
        return self.part.stat().st_size if self.part.exists() else 0

    def reset(self) -> None:
        self.part.unlink(missing_ok=True)
        self.digest = hashlib.sha256()

    def discard(self) -> None:
        self.part.unlink(missing_ok=True)
        self.meta.unlink(missing_ok=True)


class HubClient:
    """Talks to the Hugging Face Hub (or whatever $HF_ENDPOINT points at).

    Every network wait is bounded: ``connect_timeout_s`` to connect, ``stall_timeout_s`` without
    data (or with less than 1 KiB in that long) before a transfer counts as stalled. A transfer
    that breaks is resumed with a Range request up to ``retries`` times, and the partial file
    stays on disk so the next run continues where this one stopped.
    """

    def __init__(
        self,
        endpoint: str | None = None,
        token: str | None = None,
        *,
        connect_timeout_s: float = 15.0,
        stall_timeout_s: float = 30.0,
        retries: int = 2,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        import httpx

        self.endpoint = hub_endpoint(endpoint)
        self.token = token if token is not None else hub_token()
        self.stall_timeout_s = stall_timeout_s
        self.retries = retries
        headers = {"User-Agent": f"botpsy-desktop/{__version__}", "Accept-Encoding": "identity"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        self._http = httpx.Client(
            headers=headers,
            timeout=httpx.Timeout(stall_timeout_s, connect=connect_timeout_s),
            follow_redirects=True,
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> HubClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- errors ----------------------------------------------------------------------------------

    def _offline_check(self) -> None:
        if offline_mode():
            raise DownloadError(
                "Offline mode is on (HF_HUB_OFFLINE is set), so nothing can be downloaded.",
                "Unset HF_HUB_OFFLINE to download, or add a GGUF file you already have with "
                "`botpsy model import PATH`.",
                kind="offline",
            )

    def _network_error(self, exc: httpx.TransportError, what: str) -> DownloadError:
        import httpx

        if isinstance(exc, httpx.TimeoutException) and not isinstance(exc, httpx.ConnectTimeout):
            return DownloadError(
                f"The Hugging Face Hub at {self.endpoint} did not answer within "
                f"{self.stall_timeout_s:g} s while getting {what}.",
                "Check your connection and run the command again.",
                kind="stalled",
            )
        return DownloadError(
            f"Cannot reach the Hugging Face Hub at {self.endpoint} ({type(exc).__name__}).",
            "Check your internet connection and run the command again, or add a GGUF file you "
            "already have with `botpsy model import PATH`.",
            kind="offline",
        )

    def _status_error(self, r: httpx.Response, repo: str, what: str) -> DownloadError:
        code = r.headers.get("X-Error-Code", "")
        message = r.headers.get("X-Error-Message", "")
        page = f"{self.endpoint}/{repo}"
        if code == "GatedRepo":
            if not self.token:
                return DownloadError(
                    f"{repo} is gated: the Hub shares it only with accounts that accepted its "
                    "conditions.",
                    f"Accept them at {page} while logged in, then set HF_TOKEN to a read token "
                    "of that account (https://huggingface.co/settings/tokens) and run the "
                    "command again.",
                    kind="gated",
                )
            return DownloadError(
                f"{repo} is gated and your Hugging Face account has no access to it yet.",
                f"Accept its conditions at {page} with the account of your HF_TOKEN (some "
                "repositories also need the authors' approval), then run the command again.",
                kind="gated",
            )
        if r.status_code == 401 and message == "Invalid credentials in Authorization header":
            return DownloadError(
                "The Hugging Face Hub refused your token (HF_TOKEN or the saved login).",
                "Create a new read token at https://huggingface.co/settings/tokens and set "
                "HF_TOKEN to it.",
                kind="auth",
            )
        if code == "RepoNotFound" or r.status_code == 401:
            hint = "Check the name (owner/name), e.g. on the Hub's website."
            if not self.token:
                hint += " If the repository is private, set HF_TOKEN to a token that can read it."
            return DownloadError(
                f"The repository {repo} was not found on the Hugging Face Hub.",
                hint,
                kind="not_found",
            )
        if code == "RevisionNotFound":
            return DownloadError(
                f"{repo} has no revision called {what}.",
                "Check the revision (a branch, tag or commit) or leave it out to use main.",
                kind="not_found",
            )
        if code == "EntryNotFound" or r.status_code == 404:
            return DownloadError(
                f"{what} was not found in {repo} on the Hugging Face Hub.",
                f"See the repository's files at {page}/tree/main and check the name.",
                kind="not_found",
            )
        if r.status_code == 403:
            return DownloadError(
                f"The Hugging Face Hub refused access to {what} in {repo} (403 Forbidden).",
                "Check that your token (HF_TOKEN) has read access to this repository.",
                kind="auth",
            )
        if r.status_code == 429:
            return DownloadError(
                "The Hugging Face Hub is limiting requests from this address (429).",
                "Wait a few minutes and run the command again.",
                kind="server",
            )
        return DownloadError(
            f"The Hugging Face Hub answered {r.status_code} {r.reason_phrase} for {what} "
            f"in {repo}.",
            "Try again later; if it persists, check https://status.huggingface.co.",
            kind="server",
        )

    # -- metadata --------------------------------------------------------------------------------

    def repo_info(self, repo: str, revision: str = "main") -> RepoInfo:
        """The repository's commit and files with sizes and LFS SHA-256 (one API request)."""
        import httpx

        self._offline_check()
        url = f"{self.endpoint}/api/models/{repo}/revision/{quote(revision, safe='')}"
        try:
            r = self._http.get(url, params={"blobs": "true"})
        except httpx.TransportError as exc:
            raise self._network_error(exc, f"the file list of {repo}") from exc
        if r.status_code != 200:
            raise self._status_error(r, repo, revision)
        try:
            data: Any = r.json()
            commit = str(data["sha"])
            files = []
            for s in data.get("siblings") or []:
                lfs = s.get("lfs") or None
                files.append(
                    HubFile(
                        repo=repo,
                        commit=commit,
                        path=str(s["rfilename"]),
                        size=int(lfs["size"] if lfs else s.get("size", -1)),
                        sha256=str(lfs["sha256"]).lower() if lfs else None,
                        blob_id=s.get("blobId"),
                    )
                )
        except (ValueError, KeyError, TypeError) as exc:
            raise DownloadError(
                f"The Hub's answer about {repo} could not be understood ({exc!r}).",
                f"Check that {self.endpoint} is the Hugging Face Hub (HF_ENDPOINT).",
                kind="server",
            ) from exc
        return RepoInfo(repo, commit, bool(data.get("gated")), tuple(files))

    def file_url(self, f: HubFile) -> str:
        return f"{self.endpoint}/{f.repo}/resolve/{f.commit}/{quote(f.path)}"

    # -- download --------------------------------------------------------------------------------

    def download(
        self,
        f: HubFile,
        dest: Path,
        *,
        on_progress: OnProgress | None = None,
        cancel: threading.Event | None = None,
    ) -> Path:
        """Download ``f`` to ``dest``, resuming ``dest``.part, and check it before moving it.

        Nothing appears at ``dest`` unless the size and checksum match the Hub's metadata. A
        damaged or truncated result is deleted; an interrupted one is kept for the next run.
        """
        self._offline_check()
        if f.size < 0 or (f.sha256 is None and f.blob_id is None):
            raise DownloadError(
                f"The Hub lists no size or checksum for {f.path} in {f.repo}, so it cannot be "
                "verified.",
                "Download it yourself and add it with `botpsy model import PATH`.",
                kind="integrity",
            )
        dest.parent.mkdir(parents=True, exist_ok=True)
        part = dest.with_name(dest.name + ".part")
        meta = dest.with_name(dest.name + ".part.json")
        identity = {"uri": f.uri, "size": f.size, "sha256": f.sha256, "blob_id": f.blob_id}
        with exclusive_lock(dest.with_name(f".{dest.name}.lock"), f"downloading {f.name}"):
            try:
                same = json.loads(meta.read_text("utf-8")) == identity
            except (OSError, ValueError):
                same = False
            if not same or (part.exists() and part.stat().st_size > f.size):
                part.unlink(missing_ok=True)
            have = part.stat().st_size if part.exists() else 0
            check_disk_space(dest.parent, f.size - have, f"{f.name} ({human_bytes(f.size)})")
            meta.write_text(json.dumps(identity), "utf-8")
            job = _Job(f, part, meta, cancel, on_progress)
            try:
                self._transfer(job)
            except DownloadError as exc:
                if exc.kind == "integrity":
                    job.discard()
                raise
            self._verify(job)
            os.replace(part, dest)
            meta.unlink(missing_ok=True)
        return dest

    def _transfer(self, job: _Job) -> None:
        import httpx

        attempt = 0
        while True:
            try:
                self._get(job)
                break
            except (_Stalled, _Interrupted, httpx.TransportError) as exc:
                if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)) and attempt == 0:
                    raise self._network_error(exc, job.file.name) from exc
                if attempt < self.retries:
                    attempt += 1
                    time.sleep(min(0.5 * attempt, 5.0))
                    continue
                f, saved = job.file, job.have()
                stalled = isinstance(exc, (_Stalled, httpx.TimeoutException))
                reason = (
                    f"no data for {self.stall_timeout_s:g} s"
                    if stalled
                    else "the connection was closed"
                )
                raise DownloadError(
                    f"The download of {f.name} stopped: {reason} "
                    f"({human_bytes(saved)} of {human_bytes(f.size)} saved).",
                    "Check your connection and run the same command again to resume.",
                    kind="stalled" if stalled else "interrupted",
                ) from exc
        job.meter.finish()

    def _get(self, job: _Job, *, restart: bool = False) -> None:
        """One GET of the rest of the file; a normal end of the body ends the transfer."""
        f = job.file
        if restart:
            job.reset()
        have = job.have()
        if have >= f.size:
            return None
        headers = {"Range": f"bytes={have}-"} if have else {}
        with self._http.stream("GET", self.file_url(f), headers=headers) as r:
            if r.status_code == 416 and have:
                # What we have is no prefix of the file on the server: start over, once.
                r.read()
                return self._get(job, restart=True)
            if r.status_code not in (200, 206):
                r.read()
                raise self._status_error(r, f.repo, f.path)
            if r.status_code == 206:
                first = r.headers.get("Content-Range", "").removeprefix("bytes ").split("-")[0]
                if first != str(have):
                    r.close()
                    return self._get(job, restart=True)
            elif have:  # the server ignored Range and sends the whole file
                job.reset()
                have = 0
            with job.part.open("ab") as out:
                try:
                    self._copy_body(job, r, out, have)
                finally:
                    out.flush()
                    os.fsync(out.fileno())
        return None

    def _copy_body(self, job: _Job, r: httpx.Response, out: IO[bytes], have: int) -> None:
        import httpx

        f = job.file
        window_start, window_bytes = time.monotonic(), 0
        try:
            for chunk in r.iter_raw():
                if job.cancel is not None and job.cancel.is_set():
                    raise DownloadError(
                        f"The download of {f.name} was stopped "
                        f"({human_bytes(have)} of {human_bytes(f.size)} saved).",
                        "Run the same command again to resume.",
                        kind="cancelled",
                    )
                if have + len(chunk) > f.size:
                    raise DownloadError(
                        f"The server sent more of {f.name} than the {f.size:,} bytes the Hub "
                        "lists, so the partial file was removed.",
                        "Run the same command again later.",
                        kind="integrity",
                    )
                out.write(chunk)
                job.digest.update(chunk)
                have += len(chunk)
                window_bytes += len(chunk)
                job.meter.update(have)
                now = time.monotonic()
                if now - window_start >= self.stall_timeout_s:
                    if window_bytes < MIN_BYTES_PER_WINDOW:
                        raise _Stalled
                    window_start, window_bytes = now, 0
        except httpx.ReadTimeout as exc:
            raise _Stalled from exc
        except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
            raise _Interrupted from exc

    @staticmethod
    def _verify(job: _Job) -> None:
        f, size = job.file, job.have()
        problem = None
        if size < f.size:
            problem = f"truncated: {size:,} of {f.size:,} bytes arrived"
        elif f.sha256 is not None:
            got = job.digest.hexdigest()
            if got != f.sha256:
                problem = f"damaged: its SHA-256 is {got[:12]}… but the Hub lists {f.sha256[:12]}…"
        elif f.blob_id is not None and _git_blob_sha1(job.part) != f.blob_id:
            problem = "damaged: its git checksum differs from the Hub's"
        if problem is not None:
            job.discard()
            raise DownloadError(
                f"The downloaded {f.name} is {problem}, so it was removed.",
                "Run the same command again to download it anew.",
                kind="integrity",
            )
