"""``TrainSettings``, the first name of :class:`~agents.pipelines.train_config.TrainConfig`
(old imports and archives that name this module)."""

from __future__ import annotations

from agents.pipelines.train_config import TrainConfig, TrainSettings

__all__ = ["TrainConfig", "TrainSettings"]
