"""cosmos-rl's world-model recipes (tests/data/cosmos_rl_configs/wfm/, its configs/cosmos-predict2-5/*.toml as
published) load: what `config check` says of each is recorded here, the values read are the ones cosmos-rl 0.4.7's
own schema reads from the same file (defaults included), and every [[model.conditioner]] / [[trainer.callbacks]]
entry is in one stated state: implemented, accepted with no effect (with why) or refused (with what to do)."""

from __future__ import annotations

import ast
import copy
import tomllib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from cosmos_train.config import load_config
from cosmos_train.errors import ConfigError
from cosmos_train.wfm.config import load_wfm_config, wfm_config_from_dict
from cosmos_train.wfm.config_schema import WfmConfig
from cosmos_train.wfm.config_states import callback_states, conditioner_states
from cosmos_train.wfm.cosmos_rl_form import CALLBACK_STATES, COSMOS_RL_DEFAULTS, RL_ALIASES
from cosmos_train.wfm.rl_step import drop_text
from cosmos_train.wfm.sde import sigma_schedule
from cosmos_train.wfm.trainer import WfmTrainer
from tests.cli_inprocess import RunCli
from tests.conftest import ROOT
from tests.cosmos_rl_oracle import oracle_module, oracle_root

RECIPES = ROOT / "tests" / "data" / "cosmos_rl_configs" / "wfm"
GRPO, GRPO_MOCK = "cosmos-predict2-5-2b-480-grpo.toml", "cosmos-predict2-5-2b-480-grpo-mock-data.toml"
DDRL_2B, DDRL_14B = (
    "cosmos-predict2-5-2b-720-reason-embedding-ddrl.toml",
    "cosmos-predict2-5-14b-720-reason-embedding-ddrl.toml",
)
NFT = "cosmos-predict2-5-2b-720-nft.toml"
IMAGINAIRE = [GRPO, GRPO_MOCK, DDRL_2B, DDRL_14B]

# what `config check` refuses in each recipe as published, one problem each (the start of its line)
AS_PUBLISHED = {
    GRPO: [
        "checkpoint.model_id = 'base/pre-trained/d20b7120",
        "dataloader_train.video_dataloader.dataset_dir",
    ],
    GRPO_MOCK: ["model.model_name_or_path / checkpoint.load_path"],  # its data: cosmos-rl's mock (wfm/mock_data.py)
    DDRL_2B: [
        "checkpoint.model_id = 'base/pre-trained/d20b7120",
        "dataloader_train.video_dataloader.dataset_dir",
    ],
    DDRL_14B: [
        "checkpoint.model_id = 'base/pre-trained/54937b8c",
        "dataloader_train.video_dataloader.dataset_dir",
    ],
}
TEXT2WORLD = ["model.rl.min_num_conditional_frames=0", "model.rl.max_num_conditional_frames=0"]


def runnable(name: str, model: Path, data: Path) -> list[str]:
    """The overrides that make a published recipe one that runs here: its model a diffusers folder, text2world, no
    context parallelism, a local dataset (the mock-data recipe: its own, cosmos-rl's mock video dataset)."""
    out = [
        f"checkpoint.load_path='{model}'",
        "checkpoint.model_id=''",
        *TEXT2WORLD,
        "model_parallel.context_parallel_size=1",
    ]
    if name == GRPO_MOCK:
        return out
    return out + [f"dataloader_train.video_dataloader.dataset_dir='{data}'"]


def _raw(name: str) -> dict[str, Any]:
    return tomllib.loads((RECIPES / name).read_text())


def _oracle(name: str) -> Any:
    """cosmos-rl 0.4.7's own reading of the recipe (CosmosVisionGenConfig, defaults included)."""
    return oracle_module("cosmos_rl.policy.config.wfm").CosmosVisionGenConfig.from_dict(copy.deepcopy(_raw(name)))


@pytest.mark.parametrize("name", IMAGINAIRE)
def test_published_recipe_loads_and_refuses_only_what_cannot_run_here(name: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_wfm_config(RECIPES / name, env={})
    problems = e.value.problems
    assert len(problems) == len(AS_PUBLISHED[name]), "\n".join(problems)
    for problem, start in zip(problems, AS_PUBLISHED[name], strict=True):
        assert problem.startswith(start), problem
    assert "unknown key" not in "\n".join(problems)  # every key of the recipe is read
    converted = next((p for p in problems if p.startswith("checkpoint.model_id")), "")
    if converted:  # the refusal says exactly how to make the diffusers folder the run needs
        size = "14B" if name == DDRL_14B else "2B"
        assert f"convert_cosmos_to_diffusers.py --transformer_type Cosmos-2.5-Predict-Base-{size}" in converted
        assert 'set checkpoint.load_path = "DIR" and checkpoint.model_id = ""' in converted


def test_diffusion_nft_recipe_is_refused_naming_its_trainer() -> None:
    with pytest.raises(ConfigError) as e:
        load_config(RECIPES / NFT, env={})
    text = "\n".join(e.value.problems)
    assert 'train.train_policy.trainer_type = "diffusion_nft"' in text and "DiffusionNFT" in text
    assert "not implemented here" in text and "cosmos-train wfm-rl" in text


@pytest.mark.parametrize("name", IMAGINAIRE)
def test_runnable_recipe_reads_what_cosmos_rl_reads(name: str, tmp_path: Path) -> None:
    cfg = load_wfm_config(RECIPES / name, runnable(name, tmp_path, tmp_path), env={})
    ref = _oracle(name)
    rl, ref_rl = cfg.model.rl, ref.model.rl
    assert cfg.model.model_name_or_path == str(tmp_path)  # checkpoint.load_path is the model
    assert (rl.num_generations, rl.sample_steps, rl.train_on, rl.update_ref_every_iter) == (
        ref_rl.num_rollout,
        ref_rl.sample_steps,
        ref_rl.train_on,
        ref_rl.update_ref_every_iter,
    )
    assert (rl.kl_beta, rl.data_beta, rl.guidance, rl.clip_range, rl.use_same_seed) == (
        ref_rl.kl_beta,
        ref_rl.data_beta,
        ref_rl.guidance,
        ref_rl.clip_ratio,
        ref_rl.use_same_seed,
    )
    assert rl.algorithm == ("ddrl" if ref_rl.data_beta > 0 else "flow_grpo")
    o, ref_o = cfg.optimizer, ref.optimizer
    assert (o.lr, o.weight_decay, o.betas, o.eps) == (ref_o.lr, ref_o.weight_decay, ref_o.betas, ref_o.eps)
    s, ref_s = cfg.scheduler, ref.scheduler
    assert (s.f_start, s.f_max, s.f_min, s.warm_up_steps, s.cycle_lengths) == (
        ref_s.f_start,
        ref_s.f_max,
        ref_s.f_min,
        ref_s.warm_up_steps,
        ref_s.cycle_lengths,
    )
    assert (cfg.trainer.max_iter, cfg.checkpoint.save_iter) == (ref.trainer.max_iter, ref.checkpoint.save_iter)
    clip = next(c.args for c in ref.trainer.callbacks if c.name == "grad_clip")
    assert (cfg.grad_clip(), cfg.grad_force_finite()) == (clip["clip_norm"], clip["force_finite"])
    text = next(c for c in ref.model.conditioner if c.type == "text_attr")
    assert cfg.text_dropout_rate() == text.dropout_rate
    assert (cfg.model.fsdp_shard_size, cfg.model.dp_replicate_size, cfg.model.param_dtype) == (
        ref.model.fsdp_shard_size,
        ref.model.dp_replicate_size,
        ref.model.precision,
    )
    if name == GRPO_MOCK:  # cosmos-rl's mock video dataset: its shapes (tests/unit/test_wfm_mock_data.py: its rows)
        loader = ref.dataloader_train.video_dataloader.dataloader
        mock = cfg.dataloader_train.mock_video
        assert mock is not None and (mock.num_frames, mock.len_t5, mock.t5_dim, cfg.video.batch_size) == (
            loader.dataset.num_video_frames,
            loader.dataset.len_t5,
            loader.dataset.t5_dim,
            loader.batch_size,
        )
    if ref.dataloader_train.type == "local":
        v, ref_v = cfg.video, ref.dataloader_train.video_dataloader
        assert (v.num_frames, v.video_size, v.offline_text_embedding, v.batch_size) == (
            ref_v.num_frames,
            ref_v.video_size,
            ref_v.offline_text_embedding,
            ref_v.batch_size,
        )
    # the written run config is the resolved one: it loads back to the same values
    cfg.write(tmp_path / "config.toml")
    assert load_wfm_config(tmp_path / "config.toml", env={}).model_dump() == cfg.model_dump()


@pytest.mark.parametrize("name", IMAGINAIRE)
def test_every_imaginaire_entry_has_one_state(name: str, tmp_path: Path) -> None:
    cfg = load_wfm_config(RECIPES / name, runnable(name, tmp_path, tmp_path), env={})
    states = {key: state for key, state, _ in conditioner_states(cfg) + callback_states(cfg)}
    assert states.pop("trainer.callbacks[grad_clip]") == "implemented"
    text = states.pop("model.conditioner[text]")
    assert text == (
        "implemented" if cfg.model.rl.algorithm == "ddrl" else "no effect" if cfg.text_dropout_rate() else "implemented"
    )
    assert set(states.values()) == {"no effect"}, states
    said = {n.key for n in cfg.no_effect}
    assert set(states) <= said  # each no-effect entry is listed by `config check`, with why


def test_config_check_prints_states_and_cosmos_rl_defaults(tmp_path: Path, run_cli: RunCli) -> None:
    args = [a for o in runnable(GRPO, tmp_path, tmp_path) for a in ("--set", o)]
    res = run_cli("config", "check", RECIPES / GRPO, *args, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert "cosmos-rl's defaults taken for reward, model.param_dtype, model.rl.sample_steps" in res.stderr
    assert "trainer.callbacks[every_n_sample_ema]" in res.stderr and "model.conditioner[fps]" in res.stderr
    assert "# ok:" in res.stderr and "(wfm_rl: flow_grpo)" in res.stderr
    res = run_cli("config", "check", RECIPES / GRPO, cwd=ROOT)
    assert res.returncode == 2 and "Traceback" not in res.stderr and "convert_cosmos_to_diffusers" in res.stderr


def test_cosmos_rl_defaults_are_cosmos_rls() -> None:
    wfm = oracle_module("cosmos_rl.policy.config.wfm")
    names = {v: k for k, v in RL_ALIASES.items()}
    ref_rl = wfm.RLConfig()
    for key, value in COSMOS_RL_DEFAULTS["model"]["rl"].items():
        assert getattr(ref_rl, names.get(key, key)) == value, key
    for section, cls in (
        ("optimizer", wfm.OptimizerConfig),
        ("scheduler", wfm.SchedulerConfig),
        ("trainer", wfm.TrainerConfig),
        ("checkpoint", wfm.CheckpointConfig),
    ):
        for key, value in COSMOS_RL_DEFAULTS[section].items():
            assert list(getattr(cls(), key)) == value if isinstance(value, list) else getattr(cls(), key) == value
    assert COSMOS_RL_DEFAULTS["model"]["param_dtype"] == wfm.ModelConfig().precision
    assert (
        wfm.RemoteRewardConfig().enabled and wfm.RemoteRewardConfig().reward_fn in COSMOS_RL_DEFAULTS["reward"]["fns"]
    )
    # our own recipes (model.model_name_or_path set) keep our defaults
    ours = wfm_config_from_dict({"model": {"model_name_or_path": "/tmp"}})
    assert ours.cosmos_rl_defaults == [] and ours.model.rl.kl_beta == 0.0 and ours.model.rl.train_on is None


def test_every_cosmos_rl_callback_name_has_a_state() -> None:
    source = (oracle_root() / "cosmos_rl" / "utils" / "wfm" / "callback.py").read_text()
    mapping = next(
        node.value
        for node in ast.parse(source).body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "CALLBACK_CLS_MAPPING"
    )
    assert isinstance(mapping, ast.Dict)
    assert {k.value for k in mapping.keys if isinstance(k, ast.Constant)} == set(CALLBACK_STATES)
    ref = oracle_module("cosmos_rl.policy.config.wfm").ConditionerConfig
    assert set(ref.model_fields["type"].annotation.__args__) == {"remap_key", "text_attr", "boolean_flag"}


def _cfg(
    conditioner: list[dict[str, Any]] | None = None, callbacks: list[dict[str, Any]] | None = None, **rl: Any
) -> WfmConfig:
    raw: dict[str, Any] = {"model": {"model_name_or_path": "/tmp", "rl": rl}}
    if conditioner is not None:
        raw["model"]["conditioner"] = conditioner
    if callbacks is not None:
        raw["trainer"] = {"callbacks": callbacks}
    if rl.get("algorithm") == "ddrl":
        raw["dataloader_train"] = {"type": "local", "video_dataloader": {"dataset_dir": "/tmp"}}
    return wfm_config_from_dict(raw)


TEXT = {"name": "text", "type": "text_attr", "input_key": ["t5_text_embeddings"]}


@pytest.mark.parametrize(
    ("entry", "algorithm", "state"),
    [
        ({**TEXT, "dropout_rate": 0.2}, "ddrl", "implemented"),
        ({**TEXT, "dropout_rate": 0.2}, "flow_grpo", "no effect"),
        (TEXT, "flow_grpo", "implemented"),
        ({"name": "fps", "type": "remap_key", "output_key": "fps", "input_key": "fps"}, "flow_grpo", "no effect"),
        ({"name": "padding_mask", "input_key": "padding_mask"}, "flow_grpo", "no effect"),
        ({"name": "use_video_condition", "type": "boolean_flag", "input_key": "fps"}, "flow_grpo", "no effect"),
        ({"name": "camera", "type": "remap_key", "input_key": "camera"}, "flow_grpo", "refused"),
        ({"name": "is_image", "type": "boolean_flag"}, "flow_grpo", "refused"),
    ],
)
def test_conditioner_states(entry: dict[str, Any], algorithm: str, state: str) -> None:
    text_attr = entry.get("type") == "text_attr"
    entries = [entry] if text_attr else [TEXT, entry]
    if state == "refused":
        with pytest.raises(ConfigError, match=rf"model.conditioner\[{entry['name']}\]: .* not one this trainer builds"):
            _cfg(entries, algorithm=algorithm)
        return
    cfg = _cfg(entries, algorithm=algorithm)
    assert dict((k, s) for k, s, _ in conditioner_states(cfg))[f"model.conditioner[{entry['name']}]"] == state
    assert (f"model.conditioner[{entry['name']}]" in {n.key for n in cfg.no_effect}) == (state == "no effect")
    assert cfg.text_dropout_rate() == (entry.get("dropout_rate", 0.0) if text_attr else 0.0)


def test_conditioner_refusals() -> None:
    with pytest.raises(ConfigError, match="no text_attr entry: cosmos-rl would generate without the prompt"):
        _cfg([{"name": "fps", "type": "remap_key"}])
    with pytest.raises(ConfigError, match="one text_attr entry only"):
        _cfg([TEXT, {**TEXT, "name": "text2"}])
    with pytest.raises(ConfigError, match="dropout_rate"):
        _cfg([{**TEXT, "dropout_rate": 1.5}])
    with pytest.raises(ConfigError, match='video2world continues the first frames of dataset clips, and .* "mock"'):
        _cfg([TEXT], max_num_conditional_frames=1)
    flag = {"name": "use_video_condition", "type": "boolean_flag", "dropout_rate": 0.1}
    with pytest.raises(ConfigError, match=r"use_video_condition\]: dropout_rate = 0.1 .* set it to 0"):
        _cfg([TEXT, flag], algorithm="ddrl", max_num_conditional_frames=1)


@pytest.mark.parametrize(
    ("callback", "state", "words"),
    [
        ({"name": "grad_clip", "args": {"clip_norm": 0.25, "force_finite": False}}, "implemented", ""),
        (
            {"name": "grad_clip", "args": {"clip_norm": 0.25, "norm_type": 1}},
            "refused",
            "norm_type: not grad_clip arguments",
        ),
        ({"name": "grad_clip", "args": {"clip_norm": "big"}}, "refused", "a number in"),
        ({"name": "ema_model"}, "refused", "EMA weights are not kept here"),
        ({"name": "every_n_sample_ema", "args": {"is_ema": True}}, "no effect", ""),
        ({"name": "heart_beat", "step_size": 1, "args": {"every_n": 10}}, "no effect", ""),
        ({"name": "low_prec", "args": {"update_iter": 1}}, "no effect", ""),
        ({"name": "my_callback"}, "refused", "not one of cosmos-rl's callbacks"),
    ],
)
def test_callback_states(callback: dict[str, Any], state: str, words: str) -> None:
    key = f"trainer.callbacks[{callback['name']}]"
    if state == "refused":
        with pytest.raises(ConfigError) as e:
            _cfg(callbacks=[callback])
        assert any(p.startswith(key) and words in p for p in e.value.problems), e.value.problems
        return
    cfg = _cfg(callbacks=[callback])
    assert callback_states(cfg) == [(key, state, callback_states(cfg)[0][2])]
    assert (key in {n.key for n in cfg.no_effect}) == (state == "no effect")
    if callback["name"] == "grad_clip":
        assert cfg.grad_clip() == 0.25 and cfg.grad_force_finite() is False


def test_grad_clip_callback_force_finite_defaults_to_cosmos_rls() -> None:
    assert _cfg(callbacks=[{"name": "grad_clip", "args": {"clip_norm": 1.0}}]).grad_force_finite() is True
    assert _cfg(callbacks=[]).grad_force_finite() is False  # no callback: trainer.grad_force_finite (false)


@pytest.mark.parametrize(
    ("checkpoint", "words"),
    [
        ({"load_path": "/ckpts/model.pt"}, "checkpoint.load_path = '/ckpts/model.pt': cosmos-rl's imaginaire .pt"),
        ({"load_path": "/data/other"}, "two models"),
    ],
)
def test_checkpoint_refusals(checkpoint: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        wfm_config_from_dict({"model": {"model_name_or_path": "/tmp"}, "checkpoint": checkpoint})


def test_local_diffusers_folder_as_load_path_is_the_model(tiny_wfm_dir: Path) -> None:
    raw = {
        "model": {"rl": {"min_num_conditional_frames": 0, "max_num_conditional_frames": 0}},
        "checkpoint": {"load_path": str(tiny_wfm_dir)},
    }
    cfg = wfm_config_from_dict(raw, check_paths=True)
    assert cfg.model.model_name_or_path == str(tiny_wfm_dir) and "reward" in cfg.cosmos_rl_defaults
    with pytest.raises(ConfigError, match="does not exist"):
        wfm_config_from_dict({**raw, "checkpoint": {"load_path": str(tiny_wfm_dir / "missing")}}, check_paths=True)


def test_train_on_is_checked_against_sample_steps() -> None:
    with pytest.raises(ConfigError, match=r"model.rl.train_on: \[10\] not denoising-step indices 0 .. 9"):
        _cfg(sample_steps=10, train_on=[0, 10])
    with pytest.raises(ConfigError, match="listed twice"):
        _cfg(sample_steps=10, train_on=[1, 1])
    with pytest.raises(ConfigError, match="model.rl.num_rollout and model.rl.num_generations"):
        _cfg(num_rollout=4, num_generations=4)
    assert _cfg(num_rollout=6).model.rl.num_generations == 6


# ------------------------------------------------------------------ the trainer's side of these keys
def _bare_trainer(**rl: Any) -> WfmTrainer:
    """A WfmTrainer holding only what trained_steps / rollout / clip_gradients read (no model loaded)."""
    t = WfmTrainer.__new__(WfmTrainer)
    t.cfg = _cfg(**rl)
    t.rl, t.dist = t.cfg.model.rl, SimpleNamespace(device=torch.device("cpu"))
    return t


def test_train_on_steps_fixed_and_random() -> None:
    gen = torch.Generator().manual_seed(0)
    t = _bare_trainer(sample_steps=10, train_on=[0, 2, 4])
    assert t.trained_steps(gen) == [0, 2, 4]
    t = _bare_trainer(sample_steps=10, train_on=[0, -1, -1])
    draws = [t.trained_steps(gen) for _ in range(20)]
    assert all(d[0] == 0 and len(set(d)) == 3 and 0 not in d[1:] and max(d) < 10 for d in draws)
    assert len({tuple(d) for d in draws}) > 1  # the -1 steps are drawn anew
    t = _bare_trainer(sample_steps=10, timestep_fraction=0.5)
    assert len(t.trained_steps(gen)) == 5


@pytest.mark.parametrize("same", [True, False])
def test_use_same_seed_shares_the_initial_noise_of_a_group(same: bool) -> None:
    t = _bare_trainer(num_generations=3, sample_steps=2, use_same_seed=same)
    t.sigmas, t.latent_shape = sigma_schedule(2, 1.0), (2, 1, 2, 2)
    t.model = None
    t.velocity = lambda model, x, sigma, emb, cond=None: torch.zeros_like(x)  # the noise is what is compared
    traj = t.rollout(torch.zeros(6, 4, 8), torch.Generator().manual_seed(0))
    start = traj["xs"][:, 0]
    assert torch.equal(start[0], start[1]) == same and torch.equal(start[3], start[5]) == same
    assert not torch.equal(start[0], start[3])  # groups (prompts) never share


def test_text_dropout_zeroes_whole_prompts_at_the_rate() -> None:
    emb = torch.ones(4000, 3, 2)
    out = drop_text(emb, 0.2, torch.Generator().manual_seed(0))
    per_sample = out.flatten(1)
    assert ((per_sample == 0).all(1) | (per_sample == 1).all(1)).all()  # a prompt is dropped whole or kept
    assert abs(float((per_sample == 0).all(1).float().mean()) - 0.2) < 0.03
    assert drop_text(emb, 0.0, torch.Generator()) is emb


@pytest.mark.parametrize("force_finite", [True, False])
def test_grad_clip_force_finite_zeroes_non_finite_gradients(force_finite: bool) -> None:
    t = _bare_trainer()
    t.cfg = _cfg(callbacks=[{"name": "grad_clip", "args": {"clip_norm": 1.0, "force_finite": force_finite}}])
    t.model = torch.nn.Linear(2, 2, bias=False)
    t.model.weight.grad = torch.tensor([[float("nan"), 3.0], [float("inf"), 4.0]])
    t.settings = WfmTrainer.loop_settings(t.cfg)  # the shared trainer base clips as the config says
    norm = t.clip_gradients()
    if force_finite:
        assert norm == pytest.approx(5.0) and torch.allclose(
            t.model.weight.grad, torch.tensor([[0.0, 0.6], [0.0, 0.8]])
        )
    else:
        assert not torch.isfinite(torch.tensor(norm))  # the trainer then stops the run (TrainingDiverged)
