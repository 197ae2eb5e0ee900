"""The world-model RL trainer process: Flow-GRPO or DDRL on a Cosmos-Predict DiT, one per rank under torchrun.

    python -m cosmos_train.launch --standalone --nproc_per_node=2 -m cosmos_train.wfm.trainer --config RUN/config.toml
    (normally through `cosmos-train wfm-rl --config configs/tiny-wfm-flow-grpo.toml`, the wfm_rl flow)

An iteration: each rank takes `batch_size` prompts, samples `num_generations` videos per prompt from ONE initial
noise per prompt (one per sample with use_same_seed = false) with the SDE sampler (every step's log-prob recorded),
decodes them with the VAE, scores them (local handlers or the reward service), turns rewards into group advantages,
and trains on a random `timestep_fraction` of the denoising steps (or cosmos-rl's `train_on` steps) with the clipped
policy term (plus kl_beta x the KL to the frozen reference); DDRL adds data_beta x the flow-matching loss on this
rank's dataset videos (the text conditioner's dropout_rate of them with a zeroed prompt). One optimizer step per
pass (mu_iterations passes). The DiT is FSDP2-sharded per block over (dp_replicate, dp_shard x cp); VAE and text
encoder are frozen, replicated. With model_parallel.context_parallel_size = N (wfm/context_parallel.py) the N ranks
of a CP group share their samples (rows and noise by dp_rank) and each runs 1/N of a video's DiT tokens; the
velocity is gathered whole, so everything after the DiT is computed as at N = 1 (the decode and the rewards by
the group's first rank, shared with the others).

Video2world (model.rl.max_num_conditional_frames > 0, wfm/conditioning.py): each rank's rollout group draws k in
[min, max] and continues the first k latent frames of its rows' clips, clean at every step; the log-probs, the KL and
DDRL's data term (same k) cover the generated frames only; evaluation gives eval_num_conditional_frames of each clip.

Evaluation (before training, every [evaluation].every_iter, after): fixed prompts and fixed noise, ODE sampling
(guidance as model.rl.guidance), mean reward, and on held-out dataset videos the flow-matching loss at fixed
sigmas and noise; rank 0 keeps the evaluation videos (RUN/samples/iter_N.npy) for the before/after grid.
Checkpoints: RUN/checkpoints/step_N (DCP, resumable: policy, optimizer, scheduler, RNG, iteration); the export:
RUN/diffusers/final (a diffusers folder). RUN/result.json carries the run-health verdicts ("health",
train/run_health.py, thresholds [trainer.run_health]); with trainer.stop_when_stuck the run ends early when one
holds (saved as at its end, exit 3), as GRPO's does. The run around the iterations (seeding, resume, checkpoints,
agreed stopping on a signal, gradient clipping, the loop, the entry point) is train/loop.py's `BaseTrainer`, shared with
the SFT and GRPO trainers; an iteration is its step. A reward service still unreachable after the client's retries
([reward] max_retries) stops every rank after the same iteration (`score`: agreed before any other collective), the
last completed one saved, exit 75; with web data its shard rows go back to the stream first (`train_step`).

This module is the wiring (the DiT sharded, the optimizer, the loop's hooks, evaluation, checkpoints, export); the
math of an iteration is wfm/rl_step.py's, the rows and their embeddings and latents wfm/train_rows.py's.
"""

from __future__ import annotations

import copy
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar, cast

import numpy as np
import torch
import torch.distributed as torch_dist
from torch import nn
from torch.distributed._composable import checkpoint
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from cosmos_train.distributed import DistInfo, all_reduce_sum, set_data_parallel_average
from cosmos_train.errors import ServiceUnavailable, TrainingDiverged
from cosmos_train.train.loop import BaseTrainer, LoopSettings, run_main
from cosmos_train.train.rollout.sources import outage_agreed
from cosmos_train.wfm import conditioning
from cosmos_train.wfm.conditioning import FrameCondition, conditioned_velocity, frame_condition
from cosmos_train.wfm.config import load_wfm_config
from cosmos_train.wfm.config_schema import WfmConfig
from cosmos_train.wfm.context_parallel import check_context_parallel, enable_context_parallel, share_from_first
from cosmos_train.wfm.losses import advantages
from cosmos_train.wfm.model import (
    decode_latents,
    latent_shape,
    load_wfm,
    transformer_blocks,
)
from cosmos_train.wfm.model_export import export_wfm
from cosmos_train.wfm.rewards import VideoScorer
from cosmos_train.wfm.rl_step import (
    data_loss_backward,
    heldout_loss,
    policy_backward,
    reward_metrics,
    sde_rollout,
    trained_steps,
)
from cosmos_train.wfm.sde import sigma_schedule
from cosmos_train.wfm.train_rows import TrainRows

T = TypeVar("T")


def shard_dit(transformer: nn.Module, dist: DistInfo, cfg: WfmConfig, trainable: bool) -> nn.Module:
    """FSDP2 per DiT block, then the root (embeddings, final layer); activation checkpointing per block first; with
    context parallel, the CP forward and Ulysses self-attention (wfm/context_parallel.py) before, and FSDP's
    gradient reduction summing the CP ranks' shares after."""
    compute = torch.bfloat16 if cfg.model.param_dtype == "bfloat16" else torch.float32
    mp = MixedPrecisionPolicy(param_dtype=compute, reduce_dtype=torch.float32)
    enable_context_parallel(transformer, dist.cp_group)
    if cfg.model.activation_checkpointing and trainable:
        for block in transformer_blocks(transformer):
            checkpoint(block)  # composable: parameter names stay those of the diffusers folder
    for block in transformer_blocks(transformer):
        fully_shard(block, mesh=dist.dp_mesh, mp_policy=mp)
    fully_shard(transformer, mesh=dist.dp_mesh, mp_policy=mp, reshard_after_forward=False)
    set_data_parallel_average(transformer, dist)
    if not trainable:
        transformer.requires_grad_(False)
        transformer.eval()
    return transformer


class WfmTrainer(BaseTrainer[WfmConfig]):
    """The world-model RL trainer: `model` is the DiT being trained (the policy), `reference` its frozen copy when
    kl_beta > 0; a step is one iteration (rollout, rewards, mu_iterations updates)."""

    name = "wfm_rl"

    def __init__(self, cfg: WfmConfig, run_dir: Path, dist: DistInfo):
        if cfg.job.wandb_mode != "disabled":
            os.environ.setdefault("WANDB_MODE", cfg.job.wandb_mode)
        self.rl, self.video = cfg.model.rl, cfg.video
        # video2world (wfm/conditioning.py): rollouts continue the first k latent frames of their dataset clips
        self.video2world = self.rl.max_num_conditional_frames > 0
        self.parts = load_wfm(
            cfg.model.model_name_or_path,
            device=dist.device,
            # cosmos-rl's mock video rows carry their prompt embeddings, as offline ones do
            text_encoder=not self.video.offline_text_embedding and cfg.dataloader_train.mock_video is None,
            revision=cfg.model.model_revision,
        )
        base = self.parts.transformer.float()
        w, h = self.video.video_size  # before any sharding: heads and a video's tokens must divide by the CP size
        check_context_parallel(base, dist.cp, latent_shape(self.parts, self.video.num_frames, h, w))
        self.reference = shard_dit(copy.deepcopy(base), dist, cfg, trainable=False) if self.rl.kl_beta > 0 else None
        model = shard_dit(base, dist, cfg, trainable=True)
        self.params = sum(p.numel() for p in base.parameters())
        o = cfg.optimizer
        optimizer = torch.optim.AdamW(
            model.parameters(), lr=o.lr, betas=o.betas, eps=o.eps, weight_decay=o.weight_decay
        )
        super().__init__(cfg, run_dir, dist, model, optimizer)
        # the run-health verdicts (RUN/result.json's "health"); with trainer.stop_when_stuck followed as it goes. The
        # ratio moves only in a pass after the first: the first recomputes the rollout's own log-probs
        t = cfg.trainer
        self.watch_health(t.run_health, self.rl.mu_iterations > 1, world_model=True, stop=t.stop_when_stuck)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, cfg.scheduler.factor)
        self.total_steps = cfg.trainer.max_iter
        self.scorer = VideoScorer.from_config(cfg.reward)
        self.sigmas = sigma_schedule(self.rl.sample_steps, self.rl.shift)
        self.eval_sigmas = sigma_schedule(self.rl.eval_sample_steps or self.rl.sample_steps, self.rl.shift)
        w, h = self.video.video_size
        self.latent_shape = latent_shape(self.parts, self.video.num_frames, h, w)
        self.data = TrainRows(cfg, self.parts, dist, run_dir)  # the rows, their embeddings and clip latents
        self.web = self.data.web  # type = "web": the rows stream from S3 shards instead of data.train
        self.web_mark: dict[str, Any] | None = None  # its position before the iteration under way
        # evaluation rows: the held-out ones (else the first training rows), each with its own embedding source
        self.eval_rows = list((self.data.heldout or self.data.train)[: cfg.evaluation.num_prompts])
        if self.web is not None:
            self.eval_rows = self.web.first_rows(cfg.evaluation.num_prompts)
        self.eval_after: dict[str, Any] = {}

    # ------------------------------------------------------------------ the config, for the shared loop
    @classmethod
    def loop_settings(cls, cfg: WfmConfig) -> LoopSettings:
        ck = cfg.checkpoint
        return LoopSettings(
            seed=cfg.trainer.seed,
            parallelism=cfg.parallelism,
            ckpt=cfg.ckpt,
            resume=ck.resume,
            resume_key="checkpoint.resume",
            output_dir=cfg.job.output_dir,
            export_final=ck.export_diffusers,
            export_each_save=False,
            validation_freq=cfg.evaluation.every_iter,
            grad_clip=cfg.grad_clip(),
            grad_force_finite=cfg.grad_force_finite(),
            collective_timeout_s=cfg.launch.collective_timeout_s,
        )

    @classmethod
    def load_job_config(cls, path: Path) -> WfmConfig:
        return load_wfm_config(path, env={})

    @classmethod
    def from_args(cls, cfg: WfmConfig, run_dir: Path, dist: DistInfo, args: Any) -> WfmTrainer:
        return cls(cfg, run_dir, dist)

    # ------------------------------------------------------------------ sampling
    def velocity(
        self,
        model: nn.Module,
        x: torch.Tensor,
        sigma: float | torch.Tensor,
        emb: torch.Tensor,
        cond: FrameCondition | None = None,
    ) -> torch.Tensor:
        """float32 velocity of `model` (policy or reference) at one sigma for all, or one per sample ([B]); with
        `cond`, video2world's (0 on the given frames)."""
        sigmas = sigma if isinstance(sigma, torch.Tensor) else torch.full((x.shape[0],), float(sigma), device=x.device)
        return conditioned_velocity(model, x, sigmas, emb, cond)

    def condition_for(self, rows: list[dict[str, Any]], k: int) -> FrameCondition | None:
        """The first k latent frames of each row's clip given (None when k == 0: text2world)."""
        return frame_condition(self.data.clip_latents(rows), k) if k > 0 else None

    def rollout(
        self, emb: torch.Tensor, generator: torch.Generator, cond: FrameCondition | None = None
    ) -> dict[str, torch.Tensor]:
        """The policy's SDE rollout from group-shared noise: trajectory [B, K+1, ...] and log-probs [B, K]
        (`rl_step.sde_rollout`)."""
        return sde_rollout(self.velocity, self.model, emb, generator, self.sigmas, self.rl, self.latent_shape, cond)

    @torch.no_grad()
    def sample_ode(self, emb: torch.Tensor, noise: torch.Tensor, cond: FrameCondition | None = None) -> torch.Tensor:
        """Deterministic samples (Euler ODE), with classifier-free guidance against the empty prompt if asked; with
        `cond`, video2world's (conditioning.sample_ode)."""
        # the config refuses guidance with offline embeddings: the empty prompt has no pickle
        uncond = self.data.embed([{"prompt": ""}] * emb.shape[0]) if self.rl.guidance > 0 else None
        return conditioning.sample_ode(
            self.model, noise, self.eval_sigmas, emb, cond, guidance=self.rl.guidance, uncond_embeds=uncond
        )

    def score(self, latents: torch.Tensor, prompts: list[str]) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray]:
        """Rewards (total, per handler) and the decoded videos. With context parallel the ranks of a CP group hold
        the same samples: its first rank decodes and scores them once and the others receive the rewards (their
        videos come back empty; only global rank 0 keeps videos).

        A reward service still unreachable after the client's retries stops the run on every rank here, together:
        each rank agrees right after its scoring and before the share or any other collective (`agree_on_outage`),
        and raises ServiceUnavailable, which the loop turns into a saved stop (the last completed iteration)."""
        cp = self.dist.cp_group
        if cp.rank > 0:
            self.agreed(lambda: None)  # nothing scored here: only the agreement the scoring ranks reach
            total, parts = share_from_first(cp, None)
            return total, parts, np.zeros((0,), np.uint8)
        videos = decode_latents(self.parts, latents).cpu().numpy()
        total, parts = self.agreed(lambda: self.scorer.score(videos, latents.float().cpu().numpy(), prompts))
        share_from_first(cp, (total, parts))
        return total, parts, videos

    def agreed(self, scoring: Callable[[], T]) -> T:
        """`scoring()`, then every rank's word on the reward service (one all-reduce; none with local rewards, which
        have no service to lose and the same config on every rank)."""
        if self.scorer.client is None:
            return scoring()
        return outage_agreed(scoring)

    # ------------------------------------------------------------------ one iteration
    def step_inputs(self) -> Iterator[tuple[list[dict[str, Any]], None]]:
        """This rank's prompts of each iteration (`rows_for`: a function of the iteration alone)."""
        while True:
            if self.web is not None:  # the shard stream's next rows (its position is checkpointed)
                self.web_mark = self.web.mark()  # the position before them, for an iteration that stops (train_step)
                yield self.web.take(self.video.batch_size), None
            else:
                yield self.data.rows_for(self.step, self.data.train, self.video.batch_size), None

    def train_step(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """One iteration. One that stops before its update because the reward service is gone hands its shard rows
        back (the checkpoint the loop then saves holds the stream where this iteration took them), so the resumed run
        trains on them as an uninterrupted one would; `rows_for` needs nothing: its rows follow the iteration."""
        try:
            return self.iteration(rows)
        except ServiceUnavailable:
            if self.web is not None and self.web_mark is not None:
                self.web.rewind(self.web_mark)
            raise

    def iteration(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        t0 = time.perf_counter()
        rl, dev = self.rl, self.dist.device
        group_rows = [r for r in rows for _ in range(rl.num_generations)]
        emb = self.data.embed(group_rows)
        gen = torch.Generator(device=dev).manual_seed(
            # dp_rank: the ranks of one context-parallel group draw the same noise (they share the samples)
            self.cfg.trainer.seed * 1_000_003 + self.step * 997 + self.dist.dp_rank
        )
        # video2world: one k per rollout group (this rank's batch), as cosmos-rl; DDRL's data term uses it too
        k_cond = (
            conditioning.draw_group_num_conditional_frames(
                rl.min_num_conditional_frames, rl.max_num_conditional_frames, gen
            )
            if self.video2world
            else 0
        )
        group_cond = self.condition_for(rows, k_cond)
        group_cond = None if group_cond is None else group_cond.repeat_interleave(rl.num_generations)
        traj = self.rollout(emb, gen, group_cond)
        rewards, parts, _ = self.score(traj["xs"][:, -1], [r["prompt"] for r in group_rows])
        adv = advantages(torch.as_tensor(rewards, dtype=torch.float32), rl.num_generations, rl.adv_clip_max).to(dev)
        t_rollout = time.perf_counter() - t0

        stats: dict[str, list[float]] = {"clip_frac": [], "ratio": [], "kl": [], "policy_loss": [], "data_loss": []}
        grad_norms = []
        finite = True
        for _ in range(rl.mu_iterations):
            steps = self.trained_steps(gen)
            self.optimizer.zero_grad(set_to_none=True)
            policy_backward(
                self.velocity, self.model, self.reference, traj, self.sigmas, emb, adv, group_cond, steps, rl, stats
            )
            if rl.algorithm == "ddrl" and rl.data_beta > 0:
                stats["data_loss"].append(self._data_loss_backward(gen, k_cond))
            grad_norms.append(self.clip_gradients())
            finite = finite and bool(np.isfinite(grad_norms[-1]))
            if finite:
                self.optimizer.step()
            self.scheduler.step()
        if not finite:
            raise TrainingDiverged(
                f"iteration {self.step + 1}: the gradient norm is {grad_norms[-1]}, not "
                f"finite; lower optimizer.lr (now {self.cfg.optimizer.lr:g}) or keep "
                "trainer.grad_clip_norm > 0. Nothing was exported from these weights."
            )
        if self.reference is not None and rl.update_ref_every_iter and (self.step + 1) % rl.update_ref_every_iter == 0:
            self.reference.load_state_dict(self.model.state_dict())
        values: dict[str, Any] = {
            **reward_metrics(rewards, parts, rl.num_generations, dev),
            "grad_norm": float(np.mean(grad_norms)),
            "lr": self.scheduler.get_last_lr()[0],
            "rollout_time": t_rollout,
            "step_time": time.perf_counter() - t0,
        }
        if self.video2world:  # the mean over ranks of each rank's k (one per rollout group)
            values["num_conditional_frames"] = float(all_reduce_sum(float(k_cond), dev)) / self.dist.world_size
        for key, vals in stats.items():
            if vals:
                values[key] = float(np.mean(vals))
        return values

    def trained_steps(self, gen: torch.Generator) -> list[int]:
        """The denoising steps trained this pass (`rl_step.trained_steps`)."""
        return trained_steps(self.rl, gen, self.dist.device)

    def _data_loss_backward(self, gen: torch.Generator, k_cond: int = 0) -> float:
        """DDRL's data term on this rank's dataset videos, backward (`rl_step.data_loss_backward`)."""
        rows = (
            self.web.take(self.video.batch_size)
            if self.web is not None
            else self.data.rows_for(self.step, self.data.train, self.video.batch_size, salt=1)
        )
        x0 = self.data.clip_latents(rows)
        emb = self.data.embed(rows)
        dropout, beta = self.cfg.text_dropout_rate(), self.rl.data_beta
        return data_loss_backward(self.velocity, self.model, x0, emb, gen, k_cond, dropout, beta)

    # ------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def evaluate(self) -> dict[str, Any]:
        """Mean reward of ODE samples for the fixed prompts and noise; the held-out flow-matching loss."""
        dev = self.dist.device
        rows = self.eval_rows
        prompts = [r["prompt"] for r in rows]
        emb = self.data.embed(rows)
        gen = torch.Generator(device=dev).manual_seed(self.cfg.evaluation.seed)
        noise = torch.randn((len(rows), *self.latent_shape), generator=gen, device=dev)
        k_eval = conditioning.eval_num_conditional_frames(
            self.rl.min_num_conditional_frames, self.rl.max_num_conditional_frames
        )
        latents = self.sample_ode(emb, noise, self.condition_for(rows, k_eval))
        rewards, parts, videos = self.score(latents, prompts)
        out: dict[str, Any] = {
            "reward_mean": float(rewards.mean()),
            **{f"reward_{k}": float(v.mean()) for k, v in parts.items()},
        }
        if self.dist.is_main:
            samples = self.run_dir / "samples"
            samples.mkdir(exist_ok=True)
            np.save(samples / f"iter_{self.step}.npy", videos)
            (samples / "prompts.json").write_text(json.dumps(prompts))
        if self.data.heldout:
            x0 = self.data.clip_latents(self.data.heldout)
            hemb = self.data.embed(self.data.heldout)
            seed = self.cfg.evaluation.seed + 1
            out["heldout_diffusion_loss"] = heldout_loss(self.velocity, self.model, x0, hemb, seed, k_eval, dev)
        return out

    # ------------------------------------------------------------------ around the loop
    def export(self, name: str) -> Path | None:
        """RUN/diffusers/<name>: the base folder with the trained transformer (every rank gathers; rank 0 writes)."""
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        # full_state_dict: every value is a plain tensor (the result is typed for any state dict)
        sd = cast(dict[str, torch.Tensor], get_model_state_dict(self.model, options=options))
        out = self.run_dir / "diffusers" / name
        if self.dist.is_main:
            export_wfm(self.cfg.model.model_name_or_path, sd, out, revision=self.cfg.model.model_revision)
            self.log(f"exported {out}")
        if torch_dist.is_initialized():
            torch_dist.barrier()
        return out

    def describe(self) -> str:
        data = f"{len(self.web.urls)} shards" if self.web is not None else f"{len(self.data.train)} prompts/rows"
        return (
            f"{self.rl.algorithm}: {self.params:,} DiT parameters, {data}, "
            f"{self.video.batch_size} x {self.rl.num_generations} samples per data-parallel rank per iteration, "
            f"{self.total_steps} iterations, {self.dist.world_size} ranks"
            + (f" ({self.dist.dp_size} data-parallel x context parallel {self.dist.cp})" if self.dist.cp > 1 else "")
        )

    @property
    def validating(self) -> bool:
        return True  # before training, every evaluation.every_iter and after: always

    def validate_and_log(self) -> None:
        self.eval_after = self.evaluate()
        self.log_validation(self.eval_after)

    def before_loop(self) -> None:
        if self.step == 0:
            before = self.evaluate()
            self.log_validation(before)
            self.log(f"before training: {before}")

    def after_loop(self) -> None:
        self.scorer.close()

    def result_extra(self) -> dict[str, Any]:
        data = self.web.report() if self.web is not None else self.data.report
        return {"algorithm": self.rl.algorithm, "data": data, "eval_after": self.eval_after}

    def checkpoint_extra(self) -> dict[str, Any]:
        extra = super().checkpoint_extra()
        if self.web is not None:  # every rank's shard position (a collective: all ranks save)
            extra["web_data"] = self.web.state_dict()
        return extra

    def restore_extra(self, extra: dict[str, Any]) -> None:
        super().restore_extra(extra)
        if self.web is not None and "web_data" in extra:
            self.web.load_state_dict(extra["web_data"])


def main(argv: list[str] | None = None) -> int:
    return run_main(WfmTrainer, argv)


if __name__ == "__main__":
    sys.exit(main())
