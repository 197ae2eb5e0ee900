"""The benchmark prompt, as the Cosmos-Reason1 evaluation tool builds it.

    system: evaluation.system_prompt ("Answer the questions.", the reference tool's)
    user:   [video part (path, fps)]
            question
            (A) option text
            (B) option text ...
            Answer with the option's letter from the given choices directly.
            [reasoning: Please answer the question in the following format: <think> ... </answer>.]

The reasoning instruction is the one the GRPO prompts use (docs/FACTS.md), so a model
post-trained here is evaluated on the wording it was trained with. Free-form questions (no options,
or answer_type "freeform") get the question text alone. The chat itself (system turn, media before
the text) is built by `cosmos_train.data.prompt`, the one prompt builder SFT and rollout use too.
"""

from __future__ import annotations

from typing import Any

from cosmos_train.data.prompt import (  # noqa: F401 (LETTER/REASONING_INSTRUCTION: this module's vocabulary)
    LETTER_INSTRUCTION,
    QUESTION_SYSTEM_PROMPT,
    REASONING_INSTRUCTION,
    choice_question_text,
    question_messages,
)
from cosmos_train.evaluation.benchmark import Question

SYSTEM_PROMPT = QUESTION_SYSTEM_PROMPT  # evaluation.system_prompt's default


def question_text(question: str, options: dict[str, str], answer_type: str) -> str:
    """The user turn's text for one question."""
    if answer_type == "freeform":
        return question
    return choice_question_text(question, options, reasoning=answer_type == "reasoning")


def build_messages(
    question: Question,
    video_path: str | None,
    answer_type: str,
    fps: float,
    vision: dict[str, Any] | None = None,
    system_prompt: str = SYSTEM_PROMPT,
) -> list[dict[str, Any]]:
    """The chat for one question: system prompt, then a user turn with the video part and the text (the text
    alone, a plain string, for a text-only question: `video_path` None).

    vision: extra per-video settings (max_pixels, max_frames, ...) put on the video part.
    """
    text = question_text(question.question, question.options, answer_type)
    if video_path is None:
        return question_messages(text, [], system_prompt)
    video_part: dict[str, Any] = {"type": "video", "video": str(video_path), "fps": fps}
    video_part.update({k: v for k, v in (vision or {}).items() if v is not None})
    return question_messages(text, [video_part], system_prompt)
