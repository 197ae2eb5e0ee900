"""[policy]: the model trained, its length limit, what of it is trained ([policy.lora], freeze / trainable patterns)
and how it is split over ranks ([policy.parallelism])."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, model_validator

from cosmos_train.config.base import MinusOneOrPositive, Section
from cosmos_train.errors import ConfigError


class ParallelismConfig(Section):
    """[policy.parallelism]: one replica is dp_replicate*dp_shard*tp*cp*pp ranks. cp_size > 1 splits each sequence
    over that many ranks (Ulysses context parallel: `cosmos_train.context_parallel`); pp_size > 1 (cosmos-rl's
    pipeline parallelism) runs as that many times more FSDP shards: the same result, said by `config check`
    (`fold_pipeline`)."""

    dp_shard_size: MinusOneOrPositive = Field(-1, description="FSDP shard group size; -1 = all remaining ranks.")
    dp_replicate_size: int = Field(1, ge=1, description="HSDP replicas (1 for GRPO).")
    tp_size: int = Field(1, ge=1, description="Tensor parallel size.")
    cp_size: int = Field(
        1,
        ge=1,
        description="Context (sequence) parallel size: each sequence is split over cp_size ranks (Ulysses: the "
        "language model's attention heads must divide by tp_size x cp_size), which hold the same rows, so the "
        "data-parallel ranks are world size / (tp_size x cp_size); parameters are FSDP-sharded over them too.",
    )
    pp_size: int = Field(1, ge=1, description="Pipeline parallel size; > 1 runs as pp_size x more FSDP shards here.")

    def product(self, shard: int) -> int:
        """Ranks the sizes need with `shard` ranks per FSDP group."""
        return self.dp_replicate_size * shard * self.tp_size * self.cp_size * self.pp_size

    def smallest_world_size(self) -> int:
        """The fewest ranks that fit: dp_shard_size = -1 counts as one shard rank."""
        return self.product(max(self.dp_shard_size, 1))

    def resolved_shard(self, world_size: int) -> int:
        if self.dp_shard_size != -1:
            return self.dp_shard_size
        rest = self.product(1)
        if world_size % rest:
            raise ConfigError(
                [f"policy.parallelism: world size {world_size} is not divisible by dp_replicate*tp*cp*pp = {rest}"]
            )
        return world_size // rest

    def check_world_size(self, world_size: int, section: str = "policy.parallelism") -> None:
        """Raise naming the keys when the product of sizes does not equal the launched world size."""
        shard = self.resolved_shard(world_size)
        product = self.product(shard)
        if product != world_size:
            raise ConfigError(
                [
                    f"{section}: dp_replicate_size*dp_shard_size*tp_size*cp_size*pp_size = "
                    f"{self.dp_replicate_size}*{shard}*{self.tp_size}*{self.cp_size}*{self.pp_size} = {product}, "
                    f"but {world_size} processes were launched (set dp_shard_size = -1 to use them all, "
                    f"or change launch.nproc_per_node)"
                ]
            )


class LoraConfig(Section):
    """[policy.lora]: low-rank adapters instead of full fine-tuning."""

    r: int = Field(8, ge=1, description="Adapter rank.")
    lora_alpha: float = Field(
        8.0, gt=0, description="Adapter scale numerator (the update is scaled by lora_alpha / r)."
    )
    lora_dropout: float = Field(0.0, ge=0, lt=1, description="Dropout probability on the adapter input.")
    target_modules: str | list[str] | None = Field(
        None,
        description="Modules that get adapters: a list of names (e.g. ['q_proj', 'v_proj']), a regex over "
        "module paths, or 'all-linear' (every linear layer but lm_head, the vision tower's too); unset: the "
        "language model's attention and MLP projections.",
    )
    modules_to_save: list[str] | None = Field(
        None, description="Modules trained in full beside the adapters (e.g. ['lm_head']); saved with the adapter."
    )
    use_rslora: bool = Field(False, description="Scale updates by lora_alpha / sqrt(r) instead of lora_alpha / r.")
    init_lora_weights: bool | Literal["gaussian"] = Field(
        True,
        description="A's initialisation (B starts at zero, so training starts from the base model): true is "
        "Kaiming-uniform, 'gaussian' normal(0, 1/r); false also draws B (for tests: the start is not the base).",
    )
    r_pattern: dict[str, Annotated[int, Field(ge=1)]] | None = Field(
        None, description="Per-module rank: {regex of module paths = rank} (peft's rank_pattern)."
    )
    alpha_pattern: dict[str, Annotated[float, Field(gt=0)]] | None = Field(
        None, description="Per-module lora_alpha: {regex of module paths = alpha}."
    )


class PolicyConfig(Section):
    """[policy]: the model trained, its length limit and what of it is trained."""

    model_name_or_path: str = Field(
        "nvidia/Cosmos-Reason1-7B", description="Hub id or local folder (from_pretrained layout)."
    )
    model_revision: str | None = Field(None, description="Hub revision of the model.")
    model_max_length: int = Field(4096, ge=1, description="Max tokens per sample, vision tokens included.")
    model_gradient_checkpointing: bool = Field(
        True, description="Recompute activations in backward: less memory, about a third more compute."
    )
    attn_implementation: Literal["auto", "sdpa", "eager", "flash_attention_2", "flash_attention_3"] = Field(
        "auto",
        description="Attention kernel of the trained model. auto: flash_attention_2 for SFT on a GPU where "
        "the flash-attn package is installed and the compute dtype is 16-bit (padded and packed rows run varlen), "
        "else sdpa (packed rows then attend per sample, train/packed_attention.py). flash_attention_2 / 3 named "
        "here are refused where flash-attn (flash_attn_interface for 3) is not installed, on a CPU, and for GRPO "
        "(its shared-prompt rows need a 4D mask flash attention cannot take).",
    )
    freeze_pattern: list[str] | str | None = Field(None, description="Regexes of parameter names to freeze.")
    trainable_pattern: list[str] | str | None = Field(None, description="Regexes: train only these.")
    parallelism: ParallelismConfig = Field(
        default_factory=ParallelismConfig, description="How the policy is split over ranks."
    )
    lora: LoraConfig | None = Field(None, description="LoRA adapters (unset: full fine-tuning).")

    @model_validator(mode="after")
    def _patterns_exclusive(self) -> PolicyConfig:
        if self.lora is not None and (self.freeze_pattern or self.trainable_pattern):
            raise ValueError(
                "[policy.lora] trains the adapters (and lora.modules_to_save) only; remove "
                "freeze_pattern / trainable_pattern, or [policy.lora] for full fine-tuning"
            )
        if self.freeze_pattern and self.trainable_pattern:
            raise ValueError(
                "freeze_pattern and trainable_pattern are exclusive: keep one "
                "(trainable_pattern trains only the matching parameters)"
            )
        for key in ("freeze_pattern", "trainable_pattern"):
            for pat in pattern_list(getattr(self, key)):
                try:
                    re.compile(pat)
                except re.error as e:
                    raise ValueError(f"{key}: {pat!r} is not a valid regex ({e})") from e
        return self


def pattern_list(v: str | list[str] | None) -> list[str]:
    """freeze_pattern / trainable_pattern as a list of regexes."""
    if v is None:
        return []
    return [v] if isinstance(v, str) else list(v)
