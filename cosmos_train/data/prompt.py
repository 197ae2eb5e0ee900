"""The one prompt builder: what a model is asked, the same in SFT, RL rollout and evaluation.

    from cosmos_train.data.prompt import with_system_prompt, question_messages, prompt_messages

Four rules live here and nowhere else:
- A multiple-choice question reads: the question, one "(A) option" line per option, the letter
  instruction, and with reasoning the <think>/<answer> instruction (the Cosmos-Reason GRPO and
  benchmark prompts; docs/FACTS.md), whether it is a synthetic SFT row, an RL row or a
  benchmark question.
- The system turn is always written out. A row's own system turn wins; else the configured one
  (`train.train_policy.system_prompt`, `evaluation.system_prompt`); else DEFAULT_SYSTEM_PROMPT.
  Leaving it to the chat template made the prompt depend on the model family: Qwen2.5-VL's template
  (Cosmos-Reason1) inserts "You are a helpful assistant." when a chat has no system turn, Qwen3-VL's
  inserts nothing. The default is that sentence, so SFT rows without a system turn train on
  exactly the ids they did before.
- Media go first in the user turn, then the text: the Cosmos-Reason / qwen-vl-utils convention the
  models were trained with (dataset rows that place media themselves, with <video> placeholders,
  keep their placement; see data/sources/common.py).
- The prompt of a training row is everything before its last assistant turn (when the row ends with it:
  SFT rows, and SFT rows reused for RL, whose answer is then the reference): what rollout asks the
  engine to complete, and, encoded with the generation prompt, exactly the ids SFT trains the
  answer after (tests/unit/test_prompt.py pins SFT, rollout and evaluation to the same ids).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cosmos_train.errors import DataError

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."
# The Cosmos-Reason1 evaluation tool's system turn; the synthetic dataset's rows use it too, so the
# demo trains and is evaluated on one prompt.
QUESTION_SYSTEM_PROMPT = "Answer the questions."
Message = dict[str, Any]


LETTER_INSTRUCTION = "Answer with the option's letter from the given choices directly."
REASONING_INSTRUCTION = (
    "Please answer the question in the following format: "
    "<think> your reasoning </think> <answer> your answer </answer>."
)


def choice_question_text(question: str, options: Mapping[str, str], reasoning: bool) -> str:
    """The user text of a multiple-choice question (module docstring); no options: the question alone."""
    if not options:
        return question
    lines = [question, *(f"({letter}) {text}" for letter, text in options.items()), LETTER_INSTRUCTION]
    if reasoning:
        lines.append(REASONING_INSTRUCTION)
    return "\n".join(lines)


def with_system_prompt(messages: Sequence[Message], system_prompt: str | None = None) -> list[Message]:
    """`messages` with an explicit system turn first (module docstring); the input is not changed."""
    out = list(messages)
    if out and out[0].get("role") == "system":
        return out
    text = DEFAULT_SYSTEM_PROMPT if system_prompt is None else system_prompt
    return [{"role": "system", "content": text}, *out]


def user_turn(text: str, media_parts: Sequence[Message] = ()) -> Message:
    """One user turn: the media parts first, then the text (a plain string when there is no media)."""
    if not media_parts:
        return {"role": "user", "content": text}
    return {"role": "user", "content": [*(dict(p) for p in media_parts), {"type": "text", "text": text}]}


def question_messages(
    text: str, media_parts: Sequence[Message] = (), system_prompt: str | None = None
) -> list[Message]:
    """The chat asking one question about some media: system turn, then the user turn."""
    return with_system_prompt([user_turn(text, media_parts)], system_prompt)


def _answer_index(messages: Sequence[Message]) -> int | None:
    """The index of the row's answer: its last turn when that is the assistant's (an SFT row, or an SFT row
    reused for RL, where it is the reference); None when the row ends with another turn (a prompt already:
    an earlier assistant turn of a multi-turn prompt is part of the question, not its answer)."""
    if messages and messages[-1].get("role") == "assistant":
        return len(messages) - 1
    return None


def prompt_messages(
    messages: Sequence[Message], system_prompt: str | None = None, origin: str | None = None
) -> list[Message]:
    """The prompt of a training row: its messages before its last turn when that is the assistant's answer,
    system turn written out. A row ending with a user turn is a prompt already. DataError when nothing but
    a system turn would be left (origin names the row)."""
    answer = _answer_index(messages)
    prompt = list(messages[:answer])
    if not any(m.get("role") == "user" for m in prompt):
        where = f"{origin}: " if origin else ""
        raise DataError(
            f"{where}the row has no user turn before its answer, so there is no prompt to ask; "
            "an RL row needs the question as a user turn (and the reference answer, if any, as "
            "the assistant turn after it)"
        )
    return with_system_prompt(prompt, system_prompt)


def user_text(messages: Sequence[Message]) -> str:
    """The text of the last user turn (what a completion answers; media parts left out), for logs and
    for a judge's question."""
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            parts = content or ()  # a user turn without content has no text
            return "\n".join(p.get("text", "") for p in parts if isinstance(p, dict) and p.get("type") == "text")
    return ""


def reference_answer(sample: Mapping[str, Any]) -> str | None:
    """What rewards compare a completion to: the row's `reference` (the answer of its qa_pairs, or the
    reference column: train.train_policy.response_column_name), else the text of the sample's last turn when
    that is the assistant's (an SFT row reused for RL: its answer is the reference, not a training target).
    None when the sample has neither."""
    if sample.get("reference") is not None:
        return str(sample["reference"])
    messages = sample.get("messages") or []
    answer = _answer_index(messages)
    if answer is None:
        return None
    content = messages[answer].get("content")
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or [] if isinstance(p, dict) and "text" in p)
