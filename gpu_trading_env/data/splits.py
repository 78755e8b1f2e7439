"""Where ``MarketData.slice_bars``, ``split`` and ``walk_forward`` cut: row ranges per instrument.

Each function returns ranges ``(k, start, stop)``: rows ``[start, stop)`` of instrument ``k``,
positions local to the instrument; ``MarketData._take`` turns them into new data. The rules (and
the errors) are stated in those methods' docstrings.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from gpu_trading_env.data.market_data import MarketData

__all__ = ["MIN_PIECE_BARS", "Ranges", "slice_ranges", "split_ranges", "walk_forward_ranges"]

# One env step needs bar t and bar t+1, so a piece made by split/walk_forward needs two bars.
MIN_PIECE_BARS = 2

Ranges = list[tuple[int, int, int]]


def slice_ranges(data: MarketData, start: int | None, stop: int | None) -> Ranges:
    """Rows ``start:stop`` (Python slice rules) of every instrument; ValueError if one is empty."""
    ranges = []
    for k, n in enumerate(data.bars_per_instrument):
        r = range(int(n))[slice(start, stop)]
        if len(r) == 0:
            raise ValueError(
                f"slice_bars({start}, {stop}) leaves instrument {data.instruments[k]!r} "
                f"({n} bars) empty"
            )
        ranges.append((k, r.start, r.stop))
    return ranges


def split_ranges(
    data: MarketData, at: float | str | pd.Timestamp | np.datetime64
) -> tuple[Ranges, Ranges]:
    """``(before, after)`` of ``MarketData.split(at)``."""
    if isinstance(at, float | np.floating) and not isinstance(at, bool):
        if not 0.0 < float(at) < 1.0:
            raise ValueError(f"split fraction must be in (0, 1), got {at}")
        cuts = [int(math.floor(float(at) * int(n))) for n in data.bars_per_instrument]
    elif isinstance(at, int | np.integer):
        raise TypeError("split(at): pass a float fraction or a date, not an integer")
    else:
        when = pd.Timestamp(at)
        if when.tzinfo is not None:
            when = when.tz_convert("UTC").tz_localize(None)
        t64 = np.datetime64(when.as_unit("ns").to_datetime64(), "ns")
        cuts = [
            int(np.searchsorted(data.timestamps[data.instrument_rows(k)], t64, side="left"))
            for k in range(data.n_instruments)
        ]
    before, after = [], []
    for k, (cut, n) in enumerate(zip(cuts, data.bars_per_instrument, strict=True)):
        n = int(n)
        if cut < MIN_PIECE_BARS or n - cut < MIN_PIECE_BARS:
            raise ValueError(
                f"split at {at!r} leaves instrument {data.instruments[k]!r} with {cut} bars "
                f"before and {n - cut} after; each side needs at least {MIN_PIECE_BARS}"
            )
        before.append((k, 0, cut))
        after.append((k, cut, n))
    return before, after


def walk_forward_ranges(
    data: MarketData,
    n_folds: int,
    train_bars: int | None,
    test_bars: int | None,
    expanding: bool,
) -> list[tuple[Ranges, Ranges]]:
    """``(train, test)`` ranges of each fold of ``MarketData.walk_forward``."""
    if int(n_folds) != n_folds or n_folds < 1:
        raise ValueError(f"n_folds must be an integer >= 1, got {n_folds!r}")
    n_folds = int(n_folds)
    per_inst = []
    for k, n in enumerate(data.bars_per_instrument):
        n = int(n)
        test = test_bars
        train = train_bars
        if test is None:
            test = n // (n_folds + 1) if train is None else (n - train) // n_folds
        if train is None:
            train = n - n_folds * test
        if test < MIN_PIECE_BARS or train < MIN_PIECE_BARS or train + n_folds * test > n:
            raise ValueError(
                f"walk_forward: instrument {data.instruments[k]!r} has {n} bars, too few for "
                f"train_bars={train} + {n_folds} x test_bars={test} "
                f"(each window needs at least {MIN_PIECE_BARS} bars)"
            )
        per_inst.append((n - (train + n_folds * test), int(train), int(test)))
    folds = []
    for fold in range(n_folds):
        train_r, test_r = [], []
        for k, (skip, train, test) in enumerate(per_inst):
            test_start = skip + train + fold * test
            train_start = 0 if expanding else test_start - train
            train_r.append((k, train_start, test_start))
            test_r.append((k, test_start, test_start + test))
        folds.append((train_r, test_r))
    return folds
