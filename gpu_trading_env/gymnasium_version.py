"""The Gymnasium this package needs, checked first on ``import gpu_trading_env``.

``ray[rllib]`` pins its own Gymnasium (ray 2.60.0: ``gymnasium==1.2.2``, older rays 1.0.0) and
pip installs that pin over the one present, so an environment that gained RLlib can hold a
Gymnasium this package cannot run on; without the check the import fails deep inside with
``cannot import name 'AutoresetMode'``. docs/INTEGRATIONS.md ("Installing RLlib beside it")
gives the installs that work.
"""

from __future__ import annotations

import re

# The lowest Gymnasium this package runs on: the one pyproject.toml's dependency names.
MIN_GYMNASIUM = (1, 1)


def gymnasium_too_old(version: str) -> bool:
    """Whether a Gymnasium version string (``"1.0.0"``, ``"1.2.2"``, ``"1.1.0rc1"``) is below
    :data:`MIN_GYMNASIUM`; a string without a leading ``major.minor`` counts as too old."""
    m = re.match(r"(\d+)\.(\d+)", version)
    return m is None or (int(m.group(1)), int(m.group(2))) < MIN_GYMNASIUM


def check_gymnasium(version: str | None = None) -> None:
    """Raise ImportError naming the conflict where the installed Gymnasium (or ``version``) is
    older than this package needs."""
    if version is None:
        import gymnasium

        version = str(getattr(gymnasium, "__version__", "unknown"))
    if gymnasium_too_old(version):
        need = ".".join(map(str, MIN_GYMNASIUM))
        raise ImportError(
            f"gpu_trading_env needs gymnasium>={need}, but gymnasium {version} is installed. "
            "ray[rllib] pins its own gymnasium and pip installs it over this one (ray 2.60.0: "
            "gymnasium==1.2.2, which works; older rays: 1.0.0, which does not): install "
            "'ray[rllib]>=2.60' or RLlib in its own virtual environment "
            "(docs/INTEGRATIONS.md, 'Installing RLlib beside it')"
        )
