"""A real llama-server for tests: built once from the llama.cpp that llama-cpp-python vendors.

The binary is compiled from the installed llama-cpp-python version's sdist (the one the
synthetic-model tool caches) with cmake, only the ``llama-server`` target, and cached in the test
cache under a key of that version and this CPU's feature flags (GGML_NATIVE builds for the CPU
it runs on). Tests build or find it; a binary is never downloaded (``python -m
tests.helpers.llama_server`` builds it ahead, as .ci/run does: 10-30 minutes on 2 cores).
``start_server`` runs it on 127.0.0.1 on a free port.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import socket
import subprocess
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.models import fixture_cache_dir, synthetic_model_module, tools_cache_dir

BUILD_FORMAT = "1"  # bump when the cmake options change
CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",  # one self-contained binary to cache
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # never fetch the web UI
    "-DGGML_NATIVE=ON",
)


def _cpu_flags() -> str:
    """This CPU's feature flags (a GGML_NATIVE binary runs only where they are the same)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return " ".join(sorted(line.split(":", 1)[1].split()))
    except OSError:
        pass
    return os.uname().machine


def has_amx() -> bool:
    """Whether llama.cpp would use AMX here (its AMX weight layout crashes on batches > 1)."""
    return "amx_int8" in _cpu_flags().split()


def llama_cpp_version() -> str:
    return str(synthetic_model_module().installed_llama_cpp_version())


def server_dir() -> Path:
    path = fixture_cache_dir() / "llama-server"
    path.mkdir(parents=True, exist_ok=True)
    return path


def binary_key() -> str:
    digest = hashlib.sha256("\n".join([BUILD_FORMAT, *CMAKE_OPTIONS, _cpu_flags()]).encode())
    return f"llama-cpp-python-{llama_cpp_version()}-{digest.hexdigest()[:12]}"


def _sdist() -> Path:
    """The llama-cpp-python sdist of the installed version, downloaded with pip if missing."""
    version = llama_cpp_version()
    cache = tools_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    for name in (f"llama_cpp_python-{version}.tar.gz", f"llama-cpp-python-{version}.tar.gz"):
        if (cache / name).is_file():
            return cache / name
    with tempfile.TemporaryDirectory(dir=cache, prefix=".download-") as tmp:
        synthetic_model_module().pip_download(f"llama-cpp-python=={version}", tmp, sdist=True)
        found = next(Path(tmp).glob("llama*cpp*python-*.tar.gz"))
        target = cache / found.name
        os.replace(found, target)
    return target


def _extract_llama_cpp(sdist: Path, dest: Path) -> Path:
    """Unpack the sdist's vendor/llama.cpp into dest; return its folder."""
    with tarfile.open(sdist, "r:gz") as archive:
        members = [
            m
            for m in archive.getmembers()
            if m.name.partition("/")[2].startswith("vendor/llama.cpp/")
        ]
        archive.extractall(dest, members=members, filter="data")
    roots = list(dest.glob("*/vendor/llama.cpp"))
    if not roots:
        raise RuntimeError(f"{sdist} has no vendor/llama.cpp")
    return roots[0]


def _run_build_step(command: list[str], log: Path, progress: bool) -> int:
    """Run one cmake step with its output appended to ``log``; with ``progress``, also print
    the build's ``[done/total]`` progress about every 15 s (and how long it has run)."""
    with log.open("a") as out:
        if not progress:
            return subprocess.run(
                command, stdout=out, stderr=subprocess.STDOUT, check=False
            ).returncode
        started = time.monotonic()
        shown = started
        proc = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert proc.stdout is not None
        latest = ""
        for line in proc.stdout:
            out.write(line)
            match = re.search(r"\[\s*\d+%\]|\[\d+/\d+\]", line)
            if match:
                latest = line.strip()[:90]
            if time.monotonic() - shown >= 15 and latest:
                shown = time.monotonic()
                took = int(shown - started)
                print(f"   {took // 60:3d}:{took % 60:02d}  {latest}", flush=True)
        return proc.wait()


def ensure_llama_server(progress: bool = False) -> Path:
    """The cached llama-server binary, built now if missing (10-15 minutes on 2 cores);
    ``progress`` prints the build's progress (``python -m tests.helpers.llama_server
    --progress``)."""
    target = server_dir() / binary_key() / "llama-server"
    if target.is_file():
        return target
    if shutil.which("cmake") is None:
        raise RuntimeError("cmake is needed to build llama-server (tools/install-test-deps.sh)")
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test process may be building it
        if target.is_file():
            return target
        work = target.parent / "build"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        source = _extract_llama_cpp(_sdist(), work / "src")
        build = work / "out"
        nice = ["nice", "-n", "10"] if shutil.which("nice") else []
        log = target.parent / "build.log"
        log.write_text("")
        if progress:
            print(f"building llama-server (log: {log})", flush=True)
        for command in (
            [*nice, "cmake", "-S", str(source), "-B", str(build), *CMAKE_OPTIONS],
            [*nice, "cmake", "--build", str(build), "--target", "llama-server", "-j2"],
        ):
            if _run_build_step(command, log, progress) != 0:
                raise RuntimeError(f"building llama-server failed; see {log}")
        staged = target.with_suffix(".tmp")
        shutil.copy2(build / "bin" / "llama-server", staged)
        os.replace(staged, target)
        shutil.rmtree(work, ignore_errors=True)
    return target


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class RunningServer:
    url: str
    process: subprocess.Popen[bytes]
    log: Path
    model: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def server_command(
    binary: Path,
    model: Path,
    port: int,
    *,
    n_ctx: int = 4096,
    slots: int = 1,
    threads: int = 1,
    api_key: str | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """The llama-server command line the tests (and bench) use. One thread by default: on a
    loaded shared machine two threads that wait for each other at every layer are several
    times slower than one."""
    command = [
        str(binary),
        "-m", str(model),
        "--host", "127.0.0.1",
        "--port", str(port),
        "-c", str(n_ctx * slots),
        "-np", str(slots),
        "-t", str(threads),
        "--no-webui",
        "--no-warmup",
    ]  # fmt: skip
    if has_amx():
        command.append("--no-repack")  # llama.cpp's AMX layout crashes on batches > 1 token
    if api_key:
        command += ["--api-key", api_key]
    return [*command, *extra]


@contextlib.contextmanager
def start_server(
    model: Path,
    *,
    n_ctx: int = 4096,
    slots: int = 1,
    threads: int = 1,
    api_key: str | None = None,
    log_dir: Path | None = None,
    extra: Sequence[str] = (),
    timeout_s: float = 180.0,
) -> Iterator[RunningServer]:
    """Run llama-server on 127.0.0.1 for the duration; ``n_ctx`` is per slot."""
    binary = ensure_llama_server()
    port = free_port()
    folder = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix="llama-server-"))
    log = folder / f"llama-server-{port}.log"
    command = server_command(
        binary, model, port, n_ctx=n_ctx, slots=slots, threads=threads, api_key=api_key, extra=extra
    )
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    server = RunningServer(f"http://127.0.0.1:{port}", process, log, model)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if process.poll() is not None:
                raise RuntimeError(
                    f"llama-server exited ({process.returncode}):\n{server.log_text()[-3000:]}"
                )
            try:
                with urllib.request.urlopen(f"{server.url}/health", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama-server did not start:\n{server.log_text()[-3000:]}")
            time.sleep(0.2)
        yield server
    finally:
        server.stop()


if __name__ == "__main__":  # python -m tests.helpers.llama_server [--progress]: build it now
    import sys

    print(ensure_llama_server(progress="--progress" in sys.argv[1:]))
