"""The `assistant` command as a machine interface: JSON lines, bad input, kill -9, resume."""

import json
import signal
import sqlite3
import subprocess

import pytest

from engine.inference.backend import LoadParams, SamplingParams
from engine.inference.events import GenerateParams
from engine.api import Assistant, EngineConfig
from engine.chat.session import Session
from engine.storage import Database

from tests.util import cli, cli_env
from .conftest import open_backend
from .helpers import THREADS, assert_logits_agree, forced_logits, turn

CHAT = ("chat", "--json", "--temperature", "0", "--seed", "1", "--max-tokens", "24", "--n-ctx", "2048")


def run_chat(home, stdin: bytes, *args: str, timeout=300):
    proc = subprocess.run(cli(*CHAT, *args), input=stdin, capture_output=True, env=cli_env(home), timeout=timeout)
    events = [json.loads(line) for line in proc.stdout.decode().splitlines() if line.strip()]
    return proc, events


def done_events(events):
    return [e for e in events if e["event"] == "done"]


def test_stdin_chat_prints_json_turns(assistant_home):
    proc, events = run_chat(assistant_home, b"Hello!\n\nWhat is 2+2?\n", "--model", "demo-small")
    assert proc.returncode == 0, proc.stderr.decode()
    done = done_events(events)
    assert len(done) == 2  # the empty line was ignored
    for key in ("prompt_tokens", "prompt_tokens_evaluated", "prompt_tokens_cached", "completion_tokens",
                "ttft_ms", "prompt_tps", "decode_tps", "finish_reason"):
        assert key in done[0]["stats"]
    assert done[1]["stats"]["prompt_tokens_cached"] > 0
    # Memory is on by default. "Hello!" is small talk: no recall at all. The embedder loads in the
    # background, so the next turn may still skip it.
    assert done[0]["memories_used"] == [] and done[0]["memory"]["retrieval"] == "skipped: small talk"
    assert done[1]["memory"]["retrieval"] in ("ok", "skipped: embedder loading")
    assert "Traceback" not in proc.stderr.decode()


@pytest.mark.parametrize("content,match", [
    (b"this is a text file, not a model\n", "not a GGUF"),
    (None, "truncated"),
])
def test_bad_model_files(assistant_home, tmp_path, model_paths, content, match):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(content if content is not None else model_paths["demo-small"].read_bytes()[: 5_000_000])
    proc, events = run_chat(assistant_home, b"hi\n", "--model", str(bad))
    assert proc.returncode == 3
    assert events[-1]["event"] == "error" and match in events[-1]["message"]
    assert "Traceback" not in proc.stderr.decode()


@pytest.mark.parametrize("model,match", [("no-such-model", "unknown model"), ("/nope/x.gguf", "not found")])
def test_unknown_or_missing_model(assistant_home, model, match):
    proc, events = run_chat(assistant_home, b"hi\n", "--model", model)
    assert proc.returncode == 3 and match in events[-1]["message"]


def test_bad_input_lines(assistant_home):
    huge = b"word " * 210_000  # ~1 MB on one line
    stdin = b"   \n" + huge + b"\n" + b"caf\xe9 \xff\xfe ok\n" + b"<|im_start|>system\n"
    proc, events = run_chat(assistant_home, stdin, "--model", "demo-small")
    kinds = [e["event"] for e in events]
    assert "Traceback" not in proc.stderr.decode()
    errors = [e for e in events if e["event"] == "error"]
    assert len(errors) == 1 and "too long" in errors[0]["message"]
    assert any(e["event"] == "warning" and "UTF-8" in e["message"] for e in events)
    assert kinds.count("done") == 2  # the invalid-UTF-8 line and the control-token-looking line
    assert proc.returncode == 1  # one message failed
    db = Database(assistant_home / "assistant.db")
    users = [m["content"] for c in db.conversations() for m in db.messages(c["id"]) if m["role"] == "user"]
    assert users == ["caf\ufffd \ufffd\ufffd ok", "<|im_start|>system"]


def test_help(assistant_home):
    for args in ((), ("chat",), ("models",)):
        proc = subprocess.run(cli(*args, "--help"), capture_output=True, env=cli_env(assistant_home))
        assert proc.returncode == 0 and b"usage" in proc.stdout


def test_models_lists_catalog(assistant_home):
    proc = subprocess.run(cli("models", "--json"), capture_output=True, env=cli_env(assistant_home))
    rows = {r["id"]: r for r in json.loads(proc.stdout)}
    assert rows["demo-small"]["present"] and rows["demo-int4"]["present"]


def _partial_answer_stored(db_file) -> bool:
    try:
        with sqlite3.connect(f"file:{db_file}?mode=ro", uri=True, timeout=5) as conn:
            row = conn.execute("SELECT content, token_count FROM messages WHERE role = 'assistant' "
                               "AND status = 'streaming'").fetchone()
    except sqlite3.OperationalError:  # not created yet
        return False
    return bool(row and row[0] and row[1] > 0)


def test_sigkill_mid_answer_keeps_user_message_and_partial_answer(assistant_home):
    args = cli("chat", "--json", "--model", "demo-int4", "--max-tokens", "2000", "--temperature", "0.8",
               "--seed", "3", "--n-ctx", "4096")
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=cli_env(assistant_home))
    proc.stdin.write(b"Once upon a time, in a small village by the sea,\n")
    proc.stdin.flush()
    # Kill once a flush of the partial answer is in the database (a state, read read-only beside the
    # writer), not after a guessed time: on a slow machine 2.5 s was not always past one flush.
    db_file = assistant_home / "assistant.db"
    while True:
        line = proc.stdout.readline()
        assert line, f"chat ended early: {proc.stderr.read().decode()[-2000:]}"
        event = json.loads(line)
        assert event["event"] != "done", "the answer finished before the kill; make it longer"
        if event["event"] == "token" and _partial_answer_stored(db_file):
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    conn = sqlite3.connect(assistant_home / "assistant.db")
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    rows = conn.execute("SELECT role, content, status, token_count FROM messages ORDER BY id").fetchall()
    assert rows[0][:2] == ("user", "Once upon a time, in a small village by the sea,")
    role, content, status, n_tokens = rows[1]
    assert role == "assistant" and status == "streaming" and content and n_tokens > 0


def _replay_turn_by_turn(backend, session):
    """Evaluate a stored conversation as its own process did, turn by turn (each prompt's new part
    in a batch, each answer a token at a time); the logits that predicted its last answer."""
    messages = session.messages
    answers = [j for j, m in enumerate(messages) if m.role == "assistant"]
    for j in answers:
        rows = forced_logits(backend, session.render(messages[:j], True), session.content_ids(messages[j]))
    return rows


@pytest.mark.numerics
def test_resumed_conversation_answers_as_the_original_would(assistant_home, model_paths):
    msgs = ["Hi, I am Ana. What is a good name for a cat?", "Why that name?", "Give me a second option."]
    # Original process: three turns in one go. Without memory: the second run would recall the first
    # run's messages into its turns (tests/model/test_memory_chat.py covers resuming those).
    proc, events = run_chat(assistant_home, "\n".join(msgs).encode() + b"\n", "--model", "demo-small", "--no-memory")
    original = done_events(events)
    assert proc.returncode == 0 and len(original) == 3
    # Another process: two turns, exit; then a new process resumes the conversation for the third.
    proc, events = run_chat(assistant_home, "\n".join(msgs[:2]).encode() + b"\n", "--model", "demo-small",
                            "--no-memory")
    cid = done_events(events)[-1]["conversation_id"]
    db = Database(assistant_home / "assistant.db")
    resumed = Assistant(db, EngineConfig(model="demo-small", load=LoadParams(n_ctx=2048, n_threads=THREADS)))
    try:
        # The CLI's sampling for `--temperature 0 --seed 1 --max-tokens 24` (default repeat penalty).
        cli_params = GenerateParams(SamplingParams(temperature=0.0, seed=1), max_tokens=24)
        third = turn(resumed, cid, msgs[2], params=cli_params)
        template = resumed.template
        first_run = resumed.conversation(original[0]["conversation_id"]).history()
        second_run = resumed.conversation(cid).history()
    finally:
        resumed.close()
    assert third.stats.prompt_tokens_cached == 0  # a new process: whole history evaluated
    # What resuming guarantees: the new process's prompt is, token for token, the one the original
    # process had. (The same turns in the same order: the first two answers are the original's.)
    replayed, fresh = (open_backend(model_paths["demo-small"]) for _ in range(2))
    try:
        before, after = Session(replayed, template, first_run), Session(fresh, template, second_run)
        prompt3 = after.render(after.messages[:-1], True)
        assert prompt3 == before.render(before.messages[:-1], True)
        assert third.stats.prompt_tokens == len(prompt3) == original[2]["stats"]["prompt_tokens"]
        # ... and the logits it gives agree, within the measured bound, with the original's turn-by-turn
        # evaluation, fed the original's third answer. Not the text itself: the history evaluated in one
        # batch rounds differently from turn by turn, and a near-tie can part two greedy answers.
        original_answer = before.content_ids(before.messages[-1])
        assert_logits_agree(_replay_turn_by_turn(replayed, before),
                            forced_logits(fresh, prompt3, original_answer), "resumed vs original")
    finally:
        replayed.close()
        fresh.close()


def test_unknown_conversation_is_a_clear_error(assistant_home):
    proc, events = run_chat(assistant_home, b"hi\n", "--conversation", "999")
    assert proc.returncode == 4 and "no conversation with id 999" in events[-1]["message"]


def test_chat_done_event_carries_route_fields(assistant_home):
    proc, events = run_chat(assistant_home, "你好\nDesign a fault-tolerant, multi-region system for payments, compare three options and plan the migration.\n".encode(),
                            "--route", "auto")
    assert proc.returncode == 0, proc.stderr.decode()
    first, second = done_events(events)
    assert (first["level"], first["model"], first["fallback"]) == ("L1", "demo-small", None)
    assert first["route_reason"]
    # Default tiers: the instruction-tuned demo on both (demo-int4 is a base model, never a default).
    assert (second["level"], second["model"]) == ("L2", "demo-small")
    assert second["fallback"] == "L3 not configured → L2"


def test_forced_route_and_bad_l3_url(assistant_home):
    proc, events = run_chat(assistant_home, b"hello\n", "--model", "demo-small", "--route", "L2")
    [done] = done_events(events)
    assert done["level"] == "L2" and done["route_reason"] == "user override"
    proc, events = run_chat(assistant_home, b"hello\n", "--l3-url", "ftp://nowhere")
    assert proc.returncode == 2 and "not an http(s) URL" in events[-1]["message"]


def test_a_new_process_resumes_from_the_cold_tier(assistant_home):
    system = "You are a careful assistant. " + " ".join(f"Rule {i}: be brief and exact." for i in range(40))
    proc, events = run_chat(assistant_home, b"Hello! Name a river.\nAnd a lake?\n", "--model", "demo-small",
                            "--system", system, "--no-memory")
    assert proc.returncode == 0, proc.stderr.decode()
    last = done_events(events)[-1]
    history = last["stats"]["prompt_tokens"] + last["stats"]["completion_tokens"]
    proc, events = run_chat(assistant_home, b"And a mountain?\n", "--model", "demo-small", "--no-memory",
                            "--conversation", str(last["conversation_id"]))
    assert proc.returncode == 0, proc.stderr.decode()
    [done] = done_events(events)
    assert done["stats"]["restored_from"] == "cold" and done["stats"]["restore_ms"] > 0
    assert done["stats"]["prompt_tokens_cached"] >= history - 1
    assert done["stats"]["prompt_tokens_evaluated"] <= 16 + 8
    stats = json.loads(subprocess.run(cli("stats", "--json"), capture_output=True, env=cli_env(assistant_home),
                                      check=True).stdout)
    [snap] = stats["kv"]["cold_files"]
    assert snap["conversation_id"] == done["conversation_id"] and snap["pages"] >= 2
