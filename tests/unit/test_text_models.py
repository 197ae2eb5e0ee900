"""Text-only language models: their family specs and tiny models, the tokenizer in place of a processor, text chats
encoded with labels, model types refused by name before anything starts (a local folder, the Hugging Face cache),
and cosmos-rl's math rewards."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from cosmos_train.data.chat import IGNORE_INDEX, encode_chat
from cosmos_train.errors import DataError, ModelError
from cosmos_train.models.families import family_of
from cosmos_train.models.load import load_model, load_processor
from cosmos_train.preflight import check_model_family
from cosmos_train.rewards import combine
from cosmos_train.rewards.math import boxed_math_reward, direct_math_reward, gsm8k_reward
from cosmos_train.vision.processor import get_tokenizer
from tests.conftest import TEXT_FAMILIES


@pytest.mark.parametrize("family", TEXT_FAMILIES)
def test_each_text_tiny_model_loads_as_a_causal_lm_with_its_spec(family: str, text_model_dirs: dict[str, Path]) -> None:
    folder = text_model_dirs[family]
    model = load_model(folder)
    spec = family_of(model)
    assert spec.name == family and spec.text_only and type(model).__name__.endswith("ForCausalLM")
    assert len(spec.language_layers(model)) == 4 and spec.vision_blocks(model) == []
    assert not any(n.startswith(("model.visual.", "visual.")) for n, _ in model.named_parameters())
    # every TP-plan module and the LoRA targets exist in a block
    block = dict(spec.language_layers(model)[0].named_modules())
    assert all(name in block for name in spec.tp_plan)
    targets = [n for n, _ in model.named_modules() if re.fullmatch(spec.lora_targets, n)]
    assert len(targets) == 4 * 7 and all(n.startswith("model.layers.") for n in targets)
    # a language model has a tokenizer and no processor
    assert not (folder / "preprocessor_config.json").exists()
    tokenizer = load_processor(folder)
    assert get_tokenizer(tokenizer) is tokenizer
    chat = [{"role": "user", "content": "What is 2 + 2?"}, {"role": "assistant", "content": "4"}]
    enc = encode_chat(tokenizer, chat)
    labelled = enc.input_ids[enc.labels != IGNORE_INDEX]
    assert tokenizer.decode(labelled) == "4<|im_end|>" and enc.pixel_values is None
    with torch.no_grad():
        out = model(input_ids=enc.input_ids[None], attention_mask=enc.attention_mask[None])
    assert out.logits.shape[:2] == (1, len(enc.input_ids))
    with pytest.raises(DataError, match="text-only language model"):
        encode_chat(
            tokenizer,
            [
                {
                    "role": "user",
                    "content": [{"type": "video", "video": "clip.mp4"}, {"type": "text", "text": "What moves?"}],
                }
            ],
        )


@pytest.mark.parametrize(
    "model_type, why",
    [
        ("qwen3_moe", "mixture-of-experts"),
        ("gpt_oss", "mixture-of-experts"),
        ("deepseek_v3", "mixture-of-experts"),
        ("gemma3", "Gemma-3"),
        ("mixtral", "mixture-of-experts"),
        ("phi3", "qkv_proj"),
        ("falcon", ""),
    ],
)
def test_an_unsupported_model_type_is_refused_by_name(model_type: str, why: str, tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type}))
    with pytest.raises(ModelError) as e:
        check_model_family(str(tmp_path))
    message = str(e.value)
    assert f"policy.model_name_or_path = '{tmp_path}' is a '{model_type}' model" in message and why in message
    assert "qwen2_5_vl, qwen3_vl, cosmos3_edge, qwen2, qwen3, llama, mistral" in message


def test_the_model_type_of_a_cached_hub_model_is_known_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.constants

    commit = "1" * 40
    repo = tmp_path / "models--Qwen--Qwen3-30B-A3B"
    (repo / "snapshots" / commit).mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    (repo / "snapshots" / commit / "config.json").write_text(json.dumps({"model_type": "qwen3_moe"}))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(ModelError, match="'Qwen/Qwen3-30B-A3B' is a 'qwen3_moe' model"):
        check_model_family("Qwen/Qwen3-30B-A3B")
    assert check_model_family("Qwen/Qwen2.5-3B-Instruct") is None  # not cached: checked when it loads


def test_math_rewards_read_the_final_answer() -> None:
    # cosmos-rl's boxed_math: math_verify, the reference read as LaTeX (tests/unit/test_cosmos_rl_rewards.py)
    assert boxed_math_reward(r"half: \boxed{\frac{1}{2}}", "$0.5$") == 1.0
    assert boxed_math_reward(r"\boxed{1,000}", r"the answer is $\boxed{1000}$") == 1.0
    assert boxed_math_reward("it is 7, no, 12", r"$\boxed{12}$") == 1.0  # no box: math_verify reads the last number
    assert boxed_math_reward(r"\boxed{13}", "$12$") == 0.0 and boxed_math_reward("no number", "$12$") == 0.0
    assert boxed_math_reward(r"\boxed{12}", "12") == 0.0  # a reference without LaTeX: nothing to compare with
    # cosmos-rl's gsm8k: the strict "#### N" of both sides
    assert gsm8k_reward("so 5 + 7 = 12\n#### 12", "5 + 7 = 12\n#### 12") == 1.0
    assert gsm8k_reward("the answer is 12", "#### 12") == 0.0 and gsm8k_reward("#### 1,200", "#### 1200") == 1.0
    # cosmos-rl's direct_math: 1 / -1 on the last "Answer:" line
    assert direct_math_reward("work...\nAnswer: $12$ dollars", "12") == 1.0
    assert direct_math_reward("Answer: 13", "12") == -1.0 and direct_math_reward("12", "12") == -1.0
    # neither side has "#### ": cosmos-rl's gsm8k compares None with None, a 1
    total, parts = combine({"boxed_math": 1.0, "gsm8k": 0.5})(r"\boxed{12}", {"reference": "$12$"})
    assert parts == {"boxed_math": 1.0, "gsm8k": 1.0} and total == 1.5


LLAMA3_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|start_header_id|>{{ message['role'] }}<|end_header_id|>"
    "\n\n{{ message['content'] | trim }}<|eot_id|>{% endfor %}{% if add_generation_prompt %}"
    "<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
MISTRAL_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}[INST] "
    "{{ message['content'] }} [/INST]{% elif message['role'] == 'assistant' %} {{ message['content'] }}"
    "{{ eos_token }}{% endif %}{% endfor %}"
)


@pytest.mark.parametrize(
    "template, eos, first, prompt_end",
    [
        (LLAMA3_TEMPLATE, "<|eot_id|>", "4", "<|start_header_id|>assistant<|end_header_id|>\n\n"),  # trimmed
        (MISTRAL_TEMPLATE, "</s>", " 4 ", "[/INST]"),  # as written
    ],
)
def test_a_non_chatml_template_labels_each_answer_and_its_eos(
    template: str, eos: str, first: str, prompt_end: str, text_model_dirs: dict[str, Path]
) -> None:
    """Llama-3's and Mistral's turn layouts (their templates' user / assistant branches): the labels are each
    assistant turn's content as the template renders it and the eos token it writes after it."""
    tokenizer = load_processor(text_model_dirs["llama"])
    tokenizer.add_special_tokens({"eos_token": eos, "bos_token": "<s>"})
    tokenizer.chat_template = template
    chat = [
        {"role": "user", "content": "What is 2 + 2?"},
        {"role": "assistant", "content": " 4 "},
        {"role": "user", "content": "And 3 + 3?"},
        {"role": "assistant", "content": "6, since 3 + 3 = 6"},
    ]
    enc = encode_chat(tokenizer, chat)
    ids, labels = enc.input_ids.tolist(), enc.labels.tolist()
    runs, run = [], []
    for token, label in zip(ids, labels):
        if label != IGNORE_INDEX:
            run.append(token)
        elif run:
            runs, run = [*runs, run], []
    runs += [run] if run else []
    assert [tokenizer.decode(r) for r in runs] == [f"{first}{eos}", f"6, since 3 + 3 = 6{eos}"]
    prompt = encode_chat(tokenizer, chat[:3], add_generation_prompt=True)
    assert tokenizer.decode(prompt.input_ids).endswith(prompt_end)
