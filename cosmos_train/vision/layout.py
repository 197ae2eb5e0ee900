"""How a model family lays pixels out and marks video time in the prompt: `VisionLayout`, and the layouts of
the families the trainer knows. The model side (`cosmos_train.models.families`) names a family's layout; the
data side (`cosmos_train.data.media`, `cosmos_train.data.chat`) applies it; neither imports the other.
"""

from __future__ import annotations

import dataclasses

from cosmos_train.vision.settings import VisionSettings

PATCH_SIZE = 14
MERGE_SIZE = 2
TEMPORAL_PATCH_SIZE = 2
# OpenAI CLIP statistics, the image_mean / image_std of every Qwen2-VL processor config.
IMAGE_MEAN = (0.48145466, 0.4578275, 0.40821073)
IMAGE_STD = (0.26862954, 0.26130258, 0.27577711)


@dataclasses.dataclass(frozen=True)
class VisionLayout:
    """How a model family lays pixels out (its processor config) and marks video time in the prompt.

    frame_timestamps: the prompt writes `<{t:.1f} seconds>` + a vision block per temporal patch of a video
    (Qwen3-VL, Cosmos3-Edge) instead of one block per video with `second_per_grid_ts` (Qwen2.5-VL).
    keep_video_wrapper (frame-timestamp layouts): the template's <|vision_start|> ... <|vision_end|> around a
    video stays and the per-patch blocks go inside it, as transformers' Qwen3VLProcessor (>= 5.10) and vLLM
    with it write Qwen3-VL prompts; False replaces the whole placeholder (Cosmos3EdgeProcessor, and Qwen3-VL's
    processor before transformers 5.10).
    channels_last_patches: the values of one patch run (row, column, channel, frame), as Cosmos3-Edge's
    linear patch embedding reads them, instead of (channel, frame, row, column) for a Conv3d's kernel.
    """

    patch_size: int = PATCH_SIZE
    merge_size: int = MERGE_SIZE
    temporal_patch_size: int = TEMPORAL_PATCH_SIZE
    image_mean: tuple[float, float, float] = IMAGE_MEAN
    image_std: tuple[float, float, float] = IMAGE_STD
    frame_timestamps: bool = False
    keep_video_wrapper: bool = False
    channels_last_patches: bool = False

    @property
    def factor(self) -> int:
        """Pixels per merged token side: sizes are multiples of it."""
        return self.patch_size * self.merge_size

    def settings(self, settings: VisionSettings | None) -> VisionSettings:
        """`settings` (or the defaults) sized for this layout."""
        settings = settings or VisionSettings()
        return settings if settings.factor == self.factor else dataclasses.replace(settings, factor=self.factor)


# The default: Qwen2-VL / Qwen2.5-VL (and what a text-only chat carries, never reading it).
QWEN2_VL_LAYOUT = VisionLayout()
# Qwen3-VL and Cosmos3-Edge processor configs: 16 px patches, mean = std = 0.5 (IMAGENET_STANDARD), and a
# `<t seconds>` before each temporal patch of a video.
_HALF = (0.5, 0.5, 0.5)
QWEN3_VL_LAYOUT = VisionLayout(
    patch_size=16, image_mean=_HALF, image_std=_HALF, frame_timestamps=True, keep_video_wrapper=True
)
# one frame per temporal patch (its video processor refuses any other temporal_patch_size); a linear patch
# embedding over (row, column, channel) values
COSMOS3_EDGE_LAYOUT = VisionLayout(
    patch_size=16,
    temporal_patch_size=1,
    image_mean=_HALF,
    image_std=_HALF,
    frame_timestamps=True,
    channels_last_patches=True,
)

# Processor class name (ours subclass these) -> the layout it produces; the same pairs as the families'
# `processor_classes` / `vision_layout` (tests/unit/test_families.py holds them equal).
PROCESSOR_LAYOUTS: dict[str, VisionLayout] = {
    "Qwen2_5_VLProcessor": QWEN2_VL_LAYOUT,
    "Qwen3VLProcessor": QWEN3_VL_LAYOUT,
    "Cosmos3EdgeProcessor": COSMOS3_EDGE_LAYOUT,
}
