#!/usr/bin/env bash
# macOS build: dist/Offline Assistant.app (PyInstaller BUNDLE step of packaging/assistant.spec) and a
# compressed .dmg with an /Applications link to drag it onto. Run on the Mac you target (arm64 for
# Apple silicon, x86_64 for Intel: PyInstaller does not cross-build), Xcode command line tools installed.
#
#     packaging/macos/build.sh
#
# llama.cpp is built by packaging/llama/build_wheel.py as on Linux and Windows: `--backend metal`,
# the Metal backend (shaders embedded) and the CPU variants, each a module in llama_cpp/lib that ggml
# loads at start. Built once into build/wheels/metal/ (LLAMA_BACKEND=cpu for CPU only); delete that
# folder to rebuild it.
# Signing and notarisation (needed so Gatekeeper opens a downloaded .dmg without a warning):
#     SIGN_ID="Developer ID Application: …" NOTARY_PROFILE=<notarytool keychain profile> packaging/macos/build.sh
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
NAME="Offline Assistant"
PY=${PYTHON:-.venv/bin/python}
BACKEND=${LLAMA_BACKEND:-metal}
if [ ! -x "$PY" ]; then
    python3 -m venv .venv
    .venv/bin/pip install -U pip
fi
# llama-cpp-python from our build first: `pip install -e .` then finds the pinned version installed
# and does not build PyPI's sdist (a build without backend modules).
LLAMA_VERSION=$("$PY" -c "import sys; sys.path.insert(0, 'packaging/llama'); import build_wheel; print(build_wheel.pinned_version())")
WHEEL=$(ls build/wheels/"$BACKEND"/llama_cpp_python-"$LLAMA_VERSION"-*.whl 2>/dev/null | head -1 || true)
if [ -z "$WHEEL" ]; then
    "$PY" packaging/llama/build_wheel.py --backend "$BACKEND"
    WHEEL=$(ls build/wheels/"$BACKEND"/llama_cpp_python-"$LLAMA_VERSION"-*.whl | head -1)
fi
"$PY" -m pip install --disable-pip-version-check --force-reinstall --no-deps "$WHEEL"
"$PY" -m pip install --disable-pip-version-check -e '.[gui,memory,dist]' pillow   # pillow: PyInstaller makes the .icns from icon.png
"$PY" -m engine.models.fetch
"$PY" -m engine.memory.export
"$PY" packaging/update_manifest.py channel   # UPDATE_MANIFEST_URL + UPDATE_PUBLIC_KEY, or none
"$PY" -m PyInstaller --noconfirm --distpath dist --workpath build/pyinstaller packaging/assistant.spec
APP="dist/$NAME.app"
[ -d "$APP" ] || { echo "PyInstaller made no $APP" >&2; exit 1; }
# The folder build's selftest, in a clean environment (the .app's executable is the same program).
"$PY" packaging/dist_test.py --bundle "dist/offline-assistant" --backend "$BACKEND"

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
