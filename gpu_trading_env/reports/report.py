"""The report of a run: labelled PNG plots, ``metrics.json`` and one HTML page linking them.

Plots (matplotlib, Agg backend):

- ``plot_equity``: value / initial capital of the strategy and its benchmarks over time (costs
  in, as the legend says), linear or log scale, with the drawdown below;
- ``plot_position``: the exposure held over time, every bar of a short series, else per period
  with the share of time long, flat and short;
- ``plot_learning_curve``: mean training episode return against env steps, with the greedy
  policy's validation and out-of-sample evaluations on a second axis and the selected point;
- ``plot_folds``: one group of bars per walk-forward fold.

``write_html`` writes ``index.html``: a title, the notes (data source, "synthetic" where it is,
costs, annualisation), a metrics table and every image with its caption.
"""

from __future__ import annotations

import html
import io
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gpu_trading_env.atomic_file import atomic_write_bytes, atomic_write_text
from gpu_trading_env.reports.metrics import drawdown

if TYPE_CHECKING:
    from gpu_trading_env.reports.backtest import BacktestResult

__all__ = [
    "ExposurePeriods",
    "exposure_periods",
    "lead_sentence",
    "plot_curves",
    "plot_equity",
    "plot_folds",
    "plot_learning_curve",
    "plot_position",
    "save_figure",
    "write_html",
    "write_json",
]


# The most words a report's first sentence may have (its verdict; the statistics follow it).
LEAD_WORDS = 30
# Flat's out-of-sample figures: it holds nothing and trades nothing (its Sharpe is 0 / 0).
FLAT_FIGURES: dict[str, Any] = {"total_return": 0.0, "sharpe": None}


def _figure(m: Mapping[str, Any]) -> str:
    """``+2.5% (Sharpe 0.35)``; the Sharpe left out where it is missing (flat's is 0 / 0)."""
    text = f"{float(m['total_return']):+,.1%}"
    sharpe = m.get("sharpe")
    if sharpe is not None and math.isfinite(float(sharpe)):
        text += f" (Sharpe {float(sharpe):.2f})"
    return text


def lead_sentence(
    deployed: str,
    result: Mapping[str, Any],
    against: Mapping[str, Mapping[str, Any] | None],
    *,
    window: str = "out of sample",
) -> str:
    """Every report's first sentence: what was deployed and what it did on ``window`` beside
    each policy of ``against``, e.g. "Deployed a network: out of sample +56.2% (Sharpe 2.01) vs
    flat +0.0%, buy-and-hold +2.5% (Sharpe 0.35), known rule +58.8% (Sharpe 2.06)."

    :param deployed: the deployed policy in a few words ("a network", "flat (no edge found)").
    :param result: its figures: ``total_return`` (fraction of the starting value) and
        ``sharpe`` (annualised, costs in; None where undefined).
    :param against: the comparisons by name, figures as ``result``; None entries are left out
        (no known rule on real data; flat where flat is the deployed policy).
    """
    others = [f"{name} {_figure(m)}" for name, m in against.items() if m is not None]
    text = f"Deployed {deployed}: {window} {_figure(result)}"
    if others:
        text += " vs " + ", ".join(others)
    return text + "."


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(
    fig: Any, path: Path, dates: bool = False, *, right: float = 0.0, below: float = 0.0
) -> None:
    """Margins fixed in inches (``right`` and ``below`` more for a legend outside the axes),
    then the PNG. ``tight_layout`` measures every label by drawing the figure once more before
    saving it, for margins that these figures' fixed sizes and labels make known (wider on the
    right for a twin y axis)."""
    if dates:
        fig.autofmt_xdate()  # tick labels rotated; it sets a bottom margin, overridden below
    right_axis = any(ax.yaxis.get_label_position() == "right" for ax in fig.axes)
    w, h = fig.get_size_inches()
    fig.subplots_adjust(
        left=1.15 / w,
        right=1.0 - ((0.9 if right_axis else 0.25) + right) / w,
        bottom=((1.0 if dates else 0.6) + below) / h,
        top=1.0 - 0.4 / h,
        hspace=0.1,
    )
    save_figure(fig, path, dpi=90)


def save_figure(fig: Any, path: Path, **savefig: Any) -> None:
    """Render ``fig`` (PNG, ``savefig``'s options) in memory, close it, then write the bytes
    with :func:`~gpu_trading_env.atomic_file.atomic_write_bytes`: a failed render or a full
    disk leaves the previous file whole, and a symbolic link at ``path`` is replaced, never
    followed. Every text is drawn as written: a ``$`` in an instrument name from a file must
    not be parsed as TeX (``$\\frac$`` would fail the report after training)."""
    import matplotlib
    from matplotlib.text import Text

    buffer = io.BytesIO()
    try:
        for text in fig.findobj(Text):
            text.set_parse_math(False)
        with matplotlib.rc_context({"text.parse_math": False}):  # tick labels made at draw time
            fig.savefig(buffer, format="png", **savefig)
    finally:
        _pyplot().close(fig)
    atomic_write_bytes(path, buffer.getvalue())


def _suffix(synthetic: bool) -> str:
    return " (synthetic data)" if synthetic else ""


def plot_curves(
    timestamps: np.ndarray,
    curves: Mapping[str, np.ndarray],
    path: Path,
    title: str,
    *,
    log_scale: bool = False,
    synthetic: bool = False,
    boundaries: Sequence[np.datetime64] = (),
) -> None:
    """Equity curves [T] (value / initial capital) over time, and their drawdowns below.

    The first curve is drawn bold; ``boundaries`` are drawn as dotted vertical lines (walk-forward
    fold starts).
    """
    plt = _pyplot()
    fig, (ax, dd) = plt.subplots(
        2, 1, figsize=(9, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1.2]}
    )
    for k, (label, eq) in enumerate(curves.items()):
        eq = np.asarray(eq, dtype=np.float64)
        kw = {"lw": 1.6} if k == 0 else {"lw": 1.0, "alpha": 0.85}
        ax.plot(timestamps, eq, label=label, **kw)
        dd.plot(timestamps, -100.0 * drawdown(eq), **kw)
    for b in boundaries:
        ax.axvline(b, color="grey", ls=":", lw=0.8)
        dd.axvline(b, color="grey", ls=":", lw=0.8)
    if log_scale:
        ax.set_yscale("log")
    ax.set_ylabel("value / initial capital" + (" (log scale)" if log_scale else ""))
    ax.set_title(title + _suffix(synthetic))
    ax.legend(fontsize=8, loc="best")
    ax.grid(alpha=0.3)
    dd.set_ylabel("drawdown (%)")
    dd.set_xlabel("bar timestamp")
    dd.grid(alpha=0.3)
    _save(fig, path, dates=True)


def plot_equity(
    result: BacktestResult,
    path: Path,
    title: str = "Out-of-sample equity",
    *,
    log_scale: bool = False,
    synthetic: bool = False,
    extra: Mapping[str, np.ndarray] | None = None,
) -> None:
    """A backtest's equity beside buy-and-hold (both net of costs) and any ``extra`` curves."""
    curves = {
        f"strategy, costs in (Sharpe {result.strategy.sharpe:.2f})": result.equity,
        f"buy and hold, costs in (Sharpe {result.benchmark.sharpe:.2f})": result.buy_and_hold,
        **(extra or {}),
    }
    plot_curves(
        result.timestamps,
        curves,
        path,
        f"{title}: {result.instrument}",
        log_scale=log_scale,
        synthetic=synthetic,
    )


# Up to this many bars a position plot draws every bar's exposure; above, one value per period.
RAW_POSITION_BARS = 300
# Periods a longer series is grouped into (equal numbers of consecutive bars).
POSITION_PERIODS = 100


@dataclass(frozen=True)
class ExposurePeriods:
    """Exposure grouped into periods of consecutive bars: arrays [P], float64 unless noted.

    ``start``: int64 index of each period's first bar; ``mean``, ``low``, ``high``: the mean,
    least and greatest exposure in it; ``long``, ``flat``, ``short``: the share of its bars
    with exposure > 0, = 0 and < 0 (they sum to 1).
    """

    start: np.ndarray
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray
    long: np.ndarray
    flat: np.ndarray
    short: np.ndarray


def exposure_periods(exposure: np.ndarray, periods: int = POSITION_PERIODS) -> ExposurePeriods:
    """Group ``exposure`` [T] (T >= 1) into ``min(periods, T)`` periods of consecutive bars
    whose lengths differ by at most one."""
    x = np.asarray(exposure, dtype=np.float64)
    if x.ndim != 1 or len(x) == 0:
        raise ValueError(f"exposure must be 1-D with at least one bar, got shape {x.shape}")
    if isinstance(periods, bool) or not isinstance(periods, int) or periods < 1:
        raise ValueError(f"periods = {periods!r} is invalid: allowed is an integer >= 1")
    parts = np.array_split(x, min(periods, len(x)))
    sizes = np.array([len(p) for p in parts])
    return ExposurePeriods(
        start=np.r_[0, np.cumsum(sizes)[:-1]].astype(np.int64),
        mean=np.array([p.mean() for p in parts]),
        low=np.array([p.min() for p in parts]),
        high=np.array([p.max() for p in parts]),
        long=np.array([(p > 0).mean() for p in parts]),
        flat=np.array([(p == 0).mean() for p in parts]),
        short=np.array([(p < 0).mean() for p in parts]),
    )


def plot_position(
    timestamps: np.ndarray,
    exposure: np.ndarray,
    path: Path,
    title: str = "Position held",
    *,
    synthetic: bool = False,
) -> None:
    """Exposure [T-1] (signed notional / value) held from bar t to t+1.

    Up to :data:`RAW_POSITION_BARS` bars: every bar's exposure as a step line. Above, bar by bar
    a policy that changes side every few bars draws a solid band, so the bars are grouped into
    :data:`POSITION_PERIODS` periods (:func:`exposure_periods`): the mean exposure of each as a
    step line over the band of its least to greatest, and below it the share of each period's
    bars spent long, flat and short.
    """
    plt = _pyplot()
    exposure = np.asarray(exposure, dtype=np.float64)
    ts = np.asarray(timestamps)[: len(exposure)]
    if len(exposure) <= RAW_POSITION_BARS:
        fig, ax = plt.subplots(figsize=(9, 2.8))
        ax.step(ts, exposure, where="post", lw=1.0, color="C0", label="each bar")
        share = None
    else:
        fig, (ax, share) = plt.subplots(
            2, 1, figsize=(9, 4.6), sharex=True, gridspec_kw={"height_ratios": [1.6, 1]}
        )
        g = exposure_periods(exposure)
        edges = np.r_[ts[g.start], ts[-1]]  # each period from its first bar to the next's
        bars = len(exposure) // len(g.start)
        low, high, mean = (np.r_[v, v[-1]] for v in (g.low, g.high, g.mean))
        ax.fill_between(edges, low, high, step="post", color="C0", alpha=0.15, lw=0, label="range")
        ax.step(edges, mean, where="post", color="C0", lw=1.4, label=f"mean of ~{bars} bars")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
        bottom = np.zeros(len(g.start) + 1)
        for name, part, color in (
            ("long", g.long, "C2"),
            ("flat", g.flat, "0.75"),
            ("short", g.short, "C3"),
        ):
            top = bottom + np.r_[part, part[-1]]
            share.fill_between(edges, bottom, top, step="post", color=color, lw=0, label=name)
            bottom = top
        share.set_ylim(0.0, 1.0)
        share.set_ylabel("share of bars")
        share.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
        share.set_xlabel("bar timestamp")
    ax.axhline(0.0, color="k", lw=0.5)
    ax.set_ylabel("exposure\n(notional / value)")
    if share is None:
        ax.set_xlabel("bar timestamp")
    ax.set_title(title + _suffix(synthetic))
    ax.grid(alpha=0.3)
    _save(fig, path, dates=True, right=0.0 if share is None else 1.3)


def plot_learning_curve(
    timesteps: np.ndarray,
    returns: np.ndarray,
    path: Path,
    reference: float | None = None,
    *,
    evals: Mapping[str, Sequence[float]] | None = None,
    selected: int | None = None,
    title: str = "Learning curve",
) -> None:
    """Mean training episode return (reward, last 100 episodes) against env steps.

    :param evals: ``{"timesteps": [...], "validation": [...], "test": [...]}``: the greedy
        policy's Sharpe ratio (costs in) on the validation and out-of-sample windows, drawn on a
        second axis.
    :param selected: the env step of the model kept (best validation), marked with a line.
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 4.5))
    if len(timesteps):
        ax.plot(timesteps, returns, color="C0", label="training: mean episode reward (last 100)")
    if reference is not None:
        ax.axhline(reference, color="k", ls="--", lw=0.8, label="known rule, per episode")
    ax.set_xlabel("env steps")
    ax.set_ylabel("episode reward")
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    if evals and len(evals.get("timesteps", [])):
        ax2 = ax.twinx()
        ax2.plot(evals["timesteps"], evals["validation"], "o-", color="C2", ms=3, lw=1)
        ax2.plot(evals["timesteps"], evals["test"], "s--", color="C3", ms=3, lw=1)
        ax2.set_ylabel("greedy policy Sharpe, costs in")
        handles += ax2.get_lines()[-2:]
        labels += ["validation window (selects the model)", "out-of-sample window (not used)"]
    if selected is not None:
        line = ax.axvline(selected, color="C2", ls=":", lw=1)
        handles.append(line)
        labels.append("model kept")
    # Below the axes, not over them: inside, "best" still covered the evaluation marks.
    rows = math.ceil(len(handles) / 2)
    fig.legend(handles, labels, fontsize=8, loc="lower center", ncol=2, frameon=False)
    ax.set_title(title)
    _save(fig, path, below=0.2 * rows + 0.1)


def plot_folds(
    folds: Sequence[Mapping[str, float]],
    path: Path,
    *,
    value: str = "total return, costs in (%)",
    synthetic: bool = False,
) -> None:
    """One group of bars per fold: ``folds[k]`` maps a series name to its value in fold k,
    labelled "fold k + 1" (folds are numbered from 1 in every report)."""
    plt = _pyplot()
    names = list(folds[0]) if folds else []
    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.8 / max(len(names), 1)
    x = np.arange(len(folds))
    for j, name in enumerate(names):
        ax.bar(x + (j - (len(names) - 1) / 2) * width, [f[name] for f in folds], width, label=name)
    ax.axhline(0.0, color="k", lw=0.5)
    ax.set_xticks(x, [f"fold {k + 1}" for k in range(len(folds))])  # 1-based, as the text
    ax.set_ylabel(value)
    ax.set_title("Out-of-sample window of each fold" + _suffix(synthetic))
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    _save(fig, path)


def write_json(obj: Any, path: Path) -> None:
    """``obj`` as strict JSON: NaN and infinite floats (a Sortino with no losing bar is ``inf``)
    are written as ``null``, which every JSON reader accepts (``Infinity`` is not JSON)."""
    text = json.dumps(_finite_or_none(obj), indent=2, default=_jsonable, allow_nan=False)
    atomic_write_text(path, text)


def _finite_or_none(x: Any) -> Any:
    if isinstance(x, float | np.floating):
        return float(x) if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite_or_none(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_finite_or_none(v) for v in x]
    if isinstance(x, np.ndarray) and x.dtype.kind == "f":
        return [_finite_or_none(v) for v in x.tolist()]
    return x


def _jsonable(x: Any) -> Any:
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.floating):
        return float(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    return str(x)


def write_html(
    out: Path,
    title: str,
    notes: Sequence[str],
    table: Sequence[Sequence[Any]],
    images: Sequence[tuple[str, str]],
    *,
    metrics_file: str = "metrics.json",
    lead: str = "",
) -> Path:
    """``out/index.html``: the lead sentence (:func:`lead_sentence`) in bold, the notes, a table
    (first row is the header), images with captions.

    The page needs nothing but the files next to it: no script, no external style sheet.
    """

    def cell(x: Any) -> str:
        return html.escape(f"{x:.4g}" if isinstance(x, float) else str(x))

    rows = []
    for i, row in enumerate(table):
        tag = "th" if i == 0 else "td"
        rows.append("<tr>" + "".join(f"<{tag}>{cell(c)}</{tag}>" for c in row) + "</tr>")
    figures = "\n".join(
        f'<figure><img src="{html.escape(src)}" alt="{html.escape(cap)}">'
        f"<figcaption>{html.escape(cap)}</figcaption></figure>"
        for src, cap in images
    )
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: sans-serif; max-width: 980px; margin: 2em auto; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }}
th, td {{ border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }}
img {{ max-width: 100%; }} figure {{ margin: 1.5em 0; }} figcaption {{ color: #555; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
{f'<p class="lead"><strong>{html.escape(lead)}</strong></p>' if lead else ""}
<ul>{"".join(f"<li>{html.escape(n)}</li>" for n in notes)}</ul>
<table>{"".join(rows)}</table>
<p>All figures: <a href="{html.escape(metrics_file)}">{html.escape(metrics_file)}</a>.</p>
{figures}
</body></html>
"""
    path = out / "index.html"
    atomic_write_text(path, page)
    return path
