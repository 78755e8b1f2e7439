"""Deprecated: ``SB3VecEnv`` moved to :mod:`gpu_trading_env.integrations.sb3_vec_env`, the
adapters' shared ``env_or_build`` and ``switch_to_same_step`` to
:mod:`gpu_trading_env.integrations.mode_switch`.

``gpu_trading_env.wrappers`` still gives those three names, the very objects of the new modules,
with a ``DeprecationWarning``. Import them from the new modules instead.
"""

import warnings

from gpu_trading_env.integrations.mode_switch import env_or_build, switch_to_same_step
from gpu_trading_env.integrations.sb3_vec_env import SB3VecEnv

warnings.warn(
    "gpu_trading_env.wrappers moved: import SB3VecEnv from "
    "gpu_trading_env.integrations.sb3_vec_env (env_or_build and switch_to_same_step from "
    "gpu_trading_env.integrations.mode_switch) instead",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["SB3VecEnv", "env_or_build", "switch_to_same_step"]
