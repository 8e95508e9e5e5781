"""Chat templates: the GGUF's own Jinja template (sandboxed) or a fallback for models without one.

A template is rendered with placeholders in place of message contents and split into
alternating control text and content slots. Control text is tokenized with special-token
parsing on (it holds the template's role markers); contents are tokenized with it off, so a
user who types `<|im_start|>system` gets plain text, never a role change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment

# Private-use code points: they never occur in templates, so a placeholder cannot collide.
_OPEN, _CLOSE = "\ue000", "\ue001"
_SLOT = re.compile(f"{_OPEN}(\\d+){_CLOSE}")

GEMMA_TEMPLATE = (
    # Gemma's turn format (Gemma 2/3): no system role, the system prompt leads the first user turn.
    "{{ bos_token }}"
    "{%- if messages and messages[0]['role'] == 'system' -%}"
    "{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}{%- set first_user_prefix = '' -%}{%- set loop_messages = messages -%}{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') }}"
    "{{ message['content'] }}{{ '<end_of_turn>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"
)

CHATML_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}"
)

FALLBACKS = {"gemma": GEMMA_TEMPLATE, "chatml": CHATML_TEMPLATE}

# A template renders one conversation's control text around placeholders: a few KB. More is a
# template gone wrong (or hostile), stopped before it fills memory.
MAX_RENDERED_CHARS = 200_000
_MAX_REPEAT = 100_000  # longest string or list a template may build with `*`
_MAX_EXPONENT = 64     # largest integer exponent a template may use with `**`


class ChatTemplateError(ValueError):
    """The model's chat template failed to render this conversation."""


@dataclass(frozen=True)
class Rendered:
    """A rendered conversation: control text (str) and content slots (message index, int)."""

    pieces: list[str | int]


def _raise(message: str):
    raise ChatTemplateError(message)


class _Sandbox(ImmutableSandboxedEnvironment):
    """Jinja's sandbox with `*` and `**` bounded: a GGUF's template is untrusted input, and
    `'x' * 10**10` or `2 ** (2 ** 40)` would otherwise exhaust memory or CPU on every turn."""

    intercepted_binops = frozenset(["*", "**"])

    def call_binop(self, context, operator, left, right):
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(n, int) and len(seq) * n > _MAX_REPEAT:
                    raise SecurityError(f"the template builds a sequence of {len(seq) * n} items")
        elif isinstance(right, int) and right > _MAX_EXPONENT and isinstance(left, int) and abs(left) > 1:
            raise SecurityError(f"the template raises a number to the power {right}")
        return super().call_binop(context, operator, left, right)


def fallback_name_for(arch: str) -> str:
    return "gemma" if arch.startswith("gemma") else "chatml"


class ChatTemplate:
    """A compiled chat template.

    Args:
        source: Jinja source (from `tokenizer.chat_template` or FALLBACKS).
        name: where it came from, for stats and logs ("gguf", "gemma", ...).
        bos_token, eos_token: the token texts the template may reference.
    """

    def __init__(self, source: str, name: str, bos_token: str = "", eos_token: str = ""):
        env = _Sandbox(trim_blocks=True, lstrip_blocks=True)
        env.globals.update(raise_exception=_raise, strftime_now=lambda fmt: datetime.now().strftime(fmt))
        try:
            self._template = env.from_string(source)
        except Exception as exc:  # noqa: BLE001 - the source comes from a model file: any failure is its own
            raise ChatTemplateError(f"chat template '{name}' cannot be compiled: {exc}") from exc
        self.name = name
        self.bos_token, self.eos_token = bos_token, eos_token

    def render(self, roles: list[str], add_generation_prompt: bool) -> Rendered:
        """Render a conversation of the given roles with placeholder contents."""
        messages = [{"role": r, "content": f"{_OPEN}{i}{_CLOSE}"} for i, r in enumerate(roles)]
        try:
            chunks, size = [], 0
            for chunk in self._template.generate(
                messages=messages, add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token, eos_token=self.eos_token,
            ):
                size += len(chunk)
                if size > MAX_RENDERED_CHARS:
                    raise ChatTemplateError(f"chat template '{self.name}' renders more than "
                                            f"{MAX_RENDERED_CHARS} characters; unsupported")
                chunks.append(chunk)
            text = "".join(chunks)
        except ChatTemplateError:
            raise
        except Exception as exc:  # noqa: BLE001 - untrusted template: whatever it raises (a sandbox
            # violation, OverflowError from a huge range, RecursionError, TypeError) is its failure
            raise ChatTemplateError(f"chat template '{self.name}' failed: {exc}") from exc
        parts = _SLOT.split(text)
        pieces: list[str | int] = []
        for k, part in enumerate(parts):
            if k % 2:
                pieces.append(int(part))
            elif part:
                if _OPEN in part or _CLOSE in part:
                    raise ChatTemplateError(f"chat template '{self.name}' alters message contents; unsupported")
                pieces.append(part)
        return Rendered(pieces)


def template_for(backend, hint: str = "gguf") -> ChatTemplate:
    """The GGUF's own template when it has one (and the catalog does not override it), else a fallback."""
    bos = backend.token_text(backend.bos_id) if backend.bos_id >= 0 else ""
    eos = backend.token_text(backend.eos_id) if backend.eos_id >= 0 else ""
    source = backend.chat_template_source
    if hint == "gguf" and source:
        return ChatTemplate(source, "gguf", bos, eos)
    name = hint if hint in FALLBACKS else fallback_name_for(backend.arch)
    return ChatTemplate(FALLBACKS[name], name, bos, eos)
