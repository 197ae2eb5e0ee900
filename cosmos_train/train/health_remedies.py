"""The run-health verdicts' remedies: for each trainer, the causes and changes a verdict names in the keys of that
trainer's own config (GRPO's job TOML, or the world model's). The verdicts themselves: train/health_checks.py."""

from __future__ import annotations

from dataclasses import dataclass

# Each change a verdict names is one shown to turn a stuck run into a learning one (tests/integration/
# test_run_health_flow.py, the learning benchmark's remedies table: bench/RESULTS.md); a remedy that did not (the
# entropy bonus and DAPO's dynamic sampling on collapsed runs, a higher learning rate on flat ones, a KL anchor
# against late drops) is left out, however standard.
_SHARPEN = (
    "raise the sampling temperature (rollout.sampling_config.temperature, with train.train_policy.temperature) "
    "so the samples of a prompt differ"
)
_ANCHOR = (
    "hold the policy near its SFT start with train.train_policy.kl_beta > 0 (configs/tiny-grpo.toml: 0.05), which "
    "keeps its samples from collapsing onto one answer"
)
_READ_FIRST = (
    "start GRPO from an SFT on some of this task's own answers: GRPO sharpens what its start already reads of a "
    "task, and from a start that reads nothing of it the reward stays at chance"
)
_MORE_PROMPTS = (
    "give each step more prompts (raise train.train_batch_per_replica, the completions a step, at the same "
    "rollout.n_generation, the samples a prompt): a group's reward says little about the input, and a start that "
    "reads nothing of the task needs many groups a step to find what does (the learning benchmark: 8 prompts a step "
    "stayed at chance where 32 learnt)"
)


@dataclass(frozen=True)
class Remedies:
    """The verdicts' causes and changes in the keys of one trainer's config: GRPO's job TOML, or the world
    model's (whose sampler explores through its SDE noise, with no SFT before it and no best export)."""

    section: str  # the table of stop_when_stuck and [<section>.run_health]
    zero_cause: str  # why every sample of a prompt scores the same
    sharpen: str  # make a prompt's samples differ
    anchor: str  # keep the policy from collapsing onto one answer ("" where none is shown to work)
    read_first: str  # a start that reads a little of the task ("" where there is no start to change)
    more_prompts: str  # more prompts an update, from the same start ("" where none is shown to work)
    clip_high: str
    clip_low: str
    late: str  # keep or reach the best weights instead of the final ones
    best_export: bool  # the run exports its best validation's weights (GRPO's safetensors/best)
    answers: bool  # its samples answer prompts that have a right answer (which may be too easy, too hard, solved)


GRPO_REMEDIES = Remedies(
    section="train",
    zero_cause="the policy is too sure of its answers (a confident start, sampling too cold, or a policy that "
    "collapsed onto one answer while training)",
    sharpen=_SHARPEN,
    anchor=_ANCHOR,
    read_first=_READ_FIRST,
    more_prompts=_MORE_PROMPTS,
    clip_high="lower train.optm_lr or mu_iterations; check old_logprobs and the temperatures agree",
    clip_low="raise train.optm_lr or check train.optm_grad_norm_clip",
    late="keep the best weights: RUN/safetensors/best holds them (a post-train [grpo] stage takes them with export = "
    '"best", its default); let the learning rate decay (train.optm_decay_type = "cosine"); or train fewer steps '
    "(train.max_num_steps near the best step)",
    best_export=True,
    answers=True,
)
WORLD_MODEL_REMEDIES = Remedies(
    section="trainer",
    zero_cause="the samples of a prompt are (nearly) the same video, or the reward cannot tell them apart",
    sharpen="raise model.rl.noise_level (the SDE sampler's noise, which makes the samples of a prompt differ) or "
    "give each sample its own initial noise (model.rl.use_same_seed = false); use a reward that tells the samples "
    "of a prompt apart ([reward] fns: a constant or saturated reward scores them all the same)",
    anchor="",
    read_first="",
    more_prompts="",
    clip_high="lower optimizer.lr or model.rl.mu_iterations, or widen model.rl.clip_range",
    clip_low="raise optimizer.lr or check trainer.grad_clip_norm",
    late="lower optimizer.lr or let it decay ([scheduler] f_min below f_max); hold the model near its reference "
    "with model.rl.kl_beta > 0; or train fewer iterations (trainer.max_iter near the best one, or keep a checkpoint "
    "there: checkpoint.save_iter)",
    best_export=False,
    answers=False,
)


def remedies_of(world_model: bool) -> Remedies:
    return WORLD_MODEL_REMEDIES if world_model else GRPO_REMEDIES


def either(*changes: str) -> str:
    """The changes that apply, in order ("; "-joined)."""
    return "; ".join(c for c in changes if c)
