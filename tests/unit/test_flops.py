"""Model FLOPs per step (cosmos_train.train.flops) against hand-computed counts on the tiny Qwen2.5-VL."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from cosmos_train.models.load import load_model
from cosmos_train.train.batching import MicroBatch
from cosmos_train.train.flops import FlopCounter, peak_flops
from tests.conftest import FAMILIES

# The tiny Qwen2.5-VL by hand (models/tiny.py "tiny": hidden 128, MLP 256, 4 layers, 4 heads of 32, 2 KV heads;
# vocab 1088; vision hidden 64, MLP 128, 2 blocks, 14 px patches x 2 frames, merge 2).
LAYER = 128 * 128 + 2 * (64 * 128) + 128 * 128 + 3 * (256 * 128)  # q, k, v, o, gate, up, down
LANGUAGE = 4 * LAYER + 1088 * 128  # + lm_head; embeddings and norms are no matmuls
VISION_BLOCKS = 64 * 3 * 2 * 14 * 14 + 2 * (3 * 64 * 64 + 64 * 64 + 3 * (128 * 64))  # patch embed, qkv, proj, mlp
MERGER = (4 * 64) * (4 * 64) + 128 * (4 * 64)


def test_counts_and_step_flops_by_hand(tiny_model_dir: Path) -> None:
    counter = FlopCounter.of(load_model(tiny_model_dir))
    assert counter == FlopCounter(LANGUAGE, 4, 128, VISION_BLOCKS, MERGER, 2)
    # two right-padded rows of 10 and 20 tokens, one video of 1 x 4 x 4 patches (4 merged tokens)
    mask = torch.zeros(2, 20, dtype=torch.long)
    mask[0, :10] = 1
    mask[1, :] = 1
    padded = MicroBatch(
        torch.zeros(2, 20, dtype=torch.long),
        torch.zeros(2, 20, dtype=torch.long),
        mask,
        torch.zeros(2, 20, dtype=torch.long),
        vision={"video_grid_thw": torch.tensor([[1, 4, 4]])},
    )
    expected = (
        6 * LANGUAGE * 30
        + 12 * 4 * 128 * (10**2 + 20**2)  # matmuls + attention within each row
        + 6 * VISION_BLOCKS * 16
        + 6 * MERGER * 16 // 4
    )  # every patch; every merged token
    assert counter.step_flops([padded]) == expected
    # the same rows packed: the same useful work (attention within each sample only)
    packed = MicroBatch(
        torch.zeros(1, 30, dtype=torch.long),
        torch.zeros(1, 30, dtype=torch.long),
        None,
        torch.zeros(1, 30, dtype=torch.long),
        vision={"video_grid_thw": torch.tensor([[1, 4, 4]])},
        packed_lengths=[10, 20],
    )
    assert counter.step_flops([packed]) == expected


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_counts_language_and_vision(family: str, family_model_dirs: dict[str, Path]) -> None:
    counter = FlopCounter.of(load_model(family_model_dirs[family]))
    assert counter.language_params > counter.vision_block_params > 0 and counter.merger_params > 0
    assert (counter.layers, counter.hidden) == (4, 128)


def test_peak_flops(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COSMOS_PEAK_TFLOPS", raising=False)
    assert peak_flops(torch.device("cpu")) is None  # unknown: no MFU logged
    monkeypatch.setenv("COSMOS_PEAK_TFLOPS", "2.5")
    assert peak_flops(torch.device("cpu")) == 2.5e12


def test_a_tied_lm_head_still_counts(tiny_model_dir: Path) -> None:
    """With the head sharing the embedding's weight (Qwen2.5-VL-3B), the head's matmul is still counted."""
    from transformers import AutoConfig, AutoModelForImageTextToText

    d = AutoConfig.from_pretrained(tiny_model_dir).to_dict()
    d["tie_word_embeddings"] = d["text_config"]["tie_word_embeddings"] = True
    config = type(AutoConfig.from_pretrained(tiny_model_dir)).from_dict(d)
    with torch.device("meta"):
        tied = AutoModelForImageTextToText.from_config(config)
    assert tied.get_output_embeddings().weight is tied.get_input_embeddings().weight
    assert FlopCounter.of(tied).language_params == LANGUAGE


def test_a_shared_prompt_layout_counts_its_allowed_pairs(tiny_model_dir: Path) -> None:
    """GRPO's explicit layout: a 2-token prompt and two 2-token completions in one row under a 4D mask
    (each completion sees the prompt and itself): 17 allowed (query, key) pairs, counted twice (the causal
    convention); a forward-only pass is a third of forward + backward."""
    counter = FlopCounter.of(load_model(tiny_model_dir))
    allowed = torch.zeros(6, 6, dtype=torch.bool)
    allowed[:2, :2] = torch.tril(torch.ones(2, 2, dtype=torch.bool))
    for start in (2, 4):
        allowed[start : start + 2, :2] = True
        allowed[start : start + 2, start : start + 2] = torch.tril(torch.ones(2, 2, dtype=torch.bool))
    assert int(allowed.sum()) == 17
    ids = torch.zeros(1, 6, dtype=torch.long)
    mb = MicroBatch(ids, ids, allowed[None, None], ids)
    assert counter.step_flops([mb]) == 3 * (2 * LANGUAGE * 6 + 4 * 4 * 128 * 34)
    assert counter.step_flops([mb], passes=1) * 3 == counter.step_flops([mb])
    additive = torch.zeros(1, 1, 6, 6).masked_fill(~allowed, float("-inf"))
    assert counter.step_flops([MicroBatch(ids, ids, additive, ids)]) == counter.step_flops([mb])
