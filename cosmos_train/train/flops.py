"""Model FLOPs of a training step and MFU (model FLOPs utilisation): how much of the devices' peak the step's
useful arithmetic used.

    counter = FlopCounter.of(model)                  # before sharding: parameter counts from the full model
    flops = counter.step_flops(micro_batches)        # this rank's share of one optimizer step
    mfu = flops_all_ranks / step_time / (peak_flops() * world_size)

Convention (PaLM appendix B, torchtitan's `get_num_flop_per_token`): training costs 6 FLOPs per matmul
parameter per token that passes through it (forward 2, backward 4), plus, for the language model's attention
scores and values, 12 * layers * hidden per token per token it attends to (a third of each for a forward
only). Counted here:
- language model: every input token (text and vision pads alike) through the decoder's matmul parameters and
  lm_head (the embedding lookup is not a matmul); attention over the token's own sample, causal or not
  counted whole (torchtitan's convention): 12 * layers * hidden * sum(L_i^2) per micro-batch, L_i each sample's
  length (padding and other packed samples are not useful work); under an explicit 4D mask (GRPO's prompt
  shared by its group's completions), twice its allowed (query, key) pairs;
- vision tower: every patch through its blocks' parameters (6 * N_blocks per patch) and every merged token
  through the merger / projector; the tower's own attention scores are left out, so MFU is a lower bound on
  vision-heavy steps.
Peak FLOP/s: the dense bf16 tensor-core peak of the GPU model (`PEAK_BF16`), or $COSMOS_PEAK_TFLOPS (any
device, e.g. a CPU whose peak you know); unknown -> no MFU is logged.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from cosmos_train.models.families import family_of

if TYPE_CHECKING:
    from transformers import PreTrainedModel

# Dense (no sparsity) bf16 tensor-core peak per GPU, FLOP/s, from the vendors' data sheets.
PEAK_BF16: tuple[tuple[str, float], ...] = (
    ("H200", 989.4e12),
    ("H100 NVL", 835e12),
    ("H100 PCIe", 756e12),
    ("H100", 989.4e12),
    ("GH200", 989.4e12),
    ("B200", 2250e12),
    ("B100", 1750e12),
    ("A100", 312e12),
    ("L40S", 362e12),
    ("L40", 181e12),
    ("A10", 125e12),
)
_MERGER_NAMES = (".merger.", ".projector.", "deepstack_merger")


def peak_flops(device: torch.device) -> float | None:
    """The device's peak FLOP/s ($COSMOS_PEAK_TFLOPS first, then the GPU table), None when unknown."""
    env = os.environ.get("COSMOS_PEAK_TFLOPS")
    if env:
        return float(env) * 1e12
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in PEAK_BF16 if key in name), None)


@dataclass(frozen=True)
class FlopCounter:
    """Parameter counts and shapes one step's FLOPs follow from."""

    language_params: int  # decoder matmul parameters + lm_head (embeddings and norms excluded)
    layers: int
    hidden: int
    vision_block_params: int  # per patch
    merger_params: int  # per merged token
    merge: int  # spatial merge size

    @classmethod
    def of(cls, model: nn.Module) -> FlopCounter:
        """From a full (unsharded) model of a supported family."""
        spec = family_of(model)
        hf = cast("PreTrainedModel", model)  # every supported family's model is a transformers model
        config = getattr(hf.config, "text_config", None) or hf.config
        # the LM head is a matmul even where it shares its weight with the embedding (a lookup, no FLOPs)
        head = hf.get_output_embeddings()
        language, vision, merger = (head.weight.numel() if head is not None else 0), 0, 0
        for name, p in model.named_parameters():
            if p.dim() < 2 or "embed_tokens" in name or name.startswith("lm_head."):
                continue  # norms and biases: no matmul; the head is counted above
            if name.startswith(spec.vision_prefixes):
                if any(m in name for m in _MERGER_NAMES):
                    merger += p.numel()
                else:
                    vision += p.numel()
            else:
                language += p.numel()
        return cls(
            language,
            int(config.num_hidden_layers),
            int(config.hidden_size),
            vision,
            merger,
            spec.vision_layout.merge_size,
        )

    def forward_flops(self, tokens: int, pairs: int, patches: int) -> float:
        """One forward pass over `tokens` tokens (vision pads included) attending over `pairs` (query, key)
        pairs (a causal sample of L tokens counts L^2, the convention above) and `patches` vision patches."""
        language = 2 * self.language_params * tokens + 4 * self.layers * self.hidden * pairs
        vision = 2 * self.vision_block_params * patches + 2 * self.merger_params * patches // self.merge**2
        return float(language + vision)

    def step_flops(self, micro: Sequence[Any], passes: int = 3) -> float:
        """Useful FLOPs of micro-batches (`train.batching.MicroBatch`): every sample's tokens and patches.
        passes: 3 for forward and backward (training), 1 for a forward only (reference / old log-probs)."""
        total = 0.0
        for mb in micro:
            patches = sum(
                int(g.prod(-1).sum())
                for k in ("image_grid_thw", "video_grid_thw")
                if (g := mb.vision.get(k)) is not None
            )
            mask = mb.attention_mask
            if mask is not None and mask.dim() == 4:  # explicit layout (GRPO's shared prompt): its allowed pairs
                allowed = int(mask.sum()) if mask.dtype == torch.bool else int((mask == 0).sum())
                # padding positions see only themselves: neither they nor that pair is useful work
                total += self.forward_flops(mb.n_tokens, 2 * (allowed - mb.n_padding), 0)
            else:
                lengths = mb.packed_lengths or (
                    [int(n) for n in mask.sum(-1).tolist()]
                    if mask is not None
                    else [mb.input_ids.shape[1]] * mb.input_ids.shape[0]
                )
                total += sum(self.forward_flops(n, n * n, 0) for n in lengths)
            total += self.forward_flops(0, 0, patches)
        return passes * total
