#!/bin/sh
# Add BotPsy from this unpacked folder to your applications menu (for you only), or take it out
# again with --remove. Nothing else is installed; your settings and data are never touched.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
apps=${XDG_DATA_HOME:-$HOME/.local/share}/applications
icons=${XDG_DATA_HOME:-$HOME/.local/share}/icons/hicolor
if [ "${1:-}" = "--remove" ]; then
    rm -f "$apps/botpsy-desktop.desktop"
    find "$icons" -name botpsy-desktop.png -path '*/apps/*' -delete 2>/dev/null || true
    rm -f "$icons/scalable/apps/botpsy-desktop.svg"
    echo "Removed BotPsy from the applications menu."
    exit 0
fi
for png in "$here"/share/icons/hicolor/*/apps/botpsy-desktop.png; do
    size=$(basename "$(dirname "$(dirname "$png")")")
    mkdir -p "$icons/$size/apps"
    cp "$png" "$icons/$size/apps/"
done
mkdir -p "$icons/scalable/apps" "$apps"
cp "$here/share/icons/hicolor/scalable/apps/botpsy-desktop.svg" "$icons/scalable/apps/"
sed -e "s|^Exec=botpsy-desktop|Exec=\"$here/botpsy-desktop\"|" \
    "$here/share/applications/botpsy-desktop.desktop" > "$apps/botpsy-desktop.desktop"
echo "BotPsy is in your applications menu (run $0 --remove to take it out)."
