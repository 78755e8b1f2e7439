"""Training progress as plain lines, for output that is not a terminal.

SB3's progress bar redraws one terminal line; piped into a file or a CI log it shows nothing
until the run ends, so a run of minutes looks hung. :class:`ProgressLines` prints one line every
``every_seconds`` instead: env steps done, the rate, and the time left at that rate.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

from stable_baselines3.common.callbacks import BaseCallback

__all__ = ["ProgressLines", "format_seconds"]


def format_seconds(seconds: float) -> str:
    """``42 s``, ``3 min 20 s`` or ``2 h 05 min``."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


class ProgressLines(BaseCallback):
    """Print ``train: 40,000/200,000 env steps (20%), 2,310 steps/s, about 69 s left`` every
    ``every_seconds`` of wall time, and once at the end.

    :param total: env steps of the run (``total_timesteps``).
    :param every_seconds: wall seconds between lines (> 0; 0 prints at every step, for tests).
    :param stream: where to print (default: ``sys.stdout`` at print time, flushed each line).
    :param clock: a monotonic clock in seconds (``time.perf_counter``; replaceable in tests).
    """

    def __init__(
        self,
        total: int,
        every_seconds: float = 10.0,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        super().__init__()
        if total < 1:
            raise ValueError(f"total = {total!r} is invalid: allowed is an integer >= 1")
        if every_seconds < 0:
            raise ValueError(f"every_seconds = {every_seconds!r} is invalid: allowed is >= 0")
        self.total = int(total)
        self.every_seconds = float(every_seconds)
        self.stream = stream
        self.clock = clock
        self._start: float | None = None
        self._start_steps = 0
        self._last = 0.0

    def _print(self, text: str) -> None:
        stream = self.stream if self.stream is not None else sys.stdout
        print(text, file=stream, flush=True)

    def line(self, now: float) -> str:
        """The progress line at wall time ``now`` for ``self.num_timesteps`` env steps done."""
        done = int(self.num_timesteps)
        elapsed = max(now - (self._start if self._start is not None else now), 1e-9)
        rate = (done - self._start_steps) / elapsed
        text = f"train: {done:,}/{self.total:,} env steps ({done / self.total:.0%})"
        if rate > 0:
            left = max(self.total - done, 0) / rate
            text += f", {rate:,.0f} steps/s, about {format_seconds(left)} left"
        return text

    def _on_training_start(self) -> None:
        self._start = self._last = self.clock()
        self._start_steps = int(self.num_timesteps)

    def _on_step(self) -> bool:
        now = self.clock()
        if self._start is None:
            self._start = self._last = now
        if now - self._last >= self.every_seconds:
            self._last = now
            self._print(self.line(now))
        return True

    def _on_training_end(self) -> None:
        now = self.clock()
        elapsed = now - (self._start if self._start is not None else now)
        self._print(f"train: {int(self.num_timesteps):,} env steps in {format_seconds(elapsed)}")
