"""The window's API server is started and stopped on an "api-control" thread, which touches none of
the engine worker's state: it asks the engine thread for the Assistant and posts the chat list's
filter there (issue 22). The worker's `hidden` is the engine thread's (engine/config/ownership.py)."""

from __future__ import annotations

import threading

import pytest

from engine.config.ownership import WrongThread
from tests.fake_backend import fakes, make_assistant  # noqa: F401

from .test_api_server_setting import enable, free_port, through_settings, window  # noqa: F401


def test_the_chat_lists_filter_is_set_and_cleared_on_the_engine_thread(qtbot, window, monkeypatch):
    worker = window.worker
    with pytest.raises(WrongThread, match="Engine belongs to thread .* but was called from thread .MainThread."):
        worker.hidden  # the GUI thread: not its owner
    enable(qtbot, window, monkeypatch, free_port())
    server = window.api_server._server
    qtbot.waitUntil(lambda: worker._hidden == server.unlisted, timeout=10_000)  # posted: after what was queued

    def off(section):
        section.enabled.setChecked(False)

    through_settings(qtbot, window, monkeypatch, off)
    assert not window.api_server.state["running"], window.api_server.state
    qtbot.waitUntil(lambda: worker._hidden is tuple, timeout=10_000)
    seen = {}
    worker.post(lambda: seen.update(hidden=worker.hidden, thread=threading.get_ident()))  # the owner reads it
    qtbot.waitUntil(lambda: "hidden" in seen, timeout=10_000)
    assert seen == {"hidden": tuple, "thread": worker.thread_id}
