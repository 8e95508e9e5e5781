"""Data at rest and what API clients may reach (issue 22): the data dir is the user's only (0700) and
its files 0600 after a real start; a deleted chat leaves no text in the database's free pages or its
WAL and no KV file; the server's key can come from a file or the environment instead of the process
list; x_memory needs the user's consent (server.allow_memory); a link in a documents folder does not
index a file outside it."""

from __future__ import annotations

import argparse
import os
import signal
import stat
import subprocess
import time
from pathlib import Path

import httpx
import psutil
import pytest

from engine.api import Assistant, GenerateParams, Settings
from engine.cli.main import main as cli_main
from engine.cli.serve import KEY_ENV, _run_key
from engine.config.paths import db_path, user_dir
from engine.docs.scan import LINK_OUTSIDE
from engine.kv.cold import ColdTier
from engine.kv.snapshot import Snapshot
from engine.memory.embedder import Embedder
from engine.memory.service import MemoryService
from engine.storage import Database
from tests.fake_backend import fakes, make_assistant, wait_until  # noqa: F401
from tests.server_util import KEY, serve  # noqa: F401
from tests.test_docs_index import docs, embedder  # noqa: F401
from tests.util import cli, cli_env

SECRET = "Zanzibar-quokka-7731 is the vault word"
LONG = "Here is my travel diary, day by day, with every train and every meal. " * 30  # > 256 tokens: a cold file


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def private_tree(home: Path) -> dict[str, int]:
    """name -> mode of the data dir and of every file and folder in it that is not the user's only
    (empty lock files aside: filelock makes them 0644, and they hold nothing)."""
    wide = {".": mode(home)} if mode(home) & 0o077 else {}
    for p in home.rglob("*"):
        if mode(p) & 0o077 and not (p.name.endswith(".lock") and p.stat().st_size == 0):
            wide[str(p.relative_to(home))] = mode(p)
    return wide


# ---- permissions without a model

def test_the_data_dir_and_the_database_files_are_made_and_narrowed_to_the_users_only(assistant_home):
    assistant_home.mkdir(mode=0o755)
    os.chmod(assistant_home, 0o755)  # as earlier versions left it
    assert user_dir() == assistant_home and mode(assistant_home) == 0o700
    db = Database(db_path())
    with db.transaction() as conn:
        conn.execute("CREATE TABLE t (x)")
    assert {p.name: mode(p) for p in assistant_home.glob("assistant.db*")} == {
        "assistant.db": 0o600, "assistant.db-wal": 0o600, "assistant.db-shm": 0o600}
    db.close()
    for p in assistant_home.glob("assistant.db*"):
        os.chmod(p, 0o644)
    Database(db_path()).close()
    assert [mode(p) for p in assistant_home.glob("assistant.db*")] == [0o600]  # narrowed; WAL gone at close


def test_kv_files_are_made_0600_in_a_0700_folder_and_old_ones_narrowed(tmp_path):
    folder = tmp_path / "kv"
    folder.mkdir(mode=0o755)
    os.chmod(folder, 0o755)
    old = folder / "c1-000000000000.kvs"
    old.write_bytes(b"an older version's file")
    os.chmod(old, 0o644)
    cold = ColdTier(folder, 1 << 30, min_tokens=1)
    assert mode(old) == 0o600
    path = cold.write(Snapshot("m.gguf:1", 2, list(range(300)), bytearray(1000)), {"n": 1})
    assert mode(path) == 0o600 and mode(folder) == 0o700


# ---- the API key off the command line

def test_the_api_key_comes_from_a_file_or_the_environment_and_the_flag_warns(tmp_path, monkeypatch, capsys,
                                                                              assistant_home):
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    os.chmod(key_file, 0o600)
    args = argparse.Namespace(api_key=None, api_key_file=key_file)
    assert _run_key(args) == (KEY, f"read from {key_file}") and capsys.readouterr().err == ""
    os.chmod(key_file, 0o644)
    _run_key(args)
    assert "can be read by other users" in capsys.readouterr().err
    monkeypatch.setenv(KEY_ENV, "from-the-environment-0123456789")
    assert _run_key(argparse.Namespace(api_key=None, api_key_file=None))[0] == "from-the-environment-0123456789"
    assert _run_key(argparse.Namespace(api_key=KEY, api_key_file=None))[0] == KEY
    assert "process list" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.write_text("\n")
    # Refused before a model loads or a port opens.
    assert cli_main(["serve", "--port", "0", "--api-key-file", str(empty)]) == 2
    assert cli_main(["serve", "--port", "0", "--api-key-file", str(tmp_path / "missing")]) == 2
    assert "--api-key-file" in capsys.readouterr().err


# ---- x_memory is the user's to grant

def test_x_memory_needs_the_users_consent_and_remember_that_pins_nothing_without_it(serve, fakes, make_assistant):
    a = make_assistant(str(fakes.model_file("m")))
    a.memory = MemoryService(a.db, Embedder(), vector_backend="numpy").start()
    remember = {"model": "L1", "messages": [{"role": "user", "content": "Remember that my locker code is 5512."}]}

    def post(server, body: dict) -> httpx.Response:
        return httpx.post(server.url + "/chat/completions", json=body, headers={"Authorization": f"Bearer {KEY}"},
                          timeout=30)

    try:
        server = serve(a)
        r = post(server, remember | {"x_memory": True})
        assert r.status_code == 403 and r.json()["error"]["code"] == "memory_not_allowed"
        assert "server.allow_memory" in r.json()["error"]["message"]
        assert post(server, remember).status_code == 200  # without x_memory: answered, nothing kept
        assert a.memory.flush(30) and a.memory.pinned() == []
        server.stop()

        allowed = serve(a, allow_memory=True)
        assert post(allowed, remember | {"x_memory": True}).status_code == 200
        assert [row.text for row in a.memory.pinned()] == ["my locker code is 5512"]
    finally:
        a.memory.close()
        a.memory.embedder.close()
        a.memory = None


def test_the_setting_is_off_by_default(assistant_home):
    assert Settings().get("server.allow_memory") is False


# ---- links in a documents folder

def test_a_link_to_a_file_outside_the_documents_folder_is_skipped_with_a_reason(docs, tmp_path):  # noqa: F811
    outside = tmp_path / "private"
    outside.mkdir()
    (outside / "keys.md").write_text("# Keys\n\nThe vault combination is 90-21-77, kept by Ines.\n")
    folder = tmp_path / "shared"
    (folder / "sub").mkdir(parents=True)
    (folder / "kettle.md").write_text("# Kettles\n\nThe Zephyr kettle warranty lasts three years.\n")
    (folder / "sub" / "vault.md").symlink_to(outside / "keys.md")
    (folder / "sub" / "again.md").symlink_to(folder / "kettle.md")  # inside the folder: followed
    report = docs.add([folder]).result().to_dict()
    assert {"path": str(folder / "sub" / "vault.md"), "reason": LINK_OUTSIDE} in report["skipped"]
    assert report["indexed"] == 2
    assert all("90-21-77" not in hit.text for hit in docs.search("vault combination Ines", k=10))
    # Named on its own (a rescan of the link's path): still outside the folder added.
    report = docs.add([folder / "sub" / "vault.md"]).result().to_dict()
    assert report["indexed"] == 0 and report["skipped"][0]["reason"] == LINK_OUTSIDE


# ---- a real start, and a real delete

@pytest.mark.model
def test_a_real_server_start_keeps_the_data_dir_and_its_files_the_users_only(assistant_home, model_paths, tmp_path):
    settings = Settings(assistant_home / "settings.json")  # written as the app writes it (0600)
    for key, value in {"memory.enabled": False, "docs.enabled": False, "runtime.n_ctx": 1024, "runtime.n_ctx_max": 0,
                       "runtime.n_threads": 1, "kv.warm_budget_mb": 0.001}.items():  # 1 kB of RAM: each parks to disk
        settings.set(key, value)
    key_file = tmp_path / "key"
    key_file.write_text(KEY)
    os.chmod(key_file, 0o600)
    os.chmod(assistant_home, 0o755)  # as earlier versions left it: the server narrows it
    proc = subprocess.Popen(cli("serve", "--model", "demo-small", "--port", "0", "--api-key-file", str(key_file)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env(assistant_home), text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("Serving"), (line, proc.poll(), proc.stderr.read() if proc.poll() is not None else "")
        url = line.split(" at ")[1].strip()
        assert not any(KEY in part for part in psutil.Process(proc.pid).cmdline())
        body = {"model": "L1", "max_tokens": 2, "messages": [{"role": "user", "content": LONG + SECRET}]}
        r = httpx.post(url + "/chat/completions", json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=300)
        assert r.status_code == 200, r.text
        kv = assistant_home / "kv"
        wait_until(lambda: any(kv.glob("c*.kvs")), timeout=60)  # parked after the turn, then written
        names = {p.name for p in assistant_home.iterdir()}
        assert {"assistant.db", "assistant.db-wal", "assistant.db-shm", "server_conversations.json"} <= names
        assert private_tree(assistant_home) == {}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    # Stopping deleted the unstored API conversation: its KV file and its text went with it.
    assert not list((assistant_home / "kv").glob("c*.kvs"))
    assert all(SECRET.encode() not in p.read_bytes() for p in assistant_home.glob("assistant.db*"))
    assert private_tree(assistant_home) == {}


@pytest.mark.model
def test_a_deleted_chat_leaves_no_text_in_the_database_its_wal_or_a_kv_file(assistant_home, model_paths):
    settings = Settings()
    settings.set("docs.enabled", False)

    def start() -> Assistant:
        return Assistant.from_settings(settings, model="demo-small", n_ctx=1024, n_threads=1)  # memory on

    a = start()
    cid = a.new_conversation()
    list(a.send(cid, LONG + SECRET, GenerateParams(max_tokens=4)))
    assert a.memory.flush(120)  # the message is in the memory's chunks too
    a.close()  # its KV state goes to a cold file
    files = list((assistant_home / "kv").glob(f"c{cid}-*.kvs"))
    assert files and SECRET.encode() in (assistant_home / "assistant.db").read_bytes()  # the grep finds it

    a = start()
    try:
        a.delete_conversation(cid)
        assert not any(f.exists() for f in files)
        for p in assistant_home.glob("assistant.db*"):  # the open database: file, WAL, shared memory
            assert SECRET.encode() not in p.read_bytes(), p.name
        assert (assistant_home / "assistant.db-wal").stat().st_size == 0  # checkpointed and emptied
    finally:
        a.close()
    assert SECRET.encode() not in (assistant_home / "assistant.db").read_bytes()
