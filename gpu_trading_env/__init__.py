"""gpu-trading-env: a GPU-resident trading environment for reinforcement learning.

``import gpu_trading_env`` registers ``GpuTrading-v0``::

    import gymnasium as gym
    import gpu_trading_env  # noqa: F401

    envs = gym.make_vec("GpuTrading-v0", num_envs=4096, device="cuda")
    env = gym.make("GpuTrading-v0")
"""

from gpu_trading_env.gymnasium_version import check_gymnasium

check_gymnasium()  # before anything imports a Gymnasium name that an old one lacks

from gymnasium.envs.registration import register, registry  # noqa: E402

from gpu_trading_env.core.config import EnvConfig  # noqa: E402
from gpu_trading_env.core.constants import COMPONENT_NAMES  # noqa: E402
from gpu_trading_env.data.market_data import MarketData  # noqa: E402
from gpu_trading_env.env import TradingEnv  # noqa: E402
from gpu_trading_env.vector_env import TradingVectorEnv  # noqa: E402

__version__ = "0.1.0"
__all__ = ["COMPONENT_NAMES", "EnvConfig", "MarketData", "TradingEnv", "TradingVectorEnv"]

ENV_ID = "GpuTrading-v0"
if ENV_ID not in registry:
    register(
        id=ENV_ID,
        entry_point="gpu_trading_env.env:TradingEnv",
        vector_entry_point="gpu_trading_env.vector_env:TradingVectorEnv",
    )
PORTFOLIO_ENV_ID = "GpuPortfolio-v0"
if PORTFOLIO_ENV_ID not in registry:
    register(
        id=PORTFOLIO_ENV_ID,
        vector_entry_point="gpu_trading_env.portfolio_env:PortfolioVectorEnv",
    )
