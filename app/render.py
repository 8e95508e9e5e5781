"""Messages to HTML for the chat view: Markdown (markdown-it), highlighted code (Pygments), the
line under each answer, confidence and caution notices. Pure functions: no widgets here."""

from __future__ import annotations

import hashlib
import html
from pathlib import PureWindowsPath

from markdown_it import MarkdownIt
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import TextLexer, get_lexer_by_name
from pygments.util import ClassNotFound

from app.chat_surface import CODE_PAD, USER_PAD
from app.citations import citations_html
from app.i18n import tr
from app.transcript import Answer, ToolBlock

# The light look's; app/theme.py sets each look's own (its tokens) before anything is drawn.
COLOURS = {"user": "#dcecff", "assistant": "#f2f2f2", "code": "#f4f4f4", "meta": "#777", "border": "#888",
           "badge": "#eceef1",
           "warn": "#8a4b00", "danger": "#a00000", "mark": "#ffe2a8", "code_style": "friendly"}
_FORMATTERS: dict[str, HtmlFormatter] = {}


def set_colours(**colours: str) -> None:
    """The look's colours for the chat's HTML (keys as in COLOURS; app/theme.py)."""
    unknown = set(colours) - set(COLOURS)
    if unknown:
        raise KeyError(f"no such chat colour: {sorted(unknown)}")
    COLOURS.update(colours)


def _formatter() -> HtmlFormatter:
    style = COLOURS["code_style"]
    if style not in _FORMATTERS:
        _FORMATTERS[style] = HtmlFormatter(noclasses=True, nowrap=True, style=style)
    return _FORMATTERS[style]


CODE_BLOCKS: dict[str, str] = {}  # "copy:<key>" links in the view → the code they copy


def _code(code: str, lang: str, attrs) -> str:
    key = hashlib.sha1(code.encode("utf-8", "replace")).hexdigest()[:16]
    CODE_BLOCKS[key] = code
    try:
        lexer = get_lexer_by_name(lang) if lang else TextLexer()
    except ClassNotFound:
        lexer = TextLexer()
    body = highlight(code, lexer, _formatter())
    label = html.escape(lang or "code")
    # No background or border here: the view paints the block rounded under it (app/chat_surface.py
    # knows it by this cell padding). A header: the language, and a copy icon.
    link = f"color:{COLOURS['meta']};text-decoration:none"
    return (f"<table width='100%' cellspacing='0' cellpadding='{CODE_PAD}'>"
            f"<tr><td style='color:{COLOURS['meta']};font-size:small'>{label}</td>"
            f"<td align='right' style='font-size:small'><a href='copy:{key}' style='{link}'>"
            f"<img src='icon:copy' width='13' height='13'>&nbsp;{tr('copy')}</a></td></tr>"
            f"<tr><td colspan='2'><pre style='font-family:monospace;margin:0'>{body}</pre></td></tr></table>")


# "js-default": no raw HTML from model output reaches the view; links are not auto-followed.
_MD = MarkdownIt("js-default", {"highlight": _code, "breaks": True}).enable("table")
MAX_RENDER_CHARS = 200_000  # deeper or longer text is shown as plain text: rendering must stay fast


def markdown_html(text: str) -> str:
    if len(text) > MAX_RENDER_CHARS or text.count("\n") > 20_000:
        return f"<pre>{html.escape(text)}</pre>"
    try:
        tokens = _MD.parse(text)
        # At maxNesting markdown-it stops parsing and silently drops the rest (10 000 nested quotes
        # showed empty boxes without their text): show such text plain instead.
        if any(t.level >= _MD.options["maxNesting"] - 1 for t in tokens):
            return f"<pre>{html.escape(text)}</pre>"
        # A Markdown table as a grid: Qt draws a bare <table> without lines.
        return _MD.renderer.render(tokens, _MD.options, {}).replace(
            "<table>", f"<table border='1' cellspacing='0' cellpadding='6' style='border-color:{COLOURS['border']}'>"
        ).replace("<blockquote>", f"<blockquote style='color:{COLOURS['meta']};margin-left:12px'>")
    except RecursionError:  # pathological nesting: plain text, never a crash
        return f"<pre>{html.escape(text)}</pre>"


def meta_line(stats: dict, level: str = "", model: str = "") -> str:
    """The small line under an answer: tier and model, TTFT, speed, tokens evaluated vs cached."""
    if not stats:
        return ""
    parts = [f"{level or stats.get('level', '')} · {model}".strip(" ·")]
    if stats.get("ttft_ms") is not None:
        parts.append(tr("{ms:.0f} ms to first token").format(ms=stats["ttft_ms"]))
    if stats.get("decode_tps"):
        parts.append(f"{stats['decode_tps']:.1f} tok/s")
    if stats.get("draft_tokens"):
        parts.append(tr("drafted {accepted}/{drafted} accepted").format(accepted=stats.get("draft_accepted", 0),
                                                                       drafted=stats["draft_tokens"]))
    if stats.get("reasoning_tokens"):
        parts.append(tr("thought {n} tokens in {s:.1f} s").format(n=stats["reasoning_tokens"],
                                                                   s=stats.get("reasoning_ms", 0) / 1000))
    if "prompt_tokens_evaluated" in stats:
        est = "~" if stats.get("tokens_estimated") else ""
        parts.append(tr("{ev} evaluated / {ca} cached").format(ev=f"{est}{stats['prompt_tokens_evaluated']}",
                                                               ca=stats.get("prompt_tokens_cached", 0)))
    if stats.get("restored_from") in ("warm", "cold"):
        parts.append(tr("restored from {tier}").format(tier=stats["restored_from"]))
    if stats.get("fallback"):
        parts.append(tr("fallback: {why}").format(why=stats["fallback"]))
    if stats.get("finish_reason") in ("cancelled", "interrupted"):
        parts.append(tr("stopped"))
    elif stats.get("finish_reason") == "repetition":
        parts.append(tr("stopped: the answer began repeating itself"))
    elif stats.get("finish_reason") == "length":
        parts.append(tr("cut at the length limit"))
    return " · ".join(p for p in parts if p)


def meta_tip(stats: dict) -> str:
    """The line's tooltip: how the answer was decoded and why (speculative decoding's own words,
    "auto: plain is faster here"); empty for an answer that says nothing about it (L3, older rows)."""
    kind, note = stats.get("speculation"), stats.get("speculation_note") or ""
    if not (kind or note or stats.get("draft_tokens")):
        return ""
    how = {"ngram": tr("n-gram drafts"), "draft": tr("a draft model")}.get(kind or "", tr("off"))
    text = tr("Speculative decoding: {how}").format(how=how)
    return f"{text} ({note})" if note else text


def model_label(spec: str) -> str:
    """A tier's model as people read it: a catalog id as it is, a .gguf file by its name without
    the folder (a path from the Models dialog or --model fills a status line otherwise)."""
    return PureWindowsPath(spec).stem if spec.lower().endswith(".gguf") else spec  # either slash


def where_answered(level: str | None, stats: dict | None = None) -> str:
    """Where an answer was made, in a user's words: the GPU or CPU model here, or the remote one.
    An L2 model whose layers all stayed on the CPU is said to be on the CPU."""
    offload = (stats or {}).get("offload") or {}
    if level == "L3":
        return tr("the remote model")
    if level == "L2" and offload.get("n_gpu_layers", 1):
        return tr("the GPU model")
    return tr("the CPU model") if level in ("L1", "L2") else tr("a model")


def answered_by(answer: Answer) -> str:
    """The status line after a turn: where it was answered, and a fallback the user must know of
    (a broken tier stood in for). Why the router chose that tier is the answer's info popover
    (routing_text), not the status line."""
    text = tr("Answered on {where}").format(where=where_answered(answer.level, answer.stats))
    return tr("{text} (a stand-in: {why})").format(text=text, why=answer.fallback) if answer.fallback else text


def routing_text(stats: dict) -> str:
    """The answer's routing evidence, for those who want it: tier, model, the router's reason and a
    fallback (the info button on the answer's header shows it)."""
    lines = [tr("Tier {level}: {model}").format(level=stats.get("level") or "?", model=stats.get("model") or "?")]
    if stats.get("route_reason"):
        lines.append(tr("Why this tier: {why}").format(why=stats["route_reason"]))
    if stats.get("fallback"):
        lines.append(tr("Stand-in: {why}").format(why=stats["fallback"]))
    return "\n".join(lines)


def notices_html(stats: dict) -> str:
    """Low-confidence warning (with the weakest sentences) and the high-risk caution line."""
    out = []
    conf = stats.get("confidence") or {}
    if conf.get("low"):
        mark = COLOURS["mark"]
        spans = "".join(f"<li><span style='background:{mark}'>{html.escape(s.get('text', ''))}</span></li>"
                        for s in conf.get("weak_spans", [])[:3])
        out.append(f"<div style='color:{COLOURS['warn']}'><b>⚠ " + tr("可能不准确 / may be inaccurate") +
                   f"</b> ({conf.get('geo_mean_prob', 0):.2f})" + (f"<ul>{spans}</ul>" if spans else "") + "</div>")
    caution = (stats.get("risk") or {}).get("caution")
    if caution:
        out.append(f"<div style='color:{COLOURS['danger']}'>⚕ {html.escape(caution)}</div>")
    for hit in stats.get("memories_used") or []:
        src = hit.get("source")
        where = (tr("conversation {cid}").format(cid=src.get("conversation_id")) if isinstance(src, dict)
                 else tr("saved memory"))
        text = html.escape(hit.get("text", "")[:120])
        out.append(f"<div style='color:{COLOURS['meta']}'>🔖 {html.escape(where)}: {text}</div>")
    return "".join(out)


def thinking_html(reasoning: str, index: int, open_: bool, seconds: float | None, streaming: bool) -> str:
    """A reasoning model's thinking while the answer has no header yet: one line, "Thinking… 12 s"
    while it streams, that opens on click (`think:<index>` link) to show the text, muted."""
    label = _thought_label(seconds, streaming)
    arrow = "▾" if open_ else "▸"
    head = (f"<div style='color:{COLOURS['meta']};font-size:small'><a href='think:{index}' "
            f"style='color:{COLOURS['meta']};text-decoration:none'>{arrow} {html.escape(label)}</a></div>")
    return head + (thinking_body(reasoning) if open_ else "")


def thought_chip(index: int, open_: bool, seconds: float | None) -> str:
    """A finished answer's thinking as a chip in its header ("▸ Thought for 12 s"): a click
    (`think:<index>` link) opens the text under the header."""
    arrow = "▾" if open_ else "▸"
    return (f"&nbsp;<a href='think:{index}' style='text-decoration:none'><span style='background:{COLOURS['badge']};"
            f"color:{COLOURS['meta']};font-size:small'>&nbsp;{arrow} {html.escape(_thought_label(seconds, False))}"
            f"&nbsp;</span></a>")


def thinking_body(reasoning: str) -> str:
    body = html.escape(reasoning).replace("\n", "<br>") or "…"
    return (f"<div style='color:{COLOURS['meta']};font-size:small;margin-left:12px;"
            f"border-left:2px solid {COLOURS['meta']};padding-left:6px'>{body}</div>")


def _thought_label(seconds: float | None, streaming: bool) -> str:
    if seconds is None:
        return tr("Thinking…") if streaming else tr("Thoughts")
    shown = f"{seconds:.0f}" if seconds >= 10 or streaming else f"{seconds:.1f}"
    return (tr("Thinking… {s} s") if streaming else tr("Thought for {s} s")).format(s=shown)


TOOL_STATUS = {"ok": "✓", "error": "⚠", "denied": "⛔", "failed": "✗", "timeout": "⏱", "cancelled": "■"}
MAX_SHOWN_RESULT = 4000  # characters of a result an opened block shows (the model may have read up to 16 000)


def tool_html(index: int, n: int, block: ToolBlock) -> str:
    """One tool call in an answer: a line ("▸ Tool: add · bench ✓ done 0.2 s") that opens on click
    (`tool:<index>.<n>` link) to show the exact arguments and what came back, as plain text."""
    status = block.status
    words = {None: tr("waiting…"), "ok": tr("done"), "error": tr("the tool reported an error"),
             "denied": tr("denied"), "failed": tr("failed"), "timeout": tr("timed out"), "cancelled": tr("stopped")}
    source = tr("built-in") if block.server == "builtin" else block.server or ""
    seconds = block.seconds
    took = "" if seconds is None else f" {seconds:.1f} s" if seconds >= 0.1 else f" {seconds * 1000:.0f} ms"
    after = f" · {source}" if source else ""
    if status != "stored":  # a call read back from the chat's history: how it went is in its result
        after += f"  {TOOL_STATUS.get(status, '…')} {words.get(status, status)}{took}"
    arrow = "▾" if block.open else "▸"
    head = (f"<div style='color:{COLOURS['meta']};font-size:small'><a href='tool:{index}.{n}' "
            f"style='color:{COLOURS['meta']};text-decoration:none'>{arrow} {html.escape(tr('Tool'))}: "
            f"<b>{html.escape(block.tool)}</b>{html.escape(after)}</a></div>")
    if not block.open:
        return head
    result = block.text or ""
    if len(result) > MAX_SHOWN_RESULT:
        more = tr("[… {n} characters more]").format(n=len(result) - MAX_SHOWN_RESULT)
        result = result[:MAX_SHOWN_RESULT] + "\n" + more
    box = (f"margin:2px 0 2px 12px;padding:4px;border-left:2px solid {COLOURS['meta']};"
           f"background:{COLOURS['code']};font-family:monospace;font-size:small;white-space:pre-wrap")
    label = f"color:{COLOURS['meta']};font-size:small;margin-left:12px"
    return (head + f"<div style='{label}'>{html.escape(tr('Arguments'))}</div>"
            f"<pre style='{box}'>{html.escape(block.arguments or '{}')}</pre>"
            f"<div style='{label}'>{html.escape(tr('Result'))}</div>"
            f"<pre style='{box}'>{html.escape(result)}</pre>")


def steps_html(index: int, steps: list) -> str:
    """An answer's earlier rounds: the text it wrote before a call, and each call's block."""
    out = []
    for n, (kind, value) in enumerate(steps):
        out.append(markdown_html(value) if kind == "text" else tool_html(index, n, value))
    return "".join(out)


def branch_html(index: int, branch: tuple[int, int]) -> str:
    """‹ 2 / 3 › under a message with siblings: the other answers to it, or its other edits
    (`branch:<index>:±1` links; an end's arrow is plain text)."""
    which, count = branch
    style = f"color:{COLOURS['meta']};text-decoration:none"
    prev = f"<a href='branch:{index}:-1' style='{style}'>‹</a>" if which > 1 else "‹"
    nxt = f"<a href='branch:{index}:1' style='{style}'>›</a>" if which < count else "›"
    return (f"<div style='font-size:small;color:{COLOURS['meta']}'>{prev} {which} / {count} {nxt}"
            f" <span style='font-size:small'>{html.escape(tr('branches'))}</span></div>")


def images_html(images: list[tuple[str, int, int]]) -> str:
    """A message's images as thumbnails, each a link that opens it whole: (digest, width, height)
    as drawn; the view gives each `thumb:<digest>` its picture (app/chat_view.py)."""
    return "".join(f"<a href='image:{d}'><img src='thumb:{d}' width='{w}' height='{h}'></a>&nbsp;"
                   for d, w, h in images) + ("<br>" if images else "")


def message_html(role: str, text: str, stats: dict | None = None, streaming: bool = False, *,
                 thinking: str = "", index: int | None = None, branch: tuple[int, int] | None = None,
                 images: str = "", chip: str = "") -> str:
    """One bubble; `thinking`: what goes above the answer's text (the thinking block, earlier
    tool rounds); `index`: the message's place in the view, for its links; `branch`: (which, of
    how many) when the message has siblings; `images`: a user message's thumbnails (images_html);
    `chip`: the header's thought chip (thought_chip)."""
    stats = stats or {}
    actions = branch_html(index, branch) if branch and index is not None and not streaming else ""
    if role == "user":  # a bubble at the right, as wide as its text (painted rounded by the view)
        body = images + html.escape(text).replace("\n", "<br>")
        # Qt's tables have no max-width: a short bubble takes its text's width, a long one 80 %.
        wide = " width='80%'" if _columns(text) > 72 or images else ""
        return (f"<table align='right'{wide} cellspacing='0' cellpadding='{USER_PAD}'><tr><td>{body}{actions}</td>"
                f"</tr></table>{GAP}")
    body = markdown_html(text) if text else ("" if thinking else "<i>…</i>")  # all thinking: it is the content
    body = answer_header(stats, index, chip) + thinking + body
    cursor = " ▍" if streaming else ""
    meta = meta_line(stats, stats.get("level", ""), stats.get("model", ""))
    tail = "" if streaming else citations_html(stats, COLOURS["meta"])  # [n] → the documents cited
    tip = meta_tip(stats)
    # Qt's HTML reader takes an attribute's value as written (no entities): only its quote must go.
    title = ' title="{}"'.format(tip.replace('"', "'")) if tip else ""
    tail += (f"<div style='color:{COLOURS['meta']};font-size:small'{title}>{html.escape(meta)}</div>" if meta else "")
    tail += notices_html(stats) + actions
    # Full width, no box: an answer reads as the page does.
    return f"<table width='100%' cellspacing='0' cellpadding='2'><tr><td>{body}{cursor}{tail}</td></tr></table>{GAP}"


def _columns(text: str) -> int:
    """The widest line of `text` in Latin character widths (a CJK character is two)."""
    return max((sum(2 if ord(c) >= 0x2E80 else 1 for c in line) for line in text.split("\n")), default=0)


# The room under each message where its actions appear on hover (app/message_actions.py).
GAP = "<p style='margin:0;font-size:22px'>&nbsp;</p>"


def answer_header(stats: dict, index: int | None, chip: str = "") -> str:
    """Above an answer: its model, a tier badge, an info icon (`info:` link) that shows why this
    tier answered, and `chip` (how long it thought: thought_chip). Nothing while no model is known
    (an answer being written)."""
    if not stats.get("model"):
        return ""
    badge = (f"&nbsp;<span style='background:{COLOURS['badge']};color:{COLOURS['meta']};font-size:small'>"
             f"&nbsp;{html.escape(stats.get('level') or '')}&nbsp;</span>") if stats.get("level") else ""
    why = tr("Why this model answered").replace('"', "'")
    info = ("" if index is None else
            f"&nbsp;<a href='info:{index}' title=\"{why}\"><img src='icon:info' width='14' height='14'></a>")
    return (f"<p style='margin:0 0 4px 0'><span style='font-weight:600'>{html.escape(model_label(stats['model']))}"
            f"</span>{badge}{info}{chip}</p>")
