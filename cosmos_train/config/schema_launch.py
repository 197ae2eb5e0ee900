"""[logging] and [launch]: where a job's metrics go, and how torchrun starts its processes."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from cosmos_train.config.base import Section


def _console_only() -> list[Literal["console", "wandb"]]:
    # a typed factory: a lambda's ["console"] is inferred as list[str]
    return ["console"]


class LoggingConfig(Section):
    """[logging]: where metrics go."""

    logger: list[Literal["console", "wandb"]] = Field(
        default_factory=_console_only, description="Metric sinks (metrics.jsonl is always written)."
    )
    project_name: str = Field("cosmos_train", description="wandb project.")
    experiment_name: str | None = Field(None, description="wandb run name (default: the run folder's name).")
    group_name: str | None = Field(None, description="wandb run group (unset: none).")
    log_interval: int = Field(1, ge=1, description="Log every this many steps.")
    completion_sample_freq: int = Field(
        10, ge=0, description="GRPO: write sampled completions with their rewards every this many steps (0: never)."
    )
    completion_sample_count: int = Field(
        4, ge=1, le=256, description="GRPO: completions written per sample (from the first groups of rank 0)."
    )


class LaunchConfig(Section):
    """How torchrun starts the policy processes (cosmos-rl infers this from the GPUs it finds)."""

    nnodes: int = Field(1, ge=1, description="Machines in the job.")
    nproc_per_node: Annotated[int, Field(ge=1)] | Literal["auto"] = Field(
        "auto", description="'auto': every GPU, or the parallelism product on CPU (2 when dp_shard_size=-1)."
    )
    node_rank: int = Field(
        0,
        ge=0,
        description="This machine's index, 0 to nnodes - 1 (e.g. COSMOS_TRAIN__LAUNCH__NODE_RANK="
        "$SLURM_NODEID, or a Kubernetes indexed Job's $JOB_COMPLETION_INDEX).",
    )
    rdzv_endpoint: str | None = Field(
        None, description="host:port where the nodes meet (torchrun's c10d rendezvous; node 0's address)."
    )
    rdzv_id: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$",
        description="Name of one multi-node job, the same on every node: the run folder is "
        "<output_dir>/<rdzv_id> on storage all nodes share (required when nnodes > 1).",
    )
    socket_ifname: str | None = Field(
        None,
        description="Network interface the ranks' gloo / NCCL sockets use (sets GLOO_SOCKET_IFNAME and "
        "NCCL_SOCKET_IFNAME unless already set; e.g. eth0, ib0; unset: their own choice).",
    )
    gpu_concurrency_limit: str | None = Field(
        "gpu",
        description="Prefect global concurrency limit a training run on GPUs takes one slot of per GPU "
        "it uses (`prefect gcl create gpu --limit 8`); unset or no GPU: no limit taken.",
    )
    max_restarts: int = Field(
        0,
        ge=0,
        description="torchrun restarts of failed workers before the run fails (0: a crash ends the launch and the "
        "flow's retry relaunches it, resuming from the newest checkpoint; docs/MULTINODE.md says why).",
    )
    rdzv_timeout_s: int = Field(
        300,
        ge=10,
        le=86400,
        description="Multi-node: how long a node waits for the rendezvous endpoint to answer and for all nnodes "
        "to join (torchrun's read_timeout and join_timeout); past it the node stops with a paragraph naming the "
        "endpoint, the rdzv_id and this bound.",
    )
    collective_timeout_s: int = Field(
        600,
        ge=10,
        le=86400,
        description="How long a rank waits in one collective (all-reduce, barrier, checkpoint save) for its peers "
        "before it fails (the process group's timeout): a host lost without a word (power, cable) is noticed "
        "within this; raise it when rank 0 alone takes longer (a large export to slow storage).",
    )

    @field_validator("rdzv_id", mode="before")
    @classmethod
    def _id_as_text(cls, v: Any) -> Any:
        """A number (a Slurm job id through COSMOS_TRAIN__LAUNCH__RDZV_ID=12345, read as TOML) is the name it spells."""
        return str(v) if isinstance(v, int) and not isinstance(v, bool) else v
