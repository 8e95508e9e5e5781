#!/usr/bin/env bash
# macOS build: dist/Offline Assistant.app (PyInstaller BUNDLE step of packaging/assistant.spec) and a
# compressed .dmg with an /Applications link to drag it onto. Run on the Mac you target (arm64 for
# Apple silicon, x86_64 for Intel: PyInstaller does not cross-build), Xcode command line tools installed.
#
#     packaging/macos/build.sh
#
# Metal (Apple silicon GPUs): CMAKE_ARGS="-DGGML_METAL=on" (llama.cpp's default on arm64 macOS;
# the Metal shader library is embedded with -DGGML_METAL_EMBED_LIBRARY=on, also the default).
# Signing and notarisation (needed so Gatekeeper opens a downloaded .dmg without a warning):
#     SIGN_ID="Developer ID Application: …" NOTARY_PROFILE=<notarytool keychain profile> packaging/macos/build.sh
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
NAME="Offline Assistant"
PY=${PYTHON:-.venv/bin/python}
export CMAKE_ARGS=${CMAKE_ARGS:--DGGML_METAL=on}
if [ ! -x "$PY" ]; then
    python3 -m venv .venv
    .venv/bin/pip install -U pip
    .venv/bin/pip install -e '.[memory,dist]' pillow   # pillow: PyInstaller makes the .icns from icon.png
fi
"$PY" -m engine.models.fetch
"$PY" -m engine.memory.export
"$PY" -m PyInstaller --noconfirm --distpath dist --workpath build/pyinstaller packaging/assistant.spec
APP="dist/$NAME.app"
[ -d "$APP" ] || { echo "PyInstaller made no $APP" >&2; exit 1; }
# The folder build's selftest, in a clean environment (the .app's executable is the same program).
"$PY" packaging/dist_test.py --bundle "dist/offline-assistant"

if [ -n "${SIGN_ID:-}" ]; then
    codesign --force --deep --options runtime --timestamp --sign "$SIGN_ID" "$APP"
fi
VERSION=$("$PY" -c "import tomllib; print(tomllib.load(open('pyproject.toml','rb'))['project']['version'])")
DMG="dist/offline-assistant-$VERSION-macos-$(uname -m).dmg"
STAGE=$(mktemp -d)
cp -R "$APP" "$STAGE/"
ln -s /Applications "$STAGE/Applications"
rm -f "$DMG"
hdiutil create -volname "$NAME" -srcfolder "$STAGE" -fs HFS+ -format UDZO -imagekey zlib-level=9 "$DMG"
rm -rf "$STAGE"
if [ -n "${SIGN_ID:-}" ] && [ -n "${NOTARY_PROFILE:-}" ]; then
    codesign --sign "$SIGN_ID" --timestamp "$DMG"
    xcrun notarytool submit "$DMG" --keychain-profile "$NOTARY_PROFILE" --wait
    xcrun stapler staple "$DMG"
fi
echo "dmg: $DMG"
