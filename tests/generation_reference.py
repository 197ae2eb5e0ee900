"""What generation engines are checked against: a plain transformers model of the same weights and a
few lines of logits processing written out independently of the engines (tests/integration/
test_generation_contract.py for every engine, test_vllm_engine.py for vLLM's own parts)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

VISION = {"min_pixels": 3136, "max_pixels": 3136, "fps": 1}


def encode(processor: Any, chat: list[dict[str, Any]]) -> Any:
    from cosmos_train.data.chat import encode_chat
    from cosmos_train.vision.settings import VisionSettings

    return encode_chat(processor, chat, add_generation_prompt=True, vision_defaults=VisionSettings(**VISION))


def eos_ids(processor: Any) -> list[int]:
    from cosmos_train.vision.processor import get_tokenizer

    tok = get_tokenizer(processor)
    return sorted({tok.convert_tokens_to_ids("<|im_end|>"), tok.eos_token_id} - {None})


def processed_logprobs(logits: Any, s: Any, seen: list[int], generated: list[int]) -> Any:
    """log-softmax of the distribution one token is drawn from: penalties (repetition over the
    prompt and the completion so far, presence / frequency over the completion), then, when
    sampling, temperature, top-k and top-p. Greedy: the penalised logits at temperature 1."""
    import torch

    logits = logits.float().clone()
    if s.repetition_penalty != 1.0:
        ids = torch.tensor(sorted({t for t in seen if t < logits.shape[-1]}))
        picked = logits[ids]
        logits[ids] = torch.where(picked > 0, picked / s.repetition_penalty, picked * s.repetition_penalty)
    if generated:
        counts = torch.bincount(torch.tensor(generated), minlength=logits.shape[-1]).float()
        logits -= s.frequency_penalty * counts + s.presence_penalty * (counts > 0).float()
    if s.greedy:
        return torch.log_softmax(logits, -1)
    logits = logits / s.temperature
    if s.top_k:
        kth = logits.sort(descending=True).values[s.top_k - 1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if s.top_p < 1:
        probs, order = logits.softmax(-1).sort(descending=True)
        mass_before = probs.cumsum(-1) - probs  # of the tokens likelier than each one
        drop = torch.zeros_like(logits, dtype=torch.bool).scatter(0, order, mass_before >= s.top_p)
        logits = logits.masked_fill(drop, float("-inf"))
    return torch.log_softmax(logits, -1)


def teacher_forced(model: Any, encoded: Any, completion: list[int], s: Any) -> Any:
    import torch

    inputs = encoded.model_inputs()
    prompt = encoded.input_ids.tolist()
    ids = torch.tensor([prompt + completion])
    inputs["input_ids"] = ids
    inputs["attention_mask"] = torch.ones_like(ids)
    pad = torch.zeros(len(completion), dtype=encoded.mm_token_type_ids.dtype)
    inputs["mm_token_type_ids"] = torch.cat([encoded.mm_token_type_ids, pad]).unsqueeze(0)
    with torch.inference_mode():
        logits = model(**inputs).logits[0, len(prompt) - 1 : -1]
    return torch.tensor(
        [
            processed_logprobs(logits[t], s, prompt + completion[:t], completion[:t])[token].item()
            for t, token in enumerate(completion)
        ]
    )


def greedy_reference(model: Any, processor: Any, chat: list[dict[str, Any]], max_new: int) -> list[int]:
    import torch

    from cosmos_train.models.families import family_of

    eos = eos_ids(processor)
    encoded = encode(processor, chat)
    inputs = encoded.model_inputs()
    if family_of(model).text_only:  # a causal LM's generate refuses the (all-text) mm_token_type_ids
        inputs.pop("mm_token_type_ids", None)
    with torch.inference_mode():
        out = model.generate(**inputs, max_new_tokens=max_new, do_sample=False, eos_token_id=eos, pad_token_id=eos[0])
    row = out[0, len(encoded) :].tolist()
    return row[: next((i + 1 for i, t in enumerate(row) if t in eos), len(row))]


def perturbed(tiny_model_dir: Path, seed: int) -> Any:
    import torch

    from cosmos_train.models.load import load_model

    model = load_model(str(tiny_model_dir), dtype=torch.float32, device=torch.device("cpu")).eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    return model
