"""Every message can be acted on (issue 27): the toolbar that shows when the pointer rests on a
message, and the same actions in its right-click menu. Copy (plain or Markdown), answer again,
edit and send again, branch from an answer, delete; ‹ › between the branches these leave. Driven
over the scripted fake backend, with the real engine and SQLite behind the window."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QPointF, Qt, QUrl
from PySide6.QtGui import QMouseEvent
from PySide6.QtWidgets import QApplication, QLabel

from app.chat_controller import Fork
from tests.fake_backend import Answer, fakes, make_assistant  # noqa: F401

from .helpers import fake_window


def hover(view, index: int):
    """Rest the pointer on message `index`: a mouse move over its bubble, as Qt delivers it."""
    frame = view.document().rootFrame().childFrames()[index - view.first_shown]
    rect = view.document().documentLayout().frameBoundingRect(frame)
    pos = QPointF(rect.center().x(), rect.top() + 6 - view.verticalScrollBar().value())
    event = QMouseEvent(QEvent.MouseMove, pos, view.viewport().mapToGlobal(pos), Qt.NoButton, Qt.NoButton,
                        Qt.NoModifier)
    QApplication.sendEvent(view.viewport(), event)
    return view.toolbar


def click(qtbot, view, index: int, action: str) -> None:
    bar = hover(view, index)
    assert bar.isVisible() and bar.index == index
    button = bar.button(action)
    assert button is not None, [b.objectName() for b in bar.buttons()]
    qtbot.mouseClick(button, Qt.LeftButton)


def chat(qtbot, fakes, make_assistant, answers, questions):
    model = str(fakes.model_file("m"))
    w = fake_window(qtbot, lambda: make_assistant(model), max_tokens=200)
    fakes.script("m").enqueue(*[Answer(a) for a in answers])
    for text in questions:
        ask(qtbot, w, text)
    return w


def ask(qtbot, w, text):
    w.composer.edit.setPlainText(text)
    w.composer.send_button.click()
    settled(qtbot, w)


def settled(qtbot, w):
    """The turn is over and the messages shown carry their stored ids (read after each turn)."""
    qtbot.waitUntil(lambda: not w.busy and all(m.id for m in w.view.messages), timeout=30_000)


def shown(w) -> list[str]:
    return [m.content for m in w.view.messages]


def test_copy_any_message_as_text_or_markdown(qtbot, fakes, make_assistant):
    w = chat(qtbot, fakes, make_assistant, ["**Bold** and `code`.\n\n- one\n- two", "Second."],
             ["First question", "Second question"])
    clipboard = QApplication.clipboard()
    click(qtbot, w.view, 1, "markdown")  # the first answer, not the last
    assert clipboard.text() == "**Bold** and `code`.\n\n- one\n- two"
    click(qtbot, w.view, 1, "copy")
    assert "**" not in clipboard.text() and "Bold and code." in clipboard.text() and "two" in clipboard.text()
    click(qtbot, w.view, 0, "copy")
    assert clipboard.text() == "First question"
    assert [b.objectName() for b in hover(w.view, 0).buttons()] == ["msg_copy", "msg_edit", "msg_delete"]
    assert [b.objectName() for b in hover(w.view, 3).buttons()] == ["msg_copy", "msg_markdown", "msg_regenerate",
                                                                   "msg_branch", "msg_delete"]
    assert all(b.accessibleName() and b.accessibleDescription() for b in hover(w.view, 3).buttons())
    w.view.act("copy", 99)  # a stale index does nothing
    w.close()


def test_an_earlier_answer_given_again_and_the_branches_it_leaves(qtbot, fakes, make_assistant):
    w = chat(qtbot, fakes, make_assistant, ["A1", "A2", "B1"], ["q1", "q2"])
    click(qtbot, w.view, 1, "regenerate")
    settled(qtbot, w)
    assert shown(w) == ["q1", "B1"]
    assert "‹ 2 / 2 ›" in w.view.toPlainText()  # the new answer is the second of two
    w.view._on_link(QUrl("branch:1:-1"))  # ‹: the first answer and what followed it
    qtbot.waitUntil(lambda: shown(w) == ["q1", "A1", "q2", "A2"], timeout=30_000)
    assert "1 / 2" in w.view.toPlainText()
    qtbot.waitUntil(lambda: "reuses" in w.status_label.text(), timeout=30_000)
    w.view._on_link(QUrl("branch:1:1"))
    qtbot.waitUntil(lambda: shown(w) == ["q1", "B1"], timeout=30_000)
    w.close()


def test_the_keyboard_steps_through_the_actions_and_the_row_has_the_branch_arrows(qtbot, fakes, make_assistant):
    w = chat(qtbot, fakes, make_assistant, ["A1", "B1"], ["q1"])
    click(qtbot, w.view, 1, "regenerate")
    settled(qtbot, w)
    bar = hover(w.view, 1)  # the second of two answers: ‹ 2/2, no ›
    assert [x.objectName() for x in bar.widgets()][-2:] == ["msg_older", "msg_branch_count"]
    assert next(x for x in bar.widgets() if isinstance(x, QLabel)).text() == "2/2"
    bar.clear()
    w.view.setFocus()
    w.next_message()  # Alt+Down with no message's actions shown: the first message's
    assert bar.isVisible() and bar.index == 0 and bar.buttons()[0].hasFocus()
    w.previous_message()  # from the first one: it stays
    assert bar.index == 0
    w.next_message()
    assert bar.index == 1 and bar.button("copy").hasFocus()
    qtbot.keyClick(bar.button("copy"), Qt.Key_Left)  # Left from the first goes round to the last
    assert bar.button("older").hasFocus()
    qtbot.keyClick(bar.button("older"), Qt.Key_Space)
    qtbot.waitUntil(lambda: shown(w) == ["q1", "A1"], timeout=30_000)
    w.view.setFocus()
    w.previous_message()  # none shown now (the chat was drawn again): from the end
    assert bar.index == 1 and [x.objectName() for x in bar.widgets()][-2:] == ["msg_branch_count", "msg_newer"]
    qtbot.keyClick(bar.buttons()[0], Qt.Key_Escape)
    assert w.view.hasFocus() and not bar.isVisible()
    w.close()


def test_an_earlier_message_edited_and_sent_again(qtbot, fakes, make_assistant):
    w = chat(qtbot, fakes, make_assistant, ["A1", "A2", "E1"], ["q1", "q2"])
    click(qtbot, w.view, 0, "edit")
    assert w.composer.edit.toPlainText() == "q1" and "earlier message" in w.status_label.text()
    ask(qtbot, w, "q1, said better")
    assert shown(w) == ["q1, said better", "E1"]
    assert "‹ 2 / 2 ›" in w.view.toPlainText()
    rows = w.worker.assistant.transcript(w.conversation_id)
    assert [r["content"] for r in rows if r["superseded"]] == ["q1", "A1", "q2", "A2"]  # kept, as a branch
    w.close()


def test_a_branch_from_an_answer_and_esc_before_its_first_message(qtbot, fakes, make_assistant):
    w = chat(qtbot, fakes, make_assistant, ["A1", "A2", "X"], ["q1", "q2"])
    click(qtbot, w.view, 1, "branch")
    assert shown(w) == ["q1", "A1"] and "New branch" in w.status_label.text()
    w.stop()  # Esc: nothing was sent, the chat is as it was
    assert shown(w) == ["q1", "A1", "q2", "A2"] and w.chat.fork == Fork()
    click(qtbot, w.view, 1, "branch")
    ask(qtbot, w, "something else")
    assert shown(w) == ["q1", "A1", "something else", "X"]
    assert "‹ 2 / 2 ›" in w.view.toPlainText()
    w.view._on_link(QUrl("branch:2:-1"))
    qtbot.waitUntil(lambda: shown(w) == ["q1", "A1", "q2", "A2"], timeout=30_000)
    w.close()


def test_delete_a_turn_after_asking(qtbot, fakes, make_assistant, monkeypatch):
    w = chat(qtbot, fakes, make_assistant, ["A1", "A2", "A3"], ["q1", "q2", "q3"])
    asked = []
    monkeypatch.setattr(w, "confirm", lambda title, text: asked.append(text) or False)
    click(qtbot, w.view, 3, "delete")
    assert asked == ["Delete this answer and the message it answers?"] and len(shown(w)) == 6
    monkeypatch.setattr(w, "confirm", lambda title, text: True)
    click(qtbot, w.view, 3, "delete")
    qtbot.waitUntil(lambda: shown(w) == ["q1", "A1", "q3", "A3"], timeout=30_000)
    assert [m["content"] for m in w.worker.assistant.transcript(w.conversation_id)] == ["q1", "A1", "q3", "A3"]
    w.close()


def test_mid_turn_only_copying_is_offered_and_the_menu_has_the_same_actions(qtbot, fakes, make_assistant):
    from app.message_actions import actions_for

    w = chat(qtbot, fakes, make_assistant, ["A1"], ["q1"])
    w.chat.set_busy(True)
    assert [a for a, _, _ in actions_for(w.view.messages[1], w.view.idle)] == ["copy", "markdown"]
    w.view.act("delete", 1)  # not offered: nothing happens
    assert shown(w) == ["q1", "A1"]
    w.chat.set_busy(False)
    assert [a for a, _, _ in actions_for(w.view.messages[1], w.view.idle)][-1] == "delete"
    w.close()


def test_a_long_chat_opens_on_its_last_messages_and_shows_earlier_ones_on_click(qtbot):
    from app.chat_view import MORE, SHOWN, ChatView
    from app.transcript import Shown

    view = ChatView()
    qtbot.addWidget(view)
    view.set_messages([Shown("user" if k % 2 == 0 else "assistant", f"message number {k}") for k in range(1000)])
    shown_text = view.toPlainText()
    assert "message number 999" in shown_text and f"message number {1000 - SHOWN}" in shown_text
    assert f"message number {999 - SHOWN}" not in shown_text and f"Show {1000 - SHOWN} earlier messages" in shown_text
    view.show()
    assert hover(view, 1000 - SHOWN + 3).index == 1000 - SHOWN + 3  # the drawn messages keep their own index
    view._on_link(QUrl("more:"))
    assert f"message number {1000 - SHOWN - MORE}" in view.toPlainText()
    view.act("copy", 0)
    assert QApplication.clipboard().text() == "message number 0"


def test_an_edit_or_a_branch_left_unsent_stays_with_its_chat(qtbot, fakes, make_assistant):
    w = chat(qtbot, fakes, make_assistant, ["A1", "N1"], ["q1"])
    first = w.conversation_id
    click(qtbot, w.view, 0, "edit")
    w.new_chat()  # the edit was the other chat's: the new chat's first message is a plain send
    qtbot.waitUntil(lambda: w.conversation_id not in (None, first) and not w.busy, timeout=30_000)
    assert w.chat.fork == Fork()
    ask(qtbot, w, "hello")
    assert shown(w) == ["hello", "N1"] and not w.banner.isVisible()
    w.close()


def test_a_failed_answer_again_or_edit_leaves_the_chat_as_it_was(qtbot, fakes, make_assistant):
    w = chat(qtbot, fakes, make_assistant, ["A1", "A2"], ["q1", "q2"])
    fakes.backend("m").fail_after(0)  # the next decode fails
    click(qtbot, w.view, 1, "regenerate")
    qtbot.waitUntil(lambda: not w.busy and w.banner.isVisible(), timeout=30_000)
    qtbot.waitUntil(lambda: shown(w) == ["q1", "A1", "q2", "A2"], timeout=30_000)  # the old answer stands
    click(qtbot, w.view, 0, "edit")
    w.composer.edit.setPlainText("\x00 \x00")  # empty once cleaned: refused before anything is stored
    w.composer.send_button.click()
    qtbot.waitUntil(lambda: not w.busy and "empty" in w.banner.text(), timeout=30_000)
    qtbot.waitUntil(lambda: shown(w) == ["q1", "A1", "q2", "A2"], timeout=30_000)
    assert w.composer.edit.toPlainText() == "\x00 \x00"  # the edit's text is back in the box
    w.close()
