"""Rendering messages: Markdown and code, no raw HTML from the model, hostile input stays fast."""

from PySide6.QtCore import QUrl
from PySide6.QtGui import QGuiApplication

from app.chat_view import ChatView
from app.render import CODE_BLOCKS, markdown_html, message_html, meta_line


def test_code_blocks_are_highlighted_and_copyable(qtbot):
    view = ChatView()
    qtbot.addWidget(view)
    view.set_messages([{"role": "assistant", "content": "Here:\n```python\nprint('hi')\n```", "stats": {}}])
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
