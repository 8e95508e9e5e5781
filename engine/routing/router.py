"""Request complexity router: rules only (no model, no network), Chinese and English.

Levels: L1 = small CPU model (greetings, thanks, small talk, time/date, one-word translations,
trivial arithmetic); L2 = local 6 GB GPU INT4 model (ordinary Q&A, explanations, short code,
short rewrites); L3 = big remote model (deep analysis, proofs, plans, system design, long
creative writing, multi-option evaluations). See docs/router.md for the rules and their accuracy.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, replace

LEVELS = ("L1", "L2", "L3")
_RANK = {lvl: i for i, lvl in enumerate(LEVELS)}

L3_THRESHOLD = 3.0  # L3 score at or above this routes to L3
_L1_MAX_CHARS = 60  # longer texts are never L1
_HEAD, _TAIL = 1200, 600  # keyword scan window for long pasted texts (instructions sit at the ends)
_LONG_TEXT_UNITS = 500  # ~700 tokens of prose: pasted material too long for a "short" rewrite
_LARGE_CODE_LINES = 80  # pasted code this long is a review/restructuring job, not a snippet
_HUGE_CODE_LINES = 300  # ~3000+ tokens of code: beyond what the local model handles well
# Prose length in English-word equivalents → L3 evidence; long text alone reaches the threshold.
_LENGTH_STEPS = ((_LONG_TEXT_UNITS, 4.0, "long text"), (100, 2.5, "long"), (45, 2.0, "long"),
                 (22, 1.0, "long"))


@dataclass(frozen=True)
class RouteDecision:
    level: str  # "L1" | "L2" | "L3"
    reason: str  # which rule fired, for logs and the UI
    micros: float  # time spent classifying, µs
    score: float = 0.0  # L3 evidence score (≥ L3_THRESHOLD means L3)
    wanted: str | None = None  # the classifier's level when stickiness/override changed it


# --- L3 evidence: (weight, keywords). English entries are whole words (after lower-casing);
# entries with a space or a hyphen and all Chinese entries are substrings.
_FEATURES: dict[str, tuple[float, tuple[str, ...]]] = {
    # Open-ended construction, formal reasoning, plans, long writing: decisive on their own.
    "design": (3.0, ("design", "designing", "architect", "architecture", "how would you build",
                     "how would you design", "how would you implement", "how would you scale",
                     "设计", "架构", "搭建一套")),
    "proof": (3.0, ("prove", "proof", "proofs", "derive", "derivation", "证明", "推导", "论证")),
    "plan": (3.0, ("roadmap", "itinerary", "curriculum", "business plan", "路线图", "计划书", "商业计划",
                   "规划", "策划", "制定", "拟定", "行程")),
    "long_form": (3.0, ("novel", "screenplay", "chapters", "short story", "essay", "小说", "剧本", "议论文",
                        "论文", "长文", "章节")),
    # Named analysis methods imply a multi-dimension study.
    "method": (3.0, ("swot", "pestel", "five forces", "cost-benefit", "root cause", "sensitivity analysis",
                     "五力", "成本收益", "根因", "敏感性分析")),
    # Evidence that needs company: "analyse this sentence" is L2, "analyse X from 3 angles" is not.
    "analysis": (2.0, ("analyze", "analyse", "analysis", "evaluate", "assess", "critique", "critically",
                       "weigh", "investigate", "investigation", "feasibility", "trade-offs", "tradeoffs",
                       "分析", "评估", "评价", "权衡", "剖析", "研判", "可行性", "利弊")),
    "restructure": (2.0, ("refactor", "refactoring", "migrate", "migration", "overhaul", "重构", "迁移",
                          "改造")),
    # Scale requirements turn a how-to into a design problem.
    "scale": (2.0, ("scalable", "high availability", "high-availability", "millions of", "高可用",
                    "高并发", "百万", "千万", "亿级", "海量")),
    "compare": (1.5, ("compare", "comparing", "contrast", "versus", "which should i", "which is better",
                      "which one should", "对比", "比较", "选哪个", "哪个更好", "哪个好")),
    # A whole program rather than a function.
    "build_app": (1.5, ("app", "application", "website", "game", "compiler", "interpreter", "游戏", "网站",
                        "应用", "小程序", "编译器", "解释器")),
    "depth": (1.5, ("detailed", "comprehensive", "thorough", "thoroughly", "in-depth", "in depth",
                    "systematic", "systematically", "walk me through", "step by step", "step-by-step",
                    "end-to-end", "first principles", "complete", "full", "完整", "详细", "全面", "深入",
                    "系统地", "系统的", "逐步", "分阶段", "一步步", "深层")),
    "deliverable": (1.5, ("plan", "strategy", "proposal", "report", "framework", "program", "programme",
                          "policy", "pipeline", "milestones", "timeline", "projection", "scenarios",
                          "recommend", "recommendation", "justify", "model", "propose", "guidelines",
                          "方案", "策略", "报告", "框架", "体系", "计划", "提出", "预案", "时间线", "路径",
                          "指南", "章程", "测算", "优先级", "选型", "路线", "大纲")),
    "scope": (1.0, ("including", "covering", "considering", "in terms of", "perspectives", "everything",
                    "dimensions", "包括", "包含", "考虑", "角度", "层面", "方面", "维度", "从零")),
    "multi_step": (1.0, ("and then", "then", "as well as", "并给出", "并提出", "并说明", "并讨论", "并解释",
                         "并分析", "并判断", "并预测", "并列出", "然后", "同时", "结合")),
    # The user's own organisation: decisions and plans rather than textbook questions.
    "own_org": (1.0, ("our", "我们公司", "我们团队", "我们的", "本公司")),
    "simple": (-1.5, ("simple", "quick", "quickly", "brief", "briefly", "one sentence", "one-liner",
                      "a paragraph", "简单", "简短", "一句话", "几句话", "小方法")),
}
# Nouns that contain a feature keyword but ask for no such work ("设计师" is a designer).
_NOT_FEATURES = ("design pattern", "设计模式", "设计师", "分析师", "架构师", "推导式", "规划局",
                 # the user's own text is input to check, not long writing to produce
                 "my essay", "my story", "my novel", "my report", "我的论文", "我的作文", "我的小说", "我的报告")
# Punctuation → space, so that str.split() yields words; apostrophes stay ("what's").
_TOKEN_TABLE = str.maketrans({c: " " for c in '.,;:!?()[]{}"“”/\\<>*+=-—_#@&%$^|~`，。！？：；、（）《》「」…'})
# Lookups chosen for speed on a slow CPU: a set intersection for English words, a first-word index
# for English phrases, one alternation (longest first) for Chinese keywords.
_WORD_FEATURES: dict[str, str] = {}
_EN_PHRASES: dict[str, list[tuple[str, str]]] = {}  # first word → [(phrase, feature)]
_CJK_FEATURES: dict[str, str] = {}
for _name, (_w, _kws) in _FEATURES.items():
    for _kw in _kws:
        if not _kw.isascii():
            _CJK_FEATURES[_kw] = _name
        elif " " in _kw or "-" in _kw:
            _EN_PHRASES.setdefault(_kw.translate(_TOKEN_TABLE).split()[0], []).append((_kw, _name))
        else:
            _WORD_FEATURES[_kw] = _name
_WORD_FEATURE_SET = frozenset(_WORD_FEATURES)
_LABEL = {name: f"{name}{w:+g}" for name, (w, _) in _FEATURES.items()}  # formatted once, not per call
_EN_PHRASE_FIRST = frozenset(_EN_PHRASES)
_CJK_KEYWORDS = re.compile("|".join(sorted(_CJK_FEATURES, key=len, reverse=True)))

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_ASCII_WORD = re.compile(r"[a-z0-9'’]+")  # English words inside Chinese text (translate is slow there)
# An explicit long-output request: "2,000-word", "1500 words", "三千字", "不少于两千字".
_LONG_OUTPUT = re.compile(
    r"\d(?:\d{2,4}|,\d{3})\s*-?\s*(?:words?|字)|[一二两三四五六七八九十几数]\s*[千万]\s*字")
# Quoted passages are material to work on, not instructions: their keywords do not count.
_QUOTED = re.compile(r'"[^"]{12,}"|“[^”]{12,}”|「[^」]{12,}」|‘[^’]{12,}’')
# The size of the input the user refers to: "400-line module", "三千行的项目".
_BIG_INPUT = re.compile(r"\d(?:\d{2,5}|,\d{3})\s*-?\s*(?:lines?|行)|[一二两三四五六七八九几数][百千万]行")
_FENCED = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)
# One line of unfenced code: a keyword start, a bracket/semicolon end, or deep indentation. Every
# branch is anchored at a line start (one match per line) and uses [ \t], not \s (no run across lines).
_CODE_LINE = re.compile(
    r"^(?:[ \t]*(?:def|class|import|from|return|if|elif|else|for|while|try|except|public|private|function"
    r"|const|let|var|#include)\b|[^\n]*[;{}][ \t]*$|[ \t]{4,}\S)", re.MULTILINE)
# Code signs, cheapest first (substring tests in C; one-branch regexes only when a marker is present).
_CODE_CALL = re.compile(r"[\w\])]\([^()\n]*\)")  # f(x), print("hi"), foo.bar()
_CODE_START = re.compile(
    r"^[ \t]*(?:def|class|import|from|function|public|private|const|let|var|select|if|for|while) [^\n]*[:{(;=]",
    re.MULTILINE)

# --- L1: the whole (short) text must match one of these.
_GREET_EN = frozenset((
    "hi hello hey yo hiya howdy greetings good morning afternoon evening night day thanks thank thx ty "
    "cheers much so a lot one now say but what tell joke very really appreciate appreciated it that "
    "that's was is helpful great awesome cool nice ok okay k kk sure yes yeah yep yup no nope fine got "
    "alright all right bye goodbye see you later soon tomorrow talk take care sorry my mistake bad never "
    "mind nevermind lol haha hahaha hmm wow oh ah sounds perfect how are doing going how's what's up who "
    "made created built your name do have can hear me i i'm am bored tired happy sad mate buddy friend "
    "there please again shorter simpler continue go on robot ai bot human real the for help today "
    "you're welcome of course"
).split())
_L1_ZH_PIECES = (
    r"你好|您好|嗨|哈喽|哈啰|早上好|早安|中午好|下午好|晚上好|晚安|早|在吗|在不在|谢谢|多谢|感谢|谢了|帮助|"
    r"帮忙|辛苦了|再见|拜拜|明天见|回头见|下次见|先这样|好的|好嘞|好吧|好滴|好|行|可以|收到|知道了|明白了|明白|懂了|"
    r"对的|对|是的|没问题|没事了|没事|没关系|不客气|不好意思|抱歉|对不起|打错字|哈|嘿|嗯|哦|噢|呵呵|厉害|太好笑|"
    r"你是谁|你能做什么|你会做什么|你可以做什么|你会什么|讲个笑话|说个笑话|来个笑话|今天|过得|还好|你是机器人|"
    r"你是人工智能|你叫什么名字|你叫什么|你会说中文|你会说英文|你能听到|最近怎么样|怎么样|我好无聊|好无聊|无聊|"
    r"兄弟|非常|真的|太|了|呀|啊|吗|呢|吧|啦|嘛|哟|的|你|我|再说一遍|重复一下|说简短一点|简短一点|短一点|"
    r"说简单点|简单点|继续|"
    r"[\s，。！？!?,.~～、…:：;；)(（）\-_^]|[\U0001F300-\U0001FAFF\u2600-\u27BF]")
_L1_ZH = re.compile(f"(?:{_L1_ZH_PIECES})++")  # possessive: linear time, no backtracking blow-up
_L1_ZH_PIECE = re.compile(_L1_ZH_PIECES)
# Near-misses: a short text with a clear small-talk anchor and at most a couple of other words is
# still small talk ("thanks a ton", "谢谢，你太棒了") unless what is left asks for something.
_ANCHORS_EN = frozenset("thanks thank thx ty hi hello hey bye goodbye ok okay lol haha cool nice great awesome "
                        "sorry morning night cheers".split())
_REQUEST_EN = frozenset("explain write fix make give show list translate summarize summarise create generate "
                        "find check compare describe rewrite improve add change remove update calculate".split())
_ANCHORS_ZH = ("谢谢", "感谢", "多谢", "你好", "您好", "嗨", "哈喽", "再见", "拜拜", "晚安", "早安", "好的", "收到",
               "哈哈", "嗯嗯")
_REQUEST_ZH = ("写", "帮", "怎", "如何", "为什么", "什么", "解释", "翻译", "算", "讲", "给")
_TIME_Q = re.compile(
    r"(?:今天|明天|昨天|后天|现在|今年|这周|本周|(?:下|上|这)?(?:周|星期|礼拜)[一二三四五六日天末])(?:是)?(?:几号|几月份?|星期几|周几|礼拜几|几点了?|周末吗|"
    r"什么日子|哪一年|几几年|多少号)[吗呢啊呀?？。!！\s]*"
    r"|(?:what(?:'s| is) (?:the )?(?:time|date|day)(?: is it)?(?: now| today)?"
    r"|what(?:'s| is) today'?s? date|what time is it(?: now)?|what day is (?:it|today)(?: today)?"
    r"|what year is it|what month is it|is it (?:the weekend|monday|tuesday|wednesday|thursday|friday"
    r"|saturday|sunday)(?: yet| today)?)[\s?.!]*")
_NUM = r"-?\d{1,6}(?:\.\d+)?"
_OP = r"(?:[-+*/×÷x^]|plus|minus|times|multiplied by|divided by|加上?|减去?|乘以?|除以)"
_ARITH = re.compile(
    rf"(?:what(?:'s| is)|calculate|compute|how much is)?\s*{_NUM}(?:\s*{_OP}\s*{_NUM}){{1,3}}\s*"
    r"(?:=|equals|等于|是)?\s*(?:多少|几)?\s*[?？。.!]*\s*")
_LANG_ZH = r"(?:[\u4e00-\u9fff]{1,4}(?:语|文))"
_TRANSLATE = re.compile(
    r"(?:翻译|翻译一下|译)\s*[:：]\s*[\"“']?[a-z'’-]{1,20}[\"”']?[。.]?"
    rf"|(?:把|请把)?[“\"「‘']?[^\s“”\"「」‘’']{{1,8}}[”\"」’']?(?:用|的|翻译成|翻成|译成)\s*{_LANG_ZH}"
    r"(?:怎么说|怎么讲|是什么|是啥|叫什么)?[吗呢?？。]*"
    rf"|用{_LANG_ZH}(?:怎么说|怎么讲)\s*[:：]?\s*[“\"「‘']?[^\s“”\"「」‘’']{{1,8}}[”\"」’']?[?？。]*"
    r"|(?:translate|how do (?:you|i) say|what(?:'s| is)(?: the word)?)\s+[\"“'‘]?[a-z'’ -]{1,20}?[\"”'’]?"
    r"\s+(?:into|in|to)\s+[a-z]+[?.!]*")


def _looks_like_code(low: str) -> bool:
    if ("=>" in low or "==" in low or "!=" in low or "</" in low or "/>" in low or "&&" in low
            or "||" in low or "::" in low or "->" in low or ";\n" in low or "#include" in low
            or "$(" in low or low.endswith(";") or ("{" in low and "}" in low)):
        return True
    if "(" in low and _CODE_CALL.search(low):
        return True
    return _CODE_START.search(low) is not None


def _has_alnum(token: str) -> bool:
    return any(c.isalnum() for c in token)


def _near_small_talk(low: str, tokens: list[str], has_cjk: bool) -> bool:
    if has_cjk:
        if len(low) > 12 or not any(a in low for a in _ANCHORS_ZH):
            return False
        rest = _L1_ZH_PIECE.sub("", low)
        return len(rest) <= 3 and not any(r in rest for r in _REQUEST_ZH)
    if len(tokens) > 6 or _ANCHORS_EN.isdisjoint(tokens):
        return False
    unknown = [t for t in tokens if t.strip("'’") not in _GREET_EN and _has_alnum(t)]
    return len(unknown) <= 1 and _REQUEST_EN.isdisjoint(unknown)


def _is_l1(low: str, tokens: list[str], has_cjk: bool) -> str | None:
    if has_cjk:
        if _L1_ZH.fullmatch(low):
            return "greeting/thanks/small talk"
    elif len(tokens) <= 10 and all(t.strip("'’") in _GREET_EN or not _has_alnum(t) for t in tokens):
        return "greeting/thanks/small talk"
    if _near_small_talk(low, tokens, has_cjk):
        return "small talk (near match)"
    if _TIME_Q.fullmatch(low):
        return "time/date question"
    if _ARITH.fullmatch(low):
        return "trivial arithmetic"
    if _TRANSLATE.fullmatch(low):
        return "one-word translation"
    return None


def _words(low: str) -> list[str]:
    return low.translate(_TOKEN_TABLE).split() if low.isascii() else _ASCII_WORD.findall(low)


def _l3_evidence(low: str, tokens: list[str], has_cjk: bool, units: float,
                 code_lines: int) -> tuple[float, list[str]]:
    """Sum the weights of the L3 features present; also return them as "name+weight" strings."""
    scan = low
    if '"' in low or "“" in low or "「" in low or "‘" in low:
        scan = _QUOTED.sub(" ", scan)
    for neg in _NOT_FEATURES:
        if neg in scan:
            scan = scan.replace(neg, " ")
    if scan is not low:
        tokens = _words(scan)
    hits = {_WORD_FEATURES[w] for w in _WORD_FEATURE_SET.intersection(tokens)}
    for first in _EN_PHRASE_FIRST.intersection(tokens):
        hits.update(name for kw, name in _EN_PHRASES[first] if kw in scan)
    if has_cjk:
        hits.update(_CJK_FEATURES[k] for k in _CJK_KEYWORDS.findall(scan))
    parts = [(_FEATURES[name][0], _LABEL[name]) for name in hits]
    if ("word" in low or "字" in low) and _LONG_OUTPUT.search(low):
        parts.append((4.0, "long output+4"))
    if ("line" in low or "行" in low) and _BIG_INPUT.search(low):
        parts.append((2.0, "large input+2"))
    seps = (low.count(",") + low.count("，") + low.count("、") + low.count(";") + low.count("；")
            + low.count(" and ") + low.count(" or "))
    if "compare" in hits and seps >= 2:
        parts.append((1.0, "multi-option+1"))
    if seps >= 5:
        parts.append((1.5, f"{seps} list items+1.5"))
    elif seps >= 3:
        parts.append((1.0, f"{seps} list items+1"))
    questions = low.count("?") + low.count("？")
    if questions >= 3:
        parts.append((1.5, f"{questions} questions+1.5"))
    if code_lines >= _HUGE_CODE_LINES:
        parts.append((4.0, f"{code_lines} code lines+4"))
    elif code_lines >= _LARGE_CODE_LINES:
        parts.append((2.0, f"{code_lines} code lines+2"))
    for min_units, weight, label in _LENGTH_STEPS:
        if units >= min_units:
            parts.append((weight, f"{label} {int(units)} words{weight:+g}"))
            break
    parts.sort(reverse=True)
    return sum(w for w, _ in parts), [label for _, label in parts]


def classify(text: str) -> RouteDecision:
    """Route one user message to L1, L2 or L3 by rules.

    Args:
        text: the user's message (any length; very long pastes are scanned at head and tail).

    Returns:
        The decision with the rule that fired and the time it took in µs.
    """
    t0 = time.perf_counter_ns()
    stripped = text.strip()
    window = stripped
    code_lines = 0
    if "```" in stripped:
        # Fenced code is material: its identifiers are not instructions and its size counts as lines.
        code_lines = sum(m.group().count("\n") - 1 for m in _FENCED.finditer(stripped))
        window = _FENCED.sub(" ", stripped)
    scale = 1.0
    if len(window) > _HEAD + _TAIL:
        scale = len(window) / (_HEAD + _TAIL)  # scale the sampled window back to the full length
        window = window[:_HEAD] + "\n" + window[-_TAIL:]
    low = window.lower()
    lines = low.count("\n") + 1
    code = None  # decided lazily: an L3 decision does not need it
    if lines >= 4:
        code = bool(code_lines) or _looks_like_code(low)
        if code:
            code_lines += int(len(_CODE_LINE.findall(low)) * scale)
    has_cjk = not low.isascii() and _CJK.search(low) is not None
    tokens = _words(low)
    if not code_lines and not has_cjk and (not tokens or (len(low) <= 12 and not any(map(str.isalnum, low)))):
        return _done("L1", "no words (empty, emoji or punctuation)", t0)
    if has_cjk:
        # Wide characters (CJK and full-width punctuation) are 3 UTF-8 bytes: count them in C.
        n_wide = (len(low.encode("utf-8", "replace")) - len(low)) // 2
        units = len(tokens) + n_wide / 1.7  # a Chinese word is ~1.7 characters
    else:
        units = len(tokens)
    units *= scale
    if code_lines and lines > 1:
        units *= max(0.0, 1.0 - code_lines / lines)  # code lines are not prose
    score, parts = _l3_evidence(low, tokens, has_cjk, units, code_lines)
    if score >= L3_THRESHOLD:
        return _done("L3", "L3 evidence " + ", ".join(parts), t0, score)
    if code is None:
        code = bool(code_lines) or _looks_like_code(low)
    if not code and len(stripped) <= _L1_MAX_CHARS:
        rule = _is_l1(low, tokens, has_cjk)
        if rule:
            return _done("L1", rule, t0, score)
    basis = "code" if code else "ordinary request"
    detail = f" (L3 evidence {score:g} < {L3_THRESHOLD:g}: {', '.join(parts)})" if parts else ""
    return _done("L2", basis + detail, t0, score)


def quick(decision: RouteDecision) -> bool:
    """A quick request: the classifier itself sent it to L1 (a greeting, thanks, a short fact), not
    a user's override, stickiness or a fallback. A reasoning model answers it without thinking."""
    return (decision.level == "L1" and decision.wanted is None
            and decision.reason not in ("user override", "conversation override"))


def _done(level: str, reason: str, t0: int, score: float = 0.0) -> RouteDecision:
    return RouteDecision(level, reason, (time.perf_counter_ns() - t0) / 1000.0, score)


def _check_level(level: str, what: str) -> None:
    if level not in _RANK:
        raise ValueError(f"{what} must be one of {', '.join(LEVELS)}, not {level!r}")


def apply_stickiness(wanted: RouteDecision, *, warm_level: str | None, uncached_tokens: int,
                     prompt_tps: float, max_switch_s: float = 1.5) -> RouteDecision:
    """Keep a conversation on the model whose KV cache is warm unless quality really needs a switch.

    Rule: going up to L3 is never refused (under-routing is the costly error). One level down
    (L3→L2, L2→L1) always stays: the warm model answers at least as well and needs no re-evaluation.
    Two levels down (L3→L1) and one level up to L2 (L1→L2) stay only when the switch would cost more
    than `max_switch_s` (uncached_tokens / prompt_tps on the target model).

    Args:
        wanted: the classifier's (or an override's) decision.
        warm_level: level whose model holds this conversation's KV cache, or None when none does.
        uncached_tokens: tokens the wanted level's model would have to evaluate before answering.
        prompt_tps: that model's prompt-processing speed, tokens/s (> 0).
        max_switch_s: the largest switch delay accepted without a quality reason.

    Returns:
        `wanted` unchanged, or a copy on `warm_level` with `wanted` set and a "sticky:" reason.
    """
    _check_level(wanted.level, "wanted level")
    if uncached_tokens < 0 or prompt_tps <= 0:
        raise ValueError("uncached_tokens must be ≥ 0 and prompt_tps > 0")
    if warm_level is None or warm_level == wanted.level:
        return wanted
    _check_level(warm_level, "warm_level")
    cost_s = uncached_tokens / prompt_tps
    step = _RANK[wanted.level] - _RANK[warm_level]
    cost = f"re-evaluate {uncached_tokens} tokens (~{cost_s:.1f} s)"
    if wanted.level == "L3":
        stay = False
    elif step == -1:
        stay = True
    else:
        stay = cost_s > max_switch_s
    if stay:
        why = "one level down" if step == -1 else f"over the {max_switch_s:g} s switch budget"
        return replace(wanted, level=warm_level, wanted=wanted.level,
                       reason=f"sticky: KV warm on {warm_level}, switching to {wanted.level} would "
                              f"{cost} ({why})")
    return replace(wanted, reason=f"{wanted.reason}; switch from warm {warm_level}: {cost}")


def override(decision: RouteDecision, forced: str | None) -> RouteDecision:
    """Apply the user's level choice: None or "auto" keeps `decision`, "L1"/"L2"/"L3" force it."""
    if forced is None or forced.lower() == "auto":
        return decision
    level = forced.upper()
    _check_level(level, "forced level")
    return replace(decision, level=level, reason="user override", wanted=decision.level)
