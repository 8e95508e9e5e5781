"""The engine's turn events (Chunk, ReasoningChunk … TurnDone) in OpenAI's response shapes: chat
completions and legacy completions, whole or as stream chunks, with `usage` and our `x_` extensions.
A reasoning model's thinking is `reasoning_content` (DeepSeek's API, vLLM and LM Studio name it so)."""

from __future__ import annotations

import time
import uuid
from pathlib import PurePath

from engine.api import Chunk, ReasoningChunk, TurnDone

# The engine's finish reasons in OpenAI's words (the engine's own is kept as x_finish_reason).
FINISH = {"stop": "stop", "stop_string": "stop", "repetition": "stop", "cancelled": "stop",
          "length": "length", "context_full": "length", "tool_calls": "tool_calls"}


def usage(dones: list[TurnDone]) -> dict:
    """Token counts of every answer the request took (a cascade's re-ask included);
    cached_tokens: prompt tokens that came from the KV cache instead of being evaluated;
    reasoning_tokens: of completion_tokens, a reasoning model's thinking;
    accepted_prediction_tokens / rejected_prediction_tokens: speculative decoding's drafted tokens
    the model kept / threw away (OpenAI's names, as LM Studio reports drafts; 0 without drafts).
    Rejected drafts are not in completion_tokens: they were verified, never part of the answer."""
    prompt = sum(d.stats.prompt_tokens for d in dones)
    completion = sum(d.stats.completion_tokens for d in dones)
    cached = sum(d.stats.prompt_tokens_cached for d in dones)
    reasoning = sum(d.stats.reasoning_tokens for d in dones)
    drafted = sum(d.stats.draft_tokens for d in dones)
    accepted = sum(d.stats.draft_accepted for d in dones)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
            "completion_tokens_details": {"reasoning_tokens": reasoning, "accepted_prediction_tokens": accepted,
                                          "rejected_prediction_tokens": drafted - accepted}}


def extensions(done: TurnDone | None, docs: bool) -> dict:
    """What the engine knows beyond OpenAI's fields: the tier that answered and why."""
    if done is None:
        return {}
    out = {"x_model": done.model, "x_level": done.level, "x_route_reason": done.route_reason,
           "x_finish_reason": done.stats.finish_reason,
           # The geometric mean of the answer's token probabilities (the app's low-confidence warning).
           "x_confidence": done.confidence}
    if docs:
        out["x_sources"] = [api_source(s) for s in done.sources]
        out["x_documents"] = done.stats.documents  # "ok", "off" or why no excerpt was used
    return out


def api_source(source: dict) -> dict:
    """A document source as an API client gets it: the file's name, never its path (where the
    user keeps files, their account name in it, is not the client's to know)."""
    return source | {"path": PurePath(source.get("path") or "").name}


class Shape:
    """One request's response builder. `chat`: chat.completion(.chunk); else text_completion."""

    def __init__(self, chat: bool, model: str, logprobs: bool, docs: bool):
        self.chat, self.model, self.want_logprobs, self.docs = chat, model, logprobs, docs
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())

    def _envelope(self, choice: dict, chunk: bool) -> dict:
        # `model` is the name asked for (auto, L2, …): the one that answered is x_model.
        kind = ("chat.completion.chunk" if chunk else "chat.completion") if self.chat else "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model,
                "choices": [choice] if choice else []}

    def _logprobs(self, chunks: list[Chunk]) -> dict | None:
        if not self.want_logprobs:
            return None
        # `token` is the text released with that token: empty while a multi-byte character or a
        # possible stop string is still pending.
        chunks = [c for c in chunks if c.token >= 0]
        if self.chat:
            return {"content": [{"token": c.text, "logprob": c.logprob, "bytes": list(c.text.encode("utf-8")),
                                 "top_logprobs": []} for c in chunks]}
        offsets, at = [], 0
        for c in chunks:
            offsets.append(at)
            at += len(c.text)
        return {"tokens": [c.text for c in chunks], "token_logprobs": [c.logprob for c in chunks],
                "top_logprobs": None, "text_offset": offsets}

    # ---- whole
    def whole(self, chunks: list[Chunk], dones: list[TurnDone]) -> dict:
        """The response of a finished request; `chunks`: the final answer's (not a superseded one's)."""
        final = dones[-1]
        finish = FINISH.get(final.stats.finish_reason, "stop")
        # The answer's own tokens: a stop string or a repetition cut drops sampled tokens after it.
        kept = min(len(chunks), len(final.token_ids), len(final.logprobs))
        chunks = [Chunk(c.text, t, lp) for c, t, lp in zip(chunks[:kept], final.token_ids, final.logprobs)]
        if self.chat:
            message = {"role": "assistant", "content": final.text if final.text or not final.tool_calls else None}
            if final.tool_calls:  # the client runs them and sends the results back as tool messages
                message["tool_calls"] = final.tool_calls
            if final.reasoning:  # DeepSeek's, vLLM's and LM Studio's field for the thinking
                message["reasoning_content"] = final.reasoning
            choice = {"index": 0, "message": message, "logprobs": self._logprobs(chunks), "finish_reason": finish}
        else:
            choice = {"index": 0, "text": final.text, "logprobs": self._logprobs(chunks), "finish_reason": finish}
        return self._envelope(choice, False) | {"usage": usage(dones)} | extensions(final, self.docs)

    # ---- streamed
    def first(self) -> dict | None:
        if not self.chat:
            return None
        return self._envelope({"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                               "finish_reason": None}, True)

    def delta(self, chunk: Chunk | ReasoningChunk) -> dict | None:
        if isinstance(chunk, ReasoningChunk):  # thinking: chat only (a completion has no such field)
            if not chunk.text or not self.chat:
                return None
            return self._envelope({"index": 0, "delta": {"reasoning_content": chunk.text}, "logprobs": None,
                                   "finish_reason": None}, True)
        if not chunk.text and not self.want_logprobs:
            return None
        logprobs = self._logprobs([chunk])
        if self.chat:
            choice = {"index": 0, "delta": {"content": chunk.text}, "logprobs": logprobs, "finish_reason": None}
        else:
            choice = {"index": 0, "text": chunk.text, "logprobs": logprobs, "finish_reason": None}
        return self._envelope(choice, True)

    def calls(self, done: TurnDone) -> dict | None:
        """The answer's tool calls as one delta, each whole (they are parsed once closed; a client
        that accumulates argument pieces reads them the same)."""
        if not self.chat or not done.tool_calls:
            return None
        calls = [{"index": k} | call for k, call in enumerate(done.tool_calls)]
        return self._envelope({"index": 0, "delta": {"tool_calls": calls}, "logprobs": None, "finish_reason": None},
                              True)

    def last(self, done: TurnDone) -> dict:
        finish = FINISH.get(done.stats.finish_reason, "stop")
        if self.chat:
            choice = {"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": "", "logprobs": None, "finish_reason": finish}
        return self._envelope(choice, True) | extensions(done, self.docs)

    def usage_chunk(self, dones: list[TurnDone]) -> dict:
        return self._envelope({}, True) | {"usage": usage(dones)}
