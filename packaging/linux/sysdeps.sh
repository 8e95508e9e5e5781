#!/usr/bin/env bash
# Debian/Ubuntu packages the build, the tests and the bundle need; installs only what is missing.
#
#     packaging/linux/sysdeps.sh          # as root, or through sudo; `.ci/run` calls it before `make test`
#     packaging/linux/sysdeps.sh --check  # say what is missing, install nothing (exit 1 if anything is)
#     packaging/linux/sysdeps.sh --check bundle   # only some groups: build, test, bundle (default: all)
#
# - Vulkan build of llama.cpp (packaging/llama/build_wheel.py): headers + loader, the GLSL compiler,
#   SPIR-V headers.
# - Tests: Mesa's lavapipe, a software Vulkan device (llama.cpp shows it with GGML_VK_VISIBLE_DEVICES=0).
# - The bundle: Qt 6's xcb platform plugin (libqxcb.so) and the Qt libraries under it link these;
#   PyInstaller copies them into the bundle only if the build machine has them (packaging/README.md).
# A name "a|b" is one need met by either package (Ubuntu 24.04 renamed some libraries: …t64).
# Quick when everything is there: one dpkg-query, no apt-get.
set -euo pipefail

BUILD=(libvulkan-dev glslc spirv-headers glslang-tools)
TEST=(mesa-vulkan-drivers)
QT_XCB=(
    libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1 libxcb-image0 libxcb-render-util0 libxcb-randr0
    libxcb-shape0 libxcb-xinerama0 libxcb-xkb1 libxkbcommon-x11-0
    # the rest of `ldd libqxcb.so`: absent from slim CI images, present on any desktop
    libxcb-util1 libxcb-shm0 libxcb-sync1 libxcb-xfixes0 libxcb-render0 libxcb1 libx11-xcb1 libx11-6
    libxkbcommon0 libegl1 libgl1 libfontconfig1 libfreetype6 "libglib2.0-0t64|libglib2.0-0" libdbus-1-3
)
CHECK=0
[ "${1:-}" = "--check" ] && { CHECK=1; shift; }
NEEDS=()
for group in "${@:-build test bundle}"; do
    for g in $group; do
        case $g in
            build) NEEDS+=("${BUILD[@]}") ;;
            test) NEEDS+=("${TEST[@]}") ;;
            bundle) NEEDS+=("${QT_XCB[@]}") ;;
            *) echo "sysdeps.sh: unknown group $g (build, test, bundle)" >&2; exit 2 ;;
        esac
    done
done

if ! command -v dpkg-query >/dev/null || ! command -v apt-get >/dev/null; then
    echo "sysdeps.sh: not a Debian/Ubuntu system; install the equivalents of: ${NEEDS[*]}" >&2
    exit 1
fi

installed=$(dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' 2>/dev/null | awk '$1 == "ii" {print $2}' | sed 's/:.*//')
has() { grep -qxF "$1" <<<"$installed"; }
known() { [ -n "$(apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ && $2 != "(none)"')" ]; }

missing=()
for need in "${NEEDS[@]}"; do
    IFS='|' read -ra alts <<<"$need"
    ok=0
    for p in "${alts[@]}"; do has "$p" && { ok=1; break; }; done
    [ $ok = 1 ] || missing+=("$need")
done
# Whatever the xcb plugin of the venv's PySide6 still cannot find (a Qt update may add a library):
# fail with its name, so it joins QT_XCB above. Skipped before the venv exists.
verify_qxcb() {
    local root qxcb
    root=$(cd "$(dirname "$0")/../.." && pwd)
    # `|| true`: no match is the normal case before the venv exists (ls exits 2, pipefail keeps it)
    qxcb=$(ls "$root"/.venv/lib/python3*/site-packages/PySide6/Qt/plugins/platforms/libqxcb.so 2>/dev/null | head -1 || true)
    [ -n "$qxcb" ] || return 0
    local lost
    lost=$(ldd "$qxcb" | awk '/not found/ {print $1}' | sort -u | tr '\n' ' ')
    if [ -n "$lost" ]; then
        echo "sysdeps.sh: Qt's xcb plugin still misses: $lost(add their packages to QT_XCB)" >&2
        return 1
    fi
}

if [ ${#missing[@]} = 0 ]; then
    verify_qxcb
    echo "sysdeps.sh: all system packages present"
    exit 0
fi
if [ $CHECK = 1 ]; then
    echo "sysdeps.sh: missing: ${missing[*]}" >&2
    exit 1
fi

if [ "$(id -u)" = 0 ]; then
    SUDO=()
elif command -v sudo >/dev/null; then
    SUDO=(sudo)
else
    echo "sysdeps.sh: missing ${missing[*]}; as root run:" >&2
    echo "    apt-get update && apt-get install -y --no-install-recommends ${missing[*]//|/ or }" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
# The package lists may be empty (fresh container) or old: refresh once before picking names.
"${SUDO[@]}" apt-get update -qq
pkgs=()
for need in "${missing[@]}"; do
    IFS='|' read -ra alts <<<"$need"
    pick=""
    for p in "${alts[@]}"; do known "$p" && { pick=$p; break; }; done
    [ -n "$pick" ] || { echo "sysdeps.sh: no package named ${need//|/ or } in apt's lists" >&2; exit 1; }
    pkgs+=("$pick")
done
echo "sysdeps.sh: installing ${pkgs[*]}"
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${pkgs[@]}"
verify_qxcb
