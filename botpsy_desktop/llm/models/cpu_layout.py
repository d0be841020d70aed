"""How llama.cpp lays out model weights on a CPU, chosen from llama.cpp's own feature report.

On a CPU llama.cpp can keep weights in "extra" buffer types instead of plain memory: AMX tiles
on Intel CPUs with AMX (Sapphire Rapids and later), and an interleaved "repack" layout that
its AVX2/AVX-512 and Arm kernels multiply faster. The AMX layout segfaults in ``llama_decode``
as soon as a batch holds more than one token (llama.cpp issue 20824, closed without a fix), on
every model we tried. So:

* ``extra``: llama.cpp's own choice (AMX first where the build and the CPU have it, then
  repack). The default where the feature report has no AMX.
* ``repack``: the repack layout without AMX, the default where the report says
  ``AMX_INT8 = 1``. llama.cpp offers no switch for that, so the weights it would repack are
  named one by one in ``tensor_buft_overrides`` (the mechanism behind llama-server's
  ``--override-tensor``) and every other weight stays plain (``use_extra_bufts`` off). Which
  weights: those llama.cpp multiplies as 2-D matrices (``GGML_OP_MUL_MAT`` in
  ``llm_tensor_info``) whose type and shape its x86 repack kernels take
  (``ggml_repack_get_optimal_repack_type`` in ``ggml-cpu/repack.cpp``): the same tensors an AMD
  or older Intel CPU repacks by default.
* ``plain``: no extra buffer types at all (llama-server's ``--no-repack``): the fallback when a
  worker still dies during its first decode of a model.

The decision reads llama.cpp's system-info line ("AMX_INT8 = 1" is compiled in only when the
build targets AMX, and llama.cpp drops the layout when the OS refuses AMX at run time), never
CPU model names.
"""

from __future__ import annotations

import ctypes
import platform
import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

Layout = Literal["extra", "repack", "plain"]
LayoutSetting = Literal["auto", "extra", "repack", "plain"]
LAYOUTS: tuple[Layout, ...] = ("extra", "repack", "plain")

LAYOUT_WORDS: dict[str, str] = {
    "extra": "llama.cpp's own choice of weight layouts (AMX and repacked weights where offered)",
    "repack": "repacked weights for the CPU's vector units, without AMX",
    "plain": "plain weights (no repacking): the safest and slowest layout",
}

# Weight names llama.cpp multiplies as 2-D matrices (GGML_OP_MUL_MAT in llm_tensor_info,
# vendor/llama.cpp/src/llama-arch.cpp), as they appear in a GGUF ("blk.N.<name>.weight").
_MATMUL_BLOCK_WEIGHTS = frozenset(
    """attn_q attn_k attn_v attn_qkv attn_output attn_gate ffn_gate ffn_up ffn_down
    ffn_gate_shexp ffn_up_shexp ffn_down_shexp ffn_gate_inp ffn_gate_inp_shexp ssm_in ssm_out
    ssm_x ssm_alpha ssm_beta_alpha attn_q_a attn_q_b attn_kv_a_mqa attn_kv_b""".split()  # noqa: SIM905
)
_MATMUL_WEIGHTS = frozenset({"output"})  # an untied output matrix (token_embd is GET_ROWS)

# ggml type ids the x86 repack kernels take, with the CPU feature each needs
# (ggml_repack_get_optimal_repack_type); all need a row count divisible by 8.
_X86_REPACK_TYPES: dict[int, str] = {
    2: "AVX2",  # Q4_0
    12: "AVX2",  # Q4_K
    10: "AVX512",  # Q2_K
    20: "AVX2",  # IQ4_NL
    39: "AVX2",  # MXFP4
}
_BLOCK_NAME = re.compile(r"blk\.(\d+)\.([a-z0-9_]+)\.weight")


@dataclass(frozen=True)
class TensorSpec:
    """What the layout decision needs of one weight: its GGUF name, ggml type and shape."""

    name: str
    ggml_type: int
    dims: tuple[int, ...]


def cpu_features(system_info: str) -> dict[str, str]:
    """The ``NAME = value`` pairs of llama.cpp's system-info line (its CPU section and build)."""
    return {m.group(1): m.group(2) for m in re.finditer(r"([A-Z0-9_]+) = (\w+)", system_info)}


def has_amx(features: dict[str, str]) -> bool:
    return features.get("AMX_INT8") == "1"


def choose_layout(setting: str, features: dict[str, str]) -> Layout:
    """The layout to load a model with: ``setting`` unless it is "auto"; with "auto", repack
    without AMX where llama.cpp reports AMX_INT8, else llama.cpp's own choice."""
    if setting in LAYOUTS:
        return setting
    if setting != "auto":
        raise ValueError(f"unknown CPU layout {setting!r}; use auto, extra, repack or plain")
    return "repack" if has_amx(features) else "extra"


def repack_weights(
    tensors: Sequence[TensorSpec], features: dict[str, str], machine: str | None = None
) -> list[TensorSpec]:
    """The weights llama.cpp's repack layout takes on this CPU (x86-64 only: elsewhere the
    Arm kernels' rules differ, and an Arm CPU never has AMX, so "repack" is not chosen there)."""
    machine = (machine or platform.machine()).lower()
    if machine not in ("x86_64", "amd64"):
        return []
    chosen = []
    for t in tensors:
        need = _X86_REPACK_TYPES.get(t.ggml_type)
        if need is None or features.get(need) != "1" or len(t.dims) != 2 or t.dims[1] % 8:
            continue
        m = _BLOCK_NAME.fullmatch(t.name)
        if (m and m.group(2) in _MATMUL_BLOCK_WEIGHTS) or (
            t.name.endswith(".weight") and t.name[: -len(".weight")] in _MATMUL_WEIGHTS
        ):
            chosen.append(t)
    return chosen


def override_patterns(tensors: Sequence[TensorSpec]) -> list[str]:
    """Anchored regular expressions that match exactly ``tensors``' names, few of them: llama.cpp
    compiles every pattern again for every weight it loads, so one per kind of weight
    (``^blk\\.(?:0|4|7)\\.ffn_up\\.weight$``) instead of one per tensor."""
    layers: dict[str, list[str]] = {}
    others: list[str] = []
    for t in tensors:
        m = _BLOCK_NAME.fullmatch(t.name)
        if m:
            layers.setdefault(m.group(2), []).append(m.group(1))
        else:
            others.append(t.name)
    patterns = [
        rf"^blk\.(?:{'|'.join(sorted(set(ids), key=int))})\.{kind}\.weight$"
        for kind, ids in sorted(layers.items())
    ]
    patterns += [f"^{re.escape(name)}$" for name in others]
    return patterns


class _BuftOverride(ctypes.Structure):
    # struct llama_model_tensor_buft_override {
    #     const char * pattern; ggml_backend_buffer_type_t buft; }
    _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]


def extra_buffer_types(libggml: Any) -> dict[str, int]:
    """llama.cpp's extra CPU buffer types by name ("AMX", "CPU_REPACK", ...) from its CPU backend
    (``ggml_backend_dev_get_extra_bufts``), as raw pointers; {} when it offers none."""
    libggml.ggml_backend_dev_by_type.restype = ctypes.c_void_p
    libggml.ggml_backend_dev_by_type.argtypes = [ctypes.c_int]
    libggml.ggml_backend_dev_backend_reg.restype = ctypes.c_void_p
    libggml.ggml_backend_dev_backend_reg.argtypes = [ctypes.c_void_p]
    libggml.ggml_backend_reg_get_proc_address.restype = ctypes.c_void_p
    libggml.ggml_backend_reg_get_proc_address.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    libggml.ggml_backend_buft_name.restype = ctypes.c_char_p
    libggml.ggml_backend_buft_name.argtypes = [ctypes.c_void_p]
    dev = libggml.ggml_backend_dev_by_type(0)  # GGML_BACKEND_DEVICE_TYPE_CPU
    if not dev:
        return {}
    reg = libggml.ggml_backend_dev_backend_reg(dev)
    address = libggml.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_dev_get_extra_bufts")
    if not address:
        return {}
    get_extra = ctypes.CFUNCTYPE(ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)(address)
    array = get_extra(dev)
    found: dict[str, int] = {}
    i = 0
    while array and array[i]:
        name = libggml.ggml_backend_buft_name(array[i])
        found[name.decode() if name else f"#{i}"] = int(array[i])
        i += 1
    return found


@dataclass
class LayoutParams:
    """What a layout changes in ``llama_model_params``; ``keep`` holds the C memory the
    overrides point into until the model is loaded."""

    layout: Layout
    use_extra_bufts: bool
    overrides: Any = None  # a NULL-terminated _BuftOverride array, or None
    repacked: int = 0  # weights named in the overrides
    keep: tuple[Any, ...] = ()

    def apply(self, params: Any) -> None:
        params.use_extra_bufts = self.use_extra_bufts
        if self.overrides is not None:
            params.tensor_buft_overrides = ctypes.cast(self.overrides, ctypes.c_void_p)


def layout_params(
    layout: Layout, tensors: Sequence[TensorSpec], features: dict[str, str], libggml: Any
) -> LayoutParams:
    """The model parameters for ``layout`` (see the module's comment). "repack" on a CPU or
    build without the repack buffer type, or a model with nothing to repack, loads plain."""
    if layout == "extra":
        return LayoutParams(layout, use_extra_bufts=True)
    if layout == "plain":
        return LayoutParams(layout, use_extra_bufts=False)
    chosen = repack_weights(tensors, features)
    buft = extra_buffer_types(libggml).get("CPU_REPACK") if chosen else None
    if not chosen or not buft:
        return LayoutParams("repack", use_extra_bufts=False)
    patterns = [p.encode() for p in override_patterns(chosen)]
    array = (_BuftOverride * (len(patterns) + 1))()
    for i, pattern in enumerate(patterns):
        array[i].pattern = pattern
        array[i].buft = buft
    array[len(patterns)].pattern = None
    array[len(patterns)].buft = None
    return LayoutParams(
        "repack", use_extra_bufts=False, overrides=array, repacked=len(chosen), keep=(patterns,)
    )


_DEFAULTS_LOCK = threading.Lock()


@contextmanager
def default_model_params(module: Any, *params: Any) -> Iterator[None]:
    """Make ``module.llama_model_default_params()`` (llama-cpp-python's ``Llama`` starts from it
    and has no argument for buffer types or devices) return parameters with each of ``params``
    applied (a LayoutParams, a gpu_device.Placement: anything with ``apply``), while a model
    loads. One load at a time; the original function is back afterwards."""
    with _DEFAULTS_LOCK:
        original = module.llama_model_default_params

        def patched() -> Any:
            result = original()
            for each in params:
                each.apply(result)
            return result

        module.llama_model_default_params = patched
        try:
            yield
        finally:
            module.llama_model_default_params = original
