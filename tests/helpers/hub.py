"""A local stand-in for the Hugging Face Hub endpoints botpsy uses, served on 127.0.0.1."""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import numpy as np

INVALID_TOKEN = "Invalid credentials in Authorization header"


def write_gguf(path: Path, n_bytes: int, *, arch: str = "llama", seed: int = 0) -> Path:
    """A small valid GGUF (header + random f32 tensors, about ``n_bytes``) for download tests."""
    import gguf

    writer = gguf.GGUFWriter(path, arch)
    writer.add_name(path.stem)
    writer.add_file_type(0)
    rng = np.random.default_rng(seed)
    per_tensor = 256 * 1024
    for i in range(max(1, n_bytes // (per_tensor * 4))):
        writer.add_tensor(f"blk.{i}.weight", rng.standard_normal(per_tensor).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (for "offline" tests)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Blob:
    data: bytes
    lfs: bool = True

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def git_oid(self) -> str:
        header = f"blob {len(self.data)}\0".encode()
        return hashlib.sha1(header + self.data, usedforsecurity=False).hexdigest()


@dataclass
class Repo:
    commit: str
    files: dict[str, Blob] = field(default_factory=dict)
    gated: bool = False
    granted: set[str] = field(default_factory=set)  # tokens whose account accepted the terms


@dataclass
class Served:
    """One request as the stand-in saw it, with the body bytes it actually sent."""

    method: str
    path: str
    query: str
    range: str | None
    status: int
    authorization: str | None
    sent: int = 0


@dataclass
class Faults:
    """Misbehaviour of the file server (the CDN the Hub redirects to), for ``times`` responses."""

    cut_after: int | None = None  # close the connection after this many body bytes
    stall_after: int | None = None  # stop sending, keep the connection open
    trickle: bool = False  # one byte every 0.2 s
    corrupt: bool = False  # flip one byte of what is sent
    ignore_range: bool = False  # answer 200 with the whole file to a Range request
    times: int = 1


class HubStandIn:
    """Serves /api/models/{repo}[/revision/{rev}], /{repo}/resolve/{rev}/{file} and a CDN path.

    Errors carry the X-Error-Code / X-Error-Message headers huggingface_hub interprets:
    RepoNotFound (401 without a token, as the Hub does), RevisionNotFound, EntryNotFound,
    GatedRepo (401 without a token, 403 with one that was not granted access), and a 401 with
    "Invalid credentials in Authorization header" for an unknown token. LFS files are answered
    by a 302 to /cdn/{sha256} with X-Repo-Commit, X-Linked-Etag, X-Linked-Size and ETag; the
    CDN honours Range (206, Content-Range, 416).
    """

    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.tokens: set[str] = set()
        self.log: list[Served] = []
        self.faults: Faults | None = None
        self.short_by = 0  # the CDN's copy lacks this many final bytes (a truncated upload)
        self.stop = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def add_file(self, repo: str, path: str, content: bytes | Path, *, lfs: bool = True) -> Blob:
        data = content.read_bytes() if isinstance(content, Path) else content
        r = self.repos.setdefault(repo, Repo(commit=hashlib.sha1(repo.encode()).hexdigest()))
        blob = r.files[path] = Blob(data, lfs)
        return blob

    def requests(self, prefix: str = "") -> list[Served]:
        return [s for s in self.log if s.path.startswith(prefix)]

    def file_requests(self) -> list[Served]:
        return [s for s in self.log if s.method == "GET" and s.path.startswith("/cdn/")]

    def __enter__(self) -> HubStandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def take_fault(self) -> Faults | None:
        f = self.faults
        if f is None:
            return None
        f.times -= 1
        if f.times <= 0:
            self.faults = None
        return f


def _make_handler(hub: HubStandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            return None

        # -- plumbing ----------------------------------------------------------------------------

        def _record(self, status: int) -> Served:
            served = Served(
                self.command,
                urlsplit(self.path).path,
                urlsplit(self.path).query,
                self.headers.get("Range"),
                status,
                self.headers.get("Authorization"),
            )
            hub.log.append(served)
            return served

        def _send(self, status: int, headers: dict[str, str], body: bytes = b"") -> None:
            served = self._record(status)
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
                served.sent = len(body)

        def _error(self, status: int, code: str | None, message: str) -> None:
            headers = {"Content-Type": "application/json", "X-Error-Message": message}
            if code:
                headers["X-Error-Code"] = code
            self._send(status, headers, json.dumps({"error": message}).encode())

        def _token(self) -> str | None:
            auth = self.headers.get("Authorization", "")
            return auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else None

        def _repo(self, name: str, rev: str | None) -> Repo | None:
            """The repo, or None after answering with the Hub's error for it."""
            token = self._token()
            if token is not None and token not in hub.tokens:
                self._error(401, None, INVALID_TOKEN)
                return None
            repo = hub.repos.get(name)
            if repo is None:
                self._error(401 if token is None else 404, "RepoNotFound", "Repository not found")
                return None
            if rev is not None and rev not in ("main", repo.commit):
                self._error(404, "RevisionNotFound", "Invalid rev id: " + rev)
                return None
            return repo

        # -- routes ------------------------------------------------------------------------------

        def do_HEAD(self) -> None:
            self.do_GET()

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            path = unquote(url.path)
            if m := re.fullmatch(r"/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?", path):
                return self._model_info(m[1], m[2] or "main", parse_qs(url.query))
            if m := re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path):
                return self._resolve(m[1], m[2], m[3])
            if m := re.fullmatch(r"/cdn/([0-9a-f]{64})", path):
                blob = next(
                    (b for r in hub.repos.values() for b in r.files.values() if b.sha256 == m[1]),
                    None,
                )
                if blob is not None:
                    return self._serve(blob, {"ETag": f'"{blob.sha256}"'})
            return self._error(404, None, "Not found")

        def _model_info(self, name: str, rev: str, query: dict[str, list[str]]) -> None:
            repo = self._repo(name, rev)
            if repo is None:
                return
            blobs = query.get("blobs", ["false"])[0].lower() == "true"
            siblings = []
            for p, b in repo.files.items():
                s: dict[str, object] = {"rfilename": p}
                if blobs:
                    s |= {"size": len(b.data), "blobId": b.git_oid}
                    if b.lfs:
                        s["lfs"] = {"sha256": b.sha256, "size": len(b.data), "pointerSize": 134}
                siblings.append(s)
            body = {
                "_id": repo.commit[:24],
                "id": name,
                "modelId": name,
                "sha": repo.commit,
                "private": False,
                "gated": "manual" if repo.gated else False,
                "disabled": False,
                "tags": ["gguf"],
                "siblings": siblings,
            }
            self._send(200, {"Content-Type": "application/json"}, json.dumps(body).encode())

        def _resolve(self, name: str, rev: str, file: str) -> None:
            repo = self._repo(name, rev)
            if repo is None:
                return None
            blob = repo.files.get(file)
            if blob is None:
                return self._error(404, "EntryNotFound", f"{file} does not exist on {rev}")
            if repo.gated and self._token() not in repo.granted:
                message = (
                    f"Access to model {name} is restricted. You must have access to it and be "
                    "authenticated to access it. Please log in."
                )
                return self._error(401 if self._token() is None else 403, "GatedRepo", message)
            common = {"X-Repo-Commit": repo.commit, "Accept-Ranges": "bytes"}
            if not blob.lfs:
                return self._serve(blob, {**common, "ETag": f'"{blob.git_oid}"'})
            return self._send(
                302,
                {
                    **common,
                    "Location": f"/cdn/{blob.sha256}",
                    "ETag": f'"{blob.git_oid}"',
                    "X-Linked-Etag": f'"{blob.sha256}"',
                    "X-Linked-Size": str(len(blob.data)),
                },
            )

        def _serve(self, blob: Blob, headers: dict[str, str]) -> None:
            data = blob.data[: len(blob.data) - hub.short_by] if hub.short_by else blob.data
            size = len(data)
            fault = hub.take_fault() if self.command == "GET" else None
            start, end = 0, size - 1
            status = 200
            wanted = self.headers.get("Range")
            if wanted and not (fault and fault.ignore_range):
                m = re.fullmatch(r"bytes=(\d+)-(\d*)", wanted.strip())
                if m is None or int(m[1]) >= size:
                    self._record(416)
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{size}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                start = int(m[1])
                end = min(int(m[2]), size - 1) if m[2] else size - 1
                status = 206
                headers = {**headers, "Content-Range": f"bytes {start}-{end}/{size}"}
            served = self._record(status)
            self.send_response(status)
            for k, v in {**headers, "Accept-Ranges": "bytes"}.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(end - start + 1))
            self.send_header("Content-Type", "application/octet-stream")
            self.end_headers()
            if self.command == "HEAD":
                return
            body = data[start : end + 1]
            if fault and fault.corrupt:
                mid = len(body) // 2
                body = body[:mid] + bytes([body[mid] ^ 0xFF]) + body[mid + 1 :]
            for piece in _pieces(body, fault):
                if piece is None:  # stall: keep the connection, send nothing more
                    hub.stop.wait(60)
                    self.close_connection = True
                    return
                try:
                    self.wfile.write(piece)
                except OSError:  # the client gave up
                    self.close_connection = True
                    return
                served.sent += len(piece)
                if fault and fault.trickle and hub.stop.wait(0.2):
                    return
            if fault and fault.cut_after is not None and served.sent < len(body):
                self.close_connection = True

    return Handler


def _pieces(body: bytes, fault: Faults | None) -> Iterator[bytes | None]:
    """The body in 64 KiB pieces, cut short, stalled or trickled as the fault says."""
    limit = len(body)
    if fault and fault.cut_after is not None:
        limit = min(limit, fault.cut_after)
    if fault and fault.stall_after is not None:
        limit = min(limit, fault.stall_after)
    step = 1 if fault and fault.trickle else 64 * 1024
    pos = 0
    while pos < limit:
        yield body[pos : min(pos + step, limit)]
        pos += step
    if fault and fault.stall_after is not None and limit < len(body):
        yield None
