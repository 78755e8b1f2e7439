"""Deprecated: RLlib's env registration moved to :mod:`gpu_trading_env.integrations.rllib_env`.

``gpu_trading_env.rllib_env`` still resolves, with a ``DeprecationWarning``, to that very module
(so patching either name patches both). Import ``gpu_trading_env.integrations.rllib_env`` instead.
"""

import sys
import warnings

from gpu_trading_env.integrations import rllib_env as _new

warnings.warn(
    "gpu_trading_env.rllib_env moved to gpu_trading_env.integrations.rllib_env: import that "
    "instead",
    DeprecationWarning,
    stacklevel=2,
)

# What sys.modules holds once this module has run is what the import hands out: the new module.
sys.modules[__name__] = _new
