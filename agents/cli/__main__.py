"""``python -m agents.cli``: the ``gpu-trading-env`` command."""

import sys

from agents.cli import main

sys.exit(main())
