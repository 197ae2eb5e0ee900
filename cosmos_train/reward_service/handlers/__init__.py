"""The reward handlers the service ships, registered by importing this package (see `base`)."""

from cosmos_train.reward_service.handlers import judge, rules, video_stats  # noqa: F401  (registration)
from cosmos_train.reward_service.handlers.base import (
    HANDLERS,
    Batch,
    Handler,
    handler_names,
    register_handler,
)

__all__ = ["HANDLERS", "Batch", "Handler", "handler_names", "register_handler"]
