"""Resource faults: the disk fills while the database or a KV snapshot is written, the data folder
is read-only, the L3 endpoint hangs, there is no VRAM. Expected each time: a clear error, nothing
committed is lost, and the app keeps running.

How the faults are made (Linux):
- disk full: as root with `unshare`, the data folder is a small tmpfs in a private mount namespace,
  filled with a file (real ENOSPC; the mount dies with the process). Otherwise RLIMIT_FSIZE caps
  every file at its current size (EFBIG, SIGXFSZ ignored; SQLite calls it "disk I/O error").
- read-only folder: chmod 0o500; as root (which ignores permission bits) a read-only bind mount of
  the folder in a private mount namespace (EROFS). Dropping to `nobody` does not work here: the
  venv's interpreter lives under /root (mode 0700).
Already proven elsewhere: `tests/model/test_remote.py` (unreachable endpoint, HTTP errors, retries),
`tests/model/test_two_tier.py::test_l3_end_to_end_then_falls_back_when_server_stops` (a stopped L3).
"""

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from engine.inference.backend import LoadParams
from engine.inference.manager import ModelManager
from tests.fake_backend import FakeGPU
from engine.api import Assistant, EngineConfig, InputError, TurnDone
from engine.config.paths import db_path
from engine.inference.remote import RemoteConfig
from engine.storage import Database
from tests.model.helpers import greedy
from tests.util import cli, cli_env

pytestmark = pytest.mark.model

ROOT = Path(__file__).resolve().parents[2]
# One thread: two spinning llama.cpp threads crawl on a shared 2-core machine; speed is not tested here.
PARAMS = LoadParams(n_ctx=1024, n_threads=1)

# ---- disk full ----------------------------------------------------------------------------------

PRELUDE = r'''
import json, os, resource, signal, sys
from pathlib import Path

from engine.inference.backend import LoadParams, SamplingParams
from engine.api import Assistant, EngineConfig, TurnDone
from engine.inference.generate import GenerateParams
from engine.config.paths import db_path, user_dir
from engine.storage import Database

MODE = sys.argv[1]
HOME = user_dir()
PARAMS = LoadParams(n_ctx=1024, n_threads=1)
GREEDY = GenerateParams(SamplingParams(temperature=0.0, repeat_penalty=1.0, seed=1), max_tokens=8)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # rlimit mode: EFBIG instead of a killed process
out = {"mode": MODE}


def fill():
    """From now on the disk is full."""
    if MODE == "tmpfs":
        fd = os.open(HOME / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
        for block in (1 << 20, 1 << 12, 1):
            try:
                while True:
                    os.write(fd, b"\0" * block)
            except OSError:
                pass
        os.close(fd)
    else:
        largest = max(p.stat().st_size for p in HOME.rglob("*") if p.is_file())
        resource.setrlimit(resource.RLIMIT_FSIZE, (largest, resource.RLIM_INFINITY))


def free():
    """The user made room."""
    if MODE == "tmpfs":
        (HOME / "filler").unlink()
    else:
        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))


def turn(a, cid, text, on_first=None, flush_s=1.0):
    done = None
    for i, item in enumerate(a.send(cid, text, GREEDY, flush_s=flush_s)):
        if i == 0 and on_first is not None:
            out["shown_before_full"] = item.text
            on_first()
        if isinstance(item, TurnDone):
            done = item
    return done


def attempt(name, *args, **kw):
    try:
        done = turn(*args, **kw)
        out[name] = {"ok": done.text, "stats": done.stats.as_json()}
    except Exception as exc:  # what the Assistant's caller gets
        out[name] = {"error": type(exc).__name__, "message": str(exc)}
'''

DB_SCENARIO = PRELUDE + r'''
db = Database(db_path())
a = Assistant(db, EngineConfig(model="demo-small", load=PARAMS, kv_tiers=False))
cid = a.new_conversation()
attempt("before", a, cid, "Hello!")
fill()
attempt("full", a, cid, "Are you there?")  # the user message cannot be stored
free()
attempt("fills_mid_answer", a, cid, "Tell me about the sea.", on_first=fill, flush_s=0.0)  # flushed per token
free()
attempt("after", a, cid, "Thanks!")
a.close()
db.close()
db = Database(db_path())  # what the next start reads
out["rows"] = [[m["role"], m["content"], m["status"]] for m in db.messages(cid)]
out["integrity"] = db.integrity_check()
db.close()
print(json.dumps(out))
'''

KV_SCENARIO = PRELUDE + r'''
LONG = "Answer briefly and politely, in plain words, without lists. " * 22  # over 256 tokens: worth a file
db = Database(db_path())
# No checkpoint after the turn: the state's one write is the exit's, and it meets the full disk
# (a checkpoint's write goes through the same ColdTier.write).
a = Assistant(db, EngineConfig(model="demo-small", load=PARAMS, kv_cold_mb=100, kv_checkpoint=False))
cid = a.new_conversation(system_prompt=LONG)
attempt("before", a, cid, "Hello!")
fill()
a.close()  # the model's state goes warm -> cold file: the write meets the full disk
out["cold_full"] = vars(a.kv.cold.stats)
out["files_full"] = sorted(p.name for p in (HOME / "kv").glob("*")) if (HOME / "kv").exists() else []
free()
db.close()
db = Database(db_path())
a = Assistant(db, EngineConfig(model="demo-small", load=PARAMS, kv_cold_mb=100, kv_checkpoint=False))  # the next start
attempt("restarted", a, cid, "And again?")
a.close()
out["cold_free"] = vars(a.kv.cold.stats)
out["files_free"] = sorted(p.name for p in (HOME / "kv").glob("*"))
out["rows"] = [[m["role"], m["content"], m["status"]] for m in db.messages(cid)]
out["integrity"] = db.integrity_check()
db.close()
print(json.dumps(out))
'''


def _tmpfs_works(probe_dir: Path) -> bool:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    probe_dir.mkdir()
    cmd = f'mount -t tmpfs -o size=1m tmpfs "{probe_dir}" && umount "{probe_dir}"'
    return subprocess.run(["unshare", "-m", "sh", "-c", cmd], capture_output=True).returncode == 0


def run_on_small_disk(script: str, home: Path, tmp_path: Path, size_mb: int = 64) -> dict:
    """Run `script` with its data folder on a disk it can fill; its JSON report."""
    home.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "scenario.py"
    path.write_text(script)
    env = dict(cli_env(home), PYTHONPATH=str(ROOT))
    if _tmpfs_works(tmp_path / "probe"):
        inner = f'mount -t tmpfs -o size={size_mb}m tmpfs "{home}" && exec "{sys.executable}" "{path}" tmpfs'
        argv = ["unshare", "-m", "sh", "-c", inner]
    else:
        argv = [sys.executable, str(path), "rlimit"]
    proc = subprocess.run(argv, capture_output=True, env=env, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    assert "Traceback" not in proc.stderr.decode(), proc.stderr.decode()[-3000:]
    return json.loads(proc.stdout.decode().splitlines()[-1])


STORAGE_HINT = "Is the disk full or the data folder read-only?"


def test_disk_full_while_writing_the_database(assistant_home, tmp_path, model_paths):
    out = run_on_small_disk(DB_SCENARIO, assistant_home, tmp_path)
    print("disk full made with", out["mode"])
    assert "ok" in out["before"]
    for step in ("full", "fills_mid_answer"):  # a clear error for the user, not an internal one
        assert out[step]["error"] == "StorageError", out[step]
        assert out[step]["message"].startswith("could not write to the database ") and STORAGE_HINT in \
            out[step]["message"]
        if out["mode"] == "tmpfs":
            assert "database or disk is full" in out[step]["message"]
    assert "ok" in out["after"], out["after"]  # room again: the same process answers
    before, after = out["before"]["ok"], out["after"]["ok"]
    assert out["integrity"] == "ok"
    # Everything committed stays; the refused message left nothing; the answer being written when
    # the disk filled keeps what was flushed before (its first token) and still says "streaming".
    assert out["rows"] == [
        ["user", "Hello!", "done"], ["assistant", before, "done"],
        ["user", "Tell me about the sea.", "done"], ["assistant", out["shown_before_full"], "streaming"],
        ["user", "Thanks!", "done"], ["assistant", after, "done"],
    ]
    assert out["shown_before_full"]


def test_disk_full_while_writing_a_kv_snapshot(assistant_home, tmp_path, model_paths):
    out = run_on_small_disk(KV_SCENARIO, assistant_home, tmp_path)
    print("disk full made with", out["mode"])
    assert "ok" in out["before"] and out["before"]["stats"]["prompt_tokens"] >= 256
    # The snapshot is only a cache: the failed write is counted, nothing half-written stays.
    assert out["cold_full"]["written"] == 0 and out["cold_full"]["write_errors"] == 1
    assert out["files_full"] == []
    # The next start finds no snapshot and re-evaluates the history rebuilt from SQLite.
    stats = out["restarted"]["stats"]
    assert stats["restored_from"] is None and stats["prompt_tokens_evaluated"] == stats["prompt_tokens"]
    assert out["cold_free"]["written"] == 1 and out["cold_free"]["write_errors"] == 0
    assert len(out["files_free"]) == 1 and out["files_free"][0].endswith(".kvs")
    assert [r[:1] + r[2:] for r in out["rows"]] == [["user", "done"], ["assistant", "done"]] * 2
    assert out["rows"][1][1] == out["before"]["ok"] and out["integrity"] == "ok"


# ---- read-only data folder ----------------------------------------------------------------------

def run_read_only(argv: list[str], home: Path, **kw) -> tuple[subprocess.CompletedProcess, str]:
    """Run a command that finds `home` read-only; (its result, how that was made)."""
    if os.geteuid() != 0:
        os.chmod(home, 0o500)
        try:
            return subprocess.run(argv, **kw), "chmod 0o500"
        finally:
            os.chmod(home, 0o700)
    # Root ignores permission bits, and `nobody` cannot reach this venv's interpreter (under /root):
    # a read-only bind mount of the folder, in a mount namespace that dies with the command.
    if not shutil.which("unshare"):
        pytest.skip("running as root without unshare: no way to make a folder read-only for the app")
    inner = f'mount --bind "{home}" "{home}" && mount -o remount,bind,ro "{home}" && exec "$@"'
    return subprocess.run(["unshare", "-m", "sh", "-c", inner, "sh", *argv], **kw), "read-only bind mount"


def test_a_read_only_data_folder_is_a_clear_error_and_changes_nothing(assistant_home, model_paths):
    db = Database(assistant_home / "assistant.db")
    cid = db.create_conversation(model="demo-small")
    db.add_message(cid, "user", "kept", model="demo-small")
    db.close()
    before = hashlib.sha256((assistant_home / "assistant.db").read_bytes()).hexdigest()
    proc, how = run_read_only(cli("chat", "--json", "--no-memory", "--model", "demo-small"), assistant_home,
                              input=b"hi\n", capture_output=True, env=cli_env(assistant_home), cwd=ROOT,
                              timeout=120)
    print("read-only made with", how)
    events = [json.loads(line) for line in proc.stdout.decode().splitlines() if line.strip()]
    assert proc.returncode == 1 and "Traceback" not in proc.stderr.decode(), proc.stderr.decode()
    [error] = events
    assert error["event"] == "error" and error["message"].startswith("could not open the database "), error
    assert STORAGE_HINT in error["message"] and "internal error" not in error["message"]
    assert hashlib.sha256((assistant_home / "assistant.db").read_bytes()).hexdigest() == before
    db = Database(assistant_home / "assistant.db")
    try:
        assert [m["content"] for m in db.messages(cid)] == ["kept"]
    finally:
        db.close()


# ---- L3 endpoint that hangs ---------------------------------------------------------------------

class HangingEndpoint:
    """Accepts connections and reads requests; answers nothing, or only the start of an SSE stream."""

    def __init__(self, first_chunk: str | None = None):
        self.first_chunk = first_chunk
        self.connections = 0
        self._stop = threading.Event()
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen()
        self._sock.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}/v1"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self):
        held = []
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            self.connections += 1
            held.append(conn)
            conn.recv(65536)
            if self.first_chunk is not None:
                event = json.dumps({"choices": [{"delta": {"content": self.first_chunk}}]})
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
                             + f"data: {event}\n\n".encode())
        for conn in held:
            conn.close()

    def stop(self):
        self._stop.set()
        self._thread.join()
        self._sock.close()


@pytest.fixture
def local_only(model_paths):
    """Both local tiers on demo-small (L3 falls back to it), and an L3 set per test."""
    def make(remote: RemoteConfig) -> Assistant:
        return Assistant(Database(db_path()), EngineConfig(model="demo-small", load=PARAMS, remote=remote, kv_tiers=False))
    made = []
    yield lambda remote: made.append(make(remote)) or made[-1]
    for a in made:
        a.close()
        a.db.close()


def test_a_hanging_l3_times_out_and_the_turn_falls_back(local_only, caplog):
    server = HangingEndpoint()
    config = RemoteConfig(server.url, "sk-test", connect_timeout_s=2.0, read_timeout_s=1.0, retries=1,
                          backoff_s=0.05)
    a = local_only(config)
    try:
        cid = a.new_conversation()
        started = time.monotonic()
        [done] = [x for x in a.send(cid, "Design a distributed cache.", greedy(6), route="L3")
                  if isinstance(x, TurnDone)]
        elapsed = time.monotonic() - started
    finally:
        server.stop()
    assert (done.level, done.model, done.fallback) == ("L2", "demo-small", "L3 unreachable → L2")
    # One attempt: a server that accepted the request and stayed silent for read_timeout_s is stuck,
    # and retrying would only multiply the user's wait (retries are for refused connections, 5xx, 429).
    assert server.connections == 1
    assert elapsed < 30, elapsed  # a generous stall probe: one 1 s timeout, then a local answer
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("L3 failed before answering")]
    assert said and "timed out" in said[0], said
    assert [r["role"] for r in a.db.messages(cid)] == ["user", "assistant"]


def test_an_l3_that_hangs_mid_answer_reports_it_and_keeps_what_was_shown(local_only):
    server = HangingEndpoint(first_chunk="Partial answer")
    a = local_only(RemoteConfig(server.url, connect_timeout_s=2.0, read_timeout_s=1.0, retries=0))
    try:
        cid = a.new_conversation()
        shown = []
        with pytest.raises(InputError, match="L3 stream broke off: .*timed out"):
            for item in a.send(cid, "Design a distributed cache.", greedy(6), route="L3"):
                shown.append(item.text)
    finally:
        server.stop()
    assert shown == ["Partial answer"]
    rows = a.db.messages(cid)
    assert [(r["role"], r["content"], r["level"]) for r in rows] == [
        ("user", "Design a distributed cache.", None), ("assistant", "Partial answer", "L3")]
    assert rows[1]["status"] == "done" and rows[1]["stats"]["finish_reason"] == "interrupted"
    [done] = [x for x in a.send(cid, "Thanks!", greedy(4)) if isinstance(x, TurnDone)]  # the chat goes on
    assert done.level == "L1" and done.text


# ---- no VRAM ------------------------------------------------------------------------------------

@pytest.mark.parametrize("vram_mb", [0, 16])
def test_without_vram_l2_is_planned_on_the_cpu_and_answers(model_paths, vram_mb):
    # A budget is a share of a GPU's memory: the machine is scripted to have one with plenty free
    # (this VM has none), so the plan is the budget's alone; the load itself is real.
    manager = ModelManager(params=PARAMS, vram_budget_mb=vram_mb, devices=FakeGPU(free_mb=8192))
    a = Assistant(Database(db_path()), EngineConfig(tiers={"L1": "demo-small", "L2": "demo-int4"}, kv_tiers=False), manager=manager)
    try:
        cid = a.new_conversation()
        [done] = [x for x in a.send(cid, "Explain what a hash map is.", greedy(6), route="L2")
                  if isinstance(x, TurnDone)]
        assert (done.level, done.model, done.fallback) == ("L2", "demo-int4", None) and done.text
        [l2] = [w for w in a.manager.loaded() if w.model.id == "demo-int4"]
        plan = l2.plan
        assert (plan.offload, plan.n_gpu_layers, plan.budget_bytes) == ("cpu", 0, vram_mb << 20)
        assert plan.gpu_bytes_total == 0 and "everything on the CPU" in plan.explanation
        why = "no vram budget: cpu only" if vram_mb == 0 else "not even the output layer fits: cpu only"
        assert why in plan.explanation.lower(), plan.explanation
        assert l2.backend.params.n_gpu_layers == 0
        assert all(not buft.startswith(("CUDA", "Metal", "Vulkan", "ROCm"))
                   for buft in l2.backend.memory_report["weights"])
    finally:
        a.close()
        a.db.close()
