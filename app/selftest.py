"""`assistant-gui --selftest`: prove an installed app works, headless, in seconds.

Starts Qt offscreen, builds the real main window (fonts, translations, engine thread), loads the
demo model, answers one prompt through the window, then checks the database (integrity, the turn is
stored) and the data dir (writable, outside the install folder). With nothing listening (the default),
it then serves the window's engine on a free loopback port for a moment (the local API server's
web stack in this install: models, a whole and a streamed chat) and checks the port is closed
again. Prints one JSON report; exit 0 when every check passed, else 1."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

PROMPT = "Say hello in one short sentence."
TIMEOUT_S = 300


def since_launch_ms() -> int:
    """Milliseconds since this process was created (the OS's clock): what a user waits, imports included."""
    import psutil

    return round((time.time() - psutil.Process().create_time()) * 1000)


def listening_sockets() -> list[str]:
    """Addresses this process listens on: an offline app opens none (L3 is an outgoing client)."""
    import psutil

    return [str(c.laddr) for c in psutil.Process().net_connections(kind="all") if c.status == psutil.CONN_LISTEN]


def documents_check() -> dict:
    """Index three tiny files (PDF, Markdown, HTML), find the PDF's page again, and
    start a folder watch: the parsers, the embedder and watchdog all work in this install."""
    import tempfile

    from engine.api import Documents, pdf_bytes

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="selftest-docs-") as folder:
        root = Path(folder)
        (root / "note.md").write_text("# Harbour\n\nThe ferry leaves at seven.\n", encoding="utf-8")
        (root / "page.html").write_text("<h1>Lanterns</h1><script>x()</script><p>Lanterns float on the river.</p>",
                                        encoding="utf-8")
        (root / "guide.pdf").write_bytes(pdf_bytes(["The orchard has seventeen pear trees."]))
        with Documents.open(db_file=root / "selftest.db") as docs:  # not the user's index
            report = docs.add_documents([str(root)], "selftest")
            hits = docs.search_documents("how many pear trees are in the orchard", collection="selftest")
            from watchdog.observers import Observer  # what the app's folder watch runs on

            observer = Observer()
            observer.schedule(_Quiet(), folder, recursive=True)
            observer.start()
            observer.stop()
            observer.join(5)
    found = bool(hits) and hits[0]["path"].endswith("guide.pdf") and hits[0]["page"] == 1
    return {"ok": report["indexed"] == 3 and found, "indexed": report["indexed"], "skipped": report["skipped"],
            "found_page": hits[0]["page"] if hits else None, "ms": round((time.perf_counter() - t0) * 1000)}


def mcp_check() -> dict:
    """The MCP SDK runs in this install: an in-process server's tool listed and called."""
    from engine.api import mcp_self_check

    try:
        return mcp_self_check()
    except Exception as exc:  # noqa: BLE001 - said in the report
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}


def update_check() -> dict:
    """The update check's signatures verify in this install (cryptography's native part is bundled)."""
    from engine.api import update_self_check

    try:
        return update_self_check()
    except Exception as exc:  # noqa: BLE001 - said in the report
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}


def api_server_check(window) -> dict:
    """Serve the window's engine (jobs on its engine thread) on a free loopback port with a one-off
    key (the user's key file is not touched): /v1/models without and with the key, a whole and a
    streamed chat completion; then stop, and nothing may listen any more."""
    import secrets
    import urllib.error
    import urllib.request

    from engine.api import Settings
    from engine.server import serve_in_background

    t0 = time.perf_counter()
    key = secrets.token_urlsafe(24)
    server = serve_in_background(window.worker.assistant, Settings.shared(), post=window.worker.post, host="127.0.0.1",
                                 port=0, allow_network=False, api_key=key)  # loopback whatever the settings say

    def call(path: str, body: dict | None = None, auth: bool = True) -> tuple[int, bytes]:
        headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {key}"} if auth else {})
        request = urllib.request.Request(server.url + path, json.dumps(body).encode() if body else None, headers)
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    try:
        without_key, _ = call("/models", auth=False)
        listed, models = call("/models")
        ask = {"model": "L1", "max_tokens": 4, "messages": [{"role": "user", "content": PROMPT}]}
        whole, answer = call("/chat/completions", ask)
        streamed, events = call("/chat/completions", ask | {"stream": True})
    finally:
        server.stop()
    text = json.loads(answer)["choices"][0]["message"]["content"] if whole == 200 else ""
    ok = (without_key == 401 and listed == 200 and b'"auto"' in models and whole == 200 and bool(text)
          and streamed == 200 and events.rstrip().endswith(b"data: [DONE]"))
    return {"ok": ok, "statuses": [without_key, listed, whole, streamed], "answer": text[:80],
            "closed": not listening_sockets(), "ms": round((time.perf_counter() - t0) * 1000)}


class _Quiet:
    def dispatch(self, event):  # watchdog's handler protocol
        pass


def run_selftest(model: str | None = None) -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    t0 = time.perf_counter()
    report: dict = {"checks": {}, "python": sys.version.split()[0], "frozen": bool(getattr(sys, "frozen", False))}
    checks = report["checks"]
    try:
        from PySide6.QtWidgets import QApplication

        from app.main import create_main_window
        from engine.api import database_check

        app = QApplication.instance() or QApplication([sys.argv[0]])
        _data_dir_check(report)
        window = create_main_window(model or "demo-small", temperature=0.0, max_tokens=16)
        error = _WindowRun(app, window, report, t0).run()
        _answer_check(window, report)
        window.close()  # already closed by quit() when it was shown; closing twice is harmless
        report["documents"] = documents_check()
        checks["documents_indexed"] = report["documents"].get("ok", False)
        report["mcp"] = mcp_check()
        checks["mcp_sdk"] = report["mcp"].get("ok", False)
        report["updates"] = update_check()
        checks["update_signatures"] = report["updates"].get("ok", False)
        stored = database_check(PROMPT)
        checks["db_integrity"] = stored["integrity"] == "ok"
        checks["turn_stored"] = stored["turn_stored"]
        if error:
            report["error"] = error
    except Exception as exc:  # noqa: BLE001 - the report says what broke; exit 1
        report["error"] = f"{type(exc).__name__}: {exc}"
    report["ok"] = bool(checks) and all(checks.values()) and "error" not in report
    report["total_ms"] = round((time.perf_counter() - t0) * 1000)
    _write_report(report)
    return 0 if report["ok"] else 1


def _data_dir_check(report: dict) -> None:
    """The data dir is writable and outside the install folder."""
    from engine.api import user_dir

    data = user_dir()
    install = Path(sys.executable).resolve().parent if report["frozen"] else Path(__file__).resolve().parent
    report["data_dir"] = str(data)
    report["checks"]["data_dir_outside_install"] = install not in data.resolve().parents and data.resolve() != install
    probe = data / ".selftest"
    probe.write_text("ok", encoding="utf-8")
    probe.unlink()
    report["checks"]["data_dir_writable"] = True


def _answer_check(window, report: dict) -> None:
    done = window.last_done
    report["checks"]["engine_started"] = window.engine_ready
    report["checks"]["answered"] = bool(done and done.text)
    if done:
        report["answer"] = done.text[:200]
        report["ttft_ms"] = round(done.stats.get("ttft_ms", 0))
        report["model"] = done.model


def _write_report(report: dict) -> None:
    text = json.dumps(report, ensure_ascii=False, indent=2)
    if sys.stdout is not None:
        print(text)
    else:  # a windowed Windows executable started without handles has no stdout: leave the report on disk
        try:
            from engine.api import user_dir

            (user_dir() / "selftest.json").write_text(text, encoding="utf-8")
        except OSError:
            pass


class _WindowRun:
    """Show the window, wait for the engine, send PROMPT, wait for the answer and the memory's
    embedder, then check the API server; the Qt loop runs until then (or TIMEOUT_S)."""

    def __init__(self, app, window, report: dict, t0: float):
        self.app, self.window, self.report, self.t0 = app, window, report, t0
        self.checks = report["checks"]
        self.sent = False
        self.error: str | None = None

    def run(self) -> str | None:
        """The error that ended the run early, or None."""
        from PySide6.QtCore import QTimer

        window, report = self.window, self.report
        window.show()
        self.app.processEvents()
        report["window_ms"] = round((time.perf_counter() - self.t0) * 1000)
        report["launch_to_window_ms"] = since_launch_ms()
        window.worker.tokens.connect(self.first_token)
        timer = QTimer()
        timer.setInterval(50)
        timer.timeout.connect(self.step)
        timer.start()
        self.app.exec()
        timer.stop()
        return self.error

    def first_token(self, _cid: int, _text: str) -> None:
        self.report.setdefault("launch_to_first_token_ms", since_launch_ms())

    def step(self) -> None:
        window, report, checks = self.window, self.report, self.checks
        if window.engine_error:
            self.error = window.engine_error
            self.app.quit()
        elif window.engine_ready and not self.sent:
            report["engine_ready_ms"] = round((time.perf_counter() - self.t0) * 1000)
            self.sent = True
            window.send_message(PROMPT)
        elif time.perf_counter() - self.t0 > TIMEOUT_S:
            self.error = f"timed out after {TIMEOUT_S} s" + self.waiting_for()
            self.app.quit()
        elif self.sent and not window.busy and self.memory_settled():
            checks["no_listening_socket"] = not listening_sockets()
            try:
                report["api_server"] = api_server_check(window)
            except Exception as exc:  # noqa: BLE001 - said in the report
                report["api_server"] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            checks["api_server"] = report["api_server"]["ok"]
            checks["api_server_closed"] = report["api_server"].get("closed", False)
            self.app.quit()  # closes the shown window: the engine saves its state and closes the database

    def memory_settled(self) -> bool:
        """Memory on (the default): its embedder must load in an installed app too. Only "ready"
        or "failed: …" can be judged; "not started" or "loading" (a status snapshot taken before
        the embedder began, on a machine that answers within one snapshot) means wait."""
        memory = self.window.worker.status().get("memory")
        if memory is None:
            return True
        self.report["memory"] = memory
        embedder = memory["embedder"]
        if embedder != "ready" and not embedder.startswith("failed"):
            return False
        self.checks["memory_ready"] = embedder == "ready"
        return True

    def waiting_for(self) -> str:
        if not self.sent:
            return ": the engine never became ready"
        if self.window.busy:
            return ": the answer never ended"
        embedder = (self.report.get("memory") or {}).get("embedder")
        if embedder is not None:
            self.checks["memory_ready"] = False
            return f": the memory's embedder was still {embedder!r}"
        return ""
