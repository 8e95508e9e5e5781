"""The top bar's model picker (issue 27): Auto or a tier with the model it runs, kept per chat,
and the answer comes from what it says. Driven over the scripted fake backend."""

from __future__ import annotations

from PySide6.QtCore import Qt

from app.model_picker import fit_label
from tests.fake_backend import Answer, fakes, make_assistant  # noqa: F401

from .helpers import fake_window


def test_the_picker_names_each_tiers_model_and_is_kept_per_chat(qtbot, fakes, make_assistant):
    l1, l2 = str(fakes.model_file("small")), str(fakes.model_file("big"))
    w = fake_window(qtbot, lambda: make_assistant(tiers={"L1": l1, "L2": l2}))
    picker = w.composer.route
    assert w.top_bar.isAncestorOf(picker) and not w.composer.isAncestorOf(picker)
    names = [picker.itemText(i) for i in range(picker.count())]
    assert names[0] == "Auto" and [n.split(" · ")[0] for n in names[1:]] == ["L1", "L2"]
    assert all(" · " in n for n in names[1:])
    # beside each model, how it fits this machine, from the planner (a loaded model: as it was loaded)
    fits = {}
    w.worker.call(lambda a: a.tier_fits(), fits.update)
    qtbot.waitUntil(lambda: bool(fits), timeout=30_000)
    assert set(fits) == {"L1", "L2"} and set(fits.values()) <= {"gpu", "partial", "cpu"}
    assert [picker.fit_of(level) for level in ("L1", "L2")] == [fit_label(lvl, fits[lvl])[0] for lvl in ("L1", "L2")]
    assert picker.fit_of("L1").startswith("fits")  # the fast tier's place is the CPU: it fits there
    assert picker.fit_of("auto") == "" and picker.itemData(picker.findData("L2"), Qt.ToolTipRole)

    fakes.script("big").enqueue(Answer("from the big one"))
    w.new_chat()
    qtbot.waitUntil(lambda: w.conversation_id is not None and not w.busy, timeout=30_000)
    first = w.conversation_id
    picker.setCurrentIndex(picker.findData("L2"))
    picker.activated.emit(picker.currentIndex())  # what a choice in the list sends
    qtbot.waitUntil(lambda: w.worker.assistant.conversation_route(first) == "L2", timeout=30_000)
    w.composer.edit.setPlainText("hello")
    w.composer.send_button.click()
    qtbot.waitUntil(lambda: not w.busy and w.last_done is not None, timeout=30_000)
    assert w.last_done.level == "L2" and w.last_done.text == "from the big one"
    assert w.top_bar.model.text().startswith("L2")

    w.new_chat()  # a new chat starts from the default preset's tier: Auto
    qtbot.waitUntil(lambda: w.conversation_id not in (None, first) and not w.busy, timeout=30_000)
    assert picker.currentData() == "auto"
    w._select(first)
    qtbot.waitUntil(lambda: picker.currentData() == "L2", timeout=30_000)
    w.close()


def test_the_settings_routing_mode_is_where_a_new_chat_starts(qtbot, fakes, make_assistant):
    from engine.api import Settings

    l1, l2 = str(fakes.model_file("small")), str(fakes.model_file("big"))
    Settings.shared().set("router.mode", "L1")
    w = fake_window(qtbot, lambda: make_assistant(tiers={"L1": l1, "L2": l2}))
    w.new_chat()
    qtbot.waitUntil(lambda: w.conversation_id is not None and not w.busy, timeout=30_000)
    cid = w.conversation_id
    assert w.composer.route.currentData() == "L1"
    qtbot.waitUntil(lambda: w.worker.assistant.conversation_route(cid) == "L1", timeout=30_000)
    w.close()
