"""Answer confidence from per-token log-probabilities."""

from __future__ import annotations

import math


def geometric_mean_prob(logprobs: list[float]) -> float | None:
    """exp(mean log p) over the sampled tokens: 1.0 = certain; None when there are no logprobs."""
    if not logprobs:
        return None
    return math.exp(sum(logprobs) / len(logprobs))
