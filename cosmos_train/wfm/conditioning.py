"""Video2world: generation conditioned on the first latent frames of a real clip, as Cosmos-Predict2.5 does it.

    cond = frame_condition(encode_video(parts, clip_uint8), num_frames=1)      # the clip's first latent frame given
    v = conditioned_velocity(parts.transformer, x, sigma, emb, cond)           # 0 on the given frames
    video = sample_ode(parts.transformer, noise, sigma_schedule(10), emb, cond)  # given frames clean throughout
    log_prob = generated_mean(per_element_log_density, cond)                   # [B], generated frames only

What diffusers' `Cosmos2_5_PredictBasePipeline` (video2world) does, and so what this does: the first k latent frames
of every item are the clip's clean latents (the VAE is causal in time, so the first k latent frames of a whole clip
are the encodes of its first 1 + 4 (k - 1) pixel frames, what the pipeline encodes). The DiT sees them three ways:
the input latents with those frames clean; the condition-mask channel [B, 1, T, H, W], 1 on them (`condition_mask`,
the DiT's extra input channel, zeros in text2world); the per-frame timestep [B, 1, T, 1, 1], 1e-4 on them (the
pipeline's `conditional_frame_timestep`) and the step's sigma on the rest. Their velocity is not used: the pipeline
replaces it, here it is 0 and the sampler puts the clean latents back after every step (`FrameCondition.apply`),
so the given frames are exactly the clip's at every step and in the result. The generated frames alone carry the
policy: Flow-GRPO's step log-probs, the KL and DDRL's data loss are means over generated elements (`generated`).

How many frames (cosmos-rl, read from its installed source): a rollout group (one prompt's num_generations
samples, and the whole batch its rank rolls out) shares one k drawn uniformly from [min_num_conditional_frames,
max_num_conditional_frames] (`WorldFoundationalModel._sync_data_across_rollouts`: one `torch.randint(min, max + 1)`
per data batch), and DDRL's data term on that batch uses the same k (the synced batch carries it into
`Vid2VidCondition.set_video_condition`); without a given k, set_video_condition draws one per item and gives an
image (T = 1) none: `draw_sample_num_conditional_frames`. k = 0 for an item is text2world for that item.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from cosmos_train.wfm.model import predict_velocity
from cosmos_train.wfm.sde import sample_mean, step_mean

CONDITIONAL_FRAME_TIMESTEP = 1e-4  # the pipeline's default conditional_frame_timestep


@dataclass(frozen=True)
class FrameCondition:
    """The conditioning of a batch: clean latents and how many leading latent frames of each item are given."""

    latents: torch.Tensor  # [B, C, T', H', W'] clean normalised latents (frames at or past num_frames are not read)
    num_frames: torch.Tensor  # [B] int64: conditional latent frames per item (0: that item is text2world)

    @property
    def indicator(self) -> torch.Tensor:
        """[B, 1, T', 1, 1] float32, 1 on the conditional frames (the pipeline's cond_indicator)."""
        t = self.latents.shape[2]
        frames = torch.arange(t, device=self.latents.device).view(1, 1, t, 1, 1)
        return (frames < self.num_frames.to(self.latents.device).view(-1, 1, 1, 1, 1)).float()

    @property
    def generated(self) -> torch.Tensor:
        """[B, 1, T', 1, 1] float32, 1 on the frames the model generates."""
        return 1.0 - self.indicator

    def mask(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """[B, 1, T', H', W']: the DiT's condition-mask channel (the pipeline's cond_mask)."""
        b, _, t, h, w = self.latents.shape
        return self.indicator.to(dtype).expand(b, 1, t, h, w)

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        """x with the conditional frames replaced by the clean latents (a new tensor; x untouched)."""
        ind = self.indicator.to(x.dtype)
        return ind * self.latents.to(x.dtype) + (1 - ind) * x

    def timestep(self, sigma: torch.Tensor) -> torch.Tensor:
        """sigma [B] -> the DiT's per-frame timestep [B, 1, T', 1, 1] (float32): CONDITIONAL_FRAME_TIMESTEP on the
        conditional frames, sigma on the rest."""
        ind = self.indicator
        s = sigma.to(ind.device, torch.float32).reshape(-1, 1, 1, 1, 1)
        return ind * CONDITIONAL_FRAME_TIMESTEP + (1 - ind) * s

    def repeat_interleave(self, n: int) -> FrameCondition:
        """Each item n times in a row (a prompt's num_generations samples)."""
        return FrameCondition(self.latents.repeat_interleave(n, dim=0), self.num_frames.repeat_interleave(n, dim=0))

    def rows(self, sl: slice) -> FrameCondition:
        """The items of a slice of the batch (a micro-batch)."""
        return FrameCondition(self.latents[sl], self.num_frames[sl])


def frame_condition(clean_latents: torch.Tensor, num_frames: int | torch.Tensor) -> FrameCondition:
    """The first `num_frames` latent frames of each item of clean_latents [B, C, T', H', W'] given (an int for all
    items, or [B]). ValueError for a count below 0 or above T'."""
    b, t = clean_latents.shape[0], clean_latents.shape[2]
    n = torch.as_tensor(num_frames, dtype=torch.int64).to(clean_latents.device)
    n = n.expand(b).clone() if n.dim() == 0 else n
    if n.shape != (b,):
        raise ValueError(f"num_frames: one count or one per item ({b}), got shape {tuple(n.shape)}")
    if bool((n < 0).any()) or bool((n > t).any()):
        raise ValueError(f"num_frames {n.tolist()}: each must be between 0 and the {t} latent frames")
    return FrameCondition(clean_latents.detach(), n)


def conditioned_velocity(
    transformer: Any, x: torch.Tensor, sigma: torch.Tensor, prompt_embeds: torch.Tensor, cond: FrameCondition | None
) -> torch.Tensor:
    """float32 velocity [B, C, T', H', W'] at noise level sigma [B]; cond None: text2world (predict_velocity as it
    is). With cond: the DiT gets cond.apply(x), the condition-mask channel and the per-frame timestep, and the
    velocity of the conditional frames is 0 (they are given, not generated). Differentiable."""
    if cond is None:
        return predict_velocity(transformer, x, sigma, prompt_embeds).float()
    v = predict_velocity(
        transformer, cond.apply(x), cond.timestep(sigma), prompt_embeds, condition_mask=cond.mask(x.dtype)
    ).float()
    return v * cond.generated


@torch.no_grad()
def sample_ode(
    transformer: Any,
    noise: torch.Tensor,
    sigmas: torch.Tensor,
    prompt_embeds: torch.Tensor,
    cond: FrameCondition | None,
    *,
    guidance: float = 0.0,
    uncond_embeds: torch.Tensor | None = None,
) -> torch.Tensor:
    """Deterministic (Euler ODE) samples from `noise` over `sigmas` (1 -> 0), the conditional frames held clean at
    every step; with guidance > 0, classifier-free guidance against uncond_embeds (both branches get the same
    conditional frames, as the pipeline's negative branch does)."""
    x = noise if cond is None else cond.apply(noise)
    for k in range(len(sigmas) - 1):
        s, s_next = float(sigmas[k]), float(sigmas[k + 1])
        sig = torch.full((x.shape[0],), s, device=x.device)
        v = conditioned_velocity(transformer, x, sig, prompt_embeds, cond)
        if guidance > 0:
            if uncond_embeds is None:
                raise ValueError("guidance > 0 needs uncond_embeds (the empty prompt's embedding)")
            v = v + guidance * (v - conditioned_velocity(transformer, x, sig, uncond_embeds, cond))
        x = step_mean(x, v, s, s_next, torch.tensor(0.0))
        x = x if cond is None else cond.apply(x)
    return x


def generated_mean(per_element: torch.Tensor, cond: FrameCondition | None) -> torch.Tensor:
    """[B]: each item's mean of per_element [B, C, T', H', W'] over its generated elements only (all of them when
    cond is None). An item with every frame given has no generated element and gets 0."""
    return sample_mean(per_element, None if cond is None else cond.generated)


def conditioning_pixels(num_conditional_frames: int, vae_scale_temporal: int = 4) -> int:
    """Pixel frames that k latent frames cover (the VAE keeps the first frame, then vae_scale_temporal per latent
    frame): what to give the pipeline as `video` for k conditional latent frames."""
    if num_conditional_frames < 1:
        raise ValueError(f"num_conditional_frames = {num_conditional_frames}: video2world gives at least 1")
    return 1 + vae_scale_temporal * (num_conditional_frames - 1)


def draw_group_num_conditional_frames(lo: int, hi: int, generator: torch.Generator) -> int:
    """One rollout group's k, uniform in [lo, hi] (cosmos-rl's `WorldFoundationalModel._sync_data_across_rollouts`
    draws `torch.randint(min, max + 1, (1,))` once per synced data batch); drawn from `generator` (on CPU the same
    numbers as the global generator with the same seed)."""
    if not 0 <= lo <= hi:
        raise ValueError(f"need 0 <= min_num_conditional_frames ({lo}) <= max_num_conditional_frames ({hi})")
    return int(torch.randint(lo, hi + 1, (1,), generator=generator, device=generator.device).item())


def draw_sample_num_conditional_frames(
    lo: int,
    hi: int,
    batch: int,
    latent_frames: int,
    generator: torch.Generator | None = None,
    fixed: int | None = None,
) -> torch.Tensor:
    """[batch] int32 k per item, as cosmos-rl's `Vid2VidCondition.set_video_condition`: an image batch
    (latent_frames == 1) gets 0; else `fixed` for every item when given, else uniform in [lo, hi] per item."""
    if latent_frames == 1:
        return torch.zeros(batch, dtype=torch.int32)
    if fixed is not None:
        return torch.ones(batch, dtype=torch.int32) * fixed
    return torch.randint(lo, hi + 1, size=(batch,), generator=generator)


def eval_num_conditional_frames(lo: int, hi: int) -> int:
    """The fixed k of evaluation samples (fixed noise, fixed frames: comparable runs): max(lo, 1) for a
    video2world run (hi > 0), 0 for text2world."""
    return max(lo, 1) if hi > 0 else 0
