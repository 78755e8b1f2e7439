"""The report of a single backtest: metrics.json, plots, index.html and the console summary."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from agents.cli.data import is_synthetic
from agents.cli.metrics_schema import metrics_schema
from gpu_trading_env.core.config import EnvConfig

if TYPE_CHECKING:
    from agents.pipelines.train_result import TrainResult


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
    """The report's table: a header row, then one row per series; columns no series has
    (all n/a) are left out."""
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
    # A column no row has (the stitched walk-forward curves carry no trades) is left out
    # rather than shown as a column of n/a.
    keep = [j for j in range(len(head)) if any(row[j] != "n/a" for row in out[1:])]
    return [[row[j] for j in keep] for row in out]


def _span(md: Any) -> str:
    """``4,000 bars, 2019-01-02 to 2023-06-30`` (dates of the first and last bar)."""
    days = np.datetime_as_string(md.timestamps[[0, -1]], unit="D")
    return f"{md.n_bars:,} bars, {days[0]} to {days[1]}"


def describe_data(data: Any) -> str:
    """The data in words: where it comes from, its instruments, bars and dates."""
    names = ", ".join(data.instruments)
    if is_synthetic(data):
        source = (
            f"SYNTHETIC {data.metadata.get('kind', 'synthetic')} market (seed "
            f"{data.metadata.get('seed')}), the built-in data"
        )
    else:
        files = [Path(p).name for p in data.metadata.get("paths", [])]
        source = ", ".join(files) or "a DataFrame"
    per = [_span(data.instrument(k)) for k in range(data.n_instruments)]
    if data.n_instruments == 1:
        return f"Data: {source}; instrument {names}: {per[0]}."
    each = "; ".join(f"{n}: {p}" for n, p in zip(data.instruments, per, strict=True))
    return f"Data: {source}; {data.n_instruments} instruments ({each})."


def data_fields(data: Any) -> dict[str, Any]:
    """metrics.json's ``data``: :func:`describe_data`'s facts as fields (see ``schema``)."""
    synthetic = is_synthetic(data)
    instruments = []
    for k, name in enumerate(data.instruments):
        md = data.instrument(k)
        start, end = np.datetime_as_string(md.timestamps[[0, -1]], unit="s")
        instruments.append({"name": name, "bars": int(md.n_bars), "start": start, "end": end})
    return {
        "source": "synthetic" if synthetic else data.metadata.get("source", "dataframe"),
        "files": [str(p) for p in data.metadata.get("paths", [])],
        "synthetic_kind": data.metadata.get("kind", "synthetic") if synthetic else None,
        "synthetic_seed": data.metadata.get("seed") if synthetic else None,
        "warmup_bars": int(data.metadata.get("warmup_bars") or 0),
        "instruments": instruments,
        "price_basis": getattr(data, "price_basis", None),
        "description": describe_data(data),
    }


def report_notes(
    data: Any,
    per_year: float,
    args: argparse.Namespace,
    config: EnvConfig,
    evaluated: Any = None,
    trained: list[str] | None = None,
) -> list[str]:
    """The report's notes in words: the data, its warm-up, what was trained and evaluated,
    annualisation, costs.

    :param evaluated: the one-instrument MarketData whose bars the report's figures are of.
    :param trained: the instruments a model was trained on, where one was.
    """
    notes = [describe_data(data)]
    warmup = data.metadata.get("warmup_bars")
    if warmup:
        notes.append(
            f"The first {warmup:,} bars of each instrument were used for feature warm-up "
            "(the features need that much history), so the bars above start after them."
        )
    if trained is not None and evaluated is not None:
        notes.append(
            f"Trained on {', '.join(trained)}; evaluated on {evaluated.instruments[0]} "
            f"({_span(evaluated)})."
        )
    elif evaluated is not None:
        notes.append(f"Evaluated on {evaluated.instruments[0]} ({_span(evaluated)}).")
    how = (
        "given by --bars-per-year"
        if args.bars_per_year is not None
        else "inferred from the evaluated instrument's timestamps"
    )
    notes.append(f"Annualised with {per_year:,.1f} bars a year ({how}).")
    if is_synthetic(data):
        notes.append(
            "Annual figures on the synthetic market compound a planted signal that no real "
            "market offers over a few simulated years; compare them with the known rule and "
            "buy-and-hold beside them, not with real returns."
        )
    notes += [
        "Costs are in every curve marked 'costs in': "
        f"{', '.join(f'{c:g}' for c in config.order_cost_bps)} bps of traded notional per "
        "order type; buy-and-hold pays the market order's cost to buy and to sell.",
        "Returns and drawdowns are fractions of the starting value; Sharpe and Sortino are "
        "annualised with a zero risk-free rate.",
    ]
    return notes


def kept_policy_note(learning: TrainResult) -> str:
    """What the model acts as and why, in words: the run's deployment verdict (its headline,
    then the evidence; agents/pipelines/deployment.py)."""
    deployment = learning.deployment
    text = f"Verdict: {deployment.headline}."
    if deployment.details:
        text += " " + " ".join(deployment.details)
    if deployment.kept != "network" and deployment.trained:
        text += f" The saved model acts as {deployment.kept} on every bar; --no-fallback keeps the network."
    elif not deployment.trained:
        text += f" The saved model acts as {deployment.kept} on every bar; --all-inputs trains a network on every feature."
    return text


def strategy_row_name(result: Any, config: EnvConfig) -> str:
    """The strategy's row, named for its sizing: ``strategy, 8 units`` (``sizing="units"``,
    ``BacktestResult.max_position`` at full exposure) or ``strategy, 1x equity``."""
    if result.max_position is None:
        return f"strategy, {config.leverage:g}x equity"
    return f"strategy, {result.max_position:g} units"


def sizing_note(result: Any) -> str:
    """Why a strategy holding full exposure with ``sizing="units"`` is not buy and hold, in
    words ("" with ``sizing="equity"``)."""
    if result.max_position is None:
        return ""
    units = f"{result.max_position:g}"
    return (
        f"The strategy holds the env's positions: full exposure is a fixed {units} units "
        "(sizing='units': the capital over the median close of these bars, or --env "
        f"max_position), which earns {units} times the price change; buy and hold invests all "
        "the capital at the first close and grows with the price. With --env sizing=equity "
        "full exposure is leverage x equity, and at leverage 1 it tracks buy and hold."
    )


def ruin_note(result: Any) -> str:
    """The ruin of a backtest in words (``BacktestResult.ruined_at_bar``), or "" without one."""
    if result.ruined_at_bar is None:
        return ""
    day = np.datetime_as_string(result.timestamps[result.ruined_at_bar], unit="m")
    return (
        f"RUINED at bar {result.ruined_at_bar} ({day}): the value fell to "
        f"{result.ruin_value:+.2%} of the capital there; the backtest stops trading and its "
        "equity is held at 0 from that bar (total return -100%)."
    )


def single_lead(deployed: str, result: Any, rule: Any = None, window: str = "out of sample") -> str:
    """The report's first sentence (``reports.report.lead_sentence``) of a one-instrument
    backtest: ``deployed`` beside flat (unless it is flat), buy-and-hold and the known rule."""
    from gpu_trading_env.reports.report import FLAT_FIGURES, lead_sentence

    against = {
        "flat": None if deployed.startswith("flat") else FLAT_FIGURES,
        "buy-and-hold": result.benchmark.to_dict(),
        "known rule": None if rule is None else rule.strategy.to_dict(),
    }
    return lead_sentence(deployed, result.strategy.to_dict(), against, window=window)


def _with_known_rule(
    rule: Any, rows: list[tuple[str, dict[str, Any]]], metrics: dict[str, Any]
) -> dict[str, Any]:
    """Add the known rule's row and metrics (where the market has a rule) to ``rows`` and
    ``metrics``; returns its value curve by legend, for the equity plots (empty without one)."""
    if rule is None:
        return {}
    from agents.pipelines.backtest_policies import RULE_EXPOSURE

    metrics["known_rule"] = {"strategy": rule.strategy.to_dict(), "exposure": RULE_EXPOSURE}
    rows.append((f"known rule ({RULE_EXPOSURE:g} exposure)", rule.strategy.to_dict()))
    return {f"known rule, costs in (Sharpe {rule.strategy.sharpe:.2f})": rule.equity}


def _plot_backtest(
    result: Any, out: Path, title: str, synthetic: bool, curves: dict[str, Any]
) -> list[tuple[str, str]]:
    """Write the value curves (linear and log scale, ``curves`` beside the strategy's) and the
    exposure held; returns the (file name, caption) of each image."""
    from gpu_trading_env.reports.report import plot_equity, plot_position

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
    return images


def _plot_learning(learning: TrainResult, out: Path) -> dict[str, Any]:
    """Write learning_curve.png (mean episode return by env step, the snapshots' evaluations,
    the one selected); returns metrics.json's ``learning_curve``."""
    from gpu_trading_env.reports.report import plot_learning_curve

    curve = learning.curve
    steps, rets = zip(*curve, strict=True) if curve else ((), ())
    plot_learning_curve(
        np.array(steps),
        np.array(rets),
        out / "learning_curve.png",
        evals=learning.evals.to_dict(),
        selected=learning.selected_step,
    )
    return {
        "timesteps": list(steps),
        "mean_episode_return": list(rets),
        "evaluations": learning.evals.to_dict(),
        "selected_step": learning.selected_step,
    }


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
    learning: TrainResult | None = None,
    heading: str = "out-of-sample",
    evaluated: Any = None,
    trained: list[str] | None = None,
    deployed: str = "",
    window: str = "out of sample",
) -> None:
    """Write ``out``'s report of ``result`` and print its summary, both opening with
    :func:`single_lead`.

    :param heading: what the evaluated bars are to the strategy, e.g. ``out-of-sample`` for a
        trained model's test window, ``backtest`` for a fixed rule.
    :param evaluated: the one-instrument MarketData ``result`` is a backtest of.
    :param trained: the instruments a model was trained on, where one was.
    :param deployed: the policy backtested, in a few words (``learning``'s deployment's where
        it is given).
    :param window: the evaluated bars in words, for the first sentence.
    """
    from gpu_trading_env.reports.report import write_html, write_json

    synthetic = is_synthetic(data)
    out.mkdir(parents=True, exist_ok=True)
    metrics = {
        **result.to_dict(),
        "synthetic_data": synthetic,
        "bars_per_year": per_year,
        "data": data_fields(data),
        **extra,
    }
    rows = [
        (strategy_row_name(result, config), result.strategy.to_dict()),
        ("buy and hold, all capital", result.benchmark.to_dict()),
        ("buy and hold, all capital, no costs", result.frictionless_buy_and_hold.to_dict()),
    ]
    curves = _with_known_rule(rule, rows, metrics)
    images = _plot_backtest(result, out, title, synthetic, curves)
    if learning is not None and learning.selected_step is not None:
        metrics["learning_curve"] = _plot_learning(learning, out)
        images.append(("learning_curve.png", "Learning curve and greedy-policy evaluations"))
    metrics["schema"] = metrics_schema(metrics)
    write_json(metrics, out / "metrics.json")
    notes = report_notes(data, per_year, args, config, evaluated=evaluated, trained=trained)
    if learning is not None:
        notes.insert(0, kept_policy_note(learning))
    ruin, sizing = ruin_note(result), sizing_note(result)
    notes = [ruin] * bool(ruin) + notes + [sizing] * bool(sizing)
    if learning is not None:
        deployed = learning.deployment.policy
    lead = single_lead(deployed, result, rule, window)
    page = write_html(out, title, notes, results_table(rows), images, lead=lead)
    print(lead)
    if learning is not None:
        print(f"verdict: {learning.deployment.headline}")
    print(f"{heading} ({result.instrument}, {result.strategy.n_bars} bars, costs in):")
    for line in summary_lines(rows):
        print(line)
    if ruin:
        print(f"  {ruin}")
    if sizing and "rule" in extra:  # a rule held at full exposure reads as buy and hold
        print(f"  {sizing}")
    if is_synthetic(data):
        print("  (synthetic data)")
    print(f"report: {page}  (metrics: {out / 'metrics.json'})")
