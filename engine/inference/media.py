"""Images in a prompt sequence: media spans of negative ids among the text's token ids.

A prompt is one `list[int]` everywhere: the session's message ids, the backend's KV mirror, the
KV tiers' headers and snapshots (int32 on disk), the server's history matching. An image has no
token ids, so each of the n embedding positions it takes gets a *media id*, a negative int32 that
says two things:
- its index in the span (MEDIA_INDEX_BITS), so a common prefix that ends inside a span is cut back
  to the span's start (an image is evaluated whole, never half);
- MEDIA_HASH_BITS of sha256(image digest, index): two spans are equal only if every position is,
  so a span of 64 positions compares 64 × 18 bits of the image's hash, not one short code.
Text ids are never negative, so a text-only prompt is exactly what it was, and costs what it did
(`common_prefix` looks at one more id). Why not a richer type: every layer already compares,
stores and hashes these lists; a second kind of element would touch all of them for no gain.

What the ids do not carry (the pixels, the embeddings) the backend keeps by the span's first id
(engine/inference/vision.py). Under M-RoPE (Qwen2-VL, Qwen2.5-VL) an image advances the position by
less than its length: the backend counts positions apart from ids (engine/inference/positions.py).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Sequence

MEDIA_INDEX_BITS = 13  # positions in one span: 8192 (Qwen2.5-VL's 1280 × 1280 image is 2116)
MEDIA_HASH_BITS = 31 - MEDIA_INDEX_BITS
MAX_SPAN = 1 << MEDIA_INDEX_BITS
# What an image is counted as before a vision model has tokenized it (a budget's estimate, never
# evaluated): Gemma 3's fixed 256; SmolVLM's 512-px tiles are 64 each, Qwen2.5-VL's vary with size.
IMAGE_TOKENS_ESTIMATE = 256


def is_media(token: int) -> bool:
    return token < 0


def span_index(token: int) -> int:
    """A media id's position in its span (0: the span's first)."""
    return (-token - 1) >> MEDIA_HASH_BITS


def span_ids(digest: str, n_tokens: int) -> list[int]:
    """The media ids of an image (`digest`: the hex sha256 of its decoded pixels and size) that
    takes `n_tokens` embedding positions."""
    if not 0 < n_tokens <= MAX_SPAN:
        raise ValueError(f"an image of {n_tokens} tokens; a span holds 1..{MAX_SPAN}")
    ids = []
    for i in range(n_tokens):
        h = int.from_bytes(hashlib.sha256(f"{digest}:{i}".encode()).digest()[:4], "little")
        ids.append(-1 - ((i << MEDIA_HASH_BITS) | (h & ((1 << MEDIA_HASH_BITS) - 1))))
    return ids


def spans(tokens: Sequence[int]) -> list[tuple[int, int]]:
    """The media spans of `tokens` as (start, end) index pairs, in order."""
    out: list[tuple[int, int]] = []
    for i, t in enumerate(tokens):
        if t < 0:
            if span_index(t) == 0 or not out or out[-1][1] != i:
                out.append((i, i + 1))
            else:
                out[-1] = (out[-1][0], i + 1)
    return out


def next_run(tokens: Sequence[int], start: int, step: int) -> int:
    """The end of the run that starts at `start`: up to `step` text ids before the next image, or
    one whole image span (an image is decoded in one call, however long)."""
    if tokens[start] < 0:
        end = start + 1
        while end < len(tokens) and tokens[end] < 0 and span_index(tokens[end]) != 0:
            end += 1
        return end
    end = min(start + step, len(tokens))
    if min(tokens[start:end]) >= 0:  # text only: the common case, one scan in C
        return end
    for i in range(start, end):
        if tokens[i] < 0:
            return i
    return end


def whole_spans(n: int, *seqs: Sequence[int]) -> int:
    """`n` cut back so that no span of `seqs` is split: a prefix of n ids that ends inside an
    image ends before it instead."""
    for seq in seqs:
        if n < len(seq) and seq[n] < 0:
            n -= span_index(seq[n])
    return n


@dataclass(frozen=True)
class Pixels:
    """An image as packed 8-bit RGB rows, and the digest it is known by (media.py's spans)."""

    width: int
    height: int
    rgb: bytes
    digest: str

    def __post_init__(self) -> None:
        if self.width <= 0 or self.height <= 0 or len(self.rgb) != self.width * self.height * 3:
            raise ValueError(f"{len(self.rgb)} bytes are not a {self.width} × {self.height} RGB image")
