"""Does the regime market's edge become learnable with a fitted regime filter as an input?

``benchmarks/regime_learnability.py`` found that the forward filter with parameters fitted by EM
on the training bars reaches 0.79 of the true filter's out-of-sample Sharpe, while regressions
on the 51 features find nothing. This script measures the next step: the zoo's runs
(``agents.pipelines.zoo.run_one``, every ``train`` default) with two inputs appended to the 51
features, both from a 3-state Gaussian filter fitted by EM on the run's training bars alone and
run forward over every bar (bar ``t`` uses bars <= t):

- ``regime_expected_return``: the filter's forecast of the next log return, ``sum_k p_k mu_k``;
- ``regime_expected_volatility``: its forecast of the next bar's volatility, ``sum_k p_k sigma_k``;

each z-scored with the training bars' mean and standard deviation and clipped as the features
are. Each market and seed runs twice, with and without them, on the same bars; the table gives
the agent's out-of-sample Sharpe over the reference's and whether the network was kept. The
markets without regimes show what the inputs cost where they carry nothing.

    python benchmarks/regime_features_lab.py --device cuda --markets regime builtin gbm_flat
    python benchmarks/regime_features_lab.py --device cpu --seeds 0 1   # the CPU budget
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from regime_learnability import fit_hmm

from agents.pipelines.zoo import MARKETS_BY_NAME, run_one
from gpu_trading_env.data.features import CLIP
from gpu_trading_env.data.market_data import MarketData
from gpu_trading_env.data.synthetic import regime_filter_expected_return

NAMES = ("regime_expected_return", "regime_expected_volatility")


def _joined(train: MarketData, test: MarketData, features: np.ndarray) -> MarketData:
    """One instrument's training and test bars as one series (the filter runs over both)."""
    return MarketData(
        features=features,
        **{k: np.r_[getattr(train, k), getattr(test, k)] for k in ("open", "high", "low", "close")},
        volume=np.r_[train.volume, test.volume],
        timestamps=np.r_[train.timestamps, test.timestamps],
        instrument_offsets=[0, train.n_bars + test.n_bars],
        instruments=train.instruments,
        feature_names=train.feature_names,
        metadata=train.metadata,
    )


def with_regime_filter(train: MarketData, test: MarketData) -> tuple[MarketData, MarketData]:
    """``train`` and ``test`` with the two filter inputs appended (see the module doc)."""
    if train.n_instruments != 1 or test.n_instruments != 1:
        raise ValueError("the lab's filter inputs are for one instrument (the zoo's markets)")
    close = np.asarray(train.close, dtype=np.float64)
    fit = fit_hmm(np.log(close[1:] / close[:-1]))
    persistence = float(np.clip(np.diag(fit["trans"]).mean(), 0.0, 0.9999))
    both = _joined(train, test, np.r_[train.features, test.features])
    cols = np.stack(
        [
            regime_filter_expected_return(both, fit["mus"], fit["sigmas"], persistence),
            regime_filter_expected_return(both, fit["sigmas"], fit["sigmas"], persistence),
        ],
        axis=1,
    )
    n = train.n_bars
    mean, sd = cols[:n].mean(axis=0), cols[:n].std(axis=0)
    z = np.clip((cols - mean) / np.where(sd > 0, sd, 1.0), -CLIP, CLIP)
    out = []
    for part, rows in ((train, slice(0, n)), (test, slice(n, None))):
        out.append(
            MarketData(
                features=np.c_[part.features, z[rows]].astype(np.float32),
                open=part.open,
                high=part.high,
                low=part.low,
                close=part.close,
                volume=part.volume,
                timestamps=part.timestamps,
                instrument_offsets=part.instrument_offsets,
                instruments=part.instruments,
                feature_names=(*part.feature_names, *NAMES),
                metadata={
                    **part.metadata,
                    "regime_filter": {k: v.tolist() for k, v in fit.items()},
                },
            )
        )
    return out[0], out[1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--device", default="cpu")
    p.add_argument("--markets", nargs="+", default=["regime", "builtin", "gbm_flat"])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--out", default=None, help="a JSON file for every run's row")
    args = p.parse_args()
    for m in args.markets:
        if m not in MARKETS_BY_NAME:
            p.error(f"--markets {m!r} is invalid: allowed are {sorted(MARKETS_BY_NAME)}")
    rows = []
    print(
        f"{'market':16s} {'seed':>4s} {'inputs':>8s} {'ratio':>6s} {'network':>8s} {'kept':>10s} {'s':>5s}"
    )
    for market in args.markets:
        for seed in args.seeds:
            for label, inputs in (("51", None), ("51 + 2", with_regime_filter)):
                row = run_one(market, seed, args.device, inputs=inputs)
                row["inputs"] = label
                rows.append(row)
                ratio = row["sharpe_ratio"]
                net = row["network_sharpe_ratio"]
                print(
                    f"{market:16s} {seed:4d} {label:>8s} "
                    f"{'n/a' if ratio is None else f'{ratio:6.2f}':>6s} "
                    f"{'n/a' if net is None else f'{net:8.2f}':>8s} {row['kept']:>10s} "
                    f"{row['seconds']:5.0f}",
                    flush=True,
                )
    for market in args.markets:
        for label in ("51", "51 + 2"):
            mine = [r for r in rows if r["market"] == market and r["inputs"] == label]
            ratios = [r["sharpe_ratio"] for r in mine if r["sharpe_ratio"] is not None]
            nets = [
                r["network_sharpe_ratio"] for r in mine if r["network_sharpe_ratio"] is not None
            ]
            ret = np.mean([r["agent"]["total_return"] for r in mine])
            print(
                f"{market:16s} {label:>8s}: agent / reference "
                f"{np.mean(ratios) if ratios else float('nan'):+.2f}, network alone "
                f"{np.mean(nets) if nets else float('nan'):+.2f}, mean return {ret:+.1%}, "
                f"kept {sum(r['kept'] == 'network' for r in mine)} of {len(mine)}"
            )
    if args.out:
        Path(args.out).write_text(json.dumps(rows, default=float))


if __name__ == "__main__":
    main()
