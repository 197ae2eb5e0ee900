"""Reference rewards this service knows by name but cannot run: a request naming one gets a 400 saying why,
not "unknown reward".

dance_grpo: the reference's VideoAlign scores (vq_reward, mq_reward, ta_reward, overall_reward, one name for
all four) from DanceGRPO; they need the KwaiVGI/VideoReward weights and VideoAlign's own code and environment,
which this service does not ship and cannot fetch offline. Run the reference service for it, or score with
cosmos_reason1 / the video statistics here.
"""

from __future__ import annotations

from cosmos_train.reward_service.handlers.base import Batch, Handler, register_handler

REFUSED: dict[str, str] = {
    "dance_grpo": (
        "is the reference service's VideoAlign reward (vq_reward / mq_reward / ta_reward / overall_reward), which "
        "needs the KwaiVGI/VideoReward weights and VideoAlign's own code and environment; this service does not "
        "run it: use the reference reward service for dance_grpo, or cosmos_reason1 / brightness / motion / "
        "smoothness here"
    ),
}


class RefusedHandler(Handler):
    media_types = ("video",)  # refused whatever is sent

    def refuse(self, batch_media_type: str, has_completions: bool) -> str | None:
        return REFUSED[self.name]

    def score(self, batch: Batch) -> list[float]:
        raise RuntimeError(f"reward {self.name!r} {REFUSED[self.name]}")  # never reached: refused at enqueue


for _name in REFUSED:
    register_handler(_name)(RefusedHandler)
