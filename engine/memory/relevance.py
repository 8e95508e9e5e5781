"""Whether a recalled memory earns its tokens (each one is evaluated before the answer's first
token): small talk recalls nothing; a memory must clear a calibrated floor, say something rather
than only ask, and add what the prompt does not already hold.

Calibration and the measured effect: docs/memory.md ("What recall may cost").
"""

from __future__ import annotations

import re

from engine.memory.service import Hit

# A message chunk needs this much more cosine than an explicit memory (English queries), and a
# keyword match does not lower it: in a 60-turn everyday chat, past turns that merely share a word
# ("blue", "keep") matched at 0.15-0.39, paraphrased facts scored 0.43-0.52 (docs/memory.md).
MESSAGE_MARGIN = 0.05
# A memory whose content words are (nearly) all in the window or summary adds nothing.
COVERED_SHARE = 0.9
MIN_TERMS = 2  # fewer content words: only the exact-text check of MemoryService.search applies

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]+")
_SENTENCE = re.compile(r"[^.!?。！？\n]+[.!?。！？]*")
_QUESTION_END = re.compile(r"(?:[?？]|[吗呢][。.]?)\W*$")
# Words that make even a question say something about the user ("… for my new puppy?").
_ABOUT_USER = re.compile(r"\b(?:my|mine|our|ours|i'm|i am|i've|i have|i had|i was|we're|we are|we have)\b"
                         r"|我的|我家|我们|我是|我有|我在")
_STOP = frozenset("""
    a an the and or but if so of to in on at by for from with about as into than then too very
    is am are was were be been being do does did have has had having will would can could should
    shall may might must i me my mine we us our you your yours he him his she her it its they them
    their this that these those there here what which who whom whose when where why how not no yes
    just also only all any some more most much many such own same other again once up down out off
    over under now get got make let well way one ok okay
""".split())

# Small talk: every word is one of these (at most SMALL_TALK_WORDS of them).
_SMALL_TALK_EN = frozenset("""
    hi hello hey hiya heya yo howdy greetings morning afternoon evening night day good great nice
    cool ok okay k kk alright right fine sure yes yeah yep yup ya no nope nah thanks thank thx ty
    tysm cheers you u ya so much very lot a bye goodbye cya see later soon lol lmao rofl wow awesome
    perfect sounds got it understood i np problem welcome you're youre how are r doing today there
    what's whats up sup well done one that's thats that is oh ah ahh hmm hm indeed please all too
    amazing brilliant lovely excellent interesting true agreed and have
""".split())
_LAUGH = re.compile(r"^(?:(?:ha|he|hi){2,}h?|lo+l|lmf?ao+|x+d+|o+k+|ye+s+|no+|hm+)$")
_SMALL_TALK_ZH = sorted("""
    你好 您好 嗨 哈喽 哈啰 早上好 早安 上午好 中午好 下午好 晚上好 晚安 谢谢 谢谢你 谢谢您 谢了 多谢 感谢
    非常 太 真 好的 好吧 好 嗯 嗯嗯 哦 噢 喔 哈 嘿 行 可以 没问题 不客气 知道了 明白了 明白 懂了 了解 收到
    对 对的 是的 没错 不错 很好 太好了 棒 真棒 厉害 再见 拜拜 回头见 辛苦了 你 您 啊 呀 呢 吧 啦 哇 嘛 了
    好久不见 最近怎么样 你好吗 还好 挺好 也是 原来如此 有道理 哈哈
""".split(), key=len, reverse=True)
SMALL_TALK_WORDS = 8
SMALL_TALK_CJK_CHARS = 12


def _zh_small_talk(run: str) -> bool:
    """`run` (CJK characters only) is made of small-talk pieces end to end."""
    ends = {0}
    for i in range(len(run)):
        if i in ends:
            ends.update(i + len(p) for p in _SMALL_TALK_ZH if run.startswith(p, i))
    return len(run) in ends


def is_small_talk(text: str) -> bool:
    """A greeting, thanks or acknowledgement ("thanks!", "ok, cool", "谢谢！", "好的"), in English or
    Chinese: no memory is worth recalling for it. Emoji or punctuation alone count too."""
    lowered = text.casefold().replace("’", "'")
    runs = _CJK_RUN.findall(lowered)
    words = _WORD.findall(_CJK_RUN.sub(" ", lowered))
    if len(words) > SMALL_TALK_WORDS or sum(map(len, runs)) > SMALL_TALK_CJK_CHARS:
        return False
    if not words and not runs:
        return not any(ch.isalnum() for ch in lowered)
    return (all(w in _SMALL_TALK_EN or _LAUGH.match(w) for w in words)
            and all(_zh_small_talk(r) for r in runs))


def asks_only(text: str) -> bool:
    """Every sentence is a question and none says anything about the user: a past question tells
    the model nothing the new message does not ("How do I descale a kettle?")."""
    sentences = [s.strip() for s in _SENTENCE.findall(text) if s.strip()]
    return (bool(sentences) and all(_QUESTION_END.search(s) for s in sentences)
            and not _ABOUT_USER.search(text.casefold().replace("’", "'")))


def content_terms(text: str) -> set[str]:
    """Content words (English, stopwords dropped) and CJK character pairs of `text`."""
    lowered = text.casefold().replace("’", "'")
    terms = {w for w in _WORD.findall(lowered) if len(w) > 2 and w not in _STOP and "'" not in w}
    for run in _CJK_RUN.findall(lowered):
        if len(run) == 1:
            terms.add(run)
        else:
            terms.update(run[i:i + 2] for i in range(len(run) - 1))
    return terms


def covered(terms: set[str], by: set[str], share: float = COVERED_SHARE) -> bool:
    """At least `share` of `terms` are in `by` (never for fewer than MIN_TERMS terms)."""
    return len(terms) >= MIN_TERMS and len(terms & by) >= share * len(terms)


def message_floor(hit: Hit, min_score: float, keyword_min_score: float, cjk: bool) -> float:
    """Cosine a chunk of a past message needs. A CJK query keeps the model's floors (calibrated
    with the keyword match, which the English model needs for Chinese); an English one needs
    `min_score + MESSAGE_MARGIN`, keyword match or not."""
    if cjk:
        return keyword_min_score if hit.keyword_rank is not None else min_score
    return min_score + MESSAGE_MARGIN


def worth_recalling(hits: list[Hit], k: int, min_score: float, keyword_min_score: float, cjk: bool,
                    shown: list[str] = ()) -> tuple[list[Hit], dict[str, int]]:
    """The best `k` hits that earn their place, in the order given, and how many were dropped why.

    Args:
        hits: candidates, best first (`MemoryService.search` with a generous k: its fused rank
            can bury a strong meaning match under weak keyword matches).
        min_score, keyword_min_score: the embedder's floors for this query's script.
        cjk: the query is mostly CJK.
        shown: what the prompt already holds (window messages as the model read them, summary,
            pinned facts): a memory whose content words are all there is dropped.
    """
    seen: set[str] = set()
    for text in shown:
        if text:
            seen |= content_terms(text)
    kept: list[Hit] = []
    dropped = {"below_floor": 0, "asks_only": 0, "covered": 0, "over_k": 0}
    for hit in hits:
        if hit.kind == "message" and hit.score < message_floor(hit, min_score, keyword_min_score, cjk):
            dropped["below_floor"] += 1
            continue
        if hit.kind == "message" and asks_only(hit.text):
            dropped["asks_only"] += 1
            continue
        terms = content_terms(hit.text)
        if covered(terms, seen):  # by the prompt, or by a better hit kept already
            dropped["covered"] += 1
            continue
        if len(kept) == k:
            dropped["over_k"] += 1
            continue
        kept.append(hit)
        seen |= terms
    return kept, dropped
