"""The BotPsy-shaped random-weight GGUFs the maintainer scripts measure, built once into a cache."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path.home() / ".cache" / "botpsy-desktop-tools"


def make_synthetic_model() -> ModuleType:
    """tools/make_synthetic_model.py as a module (tools/ is not a package)."""
    spec = importlib.util.spec_from_file_location("msm", ROOT / "tools" / "make_synthetic_model.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["msm"] = module  # dataclasses look their module up while it executes
    spec.loader.exec_module(module)
    return module


def synthetic_botpsy(quant: str = "q4_k_m") -> Path:
    """The synthetic BotPsy model (exact Qwen3.5-0.8B shapes) at ``quant``, built if missing.

    It is built in a child process: building and quantizing takes gigabytes, and a benchmark
    that built it in its own process would report that as its peak memory."""
    out = CACHE / f"botpsy-synthetic-{quant}.gguf"
    if not out.exists():
        print(f"building {out} (about a minute, in a child process) ...", file=sys.stderr)
        subprocess.run([sys.executable, __file__, quant], check=True)
    if not out.exists():
        raise SystemExit(f"building {out} failed")
    return out


def _build(quant: str) -> None:
    out = CACHE / f"botpsy-synthetic-{quant}.gguf"
    make_synthetic_model().build_model("botpsy", out, quant, CACHE / "sdist", 0)


if __name__ == "__main__":  # the child synthetic_botpsy starts
    _build(sys.argv[1])
