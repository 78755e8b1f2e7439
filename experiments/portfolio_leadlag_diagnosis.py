"""Why does the portfolio agent keep only about 0.4 of the rule's Sharpe on ``lead_lag_k8``?

One portfolio zoo run (the zoo's draw, splits and gate; ``train_portfolio`` with the GPU's
budgets on the CPU, as ``experiments.portfolio_learner_ab``) per market and seed, then, on the
test bars, for the best snapshot's network (kept or not) and the rule: each instrument's mean
``|weight|``, time in the market, trading costs and gross P&L (fractions of the initial
capital), and on the followers (odd columns of ``lead_lag``) how often the side taken is the
leader's last sign. Also the kept inputs, each snapshot's validation Sharpe and the gate.

    python3 -m experiments.portfolio_leadlag_diagnosis --markets lead_lag_k8 --seeds 0 \\
        --set instrument_encoder=False
"""

from __future__ import annotations

import argparse
import ast
import json
from pathlib import Path

import numpy as np


def _columns(bt, data, env, start: int) -> dict[str, list[float]]:
    """Per-instrument figures of a backtest ``bt`` over ``data`` from bar ``start``."""
    from agents.pipelines.portfolio_backtest import flat_level

    t = bt.levels.shape[0]
    close = np.asarray(data.close, dtype=np.float64)
    dclose = close[start + 1 : start + 1 + t] - close[start : start + t]
    pnl = (bt.positions * dclose).sum(axis=0) / env.initial_capital
    return {
        "abs_weight": np.abs(bt.weights).mean(axis=0).round(3).tolist(),
        "in_market": (bt.levels != flat_level(env)).mean(axis=0).round(3).tolist(),
        "gross_pnl": pnl.round(4).tolist(),
        "costs": (bt.costs.sum(axis=0) / env.initial_capital).round(4).tolist(),
    }


def _follower_hits(bt, data, start: int) -> list[float]:
    """Each follower (odd column): the share of its bars in the market whose side is the sign
    of its leader's last close-to-close return."""
    t = bt.levels.shape[0]
    close = np.asarray(data.close, dtype=np.float64)
    lead_ret = close[start : start + t] / close[start - 1 : start + t - 1] - 1.0
    out = []
    for j in range(1, bt.positions.shape[1], 2):
        side = np.sign(bt.positions[:, j])
        on = side != 0
        out.append(
            round(float((side[on] == np.sign(lead_ret[on, j - 1])).mean()), 3)
            if on.any()
            else float("nan")
        )
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--markets", nargs="+", default=["lead_lag_k8"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0])
    p.add_argument("--set", nargs="*", default=[], help="PortfolioTrainConfig FIELD=VALUE pairs")
    p.add_argument("--label", default="default")
    p.add_argument(
        "--fixed-slices",
        action="store_true",
        help="exposure levels -1/K, 0, 1/K: each instrument its own slice of the capital, never "
        "rescaled by the gross cap (the rule's exposures likewise)",
    )
    p.add_argument("--json", type=Path, default=None)
    p.add_argument(
        "--also-flat-unpredicted",
        action="store_true",
        help="judge the same snapshots again with flat_unpredicted=True",
    )
    args = p.parse_args(argv)

    from agents.pipelines import portfolio_training as pt
    from agents.pipelines.portfolio_backtest import backtest_portfolios
    from agents.pipelines.portfolio_train_config import PORTFOLIO_ENV_DEFAULTS
    from agents.pipelines.portfolio_training import train_portfolio
    from agents.pipelines.portfolio_zoo import PORTFOLIO_ZOO_BY_NAME, PortfolioZooBudget
    from gpu_trading_env.core.portfolio_config import PortfolioConfig
    from gpu_trading_env.data.portfolio_markets import exposure_levels as to_levels
    from gpu_trading_env.data.portfolio_markets import portfolio_market, rule_exposures

    settings = [
        ("num_envs", 4096),
        ("timesteps", 4_000_000),
        ("batch_size", 4096),
        ("gradient_steps", 2),
        ("buffer_size", 1_000_000),
        ("torch_threads", 2),
    ]
    for pair in args.set:
        key, _, raw = pair.partition("=")
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = raw
        settings.append((key, value))
    for name in args.markets:
        market = PORTFOLIO_ZOO_BY_NAME[name]
        k = market.n_instruments
        run_settings = list(settings)
        if args.fixed_slices:
            levels = (-1.0 / k, 0.0, 1.0 / k)
            run_settings.append(
                ("env", PortfolioConfig(**PORTFOLIO_ENV_DEFAULTS, exposure_levels=levels))
            )
        budget = PortfolioZooBudget(settings=tuple(run_settings))
        for seed in args.seeds:
            config = budget.config()
            data = portfolio_market(market.kind, budget.bars, market.n_instruments, seed)
            captured: dict[str, object] = {}

            def learn(model, cfg, progress, _learn=pt._learn, _captured=captured):
                cb, seconds = _learn(model, cfg, progress)
                _captured["cb"], _captured["model"] = cb, model
                return cb, seconds

            pt._learn = learn
            try:
                r = train_portfolio(data, config, seed=seed, device="cpu", out=None)
            finally:
                pt._learn = learn.__defaults__[0]
            net, agent = r.test_network, r.test
            env = r.config.env
            rule_ex = rule_exposures(market.kind, data) / (k if args.fixed_slices else 1)
            rule_levels = to_levels(rule_ex, env.exposure_levels)
            (rule,) = backtest_portfolios(
                [rule_levels], data, env, agent.start, agent.stop, per_year=agent.per_year
            )
            row = {
                "market": name,
                "seed": seed,
                "label": args.label,
                "settings": {key: str(v) for key, v in run_settings},
                "kept": r.kept,
                "ratio": agent.sharpe / rule.sharpe if rule.sharpe > 0 else None,
                "agent_sharpe": agent.sharpe,
                "agent_return": agent.total_return,
                "network_sharpe": net.sharpe,
                "network_return": net.total_return,
                "rule_sharpe": rule.sharpe,
                "rule_return": rule.total_return,
                "snapshots": [
                    (int(s), round(float(v), 3))
                    for s, v in zip(r.snapshot_steps, r.snapshot_sharpes, strict=True)
                ],
                "chosen": r.chosen_snapshot,
                "gate": None if r.gate is None else r.gate.to_dict(),
                "inputs": None if r.inputs is None else r.inputs.kept_names(),
                "network": _columns(net, data, env, net.start),
                "rule": _columns(rule, data, env, rule.start),
                "seconds": r.seconds,
            }
            if market.kind == "lead_lag":
                row["network_follower_hits"] = _follower_hits(net, data, net.start)
                row["rule_follower_hits"] = _follower_hits(rule, data, rule.start)
            ratio = "n/a" if row["ratio"] is None else f"{row['ratio']:+.2f}"
            print(
                f"{name} seed {seed} {args.label}: agent/rule {ratio}, agent return "
                f"{agent.total_return:+.2%}, network Sharpe {net.sharpe:+.2f} (rule "
                f"{rule.sharpe:+.2f}), kept {r.kept}, {r.seconds:.0f} s",
                flush=True,
            )
            for key in ("snapshots", "chosen", "inputs"):
                print(f"  {key}: {row[key]}")
            for who in ("network", "rule"):
                for k, v in row[who].items():
                    print(f"  {who} {k}: {v}")
            if "network_follower_hits" in row:
                print(
                    f"  follower hits network {row['network_follower_hits']} rule {row['rule_follower_hits']}"
                )
            if args.json is not None:
                with args.json.open("a") as f:
                    f.write(json.dumps(row, default=str) + "\n")
            if args.also_flat_unpredicted and r.inputs is not None and "cb" in captured:
                # The same trained snapshots, judged again with the unpredicted instruments held
                # flat (flat_unpredicted=True changes nothing before the choice).
                held = ~r.inputs.predicted
                seen = r.inputs.apply(data)
                c = pt._choose(
                    captured["model"], captured["cb"], seen, r.config, r.splits, None, "cpu", held
                )
                kept_bt = c.test_network if c.kept == "network" else c.test_flat
                ratio2 = kept_bt.sharpe / rule.sharpe if rule.sharpe > 0 else float("nan")
                row2 = {
                    "market": name,
                    "seed": seed,
                    "label": args.label + "+flat_unpredicted",
                    "held_flat": held.tolist(),
                    "kept": c.kept,
                    "ratio": ratio2,
                    "agent_sharpe": kept_bt.sharpe,
                    "agent_return": kept_bt.total_return,
                    "network_sharpe": c.test_network.sharpe,
                    "network_return": c.test_network.total_return,
                    "rule_sharpe": rule.sharpe,
                    "snapshots": [round(float(v), 3) for v in c.sharpes],
                    "chosen": c.chosen,
                    "network": _columns(c.test_network, data, r.config.env, c.test_network.start),
                }
                print(
                    f"{name} seed {seed} {row2['label']}: held flat {held.astype(int).tolist()}, "
                    f"agent/rule {ratio2:+.2f}, agent return {kept_bt.total_return:+.2%}, "
                    f"network Sharpe {c.test_network.sharpe:+.2f}, kept {c.kept}, snapshots "
                    f"{row2['snapshots']}, chosen {c.chosen}",
                    flush=True,
                )
                print(f"  network abs_weight: {row2['network']['abs_weight']}")
                if args.json is not None:
                    with args.json.open("a") as f:
                        f.write(json.dumps(row2, default=str) + "\n")


if __name__ == "__main__":
    main()
