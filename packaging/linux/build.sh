#!/usr/bin/env bash
# Build the Linux bundle: the PyInstaller folder dist/offline-assistant/ (GUI: assistant-gui,
# terminal: assistant), then dist/offline-assistant-<version>-linux-<arch>.tar.gz holding that folder
# with a .desktop file, the icon and install.sh, the .deb (packaging/linux/build_deb.sh) where
# dpkg-deb is, and an AppImage when `appimagetool` is on PATH.
# With UPDATE_MANIFEST_URL and UPDATE_PUBLIC_KEY (or UPDATE_SIGNING_KEY) the bundle carries its update
# channel; with UPDATE_SIGNING_KEY and UPDATE_DOWNLOAD_URL (the release's download folder) dist/update.json
# is written and signed for the tarball and the .deb (packaging/update_manifest.py).
#
#     packaging/linux/build.sh            # what `make dist` runs (venv and models already made)
#     NO_ARCHIVE=1 packaging/linux/build.sh   # folder only (what `make dist-test` needs)
#
# Options pass through to packaging/assistant.spec: ASSISTANT_BUNDLE_DEMO=0, ASSISTANT_BUNDLE_MEMORY=0.
# The venv's llama-cpp-python must be the wheel of packaging/llama/build_wheel.py (backend modules in
# llama_cpp/lib); the spec stops otherwise.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
PY=${PYTHON:-.venv/bin/python}
NAME=offline-assistant
VERSION=$("$PY" -c "import tomllib; print(tomllib.load(open('pyproject.toml','rb'))['project']['version'])")
ARCH=$(uname -m)
BUNDLE=dist/$NAME

# PyInstaller copies Qt's xcb libraries (libxcb-cursor0, …) into the bundle only if this machine
# has them; without them the bundle cannot open a window on many desktops. dist_test.py checks it.
packaging/linux/sysdeps.sh --check bundle || {
    echo "build.sh: run \`sudo packaging/linux/sysdeps.sh bundle\` first (the bundle would lack them)" >&2
    exit 1
}
rm -rf "$BUNDLE" build/pyinstaller
"$PY" packaging/update_manifest.py channel   # build/update_channel.json, bundled by the spec (or none)
"$PY" -m PyInstaller --noconfirm --log-level WARN --distpath dist --workpath build/pyinstaller \
    packaging/assistant.spec
# Desktop integration files travel inside the folder, so the tarball and the AppImage share them.
install -m 644 packaging/linux/$NAME.desktop "$BUNDLE/$NAME.desktop"
install -m 644 assets/icon.png "$BUNDLE/$NAME.png"
install -m 755 packaging/linux/install.sh "$BUNDLE/install.sh"
echo "bundle: $BUNDLE ($(du -sh "$BUNDLE" | cut -f1))"

[ "${NO_ARCHIVE:-0}" = 1 ] && exit 0

TARBALL=dist/$NAME-$VERSION-linux-$ARCH.tar.gz
tar -C dist -czf "$TARBALL" "$NAME"
echo "archive: $TARBALL ($(du -sh "$TARBALL" | cut -f1))"

INSTALLERS=(--installer "linux-$ARCH=$TARBALL@${UPDATE_DOWNLOAD_URL:-}/$(basename "$TARBALL")")
if command -v dpkg-deb >/dev/null; then
    packaging/linux/build_deb.sh
    DEB=$(ls -t dist/${NAME}_"$VERSION"_*.deb | head -1)
    # the .deb is what a Debian/Ubuntu user should get: it comes first for this system
    INSTALLERS=(--installer "linux-$ARCH=$DEB@${UPDATE_DOWNLOAD_URL:-}/$(basename "$DEB")")
else
    echo "dpkg-deb not on PATH: no .deb this time"
fi
if [ -n "${UPDATE_SIGNING_KEY:-}" ] && [ -n "${UPDATE_DOWNLOAD_URL:-}" ]; then
    "$PY" packaging/update_manifest.py sign --version "$VERSION" "${INSTALLERS[@]}" --out dist/update.json
fi

if command -v appimagetool >/dev/null; then
    APPDIR=build/$NAME.AppDir
    rm -rf "$APPDIR" && mkdir -p "$APPDIR/usr"
    cp -a "$BUNDLE" "$APPDIR/usr/lib"
    cp "$BUNDLE/$NAME.desktop" "$BUNDLE/$NAME.png" "$APPDIR/"
    printf '#!/bin/sh\nexec "$(dirname "$(readlink -f "$0")")/usr/lib/assistant-gui" "$@"\n' > "$APPDIR/AppRun"
    chmod 755 "$APPDIR/AppRun"
    ARCH=$ARCH appimagetool --no-appstream "$APPDIR" "dist/$NAME-$VERSION-$ARCH.AppImage"
else
    echo "appimagetool not on PATH: no AppImage this time (the tarball is complete)"
fi
