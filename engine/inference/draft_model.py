"""A draft model: a small model of the target's family (Qwen2.5-0.5B for Qwen2.5-7B) that proposes
the next tokens greedily, for the target to verify in one pass (engine/inference/tokens.py).

It runs on the target's thread, beside it: a token source owns every context it drives, so a
pass is the draft's k steps and the target's one verification with no hand-off between threads.
Its cache follows the answer as the target's does: each proposal starts with `prefill`, which
keeps the common prefix (the accepted tokens the draft already evaluated) and evaluates the rest.
"""

from __future__ import annotations

import logging

from engine.inference.backend import Backend, SamplingParams
from engine.inference.errors import ContextFull, DecodeError
from engine.inference.generate import prefill

log = logging.getLogger(__name__)

# Greedy and unpenalised: a draft proposes the likeliest tokens; the target's chain decides.
GREEDY = SamplingParams(temperature=0.0, repeat_penalty=1.0)


class DraftModel:
    """Proposes up to k tokens after a sequence, with its own backend (owned by the target's thread)."""

    kind = "draft"

    def __init__(self, backend: Backend, model_id: str):
        self.backend, self.model_id = backend, model_id
        self._sampler = backend.make_sampler(GREEDY)
        self.failed: str | None = None  # why it stopped proposing (an error in its context)

    def propose(self, sequence: list[int], k: int) -> list[int]:
        """Up to `k` tokens after `sequence` (the prompt and the answer so far); none where its
        context is full or it failed (the target then decodes plainly)."""
        b = self.backend
        if self.failed is not None or len(sequence) + k >= b.n_ctx:
            return []
        try:
            _, _, complete = prefill(b, sequence)
            if not complete:
                return []
            out: list[int] = []
            for i in range(k):
                token, _ = b.sample(self._sampler)
                out.append(token)
                if b.is_eog(token):
                    break
                if i < k - 1:
                    b.eval([token])
            return out
        except (ContextFull, DecodeError) as exc:
            self.failed = str(exc)
            log.warning("the draft model %s stopped proposing: %s", self.model_id, exc)
            return []

    def close(self) -> None:
        self._sampler.close()
        self.backend.close()
