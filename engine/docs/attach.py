"""A file dropped or pasted into the message box, read through the documents' own parser (PDF,
Word, HTML, Markdown, text, code). A small one goes into the message itself; a large one is
indexed into a collection of its own for that chat, and answers cite it (`Assistant.attach_documents`).
An image is not a document: the message box sends it as an image (engine/api/images.py), and
every other failure says why in the parser's plain words."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from engine.docs.parse import Skip, parse

INLINE_MAX_TOKENS = 1500   # more goes to the chat's own collection: a message this size is ~15 s of prompt on a laptop CPU
INLINE_MAX_CHARS = 6000    # the same when no vocabulary is loaded to count with
MAX_BYTES = 64 * 1024 * 1024
IMAGES = frozenset(".png .jpg .jpeg .gif .webp .bmp .tif .tiff .heic .heif .svg .avif".split())


class AttachmentError(ValueError):
    """A file that cannot be attached; the message names it and says why."""


@dataclass(frozen=True)
class Attachment:
    path: str
    name: str
    kind: str            # pdf | docx | html | markdown | text | code
    text: str            # what goes into the message (PDF pages marked)
    tokens: int | None   # the L1 model's tokens of `text` (None: no vocabulary loaded)
    pages: int | None = None

    @property
    def inline(self) -> bool:
        """Small enough to go into the message; else it is indexed for the chat."""
        if self.tokens is not None:
            return self.tokens <= INLINE_MAX_TOKENS
        return len(self.text) <= INLINE_MAX_CHARS

    def message_text(self) -> str:
        return f"[Attached file: {self.name}]\n{self.text}"


def read_attachment(path: str | Path, count_tokens: Callable[[str], int | None] = lambda text: None) -> Attachment:
    """Read one file to attach.

    Raises:
        AttachmentError: an image, a folder, or a file the parser skips (damaged, encrypted, no
            text, too large, unsupported), said in words.
    """
    path = Path(path)
    if path.suffix.lower() in IMAGES:
        raise AttachmentError(f"{path.name} is an image, not a document: send it as an image, to a model "
                              "that reads images")
    try:
        parsed = parse(path, max_bytes=MAX_BYTES, code=True)
    except Skip as exc:
        raise AttachmentError(f"{path.name}: {exc.reason}") from None
    pages = {b.page for b in parsed.blocks if b.page is not None}
    if pages:
        parts, last = [], None
        for b in parsed.blocks:
            if b.page != last:
                parts.append(f"--- page {b.page} ---")
                last = b.page
            parts.append(b.text)
        text = "\n".join(parts)
    else:
        text = "\n\n".join(b.text for b in parsed.blocks)
    return Attachment(str(path), path.name, parsed.kind, text, count_tokens(text), len(pages) or None)


def chat_collection(conversation_id: int) -> str:
    """The collection a chat's large attachments are indexed into."""
    return f"chat-{conversation_id}"
