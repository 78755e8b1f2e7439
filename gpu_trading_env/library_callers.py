"""Deprecated: the checks of the library that builds or resets the env are
:mod:`gpu_trading_env.library_checks`.

``gpu_trading_env.library_callers`` still resolves, with a ``DeprecationWarning``, to that very
module (so patching either name patches both). Its skrl check is now
``warn_if_skrl_is_loaded``, which asks whether skrl's wrapper is loaded instead of walking the
stack at every reset.
"""

import sys
import warnings

from gpu_trading_env import library_checks as _new

warnings.warn(
    "gpu_trading_env.library_callers moved to gpu_trading_env.library_checks: import that instead",
    DeprecationWarning,
    stacklevel=2,
)

# What sys.modules holds once this module has run is what the import hands out: the new module.
sys.modules[__name__] = _new
