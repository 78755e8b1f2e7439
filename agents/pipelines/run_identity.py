"""What a resumed ``train`` run must share with the run that wrote its checkpoint
(``run_identity``), and the check that it does (``check_same_run``)."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from agents.pipelines.train_config import TrainSettings
from gpu_trading_env.core.config import EnvConfig
from gpu_trading_env.data.market_data import MarketData

__all__ = ["check_same_run", "run_identity"]

# The settings a resumed run must repeat (beside eval_every, val_fraction and curiosity).
_KEPT_SETTINGS = (
    "timesteps",
    "num_envs",
    "batch_size",
    "buffer_size",
    "gradient_steps",
    "learning_rate",
    "final_learning_rate",
    "gamma",
    "net_width",
    "weight_decay",
    "reward_scale",
)


def run_identity(
    fit: MarketData, val: MarketData, config: EnvConfig, settings: TrainSettings, seed: int
) -> dict[str, Any]:
    """What a resumed run must share with the checkpointed one: data, config, budget, seed
    (a JSON-able dict saved in the checkpoint; the bars as a SHA-256 of closes and features)."""
    digest = hashlib.sha256()
    for part in (fit, val):
        digest.update(np.ascontiguousarray(part.close, dtype=np.float64).tobytes())
        digest.update(np.ascontiguousarray(part.features, dtype=np.float32).tobytes())
    return {
        **{k: getattr(settings, k) for k in _KEPT_SETTINGS},
        "eval_every": settings.eval_every,
        "val_fraction": settings.val_fraction,
        "curiosity": settings.curiosity,
        "seed": int(seed),
        "config": repr(config),
        "data_sha256": digest.hexdigest(),
    }


def check_same_run(resumed: Any, run_id: dict[str, Any], where: Any) -> None:
    """``ValueError`` naming each field in which the checkpoint's extra ``resumed`` (read from
    ``where``) differs from ``run_id``, or that it is not a train run's checkpoint at all."""
    if not isinstance(resumed, dict) or "run" not in resumed or "evaluate" not in resumed:
        raise ValueError(f"{str(where)!r} is not a checkpoint written by a train run")
    saved = resumed["run"]
    differ = sorted(k for k in run_id if saved.get(k) != run_id[k])
    if differ:
        details = "; ".join(
            f"{k}: checkpoint {saved.get(k)!r}, now {run_id[k]!r}"
            for k in differ
            if k not in ("config", "data_sha256")
        )
        raise ValueError(
            f"cannot resume from {str(where)!r}: the run differs in {differ}"
            + (f" ({details})" if details else "")
            + "; pass the options and data of the run that wrote it"
        )
