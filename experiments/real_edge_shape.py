"""Where in its training bars does a kept feature predict, and does its own rule keep the edge?

For each ``walkforward`` fold of a real series (the command's defaults: 6 expanding folds, the
first trained on half the bars), the input selection of ``train`` on the fold's training bars,
then for each kept feature: the one-sided p-value of its slope on the next return having the
sign of its slope over all training bars, in each third of them; and the feature's sign rule
(hold ``sign(slope * feature)``, the slope fitted on the training bars) on the fold's test bars,
its return after a cost a trade, beside buy-and-hold's. No network is trained.

    python3 -m experiments.real_edge_shape --series sp500 msft
"""

from __future__ import annotations

import argparse
import math

import numpy as np


def slope_z(x: np.ndarray, y: np.ndarray) -> float:
    """Signed HC3-robust z-statistic of the slope of ``y`` on ``x``, the selection's test."""
    from gpu_trading_env.reports.significance import regression_slopes_test

    test = regression_slopes_test(x[:, None], y)
    cx = x - x.mean()
    return math.copysign(math.sqrt(test["statistic"]), float(cx @ (y - y.mean())))


def _month(t: np.datetime64) -> str:
    return str(np.datetime_as_string(t, unit="M"))


def edge_shape(series: str, parts: int, cost: float) -> list[str]:
    """One line per (fold, kept feature) of ``series`` (module doc)."""
    from agents.cli.walkforward import default_test_bars
    from agents.pipelines.input_selection import REGIME_INPUT, select_inputs
    from gpu_trading_env.data.real_series import load_real_series

    data = load_real_series(series).instrument(0)
    folds = data.walk_forward(6, None, default_test_bars(data.n_bars, 6), expanding=True)
    lines = []
    for i, (train, test) in enumerate(folds):
        selection = select_inputs(train)
        kept = [k for k in selection.kept if k != REGIME_INPUT]
        if not kept:
            lines.append(f"{series} fold {i}: no feature kept (p {selection.p_value:.4f})")
        x, y = train.features_and_next_returns()
        xt, yt = test.features_and_next_returns()
        for name in kept:
            j = list(train.feature_names).index(name)
            sign = math.copysign(1.0, slope_z(x[:, j], y))
            ps = [
                0.5 * math.erfc(sign * slope_z(x[rows, j], y[rows]) / math.sqrt(2.0))
                for rows in np.array_split(np.arange(len(y)), parts)
            ]
            position = np.sign(sign * xt[:, j])
            trades = np.abs(np.diff(np.r_[0.0, position]))
            rule = float(np.prod(1.0 + position * np.expm1(yt) - cost * trades) - 1.0)
            lines.append(
                f"{series} fold {i} ({_month(test.timestamps[0])} to {_month(test.timestamps[-1])})"
                f" {name}: p in thirds "
                + ", ".join(f"{p:.3f}" for p in ps)
                + f"; its sign rule on the test bars {rule:+.1%}, buy-and-hold "
                f"{math.expm1(float(yt.sum())):+.1%}"
            )
    return lines


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--series", nargs="+", default=["sp500", "msft"])
    p.add_argument("--parts", type=int, default=3, help="parts of the training bars")
    p.add_argument("--cost", type=float, default=1e-4, help="cost a trade, fraction of value")
    args = p.parse_args(argv)
    for series in args.series:
        for line in edge_shape(series, args.parts, args.cost):
            print(line, flush=True)


if __name__ == "__main__":
    main()
