"""OpenAI request bodies checked into what the engine takes; anything malformed is a RequestError
(HTTP 400 with OpenAI's error shape) naming the parameter, never a 500.

Fields a local engine cannot honour are refused when they would change the answer (n > 1, a
schema feature the grammar cannot enforce, the deprecated `functions`) and ignored when they are
hints (frequency_penalty, user-agent extras). Tools: engine/server/tools.py.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from dataclasses import dataclass, replace
from typing import Any, Callable

from engine.api import (MAX_IMAGE_BYTES, MAX_IMAGES, MAX_MESSAGE_CHARS, GenerateParams, SamplingParams,
                        SchemaUnsupported, response_grammar)
from engine.server.fair_queue import Client
from engine.server.history import ApiImage, History, calls_key
from engine.server.tools import MAX_TOOL_TOKENS, message_calls, tool_use

LEVELS = ("auto", "L1", "L2", "L3")
MAX_TOKENS = 131_072  # asked beyond this is a mistake; the engine also caps it at what the context leaves
MAX_STOPS = 4
MAX_EMBED_INPUTS = 2048
SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")  # a JSON escape of half a surrogate pair
# `reasoning_effort` as a thinking budget in tokens (None: no budget beyond max_tokens' share);
# "none" and "minimal" turn thinking off (Qwen3 by its template's switch, other models by closing
# the block at once).
REASONING_EFFORT = {"none": 0, "minimal": 0, "low": 512, "medium": 2048, "high": None}


class RequestError(Exception):
    """A request the client must fix: HTTP `status`, OpenAI `type`/`param`/`code`."""

    def __init__(self, message: str, param: str | None = None, status: int = 400,
                 code: str | None = None, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.message, self.param, self.status, self.code, self.kind = message, param, status, code, kind


def parse_json(body: bytes) -> dict:
    """The body's JSON object, every lone surrogate in it (a `\\ud800` escape without its pair)
    replaced by "?", as the engine cleans a message's text: an embeddings input or a tool call's
    id holding one reached the tokenizer or SQLite, which cannot encode it (500)."""
    try:
        data = json.loads(body.decode("utf-8"))
        if SURROGATE_ESCAPE.search(body):  # else the JSON holds none (raw surrogate bytes are not UTF-8)
            data = _without_lone_surrogates(data)
    except UnicodeDecodeError:
        raise RequestError("the body is not valid UTF-8") from None
    except ValueError as exc:
        raise RequestError(f"the body is not valid JSON ({exc})") from None
    except RecursionError:  # json's C scanner recurses per nesting level
        raise RequestError("the body's JSON is nested too deeply") from None
    if not isinstance(data, dict):
        raise RequestError("the body must be a JSON object")
    return data


def _without_lone_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, list):
        return [_without_lone_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {_without_lone_surrogates(k): _without_lone_surrogates(v) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class Turn:
    """One chat or completion request, ready for the engine thread."""

    model: str  # as asked (reported back)
    route: str  # auto | L1 | L2 | L3
    history: History
    params: GenerateParams
    stream: bool = False
    include_usage: bool = False
    logprobs: bool = False
    docs: bool | str | None = None  # x_docs
    memory: bool = False  # x_memory: recall the user's memories into the turn and keep it in them
    client: Client = Client("")  # fairness key: the peer (engine/server/peers.py), then the `user` field
    keep: bool = True  # index the answered history (chat); False: a one-off (/v1/completions)
    domain: str = "api"  # trust domain (`api_domain`): whose cached KV prefixes may serve the turn


def _tag(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def key_tag(api_key: str) -> str:
    """The API key's part of a client's trust domain (a hash: the key itself is kept nowhere else)."""
    return _tag(api_key)


def api_domain(key: str, user: str) -> str:
    """The trust domain of an API client: the key it sent (`key_tag`) and the `user` it names.
    Another conversation's KV state serves a turn only within its domain, so neither the window's
    chats nor another client's answer a client's guess with cached tokens. `user` separates the
    clients that share a key by their own account: it is a label, not a password."""
    return f"api:{key}:{_tag(user)}"


def _get(body: dict, name: str, kinds: tuple, default: Any = None, what: str = "") -> Any:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
        raise RequestError(f"{name} must be {what or ' or '.join(k.__name__ for k in kinds)}", name)
    return value


def _number(body: dict, name: str, low: float, high: float) -> float | None:
    value = _get(body, name, (int, float), what="a number")
    if value is not None and not low <= value <= high:
        raise RequestError(f"{name} must be between {low:g} and {high:g}", name)
    return value


def generate_params(body: dict, repetition_guard: bool, count_tokens: Callable[[str], int | None] | None = None,
                    max_tool_tokens: int | None = MAX_TOOL_TOKENS) -> GenerateParams:
    sampling = SamplingParams()
    temperature = _number(body, "temperature", 0, 2)
    top_p = _number(body, "top_p", 0, 1)
    seed = _get(body, "seed", (int,), what="an integer")
    overrides = {k: v for k, v in (("temperature", temperature), ("top_p", top_p)) if v is not None}
    if seed is not None:
        overrides["seed"] = seed % 2**32  # llama.cpp's seeds are 32-bit; OpenAI's may be negative
    if overrides:
        sampling = replace(sampling, **overrides)
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    name = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)
                                   or not 1 <= max_tokens <= MAX_TOKENS):
        raise RequestError(f"{name} must be an integer from 1 to {MAX_TOKENS}", name)
    stop = body.get("stop")
    if stop is None:
        stops: tuple[str, ...] = ()
    elif isinstance(stop, str):
        stops = (stop,) if stop else ()
    elif isinstance(stop, list) and len(stop) <= MAX_STOPS and all(isinstance(s, str) and s for s in stop):
        stops = tuple(stop)
    else:
        raise RequestError(f"stop must be a string or a list of at most {MAX_STOPS} non-empty strings", "stop")
    n = body.get("n")
    if n is not None and n != 1:
        raise RequestError("n must be 1: one answer per request", "n")
    think, budget = thinking(body)
    fmt = response_format(body)
    tools = tool_use(body, count_tokens, max_tool_tokens)
    if tools is not None and fmt is not None:
        raise RequestError("response_format and tools cannot be combined: a tool call is JSON of its own",
                           "response_format")
    return GenerateParams(sampling=sampling, max_tokens=max_tokens or GenerateParams().max_tokens,
                          stop=stops, repetition_guard=repetition_guard, think=think and fmt is None,
                          reasoning_budget=budget, response_format=fmt, tools=tools)


def response_format(body: dict) -> dict | None:
    """`response_format` checked: None for text, else what the engine constrains sampling to; a
    schema feature the grammar cannot enforce is refused by name."""
    fmt = body.get("response_format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or fmt.get("type") not in ("text", "json_object", "json_schema"):
        raise RequestError("response_format must be an object of type text, json_object or json_schema",
                           "response_format")
    if fmt["type"] == "text":
        return None
    try:
        response_grammar(fmt)
    except SchemaUnsupported as exc:
        raise RequestError(str(exc), exc.where) from None
    return fmt


def thinking(body: dict) -> tuple[bool, int | None]:
    """Thinking on or off and its budget, asked the ways clients send it: vLLM's and llama-server's
    `chat_template_kwargs.enable_thinking`, and OpenAI's `reasoning_effort`."""
    kwargs = _get(body, "chat_template_kwargs", (dict,), {}, "an object")
    enable = _get(kwargs, "enable_thinking", (bool,), None, "true or false")
    effort = body.get("reasoning_effort")
    if effort is not None and (not isinstance(effort, str) or effort not in REASONING_EFFORT):
        raise RequestError(f"reasoning_effort must be one of {', '.join(REASONING_EFFORT)}", "reasoning_effort")
    budget = REASONING_EFFORT.get(effort) if effort is not None else None
    if enable is False or budget == 0:
        return False, None
    return True, budget


def _content(message: dict, i: int) -> tuple[str, tuple[tuple[ApiImage, int], ...]]:
    """A message's text, and its images with the offset in that text each stands at: a string, or
    OpenAI's content parts (text, and image_url in user messages) joined by newlines."""
    content = message.get("content")
    param = f"messages[{i}].content"
    images: list[tuple[ApiImage, int]] = []
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        parts: list[str] = []
        for k, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text" and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif kind == "image_url" and message.get("role") == "user":
                at = len("\n".join(parts)) + (1 if parts else 0)
                images.append((data_url_image(part.get("image_url"), f"{param}[{k}].image_url"), at))
            elif kind == "image_url":
                raise RequestError("images go in user messages", param)
            else:
                raise RequestError("content parts must be text, or image_url in a user message", param)
        text = "\n".join(parts)
    elif content is None and message.get("role") == "assistant" and message.get("tool_calls"):
        text = ""  # an answer that is only calls
    else:
        raise RequestError("content must be a string or a list of content parts", param)
    if len(text) > MAX_MESSAGE_CHARS:
        raise RequestError(f"a message may hold at most {MAX_MESSAGE_CHARS} characters", param)
    if len(images) > MAX_IMAGES:
        raise RequestError(f"at most {MAX_IMAGES} images per message", param)
    return text, tuple(images)


def data_url_image(image_url: object, param: str) -> ApiImage:
    """An image_url part's image: a `data:` URL (base64) only. This server never fetches a URL: it
    is offline, and a fetch on a client's say-so would reach the user's network (SSRF)."""
    url = image_url.get("url") if isinstance(image_url, dict) else image_url
    if not isinstance(url, str):
        raise RequestError("image_url.url must be a string", param)
    if not url.startswith("data:"):
        raise RequestError("image_url must be a data: URL (base64); this server is offline and fetches no URL",
                           param)
    head, _, payload = url.partition(",")
    if not head.endswith(";base64") or not head[5:].startswith("image/"):
        raise RequestError("image_url must be data:image/<type>;base64,<data>", param)
    if len(payload) > MAX_IMAGE_BYTES * 4 // 3 + 4:
        raise RequestError(f"an image may be at most {MAX_IMAGE_BYTES >> 20} MB", param)
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise RequestError("image_url's data is not valid base64", param) from exc
    if not data:
        raise RequestError("image_url's data is empty", param)
    return ApiImage(data, hashlib.sha256(data).hexdigest())


def parse_history(body: dict, max_messages: int) -> History:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list", "messages")
    if len(messages) > max_messages:
        raise RequestError(f"at most {max_messages} messages per request (setting server.max_messages)", "messages")
    pairs: list[tuple[str, str]] = []
    extras: list[str] = []
    media: list[tuple[tuple[ApiImage, int], ...]] = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise RequestError("each message must be an object", f"messages[{i}]")
        role = m.get("role")
        if role == "developer":
            role = "system"
        if role == "function":
            raise RequestError("function messages are deprecated: send tool messages", f"messages[{i}].role")
        if role not in ("system", "user", "assistant", "tool"):
            raise RequestError("role must be system, developer, user, assistant or tool", f"messages[{i}].role")
        if role == "system" and any(r != "system" for r, _ in pairs):
            raise RequestError("system messages must come before the conversation", f"messages[{i}].role")
        extra = ""
        if role == "assistant" and m.get("tool_calls"):
            extra = calls_key(message_calls(m["tool_calls"], f"messages[{i}].tool_calls"))
        elif role == "tool":
            extra = m.get("tool_call_id")
            if not isinstance(extra, str) or not extra:
                raise RequestError("a tool message needs its call's tool_call_id", f"messages[{i}].tool_call_id")
        text, images = _content(m, i)
        pairs.append((role, text))
        extras.append(extra)
        media.append(images)
    history = History(tuple(pairs), _new_from(pairs, extras), tuple(extras) if any(extras) else (),
                      tuple(media) if any(media) else ())
    if not history.tool_turn and not history.text.strip() and not history.new_images:
        raise RequestError("the user's message is empty", "messages")
    return history


def _new_from(pairs: list[tuple[str, str]], extras: list[str]) -> int:
    """Where the new turn starts: the trailing user messages, or the tool results that answer the
    calls of the answer before them."""
    last = pairs[-1][0]
    if last not in ("user", "tool"):
        raise RequestError("the last message must be the user's, or a tool's result", "messages")
    new_from = len(pairs)
    while new_from > 0 and pairs[new_from - 1][0] == last:
        new_from -= 1
    if last == "tool":
        calls = extras[new_from - 1] if new_from > 0 and pairs[new_from - 1][0] == "assistant" else ""
        if not calls:
            raise RequestError("tool results must follow the answer whose tool_calls they answer", "messages")
        known = {c[0] for c in json.loads(calls)}
        for i in range(new_from, len(pairs)):
            if extras[i] not in known:
                raise RequestError(f"tool_call_id {extras[i]!r} names no call of the answer before it",
                                   f"messages[{i}].tool_call_id")
    return new_from


def _refuse_unsupported(body: dict) -> None:
    top = body.get("top_logprobs")
    if top not in (None, 0):
        raise RequestError("top_logprobs is not supported (logprobs of the chosen tokens are)", "top_logprobs")


def _route(model: str, tiers: dict[str, str]) -> str:
    if model in LEVELS:
        return model
    for level, tier_model in tiers.items():
        if tier_model == model:
            return level
    return ""


def parse_turn(body: dict, *, tiers: dict[str, str], installed: set[str], max_messages: int,
               repetition_guard: bool, client: str, completion: bool = False, key: str = "",
               allow_memory: bool = False, allow_docs: bool = False,
               count_tokens: Callable[[str], int | None] | None = None,
               max_tool_tokens: int | None = MAX_TOOL_TOKENS) -> Turn:
    """A chat request (`completion`: a legacy completions request, its prompt as one user message).
    `key`: the key's `key_tag` (the client's trust domain); `allow_memory`: the user lets API
    clients use the memory (setting server.allow_memory), else x_memory is refused; `allow_docs`
    likewise for the user's documents (server.allow_docs) and x_docs; `count_tokens` and
    `max_tool_tokens`: the tools' prompt is counted and bounded (setting server.max_tool_tokens).

    Raises:
        RequestError: anything the client must change.
    """
    _refuse_unsupported(body)
    model = _get(body, "model", (str,), "auto", "a string")
    route = _route(model, tiers)
    if not route:
        hint = " (installed, but on no tier: pick it for L1 or L2 in Settings)" if model in installed else ""
        raise RequestError(f"the model {model!r} does not exist here{hint}; use auto, L1, L2 or L3",
                           "model", status=404, code="model_not_found")
    if completion:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1:
            prompt = prompt[0]
        if not isinstance(prompt, str) or not prompt.strip():
            raise RequestError("prompt must be a non-empty string", "prompt")
        if len(prompt) > MAX_MESSAGE_CHARS:
            raise RequestError(f"prompt may hold at most {MAX_MESSAGE_CHARS} characters", "prompt")
        for name in ("echo", "suffix", "tools"):
            if body.get(name):
                raise RequestError(f"{name} is not supported", name)
        if body.get("best_of") not in (None, 1):
            raise RequestError("best_of must be 1", "best_of")
        history = History((("user", prompt),), 0)
    else:
        history = parse_history(body, max_messages)
    stream = _get(body, "stream", (bool,), False)
    options = _get(body, "stream_options", (dict,), {}, "an object")
    include_usage = _get(options, "include_usage", (bool,), False)
    if options and not stream:
        raise RequestError("stream_options needs stream: true", "stream_options")
    logprobs = body.get("logprobs")
    if completion:  # legacy: an integer (top n); only 0/None/1 are honest here
        logprobs = logprobs not in (None, 0, False)
    else:
        logprobs = _get(body, "logprobs", (bool,), False)
    docs = body.get("x_docs")
    if docs is not None and not isinstance(docs, bool) and not (isinstance(docs, str) and docs.strip()):
        raise RequestError("x_docs must be true, false or a collection name", "x_docs")
    if docs not in (None, False) and not allow_docs:
        # The documents' text and names are the user's: a client asking is not the user agreeing.
        raise RequestError("this server does not let API clients read the user's documents; the user can allow "
                           "it in Settings → Local API server (setting server.allow_docs)", "x_docs",
                           status=403, code="docs_not_allowed", kind="permission_error")
    memory = _get(body, "x_memory", (bool,), False)
    if memory and not allow_memory:
        # The user's memory is theirs to share: a client asking is not the user agreeing.
        raise RequestError("this server does not let API clients use the user's memory; the user can allow "
                           "it in Settings → Local API server (setting server.allow_memory)", "x_memory",
                           status=403, code="memory_not_allowed", kind="permission_error")
    user = _get(body, "user", (str,), "")
    return Turn(model, route, history, generate_params(body, repetition_guard, count_tokens, max_tool_tokens), stream, include_usage,
                bool(logprobs), docs.strip() if isinstance(docs, str) else docs, memory,
                client=Client(client, user), keep=not completion, domain=api_domain(key, user))


def parse_embedding_input(body: dict) -> list[str]:
    value = body.get("input")
    if isinstance(value, str):
        texts = [value]
    elif isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        texts = value
    elif isinstance(value, list) and value and all(isinstance(v, (int, list)) for v in value):
        raise RequestError("token arrays are not supported: send the text", "input")
    else:
        raise RequestError("input must be a string or a non-empty list of strings", "input")
    if len(texts) > MAX_EMBED_INPUTS:
        raise RequestError(f"at most {MAX_EMBED_INPUTS} inputs per request", "input")
    if any(len(t) > MAX_MESSAGE_CHARS for t in texts):
        raise RequestError(f"an input may hold at most {MAX_MESSAGE_CHARS} characters", "input")
    fmt = body.get("encoding_format", "float")
    if fmt not in ("float", "base64"):
        raise RequestError("encoding_format must be float or base64", "encoding_format")
    return texts
