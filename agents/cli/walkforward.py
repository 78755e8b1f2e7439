"""``gpu-trading-env walkforward``: rolling folds, seeds, and the stitched out-of-sample report;
on several instruments (:func:`_walkforward_portfolio`), train's run of several on each fold."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from agents.cli.data import is_synthetic, load_data, per_year_of, portfolio_data_of, runs_portfolio
from agents.cli.metrics_schema import PORTFOLIO_WALKFORWARD_KEYS
from agents.cli.options import UsageError
from agents.cli.report import (
    PortfolioPage,
    describe_data,
    report_notes,
    results_table,
    summary_lines,
    write_portfolio_page,
)
from agents.cli.run_folder import claim_out
from agents.cli.train import WALKFORWARD_CPU_TIMESTEPS, check_portfolio_options, train_settings
from agents.pipelines.deployment import resolution_text
from agents.pipelines.train_config import TrainConfig

if TYPE_CHECKING:
    from agents.pipelines.walkforward_result import WalkForwardFold, WalkForwardResult


def default_test_bars(n_bars: int, folds: int) -> int:
    """Bars of each test window where neither window's length is given: the second half of the
    bars split into ``folds`` windows, so that the first fold trains on the first half (long
    enough for ``train``'s own tests on years of daily bars) and later folds on more."""
    return max((int(n_bars) - int(n_bars) // 2) // max(int(folds), 1), 1)


def fold_verdicts(folds: list[WalkForwardFold]) -> list[str]:
    """One line per fold and seed: the test window, the policy deployed and why, its
    out-of-sample return beside its baseline's and buy-and-hold's."""
    lines = []
    for f in folds:
        for s in f.seeds:
            lines.append(
                f"Fold {f.fold + 1} ({f.test['start'][:10]} to {f.test['end'][:10]}), "
                f"seed {s['seed']}: {s['verdict']}; out of sample "
                f"{100 * s['strategy']['total_return']:+.1f}% against {s['baseline']}'s "
                f"{100 * s['baseline_strategy']['total_return']:+.1f}% and buy-and-hold's "
                f"{100 * f.buy_and_hold['total_return']:+.1f}%."
            )
            if s.get("detectable_edge"):
                lines[-1] += " " + _resolution_clause(s)
    return lines


def walkforward_lead(res: WalkForwardResult) -> str:
    """The report's first sentence (``reports.report.lead_sentence``): what the folds deployed,
    and the stitched out-of-sample figures beside flat, buy-and-hold and the known rule."""
    from gpu_trading_env.reports.report import FLAT_FIGURES, lead_sentence

    kept = [s["kept"] for f in res.folds for s in f.seeds]
    networks = kept.count("network")
    if networks == len(kept):
        deployed = f"a network in all {len(kept)} fold runs"
    elif networks == 0:
        deployed = f"no network ({', '.join(sorted(set(kept)))}) in all {len(kept)} fold runs"
    else:
        deployed = f"a network in {networks} of {len(kept)} fold runs, else a baseline"
    agg = res.aggregate
    against = {
        "flat": FLAT_FIGURES,
        "buy-and-hold": agg["buy_and_hold"],
        "known rule": agg.get("rule"),
    }
    return lead_sentence(deployed, agg["ensemble"], against)


def _resolution_clause(seed: dict[str, Any]) -> str:
    """The fold's gate resolution (train's: a network the out-of-sample check turned down
    passed it) and its PBO, in a few words."""
    edge, pbo = seed["detectable_edge"], seed.get("overfitting_probability") or {}
    passed = seed["kept"] == "network" or seed["deployment"]["outcome"] == "not_confirmed"
    text = resolution_text(edge, "network" if passed else seed["kept"], seed["baseline"])
    shown = "not computable" if pbo.get("pbo") is None else f"{pbo['pbo']:.2f}"
    return f"{text} Probability of backtest overfitting: {shown}."


def _test_bars(args: argparse.Namespace, one: Any) -> int | None:
    """The test windows' length (``default_test_bars`` where neither window's length is given),
    the folds' windows checked before any training; raises UsageError naming the options."""
    test_bars = args.test_bars
    if test_bars is None and args.train_bars is None:
        test_bars = default_test_bars(one.n_bars, args.folds)
    try:
        one.walk_forward(args.folds, args.train_bars, test_bars, expanding=not args.rolling)
    except ValueError as exc:
        raise UsageError(f"{exc}: pass fewer --folds or smaller --train-bars/--test-bars") from None
    return test_bars


def _stitched_curves(res: WalkForwardResult, label: str) -> dict[str, Any]:
    """The stitched out-of-sample value curves by legend (Sharpe in it), the known rule's where
    the market has one."""
    st = res.stitched
    agg = res.aggregate
    curves = {
        f"{label}, costs in (Sharpe {agg['ensemble']['sharpe']:.2f})": st.ensemble,
        f"buy and hold, costs in (Sharpe {agg['buy_and_hold']['sharpe']:.2f})": st.buy_and_hold,
        f"random policy, costs in (Sharpe {agg['random']['sharpe']:.2f})": st.random,
    }
    if st.rule is not None:
        curves[f"known rule, costs in (Sharpe {agg['rule']['sharpe']:.2f})"] = st.rule
    return curves


def _plot_stitched(
    res: WalkForwardResult,
    curves: dict[str, Any],
    out: Path,
    title: str,
    synthetic: bool,
    seed: int,
) -> list[tuple[str, str]]:
    """Write the stitched value curves (linear and log scale) and the exposure of ``seed``;
    returns the (file name, caption) of each image."""
    from gpu_trading_env.reports.report import plot_curves, plot_position

    st = res.stitched
    images = []
    for log_scale, name in ((False, "equity_curve.png"), (True, "equity_curve_log.png")):
        plot_curves(
            st.timestamps,
            curves,
            out / name,
            title,
            log_scale=log_scale,
            synthetic=synthetic,
            boundaries=st.boundaries,
        )
        images.append(
            (
                name,
                f"Stitched out-of-sample value and drawdown ({'log' if log_scale else 'linear'} scale); dotted lines start folds",
            )
        )
    plot_position(
        st.timestamps,
        st.exposure,
        out / "position.png",
        f"Exposure held, seed {seed}",
        synthetic=synthetic,
    )
    images.append(("position.png", f"Exposure held out of sample (seed {seed})"))
    return images


def _plot_folds(res: WalkForwardResult, out: Path, synthetic: bool) -> list[tuple[str, str]]:
    """Write each fold's out-of-sample returns (folds.png) and, for each fold that trained a
    network, the first such seed's learning curve (folds numbered from 1, as in the text);
    returns the (file name, caption) of each image."""
    from gpu_trading_env.reports.report import plot_folds, plot_learning_curve

    bars = []
    for f in res.folds:
        row = {f"GpuDQN seed {s['seed']}": 100 * s["strategy"]["total_return"] for s in f.seeds}
        row["buy and hold"] = 100 * f.buy_and_hold["total_return"]
        row["random"] = 100 * f.random["total_return"]
        if f.rule is not None:
            row["known rule"] = 100 * f.rule["total_return"]
        bars.append(row)
    plot_folds(bars, out / "folds.png", synthetic=synthetic)
    images = [("folds.png", "Total return of each fold's out-of-sample window, costs in")]
    for f in res.folds:
        # The first seed that trained a network: no plot of a network that was never trained.
        trained = [s for s in f.seeds if s["selected_step"] is not None]
        if not trained:
            continue
        s0 = trained[0]
        steps, rets = zip(*s0["learning_curve"], strict=True) if s0["learning_curve"] else ((), ())
        name = f"learning_curve_fold{f.fold + 1}.png"
        plot_learning_curve(
            np.array(steps),
            np.array(rets),
            out / name,
            evals=s0["evaluations"],
            selected=s0["selected_step"],
            title=f"Fold {f.fold + 1}, seed {s0['seed']}: learning curve",
        )
        images.append(
            (name, f"Fold {f.fold + 1}: training curve, validation and out-of-sample Sharpe")
        )
    return images


def _metrics(
    res: WalkForwardResult, args: argparse.Namespace, one: Any, synthetic: bool, per_year: float
) -> dict[str, Any]:
    """metrics.json's content: the aggregate, the folds (their JSON records), the settings of
    the run and the ``schema`` (what each key holds, the figures' units)."""
    from agents.cli.metrics_schema import WALKFORWARD_KEYS, metrics_schema

    metrics = {
        "instrument": one.instruments[0],
        "synthetic_data": synthetic,
        "bars_per_year": per_year,
        "costs_included": True,
        "aggregate": res.aggregate,
        "sharpe_vs_buy_and_hold": res.sharpe_vs_buy_and_hold,
        "beats_buy_and_hold_every_fold": res.beats_buy_and_hold_every_fold,
        "detectable_edge": None if res.detectable_edge is None else res.detectable_edge.to_dict(),
        "folds": [f.to_dict() for f in res.folds],
        "settings": {
            **res.settings,
            "folds": args.folds,
            "train_bars": res.folds[0].train["bars"],
            "test_bars": res.folds[0].test["bars"],
            "expanding": not args.rolling,
            "confirm_out_of_sample": res.confirm,
            "seeds": args.seeds,
            "warm_start": args.warm_start,
            "env": {k: str(v) for k, v in asdict(args.config).items()},
        },
    }
    return {**metrics, "schema": metrics_schema(metrics, WALKFORWARD_KEYS)}


def _result_rows(label: str, agg: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The results table's (series name, metrics) rows: the seeds' ensemble, each seed, the
    baselines and the known rule where the market has one."""
    rows = [(f"{label}", agg["ensemble"])]
    rows += [(f"GpuDQN seed {s}", m) for s, m in agg["seeds"].items()]
    rows += [("buy and hold", agg["buy_and_hold"]), ("random policy", agg["random"])]
    if "rule" in agg:
        from agents.pipelines.backtest_policies import RULE_EXPOSURE

        rows.append((f"known rule ({RULE_EXPOSURE:g} exposure)", agg["rule"]))
    return rows


def _notes(
    res: WalkForwardResult,
    data: Any,
    per_year: float,
    args: argparse.Namespace,
    settings: TrainConfig,
) -> list[str]:
    """The report's notes: each fold's verdict, the data, how the folds trained and the Sharpe
    difference to buy-and-hold with its interval."""
    ci = res.sharpe_vs_buy_and_hold
    return (
        fold_verdicts(res.folds)
        + report_notes(data, per_year, args, args.config)
        + [
            f"{args.folds} folds, {'rolling' if args.rolling else 'expanding'} training windows; each trains from {'the previous fold (warm start)' if args.warm_start else 'scratch'} "
            f"for {settings.timesteps} env steps per seed; the model kept is the one with the best "
            f"Sharpe on the last {settings.val_fraction:.0%} of its training window (validation), "
            "never the out-of-sample window"
            + (
                "; a fold deploys a network only where the previous fold's network beat its "
                "baseline on that fold's test bars, in return and in Sharpe at the one-sided "
                "20% level (--no-confirm turns this off)."
                if res.confirm
                else "; every network train would deploy is deployed (--no-confirm)."
            ),
            f"Sharpe of the seed-averaged strategy minus buy-and-hold's: {ci['difference']:+.2f}, "
            f"{ci['level']:.0%} block-bootstrap interval [{ci['low']:+.2f}, {ci['high']:+.2f}] "
            f"(blocks of {ci['block']} bars, {ci['n_boot']} resamples, costs in both).",
        ]
        + _overall_resolution(res)
    )


def _overall_resolution(res: WalkForwardResult) -> list[str]:
    """What the stitched test bars could resolve: the smallest Sharpe over flat detected with
    80% power at the interval's one-sided level (over buy-and-hold it depends on how the two
    correlate)."""
    edge = res.detectable_edge
    if edge is None:
        return []
    return [
        f"Resolution of the out-of-sample record: an edge of Sharpe {edge.sharpe:.2f} over flat "
        f"is detected {edge.power:.0%} of the time in its {edge.bars} stitched test bars (at "
        f"the {100 * edge.level:g}% one-sided level); a smaller one may go unseen."
    ]


def _print_summary(
    res: WalkForwardResult,
    instrument: str,
    args: argparse.Namespace,
    rows: list[tuple[str, dict[str, Any]]],
    synthetic: bool,
) -> None:
    """The console summary: the results rows, the Sharpe difference, each fold's verdict."""
    ci = res.sharpe_vs_buy_and_hold
    print(f"walk-forward out-of-sample ({instrument}, {args.folds} folds, costs in):")
    for line in summary_lines(rows):
        print(line)
    print(
        f"  Sharpe minus buy-and-hold: {ci['difference']:+.2f}, {ci['level']:.0%} interval "
        f"[{ci['low']:+.2f}, {ci['high']:+.2f}]"
    )
    for line in fold_verdicts(res.folds):
        print(f"  {line}")
    beats = res.beats_buy_and_hold_every_fold
    print(
        f"  beats buy-and-hold in every fold: {', '.join(f'seed {s}: {b}' for s, b in beats.items())}"
    )
    if synthetic:
        print("  (synthetic data)")


def cmd_walkforward(args: argparse.Namespace) -> int:
    """``walkforward``: train and test every fold and seed, write the stitched report; exit 0."""
    from agents.pipelines.walkforward import walk_forward
    from gpu_trading_env.reports.report import write_html, write_json

    data = load_data(args)
    if runs_portfolio(args, data):
        return _walkforward_portfolio(args, data)
    one = data.instrument(args.instrument or 0)
    per_year = per_year_of(args, one)
    test_bars = _test_bars(args, one)
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
        confirm=not args.no_confirm,
    )
    synthetic = is_synthetic(data)
    n_seeds = len(args.seeds)
    label = "GpuDQN, 1 seed" if n_seeds == 1 else f"GpuDQN, mean of {n_seeds} seeds' returns"
    title = f"Walk-forward, out-of-sample windows stitched: {one.instruments[0]}"
    # The results first: a report that fails after hours of training keeps its folder and them.
    write_json(_metrics(res, args, one, synthetic, per_year), out / "metrics.json")
    curves = _stitched_curves(res, label)
    images = _plot_stitched(res, curves, out, title, synthetic, args.seeds[0])
    images += _plot_folds(res, out, synthetic)
    rows = _result_rows(label, res.aggregate)
    notes = _notes(res, data, per_year, args, settings)
    lead = walkforward_lead(res)
    page = write_html(out, title, notes, results_table(rows), images, lead=lead)
    print(lead)
    _print_summary(res, one.instruments[0], args, rows, synthetic)
    print(f"report: {page}  (metrics: {out / 'metrics.json'})")
    return 0


# ------------------------------------------------------------------ several instruments


def _refuse_portfolio_options(args: argparse.Namespace) -> None:
    """Refuse the options of one instrument's walkforward and train (one line naming it)."""
    for option, given in (("--warm-start", args.warm_start), ("--no-confirm", args.no_confirm)):
        if given:
            raise UsageError(
                f"{option} is invalid with walkforward --portfolio (several instruments): every "
                "instrument is traded, each fold trains from scratch and deploys what train "
                "deploys; leave it out"
            )
    check_portfolio_options(args)


def fold_lines(result: Any) -> list[str]:
    """One line per fold and seed: the test window, the policy kept and why, its test return
    beside equal-weight buy-and-hold's of the same bars."""
    lines = []
    for run in result.runs:
        f = run.fold.to_dict(result.timestamps)
        r = run.result
        lines.append(
            f"Fold {run.fold.index + 1} (test {f['test_dates'][0][:10]} to "
            f"{f['test_dates'][1][:10]}), seed {run.seed}: {r.reason}; out of sample "
            f"{100 * r.test.total_return:+.1f}% against flat's 0.0% and equal-weight "
            f"buy-and-hold's {100 * r.test_buy_and_hold.total_return:+.1f}%."
        )
    return lines


def _verdict(result: Any) -> str:
    kept = sum(r.result.kept == "network" for r in result.runs)
    returns = ", ".join(f"{100 * bt.total_return:+.1f}%" for bt in result.stitched.values())
    # A fold keeps its baseline, flat unless an instrument's training bars held a drift.
    base = "flat" if all(r.result.kept in ("network", "flat") for r in result.runs) else "baselines"
    which = (
        f"no edge found: {base} in all {len(result.runs)} (fold, seed) pairs"
        if kept == 0
        else f"a network kept in {kept} of {len(result.runs)} (fold, seed) pairs, {base} in the others"
    )
    return (
        f"{which}; stitched out of sample {returns} (seed by seed) against equal-weight "
        f"buy-and-hold's {100 * result.buy_and_hold.total_return:+.1f}% and flat's 0.0%"
    )


def _walkforward_portfolio(args: argparse.Namespace, data: Any) -> int:
    """walkforward on several instruments: train's run of several instruments on each fold
    (every fold's windows checked first), each fold's kept policy and its reason, the test
    windows stitched per seed beside flat and equal-weight buy-and-hold; exit 0."""
    from agents.pipelines.portfolio_train_config import (
        PortfolioTrainConfig,
        PortfolioTrainConfigError,
    )
    from agents.pipelines.portfolio_walkforward import (
        check_folds,
        portfolio_folds,
        walk_forward_portfolio,
    )

    _refuse_portfolio_options(args)
    pdata = portfolio_data_of(args, data)
    options = argparse.Namespace(**{**vars(args), "train_fraction": None})
    try:
        config = PortfolioTrainConfig.from_options(options, env=args.config)
    except PortfolioTrainConfigError as exc:
        raise UsageError(str(exc)) from None
    try:
        folds = portfolio_folds(
            pdata.n_bars, args.folds, args.train_bars, args.test_bars, args.rolling
        )
        check_folds(pdata, config, folds)
    except ValueError as exc:
        raise UsageError(f"{exc} (--folds, --train-bars, --test-bars)") from None
    out = claim_out(args, "walkforward")

    def done(run: Any) -> None:
        r = run.result
        print(
            f"fold {run.fold.index + 1}/{len(folds)} seed {run.seed}: {r.kept} kept, test "
            f"{100 * r.test.total_return:+.1f}% ({r.seconds:.1f} s)",
            flush=True,
        )

    result = walk_forward_portfolio(
        pdata,
        config,
        folds,
        args.seeds,
        device=args.device,
        per_year=args.bars_per_year,
        on_run=done,
    )
    rows = [(f"seed {s} (stitched)", bt) for s, bt in result.stitched.items()]
    rows += [("flat", result.flat), ("equal-weight buy and hold", result.buy_and_hold)]
    first = args.seeds[0]
    page = PortfolioPage(
        title=f"Walk-forward portfolio of {pdata.n_instruments} instruments, out-of-sample",
        heading=f"the {len(folds)} test windows stitched",
        verdict=_verdict(result),
        rows=rows,
        weights=(result.stitched[int(first)], f"seed {first}, stitched"),
        notes=[describe_data(data), *fold_lines(result)],
        metrics=result.to_dict(),
        capital=float(config.env.initial_capital),
        synthetic=is_synthetic(data),
        deployed=f"a network in {sum(r.result.kept == 'network' for r in result.runs)} of "
        f"{len(result.runs)} (fold, seed) runs, else the baseline (seed {first})",
        keys=PORTFOLIO_WALKFORWARD_KEYS,
    )
    write_portfolio_page(out, page)
    return 0
