"""The market zoo's report: per-market summaries over seeds, the CSV of every run, the table, a
figure per market (Sharpe bars, one seed's out-of-sample value curve and learning curve), and
the HTML page (``write_report``)."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agents.pipelines.zoo import (
    MARKETS,
    MARKETS_BY_NAME,
    REAL_MARKETS,
    REAL_RUN_SHORTFALL,
    SMALL,
)
from agents.pipelines.zoo_result import (
    FailedZooRun,
    SeedStats,
    ZooMarketSummary,
    ZooRow,
    ZooRun,
)
from gpu_trading_env.atomic_file import atomic_write
from gpu_trading_env.reports.report import save_figure

__all__ = ["SMOKE_TEST_NOTE", "summarize", "summary_table", "write_report", "zoo_lead"]

# What a ``--small`` zoo is, said first on the console and in the report.
SMOKE_TEST_NOTE = (
    f"--small is a smoke test of the pipeline "
    f"({int(SMALL.train_args[SMALL.train_args.index('--timesteps') + 1]):,} env steps a run), "
    "not a learning result: "
    "the targets are the full zoo's and are not expected to be met at this budget"
)


def summarize(rows: Sequence[ZooRow]) -> list[ZooMarketSummary]:
    """Per market, in the suites' order: means and spreads over seeds, and whether the target
    holds."""
    out = []
    for market in (*MARKETS, *REAL_MARKETS):
        mine = [r for r in rows if r.market == market.name and isinstance(r, ZooRun)]
        failed = [r for r in rows if r.market == market.name and isinstance(r, FailedZooRun)]
        if not mine and not failed:
            continue
        ret = SeedStats.of([r.agent.total_return for r in mine])
        bh = SeedStats.of([r.buy_and_hold.total_return for r in mine])
        ratio = SeedStats.of([r.sharpe_ratio for r in mine])
        claims = sum(r.edge_over_flat_claimed for r in mine)
        base = SeedStats.of([r.chosen_baseline.total_return for r in mine])
        shortfall = [r.agent.total_return - r.chosen_baseline.total_return for r in mine]
        measure, threshold = market.target
        if not mine or failed:
            passed = None
        elif measure == "sharpe_ratio":
            passed = ratio.mean is not None and ratio.mean >= threshold
        elif measure == "return":
            passed = ret.mean >= threshold and claims <= max(1, len(mine) // 5)
        elif measure == "mean_return":
            passed = ret.mean >= threshold
        elif measure == "baseline_return":
            passed = ret.mean >= base.mean + threshold and min(shortfall) >= -REAL_RUN_SHORTFALL
        else:
            passed = bh.mean > 0 and ret.mean >= threshold * bh.mean
        out.append(
            ZooMarketSummary(
                market=market.name,
                title=market.title,
                target=(measure, threshold),
                seeds=len(mine),
                failed_runs=len(failed),
                agent_sharpe=SeedStats.of([r.agent.sharpe for r in mine]),
                reference_sharpe=SeedStats.of([r.reference.sharpe for r in mine]),
                buy_and_hold_sharpe=SeedStats.of([r.buy_and_hold.sharpe for r in mine]),
                sharpe_ratio=ratio,
                network_sharpe_ratio=SeedStats.of([r.network_sharpe_ratio for r in mine]),
                agent_return=ret,
                reference_return=SeedStats.of([r.reference.total_return for r in mine]),
                buy_and_hold_return=bh,
                baseline_return=base,
                baseline_sharpe=SeedStats.of([r.chosen_baseline.sharpe for r in mine]),
                return_minus_baseline=SeedStats.of(shortfall),
                baselines_chosen={
                    b: sum(r.baseline == b for r in mine)
                    for b in sorted({r.baseline for r in mine})
                },
                agent_turnover=SeedStats.of([r.agent.turnover for r in mine]),
                agent_costs=SeedStats.of([r.agent.costs_paid for r in mine]),
                edge_over_flat_claims=int(claims),
                kept_network=int(sum(r.kept == "network" for r in mine)),
                seconds=SeedStats.of([r.seconds for r in mine]),
                passed=passed,
            )
        )
    return out


# ------------------------------------------------------------------ report

_CSV_FIELDS = [
    "market", "seed", "kept", "agent_sharpe", "reference", "reference_sharpe", "sharpe_ratio",
    "network_sharpe_ratio", "agent_return", "reference_return", "buy_and_hold_return",
    "agent_turnover", "agent_costs", "suite", "chosen_baseline", "baseline_return",
    "baseline_sharpe", "return_vs_baseline", "return_vs_baseline_low", "return_vs_baseline_high",
    "vs_baseline_p", "vs_flat_p", "vs_flat_low", "vs_buy_and_hold_p",
    "validation_p_vs_flat", "validation_p_vs_baseline", "validation_adjusted_sharpe",
    "features_predict_p", "beat_flat_by", "inputs_kept", "regime_filter_p", "verdict", "seconds",
    "error",
]  # fmt: skip


def _csv_row(r: ZooRow) -> dict[str, Any]:
    if isinstance(r, FailedZooRun):
        return {"market": r.market, "seed": r.seed, "error": r.error}
    gate, inputs = r.gate, r.inputs or {}
    # None where no network was trained (the selection kept no input).
    vs_flat = gate["network_minus_flat_validation_sharpe"] or {}
    vs_base = gate["network_minus_baseline_validation_sharpe"] or {}
    return {
        "market": r.market,
        "seed": r.seed,
        "kept": r.kept,
        "agent_sharpe": r.agent.sharpe,
        "reference": r.reference_name,
        "reference_sharpe": r.reference.sharpe,
        "sharpe_ratio": r.sharpe_ratio,
        "network_sharpe_ratio": r.network_sharpe_ratio,
        "agent_return": r.agent.total_return,
        "reference_return": r.reference.total_return,
        "buy_and_hold_return": r.buy_and_hold.total_return,
        "agent_turnover": r.agent.turnover,
        "agent_costs": r.agent.costs_paid,
        "suite": r.suite,
        "chosen_baseline": r.baseline,
        "baseline_return": r.chosen_baseline.total_return,
        "baseline_sharpe": r.chosen_baseline.sharpe,
        "return_vs_baseline": r.return_vs_baseline["difference"],
        "return_vs_baseline_low": r.return_vs_baseline["low"],
        "return_vs_baseline_high": r.return_vs_baseline["high"],
        "vs_baseline_p": r.vs_baseline["p_value"],
        "vs_flat_p": r.vs_flat["p_value"],
        "vs_flat_low": r.vs_flat["low"],
        "vs_buy_and_hold_p": r.vs_buy_and_hold["p_value"],
        "validation_p_vs_flat": vs_flat.get("p_value"),
        "validation_p_vs_baseline": vs_base.get("p_value"),
        "validation_adjusted_sharpe": vs_flat.get("adjusted"),
        "verdict": r.deployment.headline,
        "features_predict_p": (gate.get("features_predict_next_return") or {}).get("p_value"),
        "beat_flat_by": gate.get("beat_flat_by") or "",
        # The input selection (None: --all-inputs).
        "inputs_kept": " ".join(inputs.get("kept", ["(all)"])),
        "regime_filter_p": inputs.get("regime_p_value"),
        "seconds": r.seconds,
        "error": "",
    }


def _fmt(s: SeedStats, spec: str = ".2f") -> str:
    if s.mean is None:
        return "n/a"
    return f"{s.mean:{spec}} ± {s.std:{spec}} [{s.min:{spec}}, {s.max:{spec}}]"


def _target_text(target: tuple[str, float]) -> str:
    m, x = target
    if m == "sharpe_ratio":
        return f"agent/reference Sharpe >= {x:g}"
    if m == "return":
        return f"agent return >= {x:+.0%}, edge over flat claimed in <= 1 of 5 seeds"
    if m == "mean_return":
        return f"agent return >= {x:+.0%}"
    if m == "baseline_return":
        return (
            f"agent return >= chosen baseline's {x:+.0%}, no run below it by more than "
            f"{REAL_RUN_SHORTFALL:.0%}"
        )
    return f"agent/buy-and-hold return >= {x:.0%}"


def summary_table(summary: Sequence[ZooMarketSummary], smoke: bool = False) -> list[list[str]]:
    """Rows of the console and HTML table (header first); ``smoke``: a ``--small`` run, whose
    "met" column says the targets are not expected to be met (:data:`SMOKE_TEST_NOTE`)."""
    head = [
        "market", "agent Sharpe", "reference Sharpe", "agent / reference", "agent return",
        "buy-and-hold return", "chosen baseline return", "edge over flat claimed",
        "network kept", "target", "met (smoke test)" if smoke else "met",
    ]  # fmt: skip
    rows = [head]
    for s in summary:
        rows.append(
            [
                s.title,
                _fmt(s.agent_sharpe),
                _fmt(s.reference_sharpe),
                _fmt(s.sharpe_ratio),
                _fmt(s.agent_return, ".1%"),
                _fmt(s.buy_and_hold_return, ".1%"),
                _fmt(s.baseline_return, ".1%"),
                f"{s.edge_over_flat_claims} of {s.seeds}",
                f"{s.kept_network} of {s.seeds}",
                _target_text(s.target),
                {True: "yes", False: "NO", None: "n/a"}[s.passed],
            ]
        )
    return rows


def zoo_lead(rows: Sequence[ZooRow]) -> str:
    """The report's first sentence (``reports.report.lead_sentence``): how many runs deployed
    a network, and the median run's out-of-sample figures beside flat, buy-and-hold and the
    markets' references (their known rules)."""
    from gpu_trading_env.reports.report import FLAT_FIGURES, lead_sentence

    ok = [r for r in rows if isinstance(r, ZooRun)]
    if not ok:
        return f"No run finished: all {len(rows)} failed (see Failed runs)."

    def median(key: str) -> dict[str, float]:
        return {
            m: float(np.median([getattr(getattr(r, key), m) for r in ok]))
            for m in ("total_return", "sharpe")
        }

    networks = sum(r.kept == "network" for r in ok)
    markets = len({r.market for r in ok})
    deployed = f"a network in {networks} of {len(ok)} runs on {markets} markets"
    against = {
        "flat": FLAT_FIGURES,
        "buy-and-hold": median("buy_and_hold"),
        "reference": median("reference"),
    }
    return lead_sentence(deployed, median("agent"), against, window="median run out of sample")


def _plot_market(rows: list[ZooRun], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = rows
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(15, 3.8))
    seeds = [r.seed for r in ok]
    x = np.arange(len(ok))
    ax1.bar(x - 0.2, [r.agent.sharpe for r in ok], 0.4, label="agent")
    ax1.bar(x + 0.2, [r.reference.sharpe for r in ok], 0.4, label="reference")
    ax1.axhline(0.0, color="black", lw=0.6)
    ax1.set_xticks(x, [f"seed {s}" for s in seeds])
    ax1.set_title("out-of-sample Sharpe, costs in")
    ax1.legend(fontsize=8)
    first = ok[0]
    for name, style in (("agent", "-"), ("reference", "--"), ("buy_and_hold", ":"),
                        ("baseline", "-.")):  # fmt: skip
        if name not in first.curves:
            continue
        curve = first.curves[name]
        if name == "baseline":
            name = f"chosen baseline ({first.baseline})"
        ax2.plot(np.linspace(0, 1, len(curve)), curve, style, label=name.replace("_", "-"))
    ax2.set_title(f"seed {first.seed}: value / start, held-back bars")
    ax2.set_xlabel("fraction of the out-of-sample window")
    ax2.legend(fontsize=8)
    ev = first.evaluations
    if first.selected_step is not None:
        ax3.plot(ev.timesteps, ev.validation, "o-", label="validation Sharpe")
        ax3.plot(ev.timesteps, ev.test, "s--", label="out-of-sample Sharpe")
        ax3.axvline(first.selected_step, color="grey", lw=0.8, label="selected snapshot")
        ax3.legend(fontsize=8)
    else:
        ax3.text(0.5, 0.5, "no network trained:\nno input kept", ha="center", va="center")
    ax3.set_title(f"seed {first.seed}: learning curve (kept: {first.kept})")
    ax3.set_xlabel("env steps")
    fig.suptitle(MARKETS_BY_NAME[first.market].title)
    fig.tight_layout()
    save_figure(fig, path, dpi=90)


def write_report(
    rows: Sequence[ZooRow], out: Path, command: str, meta: dict[str, Any]
) -> dict[str, Path]:
    """``zoo.json`` (every row, the summary, how it was run), ``zoo.csv`` (a row per run) and
    ``index.html`` (the table and a figure per market)."""
    import html

    out.mkdir(parents=True, exist_ok=True)
    summary = summarize(rows)
    doc = {
        "command": command,
        **meta,
        "summary": [s.to_dict() for s in summary],
        "runs": [r.to_dict() for r in rows],
    }
    paths = {"json": out / "zoo.json", "csv": out / "zoo.csv", "html": out / "index.html"}
    with atomic_write(paths["json"], "w") as f:
        f.write(json.dumps(doc, indent=1, default=float))
    with atomic_write(paths["csv"], "w") as f:
        w = csv.DictWriter(f, fieldnames=_CSV_FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow(_csv_row(r))
    figures = []
    for s in summary:
        mine = [r for r in rows if r.market == s.market and isinstance(r, ZooRun)]
        if mine:
            name = f"{s.market}.png"
            _plot_market(mine, out / name)
            figures.append((name, s.title))
    table = summary_table(summary, smoke=bool(meta.get("small")))
    cells = "".join(
        "<tr>" + "".join(f"<{t}>{html.escape(c)}</{t}>" for c in row) + "</tr>"
        for t, row in zip(["th"] + ["td"] * (len(table) - 1), table, strict=True)
    )
    errors = "".join(
        f"<li>{html.escape(r.market)} seed {r.seed}: {html.escape(r.error)}</li>"
        for r in rows
        if isinstance(r, FailedZooRun)
    )
    lead = zoo_lead(rows)
    notes = [
        f"<strong>{html.escape(lead)}</strong>",
        *(
            [f"<strong>Smoke test: {html.escape(SMOKE_TEST_NOTE)}.</strong>"]
            if meta.get("small")
            else []
        ),
        f"Command: <code>{html.escape(command)}</code>",
        "Each run draws its market with its seed, trains exactly as <code>gpu-trading-env train "
        "--seed SEED</code> does with every default, and backtests the kept policy and the "
        "reference on the same held-back bars (the last 20%) with the same env and costs.",
        "Figures are mean ± sample standard deviation [min, max] over seeds. Sharpe ratios are "
        "annualised, costs in. 'Edge over flat claimed': the 95% block-bootstrap interval of "
        "the agent's Sharpe minus flat's lies above zero. 'Network kept': runs where the "
        "trained network beat the best parameter-free policy on validation (otherwise that "
        "policy was kept).",
    ]
    page = (
        "<!doctype html><meta charset='utf-8'><title>market zoo</title>"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #bbb;padding:3px 8px;font-size:13px}</style>"
        + f"<h1>Market zoo{' (smoke test)' if meta.get('small') else ''}</h1>"
        + "".join(f"<p>{n}</p>" for n in notes)
        + f"<table>{cells}</table>"
        + (f"<h2>Failed runs</h2><ul>{errors}</ul>" if errors else "")
        + "".join(
            f"<h2>{html.escape(t)}</h2><img src='{html.escape(n)}' style='max-width:100%'>"
            for n, t in figures
        )
        + "<p>Every run: <a href='zoo.csv'>zoo.csv</a>, <a href='zoo.json'>zoo.json</a>.</p>"
    )
    with atomic_write(paths["html"], "w") as f:
        f.write(page)
    return paths
