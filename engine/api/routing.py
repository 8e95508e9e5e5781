"""The router on its own (`assistant route`): the level a message would get, and the router scored
on a labelled file. Neither loads a model or opens the database."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine.routing.router import RouteDecision, classify
from engine.routing.router_eval import (EvalFileError, EvalResult, evaluate, load_tsv, render_report, report_dict,
                                        split_by_language)

__all__ = ["EvalFileError", "RouteDecision", "RouterScore", "route_message", "score_router"]


def route_message(text: str) -> RouteDecision:
    """The level (L1/L2/L3) the router picks for `text` on its own (no conversation, so no
    stickiness), the rule that fired and the µs it took."""
    return classify(text)


@dataclass(frozen=True)
class RouterScore:
    """The router against a labelled file: over all prompts and per language ("en", "zh")."""

    name: str
    overall: EvalResult
    by_language: dict[str, EvalResult]

    def as_dict(self) -> dict:
        """report_dict's numbers and misrouted prompts, plus "by_language" (numbers only)."""
        out = report_dict(self.overall, self.name)
        out["by_language"] = {lang: {k: v for k, v in report_dict(r, lang).items() if k != "errors"}
                              for lang, r in self.by_language.items()}
        return out

    def text(self) -> str:
        lines = [render_report(self.overall, self.name)]
        lines += [f"{lang}: {r.correct}/{r.total} accuracy {r.accuracy:.1%}, under-routing {r.under_rate:.1%}, "
                  f"over-routing {r.over_rate:.1%}" for lang, r in self.by_language.items()]
        return "\n".join(lines)


def score_router(path: str | Path) -> RouterScore:
    """Classify every prompt of a `level<TAB>prompt` file and count the hits.

    Raises:
        EvalFileError: the file cannot be read or a line is malformed (the message says which).
    """
    examples = load_tsv(path)
    by_language = {lang: evaluate(exs) for lang, exs in split_by_language(examples).items() if exs}
    return RouterScore(str(path), evaluate(examples), by_language)
