"""Settings never lose a change (issue 22): every writer merges its changed keys into what the file
holds now, under a lock that holds across processes; readers see other processes' changes."""

import json
import subprocess
import sys
from pathlib import Path

from engine.config.settings import DEFAULTS, Settings

ROOT = Path(__file__).resolve().parent.parent

# Each process sets its own key to 0..199; after each write its own value must be in the file and
# the other's must never go back (a stale whole-file write would revert it).
WRITER = """
import json, sys, time
from pathlib import Path
from engine.config.settings import Settings

path, key, other, ready = Path(sys.argv[1]), sys.argv[2], sys.argv[3], Path(sys.argv[4])
(ready / key).touch()
deadline = time.monotonic() + 120
while len(list(ready.iterdir())) < 2:  # both started: the writes overlap
    if time.monotonic() > deadline:
        sys.exit("the other writer never started")
    time.sleep(0.01)
settings, seen = Settings(path), -1
for i in range(200):
    settings.set(key, i)
    data = json.loads(path.read_text(encoding="utf-8"))
    if data.get(key) != i:
        sys.exit(f"{key} = {i} was lost: the file says {data.get(key)}")
    if data.get(other, -1) < seen:
        sys.exit(f"{other} went back from {seen} to {data.get(other, -1)}")
    seen = data.get(other, -1)
"""


def test_two_objects_keep_each_others_change(assistant_home):
    """The issue's example: the last writer no longer wins."""
    a, b = Settings(), Settings()
    a.set("router.mode", "L1")
    b.set("docs.allow_remote", True)
    fresh = Settings()
    assert fresh.get("router.mode") == "L1" and fresh.get("docs.allow_remote") is True


def test_get_sees_another_writers_change_without_reload(tmp_path):
    a, b = Settings(tmp_path / "s.json"), Settings(tmp_path / "s.json")
    assert a.get("router.max_switch_s") == 1.5
    b.set("router.max_switch_s", 3.0)
    assert a.get("router.max_switch_s") == 3.0
    (tmp_path / "s.json").unlink()  # removed by hand: the defaults again
    assert a.get("router.max_switch_s") == 1.5


def test_an_unchanged_value_is_neither_written_nor_signalled(tmp_path):
    path = tmp_path / "s.json"
    s, heard = Settings(path), []
    s.on_change(lambda key, value: heard.append((key, value)))
    s.set("memory.k", DEFAULTS["memory.k"])
    assert not path.exists() and heard == []
    s.set("memory.k", 7)
    Settings(path).set("memory.k", 8)  # another writer
    s.set("memory.k", 8)  # already so in the file: nothing to say
    assert heard == [("memory.k", 7)]
    s.remove_listener(heard.append)  # not a listener: ignored
    assert json.loads(path.read_text(encoding="utf-8")) == {"memory.k": 8}


def test_a_file_damaged_while_running_is_kept_aside_and_the_change_still_lands(tmp_path):
    path = tmp_path / "s.json"
    s = Settings(path)
    s.set("memory.k", 7)
    path.write_text("{not json", encoding="utf-8")  # a hand edit gone wrong
    assert s.get("memory.k") == DEFAULTS["memory.k"]
    assert "unreadable" in s.problems()[0] and (tmp_path / "s.json.bad").read_text() == "{not json"
    s.set("docs.k", 6)
    assert json.loads(path.read_text(encoding="utf-8")) == {"docs.k": 6}


def test_the_shared_object_is_one_per_user_dir(assistant_home, tmp_path, monkeypatch):
    shared = Settings.shared()
    assert Settings.shared() is shared and shared.path == assistant_home / "settings.json"
    monkeypatch.setenv("ASSISTANT_HOME", str(tmp_path / "other"))  # a test's own data dir
    assert Settings.shared().path == tmp_path / "other" / "settings.json"


def test_two_processes_setting_different_keys_lose_no_write(tmp_path):
    path, ready = tmp_path / "settings.json", tmp_path / "ready"
    ready.mkdir()
    Settings(path).set("router.mode", "L2")  # a third key neither process touches
    keys = ("summary.every_turns", "retrieval.max_tokens")
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), key, other, str(ready)], cwd=ROOT,
                              stderr=subprocess.PIPE, text=True)
             for key, other in (keys, keys[::-1])]
    errors = [p.communicate(timeout=300)[1] for p in procs]  # generous: two cores shared with others
    assert [p.returncode for p in procs] == [0, 0], errors
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data == {"router.mode": "L2", "summary.every_turns": 199, "retrieval.max_tokens": 199}
