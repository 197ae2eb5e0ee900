"""The VLM rule rewards served over HTTP: the same functions GRPO runs locally
(`cosmos_train.rewards.REWARDS`), so a run can move its rewards to the service unchanged.

The request carries `completions` (one text per item) and `samples` (per item, the row fields the
reward reads: `reference`, `options`); media_type is "text" (or any other when a tensor comes along).
"""

from __future__ import annotations

from cosmos_train.reward_service.handlers.base import Batch, Handler, register_handler, sample_of
from cosmos_train.rewards import REWARDS


class RuleHandler(Handler):
    needs_completions = True

    def score(self, batch: Batch) -> list[float]:
        fn = REWARDS[self.name]
        return [float(fn(c, sample_of(batch.samples, i))) for i, c in enumerate(batch.completions)]


for _name in ("format", "format_lenient", "single_choice", "choice_letter", "exact_match"):
    register_handler(_name)(RuleHandler)
