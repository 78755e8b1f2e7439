"""Agents that train on gpu-trading-env, built on Stable-Baselines3.

- ``GpuDQN``: SB3's DQN with a dueling network (``DuelingDQNPolicy``), prioritized replay on the
  GPU (``PrioritizedReplayBuffer``), a fused GPU rollout, CUDA-graph train steps, an optional
  curiosity bonus (``CuriosityModel``) and data-parallel training;
- ``PrioritizedDQN``: SB3's DQN with the prioritized buffer, for any env;
- ``CheckpointEvery``: a callback that writes resumable checkpoints;
- the ``gpu-trading-env`` command (``agents.cli``): train, walk-forward, eval, backtest, sweep,
  the market zoo and the env benchmark.

The names are imported on first use (PEP 562): ``import agents.cli`` for an argument error or
``--help`` should not pay for torch and SB3 (seconds on a busy 2-core machine).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "PrioritizedReplayBuffer": "agents.replay.prioritized_buffer",
    "CuriosityModel": "agents.algorithm.curiosity",
    "GpuDQN": "agents.algorithm.gpu_dqn",
    "DuelingDQNPolicy": "agents.algorithm.policies",
    "PrioritizedDQN": "agents.algorithm.sb3_per",
    "CheckpointEvery": "agents.files.checkpoint",
}

__all__ = [
    "CheckpointEvery",
    "CuriosityModel",
    "DuelingDQNPolicy",
    "GpuDQN",
    "PrioritizedDQN",
    "PrioritizedReplayBuffer",
]

if TYPE_CHECKING:
    from agents.algorithm.curiosity import CuriosityModel
    from agents.algorithm.gpu_dqn import GpuDQN
    from agents.algorithm.policies import DuelingDQNPolicy
    from agents.algorithm.sb3_per import PrioritizedDQN
    from agents.files.checkpoint import CheckpointEvery
    from agents.replay.prioritized_buffer import PrioritizedReplayBuffer


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'agents' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
