"""Answer confidence from per-token log-probabilities: the whole answer, and sentence by sentence.

What is measured: for each sampled answer token, the natural-log probability the model gave it in
its RAW distribution (softmax of the logits row, before temperature, top-k, top-p, min-p or the
repeat penalty; see `Backend.sample`). The sampler's settings change WHICH tokens are drawn, never
the logprob recorded for a drawn token. Confidence is the geometric mean of those probabilities,
exp(mean log p), over a set of tokens: 1.0 = the model was certain of every token. It measures
how surprised the model was by its own answer, not whether the answer is true; `docs/confidence.md`
has the measured separation of known vs unanswerable questions per demo model.
"""

from __future__ import annotations

import codecs
import math
import re
from typing import Sequence
from bisect import bisect_right

MAX_WEAK_SPANS = 3

# A run of terminators (plus closing quotes/brackets) ends a sentence. CJK terminators always do;
# ASCII . ! ? only before whitespace, a CJK character or the end, so "3.14", "v1.2" and "a.b()"
# stay whole while "你好!世界" splits.
_CLOSERS = "\"'”’)]}）】」』》"
_BOUNDARY = re.compile(
    rf"[.!?。！？]*[。！？][.!?。！？]*[{re.escape(_CLOSERS)}]*"
    rf"|[.!?]+[{re.escape(_CLOSERS)}]*(?=\s|$|[\u3400-\u9fff\uf900-\ufaff])"
)
# A period after these (or after a list number at the start of a line, "2. ") ends no sentence.
_NOT_AN_END = re.compile(r"(?:\b(?:e\.g|i\.e|vs|Mr|Mrs|Ms|Dr|Prof|Jr|Sr|St|approx|cf)|(?:^|\n)[ \t]*\d{1,3})\.$",
                         re.I)


def geometric_mean_prob(logprobs: list[float]) -> float | None:
    """exp(mean log p) over the sampled tokens: 1.0 = certain; None when there are no logprobs."""
    if not logprobs:
        return None
    return math.exp(sum(logprobs) / len(logprobs))


def split_sentences(text: str) -> list[tuple[int, int]]:
    """Sentence regions of `text` as (start, end) char offsets that tile it exactly.

    A region ends after a terminator run (. ! ? 。 ！ ？, with closing quotes) or before a newline;
    whitespace between sentences belongs to the sentence that follows (the last region also keeps
    trailing whitespace). Regions holding only whitespace are merged into the next one, so a
    text of only whitespace has no regions.
    """
    cuts = set()
    for m in _BOUNDARY.finditer(text):
        # A bounded look back (not a slice of everything before): linear in the text's length.
        if m.group().startswith(".") and _NOT_AN_END.search(text, max(0, m.start() - 16), m.start() + 1):
            continue
        cuts.add(m.end())
    cuts.update(m.start() for m in re.finditer(r"\n", text))
    edges = [0] + sorted(c for c in cuts if 0 < c < len(text)) + [len(text)]
    regions: list[tuple[int, int]] = []
    start = 0
    for end in edges[1:]:
        if text[start:end].strip():
            regions.append((start, end))
            start = end
    if regions:
        regions[-1] = (regions[-1][0], len(text))  # trailing whitespace joins the last sentence
    return regions


def token_offsets(token_pieces: list[str | bytes]) -> tuple[str, list[int]]:
    """Decode token pieces into the answer text and each token's start offset in it.

    Pieces may be `bytes` (e.g. `Backend.token_bytes`, possibly part of a UTF-8 character) or
    `str`; both are decoded as one UTF-8 byte stream with invalid bytes replaced, exactly as
    `engine.inference.generate` builds an answer's text. A token whose bytes end inside a character starts
    where that character starts.
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    parts: list[str] = []
    starts: list[int] = []
    n = 0
    for piece in token_pieces:
        starts.append(n)
        raw = piece.encode("utf-8", errors="surrogatepass") if isinstance(piece, str) else bytes(piece)
        out = decoder.decode(raw)
        parts.append(out)
        n += len(out)
    parts.append(decoder.decode(b"", final=True))  # an unfinished character at the end: U+FFFD
    return "".join(parts), starts


def confidence_report(token_texts: Sequence[str | bytes], logprobs: list[float], threshold: float,
                      max_weak: int = MAX_WEAK_SPANS) -> dict:
    """Confidence of one answer overall and per sentence, with its weakest sentences.

    Args:
        token_texts: each answer token's piece, in order: `bytes` (`Backend.token_bytes(id)`,
            preferred: exact even when a token holds part of a character) or `str`.
        logprobs: each token's natural-log probability under the model's raw distribution
            (`TurnResult.logprobs`), same length as `token_texts`.
        threshold: geometric-mean probability below which the answer (`low`) or a sentence (a weak
            span) is flagged; 0 flags nothing (an uncalibrated model).
        max_weak: at most this many weak spans.

    Returns:
        {"geo_mean_prob": float | None,  # exp(mean logprob) over all tokens; None: no tokens
         "low": bool,                    # geo_mean_prob < threshold
         "threshold": float,
         "n_tokens": int,
         "text": str,                    # the decoded answer; offsets below index into it
         "sentences": [{"text", "start", "end", "n_tokens", "geo_mean_prob", "low"}, ...],
         "weak_spans": [same shape as a sentence, ...]}  # sentences below threshold, weakest first

        A sentence's `text` is its region stripped of surrounding whitespace; `start`/`end` are
        char offsets of that stripped text (`text[start:end]`). Each token counts in the sentence
        where its text starts; a sentence no token starts in has `geo_mean_prob` None.

    Raises:
        ValueError: the two lists differ in length.
    """
    if len(token_texts) != len(logprobs):
        raise ValueError(f"{len(token_texts)} token pieces but {len(logprobs)} logprobs")
    text, starts = token_offsets(token_texts)
    overall = geometric_mean_prob(logprobs)
    regions = split_sentences(text)
    region_starts = [r[0] for r in regions]
    per_region: list[list[float]] = [[] for _ in regions]
    for start, lp in zip(starts, logprobs):
        if regions:
            # Whitespace-only tokens before the first sentence count in the first one.
            per_region[max(0, bisect_right(region_starts, start) - 1)].append(lp)
    sentences = []
    for (a, b), lps in zip(regions, per_region):
        body = text[a:b]
        lead = len(body) - len(body.lstrip())
        s, e = a + lead, a + len(body.rstrip())
        geo = geometric_mean_prob(lps)
        sentences.append({"text": text[s:e], "start": s, "end": e, "n_tokens": len(lps),
                          "geo_mean_prob": geo, "low": geo is not None and geo < threshold})
    weak = sorted((s for s in sentences if s["low"]), key=lambda s: (s["geo_mean_prob"], s["start"]))
    return {
        "geo_mean_prob": overall,
        "low": overall is not None and overall < threshold,
        "threshold": threshold,
        "n_tokens": len(logprobs),
        "text": text,
        "sentences": sentences,
        "weak_spans": weak[: max(0, max_weak)],
    }
