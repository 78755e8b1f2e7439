"""The report of a run: metrics.json, plots, index.html and the console summary; of one
instrument (:func:`single_report`) or of several (:func:`write_portfolio_page`: each
instrument's weight over time and its costs beside the equity curves)."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from agents.cli.data import is_synthetic
from agents.cli.metrics_schema import PORTFOLIO_TRAIN_KEYS, PORTFOLIO_UNITS, metrics_schema
from gpu_trading_env.core.config import EnvConfig

if TYPE_CHECKING:
    from agents.pipelines.portfolio_backtest import PortfolioBacktest
    from agents.pipelines.portfolio_training import PortfolioTrainResult
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
    # Which close the figures are of matters only where the file had a choice of two.
    basis = str(getattr(data, "price_basis", None) or "")
    prices = f" Prices {basis}." if basis.startswith("adjusted") or "unused" in basis else ""
    if data.n_instruments == 1:
        return f"Data: {source}; instrument {names}: {per[0]}.{prices}"
    each = "; ".join(f"{n}: {p}" for n, p in zip(data.instruments, per, strict=True))
    return f"Data: {source}; {data.n_instruments} instruments ({each}).{prices}"


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


# Up to this many instruments each weight is a line; above, one row of a heat map each.
LINE_INSTRUMENTS = 10


def _metrics(bt: PortfolioBacktest, initial_capital: float) -> dict[str, Any]:
    """The single env's figures (``reports.metrics.curve_metrics``) of a portfolio backtest."""
    from gpu_trading_env.reports.metrics import curve_metrics

    gross = np.abs(bt.weights).sum(axis=1)
    return curve_metrics(
        bt.equity,
        bt.per_year,
        costs_included=True,
        exposure=gross,
        costs=bt.costs.sum(axis=1) / initial_capital,
    ).to_dict()


def series(result: PortfolioTrainResult) -> list[tuple[str, PortfolioBacktest]]:
    """The test bars' curves of the report, by legend: the kept policy first."""
    rows = [(f"kept ({result.kept})", result.test)]
    if result.kept != "network":
        rows.append(("network (not kept)", result.test_network))
    else:
        rows.append(("flat", result.test_flat))
    if result.kept == "network" and result.baseline and result.baseline.name != "flat":
        rows.append((f"baseline ({result.baseline.words()})", result.test_baseline))
    rows.append(("equal-weight buy and hold", result.test_buy_and_hold))
    return rows


def plot_weights(bt: PortfolioBacktest, path: Path, title: str) -> None:
    """Each instrument's weight (``position · close / value``) after every step: lines for up to
    :data:`LINE_INSTRUMENTS` instruments, else a heat map of instruments by bar."""
    from gpu_trading_env.reports.report import _pyplot, save_figure

    plt = _pyplot()
    ts = bt.timestamps[1:]
    k = len(bt.instruments)
    if k <= LINE_INSTRUMENTS:
        fig, ax = plt.subplots(figsize=(9, 3.4))
        for j, name in enumerate(bt.instruments):
            ax.step(ts, bt.weights[:, j], where="post", lw=1.0, label=name)
        ax.axhline(0.0, color="k", lw=0.5)
        ax.set_ylabel("weight\n(notional / value)")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
        ax.grid(alpha=0.3)
    else:
        fig, ax = plt.subplots(figsize=(9, 0.5 + 0.18 * k))
        bound = max(float(np.abs(bt.weights).max()), 1e-12)
        image = ax.imshow(
            bt.weights.T, aspect="auto", cmap="RdBu", vmin=-bound, vmax=bound, interpolation="none"
        )
        ax.set_yticks(range(k), bt.instruments, fontsize=6)
        ax.set_xlabel("step of the test bars")
        fig.colorbar(image, ax=ax, label="weight")
    ax.set_title(title)
    fig.autofmt_xdate()
    save_figure(fig, path, dpi=90, bbox_inches="tight")


def plot_costs(rows: list[tuple[str, PortfolioBacktest]], path: Path, capital: float) -> None:
    """The costs each instrument paid over the test bars, bps of the initial capital, one bar
    group per instrument and a bar per series."""
    from gpu_trading_env.reports.report import _pyplot, save_figure

    plt = _pyplot()
    names = rows[0][1].instruments
    x = np.arange(len(names))
    width = 0.8 / len(rows)
    fig, ax = plt.subplots(figsize=(9, 3.2))
    for i, (label, bt) in enumerate(rows):
        ax.bar(x + i * width, bt.costs_by_instrument / capital * 1e4, width, label=label)
    ax.set_xticks(x + 0.4 - width / 2, names, rotation=90 if len(names) > 10 else 0, fontsize=8)
    ax.set_ylabel("costs (bps of initial capital)")
    ax.set_title("Costs by instrument")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    save_figure(fig, path, dpi=90, bbox_inches="tight")


@dataclass(frozen=True)
class PortfolioPage:
    """What a portfolio report shows: ``rows`` (legend, backtest) of the same bars, the first
    the policy reported; ``weights`` the backtest whose weights are drawn and its caption;
    ``verdict`` the line after the first sentence (``deployed``, the policy of ``rows[0]`` in
    a few words, and its figures on ``window`` beside the other rows'); ``metrics``
    metrics.json before the table's figures."""

    title: str
    heading: str
    verdict: str
    rows: list[tuple[str, PortfolioBacktest]]
    weights: tuple[PortfolioBacktest, str]
    notes: list[str]
    metrics: dict[str, Any]
    capital: float
    synthetic: bool = False
    deployed: str = ""
    window: str = "out of sample"
    keys: dict[str, str] | None = None  # metrics.json's top-level keys in words: its ``schema``


def portfolio_lead(page: PortfolioPage, figures: list[tuple[str, dict[str, Any]]]) -> str:
    """The report's first sentence (``reports.report.lead_sentence``): ``figures[0]``'s policy
    beside flat (its figures where no row is flat) and equal-weight buy-and-hold."""
    from gpu_trading_env.reports.report import FLAT_FIGURES, lead_sentence

    deployed = page.deployed or figures[0][0]
    rows = dict(figures[1:])
    against = {
        "flat": None if deployed.startswith("flat") else rows.get("flat", FLAT_FIGURES),
        "equal-weight buy-and-hold": rows.get("equal-weight buy and hold"),
    }
    return lead_sentence(deployed, figures[0][1], against, window=page.window)


def write_portfolio_page(out: Path, page: PortfolioPage) -> Path:
    """Write ``out``'s report page (``index.html``), its plots and ``metrics.json`` (with the
    table's figures), print the verdict and the summary; returns the page."""
    from gpu_trading_env.reports.report import plot_curves, write_html, write_json

    figures = [(label, _metrics(bt, page.capital)) for label, bt in page.rows]
    metrics = {**page.metrics, "figures": dict(figures), "notes": page.notes}
    if page.keys is not None:
        metrics["schema"] = metrics_schema(metrics, page.keys, PORTFOLIO_UNITS)
    write_json(metrics, out / "metrics.json")
    curves = {f"{label}, costs in (Sharpe {bt.sharpe:.2f})": bt.equity for label, bt in page.rows}
    images = []
    for log_scale, name in ((False, "equity_curve.png"), (True, "equity_curve_log.png")):
        plot_curves(
            page.rows[0][1].timestamps,
            curves,
            out / name,
            page.title,
            log_scale=log_scale,
            synthetic=page.synthetic,
        )
        images.append((name, f"Value and drawdown, {'log' if log_scale else 'linear'} scale"))
    shown, which = page.weights
    plot_weights(shown, out / "positions.png", f"Weight of each instrument, {which}")
    images.append(("positions.png", f"Each instrument's weight after every step, {which}"))
    plot_costs(page.rows[:2], out / "costs.png", page.capital)
    images.append(("costs.png", "Costs by instrument"))
    lead = portfolio_lead(page, figures)
    notes = [f"Verdict: {page.verdict}.", *page.notes]
    html = write_html(out, page.title, notes, results_table(figures), images, lead=lead)
    print(lead)
    print(f"verdict: {page.verdict}")
    bt = page.rows[0][1]
    print(f"{page.heading} ({bt.n_bars} bars, {len(bt.instruments)} instruments, costs in):")
    for line in summary_lines(figures):
        print(line)
    print(f"report: {html}  (metrics: {out / 'metrics.json'})")
    return html


def portfolio_report(
    out: Path, result: PortfolioTrainResult, notes: list[str], synthetic: bool = False
) -> Path:
    """The report of a ``train`` run of several instruments on its test bars (:func:`write_portfolio_page`).

    :param notes: lines on the data (after the verdict, which comes first).
    """
    network = result.kept == "network"
    shown = result.test if network else result.test_network
    which = "kept network" if network else f"network (not kept: {result.kept} is)"
    page = PortfolioPage(
        title=f"GpuDQN portfolio of {len(result.instruments)} instruments, out-of-sample",
        heading="out-of-sample",
        verdict=result.reason,
        rows=series(result),
        weights=(shown, which),
        notes=[*(result.deployment.details if result.deployment else ()), *notes],
        metrics=result.to_dict(),
        capital=float(result.config.env.initial_capital),
        synthetic=synthetic,
        deployed="a network" if network else f"{result.kept} (no validated edge)",
        keys=PORTFOLIO_TRAIN_KEYS,
    )
    return write_portfolio_page(out, page)
