"""Where the model runs: on a GPU through a loadable llama.cpp backend, or on the CPU.

llama.cpp's GPU backends can be built as modules (``GGML_BACKEND_DL``): ``libggml-vulkan.so``
(``ggml-vulkan.dll`` on Windows) links only to ``libggml-base``, the library llama-cpp-python
already loaded, so the CPU build the app has loads it at start with ``ggml_backend_load``, and
one package serves machines with and without a GPU. The module is looked for in
``model.gpu_backend_dir``, or else in llama-cpp-python's ``lib/gpu`` and ``lib`` folders (the
installers put it in ``lib/gpu``, where their start-up hook, which loads every module in ``lib``
for the CPU variants, does not see it: only a worker that wants a GPU loads it).

``model.device`` chooses: ``cpu``; ``vulkan`` or ``auto`` (the default): the first GPU device of
a backend llama.cpp already has (linked in: a CUDA build; loaded by the installers' hook: Metal),
else of the Vulkan module; all layers on it when the weights, KV cache and recurrent state fit
its free memory (with room for llama.cpp's scratch buffers), fewer when they do not; the CPU
when no layer fits, the module is missing or does not load, or it offers no device. A backend that
crashes in the first decode is remembered by the engine (engine_process.LayoutMemory) and the
next worker runs on the CPU. Mesa's lavapipe (Vulkan on the CPU) is a device llama.cpp hides
unless ``GGML_VK_VISIBLE_DEVICES`` names it: it is slower than the CPU backend, so only the
tests use it.
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

DeviceSetting = Literal["auto", "cpu", "vulkan"]
DEVICES: tuple[str, ...] = ("auto", "cpu", "vulkan")
VULKAN_MODULE = {"win32": "ggml-vulkan.dll", "darwin": "libggml-vulkan.so"}.get(
    sys.platform, "libggml-vulkan.so"
)
GPU_TYPES = {1: "GPU", 2: "integrated GPU"}  # enum ggml_backend_dev_type (ggml-backend.h)
SCRATCH_BYTES = 256 * 1024 * 1024  # llama.cpp's compute buffers on the device (n_ubatch 512)
HEADROOM = 0.9  # of the device's free memory: the driver and other programs need some


@dataclass(frozen=True)
class GpuDevice:
    """One device a GPU backend offers: its ggml name ("Vulkan0"), description, memory."""

    name: str
    description: str
    kind: str
    free: int
    total: int
    handle: int = field(default=0, compare=False, repr=False)


@dataclass
class Placement:
    """Where a model runs: ``device`` None for the CPU; ``n_gpu_layers`` as llama.cpp takes it
    (0: none, -1: all); ``reason`` in words, for doctor and Settings."""

    setting: str
    device: GpuDevice | None = None
    n_gpu_layers: int = 0
    n_layers: int = 0
    reason: str = ""
    backend: str = ""  # the module's path, when one was loaded
    keep: tuple[Any, ...] = ()  # C memory llama_model_params.devices points into

    @property
    def offloaded(self) -> int:
        """Layers on the device (llama.cpp counts the output layer as one more)."""
        if self.device is None:
            return 0
        total = self.n_layers + 1
        return total if self.n_gpu_layers < 0 else min(self.n_gpu_layers, total)

    def describe(self) -> dict[str, Any]:
        """What doctor, Settings and the bench show (plain data: it crosses the worker pipe)."""
        data: dict[str, Any] = {
            "setting": self.setting,
            "device": "cpu",
            "reason": self.reason,
            "layers": self.offloaded,
            "of_layers": self.n_layers + 1,
        }
        if self.device is not None:
            data.update(
                device=self.device.name,
                description=self.device.description,
                kind=self.device.kind,
                free_bytes=self.device.free,
                total_bytes=self.device.total,
                backend=self.backend,
            )
        return data

    def apply(self, params: Any) -> None:
        """Set ``llama_model_params.devices``: the chosen device only, or none at all for the
        CPU (so llama.cpp offloads nothing, not even a large batch's matrix products)."""
        devices = (ctypes.c_void_p * 2)()
        devices[0] = self.device.handle if self.device is not None else None
        devices[1] = None
        self.keep = (devices,)
        params.devices = ctypes.cast(devices, ctypes.c_void_p)


def backend_folders(setting: str | None, llama_lib: Path | None) -> list[Path]:
    """Where GPU backend modules are looked for, in order."""
    if setting:
        return [Path(setting).expanduser()]
    if llama_lib is None:
        return []
    return [llama_lib / "gpu", llama_lib]


def find_module(folders: Sequence[Path], name: str = VULKAN_MODULE) -> Path | None:
    for folder in folders:
        if (folder / name).is_file():
            return folder / name
    return None


def _bind(libggml: Any) -> None:
    sig: dict[str, tuple[Any, list[Any]]] = {
        "ggml_backend_load": (ctypes.c_void_p, [ctypes.c_char_p]),
        "ggml_backend_reg_by_name": (ctypes.c_void_p, [ctypes.c_char_p]),
        "ggml_backend_reg_dev_count": (ctypes.c_size_t, [ctypes.c_void_p]),
        "ggml_backend_reg_dev_get": (ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t]),
        "ggml_backend_dev_count": (ctypes.c_size_t, []),
        "ggml_backend_dev_get": (ctypes.c_void_p, [ctypes.c_size_t]),
        "ggml_backend_dev_name": (ctypes.c_char_p, [ctypes.c_void_p]),
        "ggml_backend_dev_description": (ctypes.c_char_p, [ctypes.c_void_p]),
        "ggml_backend_dev_type": (ctypes.c_int, [ctypes.c_void_p]),
        "ggml_backend_dev_memory": (
            None,
            [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)],
        ),
    }
    for name, (restype, argtypes) in sig.items():
        function = getattr(libggml, name)
        function.restype = restype
        function.argtypes = argtypes


def _gpus(libggml: Any, handles: Sequence[int]) -> list[GpuDevice]:
    """The GPU devices among ``handles`` (ggml_backend_dev_t), with their memory."""
    devices = []
    for dev in handles:
        kind = GPU_TYPES.get(int(libggml.ggml_backend_dev_type(dev)))
        if kind is None:
            continue
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        libggml.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        devices.append(
            GpuDevice(
                name=(libggml.ggml_backend_dev_name(dev) or b"?").decode(),
                description=(libggml.ggml_backend_dev_description(dev) or b"").decode(),
                kind=kind,
                free=int(free.value),
                total=int(total.value),
                handle=int(dev),
            )
        )
    return devices


def registered_gpus(libggml: Any) -> list[GpuDevice]:
    """GPU devices of backends llama.cpp already has: linked in (a CUDA or Vulkan build of
    llama-cpp-python) or loaded by the installers' start-up hook (Metal on macOS)."""
    _bind(libggml)
    count = int(libggml.ggml_backend_dev_count())
    return _gpus(libggml, [libggml.ggml_backend_dev_get(i) for i in range(count)])


def load_vulkan(libggml: Any, module: Path) -> tuple[list[GpuDevice], str]:
    """Load the Vulkan module (once per process) and list its GPU devices; on failure, no
    devices and why."""
    _bind(libggml)
    reg = libggml.ggml_backend_reg_by_name(b"Vulkan")  # linked in, or loaded before
    if not reg:
        damaged = elf_damage(module)
        if damaged:
            return [], f"llama.cpp's Vulkan backend {module} is damaged ({damaged}); reinstall it"
        try:  # a missing library, or a file that is no library: dlopen says which
            ctypes.CDLL(str(module), mode=ctypes.RTLD_LOCAL)
        except OSError as exc:
            return [], f"llama.cpp's Vulkan backend cannot be loaded ({exc}); reinstall it"
        reg = libggml.ggml_backend_load(os.fsencode(module))
    if not reg:  # its initialisation failed: no Vulkan driver, or one that refused
        return [], f"llama.cpp's Vulkan backend {module} found no working Vulkan driver"
    count = int(libggml.ggml_backend_reg_dev_count(reg))
    devices = _gpus(libggml, [libggml.ggml_backend_reg_dev_get(reg, i) for i in range(count)])
    if not devices:
        return [], "the Vulkan backend loaded but found no GPU device"
    return devices, ""


def elf_damage(path: Path) -> str:
    """What is wrong with an ELF library that dlopen would crash on (a file cut short: glibc
    maps segments past its end and the first read of them is a bus error), or "" when its
    segments and section table are all in the file, or it is no ELF file (dlopen refuses
    those with an error). Hand-written: no library reads ELF headers without loading more."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            size = os.fstat(f.fileno()).st_size
            if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
                return ""  # not a 64-bit little-endian ELF: left to dlopen
            phoff, shoff = struct.unpack_from("<QQ", head, 0x20)
            phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", head, 0x36)
            if phoff + phnum * phentsize > size or shoff + shnum * shentsize > size:
                return f"{size} bytes: its headers point past its end"
            f.seek(phoff)
            table = f.read(phnum * phentsize)
    except OSError as exc:
        return str(exc)
    for i in range(phnum):
        kind, _flags, offset, _vaddr, _paddr, filesz = struct.unpack_from(
            "<IIQQQQ", table, i * phentsize
        )
        if kind == 1 and offset + filesz > size:  # PT_LOAD
            return f"{size} bytes, cut short: a segment ends at byte {offset + filesz}"
    return ""


def layers_that_fit(need: dict[str, int], n_layers: int, free: int) -> int:
    """llama.cpp's ``n_gpu_layers`` for a device with ``free`` bytes: -1 (all) when weights,
    KV cache, recurrent state and scratch fit in ``HEADROOM`` of it, else the number of the
    model's ``n_layers`` repeating layers whose share of the weights fits beside the rest
    (KV and state are placed with their layers, counted in full for safety), 0 when none."""
    room = int(free * HEADROOM) - SCRATCH_BYTES
    if need["total"] <= room:
        return -1
    per_layer = need["weights"] / max(n_layers + 1, 1)
    fits = int((room - need["kv_cache"] - need["recurrent_state"]) // max(per_layer, 1))
    return max(0, min(fits, n_layers))


def place(
    setting: str,
    *,
    libggml: Any,
    folders: Sequence[Path],
    need: dict[str, int],
    n_layers: int,
    max_layers: int = -1,
    why: str = "",
) -> Placement:
    """Where to run a model needing ``need`` bytes (GGUFInfo.estimate_memory) with
    ``n_layers`` repeating layers; ``max_layers`` caps the layers offloaded (model.n_gpu_layers,
    -1: no cap, 0: none); ``why`` says why ``setting`` is "cpu" when it is not the person's."""
    if setting not in DEVICES:
        raise ValueError(f"unknown device {setting!r}; use auto, cpu or vulkan")
    placement = Placement(setting, n_layers=n_layers)
    if setting == "cpu":
        placement.reason = why or "model.device is cpu"
        return placement
    if max_layers == 0:
        placement.reason = "model.n_gpu_layers is 0"
        return placement
    devices = registered_gpus(libggml) if libggml is not None else []
    module: Path | str | None = "linked in" if devices else None
    if not devices:
        module = find_module(folders)
        if module is None:
            where = ", ".join(str(f) for f in folders) or "nowhere"
            placement.reason = f"no Vulkan backend ({VULKAN_MODULE} not in {where})"
            return placement
        devices, why = load_vulkan(libggml, module)
        if not devices:
            placement.reason = why
            return placement
    device = devices[0]
    layers = layers_that_fit(need, n_layers, device.free)
    if layers == 0:
        placement.reason = (
            f"{device.description or device.name} has {device.free / 2**20:.0f} MiB free: "
            "not enough for one layer"
        )
        return placement
    capped = max_layers > 0 and (layers < 0 or layers > max_layers)
    placement.device = device
    placement.backend = str(module)
    placement.n_gpu_layers = max_layers if capped else layers
    if capped:
        placement.reason = f"model.n_gpu_layers is {max_layers}"
    elif layers < 0:
        placement.reason = "all layers fit"
    else:
        placement.reason = f"{placement.offloaded} of {n_layers + 1} layers fit its free memory"
    return placement


def describe_device(device: dict[str, Any]) -> str:
    """Where the model runs, in words: "on the CPU (why)" or "on <GPU> (N MiB free of M):
    L of N layers" (gpu_device.Placement.describe())."""
    if not device:
        return "device unknown"
    if device.get("device", "cpu") == "cpu":
        return f"on the CPU ({device.get('reason') or 'model.device'})"
    mib = 2**20
    return (
        f"on {device.get('description') or device['device']} ({device['device']}, "
        f"{device.get('kind', 'GPU')}, {device.get('free_bytes', 0) / mib:.0f} MiB free of "
        f"{device.get('total_bytes', 0) / mib:.0f}): {device.get('layers', 0)} of "
        f"{device.get('of_layers', 0)} layers offloaded"
    )
