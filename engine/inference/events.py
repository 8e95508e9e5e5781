"""What generation streams and returns: `Chunk`s of the answer, `ReasoningChunk`s of a reasoning
model's thinking, then one `TurnResult` with its `GenerationStats`; and the `GenerateParams` asked for."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Protocol

from engine.inference.backend import SamplingParams
from engine.inference.tool_calls import ToolCall, ToolUse


class StopFlag(Protocol):
    """What stops a generation: a threading.Event, a job's own flag (engine/inference/runtime.py),
    or a summary's, which also yields to a waiting chat."""

    def is_set(self) -> bool: ...


@dataclass(frozen=True)
class GenerateParams:
    sampling: SamplingParams = SamplingParams()
    max_tokens: int = 512  # the whole output: a reasoning model's thinking and its answer
    stop: tuple[str, ...] = ()
    repetition_guard: bool = True  # end a looping answer (engine/inference/repetition.py)
    think: bool = True  # a reasoning model may think (False: its block closes at once)
    reasoning_budget: int | None = None  # thinking tokens before the engine closes the block
    # Earlier answers' thinking in the prompt: "template" (the model's own rule: Qwen3 and R1 drop
    # it), "keep" or "drop" (engine/inference/templates.py).
    reasoning_history: str = "template"
    # OpenAI's response_format: {"type": "json_object"} or {"type": "json_schema", "json_schema":
    # {"schema": ...}} constrains sampling to JSON (engine/inference/structured.py); None: text.
    response_format: dict | None = None
    # Tools the answer may call (engine/inference/tool_calls.py): calls come back in
    # TurnResult.tool_calls, apart from the text; None: no tools.
    tools: ToolUse | None = None
    # Speculative decoding: "auto" | "off" | "ngram" | "draft" (engine/inference/speculation.py);
    # None: the engine's setting (EngineConfig.speculative), filled in by the turn's Fit stage.
    speculative: str | None = None


@dataclass(frozen=True)
class Chunk:
    text: str  # may be "" while a multi-byte character or a possible stop string is pending
    token: int
    logprob: float  # natural log of the sampled token's probability, raw model distribution


@dataclass(frozen=True)
class ReasoningChunk:
    """Thinking text of a reasoning model (engine/inference/reasoning.py), streamed beside the
    answer's `Chunk`s. `token` is -1 for text held back over several tokens (a split tag)."""

    text: str
    token: int
    logprob: float


@dataclass
class GenerationStats:
    prompt_tokens: int
    prompt_tokens_evaluated: int
    prompt_tokens_cached: int
    completion_tokens: int  # every token after the prompt: thinking and answer
    ttft_ms: float
    prompt_tps: float
    decode_tps: float
    # "stop" | "length" | "cancelled" | "stop_string" | "context_full" | "repetition" (the answer
    # looped: it ends after the first occurrence of the repeated block, see dropped_tokens) |
    # "tool_calls" (the answer called tools: TurnResult.tool_calls)
    finish_reason: str
    cache_mode: str  # "append" | "rollback" (kept a prefix) | "reeval" (rollback impossible) | "fresh"
    prompt_ms: float = 0.0
    decode_ms: float = 0.0
    tokens_estimated: bool = False  # remote models: counts from tiktoken, not the model's tokenizer
    context_shift: str | None = None  # window moved this turn: "kv" (cache shifted) | "reeval"
    restored_from: str | None = None  # KV state came from "hot" | "warm" | "cold" (engine/kv/tiers.py)
    restore_ms: float = 0.0  # time to restore it (included in ttft_ms)
    park_ms: float = 0.0  # copying the previous conversation's state to RAM first (included in ttft_ms)
    dropped_tokens: int = 0  # "repetition": sampled tokens cut as repeats (streamed, not kept)
    read_ahead: int = 0  # tokens of the next turn's opening evaluated after the answer (engine/chat/targets.py)
    reasoning_tokens: int = 0  # of completion_tokens: the thinking block, its tags included
    reasoning_ms: float = 0.0  # from the first thinking token to the answer's first
    # Why the engine closed the thinking block: "budget" (reasoning_budget or think off) | "loop"
    reasoning_closed: str | None = None
    # Speculative decoding (engine/inference/speculation.py): tokens a draft proposed and the model
    # verified, and how many of them it kept (OpenAI's accepted/rejected_prediction_tokens).
    draft_tokens: int = 0
    draft_accepted: int = 0
    # How the answer was decoded: "ngram" | "draft" (a draft model) | None (one token a pass), and
    # why speculation was on or off ("sliding-window cache", "auto: plain is faster here", ...).
    speculation: str | None = None
    speculation_note: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class TurnResult:
    token_ids: list[int]  # the answer's content ids exactly as sampled (no end-of-turn token)
    text: str
    logprobs: list[float]  # one per answer token
    stats: GenerationStats  # measured at the source, every time
    reasoning: str = ""  # the thinking, without its tags
    # The ids before the answer's: the thinking block as sampled, its tags and the whitespace after
    # it, with any closing tag the engine put in; for a block the prompt opened (R1), the prompt's
    # ids of its opening tag first. The context holds the prompt, then these ids (past the opening
    # tag's), then token_ids.
    reasoning_ids: list[int] = field(default_factory=list)
    # The calls the answer made (finish_reason "tool_calls"); token_ids hold their markup as
    # sampled, text the answer's words without it.
    tool_calls: list[ToolCall] = field(default_factory=list)
