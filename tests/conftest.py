import os
import sys
from pathlib import Path

import pytest

# Show Mesa's lavapipe (a software Vulkan GPU) to llama.cpp, which hides CPU-type Vulkan devices by
# default: tests/model/test_vulkan.py runs the GPU path on it. The engine's "auto" choice never
# picks a software device, so every other test still plans and runs on the CPU. Set before ggml's
# registry loads (once per process, at the first model load or device query).
os.environ.setdefault("GGML_VK_VISIBLE_DEVICES", "0")

# Each owned object (a model's backend, an Assistant, the window's engine worker) raises WrongThread
# when a thread other than its owner calls it (engine/config/ownership.py): the test that makes a slip fails
# the day it is written. The environment carries the check into the CLI and app processes tests start.
os.environ["ASSISTANT_CHECK_OWNERS"] = "1"
from engine.config import ownership  # noqa: E402 - after the environment it reads

ownership.enable()

ROOT = Path(__file__).resolve().parent.parent
MODELS = {
    "demo-small": ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf",
    "demo-int4": ROOT / "models" / "gemma-3-270m-q4_k_m.gguf",
}


def pytest_report_header(config):
    """Which CPU kernels llama.cpp runs here: the numerics tests hold for any (make test runs them
    under two; tests/second_variant.py). A variant asked for and not loaded is a failed run."""
    from engine.models.ggml_registry import CPU_VARIANT_ENV, registry

    loaded = registry().cpu_variant()
    wanted = os.environ.get(CPU_VARIANT_ENV)
    if wanted and loaded != wanted:
        raise pytest.UsageError(f"{CPU_VARIANT_ENV}={wanted}, but ggml loaded the {loaded} CPU variant")
    return f"ggml CPU kernels: {loaded or 'built in (no variants)'}" + (f" (as {CPU_VARIANT_ENV} asks)" if wanted else "")


def pytest_collection_modifyitems(items):
    """Everything under tests/model/ loads a real GGUF: mark it so `-m "not model"` stays fast."""
    for item in items:
        path = Path(str(item.fspath))
        if path.is_relative_to(ROOT / "tests") and "model" in path.relative_to(ROOT / "tests").parts[:-1]:
            item.add_marker(pytest.mark.model)


@pytest.fixture(autouse=True)
def assistant_home(tmp_path, monkeypatch):
    """Every test gets its own app data dir (database, logs)."""
    home = tmp_path / "home"
    monkeypatch.setenv("ASSISTANT_HOME", str(home))
    return home


@pytest.fixture(autouse=True)
def no_unanswered_question(monkeypatch):
    """A modal message box nobody answers would hang the run until CI's limit: in a test it fails
    at once, naming itself. A test that wants an answer replaces the window's `confirm` (or the box)."""
    if "PySide6.QtWidgets" not in sys.modules:
        return
    from PySide6.QtWidgets import QMessageBox

    def unanswered(kind):
        def ask(parent, title, text, *rest, **kw):
            raise AssertionError(f"a modal QMessageBox.{kind} was opened in a test: {title!r}: {text!r}")
        return staticmethod(ask)

    for kind in ("question", "warning", "information", "critical"):
        monkeypatch.setattr(QMessageBox, kind, unanswered(kind))


@pytest.fixture(scope="session")
def model_paths():
    missing = [str(p) for p in MODELS.values() if not p.is_file()]
    if missing:
        pytest.fail(f"demo models missing ({', '.join(missing)}): run `make models`")
    return MODELS
