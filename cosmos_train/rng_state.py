"""A process's global RNGs (Python's, NumPy's, torch's CPU and CUDA generators): their state as plain tensors and
ints that a checkpoint keeps per rank (rng_rank{R}.pt, loadable with torch.load(weights_only=True)), restored on
resume, and the seeding of a fresh run's rank."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def rng_state() -> dict[str, Any]:
    """This process's RNG states as plain tensors/ints (loadable with torch.load(weights_only=True))."""
    np_state = np.random.get_state(legacy=True)  # legacy=True is the default, though numpy's stub types it False
    assert isinstance(np_state, tuple)  # the global generator is an MT19937, whose legacy state is a tuple
    np_name, np_keys, np_pos, np_has_gauss, np_gauss = np_state
    py_version, py_internal, py_gauss = random.getstate()
    state: dict[str, Any] = {
        "python": {"version": py_version, "internal": list(py_internal), "gauss_next": py_gauss},
        "numpy": {
            "name": np_name,
            "keys": torch.from_numpy(np_keys.astype(np.int64)),
            "pos": int(np_pos),
            "has_gauss": int(np_has_gauss),
            "cached_gaussian": float(np_gauss),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    py = state["python"]
    random.setstate((py["version"], tuple(py["internal"]), py["gauss_next"]))
    n = state["numpy"]
    keys = n["keys"].numpy().astype(np.uint32)
    np.random.set_state((n["name"], keys, n["pos"], n["has_gauss"], n["cached_gaussian"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def seed_process_rngs(seed: int, rank_: int) -> int:
    """Seed Python's, NumPy's and torch's global RNGs of this process as a fresh run's rank `rank_` is seeded
    (the trainers' start, and a resumed rank that has no saved RNG state); returns the seed used."""
    derived = seed + rank_
    random.seed(derived)
    np.random.seed(derived)
    torch.manual_seed(derived)  # also seeds every CUDA device
    return derived
