"""Split a message into overlapping chunks sized for the embedder's input window."""

from __future__ import annotations

import unicodedata

CHUNK_UNITS = 500    # ~500 Latin characters; a wide (CJK) character counts 2
OVERLAP_UNITS = 100
# all-MiniLM-L6-v2 reads at most 256 word pieces: ~500 Latin characters, but every CJK
# character is a piece of its own, so CJK text fills the window twice as fast.
_SENTENCE_ENDS = frozenset(".!?。！？;；\n")


def _width(ch: str) -> int:
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def chunk_text(text: str, size: int = CHUNK_UNITS, overlap: int = OVERLAP_UNITS) -> list[str]:
    """Chunks of at most `size` width units, consecutive ones sharing about `overlap` units.

    A chunk ends after a sentence end or a space in its last third when there is one, else at the
    budget (CJK text without punctuation, long URLs). Whitespace-only text gives no chunks.

    Args:
        text: the message.
        size: width budget per chunk (a wide character counts 2).
        overlap: width units repeated at the start of the next chunk.
    """
    if not 0 <= overlap < size:
        raise ValueError("need 0 <= overlap < size")
    text = text.strip()
    if not text:
        return []
    widths = [_width(ch) for ch in text]
    if sum(widths) <= size:
        return [text]
    chunks: list[str] = []
    start, n = 0, len(text)
    while start < n:
        end, used = start, 0
        while end < n and used + widths[end] <= size:
            used += widths[end]
            end += 1
        if end < n:
            end = _break_before(text, start, end)
        piece = text[start:end].strip()
        if piece:
            chunks.append(piece)
        if end >= n:
            break
        # Step back `overlap` units, then forward to a word start so the overlap is whole words.
        back, new_start = 0, end
        while new_start > start + 1 and back + widths[new_start - 1] <= overlap:
            new_start -= 1
            back += widths[new_start]
        space = -1 if text[new_start - 1].isspace() else text.find(" ", new_start, end)
        start = space + 1 if space != -1 else new_start
    return chunks


def _break_before(text: str, start: int, end: int) -> int:
    """The best cut in text[start:end]: after a sentence end, else after a space, else `end`."""
    floor = start + (end - start) * 2 // 3
    for i in range(end - 1, floor - 1, -1):
        if text[i] in _SENTENCE_ENDS:
            return i + 1
    for i in range(end - 1, floor - 1, -1):
        if text[i].isspace():
            return i + 1
    return end
