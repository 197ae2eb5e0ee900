"""Context parallel for the vision-language trainers: each sequence's language-model tokens split over the CP ranks.

    with split_language_model(model, cp):          # inside the root's forward (`vision_forward`)
        hidden = model.model(**inputs).last_hidden_state   # [B, S_padded / cp, H]: this rank's slice

What is split, and what is not:
- The input embeddings are computed on EVERY rank of a CP group for the WHOLE sequence, the same on each: the
  token embeddings, the vision tower on every image and video of the micro-batch, the scatter of its features into
  the placeholder positions and the 3D (mrope) positions from the model's own `get_rope_index`. So the vision
  encoder and its activations are not split (for a long video the encoder's own cost stays per rank); what is
  split is the language model, whose activations grow with the whole sequence.
- A pre-hook on the language model (`model.model.language_model`, or the core of a text-only model) pads the
  sequence to a multiple of cp (`pad_to_multiple`: the padding is masked out of attention and of the loss), and
  hands it this rank's contiguous slice of inputs_embeds, of the position ids (global positions: RoPE of a slice
  is that of the same tokens in the whole sequence, 3D mrope rows too), and, for Qwen3-VL, of the deepstack
  features and their positions.
- Attention is `cosmos_cp_sdpa`, ours, registered with transformers' AttentionInterface in place of sdpa / eager /
  our packed attention: `ulysses_attention` trades the sequence split for a head split (all-to-all), runs SDPA on
  the whole sequence with its mask (causal, the GRPO shared-prompt 4D mask, or a packed row's per-sample bounds,
  as `packed_attention` runs them) and trades back. Called outside a context-parallel forward (no `cp_attention`
  argument), it is `packed_attention.packed_sdpa`. flash_attention_2 / 3 are replaced too: SDPA picks a flash
  kernel itself for the causal case.
- The outputs are this rank's hidden states. The trainers' losses read the kept positions in this slice
  (`local_kept`): SFT's cross entropy is a sum over tokens, so each rank sums its own and the step divides by the
  global token count (`distributed.set_data_parallel_average` makes FSDP sum the CP ranks' gradient shares).
  GRPO's loss is not a sum over tokens (per-sequence means, GSPO's sequence ratio), so its per-token log-probs are
  gathered (`KeptSlice.combine`, a few floats per token) and every rank of the group computes the same loss; the
  gather's backward keeps each rank's own tokens' gradient, and those shares add up to the sequence's gradient.

The result equals cp = 1 to float rounding (tests/integration/distributed/test_cp_vlm.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AttentionInterface
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

from cosmos_train.context_parallel import CpGroup, gather_sequence, pad_to_multiple, split_sequence, ulysses_attention
from cosmos_train.train import packed_attention

NAME = "cosmos_cp_sdpa"
_REPLACES = ("sdpa", "eager", packed_attention.NAME, "flash_attention_2", "flash_attention_3")
# a packed row's flash-attention varlen keywords (`packed_attention.segment_bounds`): global, kept by the hook
_BOUNDS_KEYS = ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")


@dataclass(frozen=True)
class CpAttention:
    """The whole sequence's attention layout, handed to every attention call of one context-parallel forward.

    mask: [B, 1, S, S] bool (True: attend), or None for causal attention; bounds: a packed row's sample bounds
    [0, L_1, ..., S] (each sample causal within itself), or None."""

    cp: CpGroup
    mask: torch.Tensor | None = None
    bounds: list[int] | None = None


def cp_sdpa(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    cp_attention: CpAttention | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """query [B, H, S/cp, D], key / value [B, H_kv, S/cp, D] (this rank's slice) -> ([B, S/cp, H, D], None): the
    rows of attention over the whole sequence that this rank's queries get. Without `cp_attention`: packed_sdpa."""
    if cp_attention is None:
        return packed_attention.packed_sdpa(
            module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
        )
    layout = cp_attention

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if layout.bounds is not None:
            return packed_attention.segment_sdpa(q, k, v, layout.bounds, dropout=dropout, scaling=scaling)
        gqa = k.shape[1] != q.shape[1]
        if layout.mask is not None:
            return F.scaled_dot_product_attention(
                q, k, v, attn_mask=layout.mask, dropout_p=dropout, scale=scaling, enable_gqa=gqa
            )
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True, scale=scaling, enable_gqa=gqa)

    out = ulysses_attention(query, key, value, layout.cp, attend)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(NAME, cp_sdpa)
# the mask transformers builds for a slice would be wrong; under CP the hook passes no mask (the whole sequence's
# goes in `cp_attention`), outside it the packed attention's rule holds
ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, packed_attention.packed_mask)


def use_cp_attention(model: nn.Module) -> None:
    """Switch the language model's attention to `cosmos_cp_sdpa` (idempotent). The vision tower keeps its own."""
    config = packed_attention.language_config(model)
    current = getattr(config, "_attn_implementation", None) or "sdpa"
    if current == NAME:
        return
    if current not in _REPLACES:
        raise ValueError(f"context parallel: the language model's attention {current!r} cannot be split")
    config._attn_implementation = NAME


def language_model(model: nn.Module) -> nn.Module:
    """The decoder stack the hook splits: `model.model.language_model` of a VLM, `model.model` of a text-only LM."""
    core = cast(nn.Module, model.model)
    return cast(nn.Module, core.language_model) if hasattr(core, "language_model") else core


@contextmanager
def split_language_model(model: nn.Module, cp: CpGroup) -> Iterator[None]:
    """While active, the language model of `model` runs on this rank's slice of its inputs (module docstring)."""
    lm = language_model(model)

    def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict]:
        if args:
            raise ValueError("context parallel: the language model is called with keyword arguments only")
        return args, _local_inputs(module, dict(kwargs), cp)

    handle = lm.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()


def _local_inputs(module: nn.Module, kw: dict[str, Any], cp: CpGroup) -> dict[str, Any]:
    """The language model's keyword arguments for this rank's slice of the sequence."""
    embeds = kw.get("inputs_embeds")
    if embeds is None:  # a text-only model: its core is the language model, called with input_ids
        embeds = cast(Any, module).get_input_embeddings()(kw["input_ids"])
    batch, length = embeds.shape[:2]
    positions = kw.get("position_ids")
    if positions is None:  # what the model would compute for a slice is the slice's own 0..S/cp: the whole one's
        positions = torch.arange(length, device=embeds.device).expand(batch, length)
    bounds = kw.get("cu_seq_lens_q")
    for key in _BOUNDS_KEYS:
        kw.pop(key, None)
    n_pad = -length % cp.size
    layout = attention_layout(kw.get("attention_mask"), bounds, length, n_pad, cp)
    embeds = split_sequence(pad_to_multiple(embeds, 1, cp.size)[0], 1, cp)
    positions = split_sequence(pad_to_multiple(positions, positions.dim() - 1, cp.size)[0], positions.dim() - 1, cp)
    visual = kw.get("visual_pos_masks")
    if visual is not None and kw.get("deepstack_visual_embeds") is not None:  # Qwen3-VL
        order = torch.full(visual.shape, -1, dtype=torch.long, device=visual.device)
        order[visual] = torch.arange(int(visual.sum()), device=visual.device)
        local_visual = split_sequence(pad_to_multiple(visual.long(), 1, cp.size)[0], 1, cp).bool()
        picked = split_sequence(pad_to_multiple(order, 1, cp.size, value=-1)[0], 1, cp)[local_visual]
        kw["visual_pos_masks"] = local_visual
        kw["deepstack_visual_embeds"] = [e[picked.to(e.device)] for e in kw["deepstack_visual_embeds"]]
    kw.update(input_ids=None, inputs_embeds=embeds, position_ids=positions, attention_mask=None, cp_attention=layout)
    return kw


def attention_layout(
    mask: torch.Tensor | None, bounds: torch.Tensor | None, length: int, n_pad: int, cp: CpGroup
) -> CpAttention:
    """The whole (padded) sequence's attention: the padding appended for cp attends to itself only and no real token
    sees it (it comes last: causal attention never looks ahead)."""
    if bounds is not None:  # a packed row: the padding is one more sample
        edges = [int(b) for b in bounds.tolist()]
        return CpAttention(cp, bounds=edges + [length + n_pad] if n_pad else edges)
    if mask is None:
        return CpAttention(cp)
    if mask.dim() == 2:
        keep = mask.bool()
        if bool((keep.long().cumprod(-1) == keep.long()).all()):
            # right padding only: causal attention gives every real token the same keys as the padding mask does
            return CpAttention(cp)
        causal = torch.ones(length, length, dtype=torch.bool, device=mask.device).tril()
        mask = (causal & keep[:, None, None, :]) | torch.eye(length, dtype=torch.bool, device=mask.device)
    elif mask.dtype != torch.bool:  # an additive mask (eager's layout): 0 where attended
        mask = mask == 0
    if n_pad:
        size = length + n_pad
        full = torch.eye(size, dtype=torch.bool, device=mask.device).expand(mask.shape[0], 1, size, size).clone()
        full[:, :, :length, :length] = mask
        mask = full
    return CpAttention(cp, mask=mask)


def local_kept(keep: torch.Tensor, length: int, cp: CpGroup) -> tuple[torch.Tensor, torch.Tensor]:
    """(the kept positions `keep` (sorted, of a sequence of `length`) that fall in this rank's slice, their indices
    within the slice). At cp = 1: (keep, keep)."""
    if not cp.active:
        return keep, keep
    chunk = -(-length // cp.size)
    start = cp.rank * chunk
    mine = keep[(keep >= start) & (keep < start + chunk)]
    return mine, mine - start


@dataclass(frozen=True)
class KeptSlice:
    """Which of a micro-batch's kept logit positions this CP rank computed: per-token values read from them are
    computed where local and gathered (`combine`) into the whole sequence's."""

    cp: CpGroup
    positions: torch.Tensor  # every kept position (sorted; the micro-batch's logit_positions)
    mine: torch.Tensor  # this rank's (`local_kept`), the rows of its logits

    def locate(self, kept_index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """For indices into `positions`: (bool, those this rank holds; their rows in its logits)."""
        wanted = self.positions.to(kept_index.device)[kept_index]
        mine = self.mine.to(kept_index.device)
        if mine.numel() == 0:
            return torch.zeros_like(wanted, dtype=torch.bool), wanted[:0]
        row = torch.searchsorted(mine, wanted).clamp(max=mine.numel() - 1)
        held = mine[row] == wanted
        return held, row[held]

    def combine(self, values: torch.Tensor) -> torch.Tensor:
        """Per-token values [N], zero where another rank holds the token -> every rank's values summed. Backward:
        this rank's own share (each rank computes the same loss from the result; `context_parallel`)."""
        return gather_sequence(values.unsqueeze(0), 0, self.cp).sum(dim=0)
