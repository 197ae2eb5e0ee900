"""cosmos-rl's job-config keys that this trainer does not implement: accepted with no effect, or refused.

    cosmos-train config check cosmos-reason1/examples/post_training/configs/sft.toml

A cosmos-rl config loads here unchanged. Each key of cosmos-rl's schema (recorded in
tests/data/cosmos_rl_fields.json by scripts/record_cosmos_rl_fields.py) is in one of three states:

1. implemented: the key is in `cosmos_train.config.Config` (same path, or an alias in `config.aliases.ALIASES`);
2. accepted, no effect here: a `Rule` below whose value runs as asked without it; `config check` lists
   it with the rule's reason, the run folder's config.toml and the run summary keep that list;
3. refused: a `Rule` whose value would change the result the user asked for if it were dropped; the
   config error says what to do instead.

`take_foreign_keys` removes these keys from the raw TOML before validation, so everything else is
still checked strictly (a typo of a known key is an error with a suggestion).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_UNSET = object()


def _at(*values: Any) -> Callable[[Any], bool]:
    """Honoured at these values (a key left at its default, or set to what we do anyway)."""
    return lambda v: any(v == x and type(v) is type(x) or v is x for x in values)


_OFF = _at(False, None, 0, 0.0, "", [], {})


def _always(_: Any) -> bool:
    return True


def _section_off(flag: str) -> Callable[[Any], bool]:
    """A section honoured while its `flag` is false (its other keys then configure nothing)."""
    return lambda v: not (isinstance(v, dict) and v.get(flag))


@dataclass(frozen=True)
class Rule:
    """One cosmos-rl key (or a whole section, `key` naming the table) not in our schema.

    reason: why it has no effect here (shown by `config check` and in the run summary).
    honoured: the values this trainer runs as asked without the key; any other value is refused.
    instead: what to do when refused."""

    key: str
    reason: str
    honoured: Callable[[Any], bool] = _always
    instead: str = ""


@dataclass(frozen=True)
class NoEffect:
    """A key the config set that was accepted with no effect here."""

    key: str
    value: Any
    reason: str

    def line(self) -> str:
        return f"{self.key} = {_short(self.value)}: {self.reason}"


_PREDICT = (
    "is a setting of cosmos-rl's diffusers trainer; world-model RL (Flow-GRPO / DDRL) runs from a "
    "world-model recipe (configs/wfm/*.toml) with `cosmos-train wfm-rl` (docs/MIGRATING_FROM_COSMOS_RL.md)"
)
_PP = "no pipeline stages here (pp_size > 1 runs as more FSDP shards)"
_KERNELS = "a kernel choice: the same math runs with PyTorch / vLLM's own kernels"

RULES: tuple[Rule, ...] = (
    # ---------------------------------------------------------------------------------- top level
    Rule("redis", "cosmos-rl's controller port: there is no controller here (Prefect orchestrates the run)"),
    Rule(
        "eth_ips",
        "the controller's addresses: the ranks meet through torchrun (launch.rdzv_endpoint, launch.socket_ifname)",
    ),
    Rule(
        "mode",
        "colocated or not is decided per run here: one engine per rank (asynchronous), or a colocated "
        "tensor-parallel engine (train.train_policy.on_policy or rollout.parallelism.tp_size > 1)",
        _at("disaggregated", "colocated", "colocated_separated"),
        "mode must be 'disaggregated', 'colocated' or 'colocated_separated'",
    ),
    Rule(
        "profiler",
        "profiling changes no result; no profiler traces are written here (bench/ measures steps)",
        _section_off("enable_profiler"),
        "set profiler.enable_profiler = false (and enable_nsys = false): traces are not written here; run "
        "`nsys profile cosmos-train ...` or bench/ for timings",
    ),
    Rule(
        "distillation",
        "on-policy distillation is off (distillation.enable = false), so its settings are unused",
        _section_off("enable"),
        "on-policy distillation from a teacher is not implemented here; set distillation.enable = false to "
        "train with GRPO's rewards",
    ),
    Rule(
        "vla",
        "vision-language-action (OpenVLA) settings: read only by cosmos-rl's VLA trainers, never by its "
        "language-model SFT / GRPO trainers that run here",
    ),
    # ---------------------------------------------------------------------------------- train
    Rule(
        "train.timestamp",
        "the run folder is named by the flow (<output_dir>/<time>, or launch.rdzv_id)",
        _at(""),
        'set launch.rdzv_id = "NAME" to give the run folder a fixed name (<output_dir>/NAME)',
    ),
    Rule(
        "train.transfer_dtype",
        "weights go to the rollout engine in the engine's own dtype (bfloat16 on GPU)",
        _at(None, "bfloat16", "float32"),
        "float16 weight transfer (fp16 rollouts) is not implemented: the engine runs in bfloat16 or float32; "
        'remove transfer_dtype or set it to "bfloat16"',
    ),
    Rule(
        "train.activation_offload",
        "activation memory is saved by policy.model_gradient_checkpointing here",
        _OFF,
        "activation offloading is not implemented; keep model_gradient_checkpointing = true instead",
    ),
    Rule("train.fa_version", _KERNELS),
    Rule("train.local_dataset", "datasets are read where the ranks run (prepare-data checks them first)"),
    Rule("train.force_use_hf", "models always run as their Hugging Face transformers implementation here"),
    Rule("train.non_text", "set by cosmos-rl's diffusion / VLA trainers only; a language trainer reads text"),
    Rule(
        "train.signal_to_handle",
        "SIGTERM and SIGUSR1 always save a checkpoint before exiting here (train.save_ckpt_at_exit)",
    ),
    Rule("train.coalesce_weight_sync", "how weights are batched on their way to the engine; the same weights arrive"),
    Rule(
        "train.ema_enable",
        "no EMA weights are kept (ema_enable = false)",
        _OFF,
        "an EMA of the weights is not kept here; set train.ema_enable = false (the export is the trained weights)",
    ),
    Rule("train.ema_decay", "no EMA weights are kept (train.ema_enable is false)"),
    Rule("train.ema_update_step_interval", "no EMA weights are kept (train.ema_enable is false)"),
    Rule(
        "train.fp8",
        "fp8 training is off (enable_fp8 = false)",
        _section_off("enable_fp8"),
        "fp8 training is not implemented; set train.fp8.enable_fp8 = false (bf16 compute via train.param_dtype)",
    ),
    Rule(
        "train.fp4",
        "fp4 training is off (enable_fp4 = false)",
        _section_off("enable_fp4"),
        "fp4 training is not implemented; set train.fp4.enable_fp4 = false",
    ),
    Rule(
        "train.ckpt.save_freq_in_epoch",
        "checkpoints are saved every train.ckpt.save_freq steps",
        _OFF,
        "save_freq_in_epoch is not implemented; set train.ckpt.save_freq to the steps per epoch instead",
    ),
    # ---------------------------------------------------------------------------------- train_policy
    Rule(
        "train.train_policy.trainer_type",
        "the trainer is the one train_policy.type names",
        _at("sft", "grpo"),
        "custom trainer classes registered in cosmos-rl Python code do not run here; remove trainer_type to "
        "run the built-in trainer, and plug your code in as reward functions or a dataset script",
    ),
    Rule(
        "train.train_policy.dataloader_batch_size",
        "the controller's prompt fetch size: every rank reads its own rows here",
    ),
    Rule(
        "train.train_policy.data_dispatch_as_rank_in_mesh",
        "each data-parallel rank reads its own share of every batch; tensor-parallel ranks share theirs",
    ),
    Rule("train.train_policy.dataloader_broadcast", "every rank of a tensor-parallel group reads the same rows itself"),
    Rule(
        "train.train_policy.enable_dp_load_balancing",
        "load-balanced dynamic batching is off",
        _OFF,
        "token-balanced dynamic batching is not implemented (it changes which samples share an optimizer step); "
        "set enable_dp_load_balancing = false, or train.sequence_packing = true to cut padding",
    ),
    Rule("train.train_policy.load_balanced_pool_size", "load-balanced dynamic batching is off"),
    Rule("train.train_policy.load_balanced_max_tokens_for_batch", "load-balanced dynamic batching is off"),
    Rule("train.train_policy.load_balanced_batching_strategy", "load-balanced dynamic batching is off"),
    Rule("train.train_policy.load_balanced_batches_per_optimizer_step", "load-balanced dynamic batching is off"),
    Rule(
        "train.train_policy.uncentralized_training",
        "rollouts go from the engine to the trainer directly here (there is no controller)",
    ),
    Rule(
        "train.train_policy.outdated_rollout_fetch_batch_size",
        "the controller's fetch size for stale "
        "rollouts; staleness is bounded by allowed_outdated_steps and max_inflight_steps",
    ),
    Rule("train.train_policy.rollout_as_token_ids", "rollouts always reach the trainer as token ids"),
    Rule("train.train_policy.collect_rollout_logprobs", "the engine's log-probs are always collected"),
    Rule(
        "train.train_policy.reset_optimizer_with_reference",
        "the reference model is never reset (reference_reset_interval unset)",
    ),
    Rule(
        "train.train_policy.reference_reset_interval",
        "the reference model is never reset",
        _OFF,
        "resetting the KL reference model is not implemented; remove reference_reset_interval",
    ),
    Rule(
        "train.train_policy.algo",
        "the algorithm is GRPO (with train_policy.variant)",
        _at("grpo"),
        "custom rule-based algorithms registered in cosmos-rl code do not run here; remove algo",
    ),
    Rule(
        "train.train_policy.bypass_reward",
        "rewards are computed",
        _OFF,
        "bypass_reward (distillation without rewards) is not implemented; remove it",
    ),
    Rule(
        "train.train_policy.group_reward_calculation",
        "rewards are scored per completion",
        _OFF,
        "group-level reward functions are not implemented; score each completion (reward functions or the "
        "remote reward service)",
    ),
    Rule(
        "train.train_policy.positive_nll_coef",
        "no positive-example LM loss (VAPO) is added",
        _OFF,
        "the positive-example NLL loss (VAPO) is not implemented; remove positive_nll_coef",
    ),
    Rule(
        "train.train_policy.off_policy_masking_delta",
        "no off-policy sequence masking",
        _OFF,
        "off-policy sequence masking is not implemented; bound staleness with allowed_outdated_steps and "
        "behav_imp_weight_cap instead",
    ),
    Rule(
        "train.train_policy.aipo_rho",
        "no AIPO importance-weight clip",
        _OFF,
        "use train.train_policy.behav_imp_weight_cap (truncated importance sampling) instead of aipo_rho",
    ),
    Rule(
        "train.train_policy.batch_size_per_optimize",
        "each step's completions are split into train.train_batch_per_replica-sized optimizer updates",
        _OFF,
        "set train.train_batch_per_replica to the completions per optimizer update instead",
    ),
    Rule(
        "train.train_policy.max_token_len_per_mini_batch",
        "micro-batches hold train_policy.micro_batch completions",
        _OFF,
        "token-budget micro-batches are not implemented; set train_policy.micro_batch (each micro-batch is "
        "normalised by its own tokens, as cosmos-rl's mini-batches; loss_denominator = 'update' makes the "
        "split change only memory)",
    ),
    # ---------------------------------------------------------------------------------- rollout
    Rule(
        "rollout.include_stop_str_in_output",
        "completions end before their stop strings",
        _OFF,
        "stop strings are never kept in the completion here; remove include_stop_str_in_output",
    ),
    Rule(
        "rollout.n_generation_to_batch",
        "how a prompt's completions are scheduled in the engine; the same completions are drawn",
    ),
    Rule("rollout.n_generation_mini_batch", "how a prompt's completions are scheduled in the engine"),
    Rule("rollout.vllm_use_flashinfer", _KERNELS),
    Rule("rollout.sampling_config.use_flashinfer", _KERNELS),
    Rule(
        "rollout.multi_turn_config",
        "multi-turn (tool) rollouts are off (enable = false)",
        _section_off("enable"),
        "multi-turn and tool-calling rollouts are not implemented; set rollout.multi_turn_config.enable = false",
    ),
    Rule(
        "rollout.mode",
        "the engine runs synchronously within a rollout; rollouts run ahead asynchronously per "
        "train.train_policy.max_inflight_steps",
    ),
    Rule("rollout.async_config", "the engine's request concurrency is vLLM's own"),
    Rule("rollout.async_r2r_sync", "no rollout-to-rollout weight sync: each engine gets weights from its trainer rank"),
    Rule("rollout.prefetch_rollout", "rollouts are prefetched per train.train_policy.max_inflight_steps"),
    Rule("rollout.prefetch_queue_maxsize", "rollouts are prefetched per train.train_policy.max_inflight_steps"),
    Rule("rollout.broadcast_all_params", "how weights travel to the engine; the same weights arrive"),
    # ---------------------------------------------------------------------------------- parallelism
    *(
        Rule(f"{side}.parallelism.{key}", reason, honoured, instead)
        for side in ("policy", "rollout")
        for key, reason, honoured, instead in (
            (
                "ep_size",
                "expert parallelism applies to mixture-of-experts models; dense models run as FSDP / TP shard them",
                _always,
                "",
            ),
            ("pp_dynamic_shape", _PP, _always, ""),
            ("pp_micro_batch_size", _PP, _always, ""),
            ("pp_schedule", _PP, _always, ""),
            ("pp_layers_per_stage", _PP, _always, ""),
            (
                "cp_rotate_method",
                "context parallel here is Ulysses (an all-to-all over heads), not ring attention: no rotation",
                _always,
                "",
            ),
            (
                "n_init_replicas",
                "one replica starts with its engines; cosmos-rl's controller waits for this many replicas to join",
                _always,
                "",
            ),
        )
    ),
    Rule(
        "rollout.parallelism.dp_shard_size",
        "each policy rank (or tp_size group) runs its own engine: the rollout is data parallel over all of them",
    ),
    Rule("rollout.parallelism.dp_replicate_size", "each policy rank (or tp_size group) runs its own engine"),
    Rule("rollout.parallelism.cp_size", "an engine holds a whole prompt; vLLM splits none"),
    Rule(
        "rollout.parallelism.pp_size",
        "an engine is split by rollout.parallelism.tp_size only; the same samples are drawn",
    ),
    # ---------------------------------------------------------------------------------- policy
    Rule("policy.is_diffusers", "a language model is trained", _OFF, _PREDICT),
    Rule("policy.diffusers", f"unused while policy.is_diffusers = false; it {_PREDICT}"),
    Rule(
        "policy.model_safetensor_path",
        "weights load from policy.model_name_or_path",
        _OFF,
        "load weights from one folder: put the safetensors beside the model's config in policy.model_name_or_path",
    ),
    Rule(
        "policy.trainable_map",
        "trainable parameters are chosen by regex",
        _OFF,
        "use policy.trainable_pattern / freeze_pattern (regexes of parameter names) instead of trainable_map",
    ),
    Rule("policy.enable_liger_kernel", _KERNELS),
    Rule("policy.enable_liger_cross_entropy", _KERNELS),
    Rule(
        "policy.enable_liger_fused_cross_entropy",
        "the fused LM head + cross entropy is off",
        _OFF,
        "Liger's kernels are not used here; set train.fused_linear_ce = true (SFT: our own fused LM head + cross "
        "entropy, the same loss and gradients in a fraction of the logits' memory) and remove this key",
    ),
    Rule("policy.aux_loss_coeff", "the mixture-of-experts router loss: the supported models are dense"),
    Rule(
        "policy.lora.lora_names",
        "one adapter is trained here, peft's 'default'",
        _at(None, ["default"]),
        "several named adapters (cosmos-rl's diffusion trainers keep an 'old' copy) are not implemented; train one "
        'adapter (lora_names = ["default"])',
    ),
    Rule(
        "policy.lora.primary_adapter",
        "one adapter is trained here",
        _at(None, "default"),
        "several named adapters are not implemented; remove primary_adapter",
    ),
    Rule(
        "policy.lora.lora_path",
        "the adapters start fresh (B = 0: the base model)",
        _OFF,
        "starting from a saved adapter is not implemented; merge it into the base model first "
        "(peft's merge_and_unload) and point policy.model_name_or_path at the result",
    ),
    # ---------------------------------------------------------------------------------- logging, validation
    Rule(
        "logging.multi_modal_log_interval",
        "images and videos are not logged to wandb; sampled completions are (logging.completion_sample_freq)",
    ),
    Rule(
        "logging.report_mfu",
        "MFU is always logged here (SFT `mfu`, GRPO `update_mfu`, with "
        "tflops_per_device) where the device's peak is known (COSMOS_PEAK_TFLOPS otherwise); it costs nothing",
    ),
    Rule(
        "validation.remote_reward",
        "validation answers are scored by the training's remote reward service "
        "(train.train_policy.remote_reward) when validation.use_remote_reward is on",
    ),
)

_BY_KEY = {r.key: r for r in RULES}

# (key, cosmos-rl's value, ours, reason): a value of a key we implement that means another engine of the same
# result here.
SUBSTITUTES: tuple[tuple[str, Any, Any, str], ...] = (
    (
        "rollout.backend",
        "trtllm",
        "vllm",
        "TensorRT-LLM rollouts are not available here; vLLM samples the same "
        "policy (the result is the same, only speed differs)",
    ),
)


def rule_for(key: str) -> Rule | None:
    """The rule of a dotted key or of the section holding it."""
    parts = key.split(".")
    for n in range(len(parts), 0, -1):
        if (rule := _BY_KEY.get(".".join(parts[:n]))) is not None:
            return rule
    return None


def rule_names_under(section: str) -> list[str]:
    """The names of the rules' keys directly in a table ('' for the top level)."""
    prefix = f"{section}." if section else ""
    return [r.key[len(prefix) :] for r in RULES if r.key.startswith(prefix) and "." not in r.key[len(prefix) :]]


def take_foreign_keys(raw: dict[str, Any], no_effect: list[NoEffect]) -> list[str]:
    """Remove every key a `Rule` covers from `raw` (in place); each honoured one is appended to `no_effect`,
    each other one becomes a problem line naming the key, its value and what to do."""
    problems: list[str] = []
    for key, theirs, ours, reason in SUBSTITUTES:
        *parents, last = key.split(".")
        node = _table(raw, parents)
        if node is not None and node.get(last) == theirs:
            node[last] = ours
            no_effect.append(NoEffect(key, theirs, f"runs as {ours!r}: {reason}"))
    for rule in RULES:
        *parents, last = rule.key.split(".")
        node = _table(raw, parents)
        if node is None or last not in node:
            continue
        value = node.pop(last)
        if rule.honoured(value):
            no_effect.append(NoEffect(rule.key, value, rule.reason))
        else:
            problems.append(f"{rule.key} = {_short(value)}: {rule.instead}")
    return problems


def _table(raw: dict[str, Any], path: list[str]) -> dict[str, Any] | None:
    node: Any = raw
    for part in path:
        node = node.get(part) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


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


def key_state(key: str, known: set[str], aliases: dict[str, str]) -> tuple[str, str]:
    """(state, what to know) of one cosmos-rl key: implemented | no effect | no effect / refused otherwise |
    not covered (a gap tests/unit/test_cosmos_rl_keys.py reports). known: our schema's dotted keys;
    aliases: cosmos-rl key -> ours (config.ALIASES and CONVERTED)."""
    rule = rule_for(key)
    if key in INERT:
        return "no effect", INERT[key]
    if key in REFUSED_OTHERWISE:
        return "no effect / refused", REFUSED_OTHERWISE[key]
    if key in known:
        return "implemented", PARTLY.get(key, "")
    if key in aliases:
        return "implemented", f"as `{aliases[key]}`"
    if rule is not None:
        if rule.honoured is _always:
            return "no effect", rule.reason
        return "no effect / refused", f"{rule.reason}; otherwise refused: {rule.instead}"
    return "not covered", ""
