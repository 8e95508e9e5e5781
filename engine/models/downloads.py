"""Download catalog models from the Hugging Face hub (or a mirror: `HF_ENDPOINT`), resumably.

`huggingface_hub` names the file and reads its metadata (size, and the sha256 the hub reports as
the LFS ETag); the bytes stream through httpx into `<file>.part` so the app can show progress,
cancel, and resume with a Range request later. The file gets its final name only after its size,
sha256 (the catalog's, else the hub's) and GGUF header check out.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
import time
from pathlib import Path
from typing import Callable

import httpx
from huggingface_hub import get_hf_file_metadata, hf_hub_url

from engine.models.catalog import ModelEntry
from engine.models.gguf_info import GGUFError, read_gguf

log = logging.getLogger(__name__)
CHUNK = 1 << 20
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class DownloadError(RuntimeError):
    """The download failed; the message says why and what to do."""


class DownloadCancelled(DownloadError):
    """The user cancelled; the partial file is kept to resume."""


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def part_path(dest: Path) -> Path:
    return dest.with_name(dest.name + ".part")


def download(entry: ModelEntry, progress: Callable[[int, int], None] | None = None,
             cancel: threading.Event | None = None, dest: Path | None = None, timeout: float = 30.0) -> Path:
    """Fetch `entry`'s file into the models folder (resuming a `.part` file); its path.

    Args:
        progress: called with (bytes so far, total bytes) at most ~10 times a second.
        cancel: set it to stop; the `.part` file stays for the next attempt.

    Raises:
        DownloadCancelled, DownloadError: with a message for the user.
    """
    if not entry.source_repo:
        raise DownloadError(f"model '{entry.id}' has no source repository in the catalog")
    dest = dest or entry.download_path()
    base = endpoint()
    url = hf_hub_url(entry.source_repo, entry.file, endpoint=base)
    try:
        meta = get_hf_file_metadata(url, timeout=timeout, endpoint=base)
    except Exception as exc:  # noqa: BLE001 - huggingface_hub raises many kinds; all mean "cannot reach it"
        raise DownloadError(f"cannot reach {base} for {entry.source_repo}/{entry.file}: {exc}") from exc
    total = meta.size or entry.size_bytes
    expected = entry.sha256 or (meta.etag if meta.etag and _SHA256.match(meta.etag) else "")
    part = part_path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    have = part.stat().st_size if part.exists() else 0
    if total and have > total:
        part.unlink()
        have = 0
    headers = {"Accept-Encoding": "identity"}
    if have:
        headers["Range"] = f"bytes={have}-"
    last_report = 0.0
    try:
        with httpx.stream("GET", meta.location or url, headers=headers, timeout=timeout,
                          follow_redirects=True) as response:
            if response.status_code == 416:  # nothing left to fetch
                pass
            elif response.status_code >= 400:
                raise DownloadError(f"{base} answered HTTP {response.status_code} for {entry.file}")
            else:
                if have and response.status_code != 206:  # the server ignored Range: start over
                    have = 0
                with open(part, "ab" if have else "wb") as f:
                    for chunk in response.iter_bytes(CHUNK):
                        if cancel is not None and cancel.is_set():
                            raise DownloadCancelled(f"download of {entry.id} cancelled ({have} bytes kept to resume)")
                        f.write(chunk)
                        have += len(chunk)
                        now = time.monotonic()
                        if progress and now - last_report >= 0.1:
                            progress(have, total or have)
                            last_report = now
    except httpx.HTTPError as exc:
        raise DownloadError(f"download of {entry.id} interrupted ({have} bytes kept to resume): {exc}") from exc
    except OSError as exc:
        raise DownloadError(f"cannot write {part}: {exc}") from exc
    if progress:
        progress(have, total or have)
    if total and have != total:
        raise DownloadError(f"download of {entry.id} incomplete: {have} of {total} bytes (try again to resume)")
    if expected:
        digest = _sha256(part)
        if digest != expected:
            part.unlink()
            raise DownloadError(f"{entry.file} failed its sha256 check (got {digest[:12]}…, expected "
                                f"{expected[:12]}…); the download was deleted")
    try:
        read_gguf(part)
    except GGUFError as exc:
        part.unlink()
        raise DownloadError(f"{entry.file} is not a usable GGUF file: {exc}") from exc
    os.replace(part, dest)
    log.info("downloaded %s (%d bytes)%s", dest.name, have, " sha256 ok" if expected else "")
    return dest


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()
