"""cosmos-rl's mock video dataset (cosmos_train/wfm/mock_data.py) beside cosmos-rl 0.4.7's own: which loaders select
it (get_cached_replay_dataloader, compiled from the installed source) and what a row is (data_sources/mock_data.py
get_video_dataset, imported), for every resolution it knows; the published mock-data recipe reads as it; what is
ours (rows drawn by seed and index) and every refusal, each naming its reason. The mutation checks at the end show
that a change of ours is caught."""

from __future__ import annotations

import copy
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from cosmos_train.errors import ConfigError
from cosmos_train.wfm import mock_data
from cosmos_train.wfm.config import load_wfm_config, wfm_config_from_dict
from cosmos_train.wfm.mock_data import MOCK_CAPTION, VIDEO_SIZES, MockVideo, MockVideoRows
from tests.conftest import ROOT
from tests.cosmos_rl_oracle import oracle_function, oracle_module

RECIPE = ROOT / "tests" / "data" / "cosmos_rl_configs" / "wfm" / "cosmos-predict2-5-2b-480-grpo-mock-data.toml"
MOCK_MODULE = "cosmos_rl.tools.dataset.wfm.data_sources.mock_data"
LOADER_MODULE = "cosmos_rl.tools.dataset.wfm.cached_replay_dataloader"
VIDEO = "dataloader_train.video_dataloader"


def _theirs() -> Any:
    return oracle_module(MOCK_MODULE)


def _raw(resolution: str = "480", frames: int = 93, len_t5: int = 512, t5_dim: int = 1024, **loader: Any) -> dict:
    """A world-model config whose video loader is cosmos-rl's mock (the published recipe's keys)."""
    dataset = {"resolution": resolution, "num_video_frames": frames, "len_t5": len_t5, "t5_dim": t5_dim}
    return {
        "model": {"model_name_or_path": "/tmp", "rl": {}},
        "dataloader_train": {
            "type": "web",
            "video_dataloader": {
                "ratio": 1,
                "dataloader": {"batch_size": 1, "num_workers": 8, "webdataset": False, "dataset": dataset, **loader},
            },
        },
    }


# ------------------------------------------------------------------------------------ which loaders are the mock
def _cosmos_rl_picks(dataset: dict[str, Any], webdataset: bool, monkeypatch: pytest.MonkeyPatch) -> str:
    """The dataset ("mock" or "web") cosmos-rl's get_cached_replay_dataloader builds for this video loader."""
    fn = oracle_function(
        LOADER_MODULE,
        "get_cached_replay_dataloader",
        get_mock_video_dataset=lambda **kw: "mock",
        get_video_dataset=lambda **kw: "web",
        get_mock_image_dataset=lambda **kw: "mock",
        get_image_dataset=lambda **kw: "web",
    )
    # webdataset = true imports webdataset's DataLoader: a stand-in that keeps what it was given
    module = SimpleNamespace(DataLoader=lambda **kw: SimpleNamespace(**kw))
    monkeypatch.setitem(sys.modules, "cosmos_rl.tools.dataset.wfm.webdataset.dataloader", module)
    loader = fn("video_data", webdataset=webdataset, dataset=dataset, batch_size=1)
    return str(loader.dataset)


@pytest.mark.parametrize("len_t5", [512, 1, None, 0])
@pytest.mark.parametrize("webdataset", [False, True])
def test_which_loaders_are_the_mock_equals_cosmos_rl(
    len_t5: int | None, webdataset: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    dataset = {"resolution": "480", "num_video_frames": 93, "len_t5": len_t5, "t5_dim": 1024}
    theirs = _cosmos_rl_picks(dataset, webdataset, monkeypatch)
    ours = mock_data.mock_dataset("web", {"webdataset": webdataset, "dataset": dataset})
    assert (ours is not None) == (theirs == "mock")
    assert mock_data.mock_dataset("local", {"dataset": dataset}) is None  # cosmos-rl's local loaders never reach it


# ------------------------------------------------------------------------------------ what a row is
def row_mismatches(resolution: str, frames: int, len_t5: int, t5_dim: int) -> list[str]:
    """What differs between our first mock row (the config read from cosmos-rl's keys) and cosmos-rl's own first
    mock item of the same keys: shapes, dtypes, value ranges, the prompt, how many rows."""
    cfg = wfm_config_from_dict(_raw(resolution, frames, len_t5, t5_dim))
    spec = cfg.dataloader_train.mock_video
    assert spec is not None
    rows = MockVideoRows(spec, seed=0)
    ds = _theirs().get_video_dataset(
        num_video_frames=frames, resolution=resolution, len_t5=len_t5, t5_dim=t5_dim, caption_type="ignored"
    )
    item, row = ds[0], rows[0]
    clip, emb = rows.clip(row), rows.embedding(row)
    out = []
    for what, a, b in (("clip", clip, item["video"]), ("embedding", emb, item["t5_text_embeddings"])):
        if a.shape != b.shape or a.dtype != b.dtype:
            out.append(f"{what}: ours {a.dtype} {tuple(a.shape)}, cosmos-rl's {b.dtype} {tuple(b.shape)}")
    ours_range, theirs_range = (int(clip.min()), int(clip.max())), (int(item["video"].min()), int(item["video"].max()))
    if ours_range != theirs_range:  # both uniform over 0..254: every value drawn among ~10^5 pixels
        out.append(f"clip values {ours_range}, cosmos-rl's {theirs_range}")
    if abs(float(emb.mean())) > 0.05 or abs(float(emb.std()) - 1) > 0.05:
        out.append(f"embedding mean {float(emb.mean()):.3f} std {float(emb.std()):.3f}, cosmos-rl's N(0, 1)")
    if row["prompt"] != item["ai_caption"]:
        out.append(f"prompt {row['prompt']!r}, cosmos-rl's {item['ai_caption']!r}")
    if len(rows) != len(ds):
        out.append(f"{len(rows)} rows, cosmos-rl's {len(ds)}")
    return out


def test_rows_are_cosmos_rls_mock_items_at_every_resolution() -> None:
    names = list(oracle_module("cosmos_rl.tools.dataset.wfm.utils").VIDEO_RES_SIZE_INFO)
    assert names == list(VIDEO_SIZES)  # every resolution cosmos-rl's mock knows, and no other
    for name in names:  # one frame: the size is the point (a 1080 clip of 93 frames is 570 MB)
        assert row_mismatches(name, 1, 16, 1024) == [], name
    assert row_mismatches("480", 93, 512, 1024) == []  # the published recipe's rows


def test_rows_are_drawn_by_seed_and_index() -> None:
    spec = MockVideo(num_frames=5, width=32, height=16, len_t5=4, t5_dim=8)
    a, b, other = MockVideoRows(spec, seed=0), MockVideoRows(spec, seed=0), MockVideoRows(spec, seed=1)
    assert torch.equal(a.clip(a[3]), b.clip(b[3])) and torch.equal(a.embedding(a[3]), b.embedding(b[3]))
    assert not torch.equal(a.clip(a[3]), other.clip(other[3]))
    assert not torch.equal(a.embedding(a[3]), a.embedding(a[4]))
    assert a[-1] == a[len(a) - 1] and a[:2] == [a[0], a[1]] and a[0]["prompt"] == MOCK_CAPTION
    with pytest.raises(IndexError):
        a[len(a)]


# ------------------------------------------------------------------------------------ the recipe as published
def test_published_mock_recipe_reads_as_cosmos_rls_mock(tmp_path: Path) -> None:
    raw = tomllib.loads(RECIPE.read_text())
    cfg = load_wfm_config(RECIPE, ["checkpoint.load_path='/models/tiny'"], env={}, check_paths=False)
    ref = oracle_module("cosmos_rl.policy.config.wfm").CosmosVisionGenConfig.from_dict(copy.deepcopy(raw))
    loader = ref.dataloader_train.video_dataloader.dataloader
    h, w = oracle_module("cosmos_rl.tools.dataset.wfm.utils").VIDEO_RES_SIZE_INFO[loader.dataset.resolution]["9,16"]
    assert cfg.dataloader_train.mock_video == MockVideo(
        loader.dataset.num_video_frames, w, h, loader.dataset.len_t5, loader.dataset.t5_dim
    )
    assert cfg.video.batch_size == loader.batch_size == 1 and cfg.dataloader_train.type == ref.dataloader_train.type
    said = {n.key: n.reason for n in cfg.no_effect}
    assert f"{VIDEO}.dataloader.webdataset" in said and f"{VIDEO}.dataloader.num_workers" in said
    ignored = f"{VIDEO}.dataloader.dataset.video_decoder_name / augmentor_name / caption_type / embedding_type"
    assert "ignores these" in said[ignored]
    assert f"{VIDEO}.dataloader" not in said  # read in part: each key in its state
    # cosmos-rl's remote reward posts the latents: so does the default it gets here
    assert (cfg.reward.backend, cfg.reward.fns, cfg.reward.payload) == ("service", {"dance_grpo": 1.0}, "latent")
    cfg.write(tmp_path / "config.toml")  # the written run config loads back to the same values
    again = load_wfm_config(tmp_path / "config.toml", env={}, check_paths=False)
    assert again.model_dump() == cfg.model_dump()
    assert again.dataloader_train.mock_video == cfg.dataloader_train.mock_video


def test_cosmos_rls_remote_reward_posts_the_latents() -> None:
    """RemoteReward.compute_reward (compiled from cosmos-rl's source): the tensor it sends is `latents`."""
    sent: dict[str, Any] = {}
    fn = oracle_function("cosmos_rl.policy.model.wfm.rewards.reward_models", "RemoteReward.compute_reward")
    me = SimpleNamespace(
        reward_fn="dance_grpo",
        enqueue_request=lambda tensor, data: sent.update(tensor=tensor, data=data) or ("uuid", None),
        fetch_reward=lambda uuid, replica_id: torch.zeros(2),
    )
    latents, pixels = torch.full((2, 4, 3, 2, 2), 7.0), torch.zeros(2, 3, 9, 16, 16)
    fn(me, {"ai_caption": ["placeholder"] * 2}, pixels, latents=latents)
    assert sent["tensor"].shape == (2, 4, 3, 2, 2) and float(sent["tensor"].mean()) == 7.0


# ------------------------------------------------------------------------------------ refusals, each with its reason
@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"dataset_dir": "s3://bucket/shards/"}, "len_t5 makes the loader cosmos-rl's mock dataset"),
        ({"use_cache": True}, "use_cache = true: cosmos-rl's replay cache"),
        ({"resolution": "999"}, "resolution = '999': not a resolution of cosmos-rl's mock clips"),
        ({"t5_dim": None}, "dataset.t5_dim = None: cosmos-rl's mock dataset (len_t5 is set) needs"),
        ({"num_frames": 5}, "num_frames = 5 and dataloader_train.video_dataloader.dataloader.dataset.num_video_frames"),
        ({"video_size": [32, 32]}, "video_size = [32, 32] and"),
        ({"guidance": 2.0}, "model.rl.guidance = 2: classifier-free guidance needs the empty prompt's embedding"),
    ],
)
def test_refusals_name_their_reason(change: dict[str, Any], words: str) -> None:
    raw = _raw()
    video = raw["dataloader_train"]["video_dataloader"]
    for key, value in change.items():
        if key in ("resolution", "t5_dim"):
            video["dataloader"]["dataset"][key] = value
        elif key == "use_cache":
            video["dataloader"][key] = value
        elif key == "guidance":
            raw["model"]["rl"][key] = value
        else:
            video[key] = value
    with pytest.raises(ConfigError) as e:
        wfm_config_from_dict(raw)
    assert any(words in p for p in e.value.problems), e.value.problems
    video_size = copy.deepcopy(_raw())
    video_size["dataloader_train"]["video_dataloader"]["video_size"] = [768, 432]  # ours, equal: accepted
    assert wfm_config_from_dict(video_size).video.video_size == (768, 432)


def test_a_dit_of_another_width_is_refused_naming_both(tiny_wfm_dir: Path) -> None:
    raw = _raw()
    raw["model"]["model_name_or_path"] = str(tiny_wfm_dir)
    with pytest.raises(ConfigError) as e:
        wfm_config_from_dict(raw, check_paths=True)
    text = "\n".join(e.value.problems)
    assert "dataset.t5_dim = 1024: cosmos-rl's mock prompt embeddings are that wide" in text
    assert f"the DiT of {tiny_wfm_dir} takes" in text and "set t5_dim =" in text


# ------------------------------------------------------------------------------------ mutations of ours are caught
def test_mutations_of_ours_are_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    with monkeypatch.context() as m:
        m.setitem(VIDEO_SIZES, "480", (432, 768))  # (height, width) read as (width, height)
        assert row_mismatches("480", 1, 16, 1024)
    with monkeypatch.context() as m:
        m.setattr(mock_data, "MOCK_ROWS", 1 << 14)
        assert any("rows" in p for p in row_mismatches("256", 1, 16, 1024))
    with monkeypatch.context() as m:
        m.setattr(MockVideoRows, "embedding", lambda self, row: torch.rand(self.spec.len_t5, self.spec.t5_dim))
        assert row_mismatches("256", 1, 16, 1024)
    with monkeypatch.context() as m:
        m.setattr(mock_data, "mock_dataset", lambda dl_type, loader: None)
        with pytest.raises(AssertionError):
            test_which_loaders_are_the_mock_equals_cosmos_rl(512, False, m)
