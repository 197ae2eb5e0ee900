"""Which test proves each implemented cosmos-rl key here, and where our loader guesses: the last column of
docs/COSMOS_RL_KEYS.md and its **guess** marks.

- `PROVED_BY`: cosmos-rl key -> the pytest node ids (tests/....py::test_name) whose assertions show the key meaning
  what the table says; a parity test (ours beside cosmos-rl's own function) where one exists.
- `NO_TEST_YET`: implemented keys no test proves yet, with what such a test would need (the table says
  "no test yet"; a test that only sets the key is not named).
- `GUESSES`: keys whose meaning here is not read from cosmos-rl 0.4.7's code: a flag its trainers never read
  (outside its config schema) that we give a meaning or refuse, or a value we infer where cosmos-rl requires or
  fixes one.

tests/unit/test_cosmos_rl_keys.py holds this to the tests: every implemented key is in exactly one of PROVED_BY and
NO_TEST_YET, and each named test exists and mentions the key (see `mentions` there).
"""

from __future__ import annotations

_PARITY = "tests/unit/test_cosmos_rl_parity.py"
_LOSS = f"{_PARITY}::test_compute_loss_equals_cosmos_rl_over_every_setting"
_CLIP = f"{_PARITY}::test_dr_grpo_max_tokens_and_clip_settings_equal_cosmos_rl"
_ADVANTAGES = f"{_PARITY}::test_advantages_equal_cosmos_rl"
_SCHEDULE = f"{_PARITY}::test_lr_schedules_equal_cosmos_rl_over_whole_runs"
_STEP = f"{_PARITY}::test_a_step_is_what_cosmos_rl_makes_it"
_UPDATE = "tests/unit/test_cosmos_rl_grpo_update.py::test_an_update_over_mini_batches_equals_cosmos_rl"
_OPTIMIZER = "tests/unit/test_cosmos_rl_optimizer.py::test_optimizer_equals_cosmos_rl"
_SFT_STEP = "tests/unit/test_cosmos_rl_sft_loss.py::test_sft_step_equals_cosmos_rl"
_REWARDS = "tests/unit/test_cosmos_rl_rewards.py"
_VALIDATION = "tests/unit/test_cosmos_rl_rollout.py::test_validation_sampling_equals_cosmos_rl"
_VALIDATION_ENGINE = "tests/unit/test_generation_hf.py::test_validation_sampling_keys_reach_the_engine"
_ENGINE = "tests/unit/test_generation_hf.py::test_rollout_engine_comes_from_the_job_config"
_VLLM = "tests/unit/test_generation_vllm_requests.py::test_llm_kwargs_and_dtype"
_HUB = "tests/unit/test_sources.py::test_hub_id_goes_through_load_dataset"
_REMOTE = (
    "tests/integration/services/test_reward_client.py::test_remote_total_is_clipped_then_scaled_and_score_keys_add"
)
_REMOTE_RUN = "tests/integration/distributed/test_grpo_reward_restart.py::test_service_restart_mid_run"
_STALENESS = "tests/integration/distributed/test_grpo_async.py::test_staleness_bound_holds_under_a_slow_reward"
_LAYOUTS = "tests/integration/distributed/test_parallelism.py::test_layouts_agree"
_VAL_BEFORE = "tests/unit/test_nonfinite.py::test_val_before_train_scores_the_starting_weights"
_LORA = "tests/unit/test_lora.py::test_merged_export_and_adapter_load_to_the_adapted_model"
_S3 = "tests/integration/flows/test_upload_flow.py::test_upload_all_sends_every_checkpoint_and_export"
_METRICS = "tests/unit/test_metrics.py::test_jsonl_console_and_offline_wandb"
_SPLITS = "tests/unit/test_cosmos_rl_splits.py"

PROVED_BY: dict[str, tuple[str, ...]] = {
    "custom": ("tests/unit/test_sources.py::test_example_script_train_val_and_rewards",),
    # ------------------------------------------------------------------------------------- train_policy: data
    "train.train_policy.type": (
        "tests/unit/test_config_package.py::test_no_type_is_sft_unless_a_grpo_key_or_rl_alias_says_grpo",
    ),
    "train.train_policy.dataset.name": (_HUB,),
    "train.train_policy.dataset.subset": (_HUB,),
    "train.train_policy.dataset.revision": (_HUB,),
    "train.train_policy.dataset.split": (
        _HUB,
        "tests/unit/test_splits.py::test_held_out_rows_do_not_leak_into_training",
    ),
    "train.train_policy.dataset.test_size": (
        f"{_SPLITS}::test_held_out_rows_equal_cosmos_rls_split",
        f"{_SPLITS}::test_training_and_validation_rows_equal_cosmos_rls_sft_worker",
        f"{_SPLITS}::test_each_source_holds_out_by_the_kind_cosmos_rl_would_hold",
    ),
    "train.train_policy.dataset.local_dir": (
        "tests/unit/test_cosmos_local.py::test_hub_id_with_downloaded_local_dir_skips_the_download",
    ),
    "train.train_policy.enable_dataset_cache": (
        "tests/unit/test_prepare.py::test_enable_dataset_cache_keeps_clips_in_the_shared_cache",
    ),
    "train.train_policy.prompt_column_name": (
        "tests/unit/test_sources.py::test_response_column_names_the_reference_answer",
    ),
    "train.train_policy.response_column_name": (
        "tests/unit/test_sources.py::test_response_column_names_the_reference_answer",
    ),
    "train.train_policy.conversation_column_name": (
        "tests/unit/test_sources.py::test_unknown_column_names_file_and_row",
    ),
    "train.train_policy.system_prompt": (
        "tests/unit/test_sources.py::test_json_file_with_string_conversations_and_vision_merge",
    ),
    "train.train_policy.dataloader_drop_last": (
        "tests/unit/test_preflight_rows.py::test_sft_rows_against_the_global_batch",
    ),
    # ------------------------------------------------------------------------------------- train_policy: rewards
    "train.train_policy.reward_function": (f"{_REWARDS}::test_filter_values_and_totals_equal_cosmos_rls",),
    "train.train_policy.filter_reward_metric": (f"{_REWARDS}::test_filter_values_and_totals_equal_cosmos_rls",),
    "train.train_policy.overlong_reward.buffer_length": (f"{_REWARDS}::test_overlong_equals_cosmos_rls",),
    "train.train_policy.overlong_reward.penalty_factor": (f"{_REWARDS}::test_overlong_equals_cosmos_rls",),
    "train.train_policy.use_remote_reward": (_REMOTE_RUN,),
    "train.train_policy.remote_reward.scale": (_REMOTE,),
    "train.train_policy.remote_reward.reward_fns.name": (_REMOTE,),
    "train.train_policy.remote_reward.reward_fns.weight": (_REMOTE,),
    "train.train_policy.remote_reward.reward_fns.clip_max": (
        "tests/integration/services/test_reward_client.py::test_reward_set_combines_local_and_remote_weights",
    ),
    "train.train_policy.remote_reward.reward_clip_min": (_REMOTE,),
    "train.train_policy.remote_reward.reward_clip_max": (_REMOTE,),
    "train.train_policy.remote_reward.batch_size": (_REMOTE_RUN,),
    "train.train_policy.min_filter_prefix_tokens": (
        "tests/unit/test_cosmos_rl_rollout.py::test_prefix_filtering_equals_cosmos_rl",
    ),
    # ------------------------------------------------------------------------------------- train_policy: GRPO
    "train.train_policy.variant": (_LOSS,),
    "train.train_policy.loss_type": (_LOSS, _UPDATE),
    "train.train_policy.lower_bound_ratio": (_LOSS,),
    "train.train_policy.kl_beta": (_LOSS, _UPDATE),
    "train.train_policy.unbiased_kl_estimate": (_LOSS,),
    "train.train_policy.use_decoupled_loss": (_LOSS,),
    "train.train_policy.behav_imp_weight_cap": (_LOSS,),
    "train.train_policy.epsilon_low": (_CLIP,),
    "train.train_policy.epsilon_high": (_CLIP,),
    "train.train_policy.unbiased_loss_max_tokens": (_CLIP,),
    "train.train_policy.balance_dp_token": (
        f"{_PARITY}::test_balance_dp_token_equals_cosmos_rl",
        "tests/unit/test_cosmos_rl_sft_loss.py::test_dp_ranks_equal_cosmos_rl",
    ),
    "train.train_policy.entropy_coeff": (f"{_PARITY}::test_entropy_bonus_equals_cosmos_rl", _UPDATE),
    "train.train_policy.temperature": (_UPDATE,),
    "train.train_policy.mu_iterations": (_UPDATE,),
    "train.train_policy.mini_batch": (_UPDATE, _SFT_STEP),
    "train.train_policy.unbiased_advantage": (_ADVANTAGES,),
    "train.train_policy.advantage_low": (_ADVANTAGES,),
    "train.train_policy.advantage_high": (_ADVANTAGES,),
    "train.train_policy.on_policy": ("tests/unit/test_rollout_mode.py::test_mode_follows_the_setting_then_the_device",),
    "train.train_policy.allowed_outdated_steps": (_STALENESS,),
    "train.train_policy.max_inflight_steps": (
        _STALENESS,
        "tests/integration/distributed/test_grpo_async.py::test_nothing_ahead_equals_the_synchronous_trainer",
    ),
    # ------------------------------------------------------------------------------------- train
    **{
        f"train.{k}": (_SCHEDULE,)
        for k in ("optm_warmup_steps", "optm_warmup_start_factor", "optm_decay_ratio", "optm_decay_type")
    },
    "train.optm_min_lr_factor": (_SCHEDULE,),
    **{
        f"train.{k}": (_OPTIMIZER,)
        for k in ("optm_lr", "optm_name", "optm_impl", "optm_betas", "epsilon", "optm_weight_decay")
    },
    "train.master_dtype": ("tests/unit/test_nonfinite.py::test_bfloat16_master_weights_train_and_export_in_bfloat16",),
    "train.train_batch_per_replica": (_STEP, _LAYOUTS),
    "train.epoch": (_STEP,),
    "train.max_num_steps": (_STEP,),
    "train.resume": ("tests/integration/distributed/test_grpo_dist.py::test_resume_equals_uninterrupted",),
    "train.output_dir": ("tests/unit/test_run_sync.py::test_the_flows_make_the_run_folder_in_the_local_copy",),
    "train.compile": ("tests/integration/distributed/test_sft_dist.py::test_compiled_fused_blocks_train_as_eager",),
    "train.sequence_packing": (
        "tests/unit/test_batching.py::test_packed_attention_needs_no_mask_and_gives_the_same_result",
    ),
    "train.ckpt.save_freq": (
        "tests/unit/test_trainer_base.py::test_the_loop_saves_validates_and_resumes_to_the_uninterrupted_numbers",
    ),
    "train.ckpt.save_mode": ("tests/unit/test_checkpoint.py::test_async_and_sync_write_identical_states",),
    "train.ckpt.max_keep": ("tests/unit/test_checkpoint.py::test_rotation_keeps_newest",),
    "train.ckpt.export_safetensors": (
        "tests/integration/flows/test_sources_train.py::test_every_source_trains_through_the_sft_flow",
    ),
    "train.ckpt.upload_s3": (_S3,),
    "train.ckpt.s3_bucket": (_S3,),
    "train.ckpt.s3_prefix": (_S3,),
    # ------------------------------------------------------------------------------------- rollout
    "rollout.parallelism.tp_size": (_ENGINE, _VLLM),
    "rollout.enforce_eager": (_VLLM,),
    "rollout.gpu_memory_utilization": (_ENGINE, _VLLM),
    "rollout.n_generation": (_STEP,),
    "rollout.seed": (_ENGINE, _VLLM),
    "rollout.backend": (
        _ENGINE,
        "tests/unit/test_cosmos_rl_keys.py::test_config_check_lists_accepted_keys_and_exits_zero",
    ),
    # ------------------------------------------------------------------------------------- policy
    "policy.parallelism.tp_size": (_LAYOUTS,),
    "policy.parallelism.cp_size": (
        "tests/integration/distributed/test_cp_vlm.py::test_sft_at_cp2_trains_as_cp1_and_resumes_at_cp1",
    ),
    "policy.parallelism.dp_shard_size": (_LAYOUTS,),
    "policy.parallelism.pp_size": (
        "tests/unit/test_cosmos_rl_keys.py::test_pipeline_parallel_runs_as_fsdp_shards_context_parallel_is_kept",
    ),
    "policy.parallelism.dp_replicate_size": (_LAYOUTS,),
    "policy.model_name_or_path": (
        "tests/integration/distributed/test_text_families.py::test_lora_on_a_text_model_trains_its_targets_and_exports_merged",
    ),
    "policy.model_max_length": ("tests/unit/test_prepare.py::test_overlength_error_skip_and_truncate",),
    "policy.model_gradient_checkpointing": (_LAYOUTS,),
    "policy.lora.r": (_LORA,),
    "policy.lora.lora_alpha": (_LORA,),
    "policy.lora.init_lora_weights": (_LORA,),
    "policy.lora.modules_to_save": (_LORA,),
    "policy.lora.target_modules": ("tests/unit/test_lora.py::test_targets_resolve_or_say_what_matched_nothing",),
    "policy.freeze_pattern": ("tests/unit/test_train_parts.py::test_freeze_and_trainable_patterns",),
    "policy.trainable_pattern": ("tests/unit/test_train_parts.py::test_freeze_and_trainable_patterns",),
    # ------------------------------------------------------------------------------------- logging, validation
    "logging.logger": (_METRICS,),
    "logging.log_interval": (_METRICS,),
    "validation.enable": (_VAL_BEFORE,),
    "validation.val_before_train": (_VAL_BEFORE,),
    "validation.freq": (_VAL_BEFORE,),
    "validation.dataset.name": ("tests/unit/test_splits.py::test_held_out_rows_do_not_leak_into_training",),
    "validation.dataset.split": ("tests/unit/test_splits.py::test_held_out_rows_do_not_leak_into_training",),
    "validation.dataset.test_size": (
        f"{_SPLITS}::test_validation_dataset_test_size_holds_out_the_same_rows_of_that_dataset",
    ),
    **{
        f"validation.{k}": (_VALIDATION, _VALIDATION_ENGINE)
        for k in ("temperature", "top_p", "top_k", "repetition_penalty", "n_generation")
    },
    "validation.max_response_length": (_VALIDATION,),
}

_ROLLOUT_SAMPLING = (
    "step_sampling(cfg) carrying it into the engine's SamplingParams, beside cosmos-rl's vllm_rollout sampling "
    "params (as test_validation_sampling_equals_cosmos_rl does for validation)"
)
_RUN_FLAG = "a tiny run with the key set against one without it, asserting on"

NO_TEST_YET: dict[str, str] = {
    "train.train_policy.dataloader_shuffle": "a trainer's batch order from the config: rows in file order when "
    "false, a seeded permutation per epoch when true",
    "train.train_policy.dataloader_seed": "two seeds give two orders, the same seed the same order (through the "
    "trainer's sampler, from the config)",
    "train.train_policy.dataloader_num_workers": f"{_RUN_FLAG} the same batches with DataLoader workers",
    "train.train_policy.dataloader_prefetch_factor": f"{_RUN_FLAG} the DataLoader's prefetch_factor",
    "train.train_policy.remote_reward.reward_fns.clip_min": "a remote reward scoring below its clip_min counted as "
    "clip_min in the total",
    "train.train_policy.remote_reward.reward_fns.score_key": "a reward_fns entry whose score_key picks that score "
    "(or 'a+b', their sum) from the service's reply, through RemoteRewardConfig (the reply parser alone is tested)",
    "train.train_policy.max_retry_for_on_policy": "the refill rounds collect_rollouts gets from the config "
    "(> 0: at most that many; <= 0: until the batch is full), beside cosmos-rl's controller",
    "train.train_policy.use_rollout_logprobs_for_loss": "a GRPO update with the engine's log-probs as the old "
    "log-probs, beside cosmos-rl's compute_loss given the rollout log-probs",
    "train.optm_grad_norm_clip": "a step whose gradient norm exceeds the clip is scaled to it (0: unclipped)",
    "train.param_dtype": "the trainer's FSDP mixed-precision compute dtype from the config",
    "train.fsdp_reduce_dtype": "the FSDP MixedPrecisionPolicy's reduce_dtype from the config",
    "train.fsdp_offload": "fully_shard given CPUOffloadPolicy when true",
    "train.fsdp_reshard_after_forward": "fully_shard's reshard_after_forward per value",
    "train.ckpt.enable_checkpoint": "a run with enable_checkpoint = false leaves no checkpoints/ folder",
    "train.ckpt.upload_hf": "the flow uploading the export to the Hub (a recording HfApi) when upload_hf is true",
    "train.ckpt.hf_repo_name": "the flow uploading to the repo hf_repo_name names",
    "train.async_tp_enabled": "config check listing async_tp_enabled = true as accepted with no effect",
    "train.sync_weight_interval": "a GRPO run with sync_weight_interval 2 pushing weights to the engine every 2 steps",
    "train.deterministic": "seed_everything from the config turning torch's deterministic algorithms on",
    "train.seed": "two runs with the same seed giving the same weights, another seed other weights",
    "train.save_ckpt_at_exit": "a run stopped by SIGTERM with save_ckpt_at_exit = false leaves no exit checkpoint",
    "rollout.max_response_length": _ROLLOUT_SAMPLING,
    "rollout.sampling_config.temperature": _ROLLOUT_SAMPLING,
    "rollout.sampling_config.top_p": _ROLLOUT_SAMPLING,
    "rollout.sampling_config.top_k": _ROLLOUT_SAMPLING,
    "rollout.sampling_config.repetition_penalty": _ROLLOUT_SAMPLING,
    "policy.lora.lora_dropout": "apply_lora from the config giving peft that dropout",
    "policy.lora.use_rslora": "merged weights of W + alpha / sqrt(r) x B @ A when use_rslora is true",
    "policy.lora.alpha_pattern": "a module matched by alpha_pattern merged with its own alpha",
    "policy.lora.r_pattern": "a module matched by r_pattern given its own rank",
    "logging.project_name": "the offline wandb run's project read back from its files",
    "logging.group_name": "the offline wandb run's group read back from its files",
    "logging.experiment_name": "the offline wandb run's name read back from its files",
    "validation.batch_size": "validation run in batches of batch_size prompts, with the same scores",
    "validation.dataset.subset": "load_samples(cfg, 'val') passing [validation.dataset]'s subset to the loader",
    "validation.dataset.revision": "load_samples(cfg, 'val') passing [validation.dataset]'s revision to the loader",
    "validation.dataset.local_dir": "load_samples(cfg, 'val') reading [validation.dataset]'s hub files from local_dir",
    "validation.reward_function": "validation scored with validation.reward_function, and with the training's "
    "reward_function when empty",
    "validation.use_remote_reward": "validation scored through the remote reward service when on (unset: as "
    "train.train_policy.use_remote_reward)",
}

# Where our loader guesses. The table marks these rows **guess**.
GUESSES: dict[str, str] = {
    "train.train_policy.type": "cosmos-rl requires it; unset, it is inferred here",
    "train.train_policy.on_policy": "unset, it is inferred from the device",
    "train.train_policy.system_prompt": "cosmos-rl 0.4.7's trainers never read it (its dataset scripts set their "
    "own system turn); here it is the system turn of every prompt that has none",
    "logging.log_interval": "cosmos-rl 0.4.7's language-model trainers never read it (its VLA SFT trainer does); "
    "here the console shows every log_interval-th step, metrics.jsonl every step",
    "policy.lora.init_lora_weights": "cosmos-rl 0.4.7's language-model LoRA never reads it (its diffusers LoRA "
    "does); here peft's init_lora_weights",
    "train.train_policy.dataset.local_dir": "cosmos-rl 0.4.7's trainers never read it (some of its example "
    "dataset scripts take it as their data folder); here hub files are downloaded and extracted there",
    "validation.dataset.local_dir": "cosmos-rl 0.4.7's trainers never read it (some of its example dataset "
    "scripts do); here hub files are downloaded and extracted there",
    "validation.dataset.test_size": "cosmos-rl 0.4.7's trainers never read it (its example distillation datasets "
    "take it as their validation row count); here validation reads the rows it holds out of [validation.dataset], "
    "chosen as cosmos-rl's split chooses them for train.train_policy.dataset.test_size",
    "train.train_policy.overlong_reward.enable_overlong_penalty": "a flag that does nothing in cosmos-rl either",
    "policy.lora.lora_path": "cosmos-rl 0.4.7 never reads it (its adapters always start fresh)",
    "rollout.multi_turn_config.enable_tools": "cosmos-rl 0.4.7 never reads it",
}
