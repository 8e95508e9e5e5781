"""Read one document file into text blocks that remember where they came from (page, heading, line).

Pure functions: no database, no threads, no Qt. A file that cannot be read raises `Skip` with a
reason in plain words; the reasons are a fixed set of phrases so the UI can translate them.
"""

from __future__ import annotations

import errno
import io
import logging
import re
import stat
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import charset_normalizer
import docx
import pypdf
from docx.table import Table

log = logging.getLogger(__name__)
# pypdf logs its repairs of damaged files ("EOF marker not found") as warnings; the file's Skip
# reason (or its text) is what the user needs, not pypdf's notes on stderr.
logging.getLogger("pypdf").setLevel(logging.ERROR)

MAX_BYTES = 200 * 1024 * 1024
_BLOCK_CHARS = 16_000  # a text block is cut here so one huge paragraph (a log) never makes one giant string

KINDS = {".pdf": "pdf", ".docx": "docx", ".html": "html", ".htm": "html",
         ".md": "markdown", ".markdown": "markdown",
         ".txt": "text", ".rst": "text", ".csv": "text", ".log": "text"}
CODE_SUFFIXES = frozenset(".py .js .ts .c .h .cpp .java .go .rs .sh .sql .json .yaml .yml .toml".split())

# The reasons `Skip` carries (English source strings; the app translates them).
UNSUPPORTED = "unsupported file type"
OLD_WORD = "old Word format (.doc): save it as .docx"
EMPTY = "empty file"
TOO_LARGE = "too large"
BINARY = "not a text file (binary or unknown encoding)"
DAMAGED_PDF = "damaged or not a real PDF"
DAMAGED_DOCX = "damaged or not a real Word (.docx) file"
DAMAGED_HTML = "damaged HTML"
ENCRYPTED = "encrypted (password-protected)"
NO_TEXT_LAYER = "no text layer (scanned?)"
NO_TEXT = "no text"
UNREADABLE = "no permission to read it"
VANISHED = "file no longer exists"
FOLDER = "is a folder"
NOT_FILE = "not a regular file"
LINK_LOOP = "link loop (the link points back to itself)"
READ_ERROR = "could not be read"


class Skip(Exception):
    """A file the indexer passes over; `reason` is one of this module's reason phrases."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(reason)
        self.reason = reason
        self.detail = detail  # for the log, e.g. the size; not for translation


@dataclass(frozen=True)
class Block:
    text: str
    page: int | None = None     # 1-based, PDFs
    heading: str | None = None  # nearest heading above (Markdown, HTML, Word)
    line: int | None = None     # 1-based first line (text, Markdown, code)


@dataclass(frozen=True)
class Parsed:
    path: Path
    kind: str  # pdf | docx | html | markdown | text | code
    blocks: list[Block] = field(default_factory=list)


def kind_of(path: Path, *, code: bool = False) -> str | None:
    """The kind `parse` would read `path` as, or None when its extension is not handled."""
    suffix = path.suffix.lower()
    if suffix in KINDS:
        return KINDS[suffix]
    return "code" if code and suffix in CODE_SUFFIXES else None


def parse(path: Path, *, max_bytes: int = MAX_BYTES, code: bool = False) -> Parsed:
    """Read `path` into blocks of text.

    Args:
        path: the file.
        max_bytes: larger files are skipped, judged from stat before anything is read.
        code: also read source code files (by extension).

    Raises:
        Skip: the file cannot or should not be indexed; `reason` says why in plain words.
    """
    path = Path(path)
    kind = kind_of(path, code=code)
    if kind is None:
        raise Skip(OLD_WORD if path.suffix.lower() == ".doc" else UNSUPPORTED, path.suffix)
    data = _read(path, max_bytes)
    if kind == "pdf":
        blocks = _pdf(data)
    elif kind == "docx":
        blocks = _docx(data)
    elif kind == "html":
        blocks = _html(decode(data))
    else:
        blocks = _lines(decode(data), markdown=kind == "markdown")
    if not blocks:
        raise Skip(NO_TEXT)
    return Parsed(path, kind, blocks)


def _read(path: Path, max_bytes: int) -> bytes:
    try:
        st = path.stat()
        if stat.S_ISDIR(st.st_mode):
            raise Skip(FOLDER)
        if not stat.S_ISREG(st.st_mode):  # a FIFO would block the read forever
            raise Skip(NOT_FILE)
        if st.st_size == 0:
            raise Skip(EMPTY)
        if st.st_size > max_bytes:
            raise Skip(TOO_LARGE, f"{st.st_size} bytes, limit {max_bytes}")
        with path.open("rb") as f:
            data = f.read(max_bytes + 1)  # the file may have grown since stat
    except FileNotFoundError:
        raise Skip(VANISHED) from None
    except PermissionError:
        raise Skip(UNREADABLE) from None
    except IsADirectoryError:
        raise Skip(FOLDER) from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise Skip(LINK_LOOP) from None
        log.info("cannot read %s: %s", path, e)
        raise Skip(READ_ERROR, str(e)) from None
    if not data:
        raise Skip(EMPTY)
    if len(data) > max_bytes:
        raise Skip(TOO_LARGE, f"grew past {max_bytes} bytes while read")
    return data


# --- PDF -----------------------------------------------------------------------------------------
# pypdf: pure Python, so nothing native to bundle per platform, and it reads page by page, so every
# block knows its page number exactly.

def _pdf(data: bytes) -> list[Block]:
    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            # Many PDFs are encrypted only against editing (an owner password) and open with "".
            raise Skip(ENCRYPTED)
        pages = list(reader.pages)
    except Skip:
        raise
    except pypdf.errors.DependencyError:  # AES without the `cryptography` package
        raise Skip(ENCRYPTED) from None
    except Exception as e:  # pypdf raises many types (PdfReadError, ValueError, KeyError...) on bad files
        log.info("unreadable PDF: %r", e)
        raise Skip(DAMAGED_PDF) from None
    blocks = []
    for number, page in enumerate(pages, 1):
        try:
            text = page.extract_text() or ""
        except Exception as e:  # one broken page should not lose the others
            log.info("PDF page %d unreadable: %r", number, e)
            continue
        text = _pdf_lines(_tidy(text))
        if text:
            blocks.append(Block(text, page=number))
    if not blocks:
        raise Skip(NO_TEXT_LAYER)
    return blocks


# --- Word ----------------------------------------------------------------------------------------

def _docx(data: bytes) -> list[Block]:
    try:
        document = docx.Document(io.BytesIO(data))
        return _docx_blocks(document)
    except Exception as e:  # not a zip, missing parts, bad XML: python-docx raises all sorts
        log.info("unreadable Word file: %r", e)
        raise Skip(DAMAGED_DOCX) from None


def _docx_blocks(document) -> list[Block]:
    blocks: list[Block] = []
    heading = None
    for item in document.iter_inner_content():  # paragraphs and tables in document order
        if isinstance(item, Table):
            text = _table_text(item)
        else:
            text = item.text.strip()
            style = (item.style.name or "") if item.style is not None else ""
            if text and (style.startswith("Heading") or style == "Title"):
                heading = text
        if text:
            blocks.append(Block(text, heading=heading))
    return blocks


def _table_text(table: Table) -> str:
    rows = []
    for row in table.rows:
        cells: list[str] = []
        for cell in row.cells:
            text = " ".join(cell.text.split())
            if text and (not cells or cells[-1] != text):  # a merged cell repeats across the row
                cells.append(text)
        if cells:
            rows.append(" | ".join(cells))
    return "\n".join(rows)


# --- HTML ----------------------------------------------------------------------------------------

def _html(text: str) -> list[Block]:
    parser = _HtmlText()
    try:
        parser.feed(text)
        parser.close()
    except Exception as e:  # html.parser is lenient; this is for the odd assertion on broken markup
        log.info("unreadable HTML: %r", e)
        raise Skip(DAMAGED_HTML) from None
    parser.flush()
    return parser.blocks


# Not <head>: HTML5 lets pages omit </head>, and hiding until it would hide the whole page.
_HIDDEN = frozenset({"script", "style", "noscript", "template"})
_HEADINGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6"})
_BREAKS = frozenset("""p div br li ul ol dl dt dd tr table thead tbody section article header footer
    nav aside main blockquote pre hr figure figcaption form fieldset address details summary
    title body""".split()) | _HEADINGS


class _HtmlText(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.blocks: list[Block] = []
        self.heading: str | None = None
        self.hidden = 0     # depth inside script/style/...
        self.in_heading = False
        self.pre = 0
        self.parts: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag in ("td", "th") and self.parts:
            self.parts.append(" | ")  # table cells stay apart, as Word tables are joined
        if tag in _HIDDEN:
            self.hidden += 1
        elif tag in _BREAKS:
            self.flush()
            self.in_heading = tag in _HEADINGS
            self.pre += tag == "pre"

    def handle_endtag(self, tag):
        if tag in _HIDDEN:
            self.hidden = max(0, self.hidden - 1)
        elif tag in _BREAKS:
            self.flush()
            self.pre = max(0, self.pre - (tag == "pre"))

    def handle_data(self, data):
        if not self.hidden:
            self.parts.append(data)

    def flush(self):
        raw = "".join(self.parts)
        self.parts = []
        text = raw.strip("\n") if self.pre else " ".join(raw.split())
        if self.in_heading and text:
            self.heading = text
        self.in_heading = False
        if text.strip():
            self.blocks.append(Block(text, heading=self.heading))


# --- plain text, Markdown, code ------------------------------------------------------------------

_BOMS = ((b"\xef\xbb\xbf", "utf-8-sig"), (b"\xff\xfe\x00\x00", "utf-32-le"),
         (b"\x00\x00\xfe\xff", "utf-32-be"), (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"))


def decode(data: bytes) -> str:
    """Text from bytes: a BOM decides, else UTF-8, else charset_normalizer's best guess.

    Raises:
        Skip: NUL bytes without a BOM, or no encoding fits.
    """
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            try:
                return _newlines(data[len(bom):].decode(encoding))
            except UnicodeDecodeError:
                raise Skip(BINARY) from None
    if b"\x00" in data:  # text files never hold NUL (UTF-16 without a BOM is taken as binary too)
        raise Skip(BINARY)
    try:
        return _newlines(data.decode("utf-8"))  # the common case, and much faster than detection
    except UnicodeDecodeError:
        pass
    try:
        best = charset_normalizer.from_bytes(data).best()
    except Exception as e:
        log.info("encoding detection failed: %r", e)
        best = None
    if best is None:
        raise Skip(BINARY)
    return _newlines(str(best))


def _newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t#]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")


def _lines(text: str, *, markdown: bool) -> list[Block]:
    """Paragraphs (runs of non-blank lines) with their first line; Markdown headings tracked."""
    blocks: list[Block] = []
    heading = None
    para: list[str] = []
    first = 0
    size = 0
    fence = None  # the open code fence; '#' lines inside it are code, not headings

    def flush():
        nonlocal para, size
        body = "\n".join(para).strip("\n")
        if body.strip():
            blocks.append(Block(body, heading=heading, line=first))
        para, size = [], 0

    for number, line in enumerate(text.split("\n"), 1):
        if markdown:
            fenced = _FENCE.match(line)
            if fenced and fence is None:
                fence = fenced.group(1)
            elif fenced and fenced.group(1) == fence:
                fence = None
            elif fence is None:
                atx = _ATX.match(line)
                if atx:
                    flush()
                    heading = (atx.group(2) or "").strip() or heading
                    first, para = number, [(atx.group(2) or "").strip()]
                    flush()
                    continue
                if len(para) == 1 and para[0].strip() and _SETEXT.match(line):
                    heading = para[0].strip()  # "Title" underlined with === or ---
                    flush()
                    continue
        if not line.strip() and fence is None:
            flush()
            continue
        if not para:
            first = number
        while len(line) > _BLOCK_CHARS:  # one enormous line (minified JSON): cut it, same line number
            para.append(line[:_BLOCK_CHARS])
            line = line[_BLOCK_CHARS:]
            flush()
            first = number
        para.append(line)
        size += len(line) + 1
        if size > _BLOCK_CHARS:
            flush()
    flush()
    return blocks


_CJK_BREAK = re.compile(r"(?<=[\u3000-\u30ff\u3400-\u9fff\uff00-\uffef])\n(?=[\u3000-\u30ff\u3400-\u9fff\uff00-\uffef])")


def _pdf_lines(text: str) -> str:
    """A PDF page's text with layout artefacts undone: a line break between two CJK characters
    joins them (a wrapped Chinese line is one sentence: "内\n线电话"), and runs of spaces from
    justified lines become one."""
    return re.sub(r"[ \t]{2,}", " ", _CJK_BREAK.sub("", text))


def _tidy(text: str) -> str:
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
