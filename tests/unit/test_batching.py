"""Padding-free packing gives the same loss and gradients as right-padded batches (every model family)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from cosmos_train.data.chat import encode_chat
from cosmos_train.models.load import load_model, load_processor
from cosmos_train.train.batching import IGNORE, collate_packed, collate_padded, model_inputs
from cosmos_train.train.sft_loss import token_ce_sum
from tests.conftest import FAMILIES
from tests.media import moving_square_mp4


@pytest.fixture
def tiny(tiny_model_dir: Path) -> Path:
    return tiny_model_dir


@pytest.fixture(params=FAMILIES)
def family_model(request: pytest.FixtureRequest, family_model_dirs: dict[str, Path]) -> Path:
    return family_model_dirs[request.param]


def _chat(video: Path | None, q: str, a: str) -> list[dict]:
    content: list[dict] = [{"type": "text", "text": q}]
    if video is not None:
        content.insert(0, {"type": "video", "video": str(video), "min_pixels": 3136, "max_pixels": 3136})
    return [
        {"role": "system", "content": "Answer the questions."},
        {"role": "user", "content": content},
        {"role": "assistant", "content": a},
    ]


def test_packed_loss_and_grads_equal_padded(family_model: Path, tmp_path: Path) -> None:
    torch.manual_seed(0)
    proc = load_processor(family_model)
    model = load_model(family_model, dtype=torch.float32)
    model.eval()  # no dropout in either path
    chats = [
        _chat(moving_square_mp4(tmp_path / "a.mp4", 0), "Which way does the square move?", "It moves right. B"),
        _chat(None, "A text-only question about gravity.", "Things fall down."),
        _chat(moving_square_mp4(tmp_path / "b.mp4", 11), "Does it move?", "Yes, it moves to the right quickly."),
    ]
    samples = [encode_chat(proc, c, max_length=512) for c in chats]
    padded = collate_padded(samples, pad_id=0)
    packed = collate_packed(samples)
    assert (packed.mm_token_type_ids == 2).sum() == sum(int((s.mm_token_type_ids == 2).sum()) for s in samples) > 0
    assert packed.input_ids.shape[1] == sum(len(s.input_ids) for s in samples)
    assert padded.n_label_tokens == packed.n_label_tokens > 0

    def loss_and_grads(mb):
        model.zero_grad()
        out = model(**model_inputs(model, mb), use_cache=False)
        s, n = token_ce_sum(out.logits, mb.labels)
        (s / n).backward()
        return (s / n).item(), {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}

    l_pad, g_pad = loss_and_grads(padded)
    l_pack, g_pack = loss_and_grads(packed)
    assert l_pack == pytest.approx(l_pad, rel=1e-5, abs=1e-6)
    for k in g_pad:
        torch.testing.assert_close(g_pack[k], g_pad[k], rtol=1e-4, atol=1e-6, msg=k)


def test_packed_positions_restart_per_sample(tiny: Path) -> None:
    proc = load_processor(tiny)
    model = load_model(tiny, dtype=torch.float32)
    samples = [
        encode_chat(proc, _chat(None, "one", "two"), max_length=64),
        encode_chat(proc, _chat(None, "three four", "five"), max_length=64),
    ]
    mb = collate_packed(samples)
    pos = model_inputs(model, mb)["position_ids"]
    n0 = len(samples[0].input_ids)
    assert pos.shape == (4, 1, mb.input_ids.shape[1])
    assert pos[0, 0, n0].item() == 0 and pos[0, 0, n0 - 1].item() == n0 - 1
    assert (mb.labels == IGNORE).sum() > 0


def test_packed_attention_needs_no_mask_and_gives_the_same_result(family_model: Path, tmp_path: Path) -> None:
    """train.sequence_packing's attention (cosmos_train.train.packed_attention): per-sample SDPA from the
    segment bounds, no dense mask; loss and gradients equal SDPA's masked packed row and the padded batch."""
    from cosmos_train.train import packed_attention

    proc = load_processor(family_model)
    model = load_model(family_model, dtype=torch.float32).eval()
    chats = [
        _chat(moving_square_mp4(tmp_path / "a.mp4", 0), "Which way does the square move?", "Right. B"),
        _chat(None, "A text-only question about gravity.", "Things fall down."),
        _chat(moving_square_mp4(tmp_path / "b.mp4", 11), "Does it move?", "Yes, to the right."),
    ]
    samples = [encode_chat(proc, c, max_length=512) for c in chats]
    packed = collate_packed(samples)

    def loss_and_grads(mb):
        model.zero_grad()
        s, n = token_ce_sum(model(**model_inputs(model, mb), use_cache=False).logits, mb.labels)
        (s / n).backward()
        return (s / n).item(), {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}

    l_ref, g_ref = loss_and_grads(packed)  # SDPA over the dense block-diagonal mask
    assert packed_attention.use_packed_attention(model)
    inputs = model_inputs(model, packed)
    assert inputs["cu_seq_lens_q"].tolist() == [0, *torch.tensor([len(s) for s in samples]).cumsum(0).tolist()]
    from transformers import AttentionInterface

    seen: list = []

    def recording(module, query, key, value, attention_mask, **kwargs):
        seen.append((attention_mask, kwargs.get("cu_seq_lens_q")))
        return packed_attention.packed_sdpa(module, query, key, value, attention_mask, **kwargs)

    AttentionInterface.register(packed_attention.NAME, recording)
    try:
        l_new, g_new = loss_and_grads(packed)
    finally:
        AttentionInterface.register(packed_attention.NAME, packed_attention.packed_sdpa)
    assert seen and all(m is None and b is not None for m, b in seen)  # bounds, no L x L mask
    assert l_new == pytest.approx(l_ref, rel=1e-6)
    for k in g_ref:
        torch.testing.assert_close(g_new[k], g_ref[k], rtol=1e-4, atol=1e-6, msg=k)
    l_pad, _ = loss_and_grads(collate_padded(samples, pad_id=0))  # padded batches keep the padding mask
    assert l_pad == pytest.approx(l_ref, rel=1e-5)
