"""The desktop window on the real engine (demo-small, offscreen): chat, stream, stop, switch,
errors in a banner, and a GUI event loop that keeps ticking while the model works."""

import re
import statistics
import time
from pathlib import Path

import pytest
from PySide6.QtCore import Qt, QTimer

from app.engine_worker import EngineWorker
from app.main_window import MainWindow

from .helpers import ready_window, send

ROOT = Path(__file__).resolve().parents[2]


class DriftProbe:
    """A 10 ms timer on the GUI thread; the gaps between its ticks are how long the loop stalled."""

    INTERVAL_MS = 10

    def __init__(self):
        self.gaps: list[float] = []
        self._last = None
        self.elapsed_ms = 0.0  # from start to stop: how many ticks there should have been
        self.timer = QTimer()
        self.timer.setInterval(self.INTERVAL_MS)
        self.timer.timeout.connect(self._tick)

    def _tick(self):
        now = time.perf_counter()
        if self._last is not None:
            self.gaps.append((now - self._last) * 1000)
        self._last = now

    def start(self):
        self._last = None
        self._t0 = time.perf_counter()
        self.timer.start()

    def stop(self):
        self.timer.stop()
        self.elapsed_ms = (time.perf_counter() - self._t0) * 1000


@pytest.fixture
def window(qtbot, model_paths):
    w = ready_window(qtbot, "demo-small", n_ctx=2048, max_tokens=48)
    yield w
    w.close()


def test_chat_streams_into_the_view_and_the_loop_keeps_ticking(qtbot, model_paths, record_property):
    window = MainWindow(EngineWorker("demo-small", n_ctx=2048, memory=False), temperature=0.0, max_tokens=96)
    qtbot.addWidget(window)
    window.show()
    probe = DriftProbe()
    probe.start()  # building the window is the GUI's own work; from here the engine loads and answers
    qtbot.waitUntil(lambda: window.engine_ready, timeout=120_000)
    tokens = []
    window.worker.tokens.connect(lambda cid, text: tokens.append(text))
    done = send(qtbot, window, "Hello! Tell me a short fact about the sea.")
    # At least 20 ticks to judge, however fast the machine loaded and answered: wait for the count,
    # not a time. Ticks are added only when fewer came (then `late` below stays 1: no gap is hidden).
    qtbot.waitUntil(lambda: len(probe.gaps) >= 20, timeout=60_000)
    probe.stop()
    assert len(tokens) >= 2  # streamed in batches, not at the end
    last = window.view.messages[-1]
    assert last.role == "assistant" and last.content == done.text and not last.streaming
    html = window.view.toHtml()
    assert "evaluated" in html and "ms to first token" in html  # the line under the answer
    chats = window.sidebar.chat_items
    qtbot.waitUntil(lambda: len(chats()) == 1 and chats()[0].text().startswith("Hello!"), timeout=60_000)
    assert window.gauges.water_bar.value() > 0

    def kv_drawn() -> bool:  # the engine publishes its status at 2 Hz; the gauge draws the latest
        window.gauges.update_now()
        bars = list(window.gauges._kv_bars.values())
        return len(bars) == 1 and bars[0].value() >= 1 and "this chat: 1 hot" in bars[0].share.text()

    qtbot.waitUntil(kv_drawn, timeout=60_000)
    assert window.gauges.ram_app.format().endswith("MiB")
    # The GUI thread never blocked on the engine: ticks kept coming while it loaded and generated.
    gaps = sorted(probe.gaps)
    p99, worst = gaps[int(len(gaps) * 0.99)], gaps[-1]
    asked = probe.elapsed_ms / probe.INTERVAL_MS  # ticks a never-busy loop would have given
    record_property("gui_gap_p99_ms", round(p99, 1))
    record_property("gui_gap_max_ms", round(worst, 1))
    record_property("gui_ticks_of_asked", f"{len(gaps)}/{asked:.0f}")
    print(f"GUI timer gaps while loading and generating: median {statistics.median(gaps):.1f} ms, "
          f"p99 {p99:.1f} ms, max {worst:.1f} ms over {len(gaps)} ticks of {asked:.0f} asked "
          f"in {probe.elapsed_ms:.0f} ms")
    # However fast the machine (a quick answer gives few ticks), the loop kept at least half the
    # asked rate, and every gap but the 1 % longest (at least one: a single late tick on a busy
    # shared VM is the scheduler's) stayed short. bench/gui_latency.py reports the distribution.
    assert len(gaps) >= 20 and len(gaps) >= asked / 2, (len(gaps), asked)
    late = max(1, len(gaps) // 100)
    assert gaps[-late - 1] < 50, gaps[-late - 1:]
    window.close()


def test_stop_keeps_the_partial_answer_and_switching_reloads_history(qtbot, window):
    window.max_tokens = 400
    window.composer.edit.setPlainText("Write a long story about a lighthouse keeper.")
    qtbot.keyClick(window.composer.edit, Qt.Key_Return)
    qtbot.waitUntil(lambda: bool(window.view.messages) and len(window.view.messages[-1].content) > 20,
                    timeout=60_000)
    assert window.composer.send_button.accessibleName() == "Stop"  # one round button: Send becomes Stop
    qtbot.mouseClick(window.composer.send_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: not window.busy, timeout=60_000)
    done = window.last_done
    assert done.stats["finish_reason"] == "cancelled" and done.text
    assert "stopped" in window.view.toHtml()
    first = window.conversation_id
    window.max_tokens = 16
    qtbot.mouseClick(window.new_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: window.conversation_id != first and not window.busy, timeout=30_000)
    send(qtbot, window, "Hi again!")
    chats = window.sidebar.chat_items
    assert window.conversation_id != first and len(chats()) == 2
    item = next(item for item in chats() if item.data(Qt.UserRole) == first)
    window.chat_list.setCurrentItem(item)
    qtbot.waitUntil(lambda: [m.content for m in window.view.messages][1:] == [done.text], timeout=30_000)
    assert [m.role for m in window.view.messages] == ["user", "assistant"]
    window.search.setText(done.text.strip()[:10])  # words of the first chat's answer, not of its title
    qtbot.waitUntil(lambda: sorted(item.isHidden() for item in chats()) == [False, True])
    shown = next(item for item in chats() if not item.isHidden())
    assert shown.data(Qt.UserRole) == first
    window.search.setText("")
    qtbot.waitUntil(lambda: not any(item.isHidden() for item in chats()))


def test_a_model_that_cannot_load_shows_a_banner_and_the_window_stays(qtbot, tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"not a model")
    w = MainWindow(EngineWorker(str(bad), memory=False))
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(w.banner.isVisible, timeout=60_000)
    assert "could not be loaded" in w.banner.text() and "not a GGUF" in w.banner.text()
    assert not w.composer.send_button.isEnabled() and w.isVisible()
    w.close()


def test_every_visible_string_has_a_chinese_translation():
    from app.zh_CN import TABLE

    used = set()
    for path in (ROOT / "app").glob("*.py"):
        used |= set(re.findall(r'\btr\("((?:[^"\\]|\\.)*)"\)', path.read_text(encoding="utf-8")))
    from app.model_manager import COLUMNS

    used |= set(COLUMNS)  # translated through tr(column)
    missing = sorted(s for s in used if s not in TABLE)
    assert not missing, missing


def test_rename_export_and_delete_a_chat(qtbot, window, tmp_path):
    send(qtbot, window, "Hello! Name a colour.")
    cid = window.conversation_id
    window.chat_actions.rename(cid, "", title="Colours 颜色")
    chats = window.sidebar.chat_items
    qtbot.waitUntil(lambda: len(chats()) == 1 and chats()[0].text() == "Colours 颜色", timeout=60_000)
    md, js, page = tmp_path / "c.md", tmp_path / "c.json", tmp_path / "c.html"
    window.chat_actions.export(cid, "md", str(md))
    window.chat_actions.export(cid, "json", str(js))
    window.chat_actions.export(cid, "html", str(page))
    qtbot.waitUntil(lambda: md.exists() and js.exists() and page.exists(), timeout=60_000)
    assert md.read_text(encoding="utf-8").startswith("# Colours 颜色") and "Hello! Name a colour." in md.read_text()
    assert "<title>Colours 颜色</title>" in page.read_text(encoding="utf-8")
    import json

    data = json.loads(js.read_text(encoding="utf-8"))
    assert [m["role"] for m in data["messages"]] == ["user", "assistant"] and data["title"] == "Colours 颜色"
    window.chat_actions.delete(cid, "Colours 颜色", confirmed=True)
    qtbot.waitUntil(lambda: window.chat_list.count() == 0, timeout=60_000)  # no chat left, nor a header
    assert window.conversation_id is None and window.view.messages == []
    assert window.worker.assistant.db.conversation(cid) is None and window.worker.assistant.db.messages(cid) == []


def test_regenerate_edit_and_copy(qtbot, window):
    first = send(qtbot, window, "Name a fruit.")
    window.regenerate()
    assert window.busy
    qtbot.waitUntil(lambda: not window.busy, timeout=60_000)
    again = window.last_done
    assert again.message_id != first.message_id
    assert [m.role for m in window.view.messages] == ["user", "assistant"]
    window.edit_last()
    assert window.composer.edit.toPlainText() == "Name a fruit." and window.chat.editing
    window.composer.edit.setPlainText("Name a vegetable.")
    qtbot.keyClick(window.composer.edit, Qt.Key_Return)
    qtbot.waitUntil(lambda: not window.busy, timeout=60_000)
    assert [m.content for m in window.view.messages][0] == "Name a vegetable."
    assert len(window.view.messages) == 2
    rows = window.worker.assistant.db.messages(window.conversation_id)
    assert [r["superseded_by"] is None for r in rows] == [False, False, False, True, True]
    window.copy_answer()
    from PySide6.QtGui import QGuiApplication

    assert QGuiApplication.clipboard().text() == window.last_done.text


def test_actions_wait_for_something_to_act_on_and_the_status_says_who_answered(qtbot, window):
    from app.message_actions import actions_for
    from app.render import routing_text

    def offered(i):
        return [a for a, _, _ in actions_for(window.view.messages[i], window.view.idle)]

    assert window.view.messages == []  # an empty chat: no message to act on
    done = send(qtbot, window, "Name a fruit.")
    qtbot.waitUntil(lambda: window.view.messages[-1].id == done.message_id, timeout=30_000)
    assert offered(0) == ["copy", "edit", "delete"]
    assert offered(1) == ["copy", "markdown", "regenerate", "branch", "delete"]
    # Where it was answered, in a user's words; why that tier is the answer's info popover, not the status line
    assert window.status_label.text() in ("Answered on the CPU model", "Answered on the GPU model")
    assert done.route_reason not in window.status_label.text()
    assert done.route_reason in routing_text(window.view.messages[1].stats)
    window.chat_actions.delete(window.conversation_id, "", confirmed=True)
    assert window.view.messages == []


def test_settings_changed_in_the_dialog_apply_live_or_say_they_wait(qtbot, window):
    """The dialog writes the file through its own Settings; the engine re-reads it, applies what it
    can at once and the window names what waits for the next start."""
    from engine.api import Settings

    dialog_side = Settings()
    dialog_side.set("memory.k", 1)
    dialog_side.set("router.max_switch_s", 4.0)
    dialog_side.set("runtime.n_ctx", 1024)
    window.doors.apply_settings(["memory.k", "router.max_switch_s", "runtime.n_ctx"])
    qtbot.waitUntil(lambda: "runtime.n_ctx" in window.status_label.text(), timeout=60_000)
    assert "memory.k" not in window.status_label.text()  # applied, not waiting
    a = window.worker.assistant
    assert (a.config.memory_k, a.config.max_switch_s) == (1, 4.0)
    # The context size waits for a restart (the loaded model as its thread published it: `a.backend`
    # is the engine thread's to look up).
    assert [m["n_ctx"] for m in a.status()["models"]] == [2048]
