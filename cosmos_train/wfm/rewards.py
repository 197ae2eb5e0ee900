"""Rewards of generated videos: the reward service's video-statistics handlers, run in the trainer (local) or
reached over HTTP (service), one score per video, combined by the [reward] weights.

    scorer = VideoScorer.from_config(cfg.reward)            # service: WFM_REWARD_* env, or the run's own service
    total, parts = scorer.score(videos_uint8, latents, prompts)   # [B] totals, {name: [B]}

The local functions ARE the service's handler classes (cosmos_train/reward_service/handlers/video_stats.py), so
a run scored locally and one scored by the service get the same numbers for the same pixels.

Local handlers: brightness, motion, smoothness (video statistics), and first_frame_brightness, the video2world
reward: 1 - the mean |brightness of frame t - brightness of frame 0| / 255 over the later frames. With
model.rl.min/max_num_conditional_frames > 0 the first frame is the dataset clip's, so the reward is earned by
continuing the given frame (a dark clip stays dark, a bright one bright), not by one brightness for every prompt
(bench/wfm_rl_learning.py --video2world measures it).
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from cosmos_train.reward_service.config import ServiceConfig
from cosmos_train.reward_service.handlers import HANDLERS, Batch
from cosmos_train.rewards.remote import RemoteRewardClient

# the handlers that score pixels (not completions) with no settings (a default service takes them): usable in the
# trainer; a model-backed one (cosmos_reason1) or one the service refuses by name (dance_grpo) is service-only
LOCAL_REWARDS = tuple(
    sorted(
        name
        for name, cls in HANDLERS.items()
        if "video" in cls.media_types
        and not cls.needs_completions
        and cls(name, ServiceConfig()).refuse("video", False) is None
    )
)


def npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(array), allow_pickle=False)
    return buf.getvalue()


@dataclass
class VideoScorer:
    weights: dict[str, float]
    client: RemoteRewardClient | None = None  # None: local handlers
    payload: str = "video"
    batch_size: int = 16

    @classmethod
    def from_config(cls, rc: Any, env: Mapping[str, str] = os.environ) -> VideoScorer:
        """From a `wfm.config.RewardConfig`; the service through WFM_REWARD_ENQUEUE_URL / _FETCH_URL / _TOKEN, each
        call retried [reward].max_retries times before RewardServiceUnreachable (the trainer stops saved on it)."""
        if rc.backend == "local":
            return cls(dict(rc.fns))
        client = RemoteRewardClient.for_world_model(
            env,
            timeout_s=rc.timeout_s,
            result_timeout_s=rc.result_timeout_s,
            max_retries=rc.max_retries,
            backoff_s=rc.backoff_s,
            backoff_max_s=rc.backoff_max_s,
        )
        return cls(dict(rc.fns), client, rc.payload, rc.batch_size)

    def close(self) -> None:
        if self.client is not None:
            self.client.close()

    def score(
        self, videos: np.ndarray, latents: np.ndarray | None, prompts: Sequence[str]
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """videos uint8 [B, 3, T, H, W]; latents float [B, C, T', H', W'] (the service's latent payload)."""
        parts = self._local(videos, prompts) if self.client is None else self._remote(videos, latents, prompts)
        total = sum(w * parts[name] for name, w in self.weights.items())
        return np.asarray(total, dtype=np.float64), parts

    def _local(self, videos: np.ndarray, prompts: Sequence[str]) -> dict[str, np.ndarray]:
        batch = Batch(media_type="video", size=len(videos), media=videos, prompts=list(prompts))
        config = ServiceConfig()
        return {name: np.asarray(HANDLERS[name](name, config).score(batch), dtype=np.float64) for name in self.weights}

    def _remote(self, videos: np.ndarray, latents: np.ndarray | None, prompts: Sequence[str]) -> dict[str, np.ndarray]:
        assert self.client is not None
        media = videos if self.payload == "video" else latents
        assert media is not None
        reward_fn = {name: 1.0 for name in self.weights}  # weights apply here, so a part stays readable
        pending = []
        for start in range(0, len(media), self.batch_size):
            chunk = media[start : start + self.batch_size]
            meta = {
                "media_type": self.payload,
                "reward_fn": reward_fn,
                "prompts": list(prompts[start : start + self.batch_size]),
                "video_infos": [{"index": start + i} for i in range(len(chunk))],
            }
            pending.append(
                self.client.submit(meta, npy_bytes(chunk.astype(np.float32) if self.payload == "latent" else chunk))
            )
        out: dict[str, list[float]] = {name: [] for name in self.weights}
        for job in pending:
            docs = job.result()
            for name in self.weights:
                out[name] += [float(s) for s in docs[name]["scores"][name]]
        return {name: np.asarray(v, dtype=np.float64) for name, v in out.items()}
