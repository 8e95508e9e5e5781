"""Attachments (issue 27): files dropped or pasted into the message box. A small text or Markdown
file goes into the message (its tokens counted before sending); a large one is indexed into the
chat's own collection and the chat answers from it; a damaged image is refused in words, and a
damaged PDF with the parser's reason; the typed text is never lost. The
window is driven over the scripted fake backend, with the real documents index and embedder."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent

from engine.api import read_attachment
from engine.docs.service import DocumentService
from engine.storage import Database
from tests.fake_backend import Answer, fakes, make_assistant  # noqa: F401
from tests.test_docs_index import embedder  # noqa: F401

from .helpers import fake_window



@pytest.fixture
def docs(tmp_path, embedder):  # noqa: F811
    db = Database(tmp_path / "docs.db")
    service = DocumentService(db, embedder)
    yield service
    service.close()
    db.close()


def mime(*paths) -> QMimeData:
    data = QMimeData()
    data.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    return data


def test_drop_and_paste_files_into_the_message(qtbot, fakes, make_assistant, docs, tmp_path):
    model = str(fakes.model_file("m"))
    w = fake_window(qtbot, lambda: make_assistant(model, docs=docs))
    note = tmp_path / "kettle.md"
    note.write_text("# Kettle\n\nThe Zephyr kettle boils one litre in ninety seconds.\n", encoding="utf-8")
    big = tmp_path / "handbook.txt"
    big.write_text("\n\n".join(f"Section {k}: the night ferry to Harbour Island leaves at {k % 12 + 1} pm "
                               f"from pier {k}." for k in range(400)), encoding="utf-8")
    photo = tmp_path / "photo.png"
    photo.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64)
    broken = tmp_path / "scan.pdf"
    broken.write_bytes(b"%PDF-1.4 this is not really a PDF")
    w.composer.edit.setPlainText("Which pier does the ferry leave from?")
    # a drop, as the mouse does it
    dropped = mime(note, big)  # the event does not own its data: keep it alive while the event is read
    event = QDropEvent(QPointF(10, 10), Qt.CopyAction, dropped, Qt.LeftButton, Qt.NoModifier)
    w.composer.edit.dropEvent(event)
    bar = w.composer.attachments
    qtbot.waitUntil(lambda: len(bar.items) == 2, timeout=20_000)
    small, large = sorted(bar.items, key=lambda a: a.name == "handbook.txt")
    assert small.inline and not large.inline
    # a paste of a damaged image and of a damaged PDF: refused in words, the typed text untouched
    # (an image that reads becomes an image of the message: tests/app/test_images_window.py)
    w.composer.edit.insertFromMimeData(mime(photo))
    qtbot.waitUntil(lambda: "photo.png is not an image format this app reads" in bar.note.text(), timeout=20_000)
    w.composer.edit.insertFromMimeData(mime(broken))
    qtbot.waitUntil(lambda: "scan.pdf" in bar.note.text(), timeout=20_000)
    assert "damaged" in bar.note.text() and len(bar.items) == 2
    assert w.composer.edit.toPlainText() == "Which pier does the ferry leave from?"
    fakes.script("m").enqueue(Answer("From the pier in the handbook."))
    w.composer.send_button.click()
    qtbot.waitUntil(lambda: not w.busy, timeout=60_000)
    cid = w.conversation_id
    sent = w.view.messages[-2].content
    assert sent.startswith("Which pier") and "[Attached file: kettle.md]" in sent and "ninety seconds" in sent
    assert "[Attached file: handbook.txt]" in sent and "Section 7:" not in sent  # large: indexed, not pasted
    assert not bar.items and not bar.isVisible()
    seen = []
    w.worker.call(lambda a: (a.conversation_docs(cid), a.document_roots(f"chat-{cid}")), seen.append)
    qtbot.waitUntil(lambda: bool(seen), timeout=10_000)
    flag, roots = seen[0]
    assert flag == f"chat-{cid}" and [r["path"] for r in roots] == [str(big)]
    assert w.last_done.stats["sources"]  # the answer was given excerpts of it, to cite
    # with documents off, a large file is refused when it is attached, not when the message is sent
    w.docs_toggle.setEnabled(False)
    w.composer.edit.insertFromMimeData(mime(big))
    qtbot.waitUntil(lambda: "documents are off" in bar.note.text(), timeout=20_000)
    assert not bar.items
    w.close()


def test_read_attachment_counts_tokens_and_marks_pdf_pages(tmp_path):
    note = tmp_path / "a.txt"
    note.write_text("one two three", encoding="utf-8")
    got = read_attachment(note, lambda text: len(text.split()))
    assert (got.name, got.kind, got.tokens, got.inline) == ("a.txt", "text", 3, True)
