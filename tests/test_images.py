"""What a user's image becomes before a vision model reads it (engine/inference/images.py):
real files written by Pillow, and hostile ones, each decoded or refused in words."""

from __future__ import annotations

import io
import struct
import zlib

import pytest
from PIL import Image

from engine.inference.images import MAX_SIDE, ImageError, decode_image


def encoded(image: Image.Image, fmt: str, **kw) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **kw)
    return out.getvalue()


def png_header(width: int, height: int) -> bytes:
    """A PNG whose header claims width × height (its pixel data is a stub): what a bomb looks like."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


def test_a_png_with_transparency_lies_on_white_and_the_digest_names_the_pixels():
    image = Image.new("RGBA", (40, 30), (255, 0, 0, 0))
    image.putpixel((0, 0), (0, 0, 255, 255))
    got = decode_image(encoded(image, "PNG"))
    px = got.pixels
    assert (px.width, px.height, got.format, got.frames) == (40, 30, "PNG", 1)
    assert px.rgb[:3] == b"\x00\x00\xff" and px.rgb[3:6] == b"\xff\xff\xff"
    # The same picture as a lossless WebP is the same image to the cache; another one is not.
    assert decode_image(encoded(image, "WEBP", lossless=True)).pixels.digest == px.digest
    assert decode_image(encoded(Image.new("RGB", (40, 30)), "PNG")).pixels.digest != px.digest


def test_exif_rotation_is_honoured():
    image = Image.new("RGB", (60, 20), (10, 200, 10))
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90° clockwise to view
    got = decode_image(encoded(image, "JPEG", exif=exif.tobytes()))
    assert (got.pixels.width, got.pixels.height) == (20, 60)


def test_cmyk_jpeg_16_bit_grey_and_palette_become_rgb():
    cmyk = decode_image(encoded(Image.new("CMYK", (8, 8), (0, 255, 255, 0)), "JPEG", quality=95)).pixels
    r, g, b = cmyk.rgb[:3]
    assert r > 200 and g < 60 and b < 60 and len(cmyk.rgb) == 8 * 8 * 3  # cyan-free, full magenta+yellow: red
    grey16 = Image.new("I;16", (4, 4), 65535)
    assert decode_image(encoded(grey16, "PNG")).pixels.rgb[:3] == b"\xff\xff\xff"
    palette = Image.new("P", (4, 4), 0)
    palette.putpalette([0, 128, 255] * 256)
    assert decode_image(encoded(palette, "GIF")).pixels.rgb[:3] == bytes([0, 128, 255])


def test_an_animated_gif_gives_its_first_frame_and_says_so():
    frames = [Image.new("RGB", (16, 16), c) for c in ((255, 0, 0), (0, 255, 0), (0, 0, 255))]
    data = encoded(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)
    got = decode_image(data)
    assert got.frames == 3 and got.pixels.rgb[0] > 200 and got.pixels.rgb[1] < 50  # red: the first frame


def test_a_large_image_is_scaled_down_keeping_its_shape():
    got = decode_image(encoded(Image.new("RGB", (MAX_SIDE * 2, 100)), "PNG"))
    assert got.pixels.width == MAX_SIDE and got.pixels.height == 50 and got.scaled_from == (MAX_SIDE * 2, 100)


@pytest.mark.parametrize("data, words", [
    (png_header(30_000, 30_000), "million pixels"),  # Pillow's guard refuses it at open
    (png_header(9_000, 9_000), "9000 × 9000 pixels"),  # past ours, within Pillow's
    (b'<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg"/>', "SVG"),
    (b"<svg width='10' height='10'></svg>", "SVG"),
    (b"%PDF-1.7\n...", "PDF"),
    (b"just some text, not a picture", "not an image format"),
    (b"", "not an image format"),
])
def test_hostile_or_foreign_files_are_refused_in_words(data, words):
    with pytest.raises(ImageError, match=words):
        decode_image(data, "photo.png")


def test_a_truncated_or_oversized_file_is_refused():
    data = encoded(Image.effect_noise((64, 64), 40).convert("RGB"), "PNG")
    with pytest.raises(ImageError, match="damaged or incomplete"):
        decode_image(data[: len(data) // 2])
    with pytest.raises(ImageError, match="MB"):
        decode_image(b"\0" * (33 << 20))
