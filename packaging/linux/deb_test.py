"""The .deb as a user meets it (`make dist-test`, as root): installed with apt, run by a plain user, removed.

1. `apt-get install ./offline-assistant_<version>_<arch>.deb`: the files land where the package says
   (/opt/offline-assistant, the two commands in /usr/bin, the menu entry, the icon), and every library
   the bundle loads from the system belongs to a package its Depends names;
2. as an unprivileged user made for the test, with `env -i` and an empty HOME: the installed
   `assistant-gui --selftest` (packaging/dist_test.py's checks of its report) and one `assistant chat` turn;
3. `apt-get remove`: no file the package installed is left, /opt/offline-assistant is gone, and the
   user's data (their chats) is still there. The user and their home are deleted at the end.

    .venv/bin/python packaging/linux/deb_test.py [--deb dist/offline-assistant_0.1.0_amd64.deb]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "packaging"))
from dist_test import CHAT_ARGS, check_chat, ldd, llama_lib, selftest_report  # noqa: E402 - beside it

log = logging.getLogger("deb_test")
PACKAGE = "offline-assistant"
OPT = Path("/opt") / PACKAGE
USER = "oa-deb-test"


def sh(*cmd: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if check and proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}\n"
                         f"{proc.stderr[-3000:]}")
    return proc


def as_user(home: Path, *cmd: str, stdin: str | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    env = ["HOME=" + str(home), "PATH=/usr/bin:/bin", "LANG=C.UTF-8", "QT_QPA_PLATFORM=offscreen"]
    return subprocess.run(["runuser", "-u", USER, "--", "env", "-i", *env, *cmd], input=stdin, cwd=home,
                          capture_output=True, text=True, timeout=timeout)


def depends() -> set[str]:
    """The package names the installed package's Depends accepts (every alternative)."""
    field = sh("dpkg-query", "-W", "-f=${Depends}", PACKAGE).stdout
    return {re.sub(r"\s*\(.*\)", "", alt).strip() for part in field.split(",") for alt in part.split("|")}


def owner(path: str) -> str:
    """The package a system file belongs to (dpkg -S, through /usr merged or not)."""
    for candidate in dict.fromkeys([path, os.path.realpath(path), re.sub(r"^/usr(/lib)", r"\1", path)]):
        proc = sh("dpkg-query", "-S", candidate, check=False)
        if proc.returncode == 0:
            return proc.stdout.split(":")[0].strip()
    return ""


def check_install() -> dict:
    for path in (Path("/usr/bin/assistant-gui"), Path("/usr/bin/assistant")):
        if path.resolve().parent != OPT:
            raise SystemExit(f"{path} does not lead into {OPT}")
    for path in (Path("/usr/share/applications/offline-assistant.desktop"),
                 Path("/usr/share/icons/hicolor/256x256/apps/offline-assistant.png")):
        if not path.is_file():
            raise SystemExit(f"{path} not installed")
    if shutil.which("desktop-file-validate"):
        sh("desktop-file-validate", "/usr/share/applications/offline-assistant.desktop")
    internal = (OPT / "_internal").resolve()
    targets = sorted(internal.glob("PySide6/Qt/plugins/platforms/libqxcb.so"))
    targets += sorted(p for p in llama_lib(OPT).glob("lib*.so*") if not p.is_symlink())
    named, missing, used = depends(), {}, set()
    for target in targets:
        for name, where in ldd(target, internal).items():
            if where is None or name.startswith("linux-vdso") or internal in Path(where).resolve().parents:
                continue
            package = owner(where)
            used.add(package)
            if package not in named:
                missing[name] = package or f"no package owns {where}"
    if missing:
        raise SystemExit(f"the bundle loads these from the system but Depends does not name their packages "
                         f"(packaging/linux/build_deb.sh): {missing}")
    return {"system_packages_used": sorted(used)}


def run_as_user(home: Path) -> dict:
    report = selftest_report(as_user(home, "assistant-gui", "--selftest"), home)  # dist_test's checks
    check_chat(as_user(home, "assistant", *CHAT_ARGS, stdin="Hello!\n"))
    return {"data_dir": report["data_dir"], "launch_to_first_token_ms": report.get("launch_to_first_token_ms")}


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--deb", type=Path, help="default: the newest dist/offline-assistant_*.deb")
    args = p.parse_args()
    debs = [args.deb] if args.deb else sorted((ROOT / "dist").glob(f"{PACKAGE}_*.deb"), key=os.path.getmtime)
    if not debs or not debs[-1].is_file():
        raise SystemExit("no .deb in dist/: run `make dist` on a Debian or Ubuntu machine")
    if os.geteuid() != 0:
        raise SystemExit("deb_test.py installs a package and adds a user: run it as root (CI does)")
    deb = debs[-1].resolve()
    if sh("dpkg-query", "-W", PACKAGE, check=False).returncode == 0:
        raise SystemExit(f"{PACKAGE} is already installed here: remove it first (apt-get remove {PACKAGE})")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    with tempfile.TemporaryDirectory(prefix="deb-test-") as tmp:
        home = Path(tmp) / "home"
        sh("useradd", "--home-dir", str(home), "--create-home", "--shell", "/bin/sh", USER)
        os.chmod(tmp, 0o755)  # the user reaches their home through it
        installed = False
        try:
            sh("apt-get", "install", "-y", "-qq", "--no-install-recommends", str(deb), env=env, timeout=900)
            installed = True
            files = [f for f in sh("dpkg-query", "-L", PACKAGE).stdout.splitlines()
                     if f.strip() and not Path(f).is_dir()]
            log.info("installed %s: %d files; %s", deb.name, len(files), json.dumps(check_install()))
            ran = run_as_user(home)
            log.info("as %s: selftest and a terminal chat turn ok: %s", USER, json.dumps(ran))
            sh("apt-get", "remove", "-y", "-qq", PACKAGE, env=env, timeout=600)
            installed = False
            left = [f for f in files if os.path.lexists(f)]
            if left or OPT.exists():
                raise SystemExit(f"apt-get remove left {len(left)} of the package's files: {left[:10]}"
                                 + (f" and {OPT}" if OPT.exists() else ""))
            if not Path(ran["data_dir"]).is_dir():
                raise SystemExit(f"removing the package took the user's data ({ran['data_dir']}) with it")
            log.info("removed: none of its %d files left, the user's data kept", len(files))
        finally:
            if installed:
                sh("apt-get", "remove", "-y", "-qq", PACKAGE, env=env, check=False)
            sh("userdel", "--remove", USER, check=False)
    log.info("deb-test: ok (apt install, menu entry and icon, Depends cover the system libraries, selftest and a "
             "chat turn as a plain user, apt remove leaves only the user's data)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
