#!/usr/bin/env bash
# Build BotPsy for Linux and test what was built, end to end:
#   1. a portable llama-cpp-python wheel (CPU backends for every x86-64 level, picked at run
#      time; cached, 15 min on 2 cores the first time), and llama.cpp's Vulkan backend as a
#      module loaded at run time where there is a GPU (cached, about 20 min the first time),
#   2. the PyInstaller one-folder bundle (packaging/botpsy.spec) in a build venv,
#   3. the .deb (/opt/botpsy-desktop, botpsy and botpsy-desktop on PATH, desktop entry, icons),
#      a portable tarball and an AppImage (when appimagetool is on PATH),
#   4. installs the .deb into a fresh root with dpkg, runs `botpsy-desktop --self-test` from the
#      installed files with a clean environment and a small GGUF, checks the CLI, removes and
#      purges the package and checks that user data is left alone; with the Vulkan module,
#      runs the model on it from the installed files on Mesa's lavapipe (Vulkan on the CPU),
#   5. prints sizes and times (also written to OUT/report.txt).
#
#   bash packaging/linux/build.sh            # as root on Debian/Ubuntu (installs build tools)
#
# Environment: BOTPSY_BUILD_DIR (default ~/.cache/botpsy-desktop-build; never inside the repo),
# BOTPSY_SELFTEST_MODEL (a GGUF for the self-test; default: the test suite's tiny qwen35 model,
# built by tests/helpers/models.py with the test extra installed), BOTPSY_LLAMA_CMAKE_ARGS
# (override the portable CMake options), PYTHON (default python3), BOTPSY_VULKAN: `build` (the
# default: build the Vulkan module if it is not cached), `cached` (carry it only when already
# built, as CI does: its own step builds it within a time budget) or `off` (a CPU-only bundle).
#
# Under pipefail a reader that stops early (head -1, grep -q, awk '{...; exit}') can kill the
# writer with SIGPIPE and fail the whole pipeline (exit 141) at random: every filter here reads
# its input to the end.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BOTPSY_BUILD_DIR:-$HOME/.cache/botpsy-desktop-build}
mkdir -p "$BUILD"
BUILD=$(cd "$BUILD" && pwd)
case "$BUILD/" in "$ROOT"/*) echo "BOTPSY_BUILD_DIR must be outside the repository" >&2; exit 2;; esac
PYTHON=${PYTHON:-python3}
OUT=$BUILD/out
LOG=$BUILD/logs
mkdir -p "$OUT" "$LOG"
REPORT=$OUT/report.txt
: >"$REPORT"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore

say() { echo "$*" | tee -a "$REPORT"; }
step_start() { STEP_T0=$(date +%s.%N); echo "== $1"; }
step_end() { say "$(printf '%-34s %7.1f s' "$1" "$(echo "$(date +%s.%N) - $STEP_T0" | bc)")"; }
human() { numfmt --to=iec-i --suffix=B --format='%.1f' "$1"; }
size_of() { du -sb "$1" | cut -f1; }
# run "$@" with its output in the log file $1; every 30 s say how long it has run and the build's
# latest progress line (ninja's [done/total], or the log's last line); the command's exit status
with_heartbeat() {
    local log=$1 pid start=$SECONDS next=30 progress
    shift
    "$@" >"$log" 2>&1 &
    pid=$!
    while kill -0 "$pid" 2>/dev/null; do
        sleep 1
        if ((SECONDS - start >= next)); then
            next=$((next + 30))
            progress=$(awk 'match($0, /\[[0-9]+\/[0-9]+\]/) {p = substr($0, RSTART)} NF {l = $0}
                            END {s = p != "" ? p : l; print substr(s, 1, 90)}' "$log")
            printf '   %3d:%02d  %s\n' $(((SECONDS - start) / 60)) $(((SECONDS - start) % 60)) "$progress"
        fi
    done
    wait "$pid"
}

VERSION=$(sed -n 's/^__version__ = "\(.*\)"/\1/p' "$ROOT/botpsy_desktop/__init__.py")
LLAMA_PIN=$(grep -o '"llama-cpp-python==[^"]*"' "$ROOT/pyproject.toml" | tr -d '"')
ARCH=$(dpkg --print-architecture)
PORTABLE_ARGS="-DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON -DLLAVA_BUILD=OFF"
LLAMA_CMAKE_ARGS=${BOTPSY_LLAMA_CMAKE_ARGS:-$PORTABLE_ARGS}
say "botpsy-desktop $VERSION for $ARCH; build folder $BUILD"

# -- 0. tools -----------------------------------------------------------------------------------
step_start "build tools"
NEED=(binutils dpkg-dev desktop-file-utils bc libpulse0 libxcb-cursor0 libxkbcommon-x11-0
      libxcb-icccm4 libxcb-keysyms1 libxcb-shape0 libxcb-render-util0 libxcb-image0 libegl1
      libgl1 libfontconfig1 libdbus-1-3 cmake ninja-build
      xvfb xauth libxcb-xinerama0 libxcb-xkb1 libxcb-randr0
      pulseaudio pulseaudio-utils espeak-ng)
VULKAN=${BOTPSY_VULKAN:-build}
case "$VULKAN" in
    build) NEED+=(libvulkan-dev glslc spirv-headers libvulkan1 mesa-vulkan-drivers) ;;
    cached) NEED+=(libvulkan1 mesa-vulkan-drivers) ;;
    off) ;;
    *) echo "BOTPSY_VULKAN must be build, cached or off (not $VULKAN)" >&2; exit 2 ;;
esac
MISSING=()
for pkg in "${NEED[@]}"; do
    [ "$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)" = "install ok installed" ] \
        || MISSING+=("$pkg")
done
if ((${#MISSING[@]})); then
    if [ "$(id -u)" != 0 ]; then
        echo "Install these Debian packages first (as root): ${MISSING[*]}" >&2
        exit 2
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${MISSING[@]}"
fi
step_end "build tools"

# -- 1. portable llama-cpp-python ------------------------------------------------------------------
# pip's own wheel cache ignores CMAKE_ARGS, so the portable wheel is built with --no-cache-dir and
# kept here under a key made of the version and the CMake options.
KEY=$(printf '%s' "$LLAMA_PIN $LLAMA_CMAKE_ARGS" | sha256sum | cut -c1-12)
WHEELS=$BUILD/wheels/$KEY
first_wheel() { compgen -G "$WHEELS/llama_cpp_python-*.whl" | sort | sed -n 1p; }
WHEEL=$(first_wheel || true)
if [ -z "$WHEEL" ]; then
    step_start "portable $LLAMA_PIN (first time only)"
    mkdir -p "$WHEELS.tmp"
    echo "   compiling llama.cpp for every x86-64 level; full log: $LOG/llama-wheel.log"
    # -v: pip passes on CMake's and ninja's output, whose [done/total] lines the heartbeat shows
    CMAKE_ARGS="$LLAMA_CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
        with_heartbeat "$LOG/llama-wheel.log" \
        "$PYTHON" -m pip wheel -v --no-cache-dir --no-deps --no-binary llama-cpp-python \
        -w "$WHEELS.tmp" "$LLAMA_PIN" \
        || { tail -30 "$LOG/llama-wheel.log"; exit 1; }
    rm -rf "$WHEELS" && mv "$WHEELS.tmp" "$WHEELS"
    WHEEL=$(first_wheel)
    step_end "portable llama-cpp-python wheel"
fi
"$PYTHON" - "$WHEEL" <<'EOF'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
variants = sorted(n.rsplit("/", 1)[-1] for n in names if "libggml-cpu-" in n)
if not variants:
    sys.exit(f"{sys.argv[1]} has no per-CPU backends: not a portable build")
print(f"llama.cpp CPU backends: {len(variants)} ({', '.join(v[11:-3] for v in variants)})")
EOF

# llama.cpp's Vulkan backend, a module (libggml-vulkan.so) built from the same version's
# sources with GGML_BACKEND_DL: it links only to libggml-base, which the wheel's libllama
# loaded, and to the system's libvulkan.so.1. The bundle carries it in llama_cpp/lib/gpu,
# where only an engine worker that runs the model on a GPU loads it
# (botpsy_desktop/llm/models/gpu_device.py). It is built and cached by the test helper the
# Vulkan tests use (tests/helpers/vulkan_backend.py), so CI builds it once for both.
VULKAN_MODULE=
if [ "$VULKAN" = build ]; then
    step_start "llama.cpp Vulkan backend module"
    (cd "$ROOT" && "$PYTHON" -m tests.helpers.vulkan_backend --progress) | tee "$LOG/vulkan.log"
    step_end "llama.cpp Vulkan backend module"
fi
if [ "$VULKAN" != off ]; then
    VULKAN_MODULE=$(cd "$ROOT" && "$PYTHON" -c \
        "from tests.helpers.vulkan_backend import cached_module; print(cached_module() or '')" \
        | tail -1)
fi
if [ -n "$VULKAN_MODULE" ]; then
    say "Vulkan backend: $VULKAN_MODULE"
else
    say "Vulkan backend: not carried (BOTPSY_VULKAN=$VULKAN; the bundle runs on the CPU only)"
fi
export BOTPSY_BUNDLE_GPU_MODULES=$VULKAN_MODULE

# -- 2. build venv and bundle -------------------------------------------------------------------
step_start "build venv"
VENV=$BUILD/venv
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip >"$LOG/venv.log" 2>&1
# the app's dependencies and PyInstaller; the app itself is bundled from the source tree (the
# spec's pathex), so nothing is built inside the repository
mapfile -t DEPS < <("$VENV/bin/python" - "$ROOT/pyproject.toml" <<'EOF'
import sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
for requirement in project["dependencies"] + project["optional-dependencies"]["packaging"]:
    if not requirement.startswith("llama-cpp-python"):
        print(requirement)
EOF
)
"$VENV/bin/python" -m pip install -q "$WHEEL" "${DEPS[@]}" >>"$LOG/venv.log" 2>&1 \
    || { tail -30 "$LOG/venv.log"; exit 1; }
# the app is bundled from the source tree only: drop a copy an older run installed here
"$VENV/bin/python" -m pip uninstall -q -y botpsy-desktop >>"$LOG/venv.log" 2>&1 || true
# the wheel replaces any other build of the same version that an earlier run left here
"$VENV/bin/python" -m pip install -q --force-reinstall --no-deps "$WHEEL" >>"$LOG/venv.log" 2>&1
step_end "build venv"

step_start "PyInstaller bundle"
rm -rf "$BUILD/dist" "$BUILD/work"
(cd "$BUILD" && with_heartbeat "$LOG/pyinstaller.log" "$VENV/bin/pyinstaller" --noconfirm \
    --clean --log-level WARN --distpath "$BUILD/dist" --workpath "$BUILD/work" \
    "$ROOT/packaging/botpsy.spec") || { tail -40 "$LOG/pyinstaller.log"; exit 1; }
BUNDLE=$BUILD/dist/botpsy-desktop
step_end "PyInstaller bundle"
grep -E "botpsy.spec:" "$LOG/pyinstaller.log" || true
# a symbolic link whose target was left out would ship broken in every package
BROKEN=$(find "$BUNDLE" -xtype l -printf '  %P -> %l\n')
if [ -n "$BROKEN" ]; then
    printf 'broken symbolic links in the bundle:\n%s\n' "$BROKEN" >&2
    exit 1
fi

# -- 3. .deb, tarball, AppImage ----------------------------------------------------------------
step_start ".deb"
PKG=botpsy-desktop_${VERSION}_${ARCH}
STAGE=$BUILD/deb/$PKG
rm -rf "$BUILD/deb"
mkdir -p "$STAGE/opt" "$STAGE/usr/bin" "$STAGE/usr/share/applications" \
    "$STAGE/usr/share/doc/botpsy-desktop" "$STAGE/DEBIAN"
cp -a "$BUNDLE" "$STAGE/opt/botpsy-desktop"
ln -s /opt/botpsy-desktop/botpsy-desktop "$STAGE/usr/bin/botpsy-desktop"
ln -s /opt/botpsy-desktop/botpsy "$STAGE/usr/bin/botpsy"
install -m 644 "$ROOT/packaging/linux/botpsy-desktop.desktop" "$STAGE/usr/share/applications/"
for png in "$ROOT"/botpsy_desktop/assets/icons/botpsy-*.png; do
    size=$(basename "$png" .png); size=${size#botpsy-}
    install -D -m 644 "$png" "$STAGE/usr/share/icons/hicolor/${size}x${size}/apps/botpsy-desktop.png"
done
install -D -m 644 "$ROOT/botpsy_desktop/assets/icons/botpsy.svg" \
    "$STAGE/usr/share/icons/hicolor/scalable/apps/botpsy-desktop.svg"
cat >"$STAGE/usr/share/doc/botpsy-desktop/copyright" <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: botpsy-desktop
License: Apache-2.0
Comment: /opt/botpsy-desktop bundles Python, Qt (LGPL-3.0, via PySide6), llama.cpp (MIT) and the
 Python packages listed in /opt/botpsy-desktop/_internal/*.dist-info, each under its own licence.
 The icons and the alarm sound are CC0-1.0.
EOF
# Dependencies: the libraries the bundle's binaries link to but do not carry (glibc, libGL and
# libEGL, libdrm, Wayland's client libraries, libxcb), by the Debian package that holds each on
# this machine; glibc at the newest symbol version any binary uses.
# The GPU modules (_internal/llama_cpp/lib/gpu) are left out: without libvulkan1 the module
# does not load and the model runs on the CPU, so Vulkan is recommended, not required.
mapfile -t ELVES < <(find "$BUNDLE" -type f \( -name '*.so*' -o -perm -u+x \) \
    -not -path '*/llama_cpp/lib/gpu/*' -exec sh -c \
    'head -c4 "$1" | grep -q ELF && echo "$1"' _ {} \;)
MULTIARCH=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
EXTERNAL=$(comm -23 \
    <(for f in "${ELVES[@]}"; do readelf -d "$f" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p'; done | sort -u) \
    <(find "$BUNDLE" -type f -printf '%f\n' | sort -u))
owner() {  # the package holding a library file, trying the path with and without merged /usr
    local path=$1 p
    for p in "$path" "$(readlink -f "$path")" "${path#/usr}" "/usr${path}"; do
        dpkg -S "$p" 2>/dev/null | sed -n '1s/:.*//p' && return 0
    done
    return 1
}
DEPS=()
for lib in $EXTERNAL; do
    path=$(ldconfig -p | awk -v l="$lib" -v m="$MULTIARCH" '$1 == l && $NF ~ m && p == "" {p = $NF}
                                                          END {print p}')
    pkg=$( [ -n "$path" ] && owner "$path" ) \
        || { echo "$lib (needed by the bundle) belongs to no installed package" >&2; exit 1; }
    DEPS+=("$pkg")
done
GLIBC=$(for f in "${ELVES[@]}"; do objdump -T "$f" 2>/dev/null | grep -o 'GLIBC_[0-9.]*'; done \
    | sed 's/GLIBC_//' | sort -uV | tail -1)
# with the Vulkan module: the Vulkan loader, and Mesa's drivers for AMD and Intel GPUs (NVIDIA's
# driver brings its own)
# espeak-ng: spoken replies run the program (no library links to it); off without it
RECOMMENDS=espeak-ng${VULKAN_MODULE:+, libvulkan1, mesa-vulkan-drivers}
DEPENDS=$(printf '%s\n' "${DEPS[@]}" | sort -u | sed "s/^libc6\$/libc6 (>= $GLIBC)/" | paste -sd, | sed 's/,/, /g')
cat >"$STAGE/DEBIAN/control" <<EOF
Package: botpsy-desktop
Version: $VERSION
Architecture: $ARCH
Maintainer: botpsy-desktop maintainers <maintainers@botpsy.invalid>
Installed-Size: $(du -sk --exclude=DEBIAN "$STAGE" | cut -f1)
Depends: $DEPENDS
Recommends: $RECOMMENDS
Section: utils
Priority: optional
Homepage: https://github.com/botpsy/botpsy-desktop
Description: private desktop assistant running a small language model locally
 BotPsy runs the BotPsy-0.8B model on this computer through llama.cpp and acts for you
 with local tools (files, alarms, weather, music). Anything that is not read-only waits
 for your approval. Includes its own Python, Qt and llama.cpp (CPU backend chosen at run
 time for the processor${VULKAN_MODULE:+; a GPU through Vulkan where there is one}). Removing the package leaves your settings, conversations and
 models in your home folder.
EOF
DEB=$OUT/$PKG.deb
dpkg-deb --root-owner-group -Zxz --build "$STAGE" "$DEB" >/dev/null
INSTALLED_KIB=$(du -sk --exclude=DEBIAN "$STAGE" | cut -f1)
step_end ".deb"

step_start "portable tarball"
TARDIR=$BUILD/tar/botpsy-desktop-$VERSION
rm -rf "$BUILD/tar" && mkdir -p "$TARDIR"
cp -a "$BUNDLE/." "$TARDIR/"
cp -a "$STAGE/usr/share" "$TARDIR/share"
rm -rf "$TARDIR/share/doc"
install -m 755 "$ROOT/packaging/linux/install-desktop-entry.sh" "$TARDIR/"
TARBALL=$OUT/botpsy-desktop-$VERSION-linux-$(uname -m).tar.xz
tar -C "$BUILD/tar" -cJf "$TARBALL" "botpsy-desktop-$VERSION"
rm -rf "$BUILD/tar"
step_end "portable tarball"

APPDIR=$BUILD/BotPsy.AppDir
rm -rf "$APPDIR" && mkdir -p "$APPDIR/usr"
cp -a "$BUNDLE" "$APPDIR/usr/bin"
cp -a "$STAGE/usr/share" "$APPDIR/usr/share"
rm -rf "$BUILD/deb"  # the staging copy: the .deb has it
cp "$ROOT/packaging/linux/botpsy-desktop.desktop" "$APPDIR/"
cp "$ROOT/botpsy_desktop/assets/icons/botpsy-256.png" "$APPDIR/botpsy-desktop.png"
ln -s usr/bin/botpsy-desktop "$APPDIR/AppRun"
if command -v appimagetool >/dev/null; then
    step_start "AppImage"
    ARCH=$(uname -m) appimagetool --no-appstream "$APPDIR" "$OUT/BotPsy-$VERSION-$(uname -m).AppImage" \
        >"$LOG/appimage.log" 2>&1 || { tail -20 "$LOG/appimage.log"; exit 1; }
    step_end "AppImage"
else
    say "AppImage: skipped (appimagetool is not on PATH; AppDir ready at $APPDIR)"
fi

# -- 4. install into a fresh root and test ---------------------------------------------------------
step_start "install .deb into a fresh root"
FRESH=$(mktemp -d "$BUILD/root.XXXXXX")
trap 'rm -rf "$FRESH"' EXIT
mkdir -p "$FRESH/var/lib/dpkg/updates" "$FRESH/var/lib/dpkg/info" "$FRESH/home/user"
touch "$FRESH/var/lib/dpkg/status"
# the fresh root has no libc6 & co. registered: the test runs against this machine's libraries
dpkg --root="$FRESH" --force-depends --force-not-root -i "$DEB" >"$LOG/dpkg.log" 2>&1 \
    || { cat "$LOG/dpkg.log"; exit 1; }
APP=$FRESH/opt/botpsy-desktop
for f in "$APP/botpsy-desktop" "$APP/botpsy" "$FRESH/usr/share/applications/botpsy-desktop.desktop" \
    "$FRESH/usr/share/icons/hicolor/48x48/apps/botpsy-desktop.png" \
    "$FRESH/usr/share/icons/hicolor/scalable/apps/botpsy-desktop.svg"; do
    [ -e "$f" ] || { echo "missing after install: $f" >&2; exit 1; }
done
for link in botpsy botpsy-desktop; do
    [ "$(readlink "$FRESH/usr/bin/$link")" = "/opt/botpsy-desktop/$link" ] \
        || { echo "usr/bin/$link does not point into /opt/botpsy-desktop" >&2; exit 1; }
done
desktop-file-validate "$FRESH/usr/share/applications/botpsy-desktop.desktop"
step_end "install .deb into a fresh root"

MODEL=${BOTPSY_SELFTEST_MODEL:-}
if [ -z "$MODEL" ]; then
    MODEL=$(cd "$ROOT" && "$PYTHON" -c \
        "from tests.helpers.models import tiny_qwen35_gguf; print(tiny_qwen35_gguf())" | tail -1)
fi
[ -f "$MODEL" ] || { echo "no GGUF for the self-test: set BOTPSY_SELFTEST_MODEL" >&2; exit 1; }

step_start "self-test from the installed files"
# a clean environment: no Python, no display, nothing from this shell (Qt runs offscreen)
SELFTEST_OUT=$OUT/self-test.txt
SELF_T0=$(date +%s.%N)
env -i HOME="$FRESH/home/user" PATH=/usr/bin:/bin LANG=C.UTF-8 \
    "$APP/botpsy-desktop" --self-test --model "$MODEL" --home "$FRESH/home/user/self-test" \
    >"$SELFTEST_OUT" 2>"$LOG/self-test.stderr" || { cat "$SELFTEST_OUT" "$LOG/self-test.stderr"; exit 1; }
SELF_WALL=$(echo "$(date +%s.%N) - $SELF_T0" | bc)
tee -a "$REPORT" <"$SELFTEST_OUT"
step_end "self-test from the installed files"

step_start "self-test on an X server (xcb)"
# the same, on Xvfb: with DISPLAY set the self-test uses Qt's xcb platform, the one a desktop
# user gets, so a missing xcb library or plugin fails here
SELFTEST_X11_OUT=$OUT/self-test-xcb.txt
xvfb-run -a -s "-screen 0 1280x900x24" sh -c 'exec env -i HOME="$1" PATH=/usr/bin:/bin \
    LANG=C.UTF-8 DISPLAY="$DISPLAY" XAUTHORITY="$XAUTHORITY" "$2" --self-test --model "$3"' \
    _ "$FRESH/home/user" "$APP/botpsy-desktop" "$MODEL" \
    >"$SELFTEST_X11_OUT" 2>"$LOG/self-test-xcb.stderr" \
    || { cat "$SELFTEST_X11_OUT" "$LOG/self-test-xcb.stderr"; exit 1; }
grep -q "platform xcb" "$SELFTEST_X11_OUT" \
    || { cat "$SELFTEST_X11_OUT"; echo "the self-test under Xvfb did not use xcb" >&2; exit 1; }
grep -E "^(ok|FAIL) +(qt|window):" "$SELFTEST_X11_OUT" | sed 's/^/xcb: /' | tee -a "$REPORT"
step_end "self-test on an X server (xcb)"

step_start "CLI from the installed files"
env -i HOME="$FRESH/home/user" PATH=/usr/bin:/bin LANG=C.UTF-8 "$APP/botpsy" --version
env -i HOME="$FRESH/home/user" PATH=/usr/bin:/bin LANG=C.UTF-8 "$APP/botpsy" tools --json \
    | "$PYTHON" -c 'import json,sys; t=json.load(sys.stdin); print(f"botpsy tools: {len(t)} tools")'
env -i HOME="$FRESH/home/user" PATH=/usr/bin:/bin LANG=C.UTF-8 "$APP/botpsy" doctor \
    >"$LOG/doctor.txt" 2>&1 || true  # no model configured: doctor says so and exits non-zero
grep -i -m 2 "llama" "$LOG/doctor.txt"
step_end "CLI from the installed files"

step_start "voice from the installed files"
# a private sound server with a virtual microphone (a null sink's monitor, as the tests make
# it); a request spoken by espeak-ng is played into it while the installed `botpsy listen`
# records (soundcard and libpulse from the bundle; the replay recogniser matches the recording
# to its words, no speech model needed): the microphone path a person uses works from the .deb
VOICE=$(mktemp -d "$BUILD/voice.XXXXXX")
pulseaudio -n --daemonize=no --exit-idle-time=-1 --use-pid-file=no --disallow-exit \
    --log-target=stderr -L "module-native-protocol-unix socket=$VOICE/pulse auth-anonymous=1" \
    -L "module-null-sink sink_name=voice_feed" \
    -L "module-remap-source master=voice_feed.monitor source_name=test_mic" \
    >"$LOG/pulseaudio.log" 2>&1 &
PULSE_PID=$!
for _ in $(seq 50); do
    PULSE_SERVER=unix:$VOICE/pulse pactl info >/dev/null 2>&1 && break
    sleep 0.2
done
espeak-ng -w "$VOICE/said.wav" "set a timer for ten minutes"
mkdir -p "$VOICE/home/config"
printf '{"voice": {"engine": "replay", "replay_file": "%s", "microphone": "test_mic"}, "device": {"pulse_server": "unix:%s"}}\n' \
    "$VOICE/replay.json" "$VOICE/pulse" >"$VOICE/home/config/config.json"
printf '[{"wav": "%s", "text": "set a timer for ten minutes"}]\n' "$VOICE/said.wav" >"$VOICE/replay.json"
"$PYTHON" - "$APP/botpsy" "$VOICE" "$FRESH/home/user" <<'EOF' | tee -a "$REPORT" \
    || { kill "$PULSE_PID"; tail -20 "$LOG/pulseaudio.log"; exit 1; }
import subprocess, sys
botpsy, voice, home = sys.argv[1:]
env = {"HOME": home, "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
proc = subprocess.Popen([botpsy, "--home", f"{voice}/home", "listen", "--words-only"], env=env,
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                        text=True)
said = []
for line in proc.stderr:
    said.append(line)
    if line.startswith("Listening"):
        subprocess.run(["paplay", f"--server=unix:{voice}/pulse", "-d", "voice_feed",
                        f"{voice}/said.wav"], check=True)
        proc.stdin.write("\n")
        proc.stdin.flush()
        break
out, rest = proc.communicate(timeout=120)
if proc.returncode != 0 or out.strip() != "set a timer for ten minutes":
    sys.exit(f"botpsy listen from the installed files: exit {proc.returncode}, words {out!r}\n"
             + "".join(said) + rest)
print(f"voice: recorded through the bundle's soundcard and heard {out.strip()!r}")
EOF
kill "$PULSE_PID"
step_end "voice from the installed files"

if [ -n "$VULKAN_MODULE" ]; then
    step_start "the model on Vulkan from the installed files"
    # the engine's worker loads the bundled module from llama_cpp/lib/gpu and decodes there, on
    # Mesa's lavapipe (Vulkan on the CPU; llama.cpp hides a CPU-type device unless
    # GGML_VK_VISIBLE_DEVICES names it); doctor's device check says where the model ran
    GPU_HOME=$FRESH/home/user/gpu-test
    mkdir -p "$GPU_HOME/config"
    printf '{"model": {"path": "%s", "device": "vulkan", "n_ctx": 2048, "max_tokens": 8}}\n' \
        "$MODEL" >"$GPU_HOME/config/config.json"
    LAVAPIPE=$(compgen -G "/usr/share/vulkan/icd.d/lvp_icd.*.json" | sort | sed -n 1p || true)
    [ -n "$LAVAPIPE" ] || { echo "Mesa's lavapipe is missing: apt install mesa-vulkan-drivers" >&2; exit 1; }
    env -i HOME="$FRESH/home/user" PATH=/usr/bin:/bin LANG=C.UTF-8 GGML_VK_VISIBLE_DEVICES=0 \
        VK_ICD_FILENAMES="$LAVAPIPE" "$APP/botpsy" --home "$GPU_HOME" doctor --json \
        >"$LOG/doctor-vulkan.json" 2>"$LOG/doctor-vulkan.stderr" || true
    "$PYTHON" - "$LOG/doctor-vulkan.json" <<'EOF' | tee -a "$REPORT" \
        || { cat "$LOG/doctor-vulkan.stderr"; exit 1; }
import json, re, sys
try:
    checks = {c["name"]: c for c in json.load(open(sys.argv[1], encoding="utf-8"))}
except ValueError as exc:
    sys.exit(f"botpsy doctor printed no JSON ({exc}); see its stderr below")
engine, device = checks.get("engine", {}), checks.get("device", {})
print(f"vulkan: engine {engine.get('status')}: {engine.get('detail')}")
print(f"vulkan: device {device.get('status')}: {device.get('detail')}")
layers = re.search(r"(\d+) of (\d+) layers offloaded", str(device.get("detail")))
if engine.get("status") != "ok" or "Vulkan" not in str(device.get("detail")) \
        or not layers or layers[1] != layers[2]:
    sys.exit("the installed bundle did not run the whole model on its Vulkan backend")
EOF
    step_end "the model on Vulkan from the installed files"
fi

step_start "remove and purge keep user data"
USERDATA=$FRESH/home/user/.config/botpsy-desktop
[ -d "$USERDATA" ] || { echo "the CLI made no config folder at $USERDATA" >&2; exit 1; }
dpkg --root="$FRESH" --force-depends --force-not-root --purge botpsy-desktop >>"$LOG/dpkg.log" 2>&1
[ ! -e "$APP" ] && [ ! -e "$FRESH/usr/bin/botpsy" ] || { echo "files left after purge" >&2; exit 1; }
[ -d "$USERDATA" ] && [ -d "$FRESH/home/user/self-test/data" ] \
    || { echo "purge removed user data" >&2; exit 1; }
step_end "remove and purge keep user data"

# -- 5. report -------------------------------------------------------------------------------
say ""
say "bundle   $(human "$(size_of "$BUNDLE")")  $BUNDLE ($(find "$BUNDLE" -type f | wc -l) files)"
say ".deb     $(human "$(size_of "$DEB")")  $DEB (installed: $(human $((INSTALLED_KIB * 1024))))"
say "tarball  $(human "$(size_of "$TARBALL")")  $TARBALL"
say "self-test from the installed .deb: $(printf '%.1f' "$SELF_WALL") s wall time (offscreen)"
say "Depends: $DEPENDS"
say "report: $REPORT"
