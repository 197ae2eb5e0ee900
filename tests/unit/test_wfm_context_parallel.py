"""The DiT's context-parallel forward (cosmos_train/wfm/context_parallel.py): at cp = 1 it is diffusers' forward;
on 2 gloo processes its velocity equals the whole-sequence forward and the ranks' gradients add up to its
gradients, for the per-sample and the per-frame ([B, 1, T, 1, 1], video2world) timestep, with the learnable
position embedding on. (diffusers' padding-mask concat needs torchvision, not installed here.)"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from cosmos_train.context_parallel import NO_CP, CpGroup
from cosmos_train.errors import ConfigError
from cosmos_train.net import free_port
from cosmos_train.wfm.context_parallel import check_context_parallel, cp_forward, enable_context_parallel
from tests.spawn_ranks import spawn_ranks

WORLD = 2
ATOL = RTOL = 1e-5
GRAD_RTOL = 1e-4  # sums of ~1e4-sized terms (the learnable position embedding's) in another order


def _dit(heads: int = 4, learnable: bool = True):  # noqa: ANN202 - diffusers' class, imported lazily
    from diffusers import CosmosTransformer3DModel

    torch.manual_seed(0)
    return CosmosTransformer3DModel(
        in_channels=5,
        out_channels=4,
        num_attention_heads=heads,
        attention_head_dim=16,
        num_layers=2,
        mlp_ratio=2.0,
        text_embed_dim=32,
        adaln_lora_dim=8,
        max_size=(8, 16, 16),
        patch_size=(1, 2, 2),
        rope_scale=(1.0, 1.0, 1.0),
        concat_padding_mask=False,
        extra_pos_embed_type="learnable" if learnable else None,
        use_crossattn_projection=True,
        crossattn_proj_in_channels=24,
        encoder_hidden_states_channels=32,
    ).float()


def _inputs(per_frame: bool) -> dict:
    torch.manual_seed(1)
    b, t, h, w = 2, 3, 4, 4  # 3 x 2 x 2 = 12 tokens
    sigma = torch.rand(b)
    mask = torch.zeros(b, 1, t, h, w)
    mask[:, :, 0] = 1.0
    return {
        "hidden_states": torch.randn(b, 4, t, h, w),
        "timestep": sigma.view(b, 1, 1, 1, 1).repeat(1, 1, t, 1, 1) * (1 - mask[:, :, :, :1, :1])
        if per_frame
        else sigma,
        "encoder_hidden_states": torch.randn(b, 5, 24),
        "condition_mask": mask,
        "return_dict": False,
    }


def _check(cp: CpGroup, per_frame: bool) -> None:
    ref = _dit()
    model = enable_context_parallel(copy.deepcopy(ref), cp)
    inputs = _inputs(per_frame)
    out_ref = ref(**inputs)[0]
    out = model(**inputs)[0]
    torch.testing.assert_close(out, out_ref, atol=ATOL, rtol=RTOL)  # the whole velocity on every rank
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(2))
    (out_ref * w).sum().backward()
    (out * w).sum().backward()
    for (name, p), p_ref in zip(model.named_parameters(), ref.parameters()):
        assert p.grad is not None, name
        total = p.grad.clone()
        dist.all_reduce(total)
        torch.testing.assert_close(total, p_ref.grad, atol=ATOL, rtol=GRAD_RTOL, msg=f"gradient of {name}")


def _worker(rank: int, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    for per_frame in (False, True):
        _check(CpGroup(dist.group.WORLD, WORLD, rank), per_frame)
    dist.barrier()  # both ranks done talking before either leaves (a peer gone mid-collective aborts gloo)
    dist.destroy_process_group()


def test_cp_forward_on_two_processes_equals_the_whole_sequence() -> None:
    spawn_ranks(_worker, free_port(), nprocs=WORLD)


@pytest.mark.parametrize("per_frame", [False, True])
def test_cp_forward_without_cp_is_diffusers_forward(per_frame: bool) -> None:
    model = _dit()
    inputs = _inputs(per_frame)
    assert torch.equal(cp_forward(model, NO_CP, **inputs)[0], model(**inputs)[0])
    assert "forward" not in vars(enable_context_parallel(model, NO_CP))  # nothing installed


def test_heads_and_tokens_must_divide() -> None:
    model = _dit(heads=2, learnable=False)
    check_context_parallel(model, 2, (4, 3, 4, 6))
    with pytest.raises(ConfigError) as e:
        check_context_parallel(model, 4, (4, 3, 4, 6))
    text = str(e.value)
    assert "2 attention heads, which do not divide by 4" in text
    assert "18 DiT tokens (3 latent frames x 2 x 3 patches" in text and "num_frames or video_size" in text


def test_config_accepts_cp_and_refuses_what_cannot_divide(tmp_path: Path) -> None:
    from cosmos_train.wfm.config import load_wfm_config
    from tests.conftest import ROOT

    tiny = ROOT / "configs" / "tiny-wfm-flow-grpo.toml"
    model = tmp_path / "model"
    (model / "transformer").mkdir(parents=True)
    (model / "transformer" / "config.json").write_text('{"num_attention_heads": 2}')
    base = [f"model.model_name_or_path='{model}'", f"job.output_dir='{tmp_path / 'out'}'"]
    cfg = load_wfm_config(tiny, [*base, "model_parallel.context_parallel_size=2"], env={})
    assert cfg.parallelism.cp_size == 2 and cfg.parallelism.smallest_world_size() == 2
    with pytest.raises(ConfigError) as e:
        load_wfm_config(tiny, [*base, "model_parallel.context_parallel_size=4"], env={})
    assert "has 2 attention heads, which do not divide by 4" in str(e.value)
    with pytest.raises(ConfigError) as e:
        load_wfm_config(
            tiny,
            [*base, "model_parallel.context_parallel_size=2", "launch.nproc_per_node=3", "model.dp_replicate_size=1"],
            env={},
        )
    assert "3 processes (launch.nproc_per_node x nnodes) are not" in str(e.value)
    assert "launch a multiple of 2 processes" in str(e.value)
