"""A reasoning model in the window: its thinking streams into one folded line above the answer
("Thinking… N s"), which opens on click; the answer streams below; the stats line counts the
thinking; Copy gives the answer. An answer that is all thinking (the block never closed) shows it open. The model is demo-small under an R1-style template
(tests/reasoning_models.py): the prompt opens the block, so it really thinks first. Screenshots of
the block, open, in English and Chinese (ASSISTANT_SCREENSHOTS=docs/screenshots refreshes the docs')."""

from __future__ import annotations

from PySide6.QtCore import QUrl
from PySide6.QtWidgets import QApplication

from app.engine_worker import EngineWorker
from app.main_window import MainWindow
from engine.api import Settings
from tests.reasoning_models import reasoning_gguf

from .helpers import in_language, save_screenshot, screenshot_dir, send


def test_thinking_folds_above_the_answer_and_opens_on_click(qtbot, model_paths, tmp_path):
    Settings.shared().set("reasoning.budget_tokens", 24)  # the tiny model rarely closes a block itself
    path = reasoning_gguf("r1", tmp_path)
    out = screenshot_dir(tmp_path)
    for language in ("en", "zh_CN"):
        with in_language(language):
            w = MainWindow(EngineWorker(str(path), n_ctx=2048, memory=False), temperature=0.0, max_tokens=64)
            qtbot.addWidget(w)
            w.show()
            qtbot.waitUntil(lambda: w.engine_ready or w.banner.isVisible(), timeout=120_000)
            assert w.engine_ready, w.banner.text()
            assert w.think_toggle.isChecked()  # the setting's default
            done = send(qtbot, w, "Tell me about the Great Wall of China." if language == "en" else "法国的首都是哪里？")
            stats = done.stats
            assert stats["reasoning_tokens"] > 0 and done.reasoning
            last = w.view.messages[-1]
            assert last.reasoning == done.reasoning and last.content == done.text
            link = QUrl(f"think:{len(w.view.messages) - 1}")
            # folded, unless the answer is all thinking (a block never closed: nothing else to show)
            shown = done.reasoning[:20] in w.view.toPlainText()
            assert shown == (not done.text)
            w.view._on_link(link)  # a click toggles it
            assert (done.reasoning[:20] in w.view.toPlainText()) == (not shown)
            if shown:
                w.view._on_link(link)
            opened = w.view.toPlainText()
            assert done.reasoning[:20] in opened
            if done.text:  # the thinking comes first, then the answer (Markdown: compare a word)
                assert opened.index(done.reasoning[:20]) < opened.rindex(done.text.split()[-1])
            w.copy_answer()
            assert QApplication.clipboard().text() == done.text
            save_screenshot(qtbot, w, out / f"thinking-{language}.png", 1100, 720)
            w.close()
    Settings.shared().set("reasoning.budget_tokens", 0)


def test_the_think_switch_is_kept_per_chat(qtbot, model_paths, tmp_path):
    path = reasoning_gguf("r1", tmp_path)
    w = MainWindow(EngineWorker(str(path), n_ctx=2048, memory=False), temperature=0.0, max_tokens=48)
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: w.engine_ready, timeout=120_000)
    w.think_toggle.setChecked(False)  # before the chat exists: the first message's chat takes it
    done = send(qtbot, w, "Hi")
    assert done.stats["reasoning_closed"] == "budget" and not done.reasoning  # R1: closed at once
    cid, seen = w.conversation_id, []
    w.worker.call(lambda a: a.conversation_think(cid), seen.append)
    qtbot.waitUntil(lambda: bool(seen), timeout=10_000)
    assert seen == [False]
    w.close()
