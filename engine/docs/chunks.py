"""Cut parsed documents into chunks for the index, each knowing the page, heading and line it starts at."""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

from engine.docs.parse import Block, Parsed
from engine.memory.chunking import chunk_text

# Blocks are joined up to this many chunk budgets at a time, so a huge file never becomes one string.
_WINDOW = 16


@dataclass(frozen=True)
class Chunk:
    text: str
    page: int | None     # 1-based PDF page; a chunk never spans two pages
    heading: str | None  # the heading above where the chunk starts
    line: int | None     # 1-based line where the chunk starts (text, Markdown, code)
    index: int           # 0-based position in the document


def chunks(parsed: Parsed, max_chars: int = 1200, overlap: int = 150) -> list[Chunk]:
    """Chunks of a parsed document, cut at paragraph or sentence ends where there is one.

    Consecutive blocks of one page and one heading are joined, then cut by the memory chunker:
    a wide (CJK) character counts 2 toward `max_chars`, so no chunk is longer than `max_chars`
    characters and CJK chunks stay within the embedder's window like Latin ones.

    Args:
        parsed: the output of `parse`.
        max_chars: budget per chunk in width units (a wide character counts 2).
        overlap: width units repeated at the start of the next chunk within one section.
    """
    out: list[Chunk] = []
    for group in _sections(parsed.blocks, _WINDOW * max_chars):
        joined = "\n\n".join(b.text for b in group)
        starts, at = [], 0
        for b in group:
            starts.append(at)
            at += len(b.text) + 2
        newlines = [i for i, ch in enumerate(joined) if ch == "\n"]
        cursor = 0
        for piece in chunk_text(joined, max_chars, overlap):
            found = joined.find(piece, cursor)
            offset = found if found != -1 else cursor  # the chunker returns substrings; -1 cannot happen
            cursor = offset + 1
            i = bisect_right(starts, offset) - 1
            block = group[i]
            line = None
            if block.line is not None:
                line = block.line + bisect_right(newlines, offset - 1) - bisect_right(newlines, starts[i] - 1)
            out.append(Chunk(piece, block.page, block.heading, line, len(out)))
    return out


def _sections(blocks: list[Block], window: int) -> list[list[Block]]:
    """Runs of blocks sharing page and heading, each at most about `window` characters."""
    groups: list[list[Block]] = []
    size = 0
    for b in blocks:
        g = groups[-1] if groups else None
        if g and (g[-1].page, g[-1].heading) == (b.page, b.heading) and size + len(b.text) <= window:
            g.append(b)
            size += len(b.text) + 2
        else:
            groups.append([b])
            size = len(b.text) + 2
    return groups
