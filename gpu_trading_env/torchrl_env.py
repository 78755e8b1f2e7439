"""Deprecated: TorchRL's env moved to :mod:`gpu_trading_env.integrations.torchrl_env`.

``gpu_trading_env.torchrl_env`` still resolves, with a ``DeprecationWarning``, to that very module
(so patching either name patches both). Import ``gpu_trading_env.integrations.torchrl_env`` instead.
"""

import sys
import warnings

from gpu_trading_env.integrations import torchrl_env as _new

warnings.warn(
    "gpu_trading_env.torchrl_env moved to gpu_trading_env.integrations.torchrl_env: import that "
    "instead",
    DeprecationWarning,
    stacklevel=2,
)

# What sys.modules holds once this module has run is what the import hands out: the new module.
sys.modules[__name__] = _new
