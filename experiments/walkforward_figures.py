"""The walk-forward reports in docs/: a daily stock-like series and the planted market.

    python3 -m experiments.walkforward_figures --timesteps 30000 --seeds 0 1
    python3 -m experiments.walkforward_figures --which planted --device cuda --timesteps 8000000

1. ``stock``: a seeded daily series in Yahoo's CSV layout (``Date,Open,High,Low,Close,Adj Close,
   Volume``) on the NYSE calendar of 2012-2023 (weekdays less US federal holidays), GARCH(1,1)
   returns with 8% a year of drift and about 20% volatility: real-looking, with no edge to find.
   It is written to ``runs/walkforward_figures/STOCK.csv`` and read back through the CLI.
2. ``planted``: the built-in synthetic market (hourly bars, a planted AR(1) signal whose known
   rule is drawn beside the agent).

Each run is ``gpu-trading-env walkforward`` itself; the PNGs go to
``docs/figures/walkforward_<name>/`` and the metrics to ``docs/walkforward_<name>.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent


def stock_csv(path: Path, seed: int = 7) -> Path:
    """A daily stock-like series (see the module doc) in Yahoo's layout."""
    from pandas.tseries.holiday import USFederalHolidayCalendar

    days = pd.bdate_range("2012-01-03", "2023-12-29")
    days = days.difference(USFederalHolidayCalendar().holidays("2012-01-01", "2023-12-31"))
    n = len(days)
    rng = np.random.default_rng(seed)
    omega, alpha, beta = 2e-6, 0.08, 0.90  # GARCH(1,1): long-run daily sd ~ 1.4%
    var = omega / (1 - alpha - beta)
    r = np.empty(n)
    eps = rng.standard_t(6, n) / np.sqrt(6 / 4)
    for t in range(n):
        r[t] = 0.08 / 252 + np.sqrt(var) * eps[t]
        var = omega + alpha * (r[t] - 0.08 / 252) ** 2 + beta * var
    close = 40.0 * np.exp(np.cumsum(r))
    gap = rng.normal(0, 0.003, n)
    open_ = np.r_[close[0], close[:-1]] * np.exp(gap)
    span = np.abs(rng.normal(0, 0.008, n))
    high = np.maximum(open_, close) * (1 + span)
    low = np.minimum(open_, close) * (1 - np.abs(rng.normal(0, 0.008, n)))
    df = pd.DataFrame(
        {
            "Date": days.strftime("%Y-%m-%d"),
            "Open": open_.round(4),
            "High": high.round(4),
            "Low": low.round(4),
            "Close": close.round(4),
            "Adj Close": (close * 0.97).round(4),
            "Volume": rng.lognormal(15, 0.4, n).round(),
        }
    )
    # Rounding may push a close a hair outside [low, high].
    df["High"] = df[["Open", "High", "Close"]].max(axis=1)
    df["Low"] = df[["Open", "Low", "Close"]].min(axis=1)
    path.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(path, index=False)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--which", nargs="+", default=["stock", "planted"])
    parser.add_argument("--timesteps", type=int, default=30_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument(
        "--extra", nargs=argparse.REMAINDER, default=[], help="more walkforward options, last"
    )
    args = parser.parse_args()
    from agents import cli

    work = ROOT / "runs" / "walkforward_figures"
    common = [
        "--device",
        args.device,
        "--timesteps",
        str(args.timesteps),
        "--seeds",
        *map(str, args.seeds),
        "--torch-threads",
        str(args.torch_threads),
        "--no-progress",
        *args.extra,
    ]
    runs = {
        "stock": [
            "--data",
            str(stock_csv(work / "STOCK.csv")),
            "--folds",
            "4",
            "--train-bars",
            "1000",
            "--test-bars",
            "250",
        ],
        "planted": ["--folds", "4", "--train-bars", "4000", "--test-bars", "1000"],
    }
    for name in args.which:
        out = work / name
        if out.exists():
            shutil.rmtree(out)
        code = cli.main(["walkforward", *runs[name], *common, "--out", str(out)])
        if code != 0:
            raise SystemExit(code)
        figures = ROOT / "docs" / "figures" / f"walkforward_{name}"
        if figures.exists():
            shutil.rmtree(figures)
        figures.mkdir(parents=True)
        for png in out.glob("*.png"):
            shutil.copy(png, figures / png.name)
        shutil.copy(out / "index.html", figures / "index.html")
        metrics = json.loads((out / "metrics.json").read_text())
        (figures / "metrics.json").write_text(json.dumps(metrics, indent=2))
        (ROOT / "docs" / f"walkforward_{name}.json").write_text(json.dumps(metrics, indent=2))


if __name__ == "__main__":
    main()
