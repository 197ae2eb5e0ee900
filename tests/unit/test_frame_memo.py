"""FrameMemo: one decode per clip within a run, bounded memory, errors never stored."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path

import pytest
import torch

from cosmos_train.data import media
from cosmos_train.data.frame_memo import FrameMemo
from cosmos_train.data.media import MediaError, VisionSettings
from tests.media import moving_square_mp4

SETTINGS = VisionSettings(fps=2, min_pixels=3136, max_pixels=3136)


def test_second_read_is_a_hit_with_the_same_frames(tmp_path: Path) -> None:
    clip = moving_square_mp4(tmp_path / "a.mp4", frames=8)
    memo = FrameMemo()
    frames, fps = memo.read_video(clip, SETTINGS)
    again, fps_again = memo.read_video(str(clip), SETTINGS)
    expected, expected_fps = media.read_video(clip, SETTINGS)
    assert torch.equal(frames, expected) and fps == fps_again == expected_fps
    assert again is frames and (memo.hits, memo.misses) == (1, 1)
    memo.read_video(clip, VisionSettings(fps=1, min_pixels=3136, max_pixels=3136))  # other settings: a miss
    assert memo.misses == 2 and memo.size_bytes == frames.nbytes * 2


def test_least_recently_used_goes_first_and_oversized_is_not_kept(tmp_path: Path) -> None:
    clips = [moving_square_mp4(tmp_path / f"{i}.mp4", shift=i, frames=8) for i in range(3)]
    one = media.read_video(clips[0], SETTINGS)[0].nbytes
    memo = FrameMemo(max_bytes=2 * one)
    memo.read_video(clips[0], SETTINGS)
    memo.read_video(clips[1], SETTINGS)
    memo.read_video(clips[0], SETTINGS)  # 0 is now the most recent
    memo.read_video(clips[2], SETTINGS)  # evicts 1
    assert memo.size_bytes == 2 * one
    memo.read_video(clips[0], SETTINGS)
    assert (memo.hits, memo.misses) == (2, 3)
    memo.read_video(clips[1], SETTINGS)
    assert memo.misses == 4
    tiny = FrameMemo(max_bytes=one - 1)
    tiny.read_video(clips[0], SETTINGS)
    tiny.read_video(clips[0], SETTINGS)
    assert tiny.misses == 2 and tiny.size_bytes == 0


def test_media_errors_are_raised_every_time(tmp_path: Path) -> None:
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"not a video at all")
    memo = FrameMemo()
    for _ in range(2):
        with pytest.raises(MediaError, match="bad.mp4"):
            memo.read_video(bad, SETTINGS)
    with pytest.raises(MediaError, match="file not found"):
        memo.read_video(tmp_path / "missing.mp4", SETTINGS)
    assert memo.size_bytes == 0 and not memo._loading


def test_threads_asking_for_one_clip_share_one_decode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clip = moving_square_mp4(tmp_path / "a.mp4", frames=8)
    decodes = []
    real = media.read_video

    def slow_read(path, settings=None):
        decodes.append(path)
        time.sleep(0.2)  # long enough for every thread to ask while the first decodes
        return real(path, settings)

    monkeypatch.setattr(media, "read_video", slow_read)
    memo = FrameMemo()
    results = []
    threads = [threading.Thread(target=lambda: results.append(memo.read_video(clip, SETTINGS))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(decodes) == 1 and len(results) == 4 and all(r[0] is results[0][0] for r in results)


def test_hf_engine_decodes_a_clip_once_for_several_questions(tmp_path: Path, tiny_model_dir: Path) -> None:
    from cosmos_train.generation import GenerationConfig, SamplingParams
    from cosmos_train.generation.hf import HFEngine

    clips = [moving_square_mp4(tmp_path / f"{i}.mp4", shift=i) for i in range(2)]
    chats = [
        [
            {
                "role": "user",
                "content": [
                    {"type": "video", "video": str(c), "fps": 2, "max_pixels": 3136, "min_pixels": 3136},
                    {"type": "text", "text": q},
                ],
            }
        ]
        for c in clips
        for q in ("Where does it go?", "What colour is it?", "How fast?")
    ]
    cfg = GenerationConfig(model_path=str(tiny_model_dir), engine="hf", dtype="float32", device="cpu", decode_workers=2)
    greedy = SamplingParams(max_new_tokens=2, temperature=0)
    engine = HFEngine(cfg)
    texts = [g[0].text for g in engine.generate(chats, greedy)]
    assert len(texts) == 6 and engine.frames.misses == 2 and engine.frames.hits == 4
    # the same answers as engines without the memo would give: the memo changes no pixel
    fresh = HFEngine(dataclasses.replace(cfg, decode_workers=1), frame_memo_bytes=0)
    assert [g[0].text for g in fresh.generate(chats, greedy)] == texts and fresh.frames.size_bytes == 0


def test_an_encoded_chat_is_kept_for_the_same_settings_and_rebuilt_when_its_file_changes(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """GRPO's colocated engine and trainer encode a step's prompts with the same settings: the second gets
    the first's encoding. Other settings, a rewritten file, and media that is not a file are encoded anew."""
    from PIL import Image

    from cosmos_train.data.chat import encode_chat
    from cosmos_train.models.load import load_processor

    processor = load_processor(str(tiny_model_dir))
    clip = moving_square_mp4(tmp_path / "a.mp4", frames=8)
    chat = [
        {
            "role": "user",
            "content": [
                {"type": "video", "video": str(clip), "fps": 2, "max_pixels": 3136, "min_pixels": 3136},
                {"type": "text", "text": "Where does it go?"},
            ],
        }
    ]
    memo = FrameMemo()
    first = memo.encode_chat(processor, chat, add_generation_prompt=True, max_length=512, origin="row 1")
    again = memo.encode_chat(processor, chat, add_generation_prompt=True, max_length=512, origin="row 9")
    assert again is first and (memo.encoded_hits, memo.encoded_misses) == (1, 1)
    plain = encode_chat(processor, chat, add_generation_prompt=True, max_length=512)
    assert torch.equal(first.input_ids, plain.input_ids) and torch.equal(
        first.pixel_values_videos, plain.pixel_values_videos
    )
    # other settings: another encoding
    memo.encode_chat(processor, chat, add_generation_prompt=False, max_length=512)
    assert memo.encoded_misses == 2
    # the file rewritten under the same name: encoded again, not served stale
    moving_square_mp4(clip, frames=8, shift=3)
    rewritten = memo.encode_chat(processor, chat, add_generation_prompt=True, max_length=512)
    assert memo.encoded_misses == 3 and not torch.equal(rewritten.pixel_values_videos, first.pixel_values_videos)
    # a PIL image has nothing stable to key on: encoded every time, never kept
    image_chat = [{"role": "user", "content": [{"type": "image", "image": Image.new("RGB", (56, 56))}]}]
    before = memo.size_bytes
    memo.encode_chat(processor, image_chat, add_generation_prompt=True)
    memo.encode_chat(processor, image_chat, add_generation_prompt=True)
    assert memo.encoded_misses == 3 and memo.encoded_hits == 1 and memo.size_bytes == before
