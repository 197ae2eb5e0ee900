"""How evaluation samples: the reference tool's settings and its retry schedule, as generation
`SamplingParams` (one sample per question). Letter mode is the n = 1, temperature = 0 case."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from cosmos_train.generation import SamplingParams

RETRY_TOKEN_STEP = 256  # the reference adds this many new tokens per retry
RETRY_TEMPERATURE_STEP = 0.05  # ... and this much temperature, up to RETRY_TEMPERATURE_CAP
RETRY_TEMPERATURE_CAP = 0.9


def base_sampling(answer_type: str, generation: Any, seed: int) -> SamplingParams:
    """The reference's settings: letter mode greedy with a few tokens; otherwise the config's
    temperature with top_p (0.95 by default) and penalties."""
    if answer_type == "letter":
        return SamplingParams(n=1, max_new_tokens=generation.letter_max_tokens, temperature=0.0, seed=seed)
    return SamplingParams(
        n=1,
        max_new_tokens=generation.max_tokens,
        temperature=generation.temperature,
        top_p=generation.top_p,
        repetition_penalty=generation.repetition_penalty,
        presence_penalty=generation.presence_penalty,
        frequency_penalty=generation.frequency_penalty,
        seed=seed,
    )


def retry_sampling(base: SamplingParams, retry: int) -> SamplingParams:
    """Settings of retry `retry` (0-based) of unanswered questions: more tokens and a slightly higher
    temperature, as the reference (+256 tokens, +0.05 per retry, capped at 0.9 but never lowered);
    a new seed so the retry can differ. Greedy letter mode becomes low-temperature sampling."""
    cap = max(base.temperature, RETRY_TEMPERATURE_CAP)
    temperature = min(base.temperature + RETRY_TEMPERATURE_STEP * (retry + 1), cap)
    return replace(
        base,
        max_new_tokens=base.max_new_tokens + RETRY_TOKEN_STEP * (retry + 1),
        temperature=temperature,
        top_k=None,
        top_p=base.top_p if base.top_p < 1.0 else 0.95,
        seed=None if base.seed is None else base.seed + retry + 1,
    )
