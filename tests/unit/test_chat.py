"""Chat encoding: template text, label mask, vision pad expansion, truncation, errors."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest
import torch
from PIL import Image

from cosmos_train.data.chat import IGNORE_INDEX, ChatTooLongError, encode_chat
from cosmos_train.data.media import MediaError
from cosmos_train.models.load import load_processor
from cosmos_train.models.tiny import make_tiny_model
from cosmos_train.vision.processor import get_tokenizer

ANSWER_1 = "<think>\nThe square moves right.\n</think>\n\n<answer>\nB\n</answer>"
ANSWER_2 = "It stops at 3.5 seconds."


@pytest.fixture(scope="session")
def processor(tmp_path_factory: pytest.TempPathFactory):
    return load_processor(make_tiny_model(tmp_path_factory.mktemp("tiny-chat") / "model"))


@pytest.fixture(scope="session")
def clip(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("media") / "clip.mp4"
    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=4)
        stream.width, stream.height = 112, 84
        stream.pix_fmt = "yuv420p"
        for i in range(4):
            img = np.zeros((84, 112, 3), np.uint8)
            img[30:46, 8 + 16 * i : 24 + 16 * i] = 255
            for packet in stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return str(path)


@pytest.fixture(scope="session")
def image(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("media") / "frame.png"
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (56, 84, 3), dtype=np.uint8)).save(path)
    return str(path)


def video_part(path: str, **settings) -> dict:
    # Explicit size: the video default min_pixels (128 * 28 * 28) would upscale the small clip.
    return {
        "type": "video",
        "video": path,
        "nframes": 4,
        "resized_height": 84,
        "resized_width": 112,
        **settings,
    }


def conversation(clip: str) -> list[dict]:
    return [
        {"role": "system", "content": "Answer the questions."},
        {"role": "user", "content": [video_part(clip), {"type": "text", "text": "Which way does it move?"}]},
        {"role": "assistant", "content": ANSWER_1},
        {"role": "user", "content": "When does it stop?"},
        {"role": "assistant", "content": [{"type": "text", "text": ANSWER_2}]},
    ]


def label_runs(enc) -> list[list[int]]:
    """The labelled tokens, as contiguous runs."""
    runs: list[list[int]] = []
    prev = False
    for tok, lab in zip(enc.input_ids.tolist(), enc.labels.tolist()):
        if lab != IGNORE_INDEX:
            assert lab == tok
            if not prev:
                runs.append([])
            runs[-1].append(tok)
        prev = lab != IGNORE_INDEX
    return runs


def test_template_renders_the_qwen_format(processor) -> None:
    tok = get_tokenizer(processor)
    messages = [
        {"role": "system", "content": "You are a helpful assistant."},
        {
            "role": "user",
            "content": [{"type": "video", "video": "x.mp4"}, {"type": "text", "text": "What happens?"}],
        },
        {"role": "assistant", "content": "<think>x</think>\n\n<answer>B</answer>"},
    ]
    expected = (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\n<|vision_start|><|video_pad|><|vision_end|>What happens?<|im_end|>\n"
        "<|im_start|>assistant\n<think>x</think>\n\n<answer>B</answer><|im_end|>\n"
    )
    assert tok.apply_chat_template(messages, tokenize=False) == expected
    # No system turn: the template adds Qwen's default one; the generation prompt opens the assistant turn.
    rendered = tok.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True)
    assert rendered == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_labels_cover_exactly_the_assistant_content(processor, clip: str) -> None:
    tok = get_tokenizer(processor)
    enc = encode_chat(processor, conversation(clip))
    assert [tok.decode(run) for run in label_runs(enc)] == [ANSWER_1 + "<|im_end|>", ANSWER_2 + "<|im_end|>"]
    # Everything together is the template text with the pads expanded.
    rendered = tok.apply_chat_template(conversation(clip), tokenize=False)
    assert tok.decode(enc.input_ids) == rendered.replace("<|video_pad|>", "<|video_pad|>" * 24)
    assert enc.attention_mask.tolist() == [1] * len(enc)


def test_answer_starting_with_newlines_is_labelled_whole(processor) -> None:
    tok = get_tokenizer(processor)
    messages = [
        {"role": "user", "content": "Why?"},
        {"role": "assistant", "content": "\n\nBecause of gravity."},
    ]
    enc = encode_chat(processor, messages)
    assert [tok.decode(run) for run in label_runs(enc)] == ["\n\nBecause of gravity.<|im_end|>"]
    # The prompt part tokenises exactly as the generation prompt does at inference.
    prompt = encode_chat(processor, messages[:1], add_generation_prompt=True)
    assert torch.equal(enc.input_ids[: len(prompt)], prompt.input_ids)
    assert prompt.num_label_tokens == 0


def test_pad_expansion_counts_and_vision_tensors(processor, clip: str, image: str) -> None:
    tok = get_tokenizer(processor)
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "image", "image": image},
                video_part(clip),
                video_part(clip, resized_height=56, resized_width=56),
                {"type": "text", "text": "Compare them."},
            ],
        }
    ]
    enc = encode_chat(processor, messages, add_generation_prompt=True)
    video_id, image_id = (
        tok.convert_tokens_to_ids("<|video_pad|>"),
        tok.convert_tokens_to_ids("<|image_pad|>"),
    )
    # 84x112 clip: grid (2, 6, 8) -> 24 tokens; 56x56: (2, 4, 4) -> 8; 56x84 image: (1, 4, 6) -> 6.
    assert enc.video_grid_thw.tolist() == [[2, 6, 8], [2, 4, 4]]
    assert enc.image_grid_thw.tolist() == [[1, 4, 6]]
    assert int((enc.input_ids == video_id).sum()) == 24 + 8
    assert int((enc.input_ids == image_id).sum()) == 6
    assert enc.pixel_values_videos.shape == (96 + 32, 3 * 2 * 14 * 14)
    assert enc.pixel_values.shape == (24, 3 * 2 * 14 * 14)
    assert enc.second_per_grid_ts.tolist() == [0.5, 0.5]  # 4 frames sampled at 4 fps, 2 per temporal patch
    assert enc.mm_token_type_ids.tolist() == [
        2 if t == video_id else 1 if t == image_id else 0 for t in enc.input_ids.tolist()
    ]
    # Blocks appear in message order: image first, then the two videos.
    text = tok.decode(enc.input_ids)
    assert text.index("<|image_pad|>") < text.index("<|video_pad|>")
    assert enc.num_label_tokens == 0


def test_image_matches_transformers_processor(processor, image: str) -> None:
    messages = [{"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": "What?"}]}]
    enc = encode_chat(processor, messages, add_generation_prompt=True)
    text = get_tokenizer(processor).apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    ref = processor(text=[text], images=[Image.open(image)], return_tensors="pt")
    assert torch.equal(enc.input_ids, ref["input_ids"][0])
    assert torch.equal(enc.image_grid_thw, ref["image_grid_thw"])
    assert torch.allclose(enc.pixel_values, ref["pixel_values"], atol=1e-5)
    assert torch.equal(enc.mm_token_type_ids.long(), ref["mm_token_type_ids"][0].long())


def test_truncation_error_names_lengths(processor, clip: str) -> None:
    full = encode_chat(processor, conversation(clip))
    with pytest.raises(ChatTooLongError, match=rf"sample\.json:3: sample is {len(full)} tokens.*max_length 40"):
        encode_chat(processor, conversation(clip), max_length=40, origin="sample.json:3")
    assert len(encode_chat(processor, conversation(clip), max_length=len(full))) == len(full)


def test_right_truncation_cuts_text_at_the_end(processor, clip: str) -> None:
    full = encode_chat(processor, conversation(clip))
    cut = encode_chat(processor, conversation(clip), max_length=len(full) - 5, truncation="right")
    assert len(cut) == len(full) - 5
    assert torch.equal(cut.input_ids, full.input_ids[: len(full) - 5])
    assert torch.equal(cut.labels, full.labels[: len(full) - 5])
    assert torch.equal(cut.pixel_values_videos, full.pixel_values_videos)


def test_right_truncation_never_cuts_through_a_vision_block(processor, clip: str) -> None:
    tok = get_tokenizer(processor)
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "First:"}, video_part(clip), video_part(clip)]},
    ]
    full = encode_chat(processor, messages, add_generation_prompt=True)
    ids = full.input_ids.tolist()
    starts = [i for i, t in enumerate(ids) if t == tok.convert_tokens_to_ids("<|vision_start|>")]
    # A cut in the middle of the second video's pads drops that whole block and its pixels.
    cut = encode_chat(processor, messages, add_generation_prompt=True, max_length=starts[1] + 10, truncation="right")
    assert len(cut) == starts[1]
    assert cut.video_grid_thw.tolist() == [[2, 6, 8]]
    assert cut.pixel_values_videos.shape[0] == 96
    assert cut.second_per_grid_ts.shape == (1,)
    # A cut inside the first block leaves no vision at all.
    none = encode_chat(processor, messages, add_generation_prompt=True, max_length=starts[0] + 3, truncation="right")
    assert len(none) == starts[0]
    assert none.video_grid_thw is None and none.pixel_values_videos is None and none.second_per_grid_ts is None
    assert tok.decode(none.input_ids).endswith("First:")


def test_right_truncation_that_leaves_no_answer_raises(processor, clip: str) -> None:
    messages = conversation(clip)[:3]
    prompt_len = len(encode_chat(processor, messages[:2], add_generation_prompt=True))
    with pytest.raises(ChatTooLongError, match="keeps no assistant token"):
        encode_chat(processor, messages, max_length=prompt_len, truncation="right")
    one = encode_chat(processor, messages, max_length=prompt_len + 1, truncation="right")
    assert one.num_label_tokens == 1


def test_bare_tokenizer_encodes_text_chats(processor) -> None:
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]
    a = encode_chat(get_tokenizer(processor), messages)
    b = encode_chat(processor, messages)
    assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.labels, b.labels)
    assert a.pixel_values is None and a.video_grid_thw is None


@pytest.mark.parametrize(
    ("messages", "match"),
    [
        ([], "non-empty list"),
        ([{"role": "robot", "content": "x"}], r"messages\[0\]\.role is 'robot'"),
        ([{"role": "user"}], r"messages\[0\] must be a dict with 'role' and 'content'"),
        (
            [{"role": "user", "content": [{"type": "audio", "audio": "a.wav"}]}],
            r"messages\[0\]\.content\[0\]",
        ),
        ([{"role": "user", "content": "<|video_pad|> literal"}], "pad tokens"),
        ([{"role": "user", "content": [{"type": "video", "video": "x.mp4", "max_pixel": 5}]}], "max_pixels"),
    ],
)
def test_bad_messages_raise_with_location(processor, messages: list, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        encode_chat(processor, messages)


def test_missing_video_names_file_and_part(processor, tmp_path: Path) -> None:
    missing = tmp_path / "nope.mp4"
    messages = [{"role": "user", "content": [{"type": "text", "text": "Look:"}, video_part(str(missing))]}]
    with pytest.raises(MediaError, match=r"nope\.mp4: rows\.jsonl:7: messages\[0\]\.content\[1\]: file not found"):
        encode_chat(processor, messages, origin="rows.jsonl:7")


def test_bad_truncation_mode(processor) -> None:
    with pytest.raises(ValueError, match="truncation"):
        encode_chat(processor, [{"role": "user", "content": "x"}], truncation="left")
