#!/usr/bin/env sh
# Install this unpacked folder for the current user: a launcher in ~/.local/bin, the menu entry and
# icon. Nothing outside $HOME is touched; `install.sh --uninstall` removes exactly what this added
# (the chats in ~/.local/share/offline-assistant stay, delete that folder to remove them too).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
DATA=${XDG_DATA_HOME:-$HOME/.local/share}
BIN=$HOME/.local/bin
if [ "${1:-}" = "--uninstall" ]; then
    rm -f "$BIN/assistant-gui" "$DATA/applications/offline-assistant.desktop" \
          "$DATA/icons/hicolor/256x256/apps/offline-assistant.png"
    echo "removed the launcher and menu entry (this folder and your chats are untouched)"
    exit 0
fi
mkdir -p "$BIN" "$DATA/applications" "$DATA/icons/hicolor/256x256/apps"
ln -sf "$HERE/assistant-gui" "$BIN/assistant-gui"
sed "s|^Exec=.*|Exec=\"$HERE/assistant-gui\"|" "$HERE/offline-assistant.desktop" > "$DATA/applications/offline-assistant.desktop"
cp "$HERE/offline-assistant.png" "$DATA/icons/hicolor/256x256/apps/offline-assistant.png"
command -v update-desktop-database >/dev/null && update-desktop-database "$DATA/applications" || true
echo "installed: 'Offline Assistant' in your applications menu, and $BIN/assistant-gui"
