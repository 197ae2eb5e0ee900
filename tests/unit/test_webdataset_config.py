"""dataloader_train.type = "web" and s3:// VLM datasets as the config reads them: what loads, what is refused
with the key and the fix, and how the shards are dealt to reading slots (no store needed)."""

from __future__ import annotations

import pytest

from cosmos_train.config import DatasetConfig
from cosmos_train.data.shards import ShardPlan, sample_name
from cosmos_train.data.sources import detect_source
from cosmos_train.errors import ConfigError
from cosmos_train.wfm.config import load_wfm_config
from tests.conftest import ROOT

TINY = ROOT / "configs" / "tiny-wfm-ddrl.toml"


def _load(*overrides: str):
    return load_wfm_config(TINY, ["model.model_name_or_path='/tmp'", *overrides], env={}, check_paths=False)


def test_web_type_with_s3_shards_loads_and_workers_take_effect() -> None:
    cfg = _load(
        "dataloader_train.type='web'",
        "dataloader_train.video_dataloader.dataset_dir='s3://bucket/clips/shard-{000..009}.tar'",
        "dataloader_train.video_dataloader.num_workers=4",
        "dataloader_train.video_dataloader.offline_text_embedding=true",
        "model.rl.guidance=0",
    )
    assert cfg.dataloader_train.type == "web" and cfg.video.num_workers == 4
    assert not [n for n in cfg.no_effect if "num_workers" in n.key]


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        (["dataloader_train.video_dataloader.dataset_dir='datasets/clips'"], "dataset_dir (now 'datasets/clips')"),
        (
            ["dataloader_train.video_dataloader.dataloader={dataset={dataset_name='cosmos_v1'}}"],
            "dataset_name = 'cosmos_v1' names a dataset registered in cosmos-rl's code",
        ),
        (
            [
                "dataloader_train.video_dataloader.dataset_dir='s3://b/p/'",
                "dataloader_train.video_dataloader.dataloader={batch_size=4}",
            ],
            "dataloader_train.video_dataloader.dataloader.batch_size = 4",
        ),
    ],
)
def test_web_refusals_name_the_key_and_the_fix(overrides: list[str], words: str) -> None:
    with pytest.raises(ConfigError) as e:
        _load("dataloader_train.type='web'", *overrides)
    text = "\n".join(e.value.problems)
    assert words in text and ("s3://bucket/prefix/" in text or "set it to 4" in text), text


def test_s3_dataset_names_read_through_the_webdataset_source() -> None:
    assert detect_source(DatasetConfig(name="s3://bucket/llava/")) == "webdataset"
    assert detect_source(DatasetConfig(name="s3://b/shard-{0..3}.tar", source="auto")) == "webdataset"


def test_every_shard_goes_to_exactly_one_slot_each_epoch() -> None:
    urls = tuple(f"s3://b/shard-{i}.tar" for i in range(10))
    plan = ShardPlan(urls, n_slots=4, seed=7, shuffle=True)
    for epoch in range(3):
        dealt = [u for slot in range(4) for u in plan.slot_shards(slot, epoch)]
        assert sorted(dealt) == sorted(urls)
    assert plan.slot_shards(0, 0) != plan.slot_shards(0, 1)  # a new order each epoch
    assert ShardPlan(urls, 4, 7, shuffle=False).slot_shards(1, 5) == list(urls[1::4])
    assert sample_name({"__url__": "s3://b/p/shard-3.tar", "__key__": "a b/c"}) == "shard-3__a_b_c"


class _FlakyStore:
    """A client whose first GetObject body breaks off after `cut` bytes (a lost connection); later ones are whole."""

    def __init__(self, data: bytes, cut: int):
        self.data, self.cut, self.opened = data, cut, 0

    def get_object(self, Bucket: str, Key: str) -> dict:  # noqa: N803 (boto3's argument names)
        import io

        self.opened += 1
        data, cut = self.data, self.cut if self.opened == 1 else None

        class Body(io.BytesIO):
            def read(self, n: int | None = -1) -> bytes:
                if cut is not None:
                    if self.tell() >= cut:
                        raise ConnectionResetError("connection reset by peer")
                    left = cut - self.tell()
                    n = left if n is None or n < 0 else min(n, left)
                return super().read(n)

        return {"Body": Body(data)}


def test_a_shard_cut_off_mid_read_is_reopened_past_what_was_given(monkeypatch: pytest.MonkeyPatch) -> None:
    from cosmos_train.data import shards
    from tests.shards import tar_bytes

    monkeypatch.setattr(shards.time, "sleep", lambda s: None)
    data = tar_bytes([(f"k{i}.txt", f"row {i}".encode() * 200) for i in range(6)])
    store = _FlakyStore(data, cut=len(data) // 2)
    got = [s["txt"].decode()[:5] for s in shards.resumed_shard(store, "s3://b/p/shard-0.tar", skip=1)]
    assert got == [f"row {i}" for i in range(1, 6)] and store.opened == 2
