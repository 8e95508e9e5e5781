"""What a query is looked up by in the keyword tables: trigram terms, short terms, CJK character pairs.

Both keyword tables are FTS5: a trigram one over the chunks' text (substring search that needs no
word breaks, but a term shorter than 3 characters cannot use it) and, where a caller keeps one, a
unicode61 one over each chunk's CJK character pairs (most Chinese words are two characters).
"""

from __future__ import annotations

import re
import unicodedata

MAX_KEYWORD_TERMS = 24
MAX_PAIRS = 32
MAX_QUERY_SCAN_CHARS = 4000  # keywords come from the query's start (a pasted document is not a query)
_TRIGRAM = 3
_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff]+")
# English words too common to be keywords (trigram substrings of them match almost everything).
_STOPWORDS = frozenset("""
    the and for are was were what who whom how why when where which that this these those with you
    your yours did does have has had from about tell can could would should there their they them its
    not but all any our out into then than also just like some more most very know remember please
    me my mine his her him she he we us is am be been it do of to in on at by or as so if an a i
""".split())
_SUFFIXES = ("ations", "ation", "ments", "ment", "ness", "ings", "ing", "ions", "ion", "ers", "er", "ies",
             "ied", "ed", "es", "ly", "s")
# A pair holding one of these characters is a particle or a question word, not a topic; and a
# few common pairs ask rather than say what about.
_FILLER_CHARS = frozenset("的了吗呢吧么哪啊呀是在和与或及把被给让请")
_FILLER_PAIRS = frozenset("什么 多少 怎么 如何 为什 应该 可以 需要 是否 一个 时候 多长 多久 要求 能否 有没 没有 一下".split())


def is_cjk(ch: str) -> bool:
    return unicodedata.east_asian_width(ch) in ("W", "F") and ch.isalnum()


def is_mostly_cjk(text: str) -> bool:
    """At least half of the letters and digits are CJK (Han, kana, Hangul)."""
    alnum = [ch for ch in text[:MAX_QUERY_SCAN_CHARS] if ch.isalnum()]
    return bool(alnum) and 2 * sum(map(is_cjk, alnum)) >= len(alnum)


def _words(text: str) -> list[str]:
    """Split on whitespace and punctuation (any script: "，" and "。" too); symbols stay ("c++")."""
    return "".join(" " if ch.isspace() or unicodedata.category(ch).startswith("P") else ch
                   for ch in text).split()


def keyword_terms(query: str) -> tuple[list[str], list[str]]:
    """(terms the trigram index can match, shorter terms), from a free-text query.

    Words split on spaces and punctuation; English stopwords dropped; a run of 4+ CJK characters
    (no spaces between words) becomes its overlapping 3-character pieces, so "我最喜欢的颜色"
    still matches "喜欢的" and "的颜色".
    """
    long_terms: list[str] = []
    short_terms: list[str] = []
    for word in _words(query[:MAX_QUERY_SCAN_CHARS].casefold()):
        if not word or word in _STOPWORDS:
            continue
        if len(word) < _TRIGRAM:
            short_terms.append(word)
        elif len(word) > _TRIGRAM and all(is_cjk(ch) for ch in word):
            long_terms.extend(word[i:i + _TRIGRAM] for i in range(len(word) - _TRIGRAM + 1))
        else:
            long_terms.append(word)
    dedup = list(dict.fromkeys(long_terms))
    return dedup[:MAX_KEYWORD_TERMS], list(dict.fromkeys(short_terms))[:MAX_KEYWORD_TERMS]


def stem(term: str) -> str:
    """A Latin-script keyword cut to its stem ("descaling", "descaled" → "descal"): the trigram
    index matches substrings, so the stem finds every form. Other scripts stay as they are."""
    if not term.isascii() or not term.isalpha() or len(term) < 5:
        return term
    for suffix in _SUFFIXES:
        if term.endswith(suffix) and len(term) - len(suffix) >= 4:
            term = term[:-len(suffix)]
            break
    return term[:-1] if term.endswith("e") and len(term) > 4 else term


def cjk_pairs(text: str) -> list[str]:
    """Overlapping character pairs of the text's CJK runs (a lone character stands for itself)."""
    out: list[str] = []
    for run in _CJK_RUN.findall(text):
        out += [run] if len(run) == 1 else [run[i:i + 2] for i in range(len(run) - 1)]
    return out


def query_pairs(query: str) -> list[str]:
    """The pairs of a query worth looking up (see _FILLER_*), at most MAX_PAIRS."""
    pairs = [p for p in dict.fromkeys(cjk_pairs(query))
             if len(p) == 2 and p not in _FILLER_PAIRS and not (set(p) & _FILLER_CHARS)]
    return pairs[:MAX_PAIRS]


def fts_phrase(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def like_pattern(term: str) -> str:
    return "%" + term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
