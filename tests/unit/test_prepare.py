"""Data preparation: each kind of bad row is named (fail) or counted (skip); outputs are written."""

from __future__ import annotations

import json
from pathlib import Path

import av
import numpy as np
import pytest

from cosmos_train.config import config_from_dict
from cosmos_train.data.prepare import (
    DataValidationError,
    check_conversation,
    prepare_split,
    read_manifest,
    report_markdown,
    validate_samples,
)
from cosmos_train.data.sources import load_samples

SMALL = {"min_pixels": 3136, "max_pixels": 3136}


@pytest.fixture(scope="module")
def processor(tiny_model_dir: Path):
    from cosmos_train.models.load import load_processor

    return load_processor(tiny_model_dir)


def write_clip(path: Path, n_frames: int = 4, size: int = 56) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as out:
        stream = out.add_stream("mpeg4", rate=4)
        stream.width = stream.height = size
        stream.pix_fmt = "yuv420p"
        for i in range(n_frames):
            frame = np.full((size, size, 3), (15 * i) % 256, np.uint8)
            out.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
        out.mux(stream.encode())
    return str(path)


def write_empty_video(path: Path, fmt: str) -> str:
    """A container with a video stream and no frames (mp4 then records no stream at all)."""
    out = av.open(str(path), "w", format=fmt)
    stream = out.add_stream("mpeg4", rate=4)
    stream.width = stream.height = 56
    stream.pix_fmt = "yuv420p"
    out.start_encoding()
    out.close()
    return str(path)


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("media")
    (d / "corrupt.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 8)
    return {
        "good": write_clip(d / "good.mp4"),
        "long": write_clip(d / "long.mp4", n_frames=16),
        "corrupt": str(d / "corrupt.mp4"),
        "zero_avi": write_empty_video(d / "zero.avi", "avi"),
        "zero_mp4": write_empty_video(d / "zero.mp4", "mp4"),
        "missing": str(d / "missing.mp4"),
    }


def sample(sid: str, video: str | None, answer: str | None = "<answer>B</answer>", **extra) -> dict:
    content = [{"type": "text", "text": "What moves?"}]
    if video:
        content.insert(0, {"type": "video", "video": video, "nframes": 4, **SMALL})
    msgs = [{"role": "user", "content": content}]
    if answer is not None:
        msgs.append({"role": "assistant", "content": answer})
    return {"id": sid, "origin": f"rows.json:{sid}", "messages": msgs, **extra}


def cfg_for(on_bad_row: str = "skip", **policy) -> object:
    tp = policy.pop("train_policy", {})
    return config_from_dict(
        {
            "policy": {"model_max_length": policy.pop("max_len", 4096)},
            "train": {"train_policy": {"dataset": {"name": "x", "on_bad_row": on_bad_row}, **tp}},
        }
    )


# ------------------------------------------------------------------------------ conversation rules
@pytest.mark.parametrize(
    "messages, policy, reason",
    [
        ([], "sft", "empty_conversation"),
        ([{"role": "system", "content": "s"}], "sft", "empty_conversation"),
        ([{"role": "user", "content": "q"}], "sft", "no_assistant_turn"),
        ([{"role": "user", "content": "q"}, {"role": "bot", "content": "a"}], "sft", "wrong_role"),
        ([{"role": "assistant", "content": "a"}], "sft", "bad_alternation"),
        (
            [{"role": "user", "content": "q"}, {"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
            "sft",
            "bad_alternation",
        ),
        ([{"role": "user", "content": "q"}, {"role": "system", "content": "s"}], "sft", "bad_alternation"),
        ([{"role": "user", "content": "  "}, {"role": "assistant", "content": "a"}], "sft", "empty_turn"),
        ([{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}], "grpo", "bad_alternation"),
        ([{"role": "user", "content": "q"}, {"role": "assistant", "content": 3}], "sft", "bad_conversation"),
    ],
)
def test_conversation_problems(messages: list, policy: str, reason: str) -> None:
    assert check_conversation(messages, policy)[0] == reason


def test_well_formed_conversations_pass() -> None:
    sys_ = {"role": "system", "content": "s"}
    multi = [
        sys_,
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": [{"type": "text", "text": "q2"}]},
        {"role": "assistant", "content": "b"},
    ]
    assert check_conversation(multi, "sft") is None
    assert check_conversation([sys_, {"role": "user", "content": "q"}], "grpo") is None
    assert check_conversation(multi, "grpo") is None  # an SFT row reused for RL: its last turn is the reference


# ------------------------------------------------------------------------------ skip and fail
def test_skip_counts_every_bad_row_by_reason(tmp_path: Path, processor, media: dict[str, str]) -> None:
    rows = [
        sample("ok1", media["good"]),
        sample("ok2", None),
        sample("missing", media["missing"]),
        sample("corrupt", media["corrupt"]),
        sample("zero_avi", media["zero_avi"]),
        sample("zero_mp4", media["zero_mp4"]),
        sample("no_answer", media["good"], answer=None),
        {"id": "empty", "origin": "rows.json:empty", "messages": []},
        {**sample("role", None), "messages": [{"role": "user", "content": "q"}, {"role": "gpt4", "content": "a"}]},
    ]
    # Rows a source could not map (unknown column, LLaVA count mismatch) arrive as error samples.
    (tmp_path / "r.json").write_text(
        json.dumps(
            [
                {"video": media["good"], "chat": []},
                {
                    "images": ["a.png"],
                    "conversations": [{"from": "human", "value": "<image> <image>"}, {"from": "gpt", "value": "x"}],
                },
            ]
        )
    )
    rows += load_samples(
        config_from_dict({"train": {"train_policy": {"dataset": {"name": str(tmp_path / "r.json")}}}}),
        "train",
        keep_errors=True,
    )
    seen = []
    report = validate_samples(
        rows,
        cfg_for("skip"),
        processor,
        run_dir=tmp_path / "run",
        workers=2,
        progress=lambda done, total: seen.append((done, total)),
    )
    assert report.rows_read == 11 and report.rows_kept == 2
    assert report.skipped == {
        "missing_media": 1,
        "bad_media": 1,
        "empty_video": 2,
        "no_assistant_turn": 1,
        "empty_conversation": 1,
        "wrong_role": 1,
        "unknown_column": 1,
        "placeholder_mismatch": 1,
    }
    assert report.examples["missing_media"][0]["origin"] == "rows.json:missing"
    assert "missing.mp4" in report.examples["missing_media"][0]["message"]
    assert report.examples["bad_media"][0]["message"].startswith(media["corrupt"])
    assert report.examples["unknown_column"][0]["origin"] == f"{tmp_path / 'r.json'}:0"
    assert report.examples["placeholder_mismatch"][0]["origin"] == f"{tmp_path / 'r.json'}:1"
    assert seen[-1] == (11, 11) and len(seen) == 11

    kept = read_manifest(tmp_path / "run" / "manifest.jsonl")
    assert [r["id"] for r in kept] == ["ok1", "ok2"]
    assert kept[0]["frames"] == [4] and kept[1]["frames"] == []
    assert kept[0]["n_tokens"] > kept[1]["n_tokens"] > 0  # the clip's vision tokens count
    summary = json.loads((tmp_path / "run" / "prep_report.json").read_text())
    assert summary["rows_skipped"] == 9 and summary["skipped"]["empty_video"] == 2
    assert summary["token_length_stats"]["max"] == kept[0]["n_tokens"]
    assert (tmp_path / "run" / "prep_histograms.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = report_markdown(report)
    assert "| 11 | 2 | 9 | 0 |" in md and "placeholder_mismatch" in md and "data:image/png;base64," in md


def test_fail_names_file_row_and_reason(tmp_path: Path, processor, media: dict[str, str]) -> None:
    rows = [sample("ok", media["good"]), sample("gone", media["missing"]), sample("bad", media["corrupt"])]
    with pytest.raises(DataValidationError) as err:
        validate_samples(rows, cfg_for("fail"), processor, run_dir=tmp_path)
    text = str(err.value)
    assert "2 bad row(s)" in text
    assert "rows.json:gone (id gone): missing_media" in text and "rows.json:bad (id bad): bad_media" in text
    assert not (tmp_path / "manifest.jsonl").exists()  # nothing to train on from a failed check
    assert json.loads((tmp_path / "prep_report.json").read_text())["problems"][0]["origin"] == "rows.json:gone"


def test_fail_stops_after_max_problems(processor) -> None:
    rows = [sample(str(i), None, answer=None) for i in range(30)]
    with pytest.raises(DataValidationError, match=r"3 bad row\(s\) \(stopped after 3 of 30 rows\)"):
        validate_samples(rows, cfg_for("fail"), processor, max_problems=3, workers=1)


# ------------------------------------------------------------------------------ length
def test_overlength_error_skip_and_truncate(processor, media: dict[str, str]) -> None:
    long_answer = "word " * 400
    rows = [sample("short", media["good"]), sample("long", media["good"], answer=long_answer)]
    short_len = validate_samples(rows[:1], cfg_for("skip"), processor).kept[0]["n_tokens"]
    limit = short_len + 20

    with pytest.raises(DataValidationError, match=r"rows.json:long \(id long\): too_long: .*> policy.model_max_length"):
        validate_samples(rows, cfg_for("fail", max_len=limit), processor)
    skip = validate_samples(rows, cfg_for("fail", max_len=limit, train_policy={"overlength": "skip"}), processor)
    assert [r["id"] for r in skip.kept] == ["short"] and skip.skipped == {"too_long": 1}
    cut = validate_samples(rows, cfg_for("fail", max_len=limit, train_policy={"overlength": "truncate"}), processor)
    assert cut.rows_kept == 2 and cut.truncated == 1 and cut.kept[1]["n_tokens"] <= limit
    # Cut before the answer starts: nothing left to learn, so it is a bad row even with truncate.
    tiny = cfg_for("skip", max_len=short_len - 10, train_policy={"overlength": "truncate"})
    assert validate_samples(rows[:1], tiny, processor).skipped == {"too_long": 1}


def test_grpo_prompts_need_a_reference_for_single_choice(processor, media: dict[str, str]) -> None:
    rows = [sample("r", media["good"], answer=None, reference="B"), sample("n", media["good"], answer=None)]
    grpo = cfg_for("skip", train_policy={"type": "grpo", "reward_function": ["format", "single_choice"]})
    report = validate_samples(rows, grpo, processor)
    assert [r["id"] for r in report.kept] == ["r"] and report.skipped == {"missing_reference": 1}
    fmt_only = cfg_for("skip", train_policy={"type": "grpo", "reward_function": "format"})
    assert validate_samples(rows, fmt_only, processor).rows_kept == 2


def test_grpo_takes_sft_rows_their_answer_is_the_reference(tmp_path: Path, processor, media: dict[str, str]) -> None:
    """SFT-format rows reused for GRPO: the prompt is everything before the last assistant turn (its length is
    the prompt's), the reference is that turn's text unless a reference column is named."""
    from cosmos_train.data.chat import encode_chat
    from cosmos_train.data.prompt import prompt_messages, reference_answer

    batches = {"train": {"train_batch_per_replica": 8}, "rollout": {"n_generation": 2, "batch_size": 4}}
    grpo = config_from_dict(
        {
            **batches,
            "train": {
                **batches["train"],
                "train_policy": {
                    "type": "grpo",
                    "reward_function": ["single_choice"],
                    "dataset": {"name": "x", "on_bad_row": "fail"},
                },
            },
        }
    )
    row = sample("s", media["good"], answer="B")
    report = validate_samples([row, sample("p", media["good"], answer=None, reference="C")], grpo, processor)
    assert [r["id"] for r in report.kept] == ["s", "p"]
    prompt = prompt_messages(row["messages"])
    assert prompt[-1]["role"] == "user" and reference_answer(row) == "B"
    assert report.kept[0]["n_tokens"] == len(encode_chat(processor, prompt, add_generation_prompt=True))

    # Through the GRPO data path: SFT conversations in a json file -> load_samples -> data prep -> rollout.
    from cosmos_train.generation import Completion, SamplingParams
    from cosmos_train.rewards import combine
    from cosmos_train.train.rollout.groups import collect_rollouts

    rows = [
        {
            "id": str(i),
            "video": media["good"],
            "nframes": 4,
            **SMALL,
            "pick": "A",
            "conversations": [{"from": "human", "value": f"Which way {i}?"}, {"from": "gpt", "value": "B"}],
        }
        for i in range(2)
    ]
    (tmp_path / "sft.json").write_text(json.dumps(rows))
    for column, want in ((None, "B"), ("pick", "A")):
        tp = {"type": "grpo", "reward_function": ["single_choice"], "response_column_name": column}
        cfg = config_from_dict(
            {
                **batches,
                "train": {
                    **batches["train"],
                    "train_policy": {
                        "dataset": {
                            "name": str(tmp_path / "sft.json"),
                            "on_bad_row": "fail",
                            "media_path": str(Path(media["good"]).parent),
                        },
                        **{k: v for k, v in tp.items() if v},
                    },
                },
            }
        )
        kept = validate_samples(load_samples(cfg, "train", keep_errors=True), cfg, processor).kept
        assert [reference_answer(r) for r in kept] == [want, want]

        class Engine:
            asked: list = []

            def generate(self, requests, sampling):
                self.asked += list(requests)
                return [[Completion(t, [0], [0.0], "stop", [], 0) for t in ("A", "B")] for _ in requests]

        engine = Engine()
        rollout = collect_rollouts(engine, kept, combine(["single_choice"]), SamplingParams(n=2))
        assert all(chat[-1]["role"] == "user" for chat in engine.asked)
        assert "Which way 0?" in json.dumps(engine.asked[0])
        assert not any(m["role"] == "assistant" for chat in engine.asked for m in chat)  # the answer is not asked
        assert [g.rewards for g in rollout.groups] == [[float(want == "A"), float(want == "B")]] * 2


def test_without_processor_media_is_still_decoded(media: dict[str, str]) -> None:
    rows = [sample("a", media["long"]), sample("b", media["corrupt"])]
    report = validate_samples(rows, cfg_for("skip"), None)
    assert report.kept[0]["frames"] == [4] and report.kept[0]["n_tokens"] is None
    assert report.skipped == {"bad_media": 1}


def test_prepare_split_on_synthetic_data(tmp_path: Path, processor, synthetic_dir: Path) -> None:
    cfg = config_from_dict(
        {
            "train": {"train_policy": {"dataset": {"name": str(synthetic_dir), "vision": SMALL}}},
            "validation": {"enable": True},
        }
    )
    train = prepare_split(cfg, "train", tmp_path, processor)
    val = prepare_split(cfg, "val", tmp_path, processor)
    assert (train.rows_kept, val.rows_kept) == (48, 8)
    assert len(read_manifest(tmp_path / "manifest.jsonl")) == 48
    assert len(read_manifest(tmp_path / "manifest_val.jsonl")) == 8
    assert (tmp_path / "prep_report_val.json").is_file()
    assert set(train.frames) == {4}


# ------------------------------------------------------------------------------ clip cache
@pytest.mark.parametrize("with_processor", [True, False])
def test_prep_warms_the_clip_cache_for_the_trainer(
    tmp_path: Path, processor, media: dict[str, str], with_processor: bool
) -> None:
    from cosmos_train.train.data import SFTDataset

    cache = tmp_path / "clips"
    cfg = config_from_dict({"train": {"train_policy": {"dataset": {"name": "x", "cache_dir": str(cache)}}}})
    rows = [sample("a", media["good"]), sample("b", media["long"]), sample("c", media["good"]), sample("t", None)]
    report = validate_samples(rows, cfg, processor if with_processor else None, workers=2)
    assert report.rows_kept == 4
    assert len(list(cache.rglob("*.clip"))) == 2  # one entry per distinct clip (and vision settings)

    trainer = SFTDataset(report.kept, processor, 4096, "error", clip_cache=str(cache))
    for i in range(len(trainer)):
        trainer[i]
    assert (trainer.clip_cache.hits, trainer.clip_cache.misses) == (3, 0)  # nothing decoded again


def test_enable_dataset_cache_keeps_clips_in_the_shared_cache(
    tmp_path: Path, processor, media: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """train_policy.enable_dataset_cache (cosmos-rl's key) without a cache_dir: decoded clips go to
    $COSMOS_CACHE/clip_cache, and a second pass decodes nothing."""
    from cosmos_train.train.data import SFTDataset

    monkeypatch.setenv("COSMOS_CACHE", str(tmp_path))
    cfg = config_from_dict({"train": {"train_policy": {"enable_dataset_cache": True, "dataset": {"name": "x"}}}})
    report = validate_samples([sample("a", media["good"]), sample("b", media["long"])], cfg, processor, workers=1)
    assert report.rows_kept == 2
    assert len(list((tmp_path / "clip_cache").rglob("*.clip"))) == 2
    trainer = SFTDataset(report.kept, processor, 4096, "error", clip_cache=cfg.train.train_policy.dataset.cache_dir)
    for i in range(len(trainer)):
        trainer[i]
    assert (trainer.clip_cache.hits, trainer.clip_cache.misses) == (2, 0)


def test_manifest_reader_keeps_every_row_and_names_a_torn_one(tmp_path: Path) -> None:
    from cosmos_train.data.prepare import PrepReport, write_outputs
    from cosmos_train.errors import DataError

    rows = [{"id": str(i), "messages": [{"role": "user", "content": f"a\u2028b\x85c {i}"}]} for i in range(3)]
    report = PrepReport(split_role="train", dataset="d", kept=rows)
    write_outputs(report, tmp_path)
    assert read_manifest(tmp_path / "manifest.jsonl") == rows  # line separators inside strings split nothing
    path = tmp_path / "manifest.jsonl"
    path.write_text(path.read_text()[:-10])  # a manifest cut short
    with pytest.raises(DataError, match=rf"{path}:3: not valid JSON"):
        read_manifest(path)
