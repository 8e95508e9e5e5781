"""The update check's two build-time files (engine/update): the channel a build carries, and the signed
manifest a release publishes.

    python packaging/update_manifest.py key
        a new signing key: keep the private half secret (the release workflow's UPDATE_SIGNING_KEY), put the
        public half in UPDATE_PUBLIC_KEY
    python packaging/update_manifest.py channel
        writes build/update_channel.json, which packaging/assistant.spec bundles: UPDATE_MANIFEST_URL and the
        public key (UPDATE_PUBLIC_KEY, else derived from UPDATE_SIGNING_KEY); without them it removes that
        file (the build cannot check, and says so). Every build script runs it before PyInstaller.
    python packaging/update_manifest.py sign --version 0.2.0 --notes-file NOTES.md \\
            --installer linux-x86_64=dist/offline-assistant_0.2.0_amd64.deb@https://.../0.2.0_amd64.deb \\
            --out dist/update.json
        the manifest, each installer's SHA-256 and size read from its file, signed with UPDATE_SIGNING_KEY

Keys are base64 of the 32 raw Ed25519 bytes. `make dist` runs `channel` and, with a key, `sign`.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.models.fetch import sha256_file  # noqa: E402 - after the path
from engine.update.check import CHANNEL_FILE  # noqa: E402
from engine.update.manifest import FORMAT, new_private_key, public_key_of, sign  # noqa: E402


BUILT_CHANNEL = ROOT / "build" / CHANNEL_FILE


def write_channel(env: dict[str, str], path: Path = BUILT_CHANNEL) -> Path | None:
    """The channel file for the next PyInstaller run, or none (an old one removed) without URL and key."""
    url = env.get("UPDATE_MANIFEST_URL", "")
    public = env.get("UPDATE_PUBLIC_KEY") or (public_key_of(env["UPDATE_SIGNING_KEY"])
                                              if env.get("UPDATE_SIGNING_KEY") else "")
    path.unlink(missing_ok=True)
    if not (url and public):
        print("update channel: none (UPDATE_MANIFEST_URL and a key not set): this build will not check")
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"url": url, "public_keys": [public]}, indent=1) + "\n", encoding="utf-8")
    print(f"update channel: {path} ({url})")
    return path


def manifest(version: str, notes: dict[str, str], installers: list[str], published: str) -> dict:
    items = {}
    for spec in installers:
        system, _, rest = spec.partition("=")
        file, _, url = rest.partition("@")
        if not (system and file and url):
            raise SystemExit(f"--installer {spec!r}: want SYSTEM=FILE@URL")
        data = Path(file)
        items[system] = {"url": url, "sha256": sha256_file(data), "size": data.stat().st_size}
    return {"format": FORMAT, "version": version, "published": published, "notes": notes, "installers": items}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("key", help="print a new key pair")
    ch = sub.add_parser("channel", help="write build/update_channel.json for the next PyInstaller run")
    ch.add_argument("--out", type=Path, default=BUILT_CHANNEL)
    sg = sub.add_parser("sign", help="write the signed manifest")
    sg.add_argument("--version", required=True)
    sg.add_argument("--notes-file", type=Path, help="release notes (Markdown), English")
    sg.add_argument("--notes-file-zh", type=Path, help="release notes (Markdown), Chinese")
    sg.add_argument("--installer", action="append", default=[], metavar="SYSTEM=FILE@URL")
    sg.add_argument("--published", default=datetime.date.today().isoformat())
    sg.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    if args.command == "key":
        private = new_private_key()
        print(json.dumps({"UPDATE_SIGNING_KEY": private, "UPDATE_PUBLIC_KEY": public_key_of(private)}, indent=1))
        return 0
    if args.command == "channel":
        write_channel(dict(os.environ), args.out)
        return 0
    key = os.environ.get("UPDATE_SIGNING_KEY")
    if not key:
        print("update_manifest.py sign: UPDATE_SIGNING_KEY is not set", file=sys.stderr)
        return 2
    notes = {lang: f.read_text(encoding="utf-8") for lang, f in (("en", args.notes_file),
                                                                  ("zh_CN", args.notes_file_zh)) if f}
    args.out.write_bytes(sign(manifest(args.version, notes, args.installer, args.published), key))
    print(f"update manifest: {args.out} (version {args.version}, {len(args.installer)} installers)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
