"""The reward handlers the service ships, registered by importing this package (see `base`)."""

from cosmos_train.reward_service.handlers import (  # noqa: F401  (registration)
    cosmos_reason1,
    judge,
    refused,
    rules,
    video_stats,
)
from cosmos_train.reward_service.handlers.base import (
    HANDLERS,
    Batch,
    Handler,
    handler_names,
    register_handler,
)

__all__ = ["HANDLERS", "Batch", "Handler", "handler_names", "register_handler"]
