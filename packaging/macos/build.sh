#!/usr/bin/env bash
# Build BotPsy.app and a .dmg on macOS (for the machine's CPU family: arm64 or x86_64), sign and
# notarize them when credentials are given, and run the app's self-test from the .dmg's copy.
#
#   bash packaging/macos/build.sh
#
# Environment: BOTPSY_BUILD_DIR (default ~/Library/Caches/botpsy-desktop-build), PYTHON
# (default python3; a python.org or setup-python build), BOTPSY_SELFTEST_MODEL (a GGUF; without
# it the self-test skips the model check), CODESIGN_IDENTITY (e.g. "Developer ID Application:
# Name (TEAMID)"; unset: an unsigned, ad-hoc build for testing), NOTARY_PROFILE (a
# `xcrun notarytool store-credentials` profile; set with CODESIGN_IDENTITY to notarize).
# packaging/README.md explains the signing and notarization steps.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BOTPSY_BUILD_DIR:-$HOME/Library/Caches/botpsy-desktop-build}
PYTHON=${PYTHON:-python3}
mkdir -p "$BUILD/out"
VERSION=$(sed -n 's/^__version__ = "\(.*\)"/\1/p' "$ROOT/botpsy_desktop/__init__.py")
LLAMA_PIN=$(grep -o '"llama-cpp-python==[^"]*"' "$ROOT/pyproject.toml" | tr -d '"')
ARCH=$(uname -m)
APP=$BUILD/dist/BotPsy.app
DMG=$BUILD/out/BotPsy-$VERSION-macos-$ARCH.dmg
ENTITLEMENTS=$ROOT/packaging/macos/entitlements.plist

echo "== build venv with a portable llama-cpp-python (CPU backends for M1 to M4, Metal)"
[ -x "$BUILD/venv/bin/python" ] || "$PYTHON" -m venv "$BUILD/venv"
PY=$BUILD/venv/bin/python
"$PY" -m pip install -q --upgrade pip
CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON -DLLAVA_BUILD=OFF" \
    "$PY" -m pip install -q --no-cache-dir --force-reinstall --no-deps --no-binary llama-cpp-python \
    "$LLAMA_PIN"
"$PY" -m pip install -q "$ROOT[packaging]"

echo "== PyInstaller: BotPsy.app"
rm -rf "$BUILD/dist" "$BUILD/work"
(cd "$BUILD" && "$BUILD/venv/bin/pyinstaller" --noconfirm --clean --log-level WARN \
    --distpath "$BUILD/dist" --workpath "$BUILD/work" "$ROOT/packaging/botpsy.spec")

sign() {  # sign every Mach-O file inside out, then the bundle (no --deep: Apple advises against)
    local identity=$1
    find "$APP/Contents" -type f \( -name '*.dylib' -o -name '*.so' -o -perm -u+x \) -print0 |
        while IFS= read -r -d '' f; do
            [[ $(file -b "$f") == *Mach-O* ]] || continue  # no grep -q: SIGPIPE under pipefail
            codesign --force --timestamp --options runtime --entitlements "$ENTITLEMENTS" \
                --sign "$identity" "$f"
        done
    codesign --force --timestamp --options runtime --entitlements "$ENTITLEMENTS" \
        --sign "$identity" "$APP"
    codesign --verify --deep --strict --verbose=2 "$APP"
}
if [ -n "${CODESIGN_IDENTITY:-}" ]; then
    echo "== signing with $CODESIGN_IDENTITY"
    sign "$CODESIGN_IDENTITY"
else
    echo "== no CODESIGN_IDENTITY: ad-hoc signature (runs here; Gatekeeper will refuse it elsewhere)"
    codesign --force --deep --sign - "$APP"
fi

echo "== .dmg"
STAGE=$BUILD/dmg
rm -rf "$STAGE" "$DMG" && mkdir -p "$STAGE"
cp -R "$APP" "$STAGE/"
ln -s /Applications "$STAGE/Applications"
hdiutil create -volname "BotPsy" -srcfolder "$STAGE" -fs HFS+ -format UDZO -ov "$DMG" >/dev/null
if [ -n "${CODESIGN_IDENTITY:-}" ]; then
    codesign --force --timestamp --sign "$CODESIGN_IDENTITY" "$DMG"
    if [ -n "${NOTARY_PROFILE:-}" ]; then
        echo "== notarizing (Apple checks the signed .dmg and everything in it; a few minutes)"
        xcrun notarytool submit "$DMG" --keychain-profile "$NOTARY_PROFILE" --wait
        xcrun stapler staple "$DMG"
        spctl --assess --type open --context context:primary-signature --verbose=2 "$DMG"
    fi
fi

echo "== self-test from the .dmg"
MOUNT=$(mktemp -d)
hdiutil attach -nobrowse -readonly -mountpoint "$MOUNT" "$DMG" >/dev/null
trap 'hdiutil detach "$MOUNT" >/dev/null || true' EXIT
ARGS=(--self-test)
[ -n "${BOTPSY_SELFTEST_MODEL:-}" ] && ARGS+=(--model "$BOTPSY_SELFTEST_MODEL")
"$MOUNT/BotPsy.app/Contents/MacOS/botpsy-desktop" "${ARGS[@]}"
"$MOUNT/BotPsy.app/Contents/MacOS/botpsy" --version
echo "built $DMG ($(du -h "$DMG" | cut -f1)); BotPsy.app is $(du -sh "$APP" | cut -f1)"
