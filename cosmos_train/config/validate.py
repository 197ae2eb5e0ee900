"""The checks a config passes after its schema: combinations that type-check but cannot run, and settings the
trainers do not implement yet. `validate(cfg)` runs them all; `load_config` always calls it, so no caller has to
remember a check of its own."""

from __future__ import annotations

import re
from pathlib import Path

from cosmos_train.config.paths import looks_local
from cosmos_train.config.schema import Config
from cosmos_train.config.schema_model import LoraConfig
from cosmos_train.config.schema_policy import GRPOPolicyConfig
from cosmos_train.errors import ConfigError, not_a_folder


def validate(cfg: Config, check_paths: bool = False, source: str | None = None) -> None:
    """Raise one ConfigError listing every problem of a schema-valid config: semantic_problems (GRPO's included)
    and unsupported_settings. check_paths: also require a local model path to exist."""
    problems = semantic_problems(cfg, check_paths) + unsupported_settings(cfg)
    if problems:
        raise ConfigError(problems, source)


def semantic_problems(cfg: Config, check_paths: bool) -> list[str]:
    """Combinations that type-check but cannot run, each with what to change. Single-key ranges are
    the schema's (`Field(ge=...)`)."""
    out = []
    t, ck = cfg.train, cfg.train.ckpt
    if ck.upload_hf and not ck.hf_repo_name:
        out.append("train.ckpt.hf_repo_name: required with upload_hf = true (the Hub repo, org/name)")
    if ck.upload_s3 and not ck.s3_bucket:
        out.append(f"train.ckpt.s3_bucket: required with upload_s3 = {ck.upload_s3!r} (the bucket to upload to)")
    if (ck.upload_hf or ck.upload_s3) and not ck.export_safetensors:
        out.append("train.ckpt.export_safetensors: must stay true when uploading (the upload sends the export)")
    mb = t.train_policy.micro_batch
    if cfg.policy_type == "sft" and t.train_batch_per_replica % mb:
        out.append(
            f"train.train_policy.micro_batch: {mb} must divide train.train_batch_per_replica "
            f"({t.train_batch_per_replica}) (micro-batches of equal size)"
        )
    if cfg.policy_type == "grpo":
        out += grpo_problems(cfg)
    if cfg.policy_type == "grpo" and cfg.policy.parallelism.dp_replicate_size != 1:
        out.append("policy.parallelism.dp_replicate_size: GRPO runs one replica; set it to 1")
    if cfg.launch.node_rank >= cfg.launch.nnodes:
        out.append(f"launch.node_rank: {cfg.launch.node_rank} must be < launch.nnodes ({cfg.launch.nnodes})")
    if cfg.launch.nnodes > 1:
        if not cfg.launch.rdzv_endpoint:
            out.append(
                "launch.rdzv_endpoint: required when launch.nnodes > 1 (host:port of node 0, the same on every node)"
            )
        if not cfg.launch.rdzv_id:
            out.append(
                "launch.rdzv_id: required when launch.nnodes > 1 (a name for this job, the same on every "
                "node; the run folder is <output_dir>/<rdzv_id> on shared storage)"
            )
    if check_paths:
        model = cfg.policy.model_name_or_path
        if looks_local(model) and not Path(model).expanduser().exists():
            out.append(f"policy.model_name_or_path: local path {model} does not exist")
        elif looks_local(model) and not Path(model).expanduser().is_dir():
            out.append(
                f"policy.model_name_or_path: {model} is a file; point it at the model's folder (config.json ...)"
            )
        if blocked := not_a_folder("train.output_dir", t.output_dir):  # run folders are made under it
            out.append(blocked)
    if cfg.launch.nproc_per_node != "auto":
        nproc = int(cfg.launch.nproc_per_node) * cfg.launch.nnodes
        try:
            cfg.policy.parallelism.check_world_size(nproc)
        except ConfigError as e:
            out += e.problems
    return out


def grpo_problems(cfg: Config) -> list[str]:
    """GRPO's combinations that cannot run (nothing for an SFT config)."""
    t, r, policy_cfg = cfg.train, cfg.rollout, cfg.train.train_policy
    if not isinstance(policy_cfg, GRPOPolicyConfig):
        return []
    out = []
    rr = policy_cfg.remote_reward
    if rr.local_service and (rr.enqueue_url or rr.fetch_url):
        out.append(
            "train.train_policy.remote_reward: local_service = true starts a service for the run and "
            "points the trainer at it; remove enqueue_url / fetch_url, or set local_service = false "
            "to use the service they name"
        )
    tbpr, n = t.train_batch_per_replica, r.n_generation
    if tbpr % n if tbpr >= n else n % tbpr:
        out.append(
            f"train.train_batch_per_replica: a step trains on {tbpr} completions per replica; with "
            f"rollout.n_generation = {n} that splits a group unevenly (each rank samples whole groups here): set it "
            "to a multiple or a divisor of n_generation"
        )
    if policy_cfg.use_decoupled_loss and policy_cfg.old_logprobs == "engine":
        out.append(
            "train.train_policy.use_decoupled_loss weights each token by the trainer/sampler ratio, which "
            "is 1 when the old log-probs are the sampler's (use_rollout_logprobs_for_loss / old_logprobs = "
            '"engine"); set one of them (cosmos-rl refuses both too)'
        )
    if policy_cfg.unbiased_loss_max_tokens is not None and policy_cfg.loss_type != "seq-mean-token-mean":
        out.append(
            f'train.train_policy.unbiased_loss_max_tokens applies to loss_type = "seq-mean-token-mean" '
            f"only (it is {policy_cfg.loss_type!r}); remove it or change loss_type"
        )
    engine_logprobs = [
        k
        for k, on in (
            ('old_logprobs = "engine"', policy_cfg.old_logprobs == "engine"),
            ("use_decoupled_loss", policy_cfg.use_decoupled_loss),
        )
        if on
    ]
    if policy_cfg.temperature != r.sampling_config.temperature and engine_logprobs:
        out.append(
            f"train.train_policy.temperature ({policy_cfg.temperature}) and rollout.sampling_config.temperature "
            f"({r.sampling_config.temperature}) differ while the loss uses the engine's log-probs "
            f"({', '.join(engine_logprobs)}): those are of the engine's distribution, the trainer's of its own; "
            "set the temperatures equal"
        )
    stale = t.sync_weight_interval - 1  # versions behind the policy the engine's weights get, at most
    if policy_cfg.on_policy and stale:
        out.append(
            f"train.sync_weight_interval ({t.sync_weight_interval}) > 1 with train.train_policy.on_policy = "
            "true: on-policy rollouts need the newest weights every step; set sync_weight_interval = 1"
        )
    elif stale > policy_cfg.allowed_outdated_steps:
        out.append(
            f"train.sync_weight_interval ({t.sync_weight_interval}) samples rollouts up to {stale} weight "
            f"versions old, more than train.train_policy.allowed_outdated_steps ({policy_cfg.allowed_outdated_steps}) "
            "allows: lower the interval or raise the bound"
        )
    if r.n_generation < 2:
        out.append("rollout.n_generation: GRPO compares completions within a group; set it to 2 or more")
    rr = policy_cfg.remote_reward
    if policy_cfg.use_remote_reward and not rr.reward_fns:
        out.append(
            "train.train_policy.remote_reward.reward_fns: use_remote_reward = true asks the service for "
            "nothing; list the rewards ([[train.train_policy.remote_reward.reward_fns]] name = ...)"
        )
    remote_names = [f.name for f in rr.reward_fns] if policy_cfg.use_remote_reward else []
    if len(set(remote_names)) != len(remote_names):
        out.append("train.train_policy.remote_reward.reward_fns: a name is listed twice")
    # max_response_length may reach or pass model_max_length (cosmos-rl's recipes do both): the engines stop a
    # completion where prompt and completion fill model_max_length (vLLM's max_model_len, the HF engine's budget)
    ol = policy_cfg.overlong_reward
    if "overlong" in _reward_names(policy_cfg.reward_function) and ol.buffer_length > r.max_response_length:
        # the penalty would start before the first token: every completion, however short, pays it
        out.append(
            f"train.train_policy.overlong_reward.buffer_length ({ol.buffer_length}) must be <= "
            f"rollout.max_response_length ({r.max_response_length}) for the `overlong` reward"
        )
    return out


def _reward_names(spec: str | list[str] | dict[str, float]) -> list[str]:
    """The names of a reward_function value (a name, a list of names or {name = weight})."""
    return [spec] if isinstance(spec, str) else list(spec)


def unsupported_settings(cfg: Config) -> list[str]:
    """Keys the schema accepts (the reference framework's) that the trainers do not implement yet: refused
    up front, before any process starts, never silently ignored."""
    out = []
    if cfg.policy_type == "grpo":
        if cfg.rollout.backend == "hf" and cfg.rollout.parallelism.tp_size > 1:
            out.append(
                "rollout.parallelism.tp_size: the hf rollout engine runs one model copy per rank; "
                'set tp_size = 1 or rollout.backend = "vllm"'
            )
    if cfg.policy_type == "grpo" and cfg.train.fused_linear_ce:
        out.append(
            "train.fused_linear_ce: the fused LM head + cross entropy serves SFT's loss; GRPO's loss reads "
            "per-token log-probs from the logits: set fused_linear_ce = false"
        )
    if cfg.policy_type == "grpo" and cfg.policy.attn_implementation.startswith("flash"):
        out.append(
            f"policy.attn_implementation: {cfg.policy.attn_implementation} cannot take the 4D attention mask "
            "of GRPO's shared-prompt rows (a group's completions after one copy of its prompt); set it to "
            '"auto" or "sdpa"'
        )
    if cfg.train.fused_linear_ce and cfg.policy.lora is not None and lora_adapts_lm_head(cfg.policy.lora):
        out.append(
            "train.fused_linear_ce: policy.lora.target_modules gives lm_head an adapter, whose low-rank "
            "branch the fused head + loss (one plain weight) would leave out; drop lm_head from "
            'target_modules (modules_to_save = ["lm_head"] trains it whole) or set fused_linear_ce = false'
        )
    if cfg.policy.model_revision not in (None, "", "main"):  # main: what loading the name gives anyway
        out.append(
            f"policy.model_revision = {cfg.policy.model_revision!r}: the trainers load policy.model_name_or_path as "
            "it is, not a revision of it; download that revision (huggingface-cli download NAME --revision REV "
            "--local-dir DIR) and set policy.model_name_or_path to DIR"
        )
    if cfg.policy.lora is not None and cfg.policy.parallelism.tp_size > 1:
        out.append(
            "policy.lora: LoRA with tensor parallelism (policy.parallelism.tp_size > 1) is not supported; "
            "shard with FSDP (dp_shard_size) instead, adapters are small"
        )
    return out


def lora_adapts_lm_head(lora: LoraConfig) -> bool:
    """target_modules matches the LM head as peft matches it: a name list by the module path's last part, a regex
    by re.fullmatch of the whole path (lm_head's is "lm_head"); unset and 'all-linear' leave lm_head out."""
    targets = lora.target_modules
    if targets is None or targets == "all-linear":
        return False
    if isinstance(targets, str):
        return re.fullmatch(targets, "lm_head") is not None
    return "lm_head" in targets
