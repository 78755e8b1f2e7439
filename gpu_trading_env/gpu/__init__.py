"""Deprecated: the GPU layer is the top-level package :mod:`gpu_runtime` (both packages use it).

Release 0.1.0's examples imported ``gpu_trading_env.gpu.device``; that name (and
``gpu_trading_env.gpu.philox``) still resolves, to the very modules of :mod:`gpu_runtime`, with a
``DeprecationWarning``. Import ``gpu_runtime.device`` / ``gpu_runtime.philox`` instead.
"""

import sys
import warnings

from gpu_runtime import device, philox

warnings.warn(
    "gpu_trading_env.gpu moved to the package gpu_runtime: import gpu_runtime.device or "
    "gpu_runtime.philox instead",
    DeprecationWarning,
    stacklevel=2,
)

# The same module objects under the old names, so `from gpu_trading_env.gpu.device import x`
# finds them (and patching either name patches both).
sys.modules[f"{__name__}.device"] = device
sys.modules[f"{__name__}.philox"] = philox

__all__ = ["device", "philox"]
