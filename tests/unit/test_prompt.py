"""The one prompt builder: SFT, rollout and evaluation ask the model the same thing, token for token."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cosmos_train.data.prompt import (
    DEFAULT_SYSTEM_PROMPT,
    choice_question_text,
    prompt_messages,
    question_messages,
    reference_answer,
    with_system_prompt,
)
from cosmos_train.errors import DataError

USER = {"role": "user", "content": "Hi"}


def test_system_prompt_rule() -> None:
    own = [{"role": "system", "content": "Be brief."}, USER]
    assert with_system_prompt(own, "Configured.") == own  # the row's own wins
    assert with_system_prompt([USER], "Configured.")[0] == {"role": "system", "content": "Configured."}
    rows = [USER]
    assert with_system_prompt(rows)[0] == {"role": "system", "content": DEFAULT_SYSTEM_PROMPT}
    assert rows == [USER]  # not changed in place
    assert with_system_prompt([]) == [{"role": "system", "content": DEFAULT_SYSTEM_PROMPT}]


def test_media_go_before_the_text_and_the_answer_is_cut() -> None:
    video = {"type": "video", "video": "/c.mp4", "fps": 1}
    chat = question_messages("Where does it go?", [video], "S")
    assert chat == [
        {"role": "system", "content": "S"},
        {"role": "user", "content": [video, {"type": "text", "text": "Where does it go?"}]},
    ]
    assert question_messages("Hi")[1] == USER
    row = [
        USER,
        {"role": "assistant", "content": "A"},
        {"role": "user", "content": "Sure?"},
        {"role": "assistant", "content": "Yes"},
    ]
    assert prompt_messages(row) == with_system_prompt(row[:3])
    assert prompt_messages([USER]) == with_system_prompt([USER])
    with pytest.raises(DataError, match="row 7: the row has no user turn"):
        prompt_messages([{"role": "assistant", "content": "A"}], origin="row 7")
    assert reference_answer({"messages": row}) == "Yes"
    assert reference_answer({"messages": [USER], "reference": "B"}) == "B"
    assert reference_answer({"messages": [USER]}) is None
    # A multi-turn prompt ending with a user turn is asked whole; its earlier assistant turn is not an answer.
    assert prompt_messages(row[:3]) == with_system_prompt(row[:3])
    assert reference_answer({"messages": row[:3]}) is None
    assert reference_answer({"messages": row, "reference": "No"}) == "No"  # the reference column wins


def test_choice_question_text() -> None:
    text = choice_question_text("Which?", {"A": "left", "B": "right"}, reasoning=False)
    assert text == "Which?\n(A) left\n(B) right\nAnswer with the option's letter from the given choices directly."
    assert choice_question_text("Which?", {"A": "left"}, reasoning=True).endswith("<answer> your answer </answer>.")
    assert choice_question_text("Describe it.", {}, reasoning=True) == "Describe it."


def test_implicit_template_default_equals_the_written_out_one(tiny_model_dir: Path) -> None:
    """Writing the default out changes no token under Qwen2.5-VL's template (SFT rows without a system
    turn train on the ids they did before)."""
    from cosmos_train.data.chat import encode_chat
    from cosmos_train.models.load import load_processor

    processor = load_processor(str(tiny_model_dir))
    row = [USER, {"role": "assistant", "content": "Hello"}]
    implicit = encode_chat(processor, row)
    explicit = encode_chat(processor, with_system_prompt(row))
    assert implicit.input_ids.tolist() == explicit.input_ids.tolist()
    assert implicit.labels.tolist() == explicit.labels.tolist()


@pytest.fixture(scope="module")
def three_views(tiny_model_dir: Path, synthetic_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One synthetic validation item as SFT trains it, as rollout asks it and as evaluation asks it."""
    from cosmos_train.config import load_config
    from cosmos_train.data.chat import encode_chat
    from cosmos_train.data.sources import load_samples
    from cosmos_train.evaluation.benchmark import Question
    from cosmos_train.evaluation.prompts import build_messages
    from cosmos_train.generation import GenerationConfig
    from cosmos_train.generation.hf import HFEngine
    from cosmos_train.models.load import load_processor
    from tests.conftest import write_tiny_sft_config

    path = write_tiny_sft_config(
        tmp_path_factory.mktemp("cfg") / "c.toml", tiny_model_dir, synthetic_dir, tmp_path_factory.mktemp("out")
    )
    cfg = load_config(
        path, ['train.train_policy.dataset.split="val_letter"', "train.train_policy.dataset.vision.fps=1"]
    )
    sample = next(s for s in load_samples(cfg, "train") if s["id"].startswith("val-00000"))
    rl_row = json.loads((synthetic_dir / "rl" / "val.json").read_text())[0]
    assert rl_row["id"].startswith("val-00000")
    qa = rl_row["qa_pairs"]
    question = Question("synthetic", "val-00000", 0, qa["question"], qa["index2ans"], qa["answer"], "test")
    video = str(synthetic_dir / rl_row["video"])
    eval_chat = build_messages(question, video, "letter", 1, {"min_pixels": 3136, "max_pixels": 3136})

    processor = load_processor(str(tiny_model_dir))
    sft = encode_chat(processor, sample["messages"])
    first_label = next(i for i, lab in enumerate(sft.labels.tolist()) if lab != -100)
    engine = HFEngine(
        GenerationConfig(model_path=str(tiny_model_dir), engine="hf", dtype="float32", device="cpu"),
        processor=processor,
    )
    from cosmos_train.generation import SamplingParams

    (completion,) = engine.generate([prompt_messages(sample["messages"])], SamplingParams(max_new_tokens=1))[0]
    engine.close()
    return {
        "sft": sft.input_ids[:first_label].tolist(),
        "rollout": encode_chat(
            processor, prompt_messages(sample["messages"]), add_generation_prompt=True
        ).input_ids.tolist(),
        "engine": completion.prompt_token_ids,
        "evaluation": encode_chat(processor, eval_chat, add_generation_prompt=True).input_ids.tolist(),
        "eval_chat": eval_chat,
        "sample": sample,
        "processor": processor,
    }


def test_sft_rollout_and_evaluation_build_the_same_prompt_ids(three_views: dict) -> None:
    v = three_views
    assert len(v["sft"]) > 20  # the system turn, the video pads, the question
    assert v["rollout"] == v["sft"]
    assert v["engine"] == v["sft"]
    assert v["evaluation"] == v["sft"]


def test_evaluation_with_the_video_after_the_text_would_differ(three_views: dict) -> None:
    """The check above is sharp: the same chat with the video moved after the text encodes otherwise."""
    from cosmos_train.data.chat import encode_chat

    system, user = three_views["eval_chat"]
    swapped = [system, {"role": "user", "content": list(reversed(user["content"]))}]
    ids = encode_chat(three_views["processor"], swapped, add_generation_prompt=True).input_ids.tolist()
    assert sorted(ids) == sorted(three_views["evaluation"]) and ids != three_views["evaluation"]
