"""Where one portfolio zoo run spends its wall time: the draw, the input selection, ``learn``,
the snapshots' and the rule's backtests (each call: its bars, its policies, its seconds, and
the seconds a bar), and the rest (building the model, compiling, the report).

One ``run_portfolio_one`` of the zoo, as ``zoo --portfolio`` runs it, with the backtest
functions wrapped by timers (nothing else changes). Run it twice in one call on a GPU: the
first run of a process compiles the kernels.

    python3 -m benchmarks.portfolio_run_profile --market lead_lag_k32 --seed 0 --device cuda \\
        --repeat 2 --out profile.json
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _timed(calls: list[dict[str, Any]], name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` recording each call's bars, policies and seconds in ``calls``."""

    def wrapper(policies: Any, data: Any, env: Any, start: int, stop: int, *args: Any, **kw: Any):
        t0 = time.perf_counter()
        out = fn(policies, data, env, start, stop, *args, **kw)
        seconds = time.perf_counter() - t0
        n = len(policies) if name == "backtest_portfolios" else 1
        bars = int(stop) - int(start) - 1
        calls.append(
            {"call": name, "policies": n, "bars": bars, "seconds": round(seconds, 3),
             "ms_a_bar": round(1000.0 * seconds / max(bars, 1), 3)}
        )  # fmt: skip
        return out

    return wrapper


def _phase(phases: dict[str, float], name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` adding each call's seconds to ``phases[name]``."""

    def wrapper(*args: Any, **kw: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kw)
        finally:
            phases[name] = phases.get(name, 0.0) + time.perf_counter() - t0

    return wrapper


def profile_run(market: str, seed: int, device: str) -> dict[str, Any]:
    """One zoo run with its phases timed."""
    import agents.pipelines.portfolio_backtest as backtests
    import agents.pipelines.portfolio_training as training
    import agents.pipelines.portfolio_zoo as zoo
    import gpu_trading_env.data.portfolio_markets as markets

    calls: list[dict[str, Any]] = []
    phases: dict[str, float] = {}
    # train_portfolio calls its module's names; the zoo imports from the modules at run time.
    patches = [
        (training, "backtest_portfolios", lambda f: _timed(calls, "backtest_portfolios", f)),
        (training, "backtest_portfolio", lambda f: _timed(calls, "backtest_portfolio", f)),
        (backtests, "backtest_portfolios", lambda f: _timed(calls, "backtest_portfolios", f)),
        (training, "select_portfolio_inputs", lambda f: _phase(phases, "input selection", f)),
        (markets, "portfolio_market", lambda f: _phase(phases, "draw", f)),
    ]
    saved = [(module, name, getattr(module, name)) for module, name, _ in patches]
    try:
        for (module, name, wrap), (_, _, fn) in zip(patches, saved, strict=True):
            setattr(module, name, wrap(fn))
        t0 = time.perf_counter()
        row = zoo.run_portfolio_one(market, seed, device)
        wall = time.perf_counter() - t0
    finally:
        for module, name, fn in saved:
            setattr(module, name, fn)
    phases["learn"] = row.train_seconds
    phases["backtests"] = sum(c["seconds"] for c in calls)
    phases["rest"] = wall - sum(phases.values())
    return {
        "market": market,
        "seed": seed,
        "device": device,
        "wall_seconds": round(wall, 2),
        "sharpe_ratio": row.sharpe_ratio,
        "phases": {k: round(v, 2) for k, v in phases.items()},
        "backtest_calls": calls,
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--market", default="lead_lag_k32")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cuda")
    p.add_argument(
        "--repeat", type=int, default=2, help="runs in this process (the first compiles)"
    )
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    runs = []
    for k in range(args.repeat):
        r = profile_run(args.market, args.seed, args.device)
        runs.append(r)
        phases = ", ".join(f"{name} {s:.1f} s" for name, s in r["phases"].items())
        print(f"run {k + 1}: {r['wall_seconds']:.1f} s ({phases})")
        for c in r["backtest_calls"]:
            print(
                f"  {c['call']}: {c['policies']} policies x {c['bars']} bars, {c['seconds']:.2f} s, {c['ms_a_bar']:.3f} ms a bar"
            )
    if args.out is not None:
        args.out.write_text(json.dumps(runs, indent=2))


if __name__ == "__main__":
    main()
