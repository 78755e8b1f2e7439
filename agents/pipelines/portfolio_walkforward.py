"""Walk-forward on a portfolio (``walkforward --portfolio``): ``train_portfolio`` on rolling or
expanding folds of the aligned bars, each fold's kept policy tested on the bars after its
training bars, the test windows stitched into one out-of-sample path per seed, beside flat and
equal-weight buy-and-hold of the whole stitched span.

Fold ``f`` trains on bars ``[train_start_f, test_start_f)`` (its own fit and validation split
inside, as ``train_portfolio`` makes it) and is tested on ``[test_start_f, test_stop_f)``; the
test windows follow each other. A fold's backtest starts flat at its first test bar and ends at
its last, so the stitched path is flat for the one step between two test windows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agents.pipelines.portfolio_backtest import (
    PortfolioBacktest,
    backtest_portfolio,
    buy_and_hold_portfolio,
    flat_level,
)
from agents.pipelines.portfolio_train_config import PortfolioTrainConfig
from agents.pipelines.portfolio_training import (
    PortfolioTrainResult,
    check_portfolio_run,
    slice_portfolio,
    train_portfolio,
)
from gpu_trading_env.data.portfolio_data import PortfolioData

__all__ = [
    "PortfolioFold",
    "PortfolioFoldRun",
    "PortfolioWalkForwardResult",
    "check_folds",
    "portfolio_folds",
    "stitch_backtests",
    "walk_forward_portfolio",
]


@dataclass(frozen=True)
class PortfolioFold:
    """One fold's windows, bars of the aligned data: training ``[train_start, test_start)``,
    test ``[test_start, test_stop)``."""

    index: int
    train_start: int
    test_start: int
    test_stop: int

    def to_dict(self, timestamps: np.ndarray) -> dict[str, Any]:
        def stamp(bar: int) -> str:
            return str(np.datetime_as_string(timestamps[bar], unit="s"))

        return {
            "fold": self.index + 1,  # numbered from 1, as the report's text
            "train": [self.train_start, self.test_start],
            "test": [self.test_start, self.test_stop],
            "train_dates": [stamp(self.train_start), stamp(self.test_start - 1)],
            "test_dates": [stamp(self.test_start), stamp(self.test_stop - 1)],
        }


def portfolio_folds(
    n_bars: int, folds: int, train_bars: int | None, test_bars: int | None, rolling: bool
) -> list[PortfolioFold]:
    """The folds' windows over ``n_bars`` aligned bars, as the single-instrument walk-forward
    lays them out: ``test_bars`` each (default: the second half of the bars split into
    ``folds`` windows, or ``(n_bars - train_bars) / folds``), the last ending at the last bar;
    each fold trains on every bar before its test window, or with ``rolling`` on the
    ``train_bars`` bars just before it (default: the bars before the first test window).

    :raises ValueError: naming the option where the windows do not fit the bars.
    """
    for name, value in (("folds", folds), ("train_bars", train_bars), ("test_bars", test_bars)):
        if value is not None and (int(value) != value or value < 1):
            raise ValueError(f"{name} = {value!r} is invalid: allowed is an integer >= 1")
    if test_bars is None:
        if train_bars is None:
            test_bars = max((n_bars - n_bars // 2) // folds, 1)
        else:
            test_bars = (n_bars - train_bars) // folds
    first_test = n_bars - folds * test_bars
    if train_bars is None:
        train_bars = first_test
    if test_bars < 1 or train_bars < 1 or train_bars > first_test:
        raise ValueError(
            f"the data's {n_bars} aligned bars are too few for {folds} folds of test_bars = "
            f"{test_bars} after train_bars = {train_bars}: allowed are fewer folds or shorter "
            "windows"
        )
    out = []
    for f in range(folds):
        test_start = first_test + f * test_bars
        start = test_start - train_bars if rolling else 0
        out.append(PortfolioFold(f, int(start), int(test_start), int(test_start + test_bars)))
    return out


def _fold_config(config: PortfolioTrainConfig, fold: PortfolioFold) -> PortfolioTrainConfig:
    """``config`` with the train fraction that makes the fold's slice train on its training
    bars exactly (``train_portfolio`` takes the floor of ``train_fraction · n``)."""
    n = fold.test_stop - fold.train_start
    train = fold.test_start - fold.train_start
    return config.replace(train_fraction=(train + 0.5) / n)


def stitch_backtests(
    pieces: Sequence[PortfolioBacktest], level: int, per_year: float
) -> PortfolioBacktest:
    """One path through consecutive backtests: each piece's equity scaled to start where the
    last ended, and one flat step (``level`` in every instrument, no position, no cost) between
    two pieces, whose windows must follow each other; ``per_year`` annualises its figures.

    :raises ValueError: where a piece does not start at the bar the previous one stopped.
    """
    for a, b in zip(pieces, pieces[1:], strict=False):
        if b.start != a.stop:
            raise ValueError(
                f"backtest windows [{a.start}, {a.stop}) and [{b.start}, {b.stop}) are not "
                "consecutive: allowed are windows that follow each other"
            )
    first = pieces[0]
    k = len(first.instruments)
    equity, levels, positions, weights, costs = [first.equity], [first.levels], [], [], []
    positions.append(first.positions)
    weights.append(first.weights)
    costs.append(first.costs)
    for piece in pieces[1:]:
        equity.append(equity[-1][-1] * piece.equity)
        levels += [np.full((1, k), level, dtype=np.int64), piece.levels]
        zero = np.zeros((1, k))
        positions += [zero, piece.positions]
        weights += [zero, piece.weights]
        costs += [zero, piece.costs]
    return PortfolioBacktest(
        equity=np.concatenate(equity),
        levels=np.concatenate(levels),
        positions=np.concatenate(positions),
        weights=np.concatenate(weights),
        costs=np.concatenate(costs),
        timestamps=np.concatenate([p.timestamps for p in pieces]),
        instruments=first.instruments,
        start=first.start,
        stop=pieces[-1].stop,
        per_year=float(per_year),
        ruined=any(p.ruined for p in pieces),
    )


@dataclass(frozen=True, eq=False)
class PortfolioFoldRun:
    """One fold and seed: the policy kept and why, its test backtest beside the fold's flat and
    equal-weight buy-and-hold (the run itself: ``result``)."""

    fold: PortfolioFold
    seed: int
    result: PortfolioTrainResult

    def to_dict(self) -> dict[str, Any]:
        r = self.result
        return {
            "fold": self.fold.index + 1,  # numbered from 1, as the report's text
            "seed": self.seed,
            "kept": r.kept,
            "reason": r.reason,
            "test": r.test.to_dict(),
            "test_network": r.test_network.to_dict(),
            "test_buy_and_hold": r.test_buy_and_hold.to_dict(),
            "gate": None if r.gate is None else r.gate.to_dict(),
            "inputs_kept": None if r.inputs is None else r.inputs.n_kept,
            "seconds": r.seconds,
        }


@dataclass(frozen=True, eq=False)
class PortfolioWalkForwardResult:
    """What :func:`walk_forward_portfolio` found.

    Attributes:
        folds: the windows; ``runs`` every fold and seed, fold-major.
        stitched: per seed, the kept policies' test windows as one path.
        flat, buy_and_hold: flat and equal-weight buy-and-hold over the stitched span
            (buy-and-hold buys at its first bar and holds to its last).
    """

    folds: list[PortfolioFold]
    seeds: list[int]
    runs: list[PortfolioFoldRun]
    stitched: dict[int, PortfolioBacktest]
    flat: PortfolioBacktest
    buy_and_hold: PortfolioBacktest
    instruments: tuple[str, ...]
    config: PortfolioTrainConfig
    timestamps: np.ndarray = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        """``metrics.json``'s part: each fold's windows and, per seed, the kept policy, its
        reason and figures; the stitched paths' figures."""
        return {
            "kind": "portfolio_walkforward",
            "instruments": list(self.instruments),
            "seeds": list(self.seeds),
            "folds": [
                {
                    **fold.to_dict(self.timestamps),
                    "runs": [r.to_dict() for r in self.runs if r.fold.index == fold.index],
                }
                for fold in self.folds
            ],
            "stitched": {str(s): bt.to_dict() for s, bt in self.stitched.items()},
            "flat": self.flat.to_dict(),
            "buy_and_hold": self.buy_and_hold.to_dict(),
            "config": self.config.to_dict(),
        }


def check_folds(
    data: PortfolioData, config: PortfolioTrainConfig, folds: Sequence[PortfolioFold]
) -> None:
    """Every fold's run checked before any training (``check_portfolio_run`` on its bars).

    :raises ValueError: naming the first fold that does not fit the settings.
    """
    if not folds:
        raise ValueError("folds is empty: allowed is at least one fold")
    for fold in folds:
        part = slice_portfolio(data, fold.train_start, fold.test_stop)
        try:
            check_portfolio_run(part, _fold_config(config, fold))
        except ValueError as exc:
            raise ValueError(f"fold {fold.index + 1}: {exc}") from None


def walk_forward_portfolio(
    data: PortfolioData,
    config: PortfolioTrainConfig,
    folds: Sequence[PortfolioFold],
    seeds: Sequence[int],
    *,
    device: str,
    per_year: float | None = None,
    on_run: Callable[[PortfolioFoldRun], None] | None = None,
) -> PortfolioWalkForwardResult:
    """Train and test every fold and seed (``train_portfolio`` on the fold's bars), stitch each
    seed's test windows.

    :param on_run: called after each fold and seed (a progress line).
    :raises ValueError: where a fold's bars do not fit the settings (checked for every fold
        before any training: :func:`~agents.pipelines.portfolio_training.check_portfolio_run`).
    """
    folds = list(folds)
    if not seeds:
        raise ValueError("seeds is empty: allowed is at least one seed")
    check_folds(data, config, folds)
    runs = []
    for fold in folds:
        part = slice_portfolio(data, fold.train_start, fold.test_stop)
        for seed in seeds:
            result = train_portfolio(
                part,
                _fold_config(config, fold),
                seed=int(seed),
                device=device,
                out=None,
                per_year=per_year,
            )
            run = PortfolioFoldRun(fold, int(seed), _shifted(result, fold.train_start))
            runs.append(run)
            if on_run is not None:
                on_run(run)
    level = flat_level(config.env)
    start, stop = folds[0].test_start, folds[-1].test_stop
    flat_levels = np.full((data.n_bars, data.n_instruments), level, dtype=np.int64)
    flat = backtest_portfolio(flat_levels, data, config.env, start, stop, per_year, device)
    stitched = {
        int(s): stitch_backtests([r.result.test for r in runs if r.seed == s], level, flat.per_year)
        for s in seeds
    }
    return PortfolioWalkForwardResult(
        folds=folds,
        seeds=[int(s) for s in seeds],
        runs=runs,
        stitched=stitched,
        flat=flat,
        buy_and_hold=buy_and_hold_portfolio(data, config.env, start, stop, per_year),
        instruments=data.instruments,
        config=config,
        timestamps=np.asarray(data.timestamps),
    )


def _shifted(result: PortfolioTrainResult, offset: int) -> PortfolioTrainResult:
    """``result`` with its test backtests' windows in bars of the whole data (a fold's run
    counts bars from its slice's first)."""
    import dataclasses

    def shift(bt: PortfolioBacktest) -> PortfolioBacktest:
        return dataclasses.replace(bt, start=bt.start + offset, stop=bt.stop + offset)

    return dataclasses.replace(
        result,
        test=shift(result.test),
        test_flat=shift(result.test_flat),
        test_network=shift(result.test_network),
        test_buy_and_hold=shift(result.test_buy_and_hold),
        model=None,
    )
