"""gpu-trading-env: a GPU-resident trading environment for reinforcement learning."""

__version__ = "0.1.0"
