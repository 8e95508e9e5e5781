"""Empty states that guide (issue 27): no chats yet, an empty chat, an engine that could not start,
and a Documents panel with nothing added. Each says what to do next, with a button that does it.
The window is driven over the scripted fake backend."""

from __future__ import annotations

from PySide6.QtWidgets import QApplication

from engine.api import ModelNotFound, Settings
from tests.fake_backend import Answer, fakes, make_assistant  # noqa: F401

from .helpers import fake_window


def make_window(qtbot, fakes, make_assistant, fail_first=False):
    """The window over the fake backend; `fail_first`: the engine's first start fails as a missing
    model does, and the next one works."""
    model = str(fakes.model_file("m"))
    failing = [fail_first]

    def make():
        if failing[0]:
            failing[0] = False
            raise ModelNotFound("no model file for tier L1: 'qwen2.5-1.5b-instruct' is not downloaded")
        return make_assistant(model)

    return fake_window(qtbot, make, wait=False)


def buttons(w) -> dict:
    return {b.text(): b for b in w.empty.buttons}


def test_no_chats_then_an_empty_chat_then_a_conversation(qtbot, fakes, make_assistant):
    w = make_window(qtbot, fakes, make_assistant)
    qtbot.waitUntil(lambda: w.engine_ready, timeout=30_000)
    assert w.empty.isVisible() and not w.view.isVisible() and w.empty.title.text() == "No chats yet"
    buttons(w)["Write a message"].click()
    assert w.composer.edit.hasFocus() or QApplication.focusWidget() is w.composer.edit
    fakes.script("m").enqueue(Answer("Hello!"))
    w.composer.edit.setPlainText("Hi")
    w.composer.send_button.click()
    qtbot.waitUntil(lambda: not w.busy, timeout=30_000)
    assert w.view.isVisible() and not w.empty.isVisible()
    w.new_chat()
    qtbot.waitUntil(lambda: w.empty.isVisible(), timeout=10_000)
    assert w.empty.title.text() == "Ask anything" and not w.view.isVisible()
    w.close()


def test_an_engine_that_could_not_start_says_why_and_tries_again(qtbot, fakes, make_assistant):
    w = make_window(qtbot, fakes, make_assistant, fail_first=True)
    qtbot.waitUntil(lambda: w.engine_error is not None, timeout=30_000)
    assert w.empty.isVisible() and w.empty.title.text() == "The engine could not start"
    assert "not downloaded" in w.empty.text.text()
    assert set(buttons(w)) == {"Models", "Settings", "Try again"}
    buttons(w)["Try again"].click()
    qtbot.waitUntil(lambda: w.engine_ready, timeout=30_000)
    assert w.engine_error is None and w.empty.title.text() == "No chats yet" and not w.banner.isVisible()
    w.close()


def test_the_documents_panel_says_what_to_do_when_nothing_is_added(qtbot, fakes, make_assistant):
    w = make_window(qtbot, fakes, make_assistant)
    qtbot.waitUntil(lambda: w.engine_ready, timeout=30_000)
    panel = w.open_documents()
    panel.refresh()
    qtbot.waitUntil(lambda: panel.empty_note.isVisible(), timeout=10_000)
    assert panel.add_folder_button.isVisible()
    panel.close()
    w.close()


def test_the_top_bar_names_the_chat_and_folds_the_gauges_into_an_indicator(qtbot, fakes, make_assistant):
    w = make_window(qtbot, fakes, make_assistant)
    qtbot.waitUntil(lambda: w.engine_ready, timeout=30_000)
    assert not w.gauges.isVisible() and not w.top_bar.toggle.isChecked()  # folded by default
    qtbot.waitUntil(lambda: "MiB" in w.top_bar.toggle.text(), timeout=5_000)  # the indicator's few words
    fakes.script("m").enqueue(Answer("Hello!"))
    w.composer.edit.setPlainText("Say hello")
    w.composer.send_button.click()
    qtbot.waitUntil(lambda: not w.busy, timeout=30_000)
    qtbot.waitUntil(lambda: w.top_bar.title.text() == "Say hello", timeout=10_000)
    assert w.top_bar.model.text() == "L1 · m"
    qtbot.waitUntil(lambda: "context" in w.top_bar.toggle.text(), timeout=5_000)
    w.top_bar.toggle.click()  # the indicator opens the gauges as a popover under it
    popover = w.resources.popover
    assert popover.isVisible() and popover.isAncestorOf(w.gauges) and w.gauges.isVisible()
    assert not w.top_bar.toggle.isChecked() and Settings.shared().get("ui.resources_panel") is False
    popover.pin_button.click()  # kept beside the chat: the panel says the rest
    assert not popover.isVisible() and w.gauges.isVisible() and not popover.isAncestorOf(w.gauges)
    assert w.top_bar.toggle.isChecked() and w.top_bar.toggle.text() == "Resources"
    assert Settings.shared().get("ui.resources_panel") is True
    w.top_bar.toggle.click()  # pinned: the indicator folds them away again
    assert not w.gauges.isVisible() and not w.top_bar.toggle.isChecked()
    assert Settings.shared().get("ui.resources_panel") is False
    w.close()
