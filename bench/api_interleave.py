"""The local API server (issue 16) against llama-cpp-python's own server, same model file, same
n_ctx, same threads, in one run:

    .venv/bin/python bench/api_interleave.py [--clients 2 4 8] [--turns 3] [--model demo-small]

For each client count N both servers start fresh (ours in a new ASSISTANT_HOME with
server.store_conversations off; theirs as `python -m llama_cpp.server --cache True`). N stateless
clients, each seeded with a ~1 000-token history of distinct long turns, take turns round-robin:
every request resends the client's whole history plus one short new question, streamed. Each
request goes to both servers back to back (who goes first alternates), so machine noise hits both.
TTFT = request sent → first non-empty content delta. Round 1 is each client's first visit (the
whole history is evaluated by both); later rounds are switch-backs (N-1 other chats ran since).
Then the N clients fire at once (throughput), and server RSS is read from /proc. Last, one answer
is streamed through our server and through `Assistant.send` in-process: the HTTP layer's cost per
token. Prints markdown tables (docs/benchmarks.md quotes them).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llama_cpp import Llama  # noqa: E402 - a vocab-only tokenizer sizes the histories

from engine.api import Assistant, Chunk, Settings, TurnDone  # noqa: E402
from engine.inference.backend import SamplingParams  # noqa: E402
from engine.inference.events import GenerateParams  # noqa: E402
from engine.models.catalog import resolve_model  # noqa: E402
from engine.models.ggml_registry import registry  # noqa: E402

log = logging.getLogger("bench.api_interleave")

N_CTX = 4096
SYSTEM = "You are a patient teacher who answers briefly."
TOPICS = ["the history of the bicycle", "how bread rises", "why the sky is blue", "the rules of chess",
          "how vaccines work", "the water cycle", "what a compiler does", "how tides happen",
          "the life of bees", "how a refrigerator cools", "the Silk Road", "plate tectonics",
          "how a violin makes sound", "the first printing presses", "why leaves change colour",
          "how a lighthouse lens works"]
DETAILS = ["where it started", "who shaped it", "the tools involved", "a common mistake people make",
           "how it is measured", "what changed in the last century", "a surprising fact",
           "how a child could try it at home"]
LONG_ANSWER = "Write a long, detailed story about a dragon who learns to paint."
START_S = 180
# llama_cpp.server in a process of its own. The wheel is a GGML_BACKEND_DL build: the backend
# modules beside libllama are loaded first (what the packaging patch does at import; a no-op when
# they are loaded already), then the server module runs as `python -m llama_cpp.server` would.
THEIRS = ("import ctypes, importlib.util, pathlib, runpy\n"
          "lib = pathlib.Path(importlib.util.find_spec('llama_cpp').submodule_search_locations[0]) / 'lib'\n"
          "soname = min(lib.glob('libggml.so.*'), key=lambda p: (len(p.name), p.name))  # the one libllama links\n"
          "ggml = ctypes.CDLL(str(soname))\n"
          "ggml.ggml_backend_reg_count.restype = ctypes.c_size_t\n"
          "if not ggml.ggml_backend_reg_count():\n"
          "    ggml.ggml_backend_load_all_from_path(str(lib).encode())\n"
          "runpy.run_module('llama_cpp.server', run_name='__main__', alter_sys=True)\n")


# ---- histories
def seed_history(client: int, count, target: int) -> list[dict]:
    """A system message and distinct long user/assistant turns, about `target` tokens."""
    messages, n, i = [{"role": "system", "content": SYSTEM}], count(SYSTEM), 0
    while n < target:
        topic, detail = TOPICS[(client + i) % len(TOPICS)], DETAILS[(client * 3 + i) % len(DETAILS)]
        q = f"Chat {client}, question {i + 1}: tell me about {topic}, especially {detail}."
        a = (f"About {topic} and {detail}: " + " ".join(
            f"({k}) In chat {client}, part {i + 1}.{k}, {topic} shows how {detail} builds on careful "
            f"observation, patient work and a few lucky accidents." for k in range(1, 5)))
        messages += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        n += count(q) + count(a) + 8  # + the template's role markers
        i += 1
    return messages


def question(client: int, turn: int) -> str:
    return f"Turn {turn}: in one sentence, what is the key idea of {TOPICS[(client + turn) % len(TOPICS)]}?"


# ---- servers
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A server process on loopback, answering OpenAI's chat completions."""

    def __init__(self, name: str, cmd: list[str], port: int, key: str, env: dict, extra: dict | None = None):
        self.name, self.port, self.extra = name, port, extra or {}
        self.url = f"http://127.0.0.1:{port}/v1/chat/completions"
        self.headers = {"Authorization": f"Bearer {key}"}
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.log, env=env)
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.log.seek(0)
                raise SystemExit(f"{name} exited: {self.log.read().decode(errors='replace')[-2000:]}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/v1/models", headers=self.headers, timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        self.stop()
        raise SystemExit(f"{name} did not answer within {START_S} s")

    def rss_mb(self) -> tuple[float, float]:
        """(resident now, peak) in MB, from /proc."""
        fields = {}
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            fields[key] = value
        return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def fresh_home(threads: int, memory: bool, summary: bool, calibration: Path | None = None) -> Path:
    """A new data dir whose settings match the anchor: n_ctx exactly N_CTX (n_ctx_max 0, not the
    longer context the model allows), the same threads (0: automatic), API conversations not stored.
    `calibration`: a cpu_calibration.json to start from, so the server does not calibrate at its load."""
    home = Path(tempfile.mkdtemp(prefix="bench-api-"))
    if calibration is not None:
        shutil.copy(calibration, home / calibration.name)
    (home / "settings.json").write_text(json.dumps({
        "runtime.n_ctx": N_CTX, "runtime.n_ctx_max": 0, "runtime.n_threads": threads,
        "server.store_conversations": False, "memory.enabled": memory,
        **({} if summary else {"summary.every_turns": 0})}), encoding="utf-8")
    return home


def start_ours(model: str, threads: int, memory: bool, summary: bool, calibration: Path | None = None) -> Server:
    home = fresh_home(threads, memory, summary, calibration)
    env = dict(os.environ, ASSISTANT_HOME=str(home), PYTHONPATH=str(ROOT))
    port, key = free_port(), secrets.token_urlsafe(24)
    cmd = [str(Path(sys.executable).with_name("assistant")), "serve", "--model", model, "--port", str(port),
           "--api-key", key]
    return Server("ours", cmd, port, key, env, {"model": model, "stream_options": {"include_usage": True}})


def start_theirs(path: Path, threads: int) -> Server:
    """llama-cpp-python's server; `threads` 0 leaves its own defaults (half the CPUs for decode, all
    of them for prompts)."""
    port = free_port()
    counts = ["--n_threads", str(threads), "--n_threads_batch", str(threads)] if threads > 0 else []
    cmd = [sys.executable, "-c", THEIRS, "--model", str(path), "--host", "127.0.0.1", "--port", str(port),
           "--n_ctx", str(N_CTX), *counts, "--cache", "True", "--interrupt_requests", "False", "--verbose", "False"]
    return Server("llama-cpp-python", cmd, port, "none", dict(os.environ), {"model": path.stem})


def stream_chat(http: httpx.Client, server: Server, messages: list[dict], max_tokens: int) -> dict:
    """One streamed request: ttft_ms, text, usage (ours only), the times of content deltas."""
    body = {"messages": messages, "stream": True, "max_tokens": max_tokens, "temperature": 0.0, "seed": 1,
            **server.extra}
    text, times, usage = [], [], None
    t0 = time.perf_counter()
    with http.stream("POST", server.url, json=body, headers=server.headers, timeout=600) as r:
        if r.status_code != 200:
            raise SystemExit(f"{server.name}: HTTP {r.status_code}: {r.read().decode(errors='replace')[:500]}")
        for line in r.iter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            event = json.loads(data)
            usage = event.get("usage") or usage
            for choice in event.get("choices") or []:
                piece = (choice.get("delta") or {}).get("content")
                if piece:
                    times.append(time.perf_counter())
                    text.append(piece)
    if not times:
        raise SystemExit(f"{server.name} streamed no content")
    return {"ttft_ms": (times[0] - t0) * 1000, "text": "".join(text), "usage": usage, "times": times}


def whole_chat(server: Server, messages: list[dict], max_tokens: int) -> dict:
    body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0.0, "seed": 1, "model": server.extra["model"]}
    r = httpx.post(server.url, json=body, headers=server.headers, timeout=600)
    r.raise_for_status()
    return r.json()


def busy_cpu_s() -> float:
    """CPU seconds the whole machine has spent busy since boot (/proc/stat), all processes."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def own_cpu_s() -> float:
    """CPU seconds of this process and its reaped children (both servers, once stopped)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


# ---- measurements
def interleave(servers: list[Server], histories: dict[str, list[list[dict]]], turns: int,
               answer_tokens: int) -> list[dict]:
    """Round-robin turns; each request to both servers back to back. One row per request."""
    rows = []
    clients = {s.name: httpx.Client() for s in servers}
    try:
        for turn in range(turns):
            for i in range(len(histories[servers[0].name])):
                order = servers if (turn + i) % 2 == 0 else servers[::-1]
                for server in order:
                    history = histories[server.name][i]
                    history.append({"role": "user", "content": question(i, turn)})
                    got = stream_chat(clients[server.name], server, history, answer_tokens)
                    history.append({"role": "assistant", "content": got["text"]})
                    usage = got["usage"] or {}
                    rows.append({"server": server.name, "turn": turn, "client": i, "ttft_ms": got["ttft_ms"],
                                 "prompt_tokens": usage.get("prompt_tokens"),
                                 "cached": (usage.get("prompt_tokens_details") or {}).get("cached_tokens")})
                    log.info("%s round %d client %d: TTFT %.0f ms, prompt %s, cached %s", server.name, turn + 1, i,
                             got["ttft_ms"], rows[-1]["prompt_tokens"], rows[-1]["cached"])
    finally:
        for c in clients.values():
            c.close()
    return rows


def burst(server: Server, histories: list[list[dict]], answer_tokens: int) -> tuple[float, int, float]:
    """All clients at once, whole answers: (completion tokens/s overall, tokens, wall s)."""
    start, results = threading.Barrier(len(histories) + 1), [0] * len(histories)

    def one(i: int) -> None:
        messages = histories[i] + [{"role": "user", "content": question(i, 99)}]
        start.wait()
        results[i] = whole_chat(server, messages, answer_tokens)["usage"]["completion_tokens"]

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(histories))]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return sum(results) / wall, sum(results), wall


def per_token_ms(times: list[float], tokens: int) -> float:
    return (times[-1] - times[0]) * 1000 / max(tokens - 1, 1)


def http_overhead(model: str, threads: int, memory: bool, summary: bool, tokens: int, repeats: int) -> list[str]:
    """The same answer streamed through our server and through `Assistant.send` in-process."""
    ours = start_ours(model, threads, memory, summary)
    os.environ["ASSISTANT_HOME"] = str(fresh_home(threads, memory, summary))
    assistant = Assistant.from_settings(Settings(), model=model, n_ctx=N_CTX, n_threads=threads)
    params = GenerateParams(SamplingParams(temperature=0.0, seed=1), max_tokens=tokens)
    http, local, counts = [], [], set()
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": LONG_ANSWER}]
    try:
        with httpx.Client() as client:
            for i in range(repeats):
                for who in (("http", "local") if i % 2 == 0 else ("local", "http")):
                    if who == "http":
                        got = stream_chat(client, ours, messages, tokens)
                        n = got["usage"]["completion_tokens"]
                        http.append(per_token_ms(got["times"], n))
                    else:
                        cid = assistant.new_conversation(SYSTEM)
                        times, done = [], None
                        for item in assistant.send(cid, LONG_ANSWER, params, cascade=False):
                            if isinstance(item, Chunk) and item.text:
                                times.append(time.perf_counter())
                            elif isinstance(item, TurnDone):
                                done = item
                        n = done.stats.completion_tokens
                        local.append(per_token_ms(times, n))
                    counts.add((who, n))
    finally:
        assistant.close()
        ours.stop()
    h, loc = statistics.median(http), statistics.median(local)
    log.info("per-token ms: http %s local %s (tokens %s)", [round(x, 2) for x in http],
             [round(x, 2) for x in local], sorted(counts))
    n_tokens = "/".join(str(n) for n in sorted({n for _, n in counts}))
    return [f"### HTTP layer per token: one {n_tokens}-token answer, median of {repeats} interleaved runs", "",
            "| path | ms per token | tokens/s |", "|---|---:|---:|",
            f"| `Assistant.send` in-process | {loc:.2f} | {1000 / loc:.1f} |",
            f"| `assistant serve`, streamed over HTTP | {h:.2f} | {1000 / h:.1f} |",
            f"| difference (HTTP − in-process) | {h - loc:+.2f} ({(h - loc) / loc:+.1%}) | |", ""]


def run_clients(n: int, path: Path, model: str, threads: int, memory: bool, summary: bool, count,
                history_tokens: int, turns: int, answer_tokens: int, burst_tokens: int) -> dict:
    ours = start_ours(model, threads, memory, summary)
    try:
        theirs = start_theirs(path, threads)
    except BaseException:
        ours.stop()
        raise
    try:
        seeds = [seed_history(100 * n + i, count, history_tokens) for i in range(n)]
        histories = {s.name: [[dict(m) for m in h] for h in seeds] for s in (ours, theirs)}
        rows = interleave([ours, theirs], histories, turns, answer_tokens)
        tps = {}
        for server in ((ours, theirs) if n % 2 == 0 else (theirs, ours)):
            tps[server.name] = burst(server, histories[server.name], burst_tokens)
        rss = {s.name: s.rss_mb() for s in (ours, theirs)}
    finally:
        ours.stop()
        theirs.stop()
    later = [r for r in rows if r["turn"] > 0]
    first = [r for r in rows if r["turn"] == 0]
    med = lambda rs, who, key="ttft_ms": statistics.median(r[key] for r in rs if r["server"] == who)  # noqa: E731
    return {"n": n, "switch_ours": med(later, "ours"), "switch_theirs": med(later, "llama-cpp-python"),
            "first_ours": med(first, "ours"), "first_theirs": med(first, "llama-cpp-python"),
            "prompt": med(later, "ours", "prompt_tokens"), "cached": med(later, "ours", "cached"),
            "first_cached": med(first, "ours", "cached"), "tps": tps, "rss": rss, "rows": rows}


def threads_label(threads: int) -> str:
    return f"{threads} threads" if threads > 0 else "threads automatic (ours) / its defaults (theirs)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clients", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--turns", type=int, default=3, help="rounds per client; the first is the first visit")
    ap.add_argument("--model", default="demo-small")
    ap.add_argument("--history-tokens", type=int, default=1000, help="each client's seeded history")
    ap.add_argument("--answer-tokens", type=int, default=24, help="max_tokens of a round-robin turn")
    ap.add_argument("--burst-tokens", type=int, default=64, help="max_tokens of a concurrent request")
    ap.add_argument("--overhead-tokens", type=int, default=200)
    ap.add_argument("--overhead-repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                    help="both servers' threads; 0: ours automatic, llama-cpp-python's its defaults")
    ap.add_argument("--no-memory", action="store_true", help="run our server with memory.enabled off")
    ap.add_argument("--no-summary", action="store_true", help="run our server with summary.every_turns 0")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="# %(message)s", stream=sys.stderr)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if args.turns < 2:
        ap.error("--turns must be at least 2 (the first round is the first visit)")
    memory, summary = not args.no_memory, not args.no_summary
    path = resolve_model(args.model).path
    registry().load()  # the backend modules, before llama_cpp opens a model file
    vocab = Llama(model_path=str(path), vocab_only=True, verbose=False)
    count = lambda text: len(vocab.tokenize(text.encode(), add_bos=False, special=False))  # noqa: E731
    t_start, busy0, own0 = time.monotonic(), busy_cpu_s(), own_cpu_s()
    results = []
    for n in args.clients:
        r = run_clients(n, path, args.model, args.threads, memory, summary, count, args.history_tokens, args.turns,
                        args.answer_tokens, args.burst_tokens)
        log.info("%d clients done at %.0f s: switch-back ours %.0f ms, theirs %.0f ms", n,
                 time.monotonic() - t_start, r["switch_ours"], r["switch_theirs"])
        results.append(r)
    overhead = http_overhead(args.model, args.threads, memory, summary, args.overhead_tokens, args.overhead_repeats)
    wall = time.monotonic() - t_start
    # Other programs' CPU time during the run: on 2 cores it skews TTFT (and hits our model thread,
    # which runs at nice +5, harder than the anchor's).
    others = max(0.0, (busy_cpu_s() - busy0) - (own_cpu_s() - own0))
    share = others / (wall * (os.cpu_count() or 1))
    if share > 0.05:
        log.warning("other processes used %.0f CPU-seconds (%.0f%% of the machine) during this run: "
                    "its times are disturbed; rerun on a quiet machine", others, share * 100)

    out = [f"API server vs llama-cpp-python's server (`--cache True`): {args.model} ({path.name}), n_ctx {N_CTX}, "
           f"{threads_label(args.threads)}, {os.cpu_count()} CPUs, our memory {'on' if memory else 'off'}, "
           f"summaries {'on' if summary else 'off'}, "
           f"~{args.history_tokens}-token histories, {args.turns} rounds, answers ≤ {args.answer_tokens} tokens, "
           f"greedy, {wall:.0f} s; other processes used {share:.0%} of the CPUs meanwhile", "",
           "### Round-robin clients, streamed: TTFT median (ms)", "",
           "| clients | first visit ours | first visit theirs | switch-back ours | switch-back theirs | "
           "ours/theirs | prompt tokens | cached_tokens (switch-back) | cached_tokens (first visit) |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        out.append(f"| {r['n']} | {r['first_ours']:.0f} | {r['first_theirs']:.0f} | {r['switch_ours']:.0f} | "
                   f"{r['switch_theirs']:.0f} | {r['switch_ours'] / r['switch_theirs']:.2f}× | {r['prompt']:.0f} | "
                   f"{r['cached']:.0f} | {r['first_cached']:.0f} |")
    out += ["", f"### All clients at once (whole answers ≤ {args.burst_tokens} tokens): throughput and server RSS", "",
            "| clients | ours tok/s | theirs tok/s | ours tokens / wall s | theirs tokens / wall s | "
            "ours RSS MB (peak) | theirs RSS MB (peak) |", "|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        o, t = r["tps"]["ours"], r["tps"]["llama-cpp-python"]
        (ro, po), (rt, pt) = r["rss"]["ours"], r["rss"]["llama-cpp-python"]
        out.append(f"| {r['n']} | {o[0]:.1f} | {t[0]:.1f} | {o[1]} / {o[2]:.1f} | {t[1]} / {t[2]:.1f} | "
                   f"{ro:.0f} ({po:.0f}) | {rt:.0f} ({pt:.0f}) |")
    out += [""] + overhead
    sys.stdout.write("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
