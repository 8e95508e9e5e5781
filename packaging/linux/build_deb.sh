#!/usr/bin/env bash
# The Debian/Ubuntu package of the built bundle: dist/offline-assistant_<version>_<arch>.deb.
#
#     packaging/linux/build_deb.sh     # after the bundle (build.sh runs it when dpkg-deb is there)
#
# It installs the bundle under /opt/offline-assistant, `assistant` and `assistant-gui` in /usr/bin
# (links: the bootloader finds _internal/ beside the link's target), the menu entry and the icon.
# Depends: what the bundle takes from the system (packaging/dist_test.py's BASE_SYSTEM, and the
# Vulkan loader): deb_test.py checks that every such library belongs to a package named here.
# Nothing is run at install or removal (no maintainer scripts): the menu and icon caches are
# refreshed by the desktop-file-utils and hicolor triggers, and `apt remove` takes back exactly the
# files it put down; the user's chats in ~/.local/share/offline-assistant are theirs.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
PY=${PYTHON:-.venv/bin/python}
NAME=offline-assistant
BUNDLE=dist/$NAME
VERSION=$("$PY" -c "import tomllib; print(tomllib.load(open('pyproject.toml','rb'))['project']['version'])")
ARCH=$(dpkg --print-architecture)
STAGE=build/deb/$NAME
DEB=dist/${NAME}_${VERSION}_${ARCH}.deb

[ -x "$BUNDLE/assistant-gui" ] || { echo "build_deb.sh: no bundle at $BUNDLE (run build.sh first)" >&2; exit 1; }
rm -rf "$STAGE" && mkdir -p "$STAGE/DEBIAN" "$STAGE/opt" "$STAGE/usr/bin" "$STAGE/usr/share/applications" \
    "$STAGE/usr/share/icons/hicolor/256x256/apps" "$STAGE/usr/share/doc/$NAME"
cp -a "$BUNDLE" "$STAGE/opt/$NAME"
# The tarball's per-user installer and its copies of the menu files are not the package's.
rm -f "$STAGE/opt/$NAME/install.sh" "$STAGE/opt/$NAME/$NAME.desktop" "$STAGE/opt/$NAME/$NAME.png"
ln -s "/opt/$NAME/assistant-gui" "$STAGE/usr/bin/assistant-gui"
ln -s "/opt/$NAME/assistant" "$STAGE/usr/bin/assistant"
install -m 644 packaging/linux/$NAME.desktop "$STAGE/usr/share/applications/$NAME.desktop"
install -m 644 assets/icon.png "$STAGE/usr/share/icons/hicolor/256x256/apps/$NAME.png"
cat > "$STAGE/usr/share/doc/$NAME/copyright" <<EOF
Offline Assistant $VERSION. The licences of the libraries, models and icons it bundles are in
/opt/$NAME/_internal (LICENSE files beside each part).
EOF
# Directories 755, files as built (the bundle's libraries keep their execute bits), all root's.
find "$STAGE" -type d -exec chmod 755 {} +
# What the bundle loads from the system (BASE_SYSTEM in dist_test.py) and the Vulkan loader. Names
# with "|" are Ubuntu 24.04's t64 renames. glibc: the build machine's is the floor (the bundle's
# Python and libraries link against it): 2.35 when built on Ubuntu 22.04, 2.36 on Debian 12.
GLIBC=$(ldd --version | head -1 | awk '{print $NF}')
DEPENDS="libc6 (>= $GLIBC), libstdc++6, libgcc-s1, libvulkan1, libxcb1, libx11-6, libx11-xcb1, libxau6, libxdmcp6,
 libgl1, libegl1, libglx0, libglvnd0, libdrm2, libwayland-client0, libfontconfig1, libfreetype6,
 libglib2.0-0t64 | libglib2.0-0, libdbus-1-3"
cat > "$STAGE/DEBIAN/control" <<EOF
Package: $NAME
Version: $VERSION
Architecture: $ARCH
Maintainer: Offline Assistant developers <noreply@localhost>
Installed-Size: $(du -sk --exclude=DEBIAN "$STAGE" | cut -f1)
Depends: $(echo $DEPENDS)
Recommends: mesa-vulkan-drivers
Section: utils
Priority: optional
Description: Chat with a local language model, offline
 A desktop chat app on llama.cpp that keeps every conversation on this computer:
 a small model on the CPU, a larger one on the GPU when there is one, local
 documents with citations, and an OpenAI-compatible API for other programs.
EOF
# zstd: dpkg ≥ 1.21.18 (Debian 12, Ubuntu 22.04) reads it, and it packs 800 MB in seconds, not minutes
dpkg-deb --root-owner-group -Zzstd -z6 --build "$STAGE" "$DEB" >/dev/null
echo "deb: $DEB ($(du -sh "$DEB" | cut -f1))"
