"""CPU against every Vulkan/CUDA/Metal device ggml offers: prompt and decode speed, planner error,
launch → first token, and KV restore with the cache on the device, with the same prompts in the
same run.

    GGML_VK_VISIBLE_DEVICES=0 .venv/bin/python bench/gpu_speed.py [--prompt-tokens 370] [--decode 16]
        [--runs 2] [--no-restore] [--json out.json]

GGML_VK_VISIBLE_DEVICES=0 shows Mesa's lavapipe (a software Vulkan GPU, as in CI) to llama.cpp,
which hides CPU-type Vulkan devices otherwise. For each demo model and each device: a full
offload (all layers; the CPU row: none, and no device used at all), a prompt evaluated from an
empty cache (prompt tok/s; the engine waits for the device after each piece, so this is the
evaluation's time, not the queueing's), then greedy decoding (decode tok/s), median of `--runs`,
after one warm-up (lavapipe compiles each shader on its first use).
Planner error: the plan's bytes on the device against the buffers llama.cpp allocated there
(weights, KV cache, compute), as (planned - actual) / actual. Launch → first token: `assistant chat
--json` started as a new process with one message, on the CPU and offloaded, until its first token
event. KV restore: a ~900-token chat parked and brought back from RAM (warm) and, after a restart,
from disk (cold), its cache on the device. Prints markdown tables (docs/gpu.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("ASSISTANT_HOME", tempfile.mkdtemp(prefix="bench-gpu-"))
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.api import Assistant, EngineConfig, TurnDone  # noqa: E402
from engine.config.paths import db_path  # noqa: E402
from engine.inference.backend import Backend, LoadParams, SamplingParams  # noqa: E402
from engine.inference.events import GenerateParams, TurnResult  # noqa: E402
from engine.inference.generate import generate  # noqa: E402
from engine.inference.manager import ModelManager  # noqa: E402
from engine.storage import Database  # noqa: E402
from engine.models.catalog import load_catalog  # noqa: E402
from engine.models.ggml_registry import registry  # noqa: E402
from engine.models.planner import plan  # noqa: E402

GREEDY = SamplingParams(temperature=0.0, repeat_penalty=1.0, seed=1)
TEXT = ("The river bends twice before it reaches the old mill. Tea was first traded along mountain roads. "
        "Every library keeps a few books that nobody has opened. A good map leaves out almost everything. ") * 9
MODELS = ["demo-small", "demo-int4"]


def devices() -> list[tuple[str, str | None]]:
    """("cpu", None) and (label, ggml name) for each GPU-type device ggml lists, software ones included."""
    out = [("CPU", None)]
    for d in registry().devices():
        if d.is_gpu:
            out.append((f"{d.backend} {d.name} ({d.description.split('(')[0].strip()})", d.name))
    return out


def measure(path: Path, device: str | None, decode: int, threads: int, n_prompt: int) -> dict:
    n_ctx = 2048
    p = plan(path, 1 << 20, n_ctx, n_gpu_layers=-1 if device else 0)
    kw = {k: v for k, v in p.load_kwargs().items() if k != "n_batch"}
    t0 = time.perf_counter()
    b = Backend(path, LoadParams(n_threads=threads, gpu_device=device, **kw))
    load_s = time.perf_counter() - t0
    try:
        prompt = (b.tokenize(TEXT, special=False) * 4)[:n_prompt]
        b.reset()
        for _ in generate(b, prompt[:8], GenerateParams(sampling=GREEDY, max_tokens=2)):  # warm-up
            pass
        b.reset()
        result = next(r for r in generate(b, prompt, GenerateParams(sampling=GREEDY, max_tokens=decode))
                      if isinstance(r, TurnResult))
        s = result.stats
        row = {"load_s": load_s, "prompt_tokens": s.prompt_tokens_evaluated, "prompt_tps": s.prompt_tps,
               "decode_tokens": s.completion_tokens, "decode_tps": s.decode_tps, "tokens": result.token_ids,
               "offload": b.offload}
        if device:
            r = b.memory_report
            actual = sum(r[k].get(device, 0) for k in ("weights", "kv", "compute", "output"))
            row["planned_mib"], row["actual_mib"] = p.gpu_bytes_total / 2**20, actual / 2**20
            row["plan_error"] = (p.gpu_bytes_total - actual) / actual if actual else None
        return row
    finally:
        b.close()


def restore_ms(model: str, device: str | None, threads: int) -> dict:
    """A ~900-token chat coming back while its KV cache lives on `device`: from RAM after another
    chat used the context (warm), from its file after a restart (cold), against evaluating it
    from scratch (its first turn's TTFT)."""
    os.environ["ASSISTANT_HOME"] = tempfile.mkdtemp(prefix="bench-gpu-kv-")
    system = "You are a careful assistant. " + " ".join(
        f"Rule {i}: answer briefly, cite facts, never invent numbers or names." for i in range(60))

    def open_assistant() -> Assistant:
        manager = ModelManager(params=LoadParams(n_ctx=2048, n_threads=threads),
                               gpu_device=device or "none", n_gpu_layers=-1 if device else 0)
        return Assistant(Database(db_path()), EngineConfig(model=model), manager=manager)

    def ask(a: Assistant, cid: int, text: str) -> dict:
        return [x for x in a.send(cid, text, GenerateParams(sampling=GREEDY, max_tokens=2))
                if isinstance(x, TurnDone)][-1].stats.as_json()

    a = open_assistant()
    try:
        chats = [a.new_conversation(system), a.new_conversation(system.replace("careful", "terse"))]
        scratch = ask(a, chats[0], "Hi!")
        ask(a, chats[1], "Hi!")
        warm = ask(a, chats[0], "And now?")
    finally:
        a.close()
        a.db.close()
    b = open_assistant()
    try:
        cold = ask(b, chats[1], "And now?")
    finally:
        b.close()
        b.db.close()
    assert (warm["restored_from"], cold["restored_from"]) == ("warm", "cold"), (warm, cold)
    return {"history_tokens": scratch["prompt_tokens"], "scratch_ttft_ms": scratch["ttft_ms"],
            "warm_restore_ms": warm["restore_ms"], "warm_ttft_ms": warm["ttft_ms"],
            "cold_restore_ms": cold["restore_ms"], "cold_ttft_ms": cold["ttft_ms"]}


def first_token_s(model: str, device: str | None) -> float:
    args = [sys.executable, "-m", "engine.cli.main", "chat", "--json", "--model", model, "--no-memory",
            "--max-tokens", "2", "--temperature", "0", "--n-ctx", "1024"]
    args += ["--gpu-device", device, "--n-gpu-layers", "-1"] if device else ["--gpu-device", "none"]
    env = dict(os.environ, ASSISTANT_HOME=tempfile.mkdtemp(prefix="bench-gpu-launch-"))
    t0 = time.perf_counter()
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, env=env, cwd=ROOT)
    proc.stdin.write("Hello!\n")
    proc.stdin.close()
    elapsed = None
    for line in proc.stdout:
        event = json.loads(line).get("event")
        if event == "token" and elapsed is None:
            elapsed = time.perf_counter() - t0
    proc.wait()
    return elapsed if elapsed is not None else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--decode", type=int, default=16)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=370)
    ap.add_argument("--no-restore", action="store_true", help="skip the KV restore table (slow on lavapipe)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    catalog = load_catalog()
    rows = []
    for model in MODELS:
        path = catalog.get(model).path()
        for label, device in devices():
            runs = [measure(path, device, args.decode, args.threads, args.prompt_tokens) for _ in range(args.runs)]
            row = runs[-1] | {"model": model, "device": label,
                              "prompt_tps": statistics.median(r["prompt_tps"] for r in runs),
                              "decode_tps": statistics.median(r["decode_tps"] for r in runs),
                              "load_s": statistics.median(r["load_s"] for r in runs)}
            row["first_token_s"] = first_token_s(model, device)
            row["restore"] = None if args.no_restore else restore_ms(model, device, args.threads)
            rows.append(row)
            print(f"{model} on {label}: {row['prompt_tps']:.0f} prompt tok/s, {row['decode_tps']:.1f} decode tok/s",
                  file=sys.stderr)
    for model in MODELS:  # greedy agreement with the CPU row of the same model
        mine = [r for r in rows if r["model"] == model]
        cpu = mine[0]["tokens"]
        for r in mine:
            r["same_tokens"] = next((i for i, (a, b) in enumerate(zip(cpu, r["tokens"])) if a != b),
                                    min(len(cpu), len(r["tokens"])))
    print(f"\nPrompt: {rows[0]['prompt_tokens']} tokens from an empty cache; decode: {args.decode} tokens greedy; "
          f"median of {args.runs}; {args.threads} CPU threads.\n")
    print("| model | device | layers on device | prompt tok/s | vs CPU | decode tok/s | vs CPU | load s "
          "| launch → first token s | greedy = CPU for |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        cpu = next(x for x in rows if x["model"] == r["model"] and x["device"] == "CPU")
        print(f"| {r['model']} | {r['device']} | {r['offload']['n_gpu_layers']}/{r['offload']['n_layers']} "
              f"| {r['prompt_tps']:.0f} | {r['prompt_tps'] / cpu['prompt_tps']:.2f}× | {r['decode_tps']:.1f} "
              f"| {r['decode_tps'] / cpu['decode_tps']:.2f}× | {r['load_s']:.2f} | {r['first_token_s']:.2f} "
              f"| {r['same_tokens']}/{len(cpu['tokens'])} tokens |")
    print("\n| model | device | planned on device MiB | allocated MiB | planner error |")
    print("|---|---|---:|---:|---:|")
    for r in rows:
        if "plan_error" in r:
            print(f"| {r['model']} | {r['device']} | {r['planned_mib']:.1f} | {r['actual_mib']:.1f} "
                  f"| {r['plan_error']:+.1%} |")
    if any(r["restore"] for r in rows):
        print("\n| model | device | chat tokens | from scratch: TTFT ms | warm: restore ms | warm: TTFT ms "
              "| cold: restore ms | cold: TTFT ms |")
        print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        k = r["restore"]
        if k is None:
            continue
        print(f"| {r['model']} | {r['device']} | {k['history_tokens']} | {k['scratch_ttft_ms']:.0f} "
              f"| {k['warm_restore_ms']:.1f} | {k['warm_ttft_ms']:.0f} | {k['cold_restore_ms']:.1f} | {k['cold_ttft_ms']:.0f} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
