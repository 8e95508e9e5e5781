"""Speculative decoding in the window: the line under an answer says how many drafted tokens the
model accepted ("drafted 12/16 accepted"), its tooltip how the answer was decoded and why; the
Settings group offers Auto, Off, N-gram drafts and Draft model, explains Auto in one line, and a
change applies to the running engine at once. The model is the scripted fake backend with fixed
draft counts (tests/drafting.py): the window's words are under test, not the drafting.
Screenshots of the group and of a drafted answer, in English and Chinese
(ASSISTANT_SCREENSHOTS=docs/screenshots refreshes the docs')."""

from __future__ import annotations

import json

from PySide6.QtWidgets import QScrollArea, QTextBrowser

from app.render import message_html, meta_line, meta_tip
from app.settings_dialog import SettingsDialog
from app.zh_CN import TABLE
from engine.api import Settings
from tests.drafting import drafting
from tests.fake_backend import Answer, fakes, make_assistant  # noqa: F401

from .helpers import fake_window, in_language, save_screenshot, screenshot_dir, send

AUTO = ("Auto drafts tokens from the chat itself (and a draft model where one is paired) and turns itself off "
        "where it would be slower.")
QUESTION = {"en": "Why does `for i in range(1, len(items))` skip the first item?",
            "zh_CN": "为什么 `for i in range(1, len(items))` 会跳过第一项？"}
ANSWER = {"en": "Indexes start at 0, and `range(1, …)` starts at 1. Loop over the items themselves:\n\n"
                "```python\nfor item in items:\n    print(item)\n```",
          "zh_CN": "下标从 0 开始，而 `range(1, …)` 从 1 开始。直接遍历各项即可：\n\n"
                   "```python\nfor item in items:\n    print(item)\n```"}


def tooltips(view: QTextBrowser) -> dict[str, str]:
    """Text → tooltip of every fragment of the view's document that has one."""
    out, block = {}, view.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            if fragment.charFormat().toolTip():
                out[fragment.text()] = fragment.charFormat().toolTip()
            it += 1
        block = block.next()
    return out


def test_the_line_says_how_many_drafted_tokens_were_kept(qtbot):
    stats = {"decode_tps": 41.2, "draft_tokens": 16, "draft_accepted": 12, "speculation": "ngram",
             "speculation_note": "auto: the chat repeats itself"}
    assert meta_line(stats, "L1", "m") == "L1 · m · 41.2 tok/s · drafted 12/16 accepted"
    assert meta_tip(stats) == "Speculative decoding: n-gram drafts (auto: the chat repeats itself)"
    # plain decoding: nothing on the line; why it was off, in the tooltip only
    plain = {"decode_tps": 30.0, "draft_tokens": 0, "draft_accepted": 0, "speculation": None,
             "speculation_note": "auto: plain is faster here"}
    assert meta_line(plain, "L1", "m") == "L1 · m · 30.0 tok/s"
    assert meta_tip(plain) == "Speculative decoding: off (auto: plain is faster here)"
    assert meta_tip({"decode_tps": 30.0}) == ""  # an answer that says nothing of it (L3, an older row)
    assert meta_tip(stats | {"speculation": "draft", "speculation_note": ""}) == \
        "Speculative decoding: a draft model"
    view = QTextBrowser()
    qtbot.addWidget(view)
    view.setHtml(message_html("assistant", "Hi.", stats | {"speculation_note": 'a "quoted" <note>'}))
    assert tooltips(view) == {"41.2 tok/s · drafted 12/16 accepted":
                              "Speculative decoding: n-gram drafts (a 'quoted' <note>)"}
    view.setHtml(message_html("assistant", "Hi.", {"decode_tps": 30.0}))
    assert tooltips(view) == {}
    with in_language("zh_CN"):
        assert meta_line(stats, "L1", "m") == "L1 · m · 41.2 tok/s · 草稿接受 12/16"
        assert meta_tip(stats) == "推测解码：N-gram 草稿 (auto: the chat repeats itself)"


def test_the_settings_group_offers_the_modes_and_saves_them(qtbot, assistant_home):
    settings = Settings(assistant_home / "settings.json")
    dialog = SettingsDialog(settings)
    qtbot.addWidget(dialog)
    mode = dialog.speculative.mode
    assert [(mode.itemData(i), mode.itemText(i)) for i in range(mode.count())] == [
        ("auto", "Auto"), ("off", "Off"), ("ngram", "N-gram drafts (always)"), ("draft", "Draft model (always)")]
    assert mode.currentData() == "auto" and dialog.speculative.explain.text() == AUTO
    assert (mode.accessibleName(), mode.toolTip()) == ("Speculative decoding", AUTO)
    mode.setCurrentIndex(mode.findData("ngram"))
    dialog.save()
    assert json.loads((assistant_home / "settings.json").read_text(encoding="utf-8"))["speculative.mode"] == "ngram"
    dialog = SettingsDialog(Settings(assistant_home / "settings.json"))
    qtbot.addWidget(dialog)
    assert dialog.speculative.mode.currentData() == "ngram"
    assert AUTO in TABLE and all(TABLE.get(dialog.speculative.mode.itemText(i)) for i in range(4))
    with in_language("zh_CN"):
        dialog = SettingsDialog(Settings(assistant_home / "settings.json"))
        qtbot.addWidget(dialog)
        group = dialog.speculative
        assert group.title() == "推测解码" and group.mode.currentText() == "N-gram 草稿（始终）"
        assert group.explain.text() == TABLE[AUTO]


def test_a_change_in_settings_reaches_the_running_engine(qtbot, fakes, make_assistant, monkeypatch):
    model = str(fakes.model_file("m"))

    def make():
        a = make_assistant(model)
        a.settings = Settings.shared()  # as Assistant.from_settings leaves it: live changes read it
        return a

    w = fake_window(qtbot, make)

    def choose(dialog):
        dialog.speculative.mode.setCurrentIndex(dialog.speculative.mode.findData("off"))
        dialog.save()
        return dialog.result()

    monkeypatch.setattr(SettingsDialog, "exec", choose)
    w.open_settings()
    qtbot.waitUntil(lambda: w.status_label.text() == "Settings applied", timeout=30_000)  # live: no restart
    seen = []
    w.worker.call(lambda a: a.config.speculative, seen.append)
    qtbot.waitUntil(lambda: bool(seen), timeout=30_000)
    assert seen == ["off"] and Settings.shared().get("speculative.mode") == "off"
    w.close()


def test_screenshots_of_the_group_and_a_drafted_answer(qtbot, fakes, make_assistant, tmp_path):
    """The Settings dialog at the group (its neighbours around it), and an answer whose line says
    how many drafted tokens were kept (fake counts; the decode speed a fake's pace)."""
    out = screenshot_dir(tmp_path)
    model = str(fakes.model_file("m", decode_s_per_token=0.02))
    for language in ("en", "zh_CN"):
        with in_language(language):
            dialog = SettingsDialog(Settings.shared())
            qtbot.addWidget(dialog)
            dialog.resize(640, 760)
            dialog.show()
            dialog.findChild(QScrollArea).ensureWidgetVisible(dialog.speculative, 0, 200)
            save_screenshot(qtbot, dialog, out / f"settings-speculative-{language}.png", 640, 760)
            dialog.close()
            w = fake_window(qtbot, lambda: drafting(make_assistant(model), drafted=96, accepted=81,
                                                    note="auto: the answer repeats the question"), max_tokens=400)
            fakes.script("m").enqueue(Answer(ANSWER[language]))
            done = send(qtbot, w, QUESTION[language])
            assert (done.stats["draft_tokens"], done.stats["draft_accepted"]) == (96, 81)
            line = "drafted 81/96 accepted" if language == "en" else "草稿接受 81/96"
            assert line in w.view.toPlainText()
            tip = next(t for text, t in tooltips(w.view).items() if line in text)
            assert tip.endswith("(auto: the answer repeats the question)")
            save_screenshot(qtbot, w, out / f"speculation-answer-{language}.png", 1100, 720)
            w.chat_actions.delete(w.conversation_id, "", confirmed=True)  # the next language's shot starts clean
            qtbot.waitUntil(lambda w=w: not w.sidebar.chat_items(), timeout=30_000)
            w.close()
