"""An image chat of three turns, side by side in one run (issue 41): ours through engine.api against
llama-cpp-python's `MTMDChatHandler`, on the same synthetic SmolVLM pair (tests/vision_model.py: a
llama text model and an idefics3 projector, random weights, the real mechanics), the same messages
and greedy answers. Then our chat restored in a new process from the cold tier.

    .venv/bin/python bench/vision.py [--reps 3] [--system-words 300]

Per turn: time to first token (median of `--reps` runs), image tiles encoded, and prompt tokens
evaluated. llama-cpp-python's handlers reset the context on every call, so each turn re-reads the
whole chat and re-encodes every image; ours evaluates what the KV cache lacks.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

THREADS = 2
TURNS = ["What is in this picture?", "And what are its colours?", "Describe the top left corner."]
MAX_TOKENS = 16


def photo() -> bytes:
    from PIL import Image

    image = Image.linear_gradient("L").resize((640, 480)).convert("RGB")
    out = io.BytesIO()
    image.save(out, "JPEG", quality=90)
    return out.getvalue()


def system_prompt(words: int) -> str:
    return "You are a careful assistant who describes pictures. " + " ".join(f"rule{i}" for i in range(words))


def ours(home: Path, model: Path, system: str) -> tuple[list[dict], int]:
    os.environ["ASSISTANT_HOME"] = str(home)
    from engine.api import Assistant, EngineConfig, GenerateParams, LoadParams, SamplingParams, TurnDone
    from engine.config.paths import db_path
    from engine.storage import Database
    from tests.model.helpers import on_model

    a = Assistant(Database(db_path()), EngineConfig(model=str(model), load=LoadParams(n_ctx=4096, n_threads=THREADS)))
    params = GenerateParams(SamplingParams(temperature=0.0, repeat_penalty=1.0, seed=1), max_tokens=MAX_TOKENS)
    rows = []
    try:
        vision = on_model(a, lambda backend: backend.vision)
        image = a.add_image(photo(), "photo.jpg")
        cid = a.new_conversation(system)
        for k, text in enumerate(TURNS):
            before = vision.encodes
            images = [image["digest"]] if k == 0 else []
            done = [e for e in a.send(cid, text, params, images=images) if isinstance(e, TurnDone)][-1]
            rows.append({"ttft_ms": done.stats.ttft_ms, "encodes": vision.encodes - before,
                         "evaluated": done.stats.prompt_tokens_evaluated})
    finally:
        a.close()
        a.db.close()
    return rows, cid


def restored(home: Path, model: Path, cid: int) -> dict:
    """Turn 4 in a new process: the chat from the cold tier."""
    code = ("import json, sys; sys.path.insert(0, %r); from bench.vision import turn_after_restart; "
            "print(json.dumps(turn_after_restart(%r, %r, %d)))" % (str(ROOT), str(home), str(model), cid))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def turn_after_restart(home: str, model: str, cid: int) -> dict:
    os.environ["ASSISTANT_HOME"] = home
    from engine.api import Assistant, EngineConfig, GenerateParams, LoadParams, SamplingParams, TurnDone
    from engine.config.paths import db_path
    from engine.storage import Database
    from tests.model.helpers import on_model

    a = Assistant(Database(db_path()), EngineConfig(model=model, load=LoadParams(n_ctx=4096, n_threads=THREADS)))
    try:
        params = GenerateParams(SamplingParams(temperature=0.0, repeat_penalty=1.0, seed=1), max_tokens=MAX_TOKENS)
        done = [e for e in a.send(cid, "Thank you.", params) if isinstance(e, TurnDone)][-1]
        encodes = on_model(a, lambda backend: backend.vision.encodes)
        return {"ttft_ms": done.stats.ttft_ms, "encodes": encodes, "evaluated": done.stats.prompt_tokens_evaluated,
                "restored_from": done.stats.restored_from}
    finally:
        a.close()
        a.db.close()


def theirs(model: Path, mmproj: Path, system: str) -> list[dict]:
    import base64

    from engine.inference import llama_seam

    llama_seam.init()  # ggml's backends, as the engine loads them
    from llama_cpp import Llama
    from llama_cpp import mtmd_cpp
    from llama_cpp.llama_chat_format import MTMDChatHandler

    encodes = [0]
    single = mtmd_cpp.mtmd_helper_eval_chunk_single

    def counted(ctx, lctx, chunk, *rest):  # an image chunk through the helper is an encode
        if mtmd_cpp.mtmd_input_chunk_get_type(chunk) != mtmd_cpp.MTMD_INPUT_CHUNK_TYPE_TEXT:
            encodes[0] += 1
        return single(ctx, lctx, chunk, *rest)

    class Handler(MTMDChatHandler):
        """Content parts joined into one string, the marker where each image is: the synthetic
        model carries SmolLM2's template, which reads a message's content as text (a real SmolVLM
        template walks the parts itself). Everything else is the handler's own."""

        @classmethod
        def _convert_message_for_template(cls, message, media_marker):
            d = super()._convert_message_for_template(message, media_marker)
            if isinstance(d.get("content"), list):
                d["content"] = "".join(part["text"] for part in d["content"])
            return d

    mtmd_cpp.mtmd_helper_eval_chunk_single = counted
    llm = Llama(model_path=str(model), chat_handler=Handler(str(mmproj), verbose=False, use_gpu=False),
                n_ctx=4096, n_threads=THREADS, n_threads_batch=THREADS, n_gpu_layers=0, verbose=False)
    url = "data:image/jpeg;base64," + base64.b64encode(photo()).decode()
    messages: list[dict] = [{"role": "system", "content": system}]
    rows = []
    for k, text in enumerate(TURNS):
        content = [{"type": "text", "text": text}] + ([{"type": "image_url", "image_url": {"url": url}}] if k == 0 else [])
        messages.append({"role": "user", "content": content})
        before = encodes[0]
        start, first, answer = time.perf_counter(), None, ""
        for chunk in llm.create_chat_completion(messages=messages, max_tokens=MAX_TOKENS, temperature=0.0,
                                                repeat_penalty=1.0, stream=True):
            delta = chunk["choices"][0]["delta"].get("content")
            if delta:
                first = first or time.perf_counter()
                answer += delta
        rows.append({"ttft_ms": ((first or time.perf_counter()) - start) * 1000, "encodes": encodes[0] - before,
                     "evaluated": llm.n_tokens - len(llm.tokenize(answer.encode(), add_bos=False, special=False))})
        messages.append({"role": "assistant", "content": answer})
    llm.close()
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--system-words", type=int, default=300)
    args = ap.parse_args()
    from tests import vision_model as vm

    model, mmproj = vm.vision_pair()
    system = system_prompt(args.system_words)
    runs_ours, runs_theirs, cold = [], [], []
    for _ in range(args.reps):
        home = Path(tempfile.mkdtemp(prefix="vision-bench-"))
        rows, cid = ours(home, model, system)
        runs_ours.append(rows)
        cold.append(restored(home, model, cid))
        runs_theirs.append(theirs(model, mmproj, system))
    print(f"synthetic SmolVLM pair (tests/vision_model.py), {THREADS} threads, 640 × 480 JPEG, "
          f"system prompt of {args.system_words} words, median of {args.reps}\n")
    print("| turn | ours TTFT ms | theirs TTFT ms | theirs / ours | ours encodes | theirs encodes "
          "| ours evaluated | theirs evaluated |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for k in range(len(TURNS)):
        o = statistics.median(r[k]["ttft_ms"] for r in runs_ours)
        t = statistics.median(r[k]["ttft_ms"] for r in runs_theirs)
        print(f"| {k + 1} | {o:.1f} | {t:.1f} | {t / o:.1f}× | {runs_ours[-1][k]['encodes']} | "
              f"{runs_theirs[-1][k]['encodes']} | {runs_ours[-1][k]['evaluated']} | {runs_theirs[-1][k]['evaluated']} |")
    c = statistics.median(r["ttft_ms"] for r in cold)
    last = cold[-1]
    print(f"\nTurn 4 in a new process (restored from {last['restored_from']}): TTFT {c:.1f} ms, "
          f"{last['encodes']} encodes, {last['evaluated']} tokens evaluated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
