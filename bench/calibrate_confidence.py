"""Calibrate each demo model's low-confidence warning: known vs unanswerable questions.

Run: `.venv/bin/python bench/calibrate_confidence.py [--models demo-small demo-int4] [--max-tokens 48]
[--sampled] [--details out.tsv]`. Prints a markdown table.

Every prompt of `tests/data/confidence_calibration.tsv` (kind `known`: a well-known short answer;
`nonsense`: a made-up entity or an unanswerable question) is asked in a fresh conversation through
`Assistant` with one model, greedily (temperature 0, no repeat penalty) unless `--sampled` (the
default chat sampling, fixed seed). An answer's confidence is `confidence_report(...)["geo_mean_prob"]`:
exp(mean raw-distribution logprob) of its tokens.

- AUC: P(confidence of a known answer > confidence of a nonsense answer), ties count one half.
  0.5 = no separation; below 0.5 the model is MORE sure of its made-up answers.
- threshold: warn when confidence < t; t maximises balanced accuracy (mean of the share of
  nonsense answers warned and the share of known answers not warned) over the midpoints between
  observed values; the lowest such t (warn as little as possible).
- LOO bal. acc.: the same choice made without each prompt in turn, then applied to it: what the
  threshold is worth on a question it was not chosen on (60 prompts: a rough figure).
"""

from __future__ import annotations

import argparse
import csv
import logging
import math
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.inference.backend import LoadParams, SamplingParams  # noqa: E402
from engine.routing.confidence import confidence_report  # noqa: E402
from engine.api import Assistant, EngineConfig, TurnDone  # noqa: E402
from engine.inference.events import GenerateParams  # noqa: E402
from engine.config.paths import HOME_ENV  # noqa: E402
from engine.storage import Database  # noqa: E402

log = logging.getLogger("bench.calibrate_confidence")

DATA = ROOT / "tests/data/confidence_calibration.tsv"
GREEDY = SamplingParams(temperature=0.0, repeat_penalty=1.0, seed=1)
SAMPLED = SamplingParams(seed=1)  # the chat default (temperature 0.7, top-p 0.95, ...), reproducible


@dataclass
class Answer:
    kind: str  # "known" | "nonsense"
    prompt: str
    text: str
    n_tokens: int
    confidence: float | None  # geo-mean prob over the answer
    first_sentence: float | None  # geo-mean prob of its first sentence


def load_prompts(path: Path = DATA) -> list[tuple[str, str]]:
    with path.open(encoding="utf-8", newline="") as fh:
        rows = [(r["kind"], r["prompt"]) for r in csv.DictReader(fh, delimiter="\t", quoting=csv.QUOTE_NONE)]
    bad = [k for k, _ in rows if k not in ("known", "nonsense")]
    if bad:
        raise ValueError(f"{path}: unknown kinds {sorted(set(bad))}")
    return rows


def is_zh(text: str) -> bool:
    return any("\u4e00" <= ch <= "\u9fff" for ch in text)


def answer_all(model: str, prompts: list[tuple[str, str]], params: GenerateParams) -> list[Answer]:
    out: list[Answer] = []
    assistant = Assistant(Database(Path(os.environ[HOME_ENV]) / f"{model}.sqlite"), EngineConfig(model=model, load=LoadParams(n_ctx=2048)))
    try:
        vocab = assistant.vocab  # any thread; the backend is its model thread's (engine/config/ownership.py)
        for kind, prompt in prompts:
            cid = assistant.new_conversation()
            done = [x for x in assistant.send(cid, prompt, params) if isinstance(x, TurnDone)][-1]
            pieces = [vocab.token_bytes(t) for t in done.token_ids]
            report = confidence_report(pieces, done.logprobs, 0.0)
            first = report["sentences"][0]["geo_mean_prob"] if report["sentences"] else None
            out.append(Answer(kind, prompt, done.text, len(done.token_ids), report["geo_mean_prob"], first))
            log.debug("%s %s %.3f %r", model, kind, report["geo_mean_prob"] or 0.0, done.text[:60])
    finally:
        assistant.close()
        assistant.db.close()
    return out


def auc(known: list[float], nonsense: list[float]) -> float:
    """P(a known answer's confidence > a nonsense answer's), ties one half (Mann-Whitney)."""
    if not known or not nonsense:
        return math.nan
    wins = sum((k > n) + 0.5 * (k == n) for k in known for n in nonsense)
    return wins / (len(known) * len(nonsense))


def confusion(known: list[float], nonsense: list[float], t: float) -> dict:
    warned_n = sum(c < t for c in nonsense)
    warned_k = sum(c < t for c in known)
    return {"nonsense_warned": warned_n, "nonsense": len(nonsense), "known_warned": warned_k, "known": len(known),
            "bal_acc": 0.5 * (warned_n / len(nonsense) + (len(known) - warned_k) / len(known))}


def choose_threshold(known: list[float], nonsense: list[float]) -> float:
    """The lowest t maximising balanced accuracy, from midpoints between observed confidences."""
    values = sorted(set(known + nonsense))
    candidates = [0.0] + [(a + b) / 2 for a, b in zip(values, values[1:])] + [values[-1] + 1e-9]
    best = max(confusion(known, nonsense, t)["bal_acc"] for t in candidates)
    return next(t for t in candidates if confusion(known, nonsense, t)["bal_acc"] >= best - 1e-12)


def loo_balanced_accuracy(known: list[float], nonsense: list[float]) -> float:
    hits_k = sum(c >= choose_threshold(known[:i] + known[i + 1:], nonsense) for i, c in enumerate(known))
    hits_n = sum(c < choose_threshold(known, nonsense[:i] + nonsense[i + 1:]) for i, c in enumerate(nonsense))
    return 0.5 * (hits_k / len(known) + hits_n / len(nonsense))


def summarise(model: str, answers: list[Answer]) -> dict:
    def split(field: str, lang: str | None = None) -> tuple[list[float], list[float]]:
        rows = [a for a in answers if getattr(a, field) is not None and (lang is None or is_zh(a.prompt) == (lang == "zh"))]
        return ([getattr(a, field) for a in rows if a.kind == "known"],
                [getattr(a, field) for a in rows if a.kind == "nonsense"])

    known, nonsense = split("confidence")
    t = choose_threshold(known, nonsense)
    median = lambda xs: sorted(xs)[len(xs) // 2] if xs else math.nan  # noqa: E731
    return {
        "model": model, "n": len(known) + len(nonsense), "auc": auc(known, nonsense),
        "auc_en": auc(*split("confidence", "en")), "auc_zh": auc(*split("confidence", "zh")),
        "auc_first": auc(*split("first_sentence")),
        "median_known": median(known), "median_nonsense": median(nonsense),
        "threshold": t, "confusion": confusion(known, nonsense, t), "loo": loo_balanced_accuracy(known, nonsense),
        "empty": sum(a.confidence is None for a in answers),
    }


def table(rows: list[dict], label: str) -> str:
    lines = [
        f"Sampling: {label}.",
        "",
        "| model | prompts | AUC | AUC en | AUC zh | AUC first sentence | median known | median nonsense "
        "| threshold | nonsense warned | known warned | bal. acc. | LOO bal. acc. |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        c = r["confusion"]
        lines.append(
            f"| {r['model']} | {r['n']} | {r['auc']:.3f} | {r['auc_en']:.3f} | {r['auc_zh']:.3f} | {r['auc_first']:.3f} "
            f"| {r['median_known']:.3f} | {r['median_nonsense']:.3f} | {r['threshold']:.3f} "
            f"| {c['nonsense_warned']}/{c['nonsense']} | {c['known_warned']}/{c['known']} | {c['bal_acc']:.3f} "
            f"| {r['loo']:.3f} |")
    if any(r["empty"] for r in rows):
        lines.append("")
        lines.append("Empty answers (no confidence, left out): "
                     + ", ".join(f"{r['model']} {r['empty']}" for r in rows if r["empty"]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["demo-small", "demo-int4"])
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--sampled", action="store_true", help="chat-default sampling (seed 1) instead of greedy")
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--details", type=Path, help="write every answer and its confidence to this TSV")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    prompts = load_prompts(args.data)
    params = GenerateParams(sampling=SAMPLED if args.sampled else GREEDY, max_tokens=args.max_tokens)
    rows, details = [], []
    with tempfile.TemporaryDirectory() as home:
        os.environ[HOME_ENV] = home  # a throwaway database, never the user's
        for model in args.models:
            log.info("%s: answering %d prompts", model, len(prompts))
            answers = answer_all(model, prompts, params)
            rows.append(summarise(model, answers))
            details += [(model, a) for a in answers]
    label = "chat default (temperature 0.7, seed 1)" if args.sampled else "greedy"
    print(table(rows, f"{label}, at most {args.max_tokens} tokens, `{args.data.name}`"))
    if args.details:
        with args.details.open("w", encoding="utf-8") as fh:
            fh.write("model\tkind\tconfidence\tfirst_sentence\tn_tokens\tprompt\tanswer\n")
            for model, a in details:
                clean = lambda s: s.replace("\t", " ").replace("\n", "\\n")  # noqa: E731
                fh.write(f"{model}\t{a.kind}\t{a.confidence if a.confidence is not None else ''}\t"
                         f"{a.first_sentence if a.first_sentence is not None else ''}\t{a.n_tokens}\t"
                         f"{clean(a.prompt)}\t{clean(a.text)}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
