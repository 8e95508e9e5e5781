"""An image file or bytes from a user into the pixels a vision model reads, or a clear refusal.

Pillow decodes (the well-kept library every Python image tool builds on: JPEG, PNG, WebP, GIF,
BMP, TIFF; its decompression-bomb guard; EXIF and colour-mode handling), so nothing here parses
an image format by hand. What a user may send, and what happens to it:
- JPEG/PNG/WebP/GIF/BMP/TIFF: decoded; EXIF orientation applied (a phone photo stands upright);
  CMYK, palette, 16-bit and greyscale converted to RGB; transparency laid on white.
- an animated GIF/WebP: its first frame, and `frames` says how many there were;
- more than MAX_BYTES, or more than MAX_PIXELS pixels (a 30 000 × 30 000 PNG is 900 M): refused
  before the pixels are decoded;
- sides past MAX_SIDE: scaled down (the vision encoders resize far below this anyway);
- SVG, HEIC, PDF, a damaged or truncated file, not an image: refused, saying which.
The digest names the decoded pixels, not the file: the same picture saved twice is one image to
the KV cache (engine/inference/media.py).
"""

from __future__ import annotations

import hashlib
import io
import warnings
from dataclasses import dataclass

from engine.inference.media import Pixels

MAX_IMAGE_BYTES = MAX_BYTES = 32 << 20
MAX_PIXELS = 64_000_000  # 8000 × 8000; Pillow's own guard is 89 M, and an error only at twice that
MAX_SIDE = 4096


class ImageError(ValueError):
    """An image that cannot be used, in words for the user."""


@dataclass(frozen=True)
class Decoded:
    pixels: Pixels
    format: str  # "JPEG", "PNG", ...
    frames: int  # > 1: an animation, of which the first frame was taken
    scaled_from: tuple[int, int] | None  # the original size where it was scaled down


def decode_image(data: bytes, name: str = "the image") -> Decoded:
    """`data` (a file's bytes) into RGB pixels and their digest; ImageError says why not."""
    from PIL import Image, ImageOps, UnidentifiedImageError

    if len(data) > MAX_BYTES:
        raise ImageError(f"{name} is {len(data) / 2**20:.1f} MB; images up to {MAX_BYTES >> 20} MB can be sent")
    head = data[:512].lstrip().lower()
    if head.startswith(b"<?xml") or head.startswith(b"<svg") or b"<svg" in head:
        raise ImageError(f"{name} is an SVG drawing; export it as PNG to send it")
    if head[:4] == b"%pdf":
        raise ImageError(f"{name} is a PDF; add it under Documents, or export the page as an image")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
            width, height = image.size
            if width * height > MAX_PIXELS:
                raise ImageError(f"{name} is {width} × {height} pixels; images up to "
                                 f"{MAX_PIXELS // 1_000_000} million pixels can be sent")
            fmt, frames = image.format or "image", getattr(image, "n_frames", 1)
            image.seek(0)
            image.load()
            image = ImageOps.exif_transpose(image)
            rgb = _rgb(image)
    except ImageError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:  # Pillow's guard, at open
        raise ImageError(f"{name} has far more than {MAX_PIXELS // 1_000_000} million pixels, the most that "
                         "can be sent") from exc
    except UnidentifiedImageError as exc:
        raise ImageError(f"{name} is not an image format this app reads (JPEG, PNG, WebP, GIF, BMP, TIFF)") from exc
    except (OSError, ValueError, SyntaxError) as exc:  # truncated, damaged, or a codec's own complaint
        raise ImageError(f"{name} is damaged or incomplete ({exc})") from exc
    scaled = None
    if max(rgb.size) > MAX_SIDE:
        scaled = rgb.size
        rgb.thumbnail((MAX_SIDE, MAX_SIDE), Image.Resampling.LANCZOS)
    raw = rgb.tobytes()
    digest = hashlib.sha256(f"{rgb.width}x{rgb.height}:".encode() + raw).hexdigest()
    return Decoded(Pixels(rgb.width, rgb.height, raw, digest), fmt, frames, scaled)


def _rgb(image):
    """RGB, whatever the mode: transparency over white (as a viewer shows it), CMYK through
    Pillow's conversion, 16-bit and float greyscale scaled to 8 bits."""
    from PIL import Image

    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    if image.mode in ("I;16", "I;16B", "I;16L", "I"):
        return image.point(lambda v: v / 256).convert("L").convert("RGB")
    if image.mode == "F":
        return image.convert("L").convert("RGB")
    return image.convert("RGB")
