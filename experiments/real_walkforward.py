"""``walkforward`` with its defaults on each real series of the real suite, several seeds.

Each (series, seed) is one ``gpu-trading-env walkforward --seeds SEED`` run with every default
(6 expanding folds, the first trained on half the bars), in worker processes, ``--workers`` at
a time. Per fold and seed: the deployed policy, the reason, its out-of-sample return, the
baseline's and buy-and-hold's. The summary counts the (fold, seed) pairs where a network was
deployed and then returned more than 5% below its baseline (docs/REAL_MARKETS.md).

    python3 -m experiments.real_walkforward --device cuda --seeds 0 1 2 --out wf.json
    python3 -m experiments.real_walkforward --from-json wf.json --figure wf.png
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

SHORTFALL = 0.05  # a deployed network this far below its baseline in a fold counts as a loss


def run_one(series: str, seed: int, device: str) -> dict[str, Any]:
    """One series and seed through the walkforward pipeline with the CLI's defaults."""
    from agents.cli.options import validate
    from agents.cli.parser import build_parser
    from agents.cli.train import WALKFORWARD_CPU_TIMESTEPS, train_settings
    from agents.cli.walkforward import default_test_bars
    from agents.pipelines.walkforward import walk_forward
    from gpu_trading_env.data.real_series import load_real_series
    from gpu_trading_env.reports.metrics import bars_per_year

    t0 = time.perf_counter()
    args = build_parser().parse_args(["walkforward", "--device", device, "--no-progress"])
    validate(args)
    data = load_real_series(series).instrument(0)
    settings = train_settings(args, args.device, WALKFORWARD_CPU_TIMESTEPS)
    res = walk_forward(
        data,
        args.config,
        settings,
        folds=args.folds,
        train_bars=None,
        test_bars=default_test_bars(data.n_bars, args.folds),
        seeds=[seed],
        warm_start=False,
        per_year=bars_per_year(data.timestamps),
        log=lambda _line: None,
    )
    folds = []
    for f in res.folds:
        (s,) = f.seeds
        (run,) = f.results
        network = run.network_test
        folds.append(
            {
                "fold": f.fold,
                "train": f.train,
                "test": f.test,
                "kept": s["kept"],
                "verdict": s["verdict"],
                "baseline": s["baseline"],
                "return": s["strategy"]["total_return"],
                "baseline_return": s["baseline_strategy"]["total_return"],
                "buy_and_hold_return": f.buy_and_hold["total_return"],
                # The trained network's test figures and its gate, kept or not, so that another
                # deployment rule can be judged on the same runs.
                "network_return": None if network is None else network.strategy.total_return,
                "gate": _gate_record(run.gate),
            }
        )
    agg = res.aggregate
    return {
        "series": series,
        "seed": seed,
        "folds": folds,
        "stitched_return": agg["ensemble"]["total_return"],
        "stitched_buy_and_hold_return": agg["buy_and_hold"]["total_return"],
        "sharpe_vs_buy_and_hold": res.sharpe_vs_buy_and_hold,
        "seconds": time.perf_counter() - t0,
    }


def _gate_record(gate: Any) -> dict[str, Any] | None:
    """The gate's JSON record, whether the run holds it as a dict or as a dataclass."""
    return gate.to_dict() if hasattr(gate, "to_dict") else gate


def _guarded(series: str, seed: int, device: str) -> dict[str, Any]:
    try:
        return run_one(series, seed, device)
    except Exception as exc:  # a failed run is a row, the others go on
        return {"series": series, "seed": seed, "error": f"{type(exc).__name__}: {exc}"}


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per series: pairs, networks deployed, networks more than SHORTFALL below the baseline."""
    out: dict[str, Any] = {}
    for r in rows:
        s = out.setdefault(
            r["series"], {"pairs": 0, "networks": 0, "network_losses": 0, "errors": 0}
        )
        if "error" in r:
            s["errors"] += 1
            continue
        for f in r["folds"]:
            s["pairs"] += 1
            if f["kept"] == "network":
                s["networks"] += 1
                s["network_losses"] += f["return"] < f["baseline_return"] - SHORTFALL
    total = {k: sum(s[k] for s in out.values()) for k in ("pairs", "networks", "network_losses")}
    for s in [*out.values(), total]:
        s["loss_fraction"] = s["network_losses"] / s["pairs"] if s["pairs"] else None
    by_series: dict[str, list[float]] = {}
    for r in rows:
        for f in r.get("folds", []):
            by_series.setdefault(r["series"], []).append(f["return"] - f["baseline_return"])
    for name, d in by_series.items():
        out[name]["mean_return_minus_baseline"] = sum(d) / len(d)
    out["all series"] = total
    return out


def plot(runs: list[dict[str, Any]], path: str) -> None:
    """One panel per series: each (fold, seed)'s deployed return minus its baseline's, a filled
    marker where a network was deployed, the SHORTFALL line dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r["series"] for r in runs if "folds" in r))
    fig, axes = plt.subplots(2, (len(names) + 1) // 2, figsize=(3.2 * ((len(names) + 1) // 2), 6),
                             sharey=True, squeeze=False)  # fmt: skip
    for ax, name in zip(axes.flat, names, strict=False):
        for r in (r for r in runs if r["series"] == name and "folds" in r):
            x = [f["fold"] + 0.15 * (r["seed"] - 1) for f in r["folds"]]
            y = [100 * (f["return"] - f["baseline_return"]) for f in r["folds"]]
            net = [f["kept"] == "network" for f in r["folds"]]
            ax.scatter([a for a, n in zip(x, net, strict=True) if n],
                       [b for b, n in zip(y, net, strict=True) if n], marker="o", s=18,
                       label="network" if r["seed"] == 0 else None, color="C0")  # fmt: skip
            ax.scatter([a for a, n in zip(x, net, strict=True) if not n],
                       [b for b, n in zip(y, net, strict=True) if not n], marker="x", s=18,
                       label="baseline" if r["seed"] == 0 else None, color="C1")  # fmt: skip
        ax.axhline(0.0, color="k", lw=0.5)
        ax.axhline(-100 * SHORTFALL, color="C3", lw=0.8, ls="--")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("fold")
    for ax in axes.flat[len(names) :]:
        ax.axis("off")
    axes[0][0].set_ylabel("return minus baseline's, %")
    axes[0][0].legend(fontsize=7, loc="best")
    fig.suptitle("walkforward defaults: each fold and seed, out of sample, costs in")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    from gpu_trading_env.data.real_series import REAL_SERIES

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--series", nargs="+", default=list(REAL_SERIES))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--out", default="real_walkforward.json")
    p.add_argument("--from-json", help="summarize and plot an earlier --out file; run nothing")
    p.add_argument("--figure", help="write the per-fold figure (PNG) here")
    a = p.parse_args()
    if a.from_json:
        with open(a.from_json) as fh:
            runs = json.load(fh)["runs"]
        for name, s in summarize(runs).items():
            print(f"{name}: {s}")
        if a.figure:
            plot(runs, a.figure)
        return
    jobs = [(s, k) for s in a.series for k in a.seeds]
    t0 = time.perf_counter()
    rows: dict[tuple[str, int], dict[str, Any]] = {}
    with ProcessPoolExecutor(a.workers, mp_context=mp.get_context("spawn")) as pool:
        futures = {pool.submit(_guarded, s, k, a.device): (s, k) for s, k in jobs}
        for fut in as_completed(futures):
            row = fut.result()
            rows[futures[fut]] = row
            kept = row.get("error") or " ".join(
                f["kept"].replace("hold ", "h-") for f in row["folds"]
            )
            print(f"{row['series']} seed {row['seed']}: {kept}", flush=True)
    ordered = [rows[j] for j in jobs]
    summary = summarize(ordered)
    for name, s in summary.items():
        print(f"{name}: {s}")
    if a.figure:
        plot(ordered, a.figure)
    with open(a.out, "w") as fh:
        json.dump(
            {
                "command": "python3 -m experiments.real_walkforward " + " ".join(sys.argv[1:]),
                "wall_seconds": time.perf_counter() - t0,
                "summary": summary,
                "runs": ordered,
            },
            fh,
            indent=1,
        )


if __name__ == "__main__":
    main()
