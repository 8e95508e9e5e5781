"""Typed settings: a bad value in the file or the environment gives the default and a problem the
front-ends show; nothing invalid is ever stored."""

import json
import os
import threading

import pytest

from engine.config.settings import DEFAULTS, Settings


def write(path, data):
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_values_of_the_wrong_type_or_range_give_the_default_and_say_so(tmp_path):
    s = Settings(write(tmp_path / "s.json", {"runtime.n_ctx": "abc", "memory.k": 2, "ui.theme": "pink",
                                             "cascade.enabled": 1, "cascade.threshold": 3.5, "l3.timeout_s": 30.0}))
    assert s.get("runtime.n_ctx") == DEFAULTS["runtime.n_ctx"] and s.get("memory.k") == 2
    assert s.get("ui.theme") == "system" and s.get("cascade.enabled") is True
    assert s.get("cascade.threshold") == 0.0 and s.get("l3.timeout_s") == 30 and isinstance(s.get("l3.timeout_s"), int)
    problems = "\n".join(s.problems())
    for key in ("runtime.n_ctx", "ui.theme", "cascade.enabled", "cascade.threshold"):
        assert key in problems
    assert "memory.k" not in problems


def test_a_bad_environment_value_falls_back_too(tmp_path, monkeypatch):
    s = Settings(tmp_path / "none.json")
    monkeypatch.setenv("ASSISTANT_L3_TIMEOUT_S", "soon")
    assert s.get("l3.timeout_s") == DEFAULTS["l3.timeout_s"] and "ASSISTANT_L3_TIMEOUT_S" in s.problems()[0]
    monkeypatch.setenv("ASSISTANT_L3_TIMEOUT_S", "30")
    assert s.get("l3.timeout_s") == 30


def test_a_file_that_is_not_an_object_is_kept_aside(tmp_path):
    path = tmp_path / "s.json"
    path.write_text("[1, 2]", encoding="utf-8")
    s = Settings(path)
    assert s.get("runtime.n_ctx") == DEFAULTS["runtime.n_ctx"] and (tmp_path / "s.json.bad").exists()
    assert "unreadable" in s.problems()[0]


def test_set_refuses_invalid_values_and_replaces_an_invalid_stored_one(tmp_path):
    s = Settings(write(tmp_path / "s.json", {"memory.k": "many"}))
    with pytest.raises(ValueError, match="memory.k"):
        s.set("memory.k", -3)
    done = threading.Event()
    threading.Thread(target=lambda: (s.set("memory.k", 4), done.set()), daemon=True).start()
    assert done.wait(5), "set() over an invalid stored value deadlocked"
    assert Settings(tmp_path / "s.json").get("memory.k") == 4


def test_get_and_reload_see_what_another_settings_object_wrote(tmp_path):
    path = tmp_path / "s.json"
    a, b = Settings(path), Settings(path)
    b.set("router.max_switch_s", 3.0)
    assert a.get("router.max_switch_s") == 3.0  # without a reload since issue 22
    # A rewrite in place keeping the file's size and time (get() cannot tell): reload reads it.
    seen = path.stat()
    path.write_text(path.read_text(encoding="utf-8").replace("3.0", "4.0"), encoding="utf-8")
    os.utime(path, ns=(seen.st_atime_ns, seen.st_mtime_ns))
    a.reload()
    assert a.get("router.max_switch_s") == 4.0
