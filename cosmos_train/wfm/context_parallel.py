"""Context parallel for the DiT (diffusers' CosmosTransformer3DModel): each rank of a CP group holds 1/cp of the
video tokens through every block.

    enable_context_parallel(transformer, dist.cp_group)   # before fully_shard (wfm/trainer.py shard_dit does it)

What changes, and why it is done this way:
- A forward of ours (`cp_forward`, installed as the instance's `forward`) runs the steps of diffusers' forward
  (diffusers 0.42's `CosmosTransformer3DModel.forward`, step for step) with the token sequence split after the
  patch embedding: this rank's contiguous slice of the T'H'W' tokens, with the RoPE cos / sin, the learnable
  position embedding and a per-frame timestep embedding sliced to the same positions. The root module is still
  called (`transformer(...)`), so FSDP2's hooks on it and on each block run as before, and parameter names stay
  the diffusers folder's (checkpoints and exports are the same at every cp size; resuming at another cp size is
  DCP's ordinary resharding). A forward hook on patch_embed alone cannot do it: the root's forward computes
  RoPE, the per-token timestep embedding and the unpatchify for the whole sequence from the input's shape.
- Self-attention (each block's attn1) goes through `UlyssesAttnProcessor`, a diffusers attention processor:
  q / k / v of the local tokens, QK-norm and RoPE on the local tokens, then `ulysses_attention` (all-to-all to
  heads/cp over the whole sequence, sdpa, all-to-all back). Cross-attention to the text (attn2) is local: the
  text is whole on every rank and each token's query attends to it alone.
- The output projection's tokens are gathered (`gather_sequence`) before the unpatchify, so the velocity is the
  whole video on every CP rank: the SDE log-probs, the policy and flow-matching losses and the rewards are
  computed exactly as at cp = 1. Backward: each rank's gradient is its tokens' share (gather's backward takes
  this rank's slice); `distributed.set_data_parallel_average` makes FSDP sum the shares over the CP ranks.
- What every rank of a group would then compute alike but should compute once (decoding and scoring the
  videos: one reward request per group, not N) runs on the group's first rank (`share_from_first`).

The tokens must divide by cp (ConfigError from `check_context_parallel` naming the video size and frames), and
the attention heads too (the config check refuses it before any process starts). At cp = 1 nothing is installed.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from cosmos_train.context_parallel import CpGroup, gather_sequence, split_sequence, ulysses_attention
from cosmos_train.errors import ConfigError


class UlyssesAttnProcessor:
    """diffusers' CosmosAttnProcessor2_0 for self-attention, with the attention over the whole sequence from the
    local tokens (Ulysses)."""

    def __init__(self, cp: CpGroup):
        self.cp = cp

    def __call__(
        self,
        attn: Any,  # diffusers' Attention
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        image_rotary_emb: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        if encoder_hidden_states is not None or attention_mask is not None:
            raise ValueError("UlyssesAttnProcessor is for the DiT's self-attention (attn1): no context, no mask")
        from diffusers.models.embeddings import apply_rotary_emb  # why: diffusers is heavy, world-model code only

        heads = attn.heads
        q, k, v = (
            proj(hidden_states).unflatten(2, (heads, -1)).transpose(1, 2) for proj in (attn.to_q, attn.to_k, attn.to_v)
        )
        q, k = attn.norm_q(q), attn.norm_k(k)
        if image_rotary_emb is not None:  # cos / sin of this rank's positions (cp_forward slices them)
            q = apply_rotary_emb(q, image_rotary_emb, use_real=True, use_real_unbind_dim=-2)
            k = apply_rotary_emb(k, image_rotary_emb, use_real=True, use_real_unbind_dim=-2)
        out = ulysses_attention(q, k, v, self.cp, attend=F.scaled_dot_product_attention)
        out = out.transpose(1, 2).flatten(2, 3).type_as(q)
        return attn.to_out[1](attn.to_out[0](out))


def share_from_first(cp: CpGroup, value: Any) -> Any:
    """CP rank 0's `value` (any picklable object) on every rank of the group; the other ranks pass None. The
    identity when cp is inactive. Used for what all ranks of a group would compute alike from the gathered
    velocity but should compute once: decoding and scoring the group's videos (N reward requests -> 1)."""
    if not cp.active:
        return value
    box = [value]
    src = dist.get_global_rank(cp.group, 0) if cp.group is not None else 0  # None: the default group
    dist.broadcast_object_list(box, src=src, group=cp.group)
    return box[0]


def check_context_parallel(transformer: Any, cp_size: int, latent: tuple[int, int, int, int]) -> None:
    """ConfigError unless the DiT's heads and the tokens of a latent video (C, T', H', W') divide by cp_size."""
    if cp_size == 1:
        return
    config = transformer.config
    problems = []
    heads = int(config.num_attention_heads)
    if heads % cp_size:
        problems.append(
            f"model_parallel.context_parallel_size = {cp_size}: the DiT has {heads} attention heads, which do "
            f"not divide by {cp_size} (Ulysses context parallel gives each rank heads / cp of them); use a size "
            "that divides the heads"
        )
    p_t, p_h, p_w = config.patch_size
    _, t, h, w = latent
    tokens = (t // p_t) * (h // p_h) * (w // p_w)
    if tokens % cp_size:
        problems.append(
            f"model_parallel.context_parallel_size = {cp_size}: a video is {tokens} DiT tokens "
            f"({t // p_t} latent frames x {h // p_h} x {w // p_w} patches, from "
            "dataloader_train.video_dataloader.num_frames and video_size), which do not divide by "
            f"{cp_size}; change num_frames or video_size, or the context-parallel size"
        )
    if problems:
        raise ConfigError(problems)


def enable_context_parallel(transformer: Any, cp: CpGroup) -> Any:
    """Install the CP forward and the Ulysses self-attention on `transformer` (before fully_shard); a no-op
    when cp is inactive. The state dict is untouched."""
    if not cp.active:
        return transformer
    if transformer.config.num_attention_heads % cp.size:
        raise ValueError(f"{transformer.config.num_attention_heads} heads do not divide by cp {cp.size}")
    for block in transformer.transformer_blocks:
        block.attn1.set_processor(UlyssesAttnProcessor(cp))
    transformer.forward = functools.partial(cp_forward, transformer, cp)
    return transformer


def cp_forward(
    self: Any,
    cp: CpGroup,
    hidden_states: torch.Tensor,
    timestep: torch.Tensor,
    encoder_hidden_states: torch.Tensor | tuple[torch.Tensor, torch.Tensor | None],
    block_controlnet_hidden_states: list[torch.Tensor] | None = None,
    attention_mask: torch.Tensor | None = None,
    fps: int | None = None,
    condition_mask: torch.Tensor | None = None,
    padding_mask: torch.Tensor | None = None,
    return_dict: bool = True,
) -> Any:
    """diffusers' CosmosTransformer3DModel.forward with the tokens split over the CP group (the numbered steps
    are diffusers'); the same arguments and output. ControlNet residuals are not supported."""
    from diffusers.models.modeling_outputs import Transformer2DModelOutput  # why: diffusers only for world models

    if block_controlnet_hidden_states is not None:
        raise ValueError("context parallel: ControlNet residuals are not supported")
    batch_size, _, num_frames, height, width = hidden_states.shape

    # 1. Concatenate the condition and padding masks
    if condition_mask is not None:
        hidden_states = torch.cat([hidden_states, condition_mask], dim=1)
    if self.config.concat_padding_mask:
        if padding_mask is None:
            raise ValueError("this DiT concatenates a padding mask (concat_padding_mask): pass padding_mask")
        # torchvision's NEAREST resize of a tensor is this interpolate (torchvision is not a dependency here)
        padding_mask_resized = F.interpolate(padding_mask, size=list(hidden_states.shape[-2:]), mode="nearest")
        hidden_states = torch.cat(
            [hidden_states, padding_mask_resized.unsqueeze(2).repeat(batch_size, 1, num_frames, 1, 1)], dim=1
        )
    if attention_mask is not None:
        attention_mask = attention_mask.unsqueeze(1).unsqueeze(1)  # [B, 1, 1, S]: text keys, whole on every rank

    # 2. Positional embeddings (of the whole video), then this rank's positions
    cos, sin = self.rope(hidden_states, fps=fps)
    image_rotary_emb = (split_sequence(cos, 0, cp), split_sequence(sin, 0, cp))
    extra_pos_emb = self.learnable_pos_embed(hidden_states) if self.config.extra_pos_embed_type else None
    if extra_pos_emb is not None:
        extra_pos_emb = split_sequence(extra_pos_emb, 1, cp)

    # 3. Patchify, then this rank's tokens
    p_t, p_h, p_w = self.config.patch_size
    post_patch_num_frames, post_patch_height, post_patch_width = num_frames // p_t, height // p_h, width // p_w
    hidden_states = self.patch_embed(hidden_states).flatten(1, 3)  # [B, T'H'W', C]
    full_tokens = hidden_states
    hidden_states = split_sequence(hidden_states, 1, cp)

    # 4. Timestep embeddings: one per sample ([B] timestep), or one per token of a frame ([B, 1, T, 1, 1])
    if timestep.ndim == 1:
        temb, embedded_timestep = self.time_embed(full_tokens, timestep)
    elif timestep.ndim == 5:
        if timestep.shape != (batch_size, 1, num_frames, 1, 1):
            raise ValueError(f"Expected timestep to have shape [B, 1, T, 1, 1], but got {timestep.shape}")
        temb, embedded_timestep = self.time_embed(full_tokens, timestep.flatten())
        temb, embedded_timestep = (
            split_sequence(
                x.view(batch_size, post_patch_num_frames, 1, 1, -1)
                .expand(-1, -1, post_patch_height, post_patch_width, -1)
                .flatten(1, 3),
                1,
                cp,
            )
            for x in (temb, embedded_timestep)
        )
    else:
        raise ValueError(f"Expected timestep to have shape [B, 1, T, 1, 1] or [T], but got {timestep.shape}")

    # 5. Text (and image) context: whole on every rank
    text_context, img_context = (
        encoder_hidden_states if isinstance(encoder_hidden_states, tuple) else (encoder_hidden_states, None)
    )
    if self.config.use_crossattn_projection:
        text_context = self.crossattn_proj(text_context)
    if img_context is not None and self.config.img_context_dim_in:
        img_context = self.img_context_proj(img_context)
    context = (text_context, img_context) if isinstance(encoder_hidden_states, tuple) else text_context

    # 7. Blocks (called as modules: FSDP2's and activation checkpointing's hooks run)
    for block in self.transformer_blocks:
        args = (hidden_states, context, embedded_timestep, temb, image_rotary_emb, extra_pos_emb, attention_mask)
        if torch.is_grad_enabled() and self.gradient_checkpointing:
            hidden_states = self._gradient_checkpointing_func(block, *args, None)
        else:
            hidden_states = block(*args, None)

    # 8. Output norm and projection of the local tokens, all tokens gathered, unpatchify (diffusers' permutation)
    hidden_states = self.proj_out(self.norm_out(hidden_states, embedded_timestep, temb))
    hidden_states = gather_sequence(hidden_states, 1, cp)
    hidden_states = hidden_states.unflatten(2, (p_h, p_w, p_t, -1))
    hidden_states = hidden_states.unflatten(1, (post_patch_num_frames, post_patch_height, post_patch_width))
    hidden_states = hidden_states.permute(0, 7, 1, 6, 2, 4, 3, 5)
    hidden_states = hidden_states.flatten(6, 7).flatten(4, 5).flatten(2, 3)
    if not return_dict:
        return (hidden_states,)
    return Transformer2DModelOutput(sample=hidden_states)
