"""From completions to GRPO training sequences, and the trainer's log-probs of them."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from cosmos_train.data.chat import IGNORE_INDEX, EncodedChat
from cosmos_train.errors import ModelError
from cosmos_train.generation import Completion, GenerationConfig, SamplingParams
from cosmos_train.train.batching import collate_padded
from cosmos_train.train.losses import label_positions
from cosmos_train.train.rl_batch import completion_sequence, per_token, token_logprobs


def _prompt(ids: list[int]) -> EncodedChat:
    t = torch.tensor(ids)
    return EncodedChat(input_ids=t, labels=torch.full_like(t, IGNORE_INDEX), attention_mask=torch.ones_like(t),
                       mm_token_type_ids=torch.zeros_like(t, dtype=torch.int32))


def test_sequence_labels_only_the_completion() -> None:
    seq = completion_sequence(_prompt([5, 6, 7]), Completion("x", [8, 9], [-0.1, -0.2], "stop", [5, 6, 7]))
    assert seq.input_ids.tolist() == [5, 6, 7, 8, 9]
    assert seq.labels.tolist() == [IGNORE_INDEX] * 3 + [8, 9]
    assert seq.attention_mask.tolist() == [1] * 5 and seq.mm_token_type_ids.tolist() == [0] * 5


def test_engine_prompt_that_differs_is_refused() -> None:
    with pytest.raises(ModelError, match="differ from the trainer's"):
        completion_sequence(_prompt([5, 6, 7]), Completion("x", [8], [-0.1], "stop", [5, 6]), "row r1")


def test_token_logprobs_by_hand() -> None:
    # one row, vocab 3; positions 0 and 1 predict labels at 1 and 2
    logits = torch.tensor([[[0.0, 1.0, 2.0], [1.0, 1.0, 1.0]]])
    labels = torch.tensor([[IGNORE_INDEX, 2, 0]])
    logp, mask = token_logprobs(logits, labels, torch.tensor([0, 1]), temperature=2.0)
    z = math.log(math.exp(0) + math.exp(0.5) + math.exp(1.0))
    assert logp[0, 0].item() == pytest.approx(1.0 - z)
    assert logp[0, 1].item() == pytest.approx(-math.log(3))
    assert mask.tolist() == [[True, True]]


def test_per_token_layout_follows_label_positions() -> None:
    # row 0: prompt 3, completion 2 (predicted at 2, 3); row 1: prompt 2, completion 3 (at 1, 2, 3)
    a = completion_sequence(_prompt([1, 2, 3]), Completion("", [4, 5], [-1.0, -2.0], "stop"))
    b = completion_sequence(_prompt([1, 2]), Completion("", [6, 7, 8], [-3.0, -4.0, -5.0], "stop"))
    mb = collate_padded([a, b], pad_id=0)
    keep = label_positions(mb.labels)
    assert keep.tolist() == [1, 2, 3]
    laid = per_token([torch.tensor([-1.0, -2.0]), torch.tensor([-3.0, -4.0, -5.0])], [3, 2], keep)
    assert laid.tolist() == [[0.0, -1.0, -2.0], [-3.0, -4.0, -5.0]]


def test_trainer_logprobs_equal_the_engines(tiny_model_dir: Path, synthetic_dir: Path) -> None:
    """The sequences the trainer builds score each sampled token exactly as the engine sampled it
    (video prompts, several prompt lengths, padding, temperature 0.7): ratio 1 at the first update."""
    from cosmos_train.config import config_from_dict
    from cosmos_train.data.chat import encode_chat
    from cosmos_train.data.prompt import prompt_messages
    from cosmos_train.data.sources import load_samples
    from cosmos_train.generation.hf import HFEngine
    from cosmos_train.train.vision_forward import forward_micro_batch

    cfg = config_from_dict({"train": {"train_batch_per_replica": 4, "train_policy": {
        "type": "grpo", "dataset": {"name": str(synthetic_dir), "vision": {"min_pixels": 3136, "max_pixels": 3136}}}},
        "rollout": {"n_generation": 4}})
    rows = load_samples(cfg, "train")[:3]
    rows[1]["messages"][-1]["content"][-1]["text"] += " Think about it first."  # a longer prompt
    engine = HFEngine(GenerationConfig(model_path=str(tiny_model_dir), engine="hf", device="cpu", dtype="float32",
                                       vision_defaults=cfg.train.train_policy.dataset.vision.as_part_defaults()))
    prompts = [prompt_messages(r["messages"]) for r in rows]
    groups = engine.generate(prompts, SamplingParams(n=2, max_new_tokens=5, temperature=0.7, seed=3))
    seqs, behav, plens = [], [], []
    for chat, completions in zip(prompts, groups):
        enc = encode_chat(engine.processor, chat, add_generation_prompt=True, vision_defaults=engine.vision_defaults)
        for c in completions:
            seqs.append(completion_sequence(enc, c))
            behav.append(torch.tensor(c.logprobs))
            plens.append(len(enc.input_ids))
    mb = collate_padded(seqs, pad_id=0)
    keep = label_positions(mb.labels)
    with torch.no_grad():
        out, _ = forward_micro_batch(engine.model, mb, True, use_cache=False, logits_to_keep=keep)
    logp, mask = token_logprobs(out.logits, mb.labels, keep, temperature=0.7)
    expected = per_token(behav, plens, keep)
    assert int(mask.sum()) == sum(len(b) for b in behav)
    assert torch.allclose(logp[mask], expected[mask], atol=1e-4), (logp[mask] - expected[mask]).abs().max()
