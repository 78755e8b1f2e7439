"""Does the regime market's edge become learnable with a fitted regime filter as an input?

``experiments/regime_learnability.py`` found that the forward filter with parameters fitted by EM
on the training bars reaches 0.79 of the true filter's out-of-sample Sharpe, while regressions
on the 51 features find nothing. This script measures the next step: the zoo's runs
(``agents.pipelines.zoo.run_one``, every ``train`` default) with inputs appended to the 51
features, all from a 3-state Gaussian HMM fitted by EM on the run's training bars alone and run
forward over every bar (row ``t`` uses bars <= t; the fitted transition matrix, not only its
diagonal). The variants (``--variants``):

- ``er``: the filter's forecast of the next log return, ``sum_k p_k mu_k``;
- ``er_vol``: that, and its forecast of the next bar's volatility, ``sum_k p_k sigma_k``;
- ``probs``: the forecast, and the predicted probability of each regime (ordered by fitted mean).

Forecasts are z-scored with the training bars' mean and standard deviation and clipped as the
features are; probabilities are given as they are, in [0, 1]. The default inputs are the zoo's own
rows (``gpu-trading-env zoo``), not run again here. Runs go to ``--workers`` processes, the first
alone (it fills the compilation caches), as the zoo's do.

    python3 -m experiments.regime_features_lab --device cuda --markets regime --variants er er_vol probs
    python3 -m experiments.regime_features_lab --device cpu --seeds 0 1 --workers 1   # the CPU budget
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing as mp
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np

from agents.pipelines.zoo import MARKETS_BY_NAME, run_one
from gpu_trading_env.data.features import CLIP
from gpu_trading_env.data.market_data import MarketData
from gpu_trading_env.data.regime_filter import fit_gaussian_hmm
from gpu_trading_env.data.regime_filter import predicted_regimes as forward_filter

VARIANTS = ("er", "er_vol", "probs")


def with_regime_filter(
    train: MarketData, test: MarketData, variant: str = "er"
) -> tuple[MarketData, MarketData]:
    """``train`` and ``test`` with the variant's filter inputs appended (see the module doc)."""
    if variant not in VARIANTS:
        raise ValueError(f"variant = {variant!r} is invalid: allowed are {VARIANTS}")
    if train.n_instruments != 1 or test.n_instruments != 1:
        raise ValueError("the lab's filter inputs are for one instrument (the zoo's markets)")
    close = np.asarray(train.close, dtype=np.float64)
    fit = fit_gaussian_hmm(np.log(close[1:] / close[:-1]))
    mus, sigmas = fit.mus, fit.sigmas
    all_close = np.r_[close, np.asarray(test.close, dtype=np.float64)]
    probs = forward_filter(np.r_[0.0, np.diff(np.log(all_close))], fit)
    forecasts = [probs @ mus]
    names = ["regime_expected_return"]
    if variant == "er_vol":
        forecasts.append(probs @ sigmas)
        names.append("regime_expected_volatility")
    cols = np.stack(forecasts, axis=1)
    n = train.n_bars
    mean, sd = cols[:n].mean(axis=0), cols[:n].std(axis=0)
    z = np.clip((cols - mean) / np.where(sd > 0, sd, 1.0), -CLIP, CLIP)
    if variant == "probs":
        z = np.c_[z, probs]
        names += [f"regime_{i}_probability" for i in range(len(mus))]
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
                feature_names=(*part.feature_names, *names),
                metadata={
                    **part.metadata,
                    "regime_filter": fit.to_dict(),
                },
            )
        )
    return out[0], out[1]


def _run(market: str, seed: int, device: str, variant: str) -> dict:
    row = run_one(
        market, seed, device, inputs=functools.partial(with_regime_filter, variant=variant)
    ).to_dict()
    row["inputs"] = variant
    for k in ("evaluations", "learning_curve", "curves"):
        row.pop(k, None)
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--device", default="cpu")
    p.add_argument("--markets", nargs="+", default=["regime"])
    p.add_argument("--variants", nargs="+", default=["er"])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--out", default=None, help="a JSON file for every run's row")
    args = p.parse_args()
    for m in args.markets:
        if m not in MARKETS_BY_NAME:
            p.error(f"--markets {m!r} is invalid: allowed are {sorted(MARKETS_BY_NAME)}")
    for v in args.variants:
        if v not in VARIANTS:
            p.error(f"--variants {v!r} is invalid: allowed are {list(VARIANTS)}")
    if args.workers < 1:
        p.error(f"--workers {args.workers} is invalid: allowed is >= 1")
    jobs = [(m, s, v) for m in args.markets for v in args.variants for s in args.seeds]
    print(
        f"{'market':16s} {'seed':>4s} {'inputs':>8s} {'ratio':>6s} {'network':>8s} {'kept':>10s} {'s':>5s}"
    )
    rows = []

    def show(row: dict) -> None:
        rows.append(row)
        ratio, net = row["sharpe_ratio"], row["network_sharpe_ratio"]
        print(
            f"{row['market']:16s} {row['seed']:4d} {row['inputs']:>8s} "
            f"{'n/a' if ratio is None else f'{ratio:6.2f}':>6s} "
            f"{'n/a' if net is None else f'{net:8.2f}':>8s} {row['kept']:>10s} "
            f"{row['seconds']:5.0f}",
            flush=True,
        )

    if args.workers == 1:
        for job in jobs:
            show(_run(*job[:2], args.device, job[2]))
    else:
        with ProcessPoolExecutor(args.workers, mp_context=mp.get_context("spawn")) as pool:
            show(pool.submit(_run, jobs[0][0], jobs[0][1], args.device, jobs[0][2]).result())
            futures = [pool.submit(_run, m, s, args.device, v) for m, s, v in jobs[1:]]
            for fut in as_completed(futures):
                show(fut.result())
    for market in args.markets:
        for label in args.variants:
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
