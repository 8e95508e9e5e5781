"""The signed release manifest: what a release says about itself, and the proof that we wrote it.

The file a release publishes (`update.json`) is an envelope:

    {"payload": "<base64 of the manifest's UTF-8 JSON>", "signature": "<base64 Ed25519 signature of
     those exact bytes>", "key": "<the signing key's id>"}

The signature covers the payload's bytes, not a re-serialised dict: no canonical JSON to agree on.
The manifest inside:

    {"format": 1, "version": "0.2.0", "published": "2026-12-05",
     "notes": {"en": "...", "zh_CN": "..."},
     "installers": {"linux-x86_64": {"url": "https://...", "sha256": "<hex>", "size": 123}, ...}}

Ed25519 through `cryptography` (pyca: audited, wheels for every platform, PyInstaller knows it); keys
travel as base64 of their 32 raw bytes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from packaging.version import InvalidVersion, Version

FORMAT = 1
MAX_BYTES = 256 * 1024  # a manifest is a few KB; more is not one
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class ManifestError(ValueError):
    """The file is not a manifest we signed, or not one this app can use; the message says which."""


@dataclass(frozen=True)
class Installer:
    url: str
    sha256: str
    size: int


@dataclass(frozen=True)
class Manifest:
    version: Version
    published: str
    notes: dict[str, str] = field(default_factory=dict)
    installers: dict[str, Installer] = field(default_factory=dict)

    def notes_for(self, language: str) -> str:
        """The release notes in `language` (zh_CN, en), else English, else any."""
        return self.notes.get(language) or self.notes.get("en") or next(iter(self.notes.values()), "")


def key_id(public_key: str) -> str:
    """A short name for a public key (base64 of its raw bytes): which key signed, in the envelope."""
    return hashlib.sha256(_b64(public_key, "key")).hexdigest()[:16]


def public_key_of(private_key: str) -> str:
    raw = Ed25519PrivateKey.from_private_bytes(_b64(private_key, "private key"))
    return base64.b64encode(raw.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)).decode()


def new_private_key() -> str:
    from cryptography.hazmat.primitives.serialization import NoEncryption, PrivateFormat

    raw = Ed25519PrivateKey.generate().private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    return base64.b64encode(raw).decode()


def sign(manifest: dict, private_key: str) -> bytes:
    """The envelope for `manifest`, signed with `private_key` (base64 of its 32 raw bytes)."""
    payload = json.dumps(manifest, ensure_ascii=False, indent=1).encode()
    parse(payload)  # never sign what the app would refuse
    key = Ed25519PrivateKey.from_private_bytes(_b64(private_key, "private key"))
    return json.dumps({
        "payload": base64.b64encode(payload).decode(),
        "signature": base64.b64encode(key.sign(payload)).decode(),
        "key": key_id(public_key_of(private_key)),
    }, indent=1).encode()


def verify(envelope: bytes, public_keys: list[str]) -> Manifest:
    """The manifest inside `envelope`, if one of `public_keys` signed it; else ManifestError."""
    if len(envelope) > MAX_BYTES:
        raise ManifestError(f"the manifest is {len(envelope)} bytes, more than {MAX_BYTES}")
    try:
        outer = json.loads(envelope)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ManifestError(f"not JSON: {exc}") from None
    if not isinstance(outer, dict) or not all(isinstance(outer.get(k), str) for k in ("payload", "signature")):
        raise ManifestError("not a signed manifest (no payload and signature)")
    payload, signature = _b64(outer["payload"], "payload"), _b64(outer["signature"], "signature")
    for public in public_keys:
        try:
            Ed25519PublicKey.from_public_bytes(_b64(public, "key")).verify(signature, payload)
        except (InvalidSignature, ValueError):
            continue
        return parse(payload)
    raise ManifestError("the signature does not match this app's release key")


def parse(payload: bytes) -> Manifest:
    """A manifest's payload, checked field by field (it is trusted only once its signature is)."""
    try:
        data = json.loads(payload)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ManifestError(f"the payload is not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ManifestError(f"not a format {FORMAT} manifest")
    try:
        version = Version(str(data.get("version")))
    except InvalidVersion:
        raise ManifestError(f"bad version {data.get('version')!r}") from None
    notes = data.get("notes") or {}
    if not isinstance(notes, dict) or not all(isinstance(v, str) for v in notes.values()):
        raise ManifestError("notes must map languages to text")
    installers = {}
    for system, item in (data.get("installers") or {}).items():
        if not (isinstance(item, dict) and isinstance(item.get("url"), str)
                and item["url"].startswith("https://") and _SHA256.match(str(item.get("sha256")))
                and isinstance(item.get("size"), int) and item["size"] > 0):
            raise ManifestError(f"installer {system!r}: needs an https url, a sha256 and a size")
        installers[str(system)] = Installer(item["url"], item["sha256"], item["size"])
    return Manifest(version, str(data.get("published") or ""), dict(notes), installers)


def _b64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ManifestError(f"the {what} is not base64") from None
