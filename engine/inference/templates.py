"""Chat templates: the GGUF's own Jinja template (sandboxed) or a fallback for models without one.

A template is rendered with placeholders in place of message contents and split into
alternating control text and content slots. Control text is tokenized with special-token
parsing on (it holds the template's role markers); contents are tokenized with it off, so a
user who types `<|im_start|>system` gets plain text, never a role change.

A reasoning model's earlier answer is passed as its template expects it (`reasoning_content`, or
the thinking between its tags in the content), with a placeholder for the thinking too: the
template's own rule then keeps or drops it (Qwen3 and R1 drop the thinking of earlier turns), and
the rendering says which by holding a `Thought` slot or not.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime

from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from engine.inference.reasoning import ReasoningFormat, detect

# Private-use code points: they never occur in templates, so a placeholder cannot collide.
_OPEN, _CLOSE = "\ue000", "\ue001"
# A message's content (`7`), its thinking (`7r`) or both as sampled, tags and all (`7w`).
_SLOT = re.compile(f"{_OPEN}(\\d+[rw]?){_CLOSE}")
HISTORY_RULES = ("template", "keep", "drop")  # what becomes of earlier answers' thinking

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
class Thought:
    """The slot of message `index`'s thinking (`whole`: its thinking and answer as sampled)."""

    index: int
    whole: bool = False


@dataclass(frozen=True)
class Rendered:
    """A rendered conversation: control text (str), content slots (message index, int) and the
    slots of earlier thinking the template kept (`Thought`)."""

    pieces: list[str | int | Thought]


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


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
    """`tojson` as transformers defines it for chat templates, which models are trained on: keys in
    their order, no HTML escaping (Jinja's own sorts keys and writes `<` as \u003c). Text that
    reaches control text this way is checked for special tokens by its caller (engine/chat/session.py)."""
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


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
        env.filters["tojson"] = _tojson
        try:
            self._template = env.from_string(source)
        except Exception as exc:  # noqa: BLE001 - the source comes from a model file: any failure is its own
            raise ChatTemplateError(f"chat template '{name}' cannot be compiled: {exc}") from exc
        self.name = name
        self.source = source
        self.bos_token, self.eos_token = bos_token, eos_token
        self.reasoning: ReasoningFormat | None = None  # set by template_for for a reasoning model
        self._lead: str | None = None  # answer_lead(), once computed

    def _message(self, i: int, role: str, thought: bool, history: str) -> dict:
        content = f"{_OPEN}{i}{_CLOSE}"
        fmt = self.reasoning
        if not thought or fmt is None or history == "drop":
            return {"role": role, "content": content}
        if history == "keep":  # one slot: no tags for the template to strip
            return {"role": role, "content": f"{_OPEN}{i}w{_CLOSE}"}
        if fmt.reasoning_content:
            return {"role": role, "content": content, "reasoning_content": f"{_OPEN}{i}r{_CLOSE}"}
        return {"role": role, "content": f"{fmt.open}\n{_OPEN}{i}r{_CLOSE}\n{fmt.close}\n\n{content}"}

    def render(self, roles: list[str], add_generation_prompt: bool, *, thoughts: list[bool] | None = None,
               history: str = "template", extras: list[dict | None] | None = None, **options) -> Rendered:
        """Render a conversation of the given roles with placeholder contents.

        Args:
            thoughts: per message, whether it carries a reasoning model's thinking.
            history: "template" (its rule for earlier thinking), "keep" or "drop" it.
            extras: per message, fields beside role and content (an answer's `tool_calls`, a tool
                result's `tool_call_id`).
            options: template variables such as Qwen3's `enable_thinking` or `tools` (None ones are
                left out).
        """
        thoughts = thoughts or [False] * len(roles)
        messages = [self._message(i, r, t, history) for i, (r, t) in enumerate(zip(roles, thoughts))]
        for message, extra in zip(messages, extras or ()):
            if extra:
                message.update(extra)
        extra = {k: v for k, v in options.items() if v is not None}
        text = self._text(messages, add_generation_prompt, extra)
        if add_generation_prompt:
            text += self.answer_lead()
        parts = _SLOT.split(text)
        pieces: list[str | int | Thought] = []
        for k, part in enumerate(parts):
            if k % 2:
                index = int(part.rstrip("rw"))
                pieces.append(Thought(index, part.endswith("w")) if part[-1] in "rw" else index)
            elif part:
                if _OPEN in part or _CLOSE in part:
                    raise ChatTemplateError(f"chat template '{self.name}' alters message contents; unsupported")
                pieces.append(part)
        return Rendered(pieces)

    def answer_lead(self) -> str:
        """Whitespace the template writes between its generation prompt and an earlier answer (GLM-4:
        `<|assistant|>` to prompt, `<|assistant|>` and a newline before an answer). render() ends the
        prompt with it, as llama.cpp's built-in chatglm4 format does: sampled instead, it would be in
        the answer's ids and twice in the next turn's history, which then no longer matches the KV
        cache or the template. Whitespace only: other text there (Qwen3's empty think block) is the
        model's to write."""
        if self._lead is None:
            self._lead = ""
            try:
                prompt = self._text([self._message(0, "user", False, "template")], True, {})
                turns = [self._message(i, r, False, "template") for i, r in enumerate(("user", "assistant", "user"))]
                history = self._text(turns, True, {})
            except ChatTemplateError:
                return self._lead  # a template that needs more than this probe: no lead
            head = history.split(f"{_OPEN}1{_CLOSE}")[0]
            if head.startswith(prompt) and head[len(prompt):].isspace():
                self._lead = head[len(prompt):]
        return self._lead

    def _text(self, messages: list[dict], add_generation_prompt: bool, extra: dict) -> str:
        try:
            chunks, size = [], 0
            for chunk in self._template.generate(
                messages=messages, add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token, eos_token=self.eos_token, **extra,
            ):
                size += len(chunk)
                if size > MAX_RENDERED_CHARS:
                    raise ChatTemplateError(f"chat template '{self.name}' renders more than "
                                            f"{MAX_RENDERED_CHARS} characters; unsupported")
                chunks.append(chunk)
            return "".join(chunks)
        except ChatTemplateError:
            raise
        except Exception as exc:  # noqa: BLE001 - untrusted template: whatever it raises (a sandbox
            # violation, OverflowError from a huge range, RecursionError, TypeError) is its failure
            raise ChatTemplateError(f"chat template '{self.name}' failed: {exc}") from exc


def template_for(backend, hint: str = "gguf", reasoning: bool | None = None) -> ChatTemplate:
    """The GGUF's own template when it has one (and the catalog does not override it), else a
    fallback; with the model's reasoning format when it thinks in tags (`reasoning`: the catalog's
    field, None to detect from the template and the vocabulary)."""
    bos = backend.token_text(backend.bos_id) if backend.bos_id >= 0 else ""
    eos = backend.token_text(backend.eos_id) if backend.eos_id >= 0 else ""
    source = backend.chat_template_source
    if hint == "gguf" and source:
        template = ChatTemplate(source, "gguf", bos, eos)
    else:
        name = hint if hint in FALLBACKS else fallback_name_for(backend.arch)
        template = ChatTemplate(FALLBACKS[name], name, bos, eos)
    template.reasoning = detect(template.source, lambda text: len(backend.tokenize_control(text)) == 1, reasoning)
    return template
