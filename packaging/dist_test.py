"""Prove the built bundle works where no developer tools are: `make dist-test`.

Runs `dist/offline-assistant/assistant-gui --selftest` (and the terminal `assistant` once) in a
clean environment: `env -i`, PATH without any venv, HOME an empty temp dir, no PYTHONPATH. Checks
the JSON report, that the data landed under that HOME, and that nothing was written inside the
install folder. With --runs N (N fresh HOMEs) it prints the cold-start table for packaging/README.md.

Before that, what the bundle carries: llama.cpp's backend modules (the GPU backend and the CPU
variants), no GPU driver stack (the Vulkan loader and drivers are the user's), on Linux every
library Qt's xcb plugin and the backend modules need resolved inside the bundle or from the base
system (`ldd`, as the app resolves them), and `assistant devices --json` listing the GPU backend.

    .venv/bin/python packaging/dist_test.py [--runs 5] [--bundle dist/offline-assistant] [--backend vulkan]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

log = logging.getLogger("dist_test")
ROOT = Path(__file__).resolve().parent.parent


EXE = ".exe" if sys.platform == "win32" else ""
LINUX = sys.platform.startswith("linux")
# What the bundle must never carry: the GPU driver stack (the Vulkan loader and the drivers' own
# libraries must match the installed driver) and, on Linux, the C++ runtime (a bundled one older
# than the system's stops newer Mesa drivers from loading; packaging/assistant.spec says more).
FORBIDDEN = re.compile(r"(lib)?(vulkan|vulkan-1|vulkan_\w+|MoltenVK|cuda|nvcuda|nvidia-[\w-]+|nvoptix|GLX_\w+|EGL_\w+)"
                       r"(\.so|\.dll|\.dylib|\.\d)" + (r"|libstdc\+\+\.so|libgcc_s\.so" if LINUX else ""),
                       re.IGNORECASE)
# Libraries the bundle may take from the system (Linux): what every desktop that can show a window
# has, and what must match the machine rather than the build. Anything else resolved outside the
# bundle is a library some user will lack; anything "not found" is one the bundle forgot.
BASE_SYSTEM = re.compile("|".join([
    r"linux-vdso\.so\.1", r"ld-linux.*\.so\.\d",                   # the kernel's vDSO, the dynamic loader
    r"lib(c|m|dl|pthread|rt|util|resolv|anl)\.so\.\d+",             # glibc (its version is the bundle's floor)
    r"libstdc\+\+\.so\.6", r"libgcc_s\.so\.1",                     # the C++ runtime, as for manylinux wheels
    r"libxcb\.so\.1", r"libX11\.so\.6", r"libX11-xcb\.so\.1",       # X11 core: any X/Xwayland session has it
    r"libXau\.so\.6", r"libXdmcp\.so\.6",
    r"lib(GL|EGL|GLX|OpenGL|GLdispatch)\.so\.\d", r"libdrm\.so\.2",  # GL/EGL: the graphics driver's (libglvnd)
    r"libwayland-(client|cursor|egl)\.so\.\d",                       # the compositor's
    r"libfontconfig\.so\.1", r"libfreetype\.so\.6",                  # the desktop's fonts and their config
    r"lib(glib|gobject|gthread|gio|gmodule)-2\.0\.so\.0",            # glib and the session bus
    r"libdbus-1\.so\.3",
]))
VULKAN_LOADER = re.compile(r"libvulkan\.so\.1")  # the system's loader, for the Vulkan module only


def default_backend() -> str:
    return "metal" if sys.platform == "darwin" else "vulkan"


def clean_env(home: Path) -> dict[str, str]:
    """No venv, no PYTHONPATH, no display, an empty home (where platformdirs looks on each OS)."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8", "QT_QPA_PLATFORM": "offscreen"}
    if sys.platform == "win32":
        env.update(PATH=os.environ.get("SystemRoot", r"C:\Windows") + r"\System32", SystemRoot=os.environ.get(
            "SystemRoot", r"C:\Windows"), USERPROFILE=str(home), LOCALAPPDATA=str(home / "AppData" / "Local"),
            APPDATA=str(home / "AppData" / "Roaming"))
    return env


def tree_state(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in root.rglob("*")}


def size_mb(root: Path, pattern: str = "*") -> float:
    """Bytes on disk as MB; symlinks (PyInstaller links some libraries) counted once, as links."""
    return sum(p.lstat().st_size for p in root.rglob(pattern) if p.is_file() and not p.is_symlink()) / 1e6


def llama_lib(bundle: Path) -> Path:
    return bundle / "_internal" / "llama_cpp" / "lib"


def module_name(backend: str) -> str:
    """ggml's file name for a backend module (ggml-backend-reg.cpp: libggml-NAME.so, ggml-NAME.dll on Windows)."""
    return f"ggml-{backend}.dll" if sys.platform == "win32" else f"libggml-{backend}.so"


def check_contents(bundle: Path, backend: str) -> dict:
    """The backend modules are there, in llama_cpp/lib; no driver stack anywhere in the bundle."""
    lib = llama_lib(bundle)
    names = {p.name for p in lib.iterdir()} if lib.is_dir() else set()
    want = [module_name(backend)] if backend != "cpu" else []
    if platform.machine().lower() in ("x86_64", "amd64"):
        want += [module_name("cpu-x64"), module_name("cpu-haswell")]  # the oldest CPUs, and most laptops
    missing = [n for n in want if n not in names]
    variants = sorted(n for n in names if re.match(r"(lib)?ggml-cpu-", n))
    if missing or not variants:
        raise SystemExit(f"llama.cpp's backend modules missing from {lib}: {missing or 'any ggml-cpu-* variant'} "
                         f"(it holds {sorted(names)}); is the venv's llama-cpp-python the wheel of "
                         "packaging/llama/build_wheel.py?")
    carried = sorted(str(p.relative_to(bundle)) for p in bundle.rglob("*") if FORBIDDEN.match(p.name))
    if carried:
        raise SystemExit(f"the bundle carries libraries that must come from the user's system: {carried} "
                         "(filtered by wanted() in packaging/assistant.spec)")
    return {"backend_modules": sorted(n for n in names if re.match(r"(lib)?ggml-", n)), "cpu_variants": variants}


def ldd(path: Path, internal: Path) -> dict[str, str | None]:
    """Every library `path` loads (transitively) -> where it resolves (None: not found), with
    LD_LIBRARY_PATH the bundle's _internal as the bootloader sets it, and no other environment."""
    proc = subprocess.run(["ldd", str(path)], env={"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": str(internal)},
                          capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise SystemExit(f"ldd {path} failed (exit {proc.returncode}): {proc.stderr.strip()}")
    out = {}
    for line in proc.stdout.splitlines():
        m = re.match(r"\s*(\S+)(?: => (not found|\S*))?", line)
        if m:
            name, where = m.group(1), m.group(2)
            out[Path(name).name] = None if where == "not found" else (where or name)
    return out


def check_linkage(bundle: Path) -> dict:
    """Qt's xcb plugin and llama.cpp's modules find every library inside the bundle or in the base system."""
    internal = (bundle / "_internal").resolve()
    targets = sorted(internal.glob("PySide6/Qt/plugins/platforms/libqxcb.so"))
    if not targets:
        raise SystemExit(f"no Qt xcb platform plugin in {internal}: the app cannot open a window on X11")
    targets += sorted(p for p in llama_lib(bundle).glob("lib*.so*") if not p.is_symlink())
    problems, from_system = [], set()
    for target in targets:
        for name, where in ldd(target, internal).items():
            if where is None:
                problems.append(f"{target.name}: {name} not found")
            elif internal not in Path(where).resolve().parents:
                allowed = BASE_SYSTEM.fullmatch(name) or ("vulkan" in target.name and VULKAN_LOADER.fullmatch(name))
                if allowed:
                    from_system.add(name)
                else:
                    problems.append(f"{target.name}: {name} from the system ({where}), not the bundle")
    if problems:
        raise SystemExit("libraries the bundle does not carry and a stock desktop may lack (install them on the build "
                         "machine: packaging/linux/sysdeps.sh; or, for a true base-system library, add it to "
                         "BASE_SYSTEM in packaging/dist_test.py):\n  " + "\n  ".join(problems))
    return {"checked": [t.name for t in targets], "from_system": sorted(from_system)}


def check_devices(bundle: Path, home: Path, backend: str) -> dict:
    """`assistant devices --json` in the clean environment lists the GPU backend, and on Linux a device
    of it (CI's lavapipe, shown only with GGML_VK_VISIBLE_DEVICES=0): the system's loader and driver
    work from inside the bundle. A Windows build machine may have no GPU driver, hence no
    vulkan-1.dll: there a missing backend is a warning (its module is checked by check_contents)."""
    env = clean_env(home) | {"GGML_VK_VISIBLE_DEVICES": "0"}
    proc = subprocess.run([str(bundle / f"assistant{EXE}"), "devices", "--json"], env=env, cwd=home,
                          capture_output=True, text=True, timeout=120)
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        raise SystemExit(f"`assistant devices --json` printed no JSON (exit {proc.returncode}):\n"
                         f"{proc.stdout[-1000:]}\n{proc.stderr[-3000:]}")
    backends, devices = report.get("backends"), report.get("devices")
    if not isinstance(backends, list) or not isinstance(devices, list):
        raise SystemExit(f"`assistant devices --json` has no \"backends\"/\"devices\" lists: {sorted(report)}")
    found = {"backends": backends, "devices": [f"{d.get('name')}: {d.get('description')}" for d in devices]}
    problem = ""
    if "cpu" not in backends:
        problem = "no cpu backend"
    elif backend != "cpu" and backend not in backends:
        problem = f"no {backend} backend"
    elif LINUX and backend == "vulkan" and not any(d.get("backend") == backend for d in devices):
        problem = "no Vulkan device (lavapipe: packaging/linux/sysdeps.sh installs mesa-vulkan-drivers)"
    if problem and sys.platform == "win32" and "cpu" in backends:
        log.warning("devices: %s on this machine (no GPU driver?); skipped: %s", problem, report.get("skipped"))
    elif problem:
        raise SystemExit(f"the bundle's llama.cpp: {problem}; it offers {json.dumps(found)}, skipped "
                         f"{json.dumps(report.get('skipped'))}\n{proc.stderr[-3000:]}")
    return found


def run_selftest(bundle: Path, home: Path) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.run([str(bundle / f"assistant-gui{EXE}"), "--selftest"], env=clean_env(home), cwd=home,
                          capture_output=True, text=True, timeout=600)
    report = selftest_report(proc, home)
    report["wall_s"] = time.perf_counter() - t0
    return report


def selftest_report(proc: subprocess.CompletedProcess, home: Path) -> dict:
    """The selftest's JSON report, checked: it passed, from a frozen build, its data under `home`."""
    try:
        report = json.loads(proc.stdout[proc.stdout.index("{"):])
    except ValueError:
        raise SystemExit(f"selftest printed no JSON report (exit {proc.returncode}):\n"
                         f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    report["exit_code"] = proc.returncode
    if proc.returncode != 0 or not report.get("ok"):
        raise SystemExit(f"selftest failed (exit {proc.returncode}):\n{json.dumps(report, indent=2)}\n"
                         f"{proc.stderr[-4000:]}")
    if not report.get("frozen"):
        raise SystemExit("the selftest did not run from the frozen bundle")
    data = Path(report["data_dir"])
    if home.resolve() not in data.resolve().parents:
        raise SystemExit(f"data dir {data} is not under the clean HOME {home}")
    return report


CHAT_ARGS = ("chat", "--json", "--max-tokens", "8", "--temperature", "0")  # one short turn, "Hello!" on stdin


def check_cli(bundle: Path, home: Path) -> None:
    """The terminal chat in the same clean environment: one turn on the bundled demo model."""
    proc = subprocess.run([str(bundle / f"assistant{EXE}"), *CHAT_ARGS], input="Hello!\n", env=clean_env(home),
                          cwd=home, capture_output=True, text=True, timeout=300)
    check_chat(proc)


def check_chat(proc: subprocess.CompletedProcess) -> None:
    """`assistant chat --json` ended with a "done" event."""
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not any(e.get("event") == "done" for e in events):
        raise SystemExit(f"`assistant chat` failed in the bundle (exit {proc.returncode}):\n{proc.stderr[-3000:]}")


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bundle", type=Path, default=ROOT / "dist" / "offline-assistant")
    p.add_argument("--runs", type=int, default=1, help="selftests, each with a fresh HOME (cold start)")
    p.add_argument("--backend", choices=["vulkan", "cuda", "metal", "cpu"], default=default_backend(),
                   help="the GPU backend the bundle must carry (that of packaging/llama/build_wheel.py)")
    args = p.parse_args()
    bundle = args.bundle.resolve()
    if not (bundle / f"assistant-gui{EXE}").is_file():
        raise SystemExit(f"no bundle at {bundle}: run `make dist` first")
    before = tree_state(bundle)
    carried = check_contents(bundle, args.backend)
    linkage = check_linkage(bundle) if LINUX else {}
    log.info("bundle: %s", json.dumps({**carried, **linkage}))
    reports = []
    with tempfile.TemporaryDirectory(prefix="dist-test-") as tmp:
        devices_home = Path(tmp) / "devices"
        devices_home.mkdir()
        log.info("devices: %s", json.dumps(check_devices(bundle, devices_home, args.backend)))
        for i in range(args.runs):
            home = Path(tmp) / f"home{i}"
            home.mkdir()
            reports.append(run_selftest(bundle, home))
            log.info("selftest %d: ok, window %d ms, first token %d ms after launch", i + 1,
                     reports[-1]["launch_to_window_ms"], reports[-1]["launch_to_first_token_ms"])
        check_cli(bundle, Path(tmp) / "home0")
    after = tree_state(bundle)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    if changed:
        raise SystemExit(f"the app wrote inside its install folder: {changed[:10]}")

    def median(key: str) -> float:
        return statistics.median(r[key] for r in reports)

    models = size_mb(bundle / "_internal" / "models", "*.gguf")
    log.info("\n| bundle | total MB | without demo models MB | launch → window ms | launch → first token ms | runs |")
    log.info("|---|---:|---:|---:|---:|---:|")
    log.info("| %s | %.0f | %.0f | %.0f | %.0f | %d |", bundle.name, size_mb(bundle), size_mb(bundle) - models,
             median("launch_to_window_ms"), median("launch_to_first_token_ms"), len(reports))
    log.info("dist-test: ok (backend modules, %sdevices, selftest%s, terminal chat, install folder untouched)",
             "library links, " if LINUX else "", f" ×{len(reports)}" if len(reports) > 1 else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
