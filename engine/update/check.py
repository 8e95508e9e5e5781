"""Is a newer version out? One small signed file read, never anything downloaded or run.

A build that can check carries its channel, `update_channel.json` in the install folder: the manifest's
URL and the public keys its releases are signed with, written by `make dist` from the signing key
(packaging/update_manifest.py). A build without it (a checkout, a build made without a key) cannot
check, and says so in Settings.

The check fails quietly: whatever goes wrong (no network, a slow or hostile server, a bad signature, a
manifest for an older version or another system) is one line in the log and no offer. It reads through
the system's proxy: httpx takes it from urllib's getproxies() (the environment; the registry on
Windows; System Configuration on macOS).
"""

from __future__ import annotations

import json
import logging
import platform
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx
from packaging.version import InvalidVersion, Version

from engine.config.paths import install_dir
from engine.update.manifest import MAX_BYTES, Installer, Manifest, ManifestError, verify

log = logging.getLogger(__name__)
CHANNEL_FILE = "update_channel.json"
TIMEOUT_S = 10.0  # the whole read: a server that drips bytes is given up on, not waited for
_LOOPBACK = {"127.0.0.1", "::1", "localhost"}


@dataclass(frozen=True)
class Channel:
    url: str
    public_keys: list[str]


@dataclass(frozen=True)
class Offer:
    """A newer release for this system: what the window shows. Opening `url` is the user's choice."""
    version: str
    notes: str
    url: str
    sha256: str
    size: int


@dataclass(frozen=True)
class Outcome:
    offer: Offer | None
    reason: str  # why there is no offer, in the log's words ("" with one)
    seen: str = ""  # the version a verified manifest named: the next check's `newest_seen`


def channel(folder: Path | None = None) -> Channel | None:
    """This build's update channel, or None when it has none (or a damaged one: logged)."""
    path = (folder or install_dir()) / CHANNEL_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        keys = [str(k) for k in data["public_keys"]]
        url = str(data["url"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("update channel %s unreadable: %s", path, exc)
        return None
    return Channel(url, keys) if keys and _allowed_url(url) else None


def system_key(system: str | None = None, machine: str | None = None) -> str:
    """This machine's installer name in a manifest: linux-x86_64, windows-x86_64, macos-arm64, ..."""
    system = (system or platform.system()).lower()
    machine = (machine or platform.machine()).lower()
    system = {"darwin": "macos"}.get(system, system)
    machine = {"amd64": "x86_64", "x64": "x86_64", "aarch64": "arm64" if system == "macos" else "aarch64"}.get(
        machine, machine)
    return f"{system}-{machine}"


def check(channel: Channel, current: str, *, system: str | None = None, language: str = "en",
          newest_seen: str = "", timeout_s: float = TIMEOUT_S) -> Outcome:
    """Read the channel's manifest and say whether it offers this system something newer than
    `current`. `newest_seen` is the newest version a verified manifest named before: an older
    manifest after it is a replay, not news. Never raises; a failure is logged and gives no offer."""
    try:
        manifest = verify(_read(channel.url, current, timeout_s), channel.public_keys)
    except (ManifestError, httpx.HTTPError, OSError, ValueError) as exc:
        return _none(f"update check failed: {type(exc).__name__}: {exc}", logging.WARNING)
    seen = _version(newest_seen)
    outcome = _offer(manifest, Version(current), system or system_key(), language, seen)
    newest = max(manifest.version, seen) if seen else manifest.version
    return Outcome(outcome.offer, outcome.reason, str(newest))


def _version(text: str) -> Version | None:
    """A remembered version; a hand-edited one that is not a version counts as none (logged)."""
    if not text:
        return None
    try:
        return Version(text)
    except InvalidVersion:
        log.warning("updates.newest_seen = %r is not a version: ignored", text)
        return None


def _offer(manifest: Manifest, current: Version, system: str, language: str, newest_seen: Version | None) -> Outcome:
    if newest_seen and manifest.version < newest_seen:
        return _none(f"update manifest names {manifest.version}, older than {newest_seen} seen before")
    if manifest.version <= current:
        return _none(f"no update: the newest release is {manifest.version}, this is {current}")
    installer: Installer | None = manifest.installers.get(system)
    if installer is None:
        return _none(f"release {manifest.version} has no installer for {system}")
    return Outcome(Offer(str(manifest.version), manifest.notes_for(language), installer.url, installer.sha256,
                         installer.size), "")


def _read(url: str, current: str, timeout_s: float) -> bytes:
    if not _allowed_url(url):
        raise ValueError(f"{url}: an update manifest is read over https (or from this machine)")
    deadline = time.monotonic() + timeout_s
    body = bytearray()
    headers = {"User-Agent": f"offline-assistant/{current}"}  # nothing else about the user is sent
    with httpx.Client(timeout=httpx.Timeout(timeout_s), follow_redirects=True, max_redirects=5) as client:
        with client.stream("GET", url, headers=headers) as response:
            response.raise_for_status()
            if not _allowed_url(str(response.url)):
                raise ValueError(f"redirected to {response.url}")
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > MAX_BYTES:
                    raise ValueError(f"more than {MAX_BYTES} bytes: not a manifest")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no whole manifest in {timeout_s:g} s")
    return bytes(body)


def _allowed_url(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme == "https" or (parts.scheme == "http" and parts.hostname in _LOOPBACK)


def _none(reason: str, level: int = logging.INFO) -> Outcome:
    log.log(level, "%s", reason)
    return Outcome(None, reason)
