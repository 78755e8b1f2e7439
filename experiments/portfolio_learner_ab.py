"""Does a learner variant of the portfolio training beat the current one, at the GPU's budget, on
the CPU?

One portfolio zoo run (``run_portfolio_one``: the zoo's draw, ``train_portfolio``, the rule and
flat on the agent's test bars, so the figures are the zoo's) per market and seed, with the GPU's
budgets (4,096 envs, 4,000,000 env steps, batches of 4,096, 2 gradient steps a vector step, a
buffer of 1,000,000) on the NumPy env and the CPU, and the variant's settings over them:

- ``shared``: every branch's TD target is the whole portfolio's reward (``branch_rewards=False``);
- ``branch``: each branch's target is its own instrument's reward (``branch_rewards=True``);
- ``branch_values``: that, and one value a branch in the dueling head (``branch_values=True``);
- ``encoder``: ``branch`` with the network whose weights the instruments share
  (``instrument_encoder=True``, :class:`agents.algorithm.policies.InstrumentEncoderQNetwork`);
- ``encoder_flat``: ``encoder`` with the instruments no kept input predicts held flat
  (``flat_unpredicted=True``).

Figures are not the H200's bit for bit (fp32 here, bf16 there; other random streams), only the
same algorithm and budget. One line a run; ``--json`` appends the zoo's row of each run.

    python3 -m experiments.portfolio_learner_ab --markets ar1_k8 lead_lag_k8 --seeds 0 1 \\
        --variants shared branch
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

# variant: (branch_rewards, branch_values, instrument_encoder, flat_unpredicted)
SETTINGS = ("branch_rewards", "branch_values", "instrument_encoder", "flat_unpredicted")
VARIANTS = {
    "shared": (False, False, False, False),
    "branch": (True, False, False, False),
    "branch_values": (True, True, False, False),
    "encoder": (True, False, True, False),
    "encoder_flat": (True, False, True, True),
}


def _settings(variant: str, args: argparse.Namespace) -> tuple[tuple[str, object], ...]:
    from agents.pipelines.portfolio_train_config import PortfolioTrainConfig

    settings: list[tuple[str, object]] = [
        ("num_envs", args.num_envs),
        ("timesteps", args.timesteps),
        ("batch_size", args.batch_size),
        ("gradient_steps", args.gradient_steps),
        ("buffer_size", args.buffer_size),
        ("torch_threads", args.threads),
    ]
    if args.net_width is not None:
        settings.append(("net_width", args.net_width))
    names = {f.name for f in dataclasses.fields(PortfolioTrainConfig)}
    for name, value in zip(SETTINGS, VARIANTS[variant], strict=True):
        if name in names:
            settings.append((name, value))
        elif value:
            raise SystemExit(f"variant {variant!r} needs PortfolioTrainConfig.{name}")
    return tuple(settings)


def _reward_scale(market: str, seed: int, factor: float) -> float:
    """``factor`` times the reward scale ``train_portfolio`` gives the run's fit bars."""
    from agents.pipelines.portfolio_training import (
        portfolio_reward_scale,
        portfolio_splits,
        slice_portfolio,
    )
    from agents.pipelines.portfolio_zoo import PORTFOLIO_ZOO_BY_NAME, PortfolioZooBudget
    from gpu_trading_env.data.portfolio_markets import portfolio_market

    m, budget = PORTFOLIO_ZOO_BY_NAME[market], PortfolioZooBudget()
    config = budget.config()
    data = portfolio_market(m.kind, budget.bars, m.n_instruments, int(seed))
    fit = portfolio_splits(data.n_bars, config.train_fraction, config.val_fraction).fit_stop
    return factor * portfolio_reward_scale(slice_portfolio(data, 0, fit))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--markets", nargs="+", default=["ar1_k8"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0])
    p.add_argument("--variants", nargs="+", choices=sorted(VARIANTS), default=["shared"])
    p.add_argument("--num-envs", type=int, default=4096)
    p.add_argument("--timesteps", type=int, default=4_000_000)
    p.add_argument("--batch-size", type=int, default=4096)
    p.add_argument("--gradient-steps", type=int, default=2)
    p.add_argument("--buffer-size", type=int, default=1_000_000)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--net-width", type=int, default=None, help="default: the config's")
    p.add_argument("--device", default="cpu", help="cpu, or cuda for the GPU env and rollout")
    p.add_argument(
        "--reward-scale-factor",
        type=float,
        default=None,
        help="reward_scale = this times train_portfolio's own (default: its own)",
    )
    p.add_argument("--json", type=Path, default=None, help="append each run's zoo row here")
    args = p.parse_args(argv)

    from agents.pipelines.portfolio_zoo import (
        PORTFOLIO_ZOO_BY_NAME,
        PortfolioZooBudget,
        run_portfolio_one,
    )

    for market in args.markets:
        if market not in PORTFOLIO_ZOO_BY_NAME:
            p.error(
                f"--markets {market!r} is invalid: allowed is one of {list(PORTFOLIO_ZOO_BY_NAME)}"
            )
    for market in args.markets:
        for seed in args.seeds:
            for variant in args.variants:
                settings = _settings(variant, args)
                if args.reward_scale_factor is not None:
                    scale = _reward_scale(market, seed, args.reward_scale_factor)
                    settings += (("reward_scale", scale),)
                budget = PortfolioZooBudget(settings=settings)
                r = run_portfolio_one(market, seed, args.device, budget)
                ratio = "n/a" if r.sharpe_ratio is None else f"{r.sharpe_ratio:+.2f}"
                print(
                    f"{market} seed {seed} {variant}: agent/rule {ratio} (agent Sharpe "
                    f"{r.agent_sharpe:+.2f}, network {r.network_sharpe:+.2f}, rule "
                    f"{r.rule_sharpe:+.2f}), agent return {r.agent_return:+.2%}, network return "
                    f"{r.network_return:+.2%}, kept {r.kept}, {r.seconds:.0f} s "
                    f"(train {r.train_seconds:.0f} s); budget {args.num_envs} envs, "
                    f"{args.timesteps:,} steps, batch {args.batch_size}, "
                    f"{args.gradient_steps} grad steps, width {args.net_width or 'default'}, "
                    f"{args.device}, reward scale x "
                    f"{args.reward_scale_factor or 1.0:g}",
                    flush=True,
                )
                if args.json is not None:
                    row = dict(r.to_dict(), variant=variant, budget=vars(args) | {"json": None})
                    with args.json.open("a") as f:
                        f.write(json.dumps(row, default=str) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
