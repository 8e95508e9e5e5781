"""Speculative decoding, side by side in one run (issue 40): decode speed of plain decoding, ours with
n-gram drafts (always, and Auto as a user gets it), ours with a draft model, and llama-cpp-python
plain and with its `LlamaPromptLookupDecoding` at its recommended CPU setting (num_pred_tokens=2),
on the same model, prompts and greedy sampling.

    .venv/bin/python bench/speculative.py [--reps 3] [--tokens 200] [--weights q4_0] [--task open]
                                          [--model demo-small.gguf --gpu-layers 99 --threads 16]

`--weights` runs the plain, n-gram, Auto and llama-cpp-python rows on demo-small re-quantized by
llama.cpp (q4_0, q8_0): weight types with batched CPU kernels, where a verification pass costs
less than its tokens (bench/pass_cost.py measures how much less). `--gpu-layers` puts every model on
the GPU (the GPU kit runs it so, packaging/gpu_kit/gpu_check.py `--speculative`).

Five tasks: four grounded in the input (a documents answer with quotes, rewriting a pasted
paragraph, editing a 60-line function, summarising a tool result) and open chat. Each cell is the
median decode rate (tokens after the first, over the time after the first) of `--reps` runs,
modes alternated within each repetition so that load from other programs falls on all of them.

The draft-model rows: demo-small's Q4_1 file drafts for the same weights re-quantized to F16 with
llama.cpp's own quantizer (a larger, slower target). The pair agrees far more often than a real
one (Qwen2.5-0.5B for 7B): it shows the mechanism and its costs, and overstates acceptance.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.inference import llama_seam  # noqa: E402
from engine.inference.backend import Backend, LoadParams, SamplingParams  # noqa: E402
from engine.inference.draft_model import DraftModel  # noqa: E402
from engine.inference.events import GenerateParams, TurnResult  # noqa: E402
from engine.inference.generate import generate  # noqa: E402
from engine.inference.speculation import Speculation  # noqa: E402
from engine.inference.tokens import Drafting  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
THREADS = 2  # the CI machine's cores; --threads for another

DOC = """Annual report of the Riverside Public Library, 2025.
Visits rose to 412,000, up 18 percent on 2024, the highest in the library's history.
The children's reading programme enrolled 3,150 young readers over the summer.
The east branch was closed from March to June for a new roof, which cost 1.2 million dollars.
Digital loans of e-books and audiobooks reached 96,000, one loan in four.
The board approved Sunday opening hours at the main branch from January 2026.
Volunteers gave 14,500 hours, mostly in the literacy and homework-help programmes."""

PARAGRAPH = ("Our team has spent the last three months redesigning the onboarding flow for new customers. "
             "The old flow asked for twelve pieces of information before a customer could see the product, "
             "and nearly half of them gave up along the way. The new flow asks for an email adress and a "
             "password, and everything else is asked later, when it is needed. In the first two weeks, the "
             "share of customers who finished signing up rose from 52 percent to 81 percent, and support "
             "tickets about the sign up process fell by a third.")

FUNCTION = '''def summarize_orders(orders, currency="EUR"):
    totals = {}
    counts = {}
    largest = None
    for order in orders:
        customer = order["customer"]
        amount = order["amount"]
        if order.get("currency", currency) != currency:
            amount = convert(amount, order["currency"], currency)
        if order.get("refunded"):
            amount = -amount
        totals[customer] = totals.get(customer, 0) + amount
        counts[customer] = counts.get(customer, 0) + 1
        if largest is None or amount > largest["amount"]:
            largest = {"customer": customer, "amount": amount}
    report = []
    for customer in sorted(totals):
        total = totals[customer]
        count = counts[customer]
        average = total / count if count else 0
        report.append({
            "customer": customer,
            "total": round(total, 2),
            "orders": count,
            "average": round(average, 2),
        })
    report.sort(key=lambda row: row["total"], reverse=True)
    top = report[:10]
    rest = report[10:]
    other_total = sum(row["total"] for row in rest)
    other_orders = sum(row["orders"] for row in rest)
    if rest:
        top.append({
            "customer": "other",
            "total": round(other_total, 2),
            "orders": other_orders,
            "average": round(other_total / other_orders, 2) if other_orders else 0,
        })
    grand_total = sum(row["total"] for row in report)
    grand_orders = sum(row["orders"] for row in report)
    summary = {
        "currency": currency,
        "customers": len(report),
        "orders": grand_orders,
        "total": round(grand_total, 2),
        "largest": largest,
        "top": top,
    }
    if grand_orders:
        summary["average_order"] = round(grand_total / grand_orders, 2)
    else:
        summary["average_order"] = 0
    return summary


def convert(amount, source, target):
    rates = {"EUR": 1.0, "USD": 0.92, "GBP": 1.17}
    return amount * rates[source] / rates[target]
'''

TOOL_RESULT = """{"city": "Lyon", "date": "2026-12-04", "forecast": [
  {"hour": "09:00", "temperature_c": 3, "condition": "fog", "wind_kmh": 5, "precipitation_mm": 0.0},
  {"hour": "12:00", "temperature_c": 7, "condition": "cloudy", "wind_kmh": 10, "precipitation_mm": 0.0},
  {"hour": "15:00", "temperature_c": 8, "condition": "light rain", "wind_kmh": 15, "precipitation_mm": 1.2},
  {"hour": "18:00", "temperature_c": 5, "condition": "rain", "wind_kmh": 20, "precipitation_mm": 3.4}],
 "sunrise": "08:02", "sunset": "16:56", "air_quality": "good"}"""


def chat(user: str, system: str = "You are a helpful assistant.") -> str:
    return f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"


TASKS = {
    "documents answer with quotes": chat(
        f"Here is an excerpt from my documents:\n\n{DOC}\n\nWhat does the report say about visits, the east branch "
        "and digital loans? Quote the sentences you use, word for word."),
    "rewrite a pasted paragraph": chat(
        f"Fix the spelling mistakes in this paragraph and return the whole corrected paragraph:\n\n{PARAGRAPH}"),
    # Asked to rename a variable, demo-small describes the code instead; asked for type hints, it
    # writes the code again, edited: the task this row is about.
    "edit a 60-line function": chat(
        f"```python\n{FUNCTION}```\n\nAdd type hints to this code. Show the complete updated code."),
    "summarise a tool result": chat(
        f"The weather tool returned:\n\n{TOOL_RESULT}\n\nTell me the forecast for each hour listed, with the "
        "temperature, condition and wind."),
    "open chat": chat("Write a short story about a lighthouse keeper who finds a message in a bottle."),
}
GROUNDED = [t for t in TASKS if t != "open chat"]


def ours(backend: Backend, prompt: list[int], tokens: int, how: Drafting) -> tuple[float, int, int]:
    params = GenerateParams(SamplingParams(temperature=0.0, repeat_penalty=1.0, seed=1), max_tokens=tokens,
                            repetition_guard=False)
    backend.reset()
    result = [r for r in generate(backend, prompt, params, drafting=how) if isinstance(r, TurnResult)][-1]
    s = result.stats
    return s.decode_tps, s.draft_tokens, s.draft_accepted


def theirs(llm, text: str, tokens: int) -> float:
    llm.reset()
    t_first = t_last = None
    n = 0
    for _ in llm.create_completion(text, max_tokens=tokens, temperature=0.0, repeat_penalty=1.0, stream=True):
        t_last = time.perf_counter()
        t_first = t_first or t_last
        n += 1
    return (n - 1) / (t_last - t_first) if n > 1 and t_last > t_first else 0.0


def report(args, names: list[str], rates: dict, drafts: dict, spec_small: Speculation) -> None:
    """The table (medians, × plain, drafted/accepted of the last run), the grounded medians and the
    pass costs Auto measured."""
    med = {key: statistics.median(v) for key, v in rates.items()}
    where = f"{args.gpu_layers} layers on the GPU" if args.gpu_layers else f"{args.threads} threads"
    print(f"demo-small (SmolLM2-135M {args.weights.upper()}), {where}, greedy, {args.tokens} tokens, "
          f"median of {args.reps}")
    print("decode tok/s, and × ours plain (on the F16 rows: × F16 plain)\n")
    print("| task | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    tasks = [t for t in TASKS if any(key[0] == t for key in rates)]
    for task in tasks:
        cells = []
        for mode in names:
            base = med[(task, "F16 target plain" if mode.startswith("F16") else "plain")]
            cell = f"{med[(task, mode)]:.1f} ({med[(task, mode)] / base:.2f}×)"
            d = drafts[(task, mode)][-1]
            if d[0]:
                cell += f" {d[1]}/{d[0]}"
            cells.append(cell)
        print(f"| {task} | " + " | ".join(cells) + " |")
    for mode in ("n-gram (always)", "Auto", "llama-cpp-python prompt lookup"):
        grounded = [med[(t, mode)] / med[(t, "plain")] for t in GROUNDED if t in tasks]
        parts = [f"median over the grounded tasks {statistics.median(grounded):.2f}× plain"] if grounded else []
        if "open chat" in tasks:
            parts.append(f"open chat {med[('open chat', mode)] / med[('open chat', 'plain')]:.2f}×")
        print(f"\n{mode}: " + "; ".join(parts))
    # What a pass cost here, as Auto measured it: the ceiling of any draft on this machine is a pass
    # of n tokens all accepted, n / cost(n) × plain.
    table = spec_small.costs.ratio.get("ngram", {})
    if table:
        print("\npass of n tokens (pending + n - 1 drafted) | cost in plain steps | ceiling at full acceptance")
        print("|---:|---:|---:|")
        for n in sorted(table):
            print(f"| {n} | {table[n]:.2f} | {n / table[n]:.2f}× |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--weights", choices=("q4_1", "q4_0", "q8_0"), default="q4_1",
                    help="demo-small's weight type for the plain, n-gram, Auto and llama-cpp-python rows")
    ap.add_argument("--task", default="", help="only the tasks whose name holds this (e.g. 'open')")
    ap.add_argument("--model", type=Path, default=MODEL, help="demo-small's file, where it is elsewhere")
    ap.add_argument("--threads", type=int, default=THREADS)
    ap.add_argument("--gpu-layers", type=int, default=0, help="layers on the GPU, for every model of the run")
    args = ap.parse_args()
    load = LoadParams(n_ctx=4096, n_threads=args.threads, n_gpu_layers=args.gpu_layers)
    work = Path(tempfile.mkdtemp(prefix="spec-bench-"))
    target = model = args.model
    if args.weights != "q4_1":
        target = work / f"smollm2-135m-{args.weights}.gguf"
        llama_seam.quantize(model, target, args.weights)
    small = Backend(target, load)
    big_path = work / "smollm2-135m-f16.gguf"
    llama_seam.quantize(model, big_path, "f16")
    big = Backend(big_path, load)
    drafter = DraftModel(Backend(model, load), "demo-small Q4_1")
    from llama_cpp import Llama, llama_speculative  # after the seam loaded ggml's backends

    kw = dict(n_ctx=4096, n_batch=512, n_threads=args.threads, n_threads_batch=args.threads,
              n_gpu_layers=args.gpu_layers, verbose=False)
    bare = Llama(model_path=str(target), **kw)
    # logits_all given too: Llama sizes its score rows by the argument, not by the draft model's
    # need, and a prompt past n_batch tokens would not fit them.
    lookup = Llama(model_path=str(target), draft_model=llama_speculative.LlamaPromptLookupDecoding(num_pred_tokens=2),
                   logits_all=True, **kw)
    spec_small, spec_big = Speculation(), Speculation()  # per model, as each worker holds one
    modes = {
        "plain": lambda p, t, task: ours(small, p, t, Drafting()),
        "n-gram (always)": lambda p, t, task: ours(small, p, t, Drafting("ngram", spec_small.tuner(task, "ngram"))),
        "Auto": lambda p, t, task: ours(small, p, t, Drafting("auto", spec_small.tuner(("auto", task), "auto"))),
        "llama-cpp-python plain": lambda p, t, task: (theirs(bare, TASKS[task], t), 0, 0),
        "llama-cpp-python prompt lookup": lambda p, t, task: (theirs(lookup, TASKS[task], t), 0, 0),
        "F16 target plain": lambda p, t, task: ours(big, p, t, Drafting()),
        "F16 target + Q4_1 draft model": lambda p, t, task: ours(
            big, p, t, Drafting("draft", spec_big.tuner(task, "draft"), drafter)),
    }
    rates: dict[tuple[str, str], list[float]] = {}
    drafts: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for rep in range(args.reps):
        for task, text in TASKS.items():
            if args.task and args.task not in task:
                continue
            prompt = small.tokenize(text, special=True)
            for mode, run in modes.items():
                tps, drafted, accepted = run(prompt, args.tokens, task)
                rates.setdefault((task, mode), []).append(tps)
                drafts.setdefault((task, mode), []).append((drafted, accepted))
        print(f"repetition {rep + 1} of {args.reps} done", file=sys.stderr)
    report(args, list(modes), rates, drafts, spec_small)
    drafter.close()
    for b in (small, big):
        b.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
