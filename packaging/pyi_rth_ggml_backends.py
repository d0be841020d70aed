"""PyInstaller runtime hook: register llama.cpp's backends for this CPU, from the bundle only.

A portable llama.cpp build (GGML_BACKEND_DL=ON, GGML_CPU_ALL_VARIANTS=ON) ships its backends as
modules: one CPU backend per instruction-set level (libggml-cpu-haswell.so, -skylakex, ...; on
macOS apple_m1 to apple_m4, plus Metal). ggml loads the best CPU one for the processor it runs
on; left alone it would look next to the executable and in the current folder. This hook points
it at the bundle's llama_cpp/lib instead, before llama.cpp initialises (llama_backend_init then
finds backends registered and looks nowhere else). A build with its backends linked in has them
registered as soon as ggml loads: nothing to do then.
"""

from __future__ import annotations

import ctypes
import os
import sys

_GGML = {
    "win32": ["ggml.dll"],
    "darwin": ["libggml.0.dylib", "libggml.dylib"],
}.get(sys.platform, ["libggml.so.0", "libggml.so"])
"""The name libllama links to first: loading that file again yields the same library."""


_LOG = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
_QUIET = _LOG(lambda level, text, data: None)
"""Swallows ggml's "loaded CPU backend from ..." line, which every `botpsy` command would print."""


def _register_backends() -> None:
    lib_dir = os.path.join(getattr(sys, "_MEIPASS", ""), "llama_cpp", "lib")
    for name in _GGML:
        path = os.path.join(lib_dir, name)
        if not os.path.exists(path):
            continue
        ggml = ctypes.CDLL(path)
        ggml.ggml_backend_reg_count.restype = ctypes.c_size_t
        if ggml.ggml_backend_reg_count() > 0:
            return  # backends linked in
        load = ggml.ggml_backend_load_all_from_path
        load.argtypes = [ctypes.c_char_p]
        load.restype = None
        ggml.ggml_log_set.argtypes = [_LOG, ctypes.c_void_p]
        ggml.ggml_log_set.restype = None
        ggml.ggml_log_set(_QUIET, None)
        try:
            load(os.fsencode(lib_dir))
        finally:
            ggml.ggml_log_set(_LOG(), None)  # a null callback: ggml's default logging again
        return


_register_backends()
