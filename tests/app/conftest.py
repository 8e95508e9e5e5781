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
def every_runner_closed():
    """A test leaves no Runner thread running: one left open outlives its widgets, and a QThread
    destroyed while it runs aborts the process (app/background.py)."""
    from app.background import _RUNNING

    before = set(_RUNNING)
    yield
    left = [t.objectName() for t in set(_RUNNING) - before]
    assert not left, f"Runner threads left running: {left}"
