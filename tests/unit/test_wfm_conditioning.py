"""Video2world conditioning (cosmos_train/wfm/conditioning.py): the given frames stay clean, reach the DiT as
diffusers' Cosmos2_5 pipeline gives them, the log-probs and losses cover generated frames only, and the number of
conditional frames is drawn as cosmos-rl draws it.

HF_HUB_OFFLINE=1 .venv/bin/python -m pytest -q tests/unit/test_wfm_conditioning.py
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.distributed as dist

from cosmos_train.errors import ConfigError
from cosmos_train.reward_service.config import ServiceConfig
from cosmos_train.reward_service.handlers import HANDLERS, Batch
from cosmos_train.wfm import conditioning as cd
from cosmos_train.wfm import model as wm
from cosmos_train.wfm import model_export
from cosmos_train.wfm.config import wfm_config_from_dict
from cosmos_train.wfm.config_states import conditioner_states
from cosmos_train.wfm.data import load_clip
from cosmos_train.wfm.losses import flow_matching_loss
from cosmos_train.wfm.sde import gaussian_kl, sde_step, sigma_schedule
from tests.cosmos_rl_oracle import oracle_function

CONDITION = "cosmos_rl.policy.model.wfm.conditioner.condition"
T2V_MODEL = "cosmos_rl.policy.model.wfm.models.t2v_model"


@pytest.fixture(scope="module")
def parts(tiny_wfm_dir: Path) -> wm.WfmParts:
    return wm.load_wfm(tiny_wfm_dir)


def _cond(b: int = 3, t: int = 3, k: Any = 1) -> cd.FrameCondition:
    return cd.frame_condition(torch.randn(b, 4, t, 4, 4, generator=torch.Generator().manual_seed(1)), k)


def test_condition_masks_timesteps_and_clean_frames() -> None:
    cond = _cond(k=torch.tensor([0, 1, 2]))
    assert cond.indicator[:, 0, :, 0, 0].tolist() == [[0, 0, 0], [1, 0, 0], [1, 1, 0]]
    assert cond.mask().shape == (3, 1, 3, 4, 4) and torch.equal(cond.mask()[:, :, :, 2, 1], cond.indicator[..., 0, 0])
    assert torch.equal(cond.generated, 1 - cond.indicator)
    x = torch.randn(3, 4, 3, 4, 4)
    y = cond.apply(x)
    assert torch.equal(y[1, :, :1], cond.latents[1, :, :1]) and torch.equal(y[2, :, :2], cond.latents[2, :, :2])
    assert torch.equal(y[0], x[0]) and torch.equal(y[1, :, 1:], x[1, :, 1:]) and torch.equal(y[2, :, 2:], x[2, :, 2:])
    ts = cond.timestep(torch.tensor([0.7, 0.5, 0.3]))
    assert ts.shape == (3, 1, 3, 1, 1)
    assert torch.allclose(ts[:, 0, :, 0, 0], torch.tensor([[0.7] * 3, [1e-4, 0.5, 0.5], [1e-4, 1e-4, 0.3]]))
    rep = cond.repeat_interleave(2)
    assert rep.num_frames.tolist() == [0, 0, 1, 1, 2, 2] and torch.equal(
        rep.rows(slice(2, 4)).latents[1], cond.latents[1]
    )
    for bad in (4, -1):
        with pytest.raises(ValueError, match="between 0 and the 3 latent frames"):
            _cond(k=bad)
    assert cd.conditioning_pixels(1) == 1 and cd.conditioning_pixels(2) == 5
    assert cd.eval_num_conditional_frames(0, 0) == 0 and cd.eval_num_conditional_frames(0, 2) == 1
    assert cd.eval_num_conditional_frames(2, 3) == 2


def test_dit_gets_what_the_pipeline_gives_it(parts: wm.WfmParts) -> None:
    """The pipeline's video2world call (pipeline_cosmos2_5_predict.py __call__), written out: in_latents with the
    clean frames, condition_mask = cond_mask, timestep = cond_indicator * 1e-4 + (1 - cond_indicator) * sigma."""
    emb = wm.encode_prompts(parts, ["a", "b"], 16)
    x, sigma = torch.randn(2, 4, 3, 4, 4), torch.tensor([0.8, 0.4])
    cond = cd.frame_condition(torch.randn(2, 4, 3, 4, 4), torch.tensor([1, 2]))
    ind = cond.indicator
    with torch.no_grad():
        theirs = parts.transformer(
            hidden_states=ind * cond.latents + (1 - ind) * x,
            condition_mask=ind.expand(2, 1, 3, 4, 4),
            timestep=ind * 1e-4 + (1 - ind) * sigma.view(2, 1, 1, 1, 1),
            encoder_hidden_states=emb,
            return_dict=False,
        )[0]
        ours = cd.conditioned_velocity(parts.transformer, x, sigma, emb, cond)
        assert torch.allclose(ours * cond.generated, theirs * cond.generated, atol=1e-6)
        assert torch.equal(ours * ind, torch.zeros_like(ours))  # the given frames do not move
        # the given frames reach the generated ones: other clips, other velocities
        other = cd.conditioned_velocity(
            parts.transformer, x, sigma, emb, cd.frame_condition(-cond.latents, torch.tensor([1, 2]))
        )
        assert (other - ours).abs()[:, :, 2:].max() > 1e-3
        # no frame given is text2world, as before
        none = cd.conditioned_velocity(parts.transformer, x, sigma, emb, cd.frame_condition(cond.latents, 0))
        assert torch.allclose(none, wm.predict_velocity(parts.transformer, x, sigma, emb), atol=1e-6)


def test_sampling_keeps_the_given_frames_clean(parts: wm.WfmParts) -> None:
    emb = wm.encode_prompts(parts, ["a", "b"], 16)
    cond = cd.frame_condition(torch.randn(2, 4, 3, 4, 4), torch.tensor([1, 2]))
    out = cd.sample_ode(parts.transformer, torch.randn(2, 4, 3, 4, 4), sigma_schedule(3, 3.0), emb, cond)
    assert torch.equal(cond.indicator * out, cond.indicator * cond.latents)
    guided = cd.sample_ode(
        parts.transformer, torch.randn(2, 4, 3, 4, 4), sigma_schedule(2), emb, cond, guidance=2.0, uncond_embeds=emb * 0
    )
    assert torch.equal(cond.indicator * guided, cond.indicator * cond.latents)


def test_log_probs_kl_and_data_loss_cover_generated_frames_only() -> None:
    cond = _cond(b=2, k=torch.tensor([1, 2]))
    w = cond.generated
    x = cond.apply(torch.randn(2, 4, 3, 4, 4))
    v = torch.randn(2, 4, 3, 4, 4, requires_grad=True)
    x_next = torch.randn(2, 4, 3, 4, 4)
    step = sde_step(x, v, 0.6, 0.4, 0.7, x_next=x_next, weight=w)
    # a change on a given frame changes nothing; one on a generated frame does
    moved = x_next.clone()
    moved[:, :, 0] += 5.0
    assert torch.equal(sde_step(x, v, 0.6, 0.4, 0.7, x_next=moved, weight=w).log_prob, step.log_prob)
    moved[:, :, 2] += 5.0
    assert (sde_step(x, v, 0.6, 0.4, 0.7, x_next=moved, weight=w).log_prob != step.log_prob).all()
    # the weighted log-prob is the plain mean over the generated frames (item 0: frames 1-2; item 1: frame 2)
    for i, first in ((0, 1), (1, 2)):
        alone = sde_step(
            x[i : i + 1, :, first:], v[i : i + 1, :, first:], 0.6, 0.4, 0.7, x_next=x_next[i : i + 1, :, first:]
        )
        assert torch.allclose(step.log_prob[i], alone.log_prob[0])
    step.log_prob.sum().backward()
    assert v.grad is not None and torch.equal(v.grad * cond.indicator, torch.zeros_like(v.grad))
    assert (v.grad[:, :, 2] != 0).any()
    # without a weight: as before, every element
    assert not torch.allclose(sde_step(x, v, 0.6, 0.4, 0.7, x_next=x_next).log_prob, step.log_prob)
    ref = step.mean.detach() + 1.0
    ref[:, :, 0] += 100.0  # the reference's given frames do not count either
    kl = gaussian_kl(step.mean, ref, step.std, w)
    assert torch.allclose(kl, torch.full((2,), 1.0 / (2 * float(step.std) ** 2)))
    x0, noise = torch.randn(2, 4, 3, 4, 4), torch.randn(2, 4, 3, 4, 4)
    v_pred = (noise - x0) + cond.indicator * 7.0  # wrong on the given frames only
    assert float(flow_matching_loss(v_pred, x0, noise, w)) == pytest.approx(0.0, abs=1e-10)
    assert float(flow_matching_loss(v_pred, x0, noise)) > 1.0


def test_group_draw_is_cosmos_rls(tmp_path: Path) -> None:
    """cosmos-rl's WorldFoundationalModel._sync_data_across_rollouts, run from the installed source in a 1-process
    gloo group: one k for the data batch of a rollout group, torch.randint(min, max + 1) from the global RNG."""
    sync = oracle_function(
        T2V_MODEL,
        "WorldFoundationalModel._sync_data_across_rollouts",
        broadcast=lambda v, g: v,
        logger=logging.getLogger("oracle"),
    )

    class Infos:
        rl_cached_trajectory = None
        data_batch: dict[str, Any] = {}

    class Model:
        inference_infos = Infos()
        my_rollout_group = {"group": None}

        def __init__(self, lo: int, hi: int) -> None:
            rl = type(
                "Rl",
                (),
                {
                    "use_same_seed": False,
                    "min_num_conditional_frames": lo,
                    "max_num_conditional_frames": hi,
                    "train_on": [0, -1],
                    "sample_steps": 4,
                },
            )
            self.config = type("Cfg", (), {"rl": rl})

    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1)
    try:
        for lo, hi in ((0, 0), (1, 1), (0, 3), (2, 5)):
            theirs = []
            for seed in range(12):
                torch.manual_seed(seed)
                theirs.append(sync(Model(lo, hi), {})["num_conditional_frames"])
            ours = [cd.draw_group_num_conditional_frames(lo, hi, torch.Generator().manual_seed(s)) for s in range(12)]
            assert ours == theirs, (lo, hi)
            assert set(ours) <= set(range(lo, hi + 1))
    finally:
        dist.destroy_process_group()
    with pytest.raises(ValueError, match="min_num_conditional_frames"):
        cd.draw_group_num_conditional_frames(2, 1, torch.Generator())


@pytest.mark.parametrize(("lo", "hi", "t", "fixed"), [(0, 2, 3, None), (1, 3, 4, None), (0, 2, 3, 2), (1, 2, 1, None)])
def test_per_item_draw_is_cosmos_rls_set_video_condition(lo: int, hi: int, t: int, fixed: int | None) -> None:
    """Vid2VidCondition.set_video_condition (installed source): its mask's leading ones per item are our k."""
    set_video_condition = oracle_function(CONDITION, "Vid2VidCondition.set_video_condition")

    class Cond(dict):
        def to_dict(self, skip_underscore: bool = True) -> dict[str, Any]:
            return {}

    torch.manual_seed(3)
    mask = set_video_condition(Cond(), torch.zeros(16, 2, t, 2, 2), lo, hi, fixed)[
        "condition_video_input_mask_B_C_T_H_W"
    ]
    theirs = mask[:, 0, :, 0, 0].sum(dim=1).int()
    ours = cd.draw_sample_num_conditional_frames(lo, hi, 16, t, torch.Generator().manual_seed(3), fixed)
    assert ours.tolist() == theirs.tolist()
    ind = cd.frame_condition(torch.zeros(16, 2, t, 2, 2), ours.clamp(max=t)).indicator
    assert torch.equal(ind[:, 0, :, 0, 0], mask[:, 0, :, 0, 0])  # and the same mask


def test_first_frame_brightness_reward_by_hand() -> None:
    video = np.zeros((2, 3, 3, 2, 2), dtype=np.uint8)
    video[0, :, 0], video[0, :, 1], video[0, :, 2] = 100, 100, 151  # |0| and |51| -> 1 - 25.5 / 255 = 0.9
    video[1] = 200  # every frame as bright as the first
    batch = Batch(media_type="video", size=2, media=video, prompts=["a", "b"])
    scores = HANDLERS["first_frame_brightness"]("first_frame_brightness", ServiceConfig()).score(batch)
    assert scores == pytest.approx([0.9, 1.0])


def test_config_takes_video2world_and_refuses_what_cannot_run(tmp_path: Path) -> None:
    flag = {"name": "use_video_condition", "type": "boolean_flag"}
    text = {"name": "text", "type": "text_attr"}
    raw: dict[str, Any] = {
        "model": {
            "model_name_or_path": "/tmp",
            "rl": {"min_num_conditional_frames": 1, "max_num_conditional_frames": 1},
            "conditioner": [text, flag],
        },
        "dataloader_train": {"type": "local", "video_dataloader": {"dataset_dir": "/tmp", "num_frames": 5}},
    }
    cfg = wfm_config_from_dict(raw)
    assert (
        dict((k, s) for k, s, _ in conditioner_states(cfg))["model.conditioner[use_video_condition]"] == "implemented"
    )
    raw["model"]["rl"]["max_num_conditional_frames"] = 2  # 5 frames: 2 latent frames, none left to generate
    with pytest.raises(ConfigError, match="max_num_conditional_frames = 2: a 5-frame video has 2 latent frames"):
        wfm_config_from_dict(raw)


def test_export_runs_as_video2world_in_diffusers_pipeline(
    parts: wm.WfmParts, tiny_wfm_dir: Path, wfm_data_dir: Path, tmp_path: Path
) -> None:
    """An export loads in Cosmos2_5_PredictBasePipeline (the guardrail given as safety_checker=, see
    test_wfm_model.py) and generates from a conditioning video: its first latent frame is the clip's, and every
    DiT call gets the mask, timestep and clean frames this module gives the DiT in training."""
    from diffusers import DiffusionPipeline

    class NoGuardrail:
        def to(self, *args: object, **kwargs: object) -> NoGuardrail:
            return self

        def check_text_safety(self, prompt: str) -> bool:
            return True

    g = torch.Generator().manual_seed(0)
    trained = {k: t + 0.01 * torch.randn(t.shape, generator=g) for k, t in parts.transformer.state_dict().items()}
    out = model_export.export_wfm(tiny_wfm_dir, trained, tmp_path / "export")
    pipe = DiffusionPipeline.from_pretrained(out, safety_checker=NoGuardrail())
    clip = load_clip(sorted((wfm_data_dir / "videos").glob("*.mp4"))[0], 5, 32, 32).unsqueeze(0)
    given = cd.conditioning_pixels(1)  # the pipeline conditions on the LAST frames it is given: give the first
    calls: list[dict[str, torch.Tensor]] = []
    pipe.transformer.register_forward_pre_hook(lambda m, a, kw: calls.append(dict(kw)), with_kwargs=True)
    with torch.no_grad():
        latents = pipe(
            video=clip[:, :, :given].float() / 127.5 - 1,
            prompt="a dark scene",
            height=32,
            width=32,
            num_frames=5,
            num_inference_steps=2,
            guidance_scale=1.0,
            num_latent_conditional_frames=1,
            max_sequence_length=32,
            output_type="latent",
            generator=torch.Generator().manual_seed(0),
        ).frames
        frames = pipe.vae.decode(latents / pipe.latents_std + pipe.latents_mean).sample
    z = wm.encode_video(parts, clip)
    assert latents.shape == z.shape == (1, 4, 2, 4, 4) and frames.shape == (1, 3, 5, 32, 32)
    assert torch.allclose(latents[:, :, :1], z[:, :, :1], atol=1e-4)  # the given frame, clean at the end
    cond = cd.frame_condition(z, 1)
    assert len(calls) == 2
    for call in calls:
        assert torch.equal(call["condition_mask"], cond.mask())
        sigma = call["timestep"][:, :, -1].flatten()
        assert torch.allclose(call["timestep"], cond.timestep(sigma))
        assert torch.allclose(call["hidden_states"][:, :, :1], z[:, :, :1], atol=1e-4)
