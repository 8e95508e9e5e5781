"""The app in a subprocess for the crash tests: the terminal chat and the desktop window, each
playing a run's plan and printing JSON lines that a reader thread stamps with the test's clock."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.util import cli, cli_env

N_CTX = 512           # small: every restart re-reads at most this much; long chats overflow (real too)
SHORT_TOKENS = 16
LONG_TOKENS = 300     # in a new chat the long answers below run to 376-400 tokens on demo-small
                      # (measured); in a long chat the tiny model stops sooner, so four are queued
WAIT_S = 240          # longest wait for any one event (model load + a full window's prefill)
DRIVER = Path(__file__).resolve().parent / "gui_driver.py"
# A 1 MB warm KV tier: every parked chat goes straight to its cold file while the app runs.
ENV = {"ASSISTANT_KV_WARM_BUDGET_MB": "1"}
# The terminal chat runs without memory (its embedder load costs each of its 41 starts a CPU
# second); the desktop app keeps the default (memory on), so its kills also land in memory writes.
NO_MEMORY = ["--no-memory"]


def answered(stats: dict, max_tokens: int) -> bool:
    """A turn that ended normally: a stop, the token limit, or the context filled exactly as the
    window planned (it reserves max_tokens: prompt + answer = n_ctx, the limit reached at once)."""
    if stats["finish_reason"] == "context_full":
        return stats["completion_tokens"] == max_tokens
    return stats["finish_reason"] in ("stop", "length")


class JsonProc:
    """A child printing JSON lines; a thread stamps each line with our clock as it arrives."""

    def __init__(self, argv: list[str], home: Path, stdin: bytes = b""):
        env = cli_env(home) | ENV
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
                                     env=env)
        if stdin:  # stdin stays open: after its lines the chat idles until killed
            self.proc.stdin.write(stdin)
            self.proc.stdin.flush()
        self.events: queue.Queue = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.strip():
                self.events.put((time.monotonic(), json.loads(line)))
        self.events.put((time.monotonic(), None))

    def next(self, until: float) -> tuple[float, dict] | None:
        """The next event, or None when `until` (monotonic) passes first."""
        try:
            t, event = self.events.get(timeout=max(0.0, until - time.monotonic()))
        except queue.Empty:
            return None
        assert event is not None, f"the app exited (rc {self.proc.wait()}): {self.stderr_tail()}"
        assert event["event"] not in ("error", "failed"), f"{event}: {self.stderr_tail()}"
        return t, event

    def expect(self, kind: str) -> tuple[float, dict]:
        """The next event of this kind (the ones before it are skipped)."""
        deadline = time.monotonic() + WAIT_S
        while True:
            got = self.next(deadline)
            assert got is not None, f"no {kind} event in {WAIT_S} s: {self.stderr_tail()}"
            if got[1]["event"] == kind:
                return got

    def kill(self) -> None:
        """SIGKILL (a no-op once it exited), then release the pipes."""
        self.proc.kill()
        self.proc.wait()
        self.reader.join(10)
        for f in (self.proc.stdin, self.proc.stdout, self.stderr):
            f.close()

    def close(self, timeout: float = WAIT_S) -> int:
        """End of input: the app finishes and exits by itself."""
        self.proc.stdin.close()
        try:
            return self.proc.wait(timeout)
        finally:
            self.kill()

    def __enter__(self) -> JsonProc:
        return self

    def __exit__(self, *exc) -> None:
        self.kill()  # never leave a child behind, whatever failed

    def stderr_tail(self) -> str:
        if self.stderr.closed:
            return ""
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")[-3000:]


@dataclass
class Plan:
    """One run: where its short question goes, where its long ones go, and when it dies."""

    k: int
    model: str
    follow: int | None   # the chat the previous run was killed in (None: a new chat)
    target: int | None   # the chat of the long question; None: a new chat
    short: str
    longs: list[str]     # asked one after the other until the kill
    early: bool          # kill aimed before the long answer's first token
    delay: float         # seconds after the short answer (early) or after the first long token
    seed: int


@dataclass
class Seen:
    """What the user saw of a run."""

    short_done: dict
    target: int
    tokens: list[tuple[float, str]] = field(default_factory=list)  # (our clock, text) of the answer being written
    dones: list[tuple[str, dict]] = field(default_factory=list)  # long answers that finished: (question, done)
    kill_after_first_s: float | None = None
    current: str | None = None  # the question being answered at the kill (None: all were answered)


class Cli:
    """The terminal chat. Its token limit is per process, so the turn after a crash is a process of
    its own (restart, one short answer, quit), and the killed process asks only the long questions."""

    name = "cli"

    def start(self, home: Path, plan: Plan) -> tuple[JsonProc, dict]:
        short_done = self.answer(home, plan.model, plan.follow, plan.short)
        cid = short_done["conversation_id"]
        lines = ["/new"] if plan.target is None else [f"/switch {plan.target}"] if plan.target != cid else []
        args = ["chat", "--json", "--model", plan.model, "--n-ctx", str(N_CTX), "--temperature", "0.8",
                "--seed", str(plan.seed), "--max-tokens", str(LONG_TOKENS), "--conversation", str(cid), *NO_MEMORY]
        return JsonProc(cli(*args), home, ("\n".join(lines + plan.longs) + "\n").encode()), short_done

    def switched(self, proc: JsonProc, plan: Plan, short_done: dict) -> tuple[float, int]:
        t, event = proc.expect("conversation")  # the model is loaded
        if plan.target != short_done["conversation_id"]:
            t, event = proc.expect("conversation")  # after /switch or /new
        return t, event["conversation_id"]

    def answer(self, home: Path, model: str, cid: int | None, text: str, greedy: bool = False) -> dict:
        args = ["chat", "--json", "--model", model, "--n-ctx", str(N_CTX), "--max-tokens", str(SHORT_TOKENS),
                *NO_MEMORY, *(["--temperature", "0", "--seed", "1"] if greedy else [])]
        with JsonProc(cli(*args, *(["--conversation", str(cid)] if cid is not None else [])), home,
                      (text + "\n").encode()) as proc:
            _, done = proc.expect("done")
            tail = proc.stderr_tail()
            assert proc.close() == 0, tail
        return done

    def finish(self, home: Path, cid: int, text: str) -> dict:
        return self.answer(home, "demo-small", cid, text)


class Gui:
    """The desktop window, driven by gui_driver.py: one process per run asks the short question,
    then the long ones, and is killed."""

    name = "gui"

    def steps(self, model: str, follow: int | None) -> list[dict]:
        return [{"model": model, "n_ctx": N_CTX, "temperature": 0.8}] + ([{"open": follow}] if follow else [])

    def start(self, home: Path, plan: Plan) -> tuple[JsonProc, dict]:
        steps = self.steps(plan.model, plan.follow) + [{"send": plan.short, "max_tokens": SHORT_TOKENS}]
        if plan.target is None:
            steps.append({"new": True})
        elif plan.target != plan.follow:
            steps.append({"open": plan.target})
        steps += [{"send": text, "max_tokens": LONG_TOKENS} for text in plan.longs]
        proc = JsonProc([sys.executable, str(DRIVER), json.dumps(steps)], home)
        try:
            return proc, proc.expect("done")[1]
        except BaseException:
            proc.kill()
            raise

    def switched(self, proc: JsonProc, plan: Plan, short_done: dict) -> tuple[float, int]:
        if plan.target is not None and plan.target == short_done["conversation_id"]:
            return time.monotonic(), plan.target
        t, event = proc.expect("opened")
        return t, event["conversation_id"]

    def finish(self, home: Path, cid: int, text: str) -> dict:
        steps = self.steps("demo-small", cid) + [{"send": text, "max_tokens": SHORT_TOKENS}, {"close": True}]
        with JsonProc([sys.executable, str(DRIVER), json.dumps(steps)], home) as proc:
            _, done = proc.expect("done")
            proc.expect("closed")
            tail = proc.stderr_tail()
            assert proc.close() == 0, tail
        return done
