import os
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items):
    """Everything under tests/app/ opens Qt windows (offscreen) and loads the demo model."""
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.gui)
            item.add_marker(pytest.mark.model)


@pytest.fixture(autouse=True)
def gui_thread_gc(qapp):
    """Cycles are collected on the GUI thread, as the app has it (app/gc_guard.py): a Qt object in a
    cycle freed on a Runner's thread crashed a test run now and then."""
    from app import gc_guard

    gc_guard.install(qapp)
    yield
    gc_guard.uninstall(qapp)  # the tests after tests/app/ run with Python's own collector


@pytest.fixture(autouse=True)
def every_runner_closed():
    """A test leaves no Runner thread running: one left open outlives its widgets, and a QThread
    destroyed while it runs aborts the process (app/background.py)."""
    from app.background import _RUNNING

    before = set(_RUNNING)
    yield
    left = [t.objectName() for t in set(_RUNNING) - before]
    assert not left, f"Runner threads left running: {left}"
