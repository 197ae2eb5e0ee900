"""The generation interface shared by RL rollout and evaluation: chats in, completions out.

    engine = create_engine(GenerationConfig(engine="hf", model_path="outputs/tiny-model"))
    groups = engine.generate([chat_a, chat_b], SamplingParams(n=8, temperature=1.0, max_new_tokens=4))
    groups[0][3].token_ids, groups[0][3].logprobs   # sample 3 of chat_a
    engine.update_weights(model.state_dict().items())   # -> the new weight version
    engine.close()

A request is a chat (a list of {role, content} messages, built by `cosmos_train.data.prompt`): the
engine renders the model's chat template with the generation prompt, decodes the video parts and
returns, per request, `n` `Completion`s in sample order. Greedy letter-mode evaluation is the
n = 1, temperature = 0 case of the same call.

Log-probs are those of the distribution the token was drawn from: the model's logits after the
penalties, temperature, top-k and top-p (a token outside the kept set cannot be drawn). Greedy
decoding (temperature 0) reports the log-prob under the penalised logits at temperature 1, i.e. the
model's own probability of the chosen token, since the point mass greedy samples from says nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, Union

if TYPE_CHECKING:
    import torch

Chat = list[dict[str, Any]]
FinishReason = Literal["stop", "length"]
# What update_weights accepts: an exported safetensors folder, a state dict, or (name, tensor)
# pairs streamed in chunks (a generator, so the whole state never has to sit in memory twice).
WeightSource = Union[str, Path, "Mapping[str, torch.Tensor]", "Iterable[tuple[str, torch.Tensor]]"]


@dataclass(frozen=True)
class SamplingParams:
    """How completions are drawn for one generate call.

    temperature 0 is greedy (top_p / top_k are then ignored). top_k None (or <= 0) is off. stop:
    strings that end a completion (the text excludes them; its token ids keep the token that
    completed them, as vLLM does). stop_token_ids: ids that end a completion besides the model's
    end-of-turn ids (<|im_end|>, eos), which always do. seed: the same seed and the same requests
    give the same samples on one engine; None draws fresh randomness.
    """

    n: int = 1
    max_new_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int | None = None
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    seed: int | None = None

    def __post_init__(self) -> None:
        problems = []
        if self.n < 1:
            problems.append(f"n must be >= 1, got {self.n}")
        if self.max_new_tokens < 1:
            problems.append(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            problems.append(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            problems.append(f"top_p must be in (0, 1], got {self.top_p}")
        if self.repetition_penalty <= 0:
            problems.append(f"repetition_penalty must be > 0, got {self.repetition_penalty}")
        if problems:
            raise ValueError("; ".join(problems))
        # tuples, so a list passed by a caller cannot be changed under a frozen object
        object.__setattr__(self, "stop", tuple(self.stop))
        object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    @property
    def top_k_or_none(self) -> int | None:
        return self.top_k if self.top_k is not None and self.top_k > 0 else None


@dataclass
class Completion:
    """One sampled completion of one request."""

    text: str  # decoded completion, special tokens skipped, cut before a stop string
    token_ids: list[int]  # the completion's tokens; ends with the stop token when finish_reason is "stop"
    logprobs: list[float]  # one per token id, under the distribution it was drawn from (module docstring)
    finish_reason: FinishReason  # "stop": a stop id / string; "length": max_new_tokens reached
    prompt_token_ids: list[int] = field(repr=False, default_factory=list)  # the prompt as the engine encoded it
    weight_version: int = 0  # engine.weight_version when it was generated


class GenerationEngine(Protocol):
    """What rollout and evaluation call. `generate` keeps the order of `requests`."""

    name: str

    @property
    def weight_version(self) -> int:
        """0 for the weights loaded at start; update_weights increments it (callers only read it)."""
        ...

    def generate(self, requests: Sequence[Chat], sampling: SamplingParams) -> list[list[Completion]]: ...

    def update_weights(self, weights: WeightSource, version: int | None = None) -> int:
        """Replace the weights (all, or the named subset) without a restart; returns the new
        weight_version (`version`, else the previous one + 1). Unknown names raise ModelError."""
        ...

    def sleep(self) -> None:
        """Free what can be freed while the trainer runs (KV cache); a no-op where unsupported."""
        ...

    def wake(self) -> None: ...

    def close(self) -> None:
        """Free everything: processes, device memory. The engine is unusable afterwards."""
        ...
