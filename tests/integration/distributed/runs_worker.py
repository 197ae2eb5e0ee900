"""Worker for tests that compare independent runs of the trainers: the runs one after another in one torchrun launch.

    python -m torch.distributed.run --standalone --nproc_per_node=2 -m tests.integration.distributed.runs_worker \
        cosmos_train.train.sft --config A/config.toml -- cosmos_train.train.sft --config B/config.toml

Each run (MODULE ARGV, the runs separated by `--`) is the trainer module's own `main(argv)` (the entry point `python
-m MODULE ARGV` runs: the run's mesh made, the RNGs seeded from the run's config, RUN/result.json written), so a run
sees what it would see in a launch of its own, less the launch: a rank's start (torch, transformers, FSDP imports;
torchrun's agent) is most of a tiny run's CPU, and a test comparing layouts or settings pays it once. Only for runs
that do not read each other: a resume is tested in a process of its own, as a user's retry starts one. The worker
stops at the first run that does not exit 0, with that run's exit code.

The process group stays up from one run to the next (the runs' meshes are new, as `init_distributed` makes them for
a group that exists): a run's end leaves it with a barrier instead of destroying it. A group destroyed and made
again under torchrun finds the first group's keys still in the launcher's store, and one rank can pass the new
group's rendezvous on them while the other waits there for good.
"""

from __future__ import annotations

import importlib
import logging
import sys

import torch.distributed as dist

from cosmos_train.distributed import teardown
from cosmos_train.train import loop

logger = logging.getLogger(__name__)


def split_runs(args: list[str]) -> list[list[str]]:
    """MODULE ARGV of each run: the arguments between the `--` separators."""
    runs: list[list[str]] = [[]]
    for arg in args:
        if arg == "--":
            runs.append([])
        else:
            runs[-1].append(arg)
    return [r for r in runs if r]


def keep_group(barrier: bool = True) -> None:
    """A run's end (`loop.run_main`'s teardown) with the group kept for the next run."""
    if barrier and dist.is_initialized():
        dist.barrier()


def main() -> int:
    loop.teardown = keep_group  # type: ignore[assignment]  # run_main's teardown, between runs
    try:
        for module, *argv in split_runs(sys.argv[1:]):
            code = importlib.import_module(module).main(argv)
            if code != 0:
                logger.error("%s %s ended with exit %s", module, " ".join(argv), code)
                return int(code)
    finally:
        teardown(barrier=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
