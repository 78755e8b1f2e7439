"""Agents for gpu-trading-env: a GPU prioritized replay buffer for Stable-Baselines3."""

from agents.replay.prioritized_buffer import PrioritizedReplayBuffer

__all__ = ["PrioritizedReplayBuffer"]
from agents.curiosity import CuriosityModel  # noqa: E402
from agents.gpu_dqn import GpuDQN  # noqa: E402
from agents.policies import DuelingDQNPolicy  # noqa: E402
from agents.sb3_per import PrioritizedDQN  # noqa: E402

__all__ += ["CuriosityModel", "DuelingDQNPolicy", "GpuDQN", "PrioritizedDQN"]
from agents.checkpoint import CheckpointEvery  # noqa: E402

__all__ += ["CheckpointEvery"]
