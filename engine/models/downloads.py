"""Download models from a hub (Hugging Face, hf-mirror.com, ModelScope: engine/models/hubs.py), resumably.

Hugging Face kinds: `huggingface_hub` names the file and reads its metadata (size, and the sha256 the hub
reports as the LFS ETag). ModelScope: its file listing gives size and sha256. The bytes stream through
httpx into `<file>.part` so the app can show progress, cancel, and resume with a Range request later.
The file gets its final name only after its size, sha256 (the catalog's, else the hub's) and GGUF
header check out. What goes wrong is said in plain words with the way forward: a lost connection or a
full disk keeps the partial file to resume; bytes that fail a check are deleted.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import re
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import httpx
from huggingface_hub import get_hf_file_metadata, hf_hub_url

from engine.config.paths import models_dir
from engine.models.catalog import ModelEntry
from engine.models.gguf_info import GGUF_MAGIC, GGUFError, read_gguf
from engine.models.hubs import Hub, HubError, file_url, get_hub, repo_files, safe_repo_path

log = logging.getLogger(__name__)
CHUNK = 1 << 20
SPACE_MARGIN = 64 << 20  # left free besides the file: a disk filled to the last byte breaks other programs
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class DownloadError(RuntimeError):
    """The download failed; the message says why and what to do."""


class DownloadCancelled(DownloadError):
    """The user cancelled; the partial file is kept to resume."""


class _Restart(Exception):
    """The partial file cannot be continued (the server refused its range): start from zero."""


def endpoint() -> str:
    """The Hugging Face endpoint (`ASSISTANT_HUB_HUGGINGFACE`, `HF_ENDPOINT` or huggingface.co)."""
    return get_hub("huggingface").endpoint


def part_path(dest: Path) -> Path:
    return dest.with_name(dest.name + ".part")


def size_text(n: float) -> str:
    """Bytes in words for messages: "1.2 GB", "350 MB"."""
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB" if n >= 1e6 else f"{n / 1e6:.2f} MB"


@dataclass(frozen=True)
class _Source:
    url: str
    size: int  # 0 = unknown
    sha256: str  # "" = the hub does not say


def repo_of(entry: ModelEntry, hub: Hub) -> str:
    """The entry's repository on `hub`: its per-hub sources (an HF repo serves its mirrors too), else
    its source_repo while the catalog has no per-hub sources."""
    repo_for = getattr(entry, "repo_for", None)
    sources = getattr(entry, "sources", {}) or {}
    if callable(repo_for):
        found = repo_for(hub.id) or (repo_for("huggingface") if hub.kind == "hf" else "")
        if found:
            return found
    found = sources.get(hub.id) or (sources.get("huggingface", "") if hub.kind == "hf" else "")
    return found or ("" if sources else entry.source_repo)


def _status_reason(status: int, hub: Hub, repo: str, file: str) -> str:
    if status in (401, 403):
        return (f"{repo} on {hub.name} is gated or private (HTTP {status}): accept its licence on the hub's "
                "web page and sign in there, or choose another model")
    if status == 404:
        return f"{hub.name} has no file {file} in {repo} (HTTP 404): check the name, or try another hub"
    if status == 429:
        return f"{hub.name} is limiting requests (HTTP 429): wait a few minutes and try again"
    return f"{hub.name} answered HTTP {status}: try again later, or another hub"


def _resolve(entry: ModelEntry, repo: str, hub: Hub, timeout: float) -> _Source:
    if hub.kind == "hf":
        url = hf_hub_url(repo, entry.file, endpoint=hub.endpoint)
        try:
            meta = get_hf_file_metadata(url, timeout=timeout, endpoint=hub.endpoint)
        except Exception as exc:  # noqa: BLE001 - huggingface_hub raises many kinds; all mean "cannot get it"
            log.info("metadata of %s failed: %r", url, exc)
            status = getattr(getattr(exc, "response", None), "status_code", None)
            why = _status_reason(status, hub, repo, entry.file) if status else \
                f"no answer from {hub.endpoint}; check the connection or choose another hub"
            raise DownloadError(f"cannot reach {repo}/{entry.file} on {hub.name}: {why}") from exc
        sha = meta.etag if meta.etag and _SHA256.match(meta.etag) else ""
        return _Source(meta.location or url, meta.size or 0, sha)
    try:
        listed = {f.name: f for f in repo_files(hub.id, repo, timeout, projectors=True)}
    except HubError as exc:
        raise DownloadError(f"cannot reach {repo}/{entry.file}: {exc}") from exc
    f = listed.get(entry.file)
    if f is None:
        raise DownloadError(f"cannot reach {entry.file}: " + _status_reason(404, hub, repo, entry.file))
    return _Source(file_url(hub.id, repo, entry.file), f.size_bytes, f.sha256)


def _check_space(folder: Path, needed: int) -> None:
    """Raise before writing anything when the disk cannot hold the rest of the file."""
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if needed > 0 and needed + SPACE_MARGIN > free:
        raise DownloadError(f"not enough free disk space: needs {size_text(needed + SPACE_MARGIN)}, "
                            f"{size_text(free)} free in {folder}; free some space or choose another models folder")


def download(entry: ModelEntry, progress: Callable[[int, int], None] | None = None,
             cancel: threading.Event | None = None, dest: Path | None = None, timeout: float = 30.0,
             hub: str = "huggingface") -> Path:
    """Fetch `entry`'s file from `hub` into the models folder (resuming a `.part` file); its path.

    Args:
        progress: called with (bytes so far, total bytes) at most ~10 times a second.
        cancel: set it to stop; the `.part` file stays for the next attempt.
        timeout: seconds without an answer (connect or between bytes) before the connection counts as lost.
        hub: an engine.models.hubs id: "huggingface", "hf-mirror" or "modelscope".

    Raises:
        DownloadCancelled, DownloadError: with a message for the user.
    """
    try:
        h = get_hub(hub)
    except HubError as exc:
        raise DownloadError(str(exc)) from exc
    repo = repo_of(entry, h)
    if not repo:
        raise DownloadError(f"model '{entry.id}' has no repository on {h.name} in the catalog; choose another hub")
    if dest is None:
        dest = entry.download_path()
        # entry.file may come from a hub's listing (hubs.entry_for): never a path out of models/.
        if not safe_repo_path(entry.file) or not dest.resolve().is_relative_to(models_dir().resolve()):
            raise DownloadError(f"{entry.file!r} is not a file name inside the models folder; not downloaded")
    src = _resolve(entry, repo, h, timeout)
    total = src.size or entry.size_bytes
    expected = (entry.sha256 or src.sha256).lower()
    part = part_path(dest)
    have = part.stat().st_size if part.exists() else 0
    if total and have > total:  # not the file the hub has now
        part.unlink()
        have = 0
    _check_space(dest.parent, total - have if total else 0)
    dest.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256() if expected else None
    try:
        have = _stream(src.url, part, have, total, h, repo, entry, digest, progress, cancel, timeout)
    except _Restart:
        log.info("%s refused to resume %s; starting over", h.name, entry.file)
        part.unlink(missing_ok=True)
        digest = hashlib.sha256() if expected else None
        have = _stream(src.url, part, 0, total, h, repo, entry, digest, progress, cancel, timeout)
    if total and have > total:
        part.unlink()
        raise DownloadError(f"{h.name} sent more than the {size_text(total)} of {entry.file}; the download was "
                            "deleted, try again")
    if total and have != total:  # the server closed early without an error
        raise DownloadError(_lost(h, have))
    if digest is not None and digest.hexdigest() != expected:
        part.unlink()
        raise DownloadError(f"{entry.file} failed its sha256 check (got {digest.hexdigest()[:12]}…, expected "
                            f"{expected[:12]}…); the download was deleted")
    try:
        read_gguf(part)
    except GGUFError as exc:
        part.unlink()
        raise DownloadError(f"{entry.file} is not a usable GGUF file: {exc}; the download was deleted") from exc
    os.replace(part, dest)
    log.info("downloaded %s from %s (%d bytes)%s", dest.name, h.id, have, " sha256 ok" if expected else "")
    return dest


def _lost(hub: Hub, have: int) -> str:
    return (f"the connection to {hub.name} was lost after {size_text(have)}; the partial file is kept, "
            "try again to resume")


def _stream(url: str, part: Path, have: int, total: int, hub: Hub, repo: str, entry: ModelEntry,
            digest, progress, cancel, timeout: float) -> int:
    """Append the rest of the file to `part`, hashing as it goes; bytes now in `part`."""
    if digest is not None and have:  # resuming: the kept bytes count towards the hash too
        with open(part, "rb") as f:
            for block in iter(lambda: f.read(CHUNK), b""):
                digest.update(block)
    headers = {"Accept-Encoding": "identity"}
    if have:
        headers["Range"] = f"bytes={have}-"
    last_report = 0.0
    try:
        with httpx.stream("GET", url, headers=headers, timeout=timeout, follow_redirects=True) as response:
            if response.status_code == 416:  # the range starts at or past the end
                if total and have == total:
                    return have
                raise _Restart()
            if response.status_code >= 400:
                raise DownloadError(_status_reason(response.status_code, hub, repo, entry.file))
            if have and response.status_code != 206:  # the server ignored Range: the body is the whole file
                raise _Restart()
            check_magic = not have
            with open(part, "ab" if have else "wb") as f:
                for chunk in response.iter_bytes(CHUNK):
                    if cancel is not None and cancel.is_set():
                        raise DownloadCancelled(f"download of {entry.id} cancelled ({size_text(have)} kept to resume)")
                    if check_magic and len(chunk) >= 4:
                        check_magic = False
                        if not chunk.startswith(GGUF_MAGIC):
                            raise _not_gguf(part, f, chunk, response, hub)
                    if total and have + len(chunk) > total:  # an endless or wrong body must not fill the disk
                        f.close()
                        part.unlink(missing_ok=True)
                        raise DownloadError(f"{hub.name} sent more than the {size_text(total)} of {entry.file} it "
                                            "announced; the download was deleted, try again or choose another hub")
                    f.write(chunk)
                    if digest is not None:
                        digest.update(chunk)
                    have += len(chunk)
                    now = time.monotonic()
                    if progress and now - last_report >= 0.1:
                        progress(have, total or have)
                        last_report = now
    except httpx.ConnectError as exc:
        log.info("connecting to %s failed: %r", url, exc)
        kept = f"; the partial file ({size_text(have)}) is kept to resume" if have else ""
        raise DownloadError(f"cannot reach {hub.name} at {hub.endpoint}: check the connection or choose "
                            f"another hub{kept}") from exc
    except (httpx.TransportError, httpx.StreamError) as exc:  # timeouts, resets, bodies cut short
        log.info("download of %s interrupted at %d bytes: %r", url, have, exc)
        raise DownloadError(_lost(hub, have)) from exc
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise DownloadError(f"the disk is full after {size_text(have)} of {entry.file}; the partial file is "
                                f"kept in {part.parent}: free some space and try again to resume") from exc
        raise DownloadError(f"cannot write {part}: {exc.strerror or exc}") from exc
    if progress:
        progress(have, total or have)
    return have


def _not_gguf(part: Path, f, chunk: bytes, response: httpx.Response, hub: Hub) -> DownloadError:
    """The body is not a model (a captive portal's or a login page is the usual case): delete it."""
    f.close()
    part.unlink(missing_ok=True)
    kind = response.headers.get("content-type", "").split(";")[0]
    page = "a web page" if "html" in kind or chunk.lstrip()[:1] == b"<" else f"something else ({kind or 'unknown'})"
    return DownloadError(f"{hub.name} sent {page} instead of the model file: a Wi-Fi login page or a proxy may be "
                         "in the way; open a browser to sign in, or choose another hub. Nothing was kept")
