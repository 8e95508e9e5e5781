"""The release's notes (the release workflow's publish job): what to download, the checksums, and, for a
build that is not signed, the steps Windows SmartScreen and macOS Gatekeeper will ask of the user.

    python packaging/release_notes.py --tag v0.2.0 --out dist/NOTES.md
        SIGNED_WINDOWS / SIGNED_MACOS = "true" when the workflow signed those installers
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

DOWNLOADS = """\
| system | download |
|---|---|
| Windows 10/11 (x64) | `offline-assistant-{version}-windows-x64-setup.exe`: a per-user install, no admin rights |
| macOS 14+ (Apple silicon) | `offline-assistant-{version}-macos-arm64.dmg`: drag the app onto Applications |
| Debian 12+, Ubuntu 22.04+ | `offline-assistant_{version}_amd64.deb`: `sudo apt install ./<that file>` |
| other Linux (x86-64) | `offline-assistant-{version}-linux-x86_64.tar.gz`: unpack, run `install.sh` |

Each file's SHA-256 is in `SHA256SUMS-<system>.txt`.
"""

UNSIGNED_WINDOWS = """\
**Windows: this installer is not signed.** SmartScreen will say "Windows protected your PC". Check the
file's SHA-256 against `SHA256SUMS-windows.txt`, then choose **More info → Run anyway**. Some antivirus
programs flag unsigned installers made with PyInstaller; that is a false positive we cannot fix without
a certificate.
"""

UNSIGNED_MACOS = """\
**macOS: this app is not signed or notarised.** Gatekeeper will say it "cannot be opened because
Apple cannot check it". After dragging it onto Applications, check the dmg's SHA-256 against
`SHA256SUMS-macos.txt`, then open **System Settings → Privacy & Security** and choose **Open Anyway**
(or Control-click the app and choose **Open**). Run it from Applications, not from the dmg.
"""


def notes(tag: str, signed_windows: bool, signed_macos: bool) -> str:
    version = tag.removeprefix("v")
    parts = [f"# Offline Assistant {version}\n", DOWNLOADS.format(version=version)]
    parts += [UNSIGNED_WINDOWS] if not signed_windows else []
    parts += [UNSIGNED_MACOS] if not signed_macos else []
    parts.append("The app checks for new versions only if you allow it (it asks once; Settings → Updates). It "
                 "never downloads or installs anything by itself.\n")
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tag", required=True)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    signed = {k: os.environ.get(k, "").lower() == "true" for k in ("SIGNED_WINDOWS", "SIGNED_MACOS")}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(notes(args.tag, signed["SIGNED_WINDOWS"], signed["SIGNED_MACOS"]), encoding="utf-8")
    print(f"release notes: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
