"""Every finished message can be copied on its own (issue 27): plain text as it reads, or an
answer's Markdown as written, through the links under it. Driven over the scripted fake backend."""

from __future__ import annotations

from PySide6.QtCore import QUrl
from PySide6.QtWidgets import QApplication

from tests.fake_backend import Answer, fakes, make_assistant  # noqa: F401

from .helpers import fake_window



def test_copy_any_message_as_text_or_markdown(qtbot, fakes, make_assistant):
    model = str(fakes.model_file("m"))
    w = fake_window(qtbot, lambda: make_assistant(model), max_tokens=200)
    fakes.script("m").enqueue(Answer("**Bold** and `code`.\n\n- one\n- two"), Answer("Second."))
    for text in ("First question", "Second question"):
        w.composer.edit.setPlainText(text)
        w.composer.send_button.click()
        qtbot.waitUntil(lambda: not w.busy, timeout=30_000)
    clipboard = QApplication.clipboard()
    w.view._on_link(QUrl("msg:markdown:1"))  # the first answer, not the last
    assert clipboard.text() == "**Bold** and `code`.\n\n- one\n- two"
    w.view._on_link(QUrl("msg:copy:1"))
    assert "**" not in clipboard.text() and "Bold and code." in clipboard.text() and "two" in clipboard.text()
    w.view._on_link(QUrl("msg:copy:0"))
    assert clipboard.text() == "First question"
    assert w.view.toPlainText().count("Copy Markdown") == 2
    w.view._on_link(QUrl("msg:copy:99"))  # a stale link does nothing
    w.close()


def test_a_long_chat_opens_on_its_last_messages_and_shows_earlier_ones_on_click(qtbot):
    from app.chat_view import MORE, SHOWN, ChatView

    view = ChatView()
    qtbot.addWidget(view)
    messages = [{"role": "user" if k % 2 == 0 else "assistant", "content": f"message number {k}", "stats": {},
                 "superseded": False} for k in range(1000)]
    view.set_messages(messages)
    shown = view.toPlainText()
    assert "message number 999" in shown and f"message number {1000 - SHOWN}" in shown
    assert f"message number {999 - SHOWN}" not in shown and f"Show {1000 - SHOWN} earlier messages" in shown
    view._on_link(QUrl("more:"))
    assert f"message number {1000 - SHOWN - MORE}" in view.toPlainText()
    view._on_link(QUrl("msg:copy:0"))  # links keep the message's own index, drawn or not
    assert QApplication.clipboard().text() == "message number 0"
