"""The report of a single backtest: metrics.json, plots, index.html and the console summary."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import numpy as np

from agents.cli.data import is_synthetic
from gpu_trading_env.core.config import EnvConfig


def ratio_text(x: float | None) -> str:
    """A Sharpe or Sortino ratio for people: ``+inf`` (a Sortino with no losing bar, see
    ``gpu_trading_env.reports.metrics``) reads "no loss", a missing one "n/a"."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if math.isinf(x):
        return "no loss" if x > 0 else "-inf"
    return f"{x:.2f}"


def format_metrics(m: dict[str, Any]) -> str:
    return (
        f"return {m['total_return']:+8.2%}  annual {m['annual_return']:+8.2%}  "
        f"Sharpe {ratio_text(m['sharpe']):>6s}  Sortino {ratio_text(m['sortino']):>7s}  "
        f"max drawdown {m['max_drawdown']:6.2%}"
    )


def summary_lines(rows: list[tuple[str, dict[str, Any]]]) -> list[str]:
    width = max(len(name) for name, _ in rows)
    return [f"  {name:{width}s}  {format_metrics(m)}" for name, m in rows]


def results_table(rows: list[tuple[str, dict[str, Any]]]) -> list[list[Any]]:
    head = [
        "series",
        "costs in",
        "total return",
        "annual return",
        "Sharpe",
        "Sortino",
        "max drawdown",
        "turnover / yr",
        "costs paid",
        "exposure",
        "hit rate",
    ]
    out: list[list[Any]] = [head]
    for name, m in rows:

        def pct(x: Any) -> str:
            return "n/a" if x is None else f"{x:+.2%}"

        out.append(
            [
                name,
                "yes" if m["costs_included"] else "no",
                pct(m["total_return"]),
                pct(m["annual_return"]),
                ratio_text(m["sharpe"]),
                ratio_text(m["sortino"]),
                f"{m['max_drawdown']:.2%}",
                "n/a" if m.get("turnover") is None else f"{m['turnover']:.1f}",
                "n/a" if m.get("costs_paid") is None else f"{m['costs_paid']:.2%}",
                "n/a" if m.get("exposure") is None else f"{m['exposure']:.2f}",
                "n/a" if m.get("hit_rate") is None else f"{m['hit_rate']:.1%}",
            ]
        )
    return out


def report_notes(
    data: Any, per_year: float, args: argparse.Namespace, config: EnvConfig
) -> list[str]:
    src = (
        f"Data: SYNTHETIC ({data.metadata.get('kind', 'synthetic')} market, seed "
        f"{data.metadata.get('seed')}), {data!r}"
        if is_synthetic(data)
        else f"Data: {', '.join(map(str, args.data))}, {data!r}"
    )
    how = (
        "given by --bars-per-year"
        if args.bars_per_year is not None
        else "inferred from the timestamps"
    )
    return [
        src,
        f"Annualised with {per_year:.1f} bars a year ({how}).",
        f"Costs are in every curve marked 'costs in': {config.order_cost_bps} bps of traded "
        "notional per order type; buy-and-hold pays the market order's cost to buy and to sell.",
        "Returns and drawdowns are fractions of the starting value; Sharpe and Sortino are "
        "annualised with a zero risk-free rate.",
    ]


def single_report(
    out: Path,
    result: Any,
    data: Any,
    args: argparse.Namespace,
    config: EnvConfig,
    per_year: float,
    title: str,
    extra: dict[str, Any],
    rule: Any = None,
    learning: dict[str, Any] | None = None,
) -> None:
    from gpu_trading_env.reports.report import (
        plot_equity,
        plot_learning_curve,
        plot_position,
        write_html,
        write_json,
    )

    synthetic = is_synthetic(data)
    out.mkdir(parents=True, exist_ok=True)
    metrics = {**result.to_dict(), "synthetic_data": synthetic, "bars_per_year": per_year, **extra}
    rows = [
        ("strategy", result.strategy.to_dict()),
        ("buy and hold", result.benchmark.to_dict()),
        ("buy and hold, frictionless", result.frictionless_buy_and_hold.to_dict()),
    ]
    curves = {}
    if rule is not None:
        from agents.walkforward import RULE_EXPOSURE

        metrics["known_rule"] = {"strategy": rule.strategy.to_dict(), "exposure": RULE_EXPOSURE}
        rows.append((f"known rule ({RULE_EXPOSURE:g} exposure)", rule.strategy.to_dict()))
        curves[f"known rule, costs in (Sharpe {rule.strategy.sharpe:.2f})"] = rule.equity
    images = []
    for log_scale, name in ((False, "equity_curve.png"), (True, "equity_curve_log.png")):
        plot_equity(
            result, out / name, title, log_scale=log_scale, synthetic=synthetic, extra=curves
        )
        images.append(
            (name, f"{title}: value and drawdown, {'log' if log_scale else 'linear'} scale")
        )
    plot_position(result.timestamps, result.exposure, out / "position.png", synthetic=synthetic)
    images.append(("position.png", "Exposure held after each bar's trade"))
    if learning is not None:
        curve = learning["curve"]
        steps, rets = zip(*curve, strict=True) if curve else ((), ())
        plot_learning_curve(
            np.array(steps),
            np.array(rets),
            out / "learning_curve.png",
            evals=learning["evals"],
            selected=learning["selected_step"],
        )
        images.append(("learning_curve.png", "Learning curve and greedy-policy evaluations"))
        metrics["learning_curve"] = {
            "timesteps": list(steps),
            "mean_episode_return": list(rets),
            "evaluations": learning["evals"],
            "selected_step": learning["selected_step"],
        }
    write_json(metrics, out / "metrics.json")
    page = write_html(
        out, title, report_notes(data, per_year, args, config), results_table(rows), images
    )
    print(f"out-of-sample ({result.instrument}, {result.strategy.n_bars} bars, costs in):")
    for line in summary_lines(rows):
        print(line)
    if is_synthetic(data):
        print("  (synthetic data)")
    print(f"report: {page}  (metrics: {out / 'metrics.json'})")
