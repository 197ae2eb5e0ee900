"""Deterministic global sample order with a resumable position.

The order is a seeded permutation per epoch; optimizer step k of an epoch consumes the global slice
[k*G, (k+1)*G) with G = train_batch_per_replica * dp_replicate_size (the ranks of one replica split
its batch), and data-parallel rank r takes its contiguous share of that slice. The state is (epoch, consumed samples
in the epoch), which does not
depend on the world size: a run resumed on a different number of ranks neither repeats nor skips rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from cosmos_train.errors import DataError


@dataclass
class DataPosition:
    epoch: int = 0
    consumed: int = 0  # samples of this epoch already trained on (all ranks together)


class GlobalBatchSampler:
    def __init__(
        self,
        n_samples: int,
        global_batch: int,
        dp_size: int,
        dp_rank: int,
        *,
        shuffle: bool,
        seed: int,
        drop_last: bool = True,
    ):
        if n_samples == 0:
            raise DataError("the training split has no rows")
        self.n, self.global_batch, self.dp_size, self.dp_rank = n_samples, global_batch, dp_size, dp_rank
        self.shuffle, self.seed, self.drop_last = shuffle, seed, drop_last
        if drop_last and n_samples < global_batch:
            raise DataError(
                f"the training split has {n_samples} rows, fewer than one global batch of {global_batch} "
                f"(train_batch_per_replica x dp_replicate_size): lower train.train_batch_per_replica or add rows"
            )

    def steps_per_epoch(self) -> int:
        full, rest = divmod(self.n, self.global_batch)
        return full + (0 if self.drop_last or rest == 0 else 1)

    def order(self, epoch: int) -> list[int]:
        if not self.shuffle:
            return list(range(self.n))
        g = torch.Generator().manual_seed(self.seed + epoch)
        return torch.randperm(self.n, generator=g).tolist()

    def batches(self, pos: DataPosition) -> Iterator[tuple[list[int], DataPosition]]:
        """Yield (this rank's indices, the position after this step) from `pos` to the epoch's end."""
        order = self.order(pos.epoch)
        start = pos.consumed
        while start < self.n:
            chunk = order[start : start + self.global_batch]
            if len(chunk) < self.global_batch and self.drop_last:
                return
            share = -(-len(chunk) // self.dp_size)
            mine = chunk[self.dp_rank * share : (self.dp_rank + 1) * share]
            start += len(chunk)
            yield mine, DataPosition(pos.epoch, start)
