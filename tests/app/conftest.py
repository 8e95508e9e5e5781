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
