"""The shipped reward handlers, scored through the real service: values computed by hand."""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import pytest
import requests

from cosmos_train.reward_service.config import JudgeSettings, ServiceConfig
from cosmos_train.reward_service.handlers.judge import yes_no_score
from tests.reward_server import auth, body, npy_bytes, running_service


def _score(url: str, meta: dict, tensor: bytes = b"") -> dict[str, list[float]]:
    r = requests.post(url + "/api/reward/enqueue", data=body(meta, tensor), headers=auth(), timeout=30)
    assert r.status_code == 200, r.text
    uuid, out = r.json()["uuid"], {}
    for name in meta["reward_fn"]:
        deadline = time.monotonic() + 120
        while True:
            p = requests.post(url + "/api/reward/pull", data={"uuid": uuid, "type": name}, headers=auth(), timeout=30)
            if p.status_code == 200:
                out[name] = p.json()["scores"][name]
                break
            assert p.status_code == 400 and time.monotonic() < deadline, p.text
            time.sleep(0.05)
    return out


def test_brightness_of_white_and_black_videos() -> None:
    video = np.zeros((2, 3, 4, 6, 6), dtype=np.uint8)
    video[0] = 255
    with running_service() as (url, _):
        scores = _score(url, {"reward_fn": {"brightness": 1.0}, "media_type": "video"}, npy_bytes(video))
    assert scores["brightness"] == [1.0, 0.0]


def test_motion_and_smoothness_by_hand() -> None:
    # [B=2, C=1, T=3, H=1, W=2]; video 0 frames: [0, 0], [51, 102], [51, 0]
    #   |first differences| = 51, 102, 0, 102 -> mean 63.75 / 255 = 0.25 motion
    #   second difference f2 - 2 f1 + f0 = [-51, -204] -> mean |.| 127.5 / 510 = 0.25 -> smoothness 0.75
    # video 1 is still: motion 0, smoothness 1
    video = np.zeros((2, 1, 3, 1, 2), dtype=np.float32)
    video[0, 0, :, 0, :] = [[0, 0], [51, 102], [51, 0]]
    video[1] = 80
    with running_service() as (url, _):
        scores = _score(url, {"reward_fn": {"motion": 1.0, "smoothness": 1.0}, "media_type": "video"}, npy_bytes(video))
    assert scores["motion"] == pytest.approx([0.25, 0.0])
    assert scores["smoothness"] == pytest.approx([0.75, 1.0])


def test_rule_rewards_reuse_the_trainers_registry() -> None:
    # cosmos-rl's format: a blank line between the blocks
    completions = ["<think>rolls</think>\n\n<answer>B</answer>", "<think>x</think>\n\n<answer>A</answer>", "B"]
    samples = [{"reference": "B", "options": {"A": "up", "B": "down"}}] * 3
    with running_service() as (url, _):
        scores = _score(
            url,
            {
                "reward_fn": {"format": 1.0, "single_choice": 1.0},
                "media_type": "text",
                "completions": completions,
                "samples": samples,
            },
        )
    assert scores["format"] == [1.0, 1.0, 0.0]
    assert scores["single_choice"] == [1.0, 0.0, 1.0]


def test_yes_no_score_by_hand() -> None:
    assert yes_no_score("Yes, it is.", math.log(0.8)) == pytest.approx(0.8)
    assert yes_no_score(" no", math.log(0.7)) == pytest.approx(0.3)
    assert yes_no_score("maybe", math.log(0.9)) == 0.0
    assert yes_no_score("", None) == 0.0


YES_LOGIT = 8.0


def _yes_saying_model(tiny_model_dir: Path, out: Path) -> tuple[Path, float]:
    """The tiny model rewired into a bigram machine that answers "yes" to anything: every decoder layer's
    output projection is zeroed (the residual stream is the input token's embedding), every token embeds to
    e0 except 'y' (e1) and 'es' (e2), and the head maps e0 -> 'y', e1 -> 'es', e2 -> <|im_end|>. Returns the
    folder and P('y' | any prompt) computed by hand: logit YES_LOGIT for 'y', 0 for the other vocab - 1."""
    import shutil

    from safetensors.torch import load_file, save_file
    from transformers import AutoTokenizer

    shutil.copytree(tiny_model_dir, out)
    tok = AutoTokenizer.from_pretrained(out)
    y, es = tok.encode("yes")  # two BPE pieces in the tiny vocabulary: 'y', 'es'
    end = tok.convert_tokens_to_ids("<|im_end|>")
    sd = load_file(out / "model.safetensors")
    for k in sd:
        if k.endswith(("self_attn.o_proj.weight", "mlp.down_proj.weight")) and "visual" not in k:
            sd[k].zero_()
    vocab, hidden = sd["lm_head.weight"].shape
    emb = sd["model.embed_tokens.weight"]
    emb.zero_()
    emb[:, 0] = 1.0
    emb[y], emb[es] = 0.0, 0.0
    emb[y, 1], emb[es, 2] = 1.0, 1.0
    sd["model.norm.weight"].fill_(1.0)
    head = sd["lm_head.weight"]
    head.zero_()
    # RMSNorm turns a one-hot e_i into sqrt(hidden) e_i (eps 1e-6 aside), so a row c e_i gives logit c sqrt(hidden)
    scale = YES_LOGIT / hidden**0.5
    head[y, 0], head[es, 1], head[end, 2] = scale, 50.0, 50.0
    save_file(sd, out / "model.safetensors", metadata={"format": "pt"})
    return out, 1.0 / (1.0 + (vocab - 1) * math.exp(-YES_LOGIT))


def test_vlm_judge_loads_a_local_model_through_the_generation_layer(tiny_model_dir: Path, tmp_path: Path) -> None:
    model, p_yes = _yes_saying_model(tiny_model_dir, tmp_path / "judge")
    prompts, completions = ["Which way does the ball roll?", "Is it red?"], ["<answer>B</answer>", "no"]
    settings = JudgeSettings(model_path=str(model), max_length=512)
    with running_service(ServiceConfig(handlers={"vlm_judge": settings})) as (url, _):
        scores = _score(
            url, {"reward_fn": {"vlm_judge": 1.0}, "media_type": "text", "prompts": prompts, "completions": completions}
        )
    assert 0.5 < p_yes < 0.99  # a probability the test can tell apart from 0, 1 and a coin
    assert scores["vlm_judge"] == pytest.approx([p_yes, p_yes], rel=1e-3)


def test_judge_without_a_model_is_refused_at_enqueue() -> None:
    with running_service() as (url, _):
        r = requests.post(
            url + "/api/reward/enqueue",
            headers=auth(),
            timeout=10,
            data=body({"reward_fn": {"vlm_judge": 1.0}, "media_type": "text", "completions": ["a"]}),
        )
    assert r.status_code == 400 and "reward_fn.vlm_judge" in r.json()["detail"] and "model_path" in r.json()["detail"]
