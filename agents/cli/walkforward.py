"""``gpu-trading-env walkforward``: rolling folds, seeds, and the stitched out-of-sample report."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import Any

import numpy as np

from agents.cli.data import is_synthetic, load_data, per_year_of
from agents.cli.options import UsageError
from agents.cli.report import report_notes, results_table, summary_lines
from agents.cli.run_folder import claim_out
from agents.cli.train import WALKFORWARD_CPU_TIMESTEPS, train_settings


def default_test_bars(n_bars: int, folds: int) -> int:
    """Bars of each test window where neither window's length is given: the second half of the
    bars split into ``folds`` windows, so that the first fold trains on the first half (long
    enough for ``train``'s own tests on years of daily bars) and later folds on more."""
    return max((int(n_bars) - int(n_bars) // 2) // max(int(folds), 1), 1)


def fold_verdicts(folds: list[dict[str, Any]]) -> list[str]:
    """One line per fold and seed: the test window, the policy deployed and why, its
    out-of-sample return beside its baseline's and buy-and-hold's."""
    lines = []
    for f in folds:
        for s in f["seeds"]:
            lines.append(
                f"Fold {f['fold'] + 1} ({f['test']['start'][:10]} to {f['test']['end'][:10]}), "
                f"seed {s['seed']}: {s['verdict']}; out of sample "
                f"{100 * s['strategy']['total_return']:+.1f}% against {s['baseline']}'s "
                f"{100 * s['baseline_strategy']['total_return']:+.1f}% and buy-and-hold's "
                f"{100 * f['buy_and_hold']['total_return']:+.1f}%."
            )
    return lines


def cmd_walkforward(args: argparse.Namespace) -> int:
    from agents.pipelines.walkforward import walk_forward
    from gpu_trading_env.reports.report import (
        plot_curves,
        plot_folds,
        plot_learning_curve,
        plot_position,
        write_html,
        write_json,
    )

    data = load_data(args)
    one = data.instrument(args.instrument or 0)
    per_year = per_year_of(args, one)
    test_bars = args.test_bars
    if test_bars is None and args.train_bars is None:
        test_bars = default_test_bars(one.n_bars, args.folds)
    try:  # the windows, checked before any training
        one.walk_forward(args.folds, args.train_bars, test_bars, expanding=not args.rolling)
    except ValueError as exc:
        raise UsageError(f"{exc}: pass fewer --folds or smaller --train-bars/--test-bars") from None
    settings = train_settings(args, args.device, WALKFORWARD_CPU_TIMESTEPS)
    out = claim_out(args, "walkforward")
    res = walk_forward(
        one,
        args.config,
        settings,
        folds=args.folds,
        train_bars=args.train_bars,
        test_bars=test_bars,
        seeds=args.seeds,
        warm_start=args.warm_start,
        per_year=per_year,
        expanding=not args.rolling,
    )
    synthetic = is_synthetic(data)
    st = res["stitched"]
    agg = res["aggregate"]
    n_seeds = len(args.seeds)
    label = "GpuDQN, 1 seed" if n_seeds == 1 else f"GpuDQN, mean of {n_seeds} seeds' returns"
    curves = {
        f"{label}, costs in (Sharpe {agg['ensemble']['sharpe']:.2f})": st["ensemble"],
        f"buy and hold, costs in (Sharpe {agg['buy_and_hold']['sharpe']:.2f})": st["buy_and_hold"],
        f"random policy, costs in (Sharpe {agg['random']['sharpe']:.2f})": st["random"],
    }
    if "rule" in st:
        curves[f"known rule, costs in (Sharpe {agg['rule']['sharpe']:.2f})"] = st["rule"]
    images = []
    title = f"Walk-forward, out-of-sample windows stitched: {one.instruments[0]}"
    for log_scale, name in ((False, "equity_curve.png"), (True, "equity_curve_log.png")):
        plot_curves(
            st["timestamps"],
            curves,
            out / name,
            title,
            log_scale=log_scale,
            synthetic=synthetic,
            boundaries=st["boundaries"],
        )
        images.append(
            (
                name,
                f"Stitched out-of-sample value and drawdown ({'log' if log_scale else 'linear'} scale); dotted lines start folds",
            )
        )
    plot_position(
        st["timestamps"],
        st["exposure"],
        out / "position.png",
        f"Exposure held, seed {args.seeds[0]}",
        synthetic=synthetic,
    )
    images.append(("position.png", f"Exposure held out of sample (seed {args.seeds[0]})"))
    bars = []
    for f in res["folds"]:
        row = {f"GpuDQN seed {s['seed']}": 100 * s["strategy"]["total_return"] for s in f["seeds"]}
        row["buy and hold"] = 100 * f["buy_and_hold"]["total_return"]
        row["random"] = 100 * f["random"]["total_return"]
        if f["rule"] is not None:
            row["known rule"] = 100 * f["rule"]["total_return"]
        bars.append(row)
    plot_folds(bars, out / "folds.png", synthetic=synthetic)
    images.append(("folds.png", "Total return of each fold's out-of-sample window, costs in"))
    for f in res["folds"]:
        s0 = f["seeds"][0]
        steps, rets = zip(*s0["learning_curve"], strict=True) if s0["learning_curve"] else ((), ())
        name = f"learning_curve_fold{f['fold']}.png"
        plot_learning_curve(
            np.array(steps),
            np.array(rets),
            out / name,
            evals=s0["evaluations"],
            selected=s0["selected_step"],
            title=f"Fold {f['fold']}, seed {s0['seed']}: learning curve",
        )
        images.append(
            (name, f"Fold {f['fold']}: training curve, validation and out-of-sample Sharpe")
        )
    ci = res["sharpe_vs_buy_and_hold"]
    metrics = {
        "instrument": one.instruments[0],
        "synthetic_data": synthetic,
        "bars_per_year": per_year,
        "costs_included": True,
        "aggregate": agg,
        "sharpe_vs_buy_and_hold": ci,
        "beats_buy_and_hold_every_fold": res["beats_buy_and_hold_every_fold"],
        "folds": [{k: v for k, v in f.items() if not k.startswith("_")} for f in res["folds"]],
        "settings": {
            **res["settings"],
            "folds": args.folds,
            "train_bars": res["folds"][0]["train"]["bars"],
            "test_bars": res["folds"][0]["test"]["bars"],
            "expanding": not args.rolling,
            "seeds": args.seeds,
            "warm_start": args.warm_start,
            "env": {k: str(v) for k, v in asdict(args.config).items()},
        },
    }
    write_json(metrics, out / "metrics.json")
    rows = [(f"{label}", agg["ensemble"])]
    rows += [(f"GpuDQN seed {s}", m) for s, m in agg["seeds"].items()]
    rows += [("buy and hold", agg["buy_and_hold"]), ("random policy", agg["random"])]
    if "rule" in agg:
        from agents.pipelines.backtest_policies import RULE_EXPOSURE

        rows.append((f"known rule ({RULE_EXPOSURE:g} exposure)", agg["rule"]))
    notes = (
        fold_verdicts(res["folds"])
        + report_notes(data, per_year, args, args.config)
        + [
            f"{args.folds} folds, {'rolling' if args.rolling else 'expanding'} training windows; each trains from {'the previous fold (warm start)' if args.warm_start else 'scratch'} "
            f"for {settings.timesteps} env steps per seed; the model kept is the one with the best "
            f"Sharpe on the last {settings.val_fraction:.0%} of its training window (validation), "
            "never the out-of-sample window.",
            f"Sharpe of the seed-averaged strategy minus buy-and-hold's: {ci['difference']:+.2f}, "
            f"{ci['level']:.0%} block-bootstrap interval [{ci['low']:+.2f}, {ci['high']:+.2f}] "
            f"(blocks of {ci['block']} bars, {ci['n_boot']} resamples, costs in both).",
        ]
    )
    page = write_html(out, title, notes, results_table(rows), images)
    print(f"walk-forward out-of-sample ({one.instruments[0]}, {args.folds} folds, costs in):")
    for line in summary_lines(rows):
        print(line)
    print(
        f"  Sharpe minus buy-and-hold: {ci['difference']:+.2f}, {ci['level']:.0%} interval "
        f"[{ci['low']:+.2f}, {ci['high']:+.2f}]"
    )
    for line in fold_verdicts(res["folds"]):
        print(f"  {line}")
    beats = res["beats_buy_and_hold_every_fold"]
    print(
        f"  beats buy-and-hold in every fold: {', '.join(f'seed {s}: {b}' for s, b in beats.items())}"
    )
    if synthetic:
        print("  (synthetic data)")
    print(f"report: {page}  (metrics: {out / 'metrics.json'})")
    return 0
