"""Images for a front-end: keep one that was dropped, pasted or sent for a message, and read a kept
one back as a picture to show (a thumbnail, the whole image in a viewer). Pillow decodes
(engine/inference/images.py), so a preview shows the pixels the model reads: EXIF rotation
applied, transparency on white, an animation's first frame. These touch the image folder only,
never a model or the database, so any thread may call them (the window's, off its GUI thread)."""

from __future__ import annotations

import io
from pathlib import Path

from engine.chat.image_store import image_store
from engine.chat.targets import InputError
from engine.docs.attach import IMAGES
from engine.inference.images import ImageError
from engine.inference.media import Pixels


def is_image_file(path: str | Path) -> bool:
    """Whether the message box takes `path` as an image, not a document (by its name: SVG and
    HEIC are taken too, and `keep_image` refuses them in words)."""
    return Path(path).suffix.lower() in IMAGES


def keep_image(data: bytes, name: str = "the image", preview: int = 0) -> dict:
    """Keep an image for a message: {"digest" (what `send(..., images=[...])` takes), "width",
    "height", "format", "frames" (> 1: an animation, its first frame used), "scaled_from"}; with
    `preview`, also "preview": `image_preview`'s PNG at that side, from the pixels just decoded.

    Raises:
        InputError: not an image this app reads, damaged, or too large, in words.
    """
    try:
        d = image_store().add(data, name)
    except ImageError as exc:
        raise InputError(str(exc)) from exc
    facts = {"digest": d.pixels.digest, "width": d.pixels.width, "height": d.pixels.height,
             "format": d.format, "frames": d.frames, "scaled_from": d.scaled_from}
    return facts | ({"preview": _png(d.pixels, preview)} if preview else {})


def kept_image_file(digest: str) -> Path | None:
    """Where a kept image's file is (as the user sent it), or None once it is gone."""
    return image_store().path(digest)


def image_preview(digest: str, max_side: int) -> bytes:
    """A kept image as PNG bytes, its longer side at most `max_side` pixels.

    Raises:
        InputError: the image is gone from the data folder, or its file changed or was damaged.
    """
    try:
        pixels = image_store().pixels(digest)
    except ImageError as exc:
        raise InputError(str(exc)) from exc
    return _png(pixels, max_side)


def _png(pixels: Pixels, max_side: int) -> bytes:
    from PIL import Image

    image = Image.frombytes("RGB", (pixels.width, pixels.height), pixels.rgb)
    image.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()
