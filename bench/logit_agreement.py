"""How far a reused KV's logits stray from a fresh context's, under each CPU kernel ggml ships.

The model tests (tests/model/helpers.py) assert that a conversation's KV, built turn by turn, gives
the logits a fresh context gives when both are fed the same tokens (teacher-forced), within a bound.
This measures that bound: for each demo model, a few conversations are built turn by turn; their
next answer is then fed to both states and the logits compared (top-1 agreement, max and mean
|Δlogit|, and the largest logit gap where the argmaxes differ). With `--variants`, the same run
repeats in a child process per CPU variant this processor can run (ASSISTANT_CPU_VARIANT), and the
fresh logits of each variant are also compared with the best variant's.

Run: `.venv/bin/python bench/logit_agreement.py --variants`   (about 3 minutes per variant on 2 cores)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CONVERSATIONS = [
    ["Hi! What is the capital of France?", "And what river flows through it?", "Name one famous museum there."],
    ["I want to learn to bake bread.", "What flour should I buy?", "How long should the dough rise?"],
    ["Explain what a prime number is.", "Is 91 prime?", "Give me the next prime after 100."],
    ["你好，请介绍一下长城。", "它有多长？", "最适合什么季节去参观？"],
]
MODELS = ("demo-small", "demo-int4")
ANSWER_TOKENS = 48
FIXED_ANSWER = " Sure. Here is a short answer, with one example and one tip to remember it by."


def measure(out_dir: Path) -> dict:
    """Reuse vs fresh for each model and conversation, under the CPU variant this process loaded."""
    os.environ["ASSISTANT_HOME"] = tempfile.mkdtemp(prefix="bench-logits-")  # never the user's data
    from engine.api import Assistant, EngineConfig
    from engine.chat.session import Message, Session
    from engine.inference.backend import Backend, LoadParams
    from engine.models.ggml_registry import registry
    from engine.storage import Database
    from tests.model.helpers import forced_logits, greedy, logit_agreement, turn

    variant = registry().cpu_variant() or "static"
    results = {"variant": variant, "rows": []}
    for model in MODELS:
        db = Database(Path(os.environ["ASSISTANT_HOME"]) / f"{model}.db")
        assistant = Assistant(db, EngineConfig(model=model, load=LoadParams(n_ctx=2048, n_threads=2)))
        fresh_backend = Backend(assistant.backend.path, LoadParams(n_ctx=2048, n_threads=2))
        reused_rows, fresh_rows = [], []
        try:
            for n, script in enumerate(CONVERSATIONS):
                cid = assistant.new_conversation("You are a helpful assistant.")
                for text in script[:-1]:
                    turn(assistant, cid, text, params=greedy(24))
                prompt = assistant.session(cid).prompt(Message("user", script[-1]))
                answer = turn(assistant, cid, script[-1], params=greedy(ANSWER_TOKENS)).token_ids
                reused = forced_logits(assistant.backend, prompt, answer)
                fresh_backend.reset()
                fresh = forced_logits(fresh_backend, prompt, answer)
                # The same tokens under every variant (the answers above may differ): for the comparison
                # across kernels. Every earlier answer is a fixed text, and so is the one fed.
                fixed = [Message("system", "You are a helpful assistant.")]
                for text in script[:-1]:
                    fixed += [Message("user", text), Message("assistant", "I see. Tell me more.")]
                fixed_prompt = Session(fresh_backend, assistant.template, fixed).prompt(Message("user", script[-1]))
                fresh_backend.reset()
                np.save(out_dir / f"{model}-{n}-fixed.npy",
                        forced_logits(fresh_backend, fixed_prompt, fresh_backend.tokenize(FIXED_ANSWER, special=False)))
                reused_rows.append(reused)
                fresh_rows.append(fresh)
        finally:
            fresh_backend.close()
            assistant.close()
            db.close()
        stats = logit_agreement(np.concatenate(fresh_rows), np.concatenate(reused_rows))
        results["rows"].append({"model": model, "compare": "reused KV vs fresh context"} | stats)
    return results


def child(variant: str | None, out_dir: Path) -> dict:
    env = dict(os.environ)
    if variant:
        env["ASSISTANT_CPU_VARIANT"] = variant
    proc = subprocess.run([sys.executable, __file__, "--child", str(out_dir)], env=env, capture_output=True,
                          text=True, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"the {variant or 'default'} run failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def table(results: list[dict]) -> list[str]:
    lines = ["| CPU variant | model | compared | positions | top-1 agree | max abs Δlogit | max, 40 likeliest "
             "| mean abs Δlogit | largest gap where top-1 differs |", "|---|---|---|---|---|---|---|---|---|"]
    for res in results:
        for r in res["rows"]:
            lines.append(f"| {res['variant']} | {r['model']} | {r['compare']} | {r['positions']} | {r['top1']:.3f} "
                         f"| {r['max']:.3f} | {r['max_top']:.3f} | {r['mean']:.4f} | {r['tie_gap']:.3f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", action="store_true", help="run once per CPU variant this processor can run")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(Path(args.child))))
        return
    from engine.models.ggml_registry import cpu_variants

    from tests.model.helpers import logit_agreement

    variants = cpu_variants(runnable=True) if args.variants else [None]
    base = Path(tempfile.mkdtemp(prefix="bench-logits-"))
    results = []
    for variant in variants:
        out = base / (variant or "best")
        out.mkdir()
        results.append(child(variant, out))
        print(f"{results[-1]['variant']}: done", file=sys.stderr)
    # Across kernels: each variant's fresh logits against the first (best) variant's.
    best = results[0]
    for res in results[1:] if args.variants else []:
        for model in MODELS:
            ref = np.concatenate([np.load(p) for p in sorted((base / best["variant"]).glob(f"{model}-*-fixed.npy"))])
            got = np.concatenate([np.load(p) for p in sorted((base / res["variant"]).glob(f"{model}-*-fixed.npy"))])
            res["rows"].append({"model": model, "compare": f"same tokens, {res['variant']} vs {best['variant']}"}
                               | logit_agreement(ref, got))
    print("\n".join(table(results)))


if __name__ == "__main__":
    main()
