"""What the key table (docs/COSMOS_RL_KEYS.md) and `config check` say of cosmos-rl keys that we do implement: those
with no effect at some values (PARTLY), run as asked at their default only (REFUSED_OTHERWISE), kept with no effect
(INERT), whose default is not cosmos-rl's (DEFAULTS_DIFFER, `default_note`), and whose meaning a parity test checks
against cosmos-rl's own code (PARITY_CHECKED).
"""

from __future__ import annotations

# Keys of ours that have no effect at some values (config.load.fold_pipeline, speed_only_settings,
# SUBSTITUTES): what the key table says of them.
PARTLY: dict[str, str] = {
    "policy.parallelism.pp_size": "> 1 runs as pp_size x more FSDP shards (the same result)",
    "train.async_tp_enabled": "true is accepted with no effect yet",
    "rollout.backend": "'trtllm' runs as 'vllm' (the same samples)",
}


# Keys of ours that run as asked at their default and are refused at any other value (validate.unsupported_settings).
REFUSED_OTHERWISE: dict[str, str] = {
    "policy.model_revision": 'unset or "main" runs as asked (a language-model job loads policy.model_name_or_path as '
    "it is; the world-model layout reads it as model.model_revision); otherwise refused: download that revision "
    "to a folder and point policy.model_name_or_path at it",
}


# Keys of ours that are kept (configs set them) but have no effect here: what the key table and `config check` say.
INERT: dict[str, str] = {
    "rollout.batch_size": "cosmos-rl's engine prompt batch: a step samples train.train_batch_per_replica / "
    "n_generation prompts per replica and gives each rank's share to its engine at once (vLLM schedules them "
    "itself); the same prompts and samples",
    "train.logprob_dtype": "GRPO's log-probs are computed in float32 here, whatever it says (bfloat16 would only "
    "lose precision)",
    "rollout.quantization": "the rollout engines sample in the policy's dtype here: 'fp8' (cosmos-rl's quantized "
    "rollout) would only save memory and time, at lower precision",
    "rollout.enable_chunked_prefill": "vLLM schedules prefill itself here (its own default): a speed setting, the "
    "same samples",
    "train.train_policy.overlong_reward.enable_overlong_penalty": "cosmos-rl 0.4.7 defines this flag and never "
    "reads it; the penalty applies when train.train_policy.reward_function names `overlong` (buffer_length and "
    "penalty_factor set it)",
}


# Keys of ours whose default is not cosmos-rl's, and why (tests/unit/test_cosmos_rl_keys.py fails on a
# difference not listed here, so a new one is a decision, not an accident). "" / unset pairs that mean the
# same (no system prompt, no subset) are not differences.
DEFAULTS_DIFFER: dict[str, str] = {
    "train.train_policy.dataset.split": "the split read is named: 'train' unless set",
    "train.train_policy.remote_reward.batch_size": "8 completions per request is faster; scores are the same",
    "train.ckpt.enable_checkpoint": "a run can resume by default (a checkpoint changes no result)",
    "train.ckpt.save_freq": "fewer saves of a long run; the result is the same",
    "train.ckpt.max_keep": "disk: the newest two suffice to resume (set -1 to keep all)",
    "train.ckpt.hf_repo_name": "no made-up repo name: upload_hf = true asks for one",
    "train.compile": "compiling costs about a minute at start (more on a CPU): asked for, not assumed",
    "train.seed": "runs are reproducible by default: seed 0, where cosmos-rl draws one",
    "rollout.parallelism.tp_size": "a single GPU (or CPU) runs a rollout engine unless asked",
    "policy.parallelism.tp_size": "FSDP over all GPUs unless tensor parallelism is asked for",
    "policy.parallelism.dp_shard_size": "-1 shards over every launched rank (cosmos-rl's 1 with tp_size 2 fits "
    "two GPUs)",
    "policy.model_name_or_path": "this project post-trains Cosmos-Reason: nvidia/Cosmos-Reason1-7B unless set",
    "logging.logger": "the console shows the metrics unless turned off (metrics.jsonl is always written)",
    "logging.log_interval": "every step is logged (metrics are cheap at this scale)",
    "logging.project_name": "wandb runs go to this project's name unless set",
    "validation.batch_size": "8 prompts per validation batch; the scores are the same",
    "train.train_policy.balance_dp_token": "unset means cosmos-rl's own default for the run type: false for GRPO, "
    "true for SFT",
    "validation.dataset.split": "a dataset's validation split is named: 'train' unless set, with test_size "
    "holding rows out",
    "train.train_policy.on_policy": "unset picks from the device: synchronous on the CPU, where a rollout worker "
    "shares the trainer's cores (slower there, bench/grpo_step.py), asynchronous (cosmos-rl's false) on a GPU",
    "train.train_policy.type": "a table naming none is SFT here, or GRPO when it sets a GRPO-only key or cosmos-rl's "
    "RL aliases ([grpo], rollout_batch_size)",
}
# Keys whose meaning a parity test checks against cosmos-rl's own code (the installed package), with the function it
# is run beside; the key table's "checked against cosmos-rl's code" column. Every key's default is checked against
# cosmos-rl's Config() as well. tests/unit/test_cosmos_rl_parity.py keeps this equal to what the parity tests cover:
# its own (loss, advantages, schedules, step counts), test_cosmos_rl_grpo_update.py (step_training: a whole update
# over mini-batches), test_cosmos_rl_sft_loss.py (async_safe_ce), test_cosmos_rl_rewards.py (reward.py) and
# test_cosmos_rl_rollout.py (the reward calculator's prefix pass, the validation sampling).
_LOSS = (
    "loss_type",
    "variant",
    "epsilon_low",
    "epsilon_high",
    "lower_bound_ratio",
    "kl_beta",
    "unbiased_kl_estimate",
    "use_decoupled_loss",
    "behav_imp_weight_cap",
    "unbiased_loss_max_tokens",
)
_UPDATE = "step_training (compute_loss x loss_scaling_factor per mini-batch)"
_VALIDATION = "vLLMRollout's val_sampling_params"
PARITY_CHECKED: dict[str, str] = {
    **{f"train.train_policy.{k}": "compute_loss" for k in _LOSS},
    "train.train_policy.balance_dp_token": "compute_loss, async_safe_ce",
    "train.train_policy.mini_batch": f"{_UPDATE}, async_safe_ce",
    "train.train_policy.mu_iterations": _UPDATE,
    "train.train_policy.temperature": _UPDATE,
    "train.train_policy.entropy_coeff": "compute_logprobs",
    # test_cosmos_rl_optimizer.py: the weights after steps of ours and of its build_optimizers
    **{
        f"train.{k}": "build_optimizers"
        for k in ("optm_lr", "optm_name", "optm_impl", "optm_betas", "epsilon", "optm_weight_decay")
    },
    **{
        f"train.train_policy.{k}": "GRPO.compute_advantage"
        for k in ("unbiased_advantage", "advantage_low", "advantage_high")
    },
    **{
        f"train.{k}": "build_lr_schedulers"
        for k in (
            "optm_warmup_steps",
            "optm_warmup_start_factor",
            "optm_decay_ratio",
            "optm_decay_type",
            "optm_min_lr_factor",
        )
    },
    **{
        k: "recompute_total_steps"
        for k in (
            "train.train_batch_per_replica",
            "rollout.n_generation",
            "train.max_num_steps",
            "train.epoch",
        )
    },
    "train.train_policy.reward_function": "format / single_choice / gsm8k / boxed_math / direct_math / "
    "overlong_reward_fn",
    "train.train_policy.overlong_reward.buffer_length": "overlong_reward_fn",
    "train.train_policy.overlong_reward.penalty_factor": "overlong_reward_fn",
    "train.train_policy.filter_reward_metric": "Reward.compute_reward",
    # test_cosmos_rl_splits.py: the rows validation holds out of the training set
    "train.train_policy.dataset.test_size": "split_train_n_val_dataset, construct_dataset",
    "train.train_policy.min_filter_prefix_tokens": "LocalRewardCalculator.compute_rewards",
    **{
        f"validation.{k}": _VALIDATION
        for k in ("top_p", "top_k", "temperature", "repetition_penalty", "n_generation", "max_response_length")
    },
}
_SAME = {("[]", "{}"), ("unset", '""'), ("unset", "(required)"), ('"none"', "unset"), ("1.0", "unset"), ("8.0", "8")}


def default_note(key: str, ours: str, theirs: str) -> str | None:
    """Why a key's default differs here; None when the defaults mean the same, "" when the difference is not
    explained (a gap the tests report)."""
    if ours == theirs or (ours, theirs) in _SAME or (theirs, ours) in _SAME:
        return None
    return DEFAULTS_DIFFER.get(key, "")
