"""The report of a portfolio run (``train --portfolio``): the verdict first, the test bars'
figures of the kept policy beside the network, flat and equal-weight buy-and-hold, and the
plots: equity against flat and buy-and-hold, each instrument's weight over time, the costs by
instrument."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from agents.cli.report import results_table, summary_lines
from agents.pipelines.portfolio_backtest import PortfolioBacktest
from gpu_trading_env.reports.report import save_figure

if TYPE_CHECKING:
    from agents.pipelines.portfolio_training import PortfolioTrainResult

# Up to this many instruments each weight is a line; above, one row of a heat map each.
LINE_INSTRUMENTS = 10


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


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
    """The report of a ``train --portfolio`` run on its test bars (:func:`write_portfolio_page`).

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
    )
    return write_portfolio_page(out, page)
