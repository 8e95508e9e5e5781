"""Prove the built bundle works where no developer tools are: `make dist-test`.

Runs `dist/offline-assistant/assistant-gui --selftest` (and the terminal `assistant` once) in a
clean environment: `env -i`, PATH without any venv, HOME an empty temp dir, no PYTHONPATH. Checks
the JSON report, that the data landed under that HOME, and that nothing was written inside the
install folder. With --runs N (N fresh HOMEs) it prints the cold-start table for packaging/README.md.

    .venv/bin/python packaging/dist_test.py [--runs 5] [--bundle dist/offline-assistant]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

log = logging.getLogger("dist_test")
ROOT = Path(__file__).resolve().parent.parent


EXE = ".exe" if sys.platform == "win32" else ""


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


def run_selftest(bundle: Path, home: Path) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.run([str(bundle / f"assistant-gui{EXE}"), "--selftest"], env=clean_env(home), cwd=home,
                          capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - t0
    try:
        report = json.loads(proc.stdout[proc.stdout.index("{"):])
    except ValueError:
        raise SystemExit(f"selftest printed no JSON report (exit {proc.returncode}):\n"
                         f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    report["exit_code"], report["wall_s"] = proc.returncode, wall
    if proc.returncode != 0 or not report.get("ok"):
        raise SystemExit(f"selftest failed (exit {proc.returncode}):\n{json.dumps(report, indent=2)}\n"
                         f"{proc.stderr[-4000:]}")
    if not report.get("frozen"):
        raise SystemExit("the selftest did not run from the frozen bundle")
    data = Path(report["data_dir"])
    if home.resolve() not in data.resolve().parents:
        raise SystemExit(f"data dir {data} is not under the clean HOME {home}")
    return report


def check_cli(bundle: Path, home: Path) -> None:
    """The terminal chat in the same clean environment: one turn on the bundled demo model."""
    proc = subprocess.run([str(bundle / f"assistant{EXE}"), "chat", "--json", "--max-tokens", "8", "--temperature", "0"],
                          input="Hello!\n", env=clean_env(home), cwd=home, capture_output=True, text=True,
                          timeout=300)
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not any(e.get("event") == "done" for e in events):
        raise SystemExit(f"`assistant chat` failed in the bundle (exit {proc.returncode}):\n{proc.stderr[-3000:]}")


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bundle", type=Path, default=ROOT / "dist" / "offline-assistant")
    p.add_argument("--runs", type=int, default=1, help="selftests, each with a fresh HOME (cold start)")
    args = p.parse_args()
    bundle = args.bundle.resolve()
    if not (bundle / f"assistant-gui{EXE}").is_file():
        raise SystemExit(f"no bundle at {bundle}: run `make dist` first")
    before = tree_state(bundle)
    reports = []
    with tempfile.TemporaryDirectory(prefix="dist-test-") as tmp:
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
    log.info("dist-test: ok (selftest%s, terminal chat, install folder untouched)",
             f" ×{len(reports)}" if len(reports) > 1 else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
