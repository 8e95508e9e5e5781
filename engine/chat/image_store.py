"""Images sent in chats, kept in the data directory by the digest of their pixels.

`images/<digest>.<ext>` holds the file as the user sent it (a photo's JPEG bytes, not a larger
decoded copy), owner-only like the database. A message names its images by digest (the messages
table's `images` column), so the same picture sent in two chats is one file, and a chat's
deletion removes the files no other message names. A vision model re-reads a file only when its
KV state lacks the image (engine/inference/vision.py).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from engine.config.paths import user_dir
from engine.inference.images import Decoded, ImageError, decode_image
from engine.inference.media import Pixels

EXTENSIONS = {"JPEG": "jpg", "PNG": "png", "WEBP": "webp", "GIF": "gif", "BMP": "bmp", "TIFF": "tif", "MPO": "jpg"}
DIGEST = re.compile(r"[0-9a-f]{64}")  # an image's name: the hex sha256 of its pixels


class ImageStore:
    def __init__(self, root: Path):
        self.root = Path(root)

    def add(self, data: bytes, name: str = "the image") -> Decoded:
        """Decode `data` (ImageError says why it cannot be used) and keep the file under its
        digest; written once, atomically, owner-only."""
        decoded = decode_image(data, name)
        digest = decoded.pixels.digest
        if self.path(digest) is None:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            target = self.root / f"{digest}.{EXTENSIONS.get(decoded.format, 'img')}"
            part = target.with_name(f".{target.name}.{os.getpid()}.part")
            fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(part, target)
        return decoded

    def path(self, digest: str) -> Path | None:
        if not DIGEST.fullmatch(digest):
            raise ValueError(f"not an image digest: {digest!r}")
        found = sorted(self.root.glob(f"{digest}.*")) if self.root.is_dir() else []
        return found[0] if found else None

    def load(self, digest: str) -> Decoded:
        """The image kept under `digest`, decoded again; ImageError where it is gone or damaged."""
        path = self.path(digest)
        if path is None:
            raise ImageError(f"the image {digest[:12]} is no longer in the data folder")
        decoded = decode_image(path.read_bytes(), path.name)
        if decoded.pixels.digest != digest:
            raise ImageError(f"{path.name} changed on disk since it was sent")
        return decoded

    def pixels(self, digest: str) -> Pixels:
        return self.load(digest).pixels

    def remove(self, digests: set[str]) -> None:
        for digest in digests:
            path = self.path(digest)
            if path is not None:
                path.unlink(missing_ok=True)


def image_store() -> ImageStore:
    """The user's image folder (beside the database and the KV files)."""
    return ImageStore(user_dir() / "images")
