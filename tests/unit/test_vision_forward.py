"""The trainer's forward (one vision-tower call per micro-batch) gives the model's own loss and gradients,
for every model family (Qwen3-VL's deepstack features included)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from cosmos_train.data.chat import encode_chat
from cosmos_train.models.families import family_of
from cosmos_train.models.load import load_model, load_processor
from cosmos_train.train.batching import MicroBatch, collate_packed, collate_padded, model_inputs
from cosmos_train.train.sft_loss import token_ce_sum
from cosmos_train.train.vision_forward import forward_micro_batch, media_in_micro_batches
from tests.conftest import FAMILIES
from tests.media import moving_square_mp4

PIXELS = {"min_pixels": 3136, "max_pixels": 3136}


def _chat(media: list[tuple[str, Path]], q: str, a: str) -> list[dict]:
    content = [{"type": kind, kind: str(path), **PIXELS} for kind, path in media]
    return [{"role": "user", "content": [*content, {"type": "text", "text": q}]}, {"role": "assistant", "content": a}]


@pytest.fixture(scope="module", params=FAMILIES)
def setup(
    request: pytest.FixtureRequest, family_model_dirs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> tuple:
    tmp = tmp_path_factory.mktemp("vision-forward")
    image = tmp / "noise.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (56, 70, 3), dtype=np.uint8)).save(image)
    video = moving_square_mp4(tmp / "a.mp4", 5)
    proc = load_processor(family_model_dirs[request.param])
    model = load_model(family_model_dirs[request.param], dtype=torch.float32)
    model.eval()  # no dropout in either path
    chats = {
        "image": _chat([("image", image)], "What is in the picture?", "Noise."),
        "video": _chat([("video", video)], "Which way does it move?", "Right."),
        "both": _chat([("video", video), ("image", image), ("video", video)], "Same scene?", "No, it is not."),
        "text": _chat([], "A text-only question.", "A text-only answer."),
    }
    return model, {k: encode_chat(proc, c, max_length=512) for k, c in chats.items()}


def _loss_and_grads(
    model: torch.nn.Module, mb: MicroBatch, shared: bool, run_vision: bool = False
) -> tuple[float, dict[str, torch.Tensor]]:
    model.zero_grad()
    if shared:
        out, blank = forward_micro_batch(model, mb, run_vision, use_cache=False)
    else:
        out, blank = model(**model_inputs(model, mb), use_cache=False), None
    s, n = token_ce_sum(out.logits, mb.labels)
    loss = s / n
    (loss if blank is None else loss + blank).backward()
    return loss.item(), {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}


def _is_vision(model: torch.nn.Module, name: str) -> bool:
    return name.startswith(family_of(model).vision_prefixes)


MODALITIES = {"image": {"image"}, "video": {"video"}, "both": {"image", "video"}, "text": set()}


@pytest.mark.parametrize(
    ("rows", "packed"),
    [
        (["image"], False),
        (["video"], False),
        (["both"], False),
        (["image", "video", "text"], False),
        (["text", "both", "image"], True),
    ],
)
def test_shared_vision_call_equals_model_forward(setup: tuple, rows: list[str], packed: bool) -> None:
    model, samples = setup
    batch = [samples[r] for r in rows]
    mb = collate_packed(batch) if packed else collate_padded(batch, pad_id=0)
    assert mb.has_media
    l_ref, g_ref = _loss_and_grads(model, mb, shared=False)
    l_new, g_new = _loss_and_grads(model, mb, shared=True, run_vision=True)
    assert g_new.keys() == g_ref.keys() and any(_is_vision(model, k) for k in g_ref)
    assert l_new == pytest.approx(l_ref, rel=1e-6)
    # a single modality goes through the tower as in the model's forward (one call on the same rows):
    # bit-equal; with both, one call instead of two only changes float summation order, if anything (~3e-7
    # on Qwen3-VL, whose deepstack features reach every early language layer)
    single = len(set().union(*(MODALITIES[r] for r in rows))) == 1
    for k in g_ref:
        if single:
            assert torch.equal(g_new[k], g_ref[k]), k
        else:
            torch.testing.assert_close(g_new[k], g_ref[k], rtol=1e-5, atol=1e-6, msg=k)


@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
def test_text_only_batch_runs_a_blank_grid_only_when_asked(setup: tuple, packed: bool) -> None:
    model, samples = setup
    batch = [samples["text"], samples["text"]]
    mb = collate_packed(batch) if packed else collate_padded(batch, pad_id=0)
    assert not mb.has_media
    l_ref, g_ref = _loss_and_grads(model, mb, shared=False)
    # no rank has media: no tower, the vision parameters get no gradient, as with the model's forward
    l_off, g_off = _loss_and_grads(model, mb, shared=True, run_vision=False)
    assert l_off == l_ref and g_off.keys() == g_ref.keys()
    assert not any(_is_vision(model, k) for k in g_ref)
    # another rank has media: a blank grid through the tower whose gradients are exact zeros
    l_on, g_on = _loss_and_grads(model, mb, shared=True, run_vision=True)
    assert l_on == l_ref
    visual = {k for k in g_on if _is_vision(model, k)}
    assert visual and g_on.keys() - visual == g_ref.keys()
    assert all(not g_on[k].any() for k in visual)
    for k in g_ref:
        assert torch.equal(g_on[k], g_ref[k]), k


def test_media_flags_per_micro_batch(setup: tuple) -> None:
    _, samples = setup
    micro = [collate_padded([samples[r]], pad_id=0) for r in ("text", "image", "video", "text")]
    assert media_in_micro_batches(micro, torch.device("cpu")) == [False, True, True, False]


@pytest.mark.parametrize(
    ("rows", "packed"), [(["both", "text"], False), (["text", "video", "image"], True)], ids=["padded", "packed"]
)
def test_fused_head_loss_equals_the_logits_loss(setup: tuple, rows: list[str], packed: bool) -> None:
    """train.fused_linear_ce: the LM head run by the loss on the hidden states at the label positions, in chunks
    smaller than the batch's label tokens, gives the logits path's loss and gradients (lm_head's included)."""
    from cosmos_train.train.linear_ce import head_weight, linear_ce_sum
    from cosmos_train.train.sft_loss import kept_ce_sum
    from cosmos_train.train.step import forward_head_loss, forward_logits

    model, samples = setup
    batch = [samples[r] for r in rows]
    mb = collate_packed(batch) if packed else collate_padded(batch, pad_id=0)

    def run(fused: bool) -> tuple[float, int, dict[str, torch.Tensor]]:
        model.zero_grad()
        if fused:

            def head_loss(
                i: int, mb: MicroBatch, hidden: torch.Tensor, lm_head: torch.nn.Module, keep: torch.Tensor
            ) -> torch.Tensor:
                ce, n = linear_ce_sum(
                    hidden.reshape(-1, hidden.shape[-1]),
                    head_weight(lm_head),
                    mb.labels[:, keep + 1].reshape(-1),
                    chunk_rows=3,
                )
                counted.append(n)
                return ce

            counted: list[int] = []
            loss, blank = forward_head_loss(model, 0, mb, True, head_loss)
            n = counted[0]
        else:
            logits, keep, blank = forward_logits(model, mb, True)
            loss, n = kept_ce_sum(logits, mb.labels, keep)
        (loss if blank is None else loss + blank).backward()
        return loss.item(), n, {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}

    l_ref, n_ref, g_ref = run(fused=False)
    l_new, n_new, g_new = run(fused=True)
    assert n_new == n_ref > 3 and l_new == pytest.approx(l_ref, rel=1e-5)
    assert g_new.keys() == g_ref.keys() and "lm_head.weight" in g_ref
    for k in g_ref:
        # summation order differs (chunks, fp32 accumulation of the head gradient): ~1e-6 apart
        torch.testing.assert_close(g_new[k], g_ref[k], rtol=1e-4, atol=1e-5, msg=lambda m, k=k: f"{k}: {m}")
