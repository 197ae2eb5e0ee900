"""A LLaVA file mixing image, video and text-only rows trains under torchrun with 2 processes (FSDP2, gloo).

FSDP2 all-gathers each vision block's parameters when it runs forward and reduce-scatters its gradients
in backward, so the ranks must run the vision tower the same number of times in every micro-batch
whatever their rows hold. Rows are not shuffled; with 4 rows per step, 2 per rank and micro-batches of
`micro_batch` rows, the ranks' micro-batches differ in modality every step:

    step 1: rank 0 [image, video]   rank 1 [video, video]
    step 2: rank 0 [image, image]   rank 1 [text, text]
    step 3: rank 0 [text, text]     rank 1 [text, text]     (no media anywhere: no vision tower)
    step 4: rank 0 [video, text]    rank 1 [image+video, image]

The same job on one process sees the same micro-batches, so its loss curve is the reference. The settings' runs on
2 processes share one launch, one after another, and their runs on one process another (`runs`).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.media import moving_square_mp4
from tests.torchrun import sft_runs

pytestmark = pytest.mark.slow

# a collective mismatch can also show as a hang: never wait longer than this for one run (its group is killed)
RUN_TIMEOUT_S = 240


def _image(path: Path, seed: int) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.random.default_rng(seed).integers(0, 255, (56, 70, 3), dtype=np.uint8)).save(path)
    return path.name


def _row(rid: str, kinds: str, media: Path, n: int) -> dict:
    """One row: `kinds` is "i" (an image), "v" (a video), "iv" (both) or "" (text only)."""
    row: dict = {"id": rid}
    if "i" in kinds:
        row["image"] = _image(media / f"{rid}.png", seed=n)
    if "v" in kinds:
        row["video"] = moving_square_mp4(media / f"{rid}.mp4", shift=3 * n).name
    question = "".join(f"<{'image' if k == 'i' else 'video'}>\n" for k in kinds) + f"What is shown? ({n})"
    row["conversations"] = [{"from": "human", "value": question}, {"from": "gpt", "value": f"Answer {n % 3}."}]
    return row


def _llava(path: Path, media: Path, kinds: list[str]) -> Path:
    path.write_text(json.dumps([_row(f"{path.stem}{n}", k, media, n) for n, k in enumerate(kinds)]))
    return path


TRAIN_KINDS = ["i", "v", "v", "v", "i", "i", "", "", "", "", "", "", "v", "", "iv", "i"]
# validation batches of 1 row, 2 rows per rank: rank 0 [image], [text]; rank 1 [video], [image+video]
VAL_KINDS = ["i", "", "v", "iv"]


def _config(tmp: Path, model: Path, *, nproc: int, packing: bool, ckpt: bool) -> Path:
    media = tmp.parent / "media"
    train = _llava(tmp.parent / "train.json", media, TRAIN_KINDS)
    val = _llava(tmp.parent / "val.json", media, VAL_KINDS)
    lines = [
        "[train]",
        f'output_dir = "{tmp / "out"}"',
        "max_num_steps = 4",
        "epoch = 1",
        "train_batch_per_replica = 4",
        "optm_lr = 1e-3",
        "optm_warmup_steps = 1",
        'param_dtype = "float32"',
        "seed = 1",
        f"sequence_packing = {str(packing).lower()}",
        "[train.ckpt]",
        "enable_checkpoint = false",
        "export_safetensors = false",
        "[train.train_policy]",
        'type = "sft"',
        "micro_batch = 2",
        "dataloader_shuffle = false",
        "[train.train_policy.dataset]",
        f'annotation_path = "{train}"',
        f'media_path = "{media}"',
        "[train.train_policy.dataset.vision]",
        "min_pixels = 3136",
        "max_pixels = 3136",
        "[validation]",
        "enable = true",
        "freq = 2",
        "batch_size = 1",
        "[validation.dataset]",
        f'annotation_path = "{val}"',
        f'media_path = "{media}"',
        "[validation.dataset.vision]",
        "min_pixels = 3136",
        "max_pixels = 3136",
        "[policy]",
        f'model_name_or_path = "{model}"',
        "model_max_length = 512",
        f"model_gradient_checkpointing = {str(ckpt).lower()}",
        "[policy.parallelism]",
        f"dp_shard_size = {nproc}",
        "[logging]",
        'logger = ["console"]',
    ]
    path = tmp / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def _metrics(run: Path, kind: str) -> dict[int, dict]:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return {m["step"]: m for m in rows if m["kind"] == kind}


# activation checkpointing recomputes the vision blocks (the blank grid's too) inside backward
SETTINGS = {"padded": (False, False), "packed-ckpt": (True, True)}  # name: (packing, ckpt)


@pytest.fixture(scope="module")
def runs(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, int], Path]:
    """Each setting's job on 2 processes and on one: {(setting, processes): its config}."""
    tmp = tmp_path_factory.mktemp("mixed")
    configs = {
        (name, nproc): _config(tmp / name / str(nproc), tiny_model_dir, nproc=nproc, packing=packing, ckpt=ckpt)
        for name, (packing, ckpt) in SETTINGS.items()
        for nproc in (2, 1)
    }
    for nproc in (2, 1):
        sft_runs([cfg for (_, n), cfg in configs.items() if n == nproc], nproc, timeout=2 * RUN_TIMEOUT_S)
    return configs


@pytest.mark.parametrize("setting", SETTINGS)
def test_mixed_modalities_train_on_two_processes(runs: dict[tuple[str, int], Path], setting: str) -> None:
    two, one = runs[setting, 2], runs[setting, 1]
    a, b = _metrics(two.parent, "train"), _metrics(one.parent, "train")
    assert sorted(a) == sorted(b) == [1, 2, 3, 4]
    for step in a:
        assert a[step]["label_tokens"] == b[step]["label_tokens"] > 0
        # the same micro-batches: only the order of float sums differs
        assert a[step]["loss"] == pytest.approx(b[step]["loss"], rel=1e-5), step
        assert a[step]["grad_norm"] == pytest.approx(b[step]["grad_norm"], rel=1e-4), step
    va, vb = _metrics(two.parent, "val"), _metrics(one.parent, "val")
    assert sorted(va) == sorted(vb) == [2, 4]
    for step in va:
        assert va[step]["label_tokens"] == vb[step]["label_tokens"] > 0
        assert va[step]["loss"] == pytest.approx(vb[step]["loss"], rel=1e-5), step
