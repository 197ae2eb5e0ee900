"""The trainer's forward: the vision tower runs once per micro-batch, the same way on every rank.

With FSDP2 each vision block all-gathers its parameters when it runs forward (and again in backward
after resharding) and reduce-scatters its gradients in backward; these are collectives, so every rank
must run the vision tower the same number of times in every micro-batch. The model's own forward runs
it once for the images and once more for the videos, and not at all for text-only rows, so ranks whose
micro-batches differ in modality issue different collectives and gloo/NCCL fail or hang.

Here images and videos go through the tower in one call (in every supported family image and video patches
share one layout: rows of pixel_values and a (t, h, w) grid each, and the tower attends within each grid
only) by the model's own `get_image_features`, and the features (with Qwen3-VL's deepstack features) reach
the model's forward as `mm_encoder_outputs`, split into the image and the video grids, which it scatters into
the image and video token positions exactly as it scatters its own. A rank without media in a micro-batch where some
rank has media runs the tower on one blank grid instead; `0 * sum` of that output joins the loss so its
backward runs the same collectives and adds exact zeros to the gradients. Micro-batches where no rank
has media run no tower at all, as before, so the vision parameters keep no gradient there.

All of this happens inside one FSDP forward of the root module (`register_fsdp_forward_method`): the
root's parameters (patch embedding, merger, token embeddings, lm_head) are gathered only there.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any, Protocol, cast

import torch
from torch import nn
from torch.distributed.fsdp import register_fsdp_forward_method
from transformers import PreTrainedConfig
from transformers.modeling_outputs import BaseModelOutputWithPooling

from cosmos_train.context_parallel import NO_CP, CpGroup
from cosmos_train.distributed import all_reduce_sum
from cosmos_train.errors import DataError
from cosmos_train.models.families import family_of
from cosmos_train.train import cp_language
from cosmos_train.train.batching import MicroBatch, model_inputs

_METHOD = "forward_shared_vision"
# (the language model's last hidden states [B, L, H], the model's lm_head) -> what the forward returns
Head = Callable[[torch.Tensor, nn.Module], Any]


class _VisionLanguageCore(Protocol):
    """What this file calls of a supported VLM's core module (`model.model`: Qwen2_5_VLModel, Qwen3VLModel, ...)."""

    def get_image_features(
        self, pixel_values: torch.Tensor, grid_thw: torch.Tensor, /, *, return_dict: bool
    ) -> BaseModelOutputWithPooling: ...

    def __call__(self, **kwargs: Any) -> Any: ...


# nn.Module.__getattr__ is typed Tensor | Module: these name what an HF VLM's attributes are.
def _core(model: nn.Module) -> _VisionLanguageCore:
    return cast(_VisionLanguageCore, model.model)


def _lm_head(model: nn.Module) -> nn.Module:
    return cast(nn.Module, model.lm_head)


def media_in_micro_batches(micro: list[MicroBatch], device: torch.device) -> list[bool]:
    """Per micro-batch index: does any rank's micro-batch hold an image or a video? (One all-reduce;
    every rank splits its share of the global batch into the same number of micro-batches.)"""
    flags = all_reduce_sum(torch.tensor([float(mb.has_media) for mb in micro]), device)
    return [bool(f > 0) for f in flags.tolist()]


def forward_micro_batch(
    model: nn.Module,
    mb: MicroBatch,
    run_vision: bool,
    head: Head | None = None,
    cp: CpGroup = NO_CP,
    **kwargs: Any,
) -> tuple[Any, torch.Tensor | None]:
    """(the model's output on `mb`, a loss term or None): the output equals that of
    `model(**model_inputs(model, mb), **kwargs)`; images and videos go through the vision tower in one call.

    head: instead of the LM head's logits, `head(last hidden states [B, L, H], the model's lm_head)` is
    returned, computed inside the root's FSDP forward where lm_head's weight is gathered (the fused linear +
    cross entropy, `train/linear_ce.py`); `kwargs` then go to the language model (`model.model`).

    run_vision: some rank has media in this micro-batch (`media_in_micro_batches`), so this rank runs
    the tower even without media of its own, on a blank grid; the loss term (zero-valued, not None only
    then) carries that output, and training adds it to the loss before backward.

    cp: a context-parallel group (`train/cp_language.py`): the inputs and the vision tower run whole on every rank
    of it, the language model on this rank's slice of the sequence, and `head` (required) gets that slice's
    hidden states [B, S_padded / cp, H]."""
    if family_of(model).text_only:  # no tower to run (no rank has one), and no rows with media
        if mb.has_media:
            model_type = cast(PreTrainedConfig, model.config).model_type
            raise DataError(
                f"{model_type} is a text-only model (policy.model_name_or_path): a row of "
                "this micro-batch has images or videos; train it on text-only rows, or use a "
                "vision-language model"
            )
        run_vision = False
    if not hasattr(model, _METHOD):
        # The model is the FSDP root built by `parallelize`; registering the method there makes FSDP
        # gather the root's parameters around it as around `forward` (a no-op without FSDP).
        setattr(model, _METHOD, types.MethodType(_forward_shared_vision, model))
        register_fsdp_forward_method(model, _METHOD)
    if not cp.active:
        return getattr(model, _METHOD)(model_inputs(model, mb), run_vision, head, **kwargs)
    if head is None:  # the LM head's logits_to_keep are positions of the whole sequence
        raise ValueError("forward_micro_batch: context parallel reads the hidden states of a slice: give `head`")
    cp_language.use_cp_attention(model)  # before model_inputs, which gives a packed row's bounds to this attention
    with cp_language.split_language_model(model, cp):
        return getattr(model, _METHOD)(model_inputs(model, mb), run_vision, head, **kwargs)


def _forward_shared_vision(
    self: nn.Module, inputs: dict[str, Any], run_vision: bool, head: Head | None, **kwargs: Any
) -> tuple[Any, torch.Tensor | None]:
    """`forward_micro_batch` inside the root's FSDP forward: `self` is the model, `inputs` its
    keyword arguments. It calls `self.forward`, not `self(...)`: FSDP's hooks already ran around it."""
    pixels = [inputs.pop(k) for k in ("pixel_values", "pixel_values_videos") if k in inputs]
    if not pixels and not run_vision:
        return _run(self, head, inputs, kwargs), None
    if not pixels:
        # the smallest grid the spatial merge accepts: one temporal patch of merge x merge patches
        layout = family_of(self).vision_layout
        width = 3 * layout.temporal_patch_size * layout.patch_size**2
        device = inputs["input_ids"].device
        out = _core(self).get_image_features(
            torch.zeros(layout.merge_size**2, width, device=device),
            torch.tensor([[1, layout.merge_size, layout.merge_size]], device=device),
            return_dict=True,
        )
        # made before the language model runs: autograd runs later-made nodes first, so this rank
        # reaches the tower in backward after the language model, as ranks with real media do
        zero = sum(f.sum() for f in _feature_tensors(out)) * 0
        assert isinstance(zero, torch.Tensor)  # the tower returns at least one feature tensor
        return _run(self, head, inputs, kwargs), zero
    image_grid, video_grid = inputs.get("image_grid_thw"), inputs.get("video_grid_thw")
    grids = torch.cat([g for g in (image_grid, video_grid) if g is not None])
    out = _core(self).get_image_features(torch.cat(pixels), grids, return_dict=True)
    n_image = 0 if image_grid is None else int(image_grid.shape[0])
    encoded: dict[str, BaseModelOutputWithPooling] = {}
    for kind, grid, picked in (("image", image_grid, slice(0, n_image)), ("video", video_grid, slice(n_image, None))):
        if grid is not None:
            encoded[kind] = _select_grids(out, picked)
    return _run(self, head, {**inputs, "mm_encoder_outputs": encoded}, kwargs), None


def _run(self: nn.Module, head: Head | None, inputs: dict[str, Any], kwargs: dict[str, Any]) -> Any:
    """The model's forward, or (with `head`) its language model's and `head` on the last hidden states: every
    supported family's forward is `self.model(...)` then `self.lm_head` on the kept positions, so the two agree."""
    if head is None:
        return self.forward(**inputs, **kwargs)
    return head(_core(self)(**inputs, **kwargs).last_hidden_state, _lm_head(self))


def _feature_tensors(out: BaseModelOutputWithPooling) -> list[torch.Tensor]:
    """Every per-grid feature tensor of a `get_image_features` output (merged, and deepstack where present)."""
    deepstack = getattr(out, "deepstack_features", None) or []
    return [*_per_grid(out), *(t for level in deepstack for t in level)]


def _per_grid(out: BaseModelOutputWithPooling) -> tuple[torch.Tensor, ...]:
    """get_image_features' merged features: one tensor per grid in `pooler_output` (typed a single tensor)."""
    pooled = out.pooler_output
    assert pooled is not None  # get_image_features always fills it
    return tuple(pooled)


def _select_grids(out: BaseModelOutputWithPooling, picked: slice) -> BaseModelOutputWithPooling:
    """The features of grids `picked` of a `get_image_features` output (its per-grid tuples sliced), as the
    model's own get_image_features / get_video_features would return them for those grids alone."""
    fields: dict[str, Any] = {"pooler_output": _per_grid(out)[picked]}
    deepstack = getattr(out, "deepstack_features", None)
    if deepstack is not None:
        fields["deepstack_features"] = [tuple(level[picked]) for level in deepstack]
    return type(out)(**fields)
