"""Rendering messages: Markdown and code, no raw HTML from the model, hostile input stays fast."""

import dataclasses

from PySide6.QtCore import QUrl
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QTextBrowser

from app.chat_view import ChatView
from app.transcript import Answer, Shown
from app.render import CODE_BLOCKS, markdown_html, message_html, meta_line


def test_code_blocks_are_highlighted_and_copyable(qtbot):
    view = ChatView()
    qtbot.addWidget(view)
    view.set_messages([Shown("assistant", "Here:\n```python\nprint('hi')\n```")])
    html = view.toHtml()
    assert "print" in html and "copy:" in message_html("assistant", "```python\nprint('hi')\n```")
    key = next(k for k, v in CODE_BLOCKS.items() if v == "print('hi')\n")
    view._on_link(QUrl(f"copy:{key}"))
    assert QGuiApplication.clipboard().text() == "print('hi')\n"
    view._on_link(QUrl("https://example.com"))  # links in model output do nothing
    assert QGuiApplication.clipboard().text() == "print('hi')\n"


def test_model_html_is_escaped_and_hostile_markdown_is_fast():
    assert "<script>" not in markdown_html("<script>alert(1)</script>")
    deep = markdown_html("> " * 5_000 + "deep")
    wide = markdown_html("🙂" * 10_000)
    huge = markdown_html("word " * 210_000)
    assert deep and "🙂" in wide and huge.startswith("<pre>")


def test_meta_line_says_what_happened():
    line = meta_line({"ttft_ms": 120.4, "decode_tps": 33.3, "prompt_tokens_evaluated": 17,
                      "prompt_tokens_cached": 2100, "restored_from": "cold", "finish_reason": "cancelled"},
                     "L1", "demo-small")
    assert line.startswith("L1 · demo-small") and "120 ms" in line and "17 evaluated / 2100 cached" in line
    assert "restored from cold" in line and "stopped" in line


def test_a_model_file_is_named_without_its_folder():
    from app.render import model_label

    assert model_label("/home/me/models/Qwen3-4B-Q4_K_M.gguf") == "Qwen3-4B-Q4_K_M"
    assert model_label(r"C:\Users\me\models\m.GGUF") == "m"
    assert model_label("qwen3-4b") == "qwen3-4b"


def test_the_view_draws_only_what_follows_and_the_document_is_as_if_drawn_at_once(qtbot, monkeypatch):
    """A send, the streamed answer and its end append to the document; it then equals the chat
    drawn whole. A change above the end (a message changed, or gone) draws it all."""
    view = ChatView()
    qtbot.addWidget(view)
    whole = []
    monkeypatch.setattr(view, "setHtml", lambda html: (whole.append(len(html)), QTextBrowser.setHtml(view, html)))

    def as_if_drawn_at_once():
        fresh = ChatView()
        qtbot.addWidget(fresh)
        fresh.set_messages([dataclasses.replace(m) for m in view.messages])
        return fresh.document().toHtml()

    chat = view.transcript
    chat.add_user("first question")
    view.draw()
    for n in range(3):
        chat.append_tokens(f" **word {n}**\n\n| a | b |\n|---|---|\n| {n} | x |\n")
        view.draw()
    chat.finish(Answer("the answer\n\n```python\nprint(1)\n```", {}, "L1", "m"))
    chat.add_user("second question\nwith two lines")
    view.draw()
    chat.append_tokens("partly")
    view.draw()
    assert len(whole) == 1  # only the first render, of the empty view, set the document
    assert view.document().toHtml() == as_if_drawn_at_once()
    assert len(view.document().rootFrame().childFrames()) == 4

    chat.finish(Answer("second answer", {}, "L1", "m"))
    view.messages[1].content = "the first answer, edited"  # a change above the end
    view._render()
    assert len(whole) == 2
    assert view.document().toHtml() == as_if_drawn_at_once()

    del view.messages[2:]
    view._render()
    assert len(whole) == 3
    assert view.document().toHtml() == as_if_drawn_at_once()
    assert len(view.document().rootFrame().childFrames()) == 2
