"""Measure the router on a labelled TSV (header `level<TAB>prompt`): accuracy, confusion, mis-routing."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from engine.routing.router import LEVELS, RouteDecision, classify

_RANK = {lvl: i for i, lvl in enumerate(LEVELS)}
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


class EvalFileError(ValueError):
    """The labelled file cannot be read or has a malformed line (message says which)."""


@dataclass(frozen=True)
class Example:
    level: str
    prompt: str
    line: int  # 1-based line number in the file


@dataclass
class EvalResult:
    total: int = 0
    correct: int = 0
    under: int = 0  # true level above the predicted one: the answer may be too weak
    over: int = 0  # true level below the predicted one: slower or costlier than needed
    confusion: list[list[int]] = field(default_factory=lambda: [[0] * 3 for _ in range(3)])  # [true][pred]
    errors: list[tuple[Example, RouteDecision]] = field(default_factory=list)

    @property
    def accuracy(self) -> float:
        return self.correct / self.total if self.total else 0.0

    @property
    def under_rate(self) -> float:
        """Share of all prompts routed below their true level."""
        return self.under / self.total if self.total else 0.0

    @property
    def over_rate(self) -> float:
        """Share of all prompts routed above their true level."""
        return self.over / self.total if self.total else 0.0


def load_tsv(path: str | Path) -> list[Example]:
    """Read `level<TAB>prompt` lines after the header; blank lines are skipped.

    Raises:
        EvalFileError: missing/unreadable file, wrong header, a line without exactly one tab,
            an unknown level or an empty prompt.
    """
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise EvalFileError(f"cannot read {path}: {exc.strerror or exc}") from exc
    text = raw.decode("utf-8", errors="replace")
    lines = text.splitlines()
    if not lines or lines[0].strip().lower() != "level\tprompt":
        raise EvalFileError(f"{path}: the first line must be the header 'level<TAB>prompt'")
    examples = []
    for n, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        cells = line.split("\t")
        if len(cells) != 2:
            raise EvalFileError(f"{path}:{n}: expected 'level<TAB>prompt', found {len(cells)} tab-separated fields")
        level, prompt = cells[0].strip().upper(), cells[1]
        if level not in _RANK:
            raise EvalFileError(f"{path}:{n}: unknown level {cells[0]!r} (use {', '.join(LEVELS)})")
        if not prompt.strip():
            raise EvalFileError(f"{path}:{n}: empty prompt")
        examples.append(Example(level, prompt, n))
    if not examples:
        raise EvalFileError(f"{path}: no labelled prompts")
    return examples


def evaluate(examples: list[Example], classifier: Callable[[str], RouteDecision] = classify) -> EvalResult:
    """Run `classifier` on every example and count agreement and the direction of each error."""
    result = EvalResult()
    for ex in examples:
        decision = classifier(ex.prompt)
        t, p = _RANK[ex.level], _RANK[decision.level]
        result.total += 1
        result.confusion[t][p] += 1
        if t == p:
            result.correct += 1
            continue
        if t > p:
            result.under += 1
        else:
            result.over += 1
        result.errors.append((ex, decision))
    return result


def split_by_language(examples: list[Example]) -> dict[str, list[Example]]:
    """'zh' for prompts with any CJK character, else 'en'."""
    out: dict[str, list[Example]] = {"zh": [], "en": []}
    for ex in examples:
        out["zh" if _CJK.search(ex.prompt) else "en"].append(ex)
    return out


def report_dict(result: EvalResult, name: str = "") -> dict:
    """The numbers as a JSON-ready dict (rates rounded to 4 places)."""
    return {
        "name": name,
        "total": result.total,
        "accuracy": round(result.accuracy, 4),
        "under_routing": round(result.under_rate, 4),
        "over_routing": round(result.over_rate, 4),
        "confusion": {"labels": list(LEVELS), "rows_true_cols_pred": result.confusion},
        "errors": [{"line": ex.line, "true": ex.level, "pred": d.level, "prompt": ex.prompt, "reason": d.reason}
                   for ex, d in result.errors],
    }


def render_report(result: EvalResult, name: str = "", show_errors: bool = True) -> str:
    """Plain-text report: accuracy, under/over-routing, the 3×3 confusion matrix, misrouted prompts."""
    head = f"{name}: " if name else ""
    out = [
        f"{head}{result.correct}/{result.total} correct, accuracy {result.accuracy:.1%}",
        f"under-routing {result.under_rate:.1%} ({result.under}), over-routing {result.over_rate:.1%} ({result.over})",
        "",
        "true\\pred     " + "".join(f"{lvl:>6}" for lvl in LEVELS),
    ]
    for i, lvl in enumerate(LEVELS):
        out.append(f"{lvl:<14}" + "".join(f"{c:>6}" for c in result.confusion[i]))
    if show_errors and result.errors:
        out.append("")
        out.append("misrouted:")
        for ex, d in result.errors:
            out.append(f"  line {ex.line}: {ex.level}→{d.level}  {ex.prompt[:70]}  [{d.reason}]")
    return "\n".join(out)
