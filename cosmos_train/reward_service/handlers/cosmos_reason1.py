"""cosmos_reason1: a Cosmos-Reason VLM asked whether each video has artifacts, scored as the reference service's
cosmos_reason1 reward scores it (docs/FACTS.md, "The cosmos_reason1 reward": prompts and rule).

    [handlers.cosmos_reason1]
    model_path = "models/Cosmos-Reason1-7B-Reward"   # any VLM folder the trainer loads (the tiny model works)

Per video (pixels [3, T, H, W] in [0, 255]; media_type "latent" arrives decoded by the service's LatentDecoder):
1. frames: every k-th, k = (T - 1) // 160 + 1 (at most 160), sampled at video_fps / k; then cut to a multiple
   of the temporal patch (2 for Qwen2.5-VL), as the reference does;
2. size: qwen-vl-utils' smart_resize to multiples of the patch * merge (28), between 16 and 9216 merged tokens
   per temporal patch spread over the frames (max_pixels // frames per frame), PIL bicubic per frame;
3. chat: the reference's system prompt, then the user turn [video, text]: text = the request's prompt for that
   item (the reference passes the request's prompts; the trained question where the request has none, or always
   with prompt_source = "fixed"); the model's chat template with the generation prompt, via `encode_chat`;
4. ONE forward pass: the last position's logits; yes / no = the first token id of "Yes" / "No";
   no_score = softmax([yes_logit, no_logit])[1] (the video has no anomalies), prediction "Good" when
   no_logit >= yes_logit, else "Bad".
Scores: {"prediction": [...], "no_score": [...], "yes_logit": [...], "no_logit": [...]}, one entry per video.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import numpy as np
import torch
from PIL import Image

from cosmos_train.data.chat import encode_chat
from cosmos_train.generation.hf import resolve_device, resolve_dtype
from cosmos_train.models.load import load_model, load_processor
from cosmos_train.reward_service.handlers.base import Batch, Handler, register_handler
from cosmos_train.vision.layout import VisionLayout
from cosmos_train.vision.processor import get_tokenizer, vision_layout_of
from cosmos_train.vision.settings import VisionSettings, smart_resize

log = logging.getLogger(__name__)

# The reference reward's prompts (protocol data: the reward model was trained with them; kept verbatim).
SYSTEM_PROMPT = """You are a helpful video analyzer. The goal is to identify artifacts and anomalies in the video. Watch carefully and focus on the following aspects:

* Gravity (e.g. a ball cannot fly in the air)
* Collision (e.g. two objects cannot penetrate each other)
* Object interaction (e.g. an object cannot move without any apparent reason)
* Fluid dynamics (e.g. a liquid cannot flow through a solid object)
* Object permanence (e.g. an object cannot suddenly appear, disappear or change its shape)
* Common sense (e.g. an object should be functional and useful)
* Cause-and-effect (e.g. a door cannot open without any apparent reason)
* Human motion (e.g. a person's body cannot morph and the joints cannot move in impossible ways)

Here are some examples of non-artifacts you should not include in your analysis:

* Being an animated video, such as a cartoon, does not automatically make it artifacts.
* The video has no sound. Do not make any conclusions based on sound.
* Ignore any lighting, shadows, blurring, and camera effects.
* Avoid judging based on overall impression, artistic style, or background elements.

Begin your response with a single word: "Yes" or "No"."""  # noqa: E501  (the trained prompt's own lines)
USER_PROMPT = "Does the video contain any anomalies or artifacts?"

MAX_FRAMES = 160
TARGET_TOKENS = 9216  # merged vision tokens per temporal patch, spread over the frames
MIN_TOKENS = 16
DEFAULT_FPS = 16.0  # the rate cosmos-rl's clients send in video_infos
SCORE_KEYS = ("prediction", "no_score", "yes_logit", "no_logit")


def sample_frames(video: np.ndarray, fps: float, temporal_patch: int) -> tuple[np.ndarray, float]:
    """Pixels [3, T, H, W] -> (uint8 frames [T', H, W, 3], their rate): every k-th frame, at most MAX_FRAMES,
    cut to a multiple of `temporal_patch`."""
    total = video.shape[1]
    interval = max(1, (total - 1) // MAX_FRAMES + 1)
    idx = np.arange(0, total, interval)
    keep = len(idx) - len(idx) % temporal_patch
    if keep == 0:
        raise ValueError(
            f"a video of {total} frames leaves {len(idx)} after sampling, fewer than the model's temporal patch "
            f"({temporal_patch}); send at least {temporal_patch} frames"
        )
    chosen = video[:, idx[:keep]]
    if chosen.dtype != np.uint8:  # float pixels in [0, 255] (media_type "video" takes any numeric dtype)
        chosen = np.clip(np.rint(chosen), 0, 255).astype(np.uint8)
    return np.ascontiguousarray(np.moveaxis(chosen, 0, -1)), fps / interval


def resize_frames(frames: np.ndarray, layout: VisionLayout) -> torch.Tensor:
    """uint8 [T, H, W, 3] -> uint8 [T, 3, H', W'], sides multiples of the layout's factor, PIL bicubic per frame."""
    n, height, width, _ = frames.shape
    unit = layout.factor**2 * layout.temporal_patch_size
    new_h, new_w = smart_resize(
        height, width, factor=layout.factor, min_pixels=MIN_TOKENS * unit, max_pixels=TARGET_TOKENS * unit // n
    )
    out = [np.asarray(Image.fromarray(f).resize((new_w, new_h), resample=Image.Resampling.BICUBIC)) for f in frames]
    return torch.from_numpy(np.stack(out)).permute(0, 3, 1, 2).contiguous()


class _Frames:
    """A frame reader for `encode_chat` over videos already in memory (keyed by name), sized by this handler."""

    in_memory = True

    def __init__(self, videos: dict[str, tuple[torch.Tensor, float]]):
        self.videos = videos

    def read_video(self, path: Any, settings: VisionSettings | None = None) -> tuple[torch.Tensor, float]:
        return self.videos[str(path)]

    def load_image(self, source: Any, settings: VisionSettings | None = None) -> torch.Tensor:
        raise ValueError("cosmos_reason1 chats hold no images")


def reason1_chat(video_key: str, text: str) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": [{"type": "video", "video": video_key}, {"type": "text", "text": text}]},
    ]


def yes_no_scores(yes_logit: float, no_logit: float) -> tuple[str, float]:
    """(prediction, no_score) from the two logits (the module docstring's rule 4)."""
    no_score = float(torch.softmax(torch.tensor([yes_logit, no_logit]), dim=0)[1])  # float32, as the reference
    return ("Good" if no_logit >= yes_logit else "Bad"), no_score


@register_handler("cosmos_reason1")
class CosmosReason1(Handler):
    media_types = ("video",)  # latent requests arrive decoded (a "latent" here would mean: reads raw latents)

    def __init__(self, name: str, config: Any):
        super().__init__(name, config)
        self.settings = config.handlers.cosmos_reason1
        self.model: Any = None
        self.processor: Any = None
        self.yes_id = self.no_id = -1
        self._lock = threading.Lock()  # one forward at a time: the workers share the model

    def refuse(self, batch_media_type: str, has_completions: bool) -> str | None:
        if not self.settings.model_path:
            return "is off: set [handlers.cosmos_reason1] model_path in the service's rewards.toml"
        return super().refuse(batch_media_type, has_completions)

    def set_up(self) -> None:
        s = self.settings
        device = resolve_device(s.device)
        self.processor = load_processor(str(s.model_path))
        self.model = load_model(str(s.model_path), dtype=resolve_dtype(s.dtype, device), device=device).eval()
        tokenizer = get_tokenizer(self.processor)
        self.yes_id = tokenizer.encode("Yes", add_special_tokens=False)[0]
        self.no_id = tokenizer.encode("No", add_special_tokens=False)[0]

    def _text(self, batch: Batch, i: int) -> str:
        if self.settings.prompt_source == "request" and batch.prompts:
            return batch.prompts[i]
        return USER_PROMPT

    def score(self, batch: Batch) -> dict[str, list[Any]]:  # the reference's score keys (SCORE_KEYS)
        video = batch.media
        if video is None or video.ndim != 5 or video.shape[1] != 3:
            shape = None if video is None else list(video.shape)
            raise ValueError(f"cosmos_reason1 scores pixels [B, 3, T, H, W], got {shape}")
        layout = vision_layout_of(self.processor)
        out: dict[str, list[Any]] = {k: [] for k in SCORE_KEYS}
        for i in range(batch.size):
            info = batch.video_infos[i] if i < len(batch.video_infos) else {}
            fps = float(info.get("video_fps", info.get("fps", DEFAULT_FPS)))
            frames, sample_fps = sample_frames(video[i], fps, layout.temporal_patch_size)
            reader = _Frames({"video": (resize_frames(frames, layout), sample_fps)})
            enc = encode_chat(
                self.processor,
                reason1_chat("video", self._text(batch, i)),
                add_generation_prompt=True,
                clip_cache=reader,
            )
            inputs = {k: v.to(self.model.device) for k, v in enc.model_inputs().items()}
            with self._lock, torch.inference_mode():
                logits = self.model(**inputs).logits[0, -1].float()
            yes_logit, no_logit = float(logits[self.yes_id]), float(logits[self.no_id])
            prediction, no_score = yes_no_scores(yes_logit, no_logit)
            for key, value in zip(SCORE_KEYS, (prediction, no_score, yes_logit, no_logit)):
                out[key].append(value)
        return out
