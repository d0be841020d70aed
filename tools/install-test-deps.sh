#!/usr/bin/env bash
# Install the system packages the test suite needs, with apt (Debian 12, Ubuntu 22.04 or newer).
#
#   tools/install-test-deps.sh          # as root, or as a user who may sudo
#   tools/install-test-deps.sh --list   # print the packages and what needs each, install nothing
#
# Quick and quiet when everything is there (no apt-get update). Elsewhere (no apt) it says what
# the tests need; those tests then skip with the reason, except under CI (CI=true), where a test
# skipped for a missing program or service is a failure (tests/helpers/services.py).
set -euo pipefail

# package                what needs it
PACKAGES=(
    build-essential      # pip compiles llama-cpp-python from source (gcc, g++, make)
    cmake                # the tests build llama-server from the vendored llama.cpp (remote engine)
    libgl1 libegl1 libfontconfig1 libxkbcommon0 libdbus-1-3  # PySide6 itself (Qt GUI, D-Bus)
    libpulse0            # QtMultimedia imports (the window's music player, the alarm sound)
    mpv                  # the headless music player the music tests drive (--ao=null)
    alsa-utils           # aplay, the other headless player the music tests try
    xvfb xauth           # a real X server: the tray, the global shortcut, the xcb platform
    trayer               # a tray host on that server
    xdotool              # presses the global shortcut for the quick-command box
    libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1 libxcb-image0 libxcb-render-util0
    libxcb-xkb1 libxcb-shape0 libxcb-xinerama0 libxcb-randr0 libxkbcommon-x11-0  # Qt's xcb plugin
    dovecot-imapd        # a real IMAP server: the mail tests and the injection suite's mail
    gnome-keyring dbus   # a real Secret Service on a private D-Bus; D-Bus for notifications
    pulseaudio           # the device tools' sound: a real sound server with null sinks
    libglib2.0-bin dconf-service gsettings-desktop-schemas  # gio (open, launch), GNOME settings
    gnome-settings-daemon-common  # GNOME's custom-shortcut schema (media-keys): the quick key on GNOME
    espeak-ng pulseaudio-utils  # push-to-talk: spoken commands as WAVs into a virtual mic; spoken replies
    xdg-desktop-portal xdg-desktop-portal-kde  # the Wayland shortcut: the real GlobalShortcuts portal
    libvulkan-dev glslc spirv-headers ninja-build  # llama.cpp's Vulkan backend module, built once
    mesa-vulkan-drivers  # lavapipe: a Vulkan device on the CPU, where the Vulkan tests run
)

ELSEWHERE="Without apt, install the same programs with your system's package manager: a C/C++
compiler, cmake, PulseAudio's client library (libpulse), mpv, aplay (ALSA utilities), Xvfb with
xauth, trayer, xdotool, the xcb libraries Qt 6 needs (xcb-cursor, icccm, keysyms, image,
render-util, xkb, shape, xinerama, randr, xkbcommon-x11), Dovecot (IMAP), gnome-keyring,
dbus-daemon, PulseAudio with its utilities (paplay), GLib's gio and gsettings with dconf and
GNOME's desktop and settings-daemon schemas, espeak-ng, xdg-desktop-portal with KDE's backend
(kglobalaccel), the Vulkan headers and loader, glslc, SPIRV-Headers, ninja, Mesa's Vulkan
drivers (lavapipe). Tests whose program is missing skip with the reason (and fail under CI=true)."

if [ "${1:-}" = --list ]; then
    sed -n '/^PACKAGES=(/,/^)/p' "$0" | sed '1d;$d'
    exit 0
fi

if ! command -v dpkg-query >/dev/null || ! command -v apt-get >/dev/null; then
    echo "install-test-deps: this system has no apt (the script knows Debian and Ubuntu)." >&2
    echo "$ELSEWHERE" >&2
    # under CI the packages must be there: tests skipped for them fail anyway, so fail here first
    [ "${CI:-}" = true ] && exit 1
    exit 0
fi

MISSING=()
for pkg in "${PACKAGES[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
    [ "$status" = "install ok installed" ] || MISSING+=("$pkg")
done
if ((${#MISSING[@]} == 0)); then
    echo "install-test-deps: all ${#PACKAGES[@]} system packages the tests need are installed"
    exit 0
fi

if [ "$(id -u)" = 0 ]; then
    SUDO=()
elif command -v sudo >/dev/null; then
    SUDO=(sudo)
    echo "install-test-deps: installing ${MISSING[*]} with sudo"
else
    echo "install-test-deps: missing ${MISSING[*]}; as root, run:" >&2
    echo "  apt-get update && apt-get install --no-install-recommends ${MISSING[*]}" >&2
    exit 1
fi
echo "install-test-deps: apt-get install ${MISSING[*]}"
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${MISSING[@]}"
