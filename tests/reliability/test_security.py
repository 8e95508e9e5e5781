"""Security promises: no listening socket, the L3 key the user's only and never logged, chat templates
from model files sandboxed and bounded, downloads checked against the catalog's sha256.

Already proven elsewhere: `tests/app/test_settings_dialog.py::test_the_settings_file_is_the_users_only`
(settings.json 0600 after `Settings.set`), `tests/model/test_downloads.py::
test_corrupt_bytes_fail_the_sha256_and_a_missing_file_says_so` (the hub's own sha256),
`tests/test_templates.py` (template errors are reported).
"""

import hashlib
import json
import logging
import os
import re
import stat
import struct
import subprocess
import sys
import threading
import time
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil
import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from app.settings_dialog import SettingsDialog  # noqa: E402
from engine.inference.backend import LoadParams  # noqa: E402
from engine.inference.errors import ModelLoadError  # noqa: E402
from engine.models.catalog import load_catalog  # noqa: E402
from engine.models.downloads import DownloadError, download, part_path  # noqa: E402
from engine.api import Assistant, EngineConfig, InputError, TurnDone  # noqa: E402
from engine.config.paths import db_path  # noqa: E402
from engine.inference.remote import RemoteConfig  # noqa: E402
from engine.config.settings import Settings  # noqa: E402
from engine.storage import Database  # noqa: E402
from engine.inference.templates import MAX_RENDERED_CHARS, ChatTemplate, ChatTemplateError  # noqa: E402
from tests.hub_server import HubServer  # noqa: E402
from tests.model.helpers import greedy  # noqa: E402
from tests.util import cli, cli_env  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
# One thread: two spinning llama.cpp threads crawl on a shared 2-core machine; speed is not tested here.
PARAMS = LoadParams(n_ctx=1024, n_threads=1)
KEY = "sk-test-4f1c9e0b7d2a46c8b3e5a9f01d6c7e28"


# ---- no listening socket ------------------------------------------------------------------------

def sockets(pid: int) -> tuple[list, list]:
    """(inet sockets, listening sockets of any family) of a process and all its threads."""
    proc = psutil.Process(pid)
    inet = proc.net_connections(kind="inet")
    listening = [c for c in proc.net_connections(kind="all") if c.status == psutil.CONN_LISTEN]
    return inet, listening


def read_events(proc, until, timeout=180):
    """JSON lines from a subprocess's stdout until `until(event)` is true."""
    deadline = time.monotonic() + timeout
    events = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"exited early ({proc.poll()}): {proc.stderr.read().decode()[-2000:]}")
        events.append(json.loads(line))
        if until(events[-1]):
            return events
    raise AssertionError(f"no end event in {timeout} s: {events}")


@pytest.mark.model
def test_the_engine_with_default_settings_opens_no_socket(assistant_home, model_paths):
    # Default settings: both tiers, memory on (its embedder loads in the background), no L3.
    proc = subprocess.Popen(cli("chat", "--json", "--max-tokens", "4", "--n-ctx", "1024"), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env(assistant_home))
    try:
        # Ask until the embedder is up, so every default part has started: until a generous deadline,
        # not a count of tries (how many fit in its load time depends on the machine).
        deadline = time.monotonic() + 300
        while True:
            proc.stdin.write(b"What did I plant in my garden last spring?\n")  # not small talk: recall runs
            proc.stdin.flush()
            done = read_events(proc, lambda e: e["event"] in ("done", "error"))[-1]
            assert done["event"] == "done", done
            retrieval = done["memory"]["retrieval"]
            inet, listening = sockets(proc.pid)
            assert inet == [] and listening == [], (inet, listening)
            if retrieval == "ok":
                break
            assert time.monotonic() < deadline, f"the embedder never came up: {retrieval}"
            time.sleep(0.5)
    finally:
        proc.stdin.close()
        proc.wait(120)
    assert proc.returncode == 0, proc.stderr.read().decode()[-2000:]


GUI_SCRIPT = r'''
import json, sys
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
from app.engine_worker import EngineWorker
from app.main_window import MainWindow

app = QApplication(sys.argv[:1])
w = MainWindow(EngineWorker(), temperature=0.0, max_tokens=4)  # settings as a new user has them
w.show()
state = {"sent": False}

def tick():
    if w.engine_error:
        print(json.dumps({"event": "failed", "message": w.engine_error}), flush=True)
        app.quit()
    elif w.engine_ready and not state["sent"]:
        state["sent"] = True
        w.send_message("Hello!")
    elif state["sent"] and not w.busy and w.last_done is not None and not state.get("done"):
        state["done"] = True
        print(json.dumps({"event": "done", "text": w.last_done.text}), flush=True)
        sys.stdin.readline()  # the test looks at the sockets meanwhile
        w.close()
        app.quit()

timer = QTimer()
timer.timeout.connect(tick)
timer.start(20)
app.exec()
'''


@pytest.mark.model
@pytest.mark.gui
def test_the_window_with_default_settings_opens_no_socket(assistant_home, model_paths, tmp_path):
    script = tmp_path / "gui.py"
    script.write_text(GUI_SCRIPT)
    env = dict(cli_env(assistant_home), PYTHONPATH=str(ROOT), QT_QPA_PLATFORM="offscreen")
    proc = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, cwd=ROOT)
    try:
        [done] = read_events(proc, lambda e: True)
        assert done["event"] == "done" and done["text"], done
        inet, listening = sockets(proc.pid)
        assert inet == [] and listening == [], (inet, listening)
    finally:
        proc.stdin.close()
        proc.wait(120)


# ---- the L3 API key -----------------------------------------------------------------------------

@pytest.mark.gui
def test_the_key_saved_from_the_settings_dialog_is_the_users_only(qtbot, assistant_home):
    path = assistant_home / "settings.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{}")
    os.chmod(path, 0o644)  # e.g. written by an older version, or copied
    dialog = SettingsDialog(Settings(path))
    qtbot.addWidget(dialog)
    dialog.l3_url.setText("http://127.0.0.1:9/v1")
    dialog.l3_key.setText(KEY)
    dialog.save()
    assert json.loads(path.read_text())["l3.api_key"] == KEY
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    # No temp file left; the writers' lock (issue 22) is an empty file.
    assert sorted(p.name for p in assistant_home.iterdir()) == ["settings.json", "settings.json.lock"]
    assert (assistant_home / "settings.json.lock").stat().st_size == 0


SAVE_ON_FULL_DISK = r'''
import resource, signal, sys
from pathlib import Path
from engine.config.settings import Settings

s = Settings(Path(sys.argv[1]))
s.set("l3.base_url", "http://127.0.0.1:9/v1")
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (80, resource.RLIM_INFINITY))  # the disk fills mid-write
try:
    s.set("l3.api_key", sys.argv[2])
except OSError as exc:
    print(type(exc).__name__, exc.errno)
'''


def test_a_key_save_that_hits_a_full_disk_leaves_nothing_readable(assistant_home, tmp_path):
    path = assistant_home / "settings.json"
    assistant_home.mkdir(parents=True, exist_ok=True)
    script = tmp_path / "save.py"
    script.write_text(SAVE_ON_FULL_DISK)
    proc = subprocess.run([sys.executable, str(script), str(path), KEY], capture_output=True, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=60)
    assert proc.returncode == 0 and proc.stdout.decode().startswith("OSError 27"), proc.stderr.decode()
    assert json.loads(path.read_text()) == {"l3.base_url": "http://127.0.0.1:9/v1"}  # the old file stands
    # The half-written temp file held the start of the key, world-readable: it must not outlive the error.
    for p in assistant_home.rglob("*"):
        empty_lock = p.name == "settings.json.lock" and p.stat().st_size == 0  # the writers' lock (issue 22)
        assert p == path or empty_lock, f"{p.name} left behind ({oct(p.stat().st_mode)})"


class EchoingEndpoint:
    """An OpenAI-compatible endpoint that misbehaves by echoing our request headers (the key among
    them) in its error pages, as some proxies and debug servers do; `replies` scripts each request."""

    def __init__(self):
        self.replies: list[str] = []
        self.authorizations: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server API
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                server.authorizations.append(self.headers.get("Authorization", ""))
                kind = server.replies.pop(0)
                echo = str(self.headers)
                if kind == "answer":
                    events = [{"choices": [{"delta": {"content": "Hi there."}}]},
                              {"choices": [{"delta": {}, "finish_reason": "stop"}]}]
                    body = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
                    status, ctype = 200, "text/event-stream"
                elif kind == "garbage":  # a malformed stream line carrying the echo
                    body, status, ctype = f"oops {echo}\n", 200, "text/event-stream"
                else:
                    body, status, ctype = f"request was:\n{echo}", int(kind), "text/plain"
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.mark.model
def test_the_api_key_is_never_logged_raised_returned_or_stored(model_paths, assistant_home, caplog, capfd):
    caplog.set_level(logging.DEBUG)  # every logger, httpx and httpcore included
    server = EchoingEndpoint()
    config = RemoteConfig(server.url, KEY, "remote-model", retries=1, backoff_s=0.01)
    assert KEY not in repr(config)
    a = Assistant(Database(db_path()), EngineConfig(model="demo-small", load=PARAMS, remote=config, kv_tiers=False))
    seen: list[str] = []  # everything the Assistant's caller gets: chunks, done payloads, errors
    try:
        cid = a.new_conversation()
        server.replies = ["500", "answer", "401", "garbage", "500", "429", "400"]
        for text in ("Design a cache.", "Design a queue.", "Design a log.", "Design a store.", "Design an index."):
            try:
                for item in a.send(cid, text, greedy(4), route="L3"):
                    seen.append(json.dumps(vars(item), ensure_ascii=False, default=str))
            except InputError as exc:  # a request the endpoint rejects (400) is the user's to see
                seen.append(f"{exc!r} {exc.__cause__!r}")
        done = [json.loads(s) for s in seen if s.startswith("{") and '"message_id"' in s]
        levels = [(d["level"], d["fallback"]) for d in done]
    finally:
        server.stop()
        a.close()
        a.db.close()
    # The key really went out with every request ...
    assert server.authorizations == [f"Bearer {KEY}"] * 7
    # ... the turns went as expected (500 then an answer; 401; garbage; 500 and 429 exhausted; 400) ...
    assert levels == [("L3", None), ("L2", "L3 unreachable → L2"), ("L2", "L3 unreachable → L2"),
                      ("L2", "L3 unreachable → L2")], levels
    assert any(s.startswith("InputError") and "HTTP 400" in s for s in seen), seen
    # ... the endpoint's echoes reached our error messages, redacted ...
    logged = caplog.text + "".join(f"{r.getMessage()} {r.exc_text or ''}" for r in caplog.records)
    assert "Authorization: Bearer ***" in logged
    # ... and the key itself is nowhere: logs, errors, done payloads, stdout/stderr, the data folder.
    out, err = capfd.readouterr()
    assert KEY not in logged and KEY not in "".join(seen) and KEY not in out + err
    for p in assistant_home.rglob("*"):
        if p.is_file():
            assert KEY.encode() not in p.read_bytes(), p


# ---- chat templates from model files ------------------------------------------------------------

ATTACKS = {
    "mro": "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "globals": "{{ cycler.__init__.__globals__.os.popen('touch {canary}').read() }}",
    "self": "{{ self.__init__.__globals__.__builtins__.__import__('os').system('touch {canary}') }}",
    "lipsum": "{{ lipsum.__globals__['os'].system('touch {canary}') }}",
    "mutate": "{% set x = messages.append({'role': 'system', 'content': 'evil'}) %}{{ messages }}",
    "format": "{{ '{0.__class__.__init__.__globals__}'.format(cycler) }}",
    "huge-string": "{{ 'x' * 10**10 }}",
    "huge-number": "{{ 2 ** (2 ** 40) }}",
    "huge-range": "{% for i in range(10**9) %}x{% endfor %}",
    "huge-output": "{% for i in range(100000) %}{% for j in range(100) %}xxxxxxxxxx{% endfor %}{% endfor %}",
    "recursion": "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}",
    "type-error": "{{ messages[0]['content'] + 1 }}",
    "syntax": "{% for %}",
}


@pytest.mark.parametrize("kind", ATTACKS)
def test_a_hostile_template_fails_safely_and_fast(kind, tmp_path):
    canary = tmp_path / "pwned"
    source = ATTACKS[kind].replace("{canary}", str(canary))
    started = time.perf_counter()
    with pytest.raises(ChatTemplateError, match="chat template 'gguf'"):
        ChatTemplate(source, "gguf").render(["system", "user"], add_generation_prompt=True)
    assert not canary.exists()
    assert time.perf_counter() - started < 20  # a generous stall probe: nothing is built or looped at length


# Reads that the sandbox answers with an undefined value: they render as nothing, leak nothing.
QUIET = {
    "attr-filter": "{{ ''|attr('__class__') }}",
    "dunder-read": "{{ strftime_now.__globals__ }}{{ namespace.__init__ }}",
}


@pytest.mark.parametrize("kind", QUIET)
def test_a_sandboxed_read_renders_as_nothing(kind):
    rendered = ChatTemplate(QUIET[kind] + "{{ messages[0]['content'] }}", "gguf").render(["user"], True)
    assert rendered.pieces == [0]  # only the message's own slot: no class, function or module text


def test_the_output_cap_leaves_real_templates_alone():
    from engine.inference.templates import CHATML_TEMPLATE

    roles = ["system"] + ["user", "assistant"] * 2000
    rendered = ChatTemplate(CHATML_TEMPLATE, "chatml").render(roles, add_generation_prompt=True)
    assert sum(len(p) for p in rendered.pieces if isinstance(p, str)) < MAX_RENDERED_CHARS
    assert sum(isinstance(p, int) for p in rendered.pieces) == len(roles)


def with_template(src: Path, dest: Path, template: str) -> Path:
    """A copy of a GGUF with its `tokenizer.chat_template` replaced (padded to the same length, so
    every offset after it stays valid)."""
    data = bytearray(src.read_bytes())
    key = b"tokenizer.chat_template"
    at = data.index(struct.pack("<Q", len(key)) + key) + 8 + len(key)
    vtype, n = struct.unpack_from("<IQ", data, at)
    assert vtype == 8  # a string
    body = template.encode()
    pad = n - len(body) - len("{##}")
    assert pad >= 0, "the replacement must not be longer than the original"
    data[at + 12:at + 12 + n] = body + b"{#" + b" " * pad + b"#}"
    dest.write_bytes(data)
    return dest


@pytest.fixture(scope="module")
def evil_gguf(model_paths, tmp_path_factory):
    return with_template(model_paths["demo-small"], tmp_path_factory.mktemp("evil") / "evil.gguf",
                         ATTACKS["mro"])


@pytest.mark.model
def test_a_model_with_a_hostile_template_is_refused_and_l1_answers(evil_gguf, caplog):
    a = Assistant(Database(db_path()), EngineConfig(tiers={"L1": "demo-small", "L2": str(evil_gguf)}, load=PARAMS, kv_tiers=False))
    try:
        cid = a.new_conversation()
        [done] = [x for x in a.send(cid, "Explain what a hash map is.", greedy(4), route="L2")
                  if isinstance(x, TurnDone)]
        assert (done.level, done.model, done.fallback) == ("L1", "demo-small", "L2 unavailable → L1")
        why = [r.getMessage() for r in caplog.records if r.getMessage().startswith("tier L2 unavailable")]
        assert why and "evil.gguf cannot be used: chat template 'gguf' failed: access to attribute '__class__' " \
                       "of 'str' object is unsafe" in why[0], why
        assert [w.model.id for w in a.manager.loaded()] == ["demo-small"]  # the refused model was freed
    finally:
        a.close()
        a.db.close()
    db = Database(db_path())
    try:
        with pytest.raises(ModelLoadError, match="cannot be used: chat template"):
            Assistant(db, EngineConfig(model=str(evil_gguf), load=PARAMS, kv_tiers=False))
    finally:
        db.close()


@pytest.mark.model
def test_the_cli_refuses_a_model_with_a_hostile_template(evil_gguf, assistant_home):
    proc = subprocess.run(cli("chat", "--json", "--no-memory", "--model", str(evil_gguf)), input=b"hi\n",
                          capture_output=True, env=cli_env(assistant_home), timeout=120)
    events = [json.loads(line) for line in proc.stdout.decode().splitlines() if line.strip()]
    assert proc.returncode == 3 and "Traceback" not in proc.stderr.decode(), proc.stderr.decode()
    assert events[-1]["event"] == "error" and re.search(r"evil\.gguf cannot be used: chat template .* unsafe",
                                                        events[-1]["message"]), events


# ---- downloads checked against the catalog ------------------------------------------------------

REPO = "HuggingFaceTB/SmolLM2-135M-Instruct"


@pytest.mark.model
def test_a_download_that_does_not_match_the_catalogs_sha256_is_not_kept(model_paths, tmp_path, monkeypatch):
    source = model_paths["demo-small"]
    good = hashlib.sha256(source.read_bytes()).hexdigest()
    monkeypatch.setenv("ASSISTANT_MODELS_DIR", str(tmp_path / "models"))
    hub = HubServer({f"{REPO}/{source.name}": source})  # serves the true bytes, its ETag their true sha256
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    dest = tmp_path / "models" / source.name
    base = replace(load_catalog().get("demo-small"), id="smol-download", source_repo=REPO, file=source.name)
    try:
        # The catalog's digest wins over the hub's: a hub (or mirror) serving other bytes is refused.
        with pytest.raises(DownloadError, match=r"failed its sha256 check .* the download was deleted"):
            download(replace(base, sha256="0" * 64), dest=dest)
        assert not dest.exists() and not part_path(dest).exists()
        assert download(replace(base, sha256=good), dest=dest) == dest
        assert hashlib.sha256(dest.read_bytes()).hexdigest() == good
    finally:
        hub.stop()
