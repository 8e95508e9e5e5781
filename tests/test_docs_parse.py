"""engine/docs parse + chunks on real files written into tmp_path: every bad file is a Skip, never a crash."""

from __future__ import annotations

import io
import os

import docx
import pypdf
import pytest

from engine.docs import parse as P
from engine.docs.chunks import chunks
from engine.docs.pdf_writer import pdf_bytes
from engine.docs.parse import Block, Parsed, Skip, parse

ZH = ("本地文档助手可以离线回答问题。它会读取你的文件，"
      "并在回答中注明来源页码！这样是否更可信？")
INSTALL = "下载后双击运行安装程序，然后选择一个模型。"


def encrypted(data: bytes, user: str, owner: str | None = None) -> bytes:
    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(io.BytesIO(data)))
    writer.encrypt(user, owner)
    buf = io.BytesIO()
    writer.write(buf)
    return buf.getvalue()


def skip_reason(path, **kw) -> str:
    with pytest.raises(Skip) as info:
        parse(path, **kw)
    return info.value.reason


# --- PDF ---

def test_pdf_pages_in_order(tmp_path):
    f = tmp_path / "three.pdf"
    f.write_bytes(pdf_bytes(["Alpha apples page one", "Bravo bananas page two",
                             "Charlie cherries page three"]))
    doc = parse(f)
    assert doc.kind == "pdf"
    assert [b.page for b in doc.blocks] == [1, 2, 3]
    assert "bananas" in doc.blocks[1].text and "cherries" in doc.blocks[2].text


def test_encrypted_pdf_skipped_as_password(tmp_path):
    f = tmp_path / "secret.pdf"
    f.write_bytes(encrypted(pdf_bytes(["Hidden text"]), "pw"))
    assert "password" in skip_reason(f)


def test_owner_only_encryption_still_reads(tmp_path):
    # An empty user password (only editing is locked) opens for reading, as in every PDF viewer.
    f = tmp_path / "locked.pdf"
    f.write_bytes(encrypted(pdf_bytes(["Readable despite a lock"]), "", "owner"))
    assert "Readable" in parse(f).blocks[0].text


def test_truncated_pdf_is_damaged(tmp_path):
    f = tmp_path / "broken.pdf"
    f.write_bytes(pdf_bytes(["Some text", "More text"])[:150])
    assert skip_reason(f) == P.DAMAGED_PDF


def test_garbage_pdf_is_damaged(tmp_path):
    f = tmp_path / "fake.pdf"
    f.write_bytes(b"this is not a pdf at all\n" * 10)
    assert skip_reason(f) == P.DAMAGED_PDF


def test_blank_pdf_has_no_text_layer(tmp_path):
    writer = pypdf.PdfWriter()
    writer.add_blank_page(612, 792)
    f = tmp_path / "scan.pdf"
    with f.open("wb") as out:
        writer.write(out)
    assert skip_reason(f) == P.NO_TEXT_LAYER


# --- Word ---

def test_docx_headings_and_table(tmp_path):
    d = docx.Document()
    d.add_paragraph("Preface before any heading.")
    d.add_heading("Installation", level=1)
    d.add_paragraph("Run the installer and accept the defaults.")
    table = d.add_table(rows=2, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "Model", "Size"
    table.cell(1, 0).text, table.cell(1, 1).text = "Qwen", "1.5 GB"
    d.add_heading("Usage", level=2)
    d.add_paragraph("Type a question.")
    f = tmp_path / "guide.docx"
    d.save(f)
    blocks = parse(f).blocks
    by_text = {b.text: b.heading for b in blocks}
    assert by_text["Preface before any heading."] is None
    assert by_text["Run the installer and accept the defaults."] == "Installation"
    assert by_text["Model | Size\nQwen | 1.5 GB"] == "Installation"
    assert by_text["Type a question."] == "Usage"


def test_corrupt_docx(tmp_path):
    f = tmp_path / "bad.docx"
    f.write_bytes(b"PK\x03\x04 not really a zip" * 20)
    assert skip_reason(f) == P.DAMAGED_DOCX


def test_old_doc_gets_its_own_reason(tmp_path):
    f = tmp_path / "old.doc"
    f.write_bytes(b"\xd0\xcf\x11\xe0 old word")
    assert ".docx" in skip_reason(f)


# --- HTML ---

def test_html_drops_scripts_keeps_headings(tmp_path):
    f = tmp_path / "page.htm"
    f.write_text("""<html><head><title>Doc</title><style>body { color: red }</style>
<script>var secret = "SCRIPTTEXT";</script></head><body>
<h1>Getting started</h1><p>First   paragraph<br>second line</p>
<noscript>Enable JS please</noscript>
<h2>Details &amp; more</h2><ul><li>one</li><li>two</li></ul></body></html>""", encoding="utf-8")
    blocks = parse(f).blocks
    text = "\n".join(b.text for b in blocks)
    assert "SCRIPTTEXT" not in text and "color" not in text and "Enable JS" not in text
    by_text = {b.text: b.heading for b in blocks}
    assert by_text["First paragraph"] == "Getting started"
    assert by_text["second line"] == "Getting started"
    assert by_text["two"] == "Details & more"


# --- text encodings, Markdown ---

@pytest.mark.parametrize("encoding", ["gb18030", "utf-16", "utf-8-sig", "utf-8"])
def test_markdown_chinese_encodings(tmp_path, encoding):
    f = tmp_path / f"notes-{encoding}.md"
    f.write_bytes(f"# 简介\n\n{ZH}\n\n## 安装\n\n{INSTALL}\n".encode(encoding))
    doc = parse(f)
    assert doc.kind == "markdown"
    by_text = {b.text: (b.heading, b.line) for b in doc.blocks}
    assert by_text[ZH] == ("简介", 3)
    assert by_text[INSTALL] == ("安装", 7)


def test_markdown_fence_is_not_a_heading(tmp_path):
    f = tmp_path / "a.md"
    f.write_text("Title\n=====\n\n```sh\n# not a heading\necho hi\n```\n\nAfter the code.\n")
    blocks = parse(f).blocks
    assert [(b.heading, b.line) for b in blocks] == [("Title", 1), ("Title", 4), ("Title", 9)]


def test_binary_named_txt(tmp_path):
    f = tmp_path / "photo.txt"
    f.write_bytes(bytes(range(256)) * 8)
    assert skip_reason(f) == P.BINARY


def test_code_only_when_asked(tmp_path):
    f = tmp_path / "tool.py"
    f.write_text("def main():\n    return 1\n\n\nmain()\n")
    assert skip_reason(f) == P.UNSUPPORTED
    doc = parse(f, code=True)
    assert doc.kind == "code" and [b.line for b in doc.blocks] == [1, 5]


# --- file system trouble ---

def test_empty_file(tmp_path):
    f = tmp_path / "empty.md"
    f.touch()
    assert skip_reason(f) == P.EMPTY


def test_too_large_is_judged_before_reading(tmp_path, monkeypatch):
    f = tmp_path / "big.txt"
    f.write_text("x" * 5000)
    opened = []
    monkeypatch.setattr(type(f), "open", lambda self, *a, **k: opened.append(self))
    assert skip_reason(f, max_bytes=4096) == P.TOO_LARGE
    assert opened == []


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root reads anything")
def test_permission_denied(tmp_path):
    f = tmp_path / "private.txt"
    f.write_text("secret")
    f.chmod(0)
    try:
        assert skip_reason(f) == P.UNREADABLE
    finally:
        f.chmod(0o600)


@pytest.mark.parametrize("error, reason", [(PermissionError, P.UNREADABLE), (FileNotFoundError, P.VANISHED),
                                           (OSError, P.READ_ERROR)])
def test_errors_between_stat_and_read(tmp_path, monkeypatch, error, reason):
    # Also how permission is checked when the tests run as root: the open fails after stat passed.
    f = tmp_path / "moving.txt"
    f.write_text("here a moment ago")

    def fail(self, *a, **k):
        raise error("simulated")

    monkeypatch.setattr(type(f), "open", fail)
    assert skip_reason(f) == reason


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_fifo_is_not_read(tmp_path):
    f = tmp_path / "pipe.txt"
    os.mkfifo(f)
    assert skip_reason(f) == P.NOT_FILE  # reading it would block forever


def test_symlink_loop(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.symlink_to(b)
    b.symlink_to(a)
    assert skip_reason(a) == P.LINK_LOOP


def test_missing_folder_and_unsupported(tmp_path):
    assert skip_reason(tmp_path / "gone.txt") == P.VANISHED
    (tmp_path / "dir.md").mkdir()
    assert skip_reason(tmp_path / "dir.md") == P.FOLDER
    (tmp_path / "x.exe").write_bytes(b"MZ")
    assert skip_reason(tmp_path / "x.exe") == P.UNSUPPORTED


# --- chunks ---

def test_chunks_never_span_pages(tmp_path):
    words = " ".join(f"word{i}." for i in range(300))
    doc = Parsed(tmp_path / "x.pdf", "pdf", [Block(words, page=1), Block("Short page two.", page=2),
                                             Block(words, page=3)])
    out = chunks(doc, max_chars=400, overlap=50)
    assert [c.index for c in out] == list(range(len(out)))
    pages = [c.page for c in out]
    assert pages == sorted(pages) and set(pages) == {1, 2, 3}
    assert [c.text for c in out if c.page == 2] == ["Short page two."]
    assert all(len(c.text) <= 400 for c in out)


def test_chunks_carry_heading_and_line(tmp_path):
    body = "\n".join(f"Line {n} says something about the topic." for n in range(1, 61))
    f = tmp_path / "doc.md"
    f.write_text(f"# First\n\nIntro paragraph.\n\n# Second\n\n{body}\n")
    out = chunks(parse(f), max_chars=300, overlap=60)
    assert (out[0].heading, out[0].line) == ("First", 1)
    second = [c for c in out if c.heading == "Second"]
    assert second[0].line == 5 and len(second) > 3
    for c in second[1:]:
        # The line a chunk claims is the line its first words come from.
        first_words = c.text.split("\n")[0]
        source = (f.read_text().split("\n"))[c.line - 1]
        assert first_words in source


def test_chinese_without_spaces_chunks_under_budget(tmp_path):
    text = ZH * 40  # ~1800 characters, sentence ends but no spaces
    out = chunks(Parsed(tmp_path / "z.txt", "text", [Block(text, line=1)]), max_chars=300, overlap=40)
    assert len(out) > 5
    assert all(len(c.text) <= 300 for c in out)
    assert all(c.text[-1] in "。！？" for c in out[:-1])  # cut after a sentence end
    unspaced = "字" * 1000  # no punctuation at all: cut at the budget
    out = chunks(Parsed(tmp_path / "y.txt", "text", [Block(unspaced, line=1)]), max_chars=300, overlap=40)
    assert all(len(c.text) <= 300 for c in out) and "".join(c.text for c in out).count("字") >= 1000
