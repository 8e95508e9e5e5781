"""Build the binary files of the document-retrieval evaluation set from the text sources in src/.

    .venv/bin/python tests/data/docs_eval/make_corpus.py

    src/NAME.pdf.txt  -> corpus/NAME.pdf   "% header: ..." (running header), "=== page N ===" starts
                                           page N, "# " / "## " headings, every other line a paragraph
    src/NAME.docx.txt -> corpus/NAME.docx  "% title: ...", "# " / "## " headings (Heading 1 / 2),
                                           "- " bullets, "| a | b" table rows (the first is the header)
    src/NAME.gbk.txt  -> corpus/NAME.txt   the same text encoded as GBK (exercises encoding detection)

The Markdown, HTML and UTF-8 text files are written by hand in corpus/ and are their own source.
The generated files are committed: tests and CI never run this script.

Needed only to regenerate: fpdf2 (`pip install fpdf2`; not a runtime dependency of the app) and, for
the Chinese PDFs, a CJK TrueType font: WenQuanYi Micro Hei (`apt-get install fonts-wqy-microhei`),
or any other TTF/TTC named by the DOCS_EVAL_CJK_FONT environment variable. fpdf2 embeds only the
glyphs used. Dates and zip timestamps are fixed, so a rerun with the same fpdf2 and font rewrites
the same bytes.
"""

from __future__ import annotations

import datetime as dt
import io
import os
import re
import sys
import zipfile
from pathlib import Path

import docx
from fpdf import FPDF
from fpdf.enums import WrapMode

HERE = Path(__file__).resolve().parent
SRC = HERE / "src"
CORPUS = HERE / "corpus"
FIXED_DATE = dt.datetime(2024, 6, 1, 12, 0, 0, tzinfo=dt.timezone.utc)
CJK_FONTS = ("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc",
             "/usr/share/fonts/wqy-microhei/wqy-microhei.ttc",
             "/usr/share/fonts/truetype/wqy/wqy-zenhei.ttc")
_CJK = re.compile(r"[\u3400-\u9fff]")
_PAGE = re.compile(r"^=== page (\d+) ===$")


def main() -> int:
    built = []
    for src in sorted(SRC.glob("*.txt")):
        stem, kind = src.name[: -len(".txt")].rsplit(".", 1)
        text = src.read_text(encoding="utf-8")
        if kind == "pdf":
            out = CORPUS / f"{stem}.pdf"
            out.write_bytes(build_pdf(text, chinese=bool(_CJK.search(text))))
        elif kind == "docx":
            out = CORPUS / f"{stem}.docx"
            out.write_bytes(build_docx(text))
        elif kind == "gbk":
            out = CORPUS / f"{stem}.txt"
            out.write_bytes(text.encode("gbk"))  # strict: a character GBK lacks is an error here
        else:
            raise SystemExit(f"{src.name}: unknown target kind {kind!r}")
        built.append(out)
    for out in built:
        print(f"{out.relative_to(HERE)}  {out.stat().st_size:>7} bytes")
    return 0


def _directives(text: str) -> tuple[dict[str, str], list[str]]:
    meta, lines = {}, []
    for line in text.splitlines():
        if line.startswith("% "):
            key, _, value = line[2:].partition(":")
            meta[key.strip()] = value.strip()
        else:
            lines.append(line.rstrip())
    return meta, lines


# --- PDF -----------------------------------------------------------------------------------------

class _Pdf(FPDF):
    def __init__(self, header_text: str, font: str, chinese: bool):
        super().__init__(format="A4")
        self.header_text, self.body_font, self.chinese = header_text, font, chinese

    def header(self):
        self.set_font(self.body_font, size=8)
        self.set_text_color(110)
        self.cell(0, 6, self.header_text, new_x="LMARGIN", new_y="NEXT")
        self.ln(4)
        self.set_text_color(0)

    def footer(self):
        self.set_y(-15)
        self.set_font(self.body_font, size=8)
        self.set_text_color(110)
        label = (f"第 {self.page_no()} 页 共 {{nb}} 页" if self.chinese
                 else f"Page {self.page_no()} of {{nb}}")
        self.cell(0, 8, label, align="C")
        self.set_text_color(0)


def _cjk_font() -> str:
    candidates = [os.environ["DOCS_EVAL_CJK_FONT"]] if os.environ.get("DOCS_EVAL_CJK_FONT") else CJK_FONTS
    for path in candidates:
        if Path(path).is_file():
            return path
    raise SystemExit("no CJK font: apt-get install fonts-wqy-microhei, or set DOCS_EVAL_CJK_FONT")


def build_pdf(text: str, *, chinese: bool) -> bytes:
    """A4 pages exactly as the source marks them; a page whose text overflows is an error."""
    meta, lines = _directives(text)
    font = "Helvetica"
    pdf = _Pdf(meta.get("header", ""), "cjk" if chinese else font, chinese)
    if chinese:
        pdf.add_font("cjk", fname=_cjk_font())
        font = "cjk"
    pdf.set_creation_date(FIXED_DATE)
    pdf.set_producer("fpdf2 (tests/data/docs_eval/make_corpus.py)")
    pdf.set_title(meta.get("header", ""))
    pdf.set_margins(22, 18, 22)
    pdf.set_auto_page_break(True, margin=20)
    wrap = WrapMode.CHAR if chinese else WrapMode.WORD
    expected = 0
    for line in lines:
        page = _PAGE.match(line)
        if page:
            expected += 1
            if int(page.group(1)) != expected:
                raise SystemExit(f"page markers out of order at {line!r}")
            pdf.add_page()
            continue
        if pdf.page_no() != expected:
            raise SystemExit(f"page {expected} overflows onto page {pdf.page_no()}: shorten it")
        if not line:
            pdf.ln(2)
        elif line.startswith("## "):
            pdf.set_font(font, "" if chinese else "B", 12)
            pdf.multi_cell(0, 7, line[3:], wrapmode=wrap, new_x="LMARGIN", new_y="NEXT")
        elif line.startswith("# "):
            pdf.set_font(font, "" if chinese else "B", 15)
            pdf.multi_cell(0, 9, line[2:], wrapmode=wrap, new_x="LMARGIN", new_y="NEXT")
            pdf.ln(1)
        else:
            pdf.set_font(font, "", 10.5)
            pdf.multi_cell(0, 6 if not chinese else 6.5, line, wrapmode=wrap, new_x="LMARGIN", new_y="NEXT")
    if pdf.page_no() != expected:
        raise SystemExit(f"the last page overflows onto page {pdf.page_no()}: shorten it")
    return bytes(pdf.output())


# --- Word ----------------------------------------------------------------------------------------

def build_docx(text: str) -> bytes:
    meta, lines = _directives(text)
    document = docx.Document()
    props = document.core_properties
    props.title = meta.get("title", "")
    props.author = props.last_modified_by = "docs_eval"
    props.created = props.modified = FIXED_DATE.replace(tzinfo=None)
    props.revision = 1
    if "title" in meta:
        document.add_heading(meta["title"], level=0)
    rows: list[list[str]] = []
    for line in lines + [""]:
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip("|").split("|")])
            continue
        if rows:
            _table(document, rows)
            rows = []
        if not line:
            continue
        if line.startswith("## "):
            document.add_heading(line[3:], level=2)
        elif line.startswith("# "):
            document.add_heading(line[2:], level=1)
        elif line.startswith("- "):
            document.add_paragraph(line[2:], style="List Bullet")
        else:
            document.add_paragraph(line)
    buf = io.BytesIO()
    document.save(buf)
    return _fixed_zip(buf.getvalue())


def _table(document, rows: list[list[str]]) -> None:
    table = document.add_table(rows=len(rows), cols=max(len(r) for r in rows))
    table.style = "Table Grid"
    for r, values in enumerate(rows):
        for c, value in enumerate(values):
            table.cell(r, c).text = value
            if r == 0:
                for run in table.cell(r, c).paragraphs[0].runs:
                    run.bold = True


def _fixed_zip(data: bytes) -> bytes:
    """The same zip with every entry dated FIXED_DATE, so regenerating gives identical bytes."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            entry = zipfile.ZipInfo(info.filename, date_time=FIXED_DATE.timetuple()[:6])
            entry.compress_type = zipfile.ZIP_DEFLATED
            dst.writestr(entry, src.read(info.filename))
    return out.getvalue()


if __name__ == "__main__":
    sys.exit(main())
