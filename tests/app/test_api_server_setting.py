"""Settings → "Local API server" in the window (issue 16): off by default (no socket), on it serves
the window's own Assistant on loopback with the key the section shows, API jobs run on the window's
engine thread and take turns with its chats, a new key or a turned-off switch applies at once.
The engine is the scripted fake backend (tests/fake_backend.py): turns are deterministic and a
Gate holds one where the test needs it. Screenshots of the section in English and Chinese
(ASSISTANT_SCREENSHOTS=docs/screenshots to refresh)."""

from __future__ import annotations

import socket
import threading
import time

import httpx
import pytest
from openai import OpenAI
from PySide6.QtCore import QCoreApplication, QTimer
from PySide6.QtWidgets import QScrollArea

from app.engine_worker import EngineWorker
from app.main_window import MainWindow
from app.selftest import listening_sockets
from app.settings_dialog import SettingsDialog
from engine.api import Settings
from engine.server import load_api_key
from tests.fake_backend import Gate, fakes, make_assistant  # noqa: F401

from .helpers import in_language, save_image, screenshot_dir


class FakeEngine(EngineWorker):
    """The window's engine on the fake backend; records which thread opened it and every send."""

    def __init__(self, make):
        super().__init__(model="fake", memory=False)
        self._make = make
        self.thread_id: int | None = None
        self.sends: list[tuple[str, int, str]] = []  # ("start" | "end", thread ident, message)

    def open_assistant(self):
        self.thread_id = threading.get_ident()  # the window's engine QThread
        a = self._make()
        send = a.send

        def recorded(cid, text, *args, **kwargs):
            self.sends.append(("start", threading.get_ident(), text))
            yield from send(cid, text, *args, **kwargs)
            self.sends.append(("end", threading.get_ident(), text))

        a.send = recorded
        return a


@pytest.fixture
def window(qtbot, fakes, make_assistant):
    model = str(fakes.model_file("m", decode_s_per_token=0.01))
    w = MainWindow(FakeEngine(lambda: make_assistant(model)), temperature=0.0, max_tokens=16)
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: w.engine_ready or w.banner.isVisible(), timeout=30_000)
    assert w.engine_ready, w.banner.text()
    yield w
    w.close()  # before the fake assistants close: the server stops, then the engine


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def through_settings(qtbot, w: MainWindow, monkeypatch, change) -> SettingsDialog:
    """Settings opened from the window, `change(section)` as the user's edits, Save; returns once the
    server has followed."""
    opened = []

    def run(dialog):
        opened.append(dialog)
        change(dialog.api_server)
        dialog.save()
        return dialog.result()

    monkeypatch.setattr(SettingsDialog, "exec", run)
    w.open_settings()
    qtbot.waitUntil(lambda: w.api_server.pending is not None and w.api_server.pending.done(), timeout=60_000)
    # The request emitted its state signal (queued to this thread) before it finished: deliver it now,
    # rather than hoping a 20 ms wait is long enough.
    QCoreApplication.sendPostedEvents()
    return opened[0]


def models(url: str, key: str | None) -> httpx.Response:
    return httpx.get(url + "/models", headers={"Authorization": f"Bearer {key}"} if key else {}, timeout=10)


def refused_bind(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return False
        except OSError:
            return True


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return False
    except ConnectionRefusedError:
        return True


def enable(qtbot, w, monkeypatch, port: int) -> SettingsDialog:
    def on(section):
        section.enabled.setChecked(True)
        section.port.setValue(port)

    dialog = through_settings(qtbot, w, monkeypatch, on)
    assert w.api_server.state["running"], w.api_server.state
    return dialog


def test_off_by_default_then_serves_models_with_the_shown_key(qtbot, window, monkeypatch):
    assert not Settings().get("server.enabled") and not window.api_server.state["running"]
    assert listening_sockets() == []  # the selftest's no_listening_socket holds in the window
    assert load_api_key(create=False) is None  # no key until the server is first turned on
    port = free_port()
    dialog = enable(qtbot, window, monkeypatch, port)
    key = dialog.api_server.key.text()
    url = f"http://127.0.0.1:{port}/v1"
    assert key == load_api_key(create=False) and len(key) >= 40
    assert dialog.api_server.url.text() == url and window.api_server.state["url"] == url
    assert window.status_label.text() == f"Local API server at {url}"
    assert models(url, None).status_code == 401
    assert models(url, key[:-1] + "x").status_code == 401
    r = models(url, key)
    assert r.status_code == 200 and [m["id"] for m in r.json()["data"]][:4] == ["auto", "L1", "L2", "L3"]
    listening = listening_sockets()
    assert len(listening) == 1 and "'127.0.0.1'" in listening[0] and str(port) in listening[0]  # loopback only


def test_an_openai_chat_answers_on_the_window_engine_while_the_window_stays_responsive(qtbot, window, monkeypatch):
    port = free_port()
    key = enable(qtbot, window, monkeypatch, port).api_server.key.text()
    ticks: list[float] = []
    timer = QTimer()
    timer.setInterval(10)
    timer.timeout.connect(lambda: ticks.append(time.perf_counter()))
    result = {}

    def ask():
        client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key, max_retries=0, timeout=30)
        result["r"] = client.chat.completions.create(model="L1", max_tokens=16,
                                                     messages=[{"role": "user", "content": "hello from a program"}])

    timer.start()
    t = threading.Thread(target=ask)
    t.start()
    qtbot.waitUntil(lambda: not t.is_alive(), timeout=30_000)
    timer.stop()
    r = result["r"]
    assert r.choices[0].message.content == "Answer 1." and r.usage.completion_tokens == 9
    gaps = [b - a for a, b in zip(ticks, ticks[1:])]
    assert len(ticks) > 5 and max(gaps) < 0.5  # a generous stall probe: the GUI loop kept turning
    engine = window.worker
    assert [(kind, text) for kind, _, text in engine.sends] == [("start", "hello from a program"),
                                                                 ("end", "hello from a program")]
    assert {ident for _, ident, _ in engine.sends} == {engine.thread_id}
    # Unstored (the default): the API conversation never shows in the window's chat list.
    qtbot.wait(100)
    assert window.sidebar.chat_items() == []


def test_a_window_turn_and_an_api_turn_issued_together_take_turns_on_one_thread(qtbot, window, monkeypatch, fakes):
    port = free_port()
    key = enable(qtbot, window, monkeypatch, port).api_server.key.text()
    server = window.api_server._server
    gate = Gate(lambda backend, n: n == 2)  # the window's answer, three tokens in
    fakes.backend("m").on_sample.append(gate)
    window.send_message("from the window")
    qtbot.waitUntil(gate.reached.is_set, timeout=10_000)  # the GUI loop makes the chat, then sends
    result = {}

    def ask():
        result["r"] = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", timeout=30,
                                 headers={"Authorization": f"Bearer {key}"},
                                 json={"model": "L1", "max_tokens": 16,
                                       "messages": [{"role": "user", "content": "from a program"}]})

    t = threading.Thread(target=ask)
    t.start()
    qtbot.waitUntil(lambda: server.engine.running is not None, timeout=10_000)
    qtbot.wait(100)
    assert not server.engine.running.started  # posted to the engine thread, behind the window's turn
    gate.release()
    qtbot.waitUntil(lambda: not window.busy and not t.is_alive(), timeout=30_000)
    assert result["r"].status_code == 200 and window.last_done.text == "Answer 1."
    assert result["r"].json()["choices"][0]["message"]["content"] == "Answer 2."
    engine = window.worker
    assert [(kind, text) for kind, _, text in engine.sends] == [
        ("start", "from the window"), ("end", "from the window"),
        ("start", "from a program"), ("end", "from a program")]
    assert {ident for _, ident, _ in engine.sends} == {engine.thread_id}  # one thread: never at once


def test_a_new_key_applies_at_once_and_turning_it_off_closes_the_port(qtbot, window, monkeypatch):
    port = free_port()
    old = enable(qtbot, window, monkeypatch, port).api_server.key.text()

    def renew(section):
        section.confirm = lambda title, text: True
        section.new_key.click()

    new = through_settings(qtbot, window, monkeypatch, renew).api_server.key.text()
    url = f"http://127.0.0.1:{port}/v1"
    assert new != old and window.api_server.state["running"]
    assert models(url, old).status_code == 401 and models(url, new).status_code == 200
    through_settings(qtbot, window, monkeypatch, lambda section: section.enabled.setChecked(False))
    assert not window.api_server.state["running"] and Settings().get("server.enabled") is False
    assert window.status_label.text() == "Local API server stopped"
    assert refused(port) and listening_sockets() == []


def test_a_port_in_use_is_said_in_the_banner(qtbot, window, monkeypatch):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        def on(section):
            section.enabled.setChecked(True)
            section.port.setValue(port)

        through_settings(qtbot, window, monkeypatch, on)
        assert not window.api_server.state["running"]
        assert f"port {port}" in window.banner.text() and window.banner.isVisible()


def test_other_computers_need_a_confirmation_and_origins_are_checked(qtbot, assistant_home, monkeypatch):
    settings = Settings()
    dialog = SettingsDialog(settings)
    qtbot.addWidget(dialog)
    section = dialog.api_server
    section.confirm = lambda title, text: False
    section.network.click()
    assert not section.network.isChecked()  # the user said no
    section.confirm = lambda title, text: True
    section.network.click()
    assert section.network.isChecked() and "Other computers: http://" in section.url.text()
    section.cors.setText("localhost:3000")
    warned = []
    monkeypatch.setattr("app.settings_dialog.QMessageBox.warning", lambda *a: warned.append(a[2]))
    dialog.save()
    assert warned and "localhost:3000" in warned[0] and settings.get("server.allow_network") is False
    section.cors.setText("http://localhost:3000, https://app.example")
    section.store.setChecked(True)
    dialog.save()
    assert (settings.get("server.allow_network"), settings.get("server.host")) == (True, "0.0.0.0")
    assert settings.get("server.cors_origins") == "http://localhost:3000 https://app.example"
    assert settings.get("server.store_conversations") is True and settings.get("server.enabled") is False
    dialog = SettingsDialog(settings)
    qtbot.addWidget(dialog)
    dialog.api_server.network.click()  # unchecking asks nothing
    dialog.save()
    assert (settings.get("server.allow_network"), settings.get("server.host")) == (False, "127.0.0.1")


def test_screenshots_of_the_section_running(qtbot, window, monkeypatch, tmp_path):
    port = 8765 if not refused_bind(8765) else free_port()  # the default port, as users see it, when free
    enable(qtbot, window, monkeypatch, port)
    out = screenshot_dir(tmp_path)
    for language in ("en", "zh_CN"):
        with in_language(language):
            dialog = SettingsDialog(Settings(), window, server_status=window.api_server.describe())
            qtbot.addWidget(dialog)
            dialog.resize(640, 760)
            dialog.show()
            dialog.findChild(QScrollArea).ensureWidgetVisible(dialog.api_server)
            qtbot.wait(50)
            assert dialog.api_server.status.text() == (f"Running at http://127.0.0.1:{port}/v1" if language == "en"
                                                       else f"正在运行：http://127.0.0.1:{port}/v1")
            save_image(dialog.api_server.grab().toImage(), out / f"settings-api-server-{language}.png")
            dialog.close()
