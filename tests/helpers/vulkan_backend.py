"""llama.cpp's Vulkan backend as a loadable module, built once from the llama.cpp that
llama-cpp-python vendors, for the tests that run the app's GPU path on Mesa's lavapipe.

The module (``libggml-vulkan.so``) is compiled from the installed llama-cpp-python version's
sdist with ``GGML_BACKEND_DL=ON`` (a backend as a dynamic module that links only to
``libggml-base.so.0``, the same library llama-cpp-python already loaded), only the
``ggml-vulkan`` target, and cached in the test cache under a key of that version and these
options. The build is long on 2 cores (several hundred compute shaders compiled with glslc):
``python -m tests.helpers.vulkan_backend --progress`` builds it ahead; stopped (CI gives it a
time budget), it carries on where it stopped the next time. Nothing is downloaded
except the sdist (with pip, as for llama-server). System packages: libvulkan-dev, glslc,
spirv-headers, mesa-vulkan-drivers (tools/install-test-deps.sh).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import time
from pathlib import Path

from tests.helpers.llama_server import (
    _extract_llama_cpp,
    _run_build_step,
    _sdist,
    llama_cpp_version,
)
from tests.helpers.models import fixture_cache_dir

BUILD_FORMAT = "2"  # bump when the cmake options or the source guard change
CMAKE_OPTIONS = (
    "-G",
    "Ninja",
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=ON",
    "-DGGML_BACKEND_DL=ON",  # the backend as a module loaded with ggml_backend_load
    "-DGGML_VULKAN=ON",
    "-DGGML_NATIVE=OFF",
    # no RUNPATH into this build's folder: the module's one library of llama.cpp's,
    # libggml-base.so.0, is the one llama-cpp-python has loaded already (found by its soname)
    "-DCMAKE_SKIP_RPATH=ON",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_TOOLS=OFF",
    "-DLLAMA_BUILD_SERVER=OFF",
    "-DLLAVA_BUILD=OFF",
)
MODULE = "libggml-vulkan.so"
LAVAPIPE_ICD = Path("/usr/share/vulkan/icd.d/lvp_icd.x86_64.json")


# ggml-vulkan.cpp hands the validation layer a setting through VK_EXT_layer_settings, which
# Vulkan headers older than 1.3.272 (Debian 12 ships 1.3.239) do not declare; the setting only
# matters with GGML_VULKAN_VALIDATE. The rest of the file already guards newer features with
# VK_HEADER_VERSION, so the build guards this one the same way (same code with newer headers).
_LAYER_SETTINGS = """    VkBool32 enable_best_practice = layer_settings;
    std::vector<vk::LayerSettingEXT> settings = {"""
_GUARDED = "#if VK_HEADER_VERSION >= 272\n" + _LAYER_SETTINGS
_CREATE = "    vk::InstanceCreateInfo instance_create_info(vk::InstanceCreateFlags{}, &app_info, "
_CREATE_INFO = (
    "    vk::LayerSettingsCreateInfoEXT layer_setting_info(settings);\n"
    + _CREATE
    + "layers, extensions, &layer_setting_info);\n"
)
_CREATE_INFO_GUARDED = _CREATE_INFO + "#else\n" + _CREATE + "layers, extensions);\n#endif\n"


def _guard_layer_settings(source: Path) -> None:
    """Make ggml-vulkan.cpp build with Vulkan headers older than 1.3.272 (see above); a file
    already guarded, or written otherwise (another llama.cpp), is left as it is."""
    path = source / "ggml" / "src" / "ggml-vulkan" / "ggml-vulkan.cpp"
    text = path.read_text(encoding="utf-8")
    if _GUARDED in text or _LAYER_SETTINGS not in text or _CREATE_INFO not in text:
        return
    text = text.replace(_LAYER_SETTINGS, _GUARDED, 1).replace(_CREATE_INFO, _CREATE_INFO_GUARDED, 1)
    path.write_text(text, encoding="utf-8")


def backend_dir() -> Path:
    path = fixture_cache_dir() / "ggml-vulkan"
    path.mkdir(parents=True, exist_ok=True)
    return path


def build_key() -> str:
    digest = hashlib.sha256("\n".join([BUILD_FORMAT, *CMAKE_OPTIONS]).encode())
    return f"llama-cpp-python-{llama_cpp_version()}-{digest.hexdigest()[:12]}"


def cached_module() -> Path | None:
    """The built module if it is in the cache (no build)."""
    target = backend_dir() / build_key() / MODULE
    return target if target.is_file() else None


def missing_build_tools() -> list[str]:
    """What this machine lacks to build the module (empty when it can)."""
    missing = [tool for tool in ("cmake", "ninja", "glslc") if shutil.which(tool) is None]
    if not Path("/usr/include/vulkan/vulkan.h").is_file():
        missing.append("libvulkan-dev")
    if not Path("/usr/share/cmake/SPIRV-Headers").is_dir():
        missing.append("spirv-headers")
    return missing


def ensure_vulkan_backend(progress: bool = False) -> Path:
    """The cached ``libggml-vulkan.so``, built now if missing (see the module's comment)."""
    target = backend_dir() / build_key() / MODULE
    if target.is_file():
        return target
    missing = missing_build_tools()
    if missing:
        raise RuntimeError(
            f"building llama.cpp's Vulkan backend needs {', '.join(missing)} "
            "(tools/install-test-deps.sh)"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test process may be building it
        if target.is_file():
            return target
        # an unfinished build (stopped by CI's time budget) is carried on where it stopped:
        # ninja redoes only what is missing
        work = target.parent / "build"
        roots = list((work / "src").glob("*/vendor/llama.cpp"))
        if roots:
            source = roots[0]
        else:
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir()
            source = _extract_llama_cpp(_sdist(), work / "src")
        _guard_layer_settings(source)
        build = work / "out"
        nice = ["nice", "-n", "10"] if shutil.which("nice") else []
        log = target.parent / "build.log"
        with log.open("a") as out:
            out.write(f"== build started {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        started = time.monotonic()
        if progress:
            print(f"building llama.cpp's Vulkan backend (log: {log})", flush=True)
        jobs = str(os.cpu_count() or 2)
        for command in (
            [*nice, "cmake", "-S", str(source), "-B", str(build), *CMAKE_OPTIONS],
            [*nice, "cmake", "--build", str(build), "--target", "ggml-vulkan", "-j", jobs],
        ):
            if _run_build_step(command, log, progress) != 0:
                raise RuntimeError(f"building llama.cpp's Vulkan backend failed; see {log}")
        built = next(build.rglob(MODULE), None)
        if built is None:
            raise RuntimeError(f"the Vulkan build made no {MODULE}; see {log}")
        staged = target.with_suffix(".tmp")
        shutil.copy2(built.resolve(), staged)
        os.replace(staged, target)
        took = time.monotonic() - started
        if progress:
            print(f"built {target} in {took / 60:.1f} minutes", flush=True)
        shutil.rmtree(work, ignore_errors=True)
    return target


if __name__ == "__main__":  # python -m tests.helpers.vulkan_backend [--progress]: build it now
    import sys

    print(ensure_vulkan_backend(progress="--progress" in sys.argv[1:]))
