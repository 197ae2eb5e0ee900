"""The benchmark prompt, as the Cosmos-Reason1 evaluation tool builds it.

    system: "Answer the questions."
    user:   [video part (path, fps)]
            question
            (A) option text
            (B) option text ...
            Answer with the option's letter from the given choices directly.
            [reasoning: Please answer the question in the following format: <think> ... </answer>.]

The reasoning instruction is the one the GRPO prompts use (shared/reference/formats.md), so a model
post-trained here is evaluated on the wording it was trained with. Free-form questions (no options,
or answer_type "freeform") get the question text alone.
"""

from __future__ import annotations

from typing import Any

from cosmos_train.evaluation.benchmark import Question

SYSTEM_PROMPT = "Answer the questions."
LETTER_INSTRUCTION = "Answer with the option's letter from the given choices directly."
REASONING_INSTRUCTION = (
    "Please answer the question in the following format: "
    "<think> your reasoning </think> <answer> your answer </answer>."
)


def question_text(question: str, options: dict[str, str], answer_type: str) -> str:
    """The user turn's text for one question."""
    if answer_type == "freeform" or not options:
        return question
    lines = [question, *(f"({letter}) {text}" for letter, text in options.items()), LETTER_INSTRUCTION]
    if answer_type == "reasoning":
        lines.append(REASONING_INSTRUCTION)
    return "\n".join(lines)


def build_messages(
    question: Question, video_path: str, answer_type: str, fps: float, vision: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """The chat for one question: system prompt, then a user turn with the video part and the text.

    vision: extra per-video settings (max_pixels, max_frames, ...) put on the video part.
    """
    video_part: dict[str, Any] = {"type": "video", "video": str(video_path), "fps": fps}
    video_part.update({k: v for k, v in (vision or {}).items() if v is not None})
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {
            "role": "user",
            "content": [video_part, {"type": "text", "text": question_text(question.question, question.options, answer_type)}],
        },
    ]
