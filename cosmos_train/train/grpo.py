"""The GRPO trainer: one process per rank, the policy on FSDP2 / TP as in SFT, a rollout engine beside it.

    python -m torch.distributed.run --nproc_per_node=2 -m cosmos_train.train.grpo --config RUN/config.toml
    cosmos-train grpo --config configs/tiny-grpo.toml          # the same through the Prefect flow

A step, on every rank for its share of the step's prompts (`Config.prompts_per_step`: train.train_batch_per_replica /
n_generation, as in cosmos-rl, where a step trains on train_batch_per_replica completions per replica):
1. rollout: the rank's engine (HF on CPU, vLLM on GPU, colocated) samples `rollout.n_generation`
   completions per prompt; the reward set scores them; advantages are normalised per group
   (`train/rollout.py`; variant "dapo" drops all-equal groups and samples more prompts);
2. the completions become sequences (`train/rl_batch.py`), one optimizer update per `mu_iterations` pass over
   all of them, in micro-batches of `micro_batch` completions (cosmos-rl's mini-batches; `train/step.py`,
   shared with SFT): each micro-batch's loss is normalised over its own tokens (`rl_losses.aggregate`)
   and weighted by its share of the rank's completions, and data-parallel ranks are averaged, as
   cosmos-rl's `compute_loss` does (balance_dp_token and our loss_denominator = "update" change the
   denominator); old log-probs are the trainer's own (recomputed when the policy moves within the step)
   or the engine's; the reference model (kl_beta > 0) is a frozen copy sharded like the policy; the
   learning-rate schedule ticks once a step, however many updates it made (cosmos-rl's);
3. every `train.sync_weight_interval` steps the policy's weights go into the engine (in place, version =
   step); every `validation.freq` steps the engine answers the validation rows and the best weights by
   validation accuracy (or reward) are exported to safetensors/best.
The rollout comes from one `RolloutSource` chosen when the trainer starts (`train/rollout_source.py`): the
colocated engine above, or, with on_policy = false (unset: on a GPU), a worker process per rank sampling ahead
of training.

Checkpoints carry policy, optimizer, scheduler, RNG, step, data position, weight version and the best
score so far; sampling seeds derive from (seed, step, rank), so a resumed run equals an uninterrupted one.
RUN/metrics.jsonl gets a "train" row per step and "val" rows; RUN/completions.jsonl (metrics.SAMPLES_FILE)
a sample of completions with their rewards every `logging.completion_sample_freq` steps; RUN/result.json the run's
run-health verdicts ("health", `train/run_health.py`). With train.stop_when_stuck the run ends early (saved as at
its end, exit 3) when a verdict holds (the shared loop's `end_early`: train/loop.py). A reward
service that stays unreachable stops every rank after the last completed step, saved, exit 75 (`rollout_source`).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as torch_dist

from cosmos_train.config import Config, ConfigError
from cosmos_train.data.chat import EncodedChat
from cosmos_train.data.frame_memo import FrameMemo
from cosmos_train.data.prompt import prompt_messages, reference_answer, user_text
from cosmos_train.distributed import DistInfo, all_reduce_max, all_reduce_sum
from cosmos_train.errors import DataError
from cosmos_train.generation import Chat
from cosmos_train.rewards import RewardContext, accuracy_reward, combine, register_script_rewards, weights_of
from cosmos_train.train.batching import MicroBatch, split_micro_batches
from cosmos_train.train.cp_language import KeptSlice
from cosmos_train.train.data import load_train_samples
from cosmos_train.train.loop import run_main
from cosmos_train.train.rl_batch import RLSample, behav_tensor, check_prompt_ids, shared_prefix_batch
from cosmos_train.train.rl_losses import PolicyLossConfig, aggregate, policy_loss, token_entropy
from cosmos_train.train.rollout import SEED_MOD, Group, Rollout, grpo_policy, training_rewards, validation_sampling
from cosmos_train.train.rollout_colocated import ColocatedRollout
from cosmos_train.train.rollout_source import RolloutSource, asynchronous_rollout, outage_agreed
from cosmos_train.train.rollout_stats import RolloutSums
from cosmos_train.train.rollout_worker import WorkerRollout
from cosmos_train.train.run_health import ratio_moves_of
from cosmos_train.train.sampler import DataPosition, GlobalBatchSampler
from cosmos_train.train.step import apply_update, backward_micro_batches, forward_logits
from cosmos_train.train.trainer import Trainer, load_policy, peak_memory_gb
from cosmos_train.train.vision_forward import media_in_micro_batches
from cosmos_train.vision.processor import get_tokenizer
from cosmos_train.vision.settings import VisionSettings

VISION_TOKENS = ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>")
# policy_loss metrics averaged over the step's completion tokens
_TOKEN_METRICS = (
    "kl",
    "clip_low_fraction",
    "clip_high_fraction",
    "dual_clip_fraction",
    "ratio_mean",
    "is_weight_mean",
    "is_capped_fraction",
    "entropy",
)


class _Micro:
    """One micro-batch of RL samples in the shared-prompt layout (`rl_batch.shared_prefix_batch`), with
    what the loss needs beside the logits, as [samples, longest completion] grids."""

    def __init__(self, samples: list[RLSample], rope_index: Any, weight: float = 1.0):
        self.batch, self.layout = shared_prefix_batch(samples, rope_index)
        # weight 0: a copy that only keeps this rank's collectives in step with the others
        in_loss = torch.tensor([float(s.in_loss) * weight > 0 for s in samples])
        ignore = torch.tensor([s.ignore_prefix for s in samples])
        after_prefix = torch.arange(self.layout.width).unsqueeze(0) >= ignore.unsqueeze(1)
        self.mask = self.layout.token_mask() & in_loss.unsqueeze(1) & after_prefix
        self.count = len(samples) if weight > 0 else 0  # completions of the rank's update it holds
        self.advantages = torch.tensor([s.advantage for s in samples], dtype=torch.float32)
        self.behav = self.layout.grid(torch.cat([s.behav_logprobs.float() for s in samples]))
        self.completions_in_loss = int(in_loss.sum())
        self.old: torch.Tensor | None = None
        self.ref: torch.Tensor | None = None


@dataclass(frozen=True)
class _LossScales:
    """How the micro-batches of one optimizer update enter its loss (`GRPOTrainer._loss_scales`)."""

    normalisers: list[float | None]  # per micro-batch: the loss's denominator (None: its own tokens / completions)
    shares: list[float]  # per micro-batch: its completions / the rank's completions in the update
    dp_factor: float  # the loss x this: dp_size where the denominator spans the ranks (FSDP then averages)
    whole_update: bool = False  # loss_denominator = "update"
    total: float = 0.0  # completion tokens of the update on every rank (0: nothing to learn)


class GRPOTrainer(Trainer):
    name = "grpo"

    def __init__(self, cfg: Config, run_dir: Path, dist: DistInfo, dataset_script: str | None = None):
        super().__init__(cfg, run_dir, dist, dataset_script)
        t = cfg.train
        self.policy_cfg = policy_cfg = grpo_policy(cfg)
        if dataset_script:
            register_script_rewards(dataset_script)
        self.rewards = training_rewards(cfg, get_tokenizer(self.processor))
        val_remote = cfg.validation.use_remote_reward
        val_remote = policy_cfg.use_remote_reward if val_remote is None else val_remote
        # cosmos-rl validates through the remote service too when training does (it picks which weights are best):
        # the service scores its rewards, the local functions the others
        val_local = weights_of(cfg.validation.reward_function or policy_cfg.reward_function)
        if val_remote:
            remote_names = {f.name for f in policy_cfg.remote_reward.reward_fns}
            val_local = {k: v for k, v in val_local.items() if k not in remote_names}
        self.val_rewards = combine(
            val_local,
            remote=policy_cfg.remote_reward if val_remote else None,
            context=RewardContext.from_config(cfg, get_tokenizer(self.processor)),
        )
        self.rows = load_train_samples(cfg, run_dir, "train", dataset_script)
        self.val_rows = load_train_samples(cfg, run_dir, "val", dataset_script) if cfg.validation.enable else []
        prompts = cfg.prompts_per_step
        if prompts % dist.dp_size:
            raise ConfigError(
                [
                    f"the {prompts} prompt(s) of a step (train.train_batch_per_replica / rollout.n_generation, "
                    f"at least 1) must be divisible by the {dist.dp_size} data-parallel rank(s) "
                    f"({dist.world_size} processes / tp_size {dist.tp} / cp_size {dist.cp}): each rank samples whole "
                    "groups for an equal share of the prompts; raise "
                    "train.train_batch_per_replica or run fewer data-parallel ranks"
                ]
            )
        self.sampler = GlobalBatchSampler(
            len(self.rows),
            prompts,
            dist.dp_size,
            dist.dp_rank,
            shuffle=policy_cfg.dataloader_shuffle,
            seed=policy_cfg.dataloader_seed,
            drop_last=True,
        )
        per_epoch = self.sampler.steps_per_epoch()
        if per_epoch == 0:
            raise DataError(
                f"{len(self.rows)} training row(s) make no step of {prompts} prompts: add rows or lower "
                "train.train_batch_per_replica"
            )
        total_steps = per_epoch * t.epoch
        if t.max_num_steps is not None:
            total_steps = min(total_steps, t.max_num_steps)
        # cosmos-rl's steps in one step here: 1, or n_generation / train_batch_per_replica when a group is more
        # than a step's completions; each makes mu_iterations optimizer updates and one schedule tick
        self.rl_steps_per_step = cfg.rl_steps_per_step
        self.init_schedule(total_steps, total_steps * self.rl_steps_per_step)
        self.reference = load_policy(cfg, dist, trainable=False)[0] if policy_cfg.kl_beta > 0 else None
        self.loss_cfg = PolicyLossConfig(
            epsilon_low=policy_cfg.epsilon_low,
            epsilon_high=policy_cfg.epsilon_high,
            dual_clip=policy_cfg.lower_bound_ratio,
            sequence_ratio=policy_cfg.variant == "gspo",
            kl_beta=policy_cfg.kl_beta,
            unbiased_kl=policy_cfg.unbiased_kl_estimate,
            decoupled=policy_cfg.use_decoupled_loss,
            is_cap=policy_cfg.behav_imp_weight_cap,
            loss_type=policy_cfg.loss_type,
            max_tokens=policy_cfg.unbiased_loss_max_tokens,
        )
        # the trainer's log-probs are of softmax(logits / train_policy.temperature), as in cosmos-rl; the engine
        # samples at rollout.sampling_config.temperature (config checks they agree where engine log-probs count)
        self.temperature = policy_cfg.temperature
        self.rollout_source = self._rollout_source(dataset_script)
        # the prompts' clips, decoded once: an in-process engine has just decoded them into its own memo
        engine_frames = self.rollout_source.frames
        self.frames = engine_frames if engine_frames is not None else FrameMemo(max_bytes=1 << 30)
        self.vision_defaults = self._vision_defaults()
        self.weight_version = 0
        self.best: dict[str, Any] | None = None
        ids = get_tokenizer(self.processor).convert_tokens_to_ids(list(VISION_TOKENS))
        self.vision_ids = {i for i in (ids if isinstance(ids, list) else [ids]) if isinstance(i, int) and i >= 0}
        self.vision_token_completions = 0
        # the run-health verdicts: RUN/result.json's "health"; with train.stop_when_stuck followed step by step
        self.watch_health(t.run_health, ratio_moves_of(policy_cfg), world_model=False, stop=t.stop_when_stuck)

    def _kept(self, mb: MicroBatch, keep: torch.Tensor) -> KeptSlice | None:
        """With context parallel, which of `mb`'s kept positions this rank's logits hold (`forward_logits`)."""
        cp = self.dist.cp_group
        if not cp.active:
            return None
        assert mb.logit_positions is not None  # the shared-prompt layout always names them
        return KeptSlice(cp, mb.logit_positions, keep)

    def _rollout_source(self, dataset_script: str | None) -> RolloutSource:
        """Asynchronous rollout runs one engine per rank in a worker process; synchronous rollout the rank's
        colocated engine (`asynchronous_rollout` decides which, from on_policy, tp_size and the device)."""
        local_procs = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        worker, why = asynchronous_rollout(
            self.policy_cfg.on_policy, self.cfg.rollout.parallelism.tp_size, self.dist.device
        )
        self.log(f"rollout {'asynchronous' if worker else 'synchronous'}: {why}")
        if worker:  # a trainer and a worker process per rank compute at once
            return WorkerRollout(self.cfg, self.run_dir, dataset_script, self.dist, 2 * local_procs, self.model_dir)
        return ColocatedRollout(self.cfg, self.dist, self.rewards, self.rows, processes_per_host=local_procs)

    def _vision_defaults(self) -> VisionSettings | None:
        defaults = self.policy_cfg.dataset.vision.as_part_defaults()
        return VisionSettings(**defaults) if defaults else None

    # ------------------------------------------------------------------ checkpoint contents
    def checkpoint_extra(self) -> dict[str, Any]:
        return {
            **super().checkpoint_extra(),
            "weight_version": self.weight_version,
            "best": self.best,
            "reference": "initial policy" if self.reference is not None else None,
        }

    def restore_extra(self, extra: dict[str, Any]) -> None:
        super().restore_extra(extra)
        self.weight_version = int(extra.get("weight_version", self.step))
        self.best = extra.get("best")

    # ------------------------------------------------------------------ rollout
    def _seed(self, purpose: int = 0, step: int | None = None) -> int:
        """Sampling seed of (run seed, step, rank, purpose): a resumed run samples what the
        uninterrupted one did. Ranks of one policy TP group (same prompts) or one rollout TP group
        (one engine) share it. `run_rollout` derives its sampling and refill seeds from purpose 0."""
        step = self.step if step is None else step
        return (
            self.cfg.train.seed * 1_000_003 + step * 10_007 + self.rollout_source.seed_rank * 101 + purpose * 7
        ) % SEED_MOD

    @staticmethod
    def _chat(row: Mapping[str, Any]) -> Chat:
        """The prompt a row's completions answer (the one prompt builder's)."""
        return prompt_messages(row["messages"], origin=str(row.get("id", "")))

    def _encode_prompt(self, row: dict) -> EncodedChat:
        # the colocated engine's memo holds this step's prompts as it encoded them with the same settings
        return self.frames.encode_chat(
            self.processor,
            self._chat(row),
            add_generation_prompt=True,
            max_length=self.cfg.policy.model_max_length,
            vision_defaults=self.vision_defaults,
        )

    def samples_of(self, groups: list[Group]) -> list[RLSample]:
        """The training sequences of `groups`. A completion holding a vision placeholder token (an untrained
        model samples <|video_pad|> now and then) cannot be scored again: the model would look for pixels
        that are not there. It keeps its place in its group's advantages and is left out of the loss
        (counted in `vision_token_completions`)."""
        mask_truncated = self.policy_cfg.mask_truncated_completions
        out = []
        for g in groups:
            prompt = self._encode_prompt(dict(g.row))
            origin = f"row {g.row.get('id', '?')} ({g.row.get('origin', '?')})"
            ignore = g.ignore_prefix or [0] * len(g.completions)
            for c, adv, skip in zip(g.completions, g.advantages, ignore):
                if self.vision_ids.intersection(c.token_ids):
                    self.vision_token_completions += 1
                    continue
                check_prompt_ids(prompt, c, origin)
                out.append(
                    RLSample(
                        prompt,
                        list(c.token_ids),
                        float(adv),
                        behav_tensor(c),
                        in_loss=not (mask_truncated and c.finish_reason == "length"),
                        ignore_prefix=skip,
                    )
                )
        return out

    # ------------------------------------------------------------------ training on one rollout
    def _micro_batches_per_rl_step(self, samples: list[RLSample], filler: RLSample) -> list[list[_Micro]]:
        """This rank's samples in `self.rl_steps_per_step` contiguous parts (one per cosmos-rl step), each as
        its micro-batches; every rank ends with the same number of micro-batches per part (FSDP collectives
        pair up), a rank short of samples (dynamic sampling keeps unequal counts) adding weight-0 copies."""
        policy_cfg = self.policy_cfg
        k = self.rl_steps_per_step
        bounds = [round(i * len(samples) / k) for i in range(k + 1)]
        parts = [samples[bounds[i] : bounds[i + 1]] for i in range(k)]
        counts = [len(split_micro_batches(p, policy_cfg.micro_batch)) if p else 0 for p in parts]
        most = [int(c) for c in all_reduce_max(torch.tensor(counts, dtype=torch.float64), self.dist.device).tolist()]
        out = []
        for part, n in zip(parts, most):
            rope_index = getattr(self.model.model, "get_rope_index", None)  # None: a text-only model
            micro = [_Micro(m, rope_index) for m in split_micro_batches(part, policy_cfg.micro_batch)]
            while len(micro) < n:
                micro.append(_Micro([filler], rope_index, weight=0.0))
            out.append(micro)
        return out

    @torch.no_grad()
    def _score_tokens(self, model: torch.nn.Module, micro: list[_Micro], attr: str) -> None:
        """Log-probs of every micro-batch under `model` (no gradient) into micro[i].<attr>."""
        model.eval()
        flags = media_in_micro_batches([m.batch for m in micro], self.dist.device)
        for m, run_vision in zip(micro, flags):
            mb = m.batch.to(self.dist.device)
            logits, keep, _ = forward_logits(model, mb, run_vision, self.dist.cp_group)
            setattr(m, attr, m.layout.to(logits.device).logprobs(logits, self.temperature, self._kept(mb, keep)))

    def _normaliser(self, micro: list[_Micro]) -> float:
        """loss_denominator = "update": one denominator for the whole update on every rank (tokens for token-mean,
        completions otherwise, x rollout.max_response_length for seq-mean-token-sum)."""
        policy_cfg = self.policy_cfg
        if policy_cfg.loss_type == "token-mean":
            local = sum(float(m.mask.sum()) for m in micro)
        else:
            local = sum(float(m.completions_in_loss) for m in micro)
            if policy_cfg.loss_type == "seq-mean-token-sum":
                local *= self.cfg.rollout.max_response_length
        return float(all_reduce_sum(local, self.dist.device)) / self.ranks_sharing_rows

    def _loss_scales(self, micro: list[_Micro]) -> _LossScales:
        """How each micro-batch's loss enters one update (`_LossScales`), as cosmos-rl's compute_loss and
        step_training weigh its mini-batches: normalised over its own tokens (or completions), times its share
        of the rank's completions, ranks averaged by FSDP. balance_dp_token (token-mean): each micro-batch's
        tokens summed over the data-parallel ranks, the loss x dp so the average becomes that global mean."""
        policy_cfg = self.policy_cfg
        n = len(micro)
        if policy_cfg.loss_denominator == "update":
            total = self._normaliser(micro)
            return _LossScales([total] * n, [1.0] * n, float(self.dist.dp_size), whole_update=True, total=total)
        held = sum(m.count for m in micro)
        shares = [m.count / held if held else 0.0 for m in micro]
        tokens = (
            all_reduce_sum(torch.tensor([float(m.mask.sum()) for m in micro], dtype=torch.float64), self.dist.device)
            / self.ranks_sharing_rows
        )
        total = float(tokens.sum())
        if (
            policy_cfg.loss_type == "token-mean" and policy_cfg.balance_dp_token
        ):  # unset: false for GRPO (cosmos-rl's default)
            return _LossScales(
                [float(t) or None for t in tokens.tolist()], shares, float(self.dist.dp_size), total=total
            )
        return _LossScales([None] * n, shares, 1.0, total=total)

    def train_on(self, samples: list[RLSample], filler: RLSample) -> dict[str, float]:
        policy_cfg = self.policy_cfg
        parts = self._micro_batches_per_rl_step(samples, filler)
        every = [m for part in parts for m in part]
        # the update's model FLOPs: forward + backward (3 forwards' worth) per iteration, a forward per scoring pass
        forward = self.flop_counter.step_flops([m.batch for m in every], passes=1)
        flops = 3 * policy_cfg.mu_iterations * forward
        if self.reference is not None:
            self._score_tokens(self.reference, every, "ref")
            flops += forward
        engine_old = policy_cfg.old_logprobs == "engine"
        # Old log-probs: the trainer's own forward in a part's first iteration (ratio 1), kept for its later
        # iterations, as cosmos-rl does; a part trains mu_iterations times before the next starts (each part is
        # one of cosmos-rl's steps), so its old log-probs are of the weights the earlier parts left.
        sums: dict[str, float] = {}
        losses, norms, applied = [], [], True
        for micro in parts:
            scales = self._loss_scales(micro)
            for _ in range(policy_cfg.mu_iterations):
                self.model.train()
                if scales.total == 0:  # every completion of this update is masked out (all truncated): nothing to learn
                    continue
                loss_sum = [0.0]

                def loss_fn(
                    i: int,
                    mb: MicroBatch,
                    logits: torch.Tensor,
                    keep: torch.Tensor,
                    micro: list[_Micro] = micro,
                    scales: _LossScales = scales,
                    loss_sum: list[float] = loss_sum,
                ) -> torch.Tensor:
                    m = micro[i]
                    norm = scales.normalisers[i]
                    layout = m.layout.to(logits.device)
                    # context parallel: this rank's logits are its slice's; the log-probs of every token are
                    # gathered, so each rank of the group computes the same loss (its backward: its own tokens')
                    kept = self._kept(mb, keep)
                    logp = layout.logprobs(logits, self.temperature, kept)
                    mask, behav = m.mask.to(logp.device), m.behav.to(logp.device)
                    if engine_old:
                        old = behav
                    else:  # the trainer's own: this forward's in the part's first pass, kept for the later ones
                        if m.old is None:
                            m.old = logp.detach()
                        old = m.old
                    loss, values = policy_loss(
                        logp,
                        old,
                        m.advantages.to(logp.device),
                        mask,
                        self.loss_cfg,
                        ref_logprobs=m.ref,
                        behav_logprobs=behav,
                        normaliser=norm,
                    )
                    loss = loss * scales.dp_factor
                    with torch.set_grad_enabled(bool(policy_cfg.entropy_coeff)):  # logged always, trained on when asked
                        entropy = layout.per_position(token_entropy(logits.float() / (self.temperature or 1.0)), kept)
                    if (
                        policy_cfg.entropy_coeff
                    ):  # cosmos-rl: the mean over the micro-batch's tokens, whatever loss_type
                        bonus = (
                            aggregate(entropy, mask, policy_cfg.loss_type, norm) * scales.dp_factor
                            if scales.whole_update
                            else aggregate(entropy, mask, "token-mean")
                        )
                        loss = loss - policy_cfg.entropy_coeff * bonus
                    loss = loss * scales.shares[i]
                    n = float(mask.sum())
                    values["entropy"] = float((entropy.detach() * mask).sum() / max(n, 1.0))
                    for key in _TOKEN_METRICS:
                        if key in values:
                            sums[key] = sums.get(key, 0.0) + values[key] * n
                    sums["tokens"] = sums.get("tokens", 0.0) + n
                    loss_sum[0] += float(loss.detach())
                    # FSDP averages gradients over the dp ranks (dp_factor undoes it where the denominator is global)
                    return loss

                backward_micro_batches(self.model, [m.batch for m in micro], self.dist, loss_fn)
                grad_norm = self.clip_gradients()
                loss = (
                    float(all_reduce_sum(loss_sum[0], self.dist.device)) / self.ranks_sharing_rows / self.dist.dp_size
                )
                applied &= apply_update(self.optimizer, None, math.isfinite(loss) and math.isfinite(grad_norm))
                losses.append(loss)
                norms.append(grad_norm)
            self.scheduler.step()  # one tick per part: each part is one of cosmos-rl's steps
        sums["model_flops"] = flops
        keys = sorted(sums)
        total = all_reduce_sum(torch.tensor([sums[k] for k in keys], dtype=torch.float64), self.dist.device)
        glob = dict(zip(keys, (total / self.ranks_sharing_rows).tolist()))
        self.update_flops = glob.pop("model_flops")
        tokens = max(glob.pop("tokens", 0.0), 1.0)
        out = {k: v / tokens for k, v in glob.items()}
        out["clip_fraction"] = out.get("clip_low_fraction", 0.0) + out.get("clip_high_fraction", 0.0)
        out.update(
            loss=sum(losses) / max(len(losses), 1),
            grad_norm=max(norms) if norms else 0.0,
            updates=float(len(losses)),
            skipped=not applied,
        )
        return out

    # ------------------------------------------------------------------ one step
    def batches(self, pos: DataPosition) -> Iterator[tuple[list[dict], DataPosition]]:
        """The steps' rows; the rollout source is handed each step's prompts `steps_ahead` steps before it is
        trained (the asynchronous worker samples them meanwhile)."""
        ahead = iter(self.sampler.batches(pos))
        queued: list[tuple[list[dict], DataPosition]] = []
        step = self.step
        while True:
            while len(queued) <= self.rollout_source.steps_ahead:
                nxt = next(ahead, None)
                if nxt is None:
                    break
                rows = [self.rows[i] for i in nxt[0]]
                self.rollout_source.start(step + len(queued), rows, self._seed(step=step + len(queued)))
                queued.append((rows, nxt[1]))
            if not queued:
                return
            yield queued.pop(0)
            step += 1

    def train_step(self, rows: list[dict]) -> dict[str, Any]:
        """One step on the rollout of `rows` (the rollout source got them from `batches`, with their seed)."""
        t0 = time.perf_counter()
        sampled = self.rollout_source.result(self.step)
        rollout = self._from_group_leader(sampled.rollout)
        t_rollout = time.perf_counter() - t0
        self.vision_token_completions = 0
        samples = self.samples_of(rollout.groups)
        filler = self._filler(rollout, samples)
        stats = self._rollout_stats(rollout)
        self._sample_completions(rollout)
        t1 = time.perf_counter()
        if stats["groups"] == 0:  # no rank has a group with signal (all rewards equal everywhere): no update
            values: dict[str, Any] = {"loss": 0.0, "grad_norm": 0.0, "updates": 0.0, "skipped": False}
            for _ in range(self.rl_steps_per_step):
                self.scheduler.step()  # the schedule stays on step numbers
        else:
            values = self.train_on(samples, filler)
        t_train = time.perf_counter() - t1
        if stats["groups"] != 0:  # the update's model FLOPs over its time (the rollout's are the engine's)
            values.update({f"update_{k}": v for k, v in self.flop_rates(self.update_flops, t_train).items()})
        if (self.step + 1) % self.cfg.train.sync_weight_interval == 0:
            self.sync_weights(version=self.step + 1)  # the weights after this step
        step_time = time.perf_counter() - t0
        seq_tokens = all_reduce_sum(sum(len(s.prompt.input_ids) + len(s.token_ids) for s in samples), self.dist.device)
        stats["vision_token_completions"] = (
            float(all_reduce_sum(self.vision_token_completions, self.dist.device)) / self.ranks_sharing_rows
        )
        return {
            **stats,
            **sampled.metrics,
            **values,
            "rollout_time": t_rollout,
            "train_time": t_train,
            "step_time": step_time,
            "tokens_per_s": float(seq_tokens) / self.ranks_sharing_rows / step_time,
            "weight_version": self.weight_version,
            "lr": self.scheduler.get_last_lr()[0],
            "peak_mem_gb": peak_memory_gb(self.dist.device),
            "epoch": self.pos.epoch,
        }

    def _from_group_leader(self, rollout: Rollout) -> Rollout:
        """The rollout of this rank's TP x CP group's first rank, on every rank of that group.

        The ranks of one policy TP group hold slices of one model, those of one CP group slices of one
        sequence: they must train on the same batch, and take the rollout of the TP x CP group's first rank
        (their engines sampled the same prompts with the same seed, but kernels need not agree to the bit).
        Broadcast from the TP leader within each TP group, then from the CP leader within each CP group."""
        box: list[Any] = [rollout]
        if self.dist.tp_mesh is not None:
            torch_dist.broadcast_object_list(box, group_src=0, group=self.dist.tp_mesh.get_group())
        cp = self.dist.cp_group
        if cp.active:
            torch_dist.broadcast_object_list(box, group_src=0, group=cp.group)
        return box[0]

    def _filler(self, rollout: Rollout, samples: list[RLSample]) -> RLSample:
        """An input for the weight-0 micro-batches of a rank with fewer samples than the others: one of its
        own, else one from a dropped group, else the first prompt with an empty completion."""
        if samples:
            return samples[0]
        for g in rollout.dropped:
            kept = self.samples_of([g])
            if kept:
                return kept[0]
        # every completion held a vision placeholder: a one-token stand-in (end of turn) that no loss reads
        prompt = self._encode_prompt(dict((rollout.groups or rollout.dropped)[0].row))
        return RLSample(prompt, [self.pad_id], 0.0, torch.zeros(1), in_loss=False)

    def sync_weights(self, version: int | None = None) -> None:
        """The policy's weights into the rollout engine (`RolloutSource.sync_weights`: in place, or a
        safetensors folder for the worker); the version is the number of steps they have had."""
        version = self.step if version is None else version
        self.weight_version = self.rollout_source.sync_weights(self.model, version)

    def _rollout_stats(self, rollout: Rollout) -> dict[str, float]:
        """The rollout statistics over every rank's rollout (`RolloutSums`)."""
        sums = RolloutSums.of(rollout, self.rewards.names).all_reduced(self.dist)
        return sums.stats(ranks=self.dist.dp_size)

    def _sample_completions(self, rollout: Rollout) -> None:
        every, count = self.cfg.logging.completion_sample_freq, self.cfg.logging.completion_sample_count
        step = self.step + 1  # the step this rollout belongs to
        sampled = rollout.groups + rollout.dropped
        if not self.dist.is_main or not every or step % every or not sampled:
            return
        rows = []
        for g in sampled:
            for c, reward, parts, adv in zip(g.completions, g.rewards, g.parts, g.advantages):
                rows.append(
                    {
                        "id": g.row.get("id"),
                        "prompt": user_text(g.row.get("messages") or []),
                        "reference": reference_answer(g.row),
                        "completion": c.text,
                        "reward": reward,
                        "parts": parts,
                        "advantage": adv,
                        "finish_reason": c.finish_reason,
                    }
                )
        self.metrics.log_samples(step, rows[:count])

    # ------------------------------------------------------------------ validation and the best weights
    def validate(self) -> dict[str, float]:
        """The engine (holding the current weights) answers every validation row under
        [validation] sampling (`validation_sampling`); reward and accuracy over all ranks."""
        if self.weight_version != self.step:
            self.sync_weights()
        n_rows = len(self.val_rows)
        share = -(-n_rows // self.dist.dp_size)
        mine = self.val_rows[self.dist.dp_rank * share : (self.dist.dp_rank + 1) * share]
        accuracy = accuracy_reward(self.val_rewards.names)  # the validation reward's part that is an accuracy
        sums = torch.zeros(3, dtype=torch.float64)  # answers, their rewards, their accuracy part

        def answered_and_scored() -> None:  # a reward service outage here is agreed before the all-reduce
            answers = self.rollout_source.generate_for_validation(
                [self._chat(r) for r in mine],
                validation_sampling(self.cfg, self._seed(3)),
                together=share,
                filler=self._chat(self.val_rows[0]),
            )
            for row, completions in zip(mine, answers):
                texts = [c.text for c in completions]
                for total, parts in self.val_rewards.score_batch(texts, [row] * len(completions)):
                    right = parts.get(accuracy, 0.0) if accuracy is not None else 0.0
                    sums.add_(torch.tensor([1.0, total, right], dtype=torch.float64))

        outage_agreed(answered_and_scored)
        n, reward, right = (all_reduce_sum(sums, self.dist.device) / self.ranks_sharing_rows).tolist()
        out = {"reward_mean": reward / max(n, 1.0), "n": int(n)}
        if accuracy is not None:
            out["accuracy"] = right / max(n, 1.0)
        return out

    def validate_and_keep_best(self) -> None:
        values = self.validate()
        self.log_validation(values)
        metric = "accuracy" if "accuracy" in values else "reward_mean"
        # every rank holds the same all-reduced value, so all take this branch together (export is collective)
        if self.best is None or values[metric] > self.best["value"]:
            path = self.export("best") if self.cfg.train.ckpt.export_safetensors else None
            self.best = {
                "step": self.step,
                "metric": metric,
                "value": values[metric],
                "path": str(path) if path else None,
            }
            if self.dist.is_main:
                (self.run_dir / "best.json").write_text(json.dumps(self.best, indent=2))
                self.log(f"best validation {metric} {values[metric]:.4f} at step {self.step}")

    # ------------------------------------------------------------------ around the loop
    def describe(self) -> str:
        r = self.cfg.rollout
        return (
            f"{super().describe()} on {self.dist.world_size} process(es): {self.cfg.prompts_per_step} prompts x "
            f"{r.n_generation} completions a step, {self.rl_steps_per_step} update(s) x "
            f"{self.policy_cfg.mu_iterations} pass(es), {len(self.rows)} rows, "
            f"rollout {self.rollout_source.description}"
        )

    @property
    def validating(self) -> bool:
        return self.cfg.validation.enable and bool(self.val_rows)

    def validate_and_log(self) -> None:
        self.validate_and_keep_best()

    def before_loop(self) -> None:
        if self.step:  # resumed: the engine starts from the loaded model, not the checkpoint
            self.sync_weights()
        if self.validating and self.best is None:
            self.validate_and_keep_best()  # the starting point: GRPO's best must beat it

    def after_loop(self) -> None:
        self.rollout_source.close()

    def result_extra(self) -> dict[str, Any]:
        return {"best": self.best}


def main(argv: list[str] | None = None) -> int:
    return run_main(GRPOTrainer, argv)


if __name__ == "__main__":
    sys.exit(main())
