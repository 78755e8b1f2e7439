"""Progress over the runs of a command that starts many (``sweep``, ``zoo``)."""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["RunProgress"]


class RunProgress:
    """One line per finished run, written above a tqdm bar, or printed as is with no bar.

    :param total: the number of runs.
    :param desc: the bar's label.
    :param bar: whether to show the bar (``--no-progress`` turns it off).
    """

    def __init__(self, total: int, desc: str, bar: bool) -> None:
        self._bar: Any = None
        if bar:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, unit="run", desc=desc, file=sys.stderr)

    def done(self, line: str) -> None:
        """Report a finished run."""
        if self._bar is not None:
            self._bar.write(line)
            self._bar.update(1)
        else:
            print(line, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
