"""A VLM judge: a local model folder, loaded through the generation layer, asked a yes/no question
about each (prompt, completion) pair.

    [handlers.vlm_judge]
    model_path = "outputs/tiny-model"      # any folder `create_engine` loads (the tiny model works)

The judge answers greedily; its first answer token decides the score:
"yes" -> p(that token), "no" -> 1 - p(that token), anything else -> 0.0 (the judge did not answer).
With greedy decoding the first token is the most likely one, so this reads P(yes) where the judge is
sure either way and says "no opinion" as 0.
"""

from __future__ import annotations

import math
import threading
from typing import Any

from cosmos_train.generation import GenerationConfig, SamplingParams, create_engine
from cosmos_train.reward_service.handlers.base import Batch, Handler, register_handler

ANSWER_TOKENS = 3


def judge_chat(prompt: str, completion: str, question: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"Question: {prompt}\nAnswer: {completion}\n\n{question}"}]


def yes_no_score(text: str, first_logprob: float | None) -> float:
    """The score of a judge's answer (module docstring); first_logprob is its first token's log-prob."""
    words = text.strip().lower().split()
    word = words[0].strip(".,!:;\"'") if words else ""
    if first_logprob is None or word not in ("yes", "no"):
        return 0.0
    p = min(1.0, math.exp(first_logprob))
    return p if word == "yes" else 1.0 - p


@register_handler("vlm_judge")
class VLMJudge(Handler):
    needs_completions = True

    def __init__(self, name: str, config: Any):
        super().__init__(name, config)
        self.settings = config.handlers.vlm_judge
        self.engine: Any = None
        self._lock = threading.Lock()  # one generate at a time: the engine holds one KV cache

    def refuse(self, batch_media_type: str, has_completions: bool) -> str | None:
        if not self.settings.model_path:
            return "is off: set [handlers.vlm_judge] model_path in the service's rewards.toml"
        return super().refuse(batch_media_type, has_completions)

    def set_up(self) -> None:
        s = self.settings
        self.engine = create_engine(
            GenerationConfig(
                model_path=str(s.model_path),
                engine="hf",
                device=s.device,
                dtype=s.dtype,
                max_length=s.max_length,
                decode_workers=1,
            )
        )

    def score(self, batch: Batch) -> list[float]:
        prompts = batch.prompts or [""] * batch.size
        chats = [judge_chat(p, c, self.settings.question) for p, c in zip(prompts, batch.completions)]
        with self._lock:
            out = self.engine.generate(chats, SamplingParams(n=1, max_new_tokens=ANSWER_TOKENS, temperature=0.0))
        return [yes_no_score(c[0].text, c[0].logprobs[0] if c[0].logprobs else None) for c in out]
