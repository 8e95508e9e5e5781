"""The API server's files that several servers share (issue 22): one key however many start at once,
and the map of unstored API conversations keeping every server's entries."""

import json
import subprocess
import sys
import threading
from pathlib import Path

from engine.server import api_key_path, load_api_key
from engine.server.history import ApiConversations, History

ROOT = Path(__file__).resolve().parent.parent



class Engine:
    """What ApiConversations asks of the assistant (also imported by the writer processes)."""

    def __init__(self, first_id: int = 0):
        self.next_id, self.deleted = first_id, []

    def new_conversation_from(self, earlier, system) -> int:
        self.next_id += 1
        return self.next_id

    def delete_conversation(self, cid: int) -> None:
        self.deleted.append(cid)


# Each process opens 200 unstored API conversations (ids base+1..base+200) and then ends without
# closing (a crash): after each, its own ids so far and every id the other wrote must be in the file.
WRITER = """
import json, sys, time
from pathlib import Path
from engine.server.history import ApiConversations, History
from tests.test_api_files_concurrency import Engine

path, base, ready = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
(ready / str(base)).touch()
deadline = time.monotonic() + 120
while len(list(ready.iterdir())) < 2:  # both started: the writes overlap
    if time.monotonic() > deadline:
        sys.exit("the other writer never started")
    time.sleep(0.01)


def ids_in_file():
    data = json.loads(path.read_text(encoding="utf-8"))
    return {cid for ids in (data.values() if isinstance(data, dict) else [data]) for cid in ids}


conversations, engine, theirs = ApiConversations(store=False, pending_file=path), Engine(base), set()
for i in range(200):
    conversations.open(engine, History((("user", f"question {i}"),), 0))
    ids, mine = ids_in_file(), set(range(base + 1, base + i + 2))
    if not mine <= ids:
        sys.exit(f"lost our own {sorted(mine - ids)[:5]}")
    if not theirs <= ids:
        sys.exit(f"lost the other's {sorted(theirs - ids)[:5]}")
    theirs = ids - mine
"""


def one_question(n: int = 0) -> History:
    return History((("user", f"question {n}"),), 0)


def test_two_processes_adding_conversations_lose_none(tmp_path):
    path, ready = tmp_path / "server_conversations.json", tmp_path / "ready"
    ready.mkdir()
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(base), str(ready)], cwd=ROOT,
                              stderr=subprocess.PIPE, text=True) for base in (0, 1000)]
    errors = [p.communicate(timeout=300)[1] for p in procs]  # generous: two cores shared with others
    assert [p.returncode for p in procs] == [0, 0], errors
    both = set(range(1, 201)) | set(range(1001, 1201))
    data = json.loads(path.read_text(encoding="utf-8"))
    assert {cid for ids in data.values() for cid in ids} == both

    engine = Engine()
    assert ApiConversations(store=False, pending_file=path).recover(engine) == 400  # both ended: leftovers
    assert set(engine.deleted) == both and not path.exists()


def test_a_second_server_leaves_the_running_ones_conversations(tmp_path):
    path, engine = tmp_path / "server_conversations.json", Engine()
    first, second = ApiConversations(False, pending_file=path), ApiConversations(False, pending_file=path)
    cid = first.open(engine, one_question())
    assert second.recover(engine) == 0 and engine.deleted == []  # the first one still serves it
    second.open(engine, one_question(1))
    first.close(engine)
    assert engine.deleted == [cid] and len(json.loads(path.read_text(encoding="utf-8"))) == 1


def test_leftovers_in_the_earlier_format_are_still_deleted(tmp_path):
    path, engine = tmp_path / "server_conversations.json", Engine()
    path.write_text("[5, 6]", encoding="utf-8")
    assert ApiConversations(False, pending_file=path).recover(engine) == 2
    assert engine.deleted == [5, 6] and not path.exists()


def test_servers_starting_together_share_one_key(assistant_home):
    for _ in range(20):
        api_key_path().unlink(missing_ok=True)
        start, keys = threading.Barrier(6), []

        def serve() -> None:
            start.wait(30)
            keys.append(load_api_key(create=True))

        threads = [threading.Thread(target=serve) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert len(keys) == 6 and set(keys) == {api_key_path().read_text(encoding="utf-8").strip()}
