"""cosmos-rl's job-config keys that are not in our schema, one `Rule` each: accepted with no effect (the value runs
as asked without the key), or refused (dropping it would change the result; the rule says what to do instead). And
SUBSTITUTES: values of keys we implement that run as another engine of the same result. `config.compat` applies
them to a raw config (`take_foreign_keys`) and reads them for the key table (`key_state`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


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

    @property
    def always_honoured(self) -> bool:
        """Every value runs as asked: the key only ever has no effect, never refused."""
        return self.honoured is _always


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
