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

from jinja2 import TemplateError as JinjaTemplateError
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


class ChatTemplateError(ValueError):
    """The model's chat template failed to render this conversation."""


@dataclass(frozen=True)
class Rendered:
    """A rendered conversation: control text (str) and content slots (message index, int)."""

    pieces: list[str | int]


def _raise(message: str):
    raise ChatTemplateError(message)


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
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals.update(raise_exception=_raise, strftime_now=lambda fmt: datetime.now().strftime(fmt))
        self._template = env.from_string(source)
        self.name = name
        self.bos_token, self.eos_token = bos_token, eos_token

    def render(self, roles: list[str], add_generation_prompt: bool) -> Rendered:
        """Render a conversation of the given roles with placeholder contents."""
        messages = [{"role": r, "content": f"{_OPEN}{i}{_CLOSE}"} for i, r in enumerate(roles)]
        try:
            text = self._template.render(
                messages=messages, add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token, eos_token=self.eos_token,
            )
        except JinjaTemplateError as exc:
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
