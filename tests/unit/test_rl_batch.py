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
from cosmos_train.train.sft_loss import label_positions
from tests.rl_reference import completion_sequence, per_token, token_logprobs


def _prompt(ids: list[int]) -> EncodedChat:
    t = torch.tensor(ids)
    return EncodedChat(
        input_ids=t,
        labels=torch.full_like(t, IGNORE_INDEX),
        attention_mask=torch.ones_like(t),
        mm_token_type_ids=torch.zeros_like(t, dtype=torch.int32),
    )


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

    cfg = config_from_dict(
        {
            "train": {
                "train_batch_per_replica": 4,
                "train_policy": {
                    "type": "grpo",
                    "dataset": {"name": str(synthetic_dir), "vision": {"min_pixels": 3136, "max_pixels": 3136}},
                },
            },
            "rollout": {"n_generation": 4},
        }
    )
    rows = load_samples(cfg, "train")[:3]
    rows[1]["messages"][-1]["content"][-1]["text"] += " Think about it first."  # a longer prompt
    engine = HFEngine(
        GenerationConfig(
            model_path=str(tiny_model_dir),
            engine="hf",
            device="cpu",
            dtype="float32",
            vision_defaults=cfg.train.train_policy.dataset.vision.as_part_defaults(),
        )
    )
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


def test_shared_prompt_layout_equals_separate_sequences(tiny_model_dir: Path, synthetic_dir: Path) -> None:
    """The shared-prompt micro-batch (each group's prompt and video once, its completions after it) gives
    every completion token the log-prob the separate prompt + completion sequence gives, and the same
    gradient of a loss on them: groups of 3 with video, a text-only group, completions of unequal length."""
    from cosmos_train.config import config_from_dict
    from cosmos_train.data.chat import encode_chat
    from cosmos_train.data.prompt import prompt_messages
    from cosmos_train.data.sources import load_samples
    from cosmos_train.models.load import load_model, load_processor
    from cosmos_train.train.rl_batch import RLSample, shared_prefix_batch
    from cosmos_train.train.vision_forward import forward_micro_batch

    cfg = config_from_dict(
        {
            "train": {
                "train_batch_per_replica": 4,
                "train_policy": {
                    "type": "grpo",
                    "dataset": {"name": str(synthetic_dir), "vision": {"min_pixels": 3136, "max_pixels": 3136}},
                },
            },
            "rollout": {"n_generation": 4},
        }
    )
    rows = load_samples(cfg, "train")[:2]
    chats = [prompt_messages(r["messages"]) for r in rows]
    chats.append([{"role": "user", "content": "Name a colour."}])
    processor = load_processor(str(tiny_model_dir))
    model = load_model(str(tiny_model_dir), dtype=torch.float32, device="cpu")
    vision = cfg.train.train_policy.dataset.vision.as_part_defaults()
    from cosmos_train.vision.settings import VisionSettings

    prompts = [
        encode_chat(processor, c, add_generation_prompt=True, vision_defaults=VisionSettings(**vision)) for c in chats
    ]
    g = torch.Generator().manual_seed(0)
    samples = [
        RLSample(p, torch.randint(100, 1000, (n,), generator=g).tolist(), 0.0, torch.zeros(n))
        for p in prompts
        for n in (3, 1, 4)
    ]
    weights = torch.randn(len(samples), 4, generator=g)

    shared, layout = shared_prefix_batch(samples, model.model.get_rope_index)
    out, _ = forward_micro_batch(model, shared, True, use_cache=False, logits_to_keep=shared.logit_positions)
    lp_shared = layout.logprobs(out.logits, temperature=0.8)
    mask = layout.token_mask()
    (lp_shared * weights * mask).sum().backward()
    grads_shared = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)

    seqs = [completion_sequence(s.prompt, Completion("", s.token_ids, [], "stop")) for s in samples]
    mb = collate_padded(seqs, pad_id=0)
    keep = label_positions(mb.labels)
    out, _ = forward_micro_batch(model, mb, True, use_cache=False, logits_to_keep=keep)
    lp, lp_mask = token_logprobs(out.logits, mb.labels, keep, temperature=0.8)
    # the separate layout, column j of each sample's completion
    plens = [len(s.prompt.input_ids) for s in samples]
    separate = torch.zeros_like(lp_shared)
    for b, (s, plen) in enumerate(zip(samples, plens)):
        at = torch.searchsorted(keep, torch.arange(len(s.token_ids)) + plen - 1)
        separate[b, : len(s.token_ids)] = lp[b, at]
    assert int(mask.sum()) == int(lp_mask.sum()) == sum(len(s.token_ids) for s in samples)
    assert torch.allclose(lp_shared[mask], separate[mask].detach(), atol=1e-5), (
        (lp_shared[mask] - separate[mask]).abs().max()
    )
    (separate * weights * mask).sum().backward()
    for name, p in model.named_parameters():
        if p.grad is not None or name in grads_shared:
            assert torch.allclose(grads_shared[name], p.grad, atol=1e-5, rtol=1e-4), name
    # the point of it: far fewer tokens through the model, one row per group (prompts right-aligned, so the
    # rows' completion tokens share their kept positions), padding counted apart
    assert shared.input_ids.shape[0] == len(prompts)
    assert shared.n_tokens == sum(len(p.input_ids) for p in prompts) + sum(len(s.token_ids) for s in samples)
    assert shared.n_tokens < mb.input_ids.numel() / 2
    # every row's kept positions: its prompt's last token, then each completion token but the last
    assert len(shared.logit_positions) == 1 + sum(len(s.token_ids) - 1 for s in samples[:3])
    # and the attention's cost: the scores of one row per group, not of all groups packed in one row
    width = max(len(p.input_ids) for p in prompts) + 8  # the longest prompt + a group's completion tokens
    assert shared.attention_mask.shape == (len(prompts), 1, width, width)
    assert shared.attention_mask.numel() < 0.6 * shared.n_tokens**2


def test_ignored_prefix_tokens_leave_the_loss_mask() -> None:
    """min_filter_prefix_tokens: a sample's first ignore_prefix completion tokens are out of the loss, the rest in."""
    from cosmos_train.train.grpo_update import RLMicroBatch
    from cosmos_train.train.rl_batch import RLSample

    prompt = _prompt([5, 6, 7])
    samples = [
        RLSample(prompt, [1, 2, 3, 4], 1.0, torch.zeros(4), ignore_prefix=2),
        RLSample(prompt, [1, 2, 9], -1.0, torch.zeros(3)),
        RLSample(prompt, [8, 8], 0.5, torch.zeros(2), in_loss=False, ignore_prefix=1),
    ]
    micro = RLMicroBatch(samples, rope_index=None)
    assert micro.mask.tolist() == [[False, False, True, True], [True, True, True, False], [False] * 4]
