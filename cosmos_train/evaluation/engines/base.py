"""The engine interface: a batch of chats in, one response text per chat out.

Engines know nothing about benchmarks, prompts or parsing; the runner builds chats with
`cosmos_train.evaluation.prompts` and reads the answers with `cosmos_train.evaluation.parsing`,
so every engine scores the same way and writes the same files.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

Chat = list[dict[str, Any]]

RETRY_TOKEN_STEP = 256  # the reference adds this many new tokens per retry
RETRY_TEMPERATURE_STEP = 0.05  # ... and this much temperature, up to RETRY_TEMPERATURE_CAP
RETRY_TEMPERATURE_CAP = 0.9


@dataclass(frozen=True)
class Sampling:
    """Decoding settings of one generate call. temperature 0 means greedy."""

    max_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int | None = None
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


class Engine(Protocol):
    """Anything that answers chats. `generate` keeps the order of `chats`."""

    name: str

    def generate(self, chats: Sequence[Chat], sampling: Sampling) -> list[str]: ...

    def close(self) -> None: ...


def base_sampling(answer_type: str, generation: Any, seed: int) -> Sampling:
    """The reference's settings: letter mode greedy with a few tokens; otherwise the config's
    temperature with top_p (0.95 by default) and penalties."""
    if answer_type == "letter":
        return Sampling(max_tokens=generation.letter_max_tokens, temperature=0.0, top_k=1, seed=seed)
    return Sampling(
        max_tokens=generation.max_tokens,
        temperature=generation.temperature,
        top_p=generation.top_p,
        repetition_penalty=generation.repetition_penalty,
        presence_penalty=generation.presence_penalty,
        frequency_penalty=generation.frequency_penalty,
        seed=seed,
    )


def retry_sampling(base: Sampling, retry: int) -> Sampling:
    """Settings of retry `retry` (0-based) of unanswered questions: more tokens and a slightly higher
    temperature, as the reference (+256 tokens, +0.05 per retry, capped at 0.9 but never lowered);
    a new seed so the retry can differ. Greedy letter mode becomes low-temperature sampling."""
    cap = max(base.temperature, RETRY_TEMPERATURE_CAP)
    temperature = min(base.temperature + RETRY_TEMPERATURE_STEP * (retry + 1), cap)
    return replace(
        base,
        max_tokens=base.max_tokens + RETRY_TOKEN_STEP * (retry + 1),
        temperature=temperature,
        top_k=None,
        top_p=base.top_p if base.top_p < 1.0 else 0.95,
        seed=None if base.seed is None else base.seed + retry + 1,
    )
