"""Recognise an explicit request to remember something ("remember that …", "记住…")."""

from __future__ import annotations

import re

# Anchored at the start of the message: "do you remember …?" or "我记得…" are not requests.
_EN = re.compile(
    r"""^\s*(?:(?:hey|ok(?:ay)?|so|and)[\s,]+)?
        (?:(?:please|pls|kindly)[\s,]+(?:do\s+)?remember\b(?:\s+that\b)?
         |(?:can|could|would)\s+you\s+(?:please\s+)?remember\b(?:\s+that\b)?
         |remember\s+that\b
         |remember\s*:
         |make\s+a\s+note\s+that\b
         |don'?t\s+forget\s+that\b)
        [\s,:]*(?P<fact>.*)$""",
    re.IGNORECASE | re.DOTALL | re.VERBOSE)
_ZH = re.compile(
    r"""^\s*(?:请你?|麻烦你?|你)?(?:帮我)?
        (?:记住|记一下|记下来|记下|记着)
        (?!了[吗吧没么？?]|没|吗)      # "记住了吗?" asks whether it was remembered
        [\s，,：:、]*(?:一下)?[\s，,：:]*(?P<fact>.*)$""",
    re.DOTALL | re.VERBOSE)
_TRAIL = " \t\r\n.。!！?？~～"
_MIN_FACT_CHARS = 2


def parse_remember(text: str) -> str | None:
    """The fact to store when `text` asks the assistant to remember it, else None.

    Recognised: "remember that …", "please remember …", "can you remember …", "remember: …",
    "make a note that …", "don't forget that …", "记住…", "请记住…", "帮我记一下…", "记下来：…".

    Example: parse_remember("Please remember that my cat is called Miso.") == "my cat is called Miso"
    """
    for pattern in (_EN, _ZH):
        m = pattern.match(text)
        if m:
            fact = m.group("fact").strip().rstrip(_TRAIL).strip()
            return fact if len(fact) >= _MIN_FACT_CHARS else None
    return None
