"""The ``gpu-trading-env`` command: ``train``, ``eval``, ``backtest`` and ``bench``.

    gpu-trading-env train --out runs/quickstart      # GpuDQN on the built-in data, then a report
    gpu-trading-env eval --model runs/quickstart/model.zip --data prices.csv --out runs/eval
    gpu-trading-env backtest --rule planted --out runs/rule
    gpu-trading-env bench

``--device auto`` (the default) uses the GPU when CuPy and a CUDA device are present.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from gpu_trading_env.core.config import EnvConfig
from gpu_trading_env.gpu.device import cuda_available
from gpu_trading_env.reports.backtest import (
    BacktestResult,
    backtest,
    exposure_policy,
    plot_equity,
    plot_learning_curve,
    write_json,
)
from gpu_trading_env.vector_env import resolve_data

# Budgets that finish in minutes: on two CPU cores (the README's quickstart), and on one GPU.
CPU_DEFAULTS = {"num_envs": 16, "timesteps": 200_000, "batch_size": 128, "buffer_size": 200_000}
GPU_DEFAULTS = {
    "num_envs": 4096,
    "timesteps": 24_000_000,
    "batch_size": 4096,
    "buffer_size": 2_000_000,
}


def tensorboard_installed() -> bool:
    """TensorBoard is optional: ``train`` logs to it only where it is installed."""
    import importlib.util

    return importlib.util.find_spec("tensorboard") is not None


def resolve_device(name: str) -> str:
    if name == "auto":
        return "cuda" if cuda_available() else "cpu"
    if name.startswith("cuda") and not cuda_available():
        raise SystemExit(
            f"--device {name}: no CUDA device with CuPy was found (allowed: auto, cpu)"
        )
    if name != "cpu" and not name.startswith("cuda"):
        raise SystemExit(f"--device {name!r} is invalid: allowed is auto, cpu, cuda or cuda:N")
    return name


# The commands' own env defaults. EnvConfig keeps the source design's penalties on, but the
# diversity penalty fires on any two-sided strategy whose long/short mix is not exactly
# balanced, and the risk penalty arrives one step after the trade that caused it; in a
# minutes-long training run both drown the pnl signal the quickstart is meant to show.
TRAIN_ENV_DEFAULTS = {"diversity_penalty": 0.0, "risk_penalty_scale": 0.0}


def parse_env_overrides(pairs: list[str] | None) -> dict[str, Any]:
    """``["key=value", ...]`` into EnvConfig overrides (values parsed as Python literals)."""
    import ast

    from gpu_trading_env.core.config import config_field_names

    out = dict(TRAIN_ENV_DEFAULTS)
    for pair in pairs or []:
        key, sep, raw = pair.partition("=")
        if not sep or key not in config_field_names():
            raise SystemExit(
                f"--env {pair!r} is invalid: allowed is FIELD=VALUE with FIELD in {config_field_names()}"
            )
        try:
            out[key] = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            out[key] = raw
    return out


def env_config(args: argparse.Namespace) -> EnvConfig:
    """The EnvConfig of a command: ``--episode-length`` and the ``--env`` overrides."""
    return EnvConfig(episode_length=args.episode_length, **parse_env_overrides(args.env))


def _greedy_policy(model: Any) -> Any:
    def policy(obs: np.ndarray, bar: int) -> np.ndarray:
        action, _ = model.predict(obs, deterministic=True)
        return np.asarray(action).reshape(1)

    return policy


def _report(out: Path, result: BacktestResult, extra: dict[str, Any], title: str) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    metrics = {**result.to_dict(), **extra}
    write_json(metrics, out / "metrics.json")
    plot_equity(result, out / "equity_curve.png", title=title)
    return metrics


def _print_metrics(metrics: dict[str, Any], out: Path) -> None:
    s, b = metrics["strategy"], metrics["buy_and_hold"]
    print(f"out-of-sample ({metrics['instrument']}, {s['n_bars']} bars):")
    print(
        f"  strategy     return {s['total_return']:+.2%}  Sharpe {s['sharpe']:6.2f}  max drawdown {s['max_drawdown']:.2%}"
    )
    print(
        f"  buy and hold return {b['total_return']:+.2%}  Sharpe {b['sharpe']:6.2f}  max drawdown {b['max_drawdown']:.2%}"
    )
    print(f"report written to {out}/")


def cmd_train(args: argparse.Namespace) -> int:
    import gymnasium as gym
    from stable_baselines3.common.callbacks import BaseCallback

    import gpu_trading_env  # noqa: F401  (registers the env)
    from agents import GpuDQN

    device = resolve_device(args.device)
    defaults = GPU_DEFAULTS if device != "cpu" else CPU_DEFAULTS
    num_envs = args.num_envs or defaults["num_envs"]
    timesteps = args.timesteps or defaults["timesteps"]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = resolve_data(args.data)
    train_data, test_data = data.split(args.train_fraction)
    config = env_config(args)
    env = gym.make_vec(
        "GpuTrading-v0", num_envs=num_envs, device=device, data=train_data, config=config
    )

    class LearningCurve(BaseCallback):
        def __init__(self, every: int) -> None:
            super().__init__()
            self.every = every
            self.points: list[tuple[int, float]] = []
            self._next = every

        def _on_step(self) -> bool:
            if self.num_timesteps >= self._next and len(self.model.ep_info_buffer) > 0:
                self._next += self.every
                self.points.append(
                    (
                        self.num_timesteps,
                        float(np.mean([e["r"] for e in self.model.ep_info_buffer])),
                    )
                )
            return True

    curve = LearningCurve(every=max(timesteps // 100, num_envs))
    tensorboard_log = str(out / "tensorboard") if tensorboard_installed() else None
    model = GpuDQN(
        "DuelingPolicy",
        env,
        learning_rate=args.learning_rate,
        buffer_size=defaults["buffer_size"],
        learning_starts=max(10 * num_envs, 1000),
        batch_size=defaults["batch_size"],
        gamma=args.gamma,
        train_freq=1,
        gradient_steps=1,
        target_update_interval=max(timesteps // 50, num_envs),
        exploration_fraction=0.3,
        exploration_final_eps=0.02,
        curiosity=args.curiosity,
        tensorboard_log=tensorboard_log,
        verbose=args.verbose,
        seed=args.seed,
        device="cuda" if device != "cpu" else "cpu",
    )
    t0 = time.perf_counter()
    model.learn(
        total_timesteps=timesteps,
        callback=curve,
        progress_bar=not args.no_progress,
        tb_log_name="GpuDQN",
    )
    wall = time.perf_counter() - t0
    model.save(out / "model.zip")
    result = backtest(_greedy_policy(model), test_data, config)
    extra: dict[str, Any] = {
        "device": device,
        "num_envs": num_envs,
        "timesteps": int(model.num_timesteps),
        "train_seconds": wall,
        "env_steps_per_second": model.num_timesteps / wall,
        "seed": args.seed,
    }
    if "rule_expected_return" in data.metadata:
        from gpu_trading_env.data.synthetic import planted_rule_exposure

        rule = backtest(
            exposure_policy(0.5 * planted_rule_exposure(test_data), config), test_data, config
        )
        extra["known_rule"] = {"strategy": rule.to_dict()["strategy"], "exposure": 0.5}
        rule_return = rule.to_dict()["strategy"]["total_return"]
        agent_return = result.to_dict()["strategy"]["total_return"]
        # The agent's out-of-sample total return as a fraction of the known rule's.
        extra["agent_return_vs_known_rule"] = agent_return / rule_return if rule_return else None
    metrics = _report(out, result, extra, "GpuDQN out-of-sample")
    if curve.points:
        steps, rets = zip(*curve.points, strict=True)
        plot_learning_curve(np.array(steps), np.array(rets), out / "learning_curve.png")
        write_json(
            {"timesteps": list(steps), "mean_episode_return": list(rets)},
            out / "learning_curve.json",
        )
    _print_metrics(metrics, out)
    if tensorboard_log is None:
        print(
            "TensorBoard logs not written: tensorboard is not installed (pip install tensorboard)"
        )
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from agents import GpuDQN

    model = GpuDQN.load(args.model, device="cpu")
    data = resolve_data(args.data)
    if args.train_fraction < 1.0:
        data = data.split(args.train_fraction)[1]
    config = env_config(args)
    result = backtest(_greedy_policy(model), data, config)
    metrics = _report(Path(args.out), result, {"model": str(args.model)}, "GpuDQN backtest")
    _print_metrics(metrics, Path(args.out))
    return 0


def cmd_backtest(args: argparse.Namespace) -> int:
    data = resolve_data(args.data)
    if args.train_fraction < 1.0:
        data = data.split(args.train_fraction)[1]
    config = env_config(args)
    if args.rule == "planted":
        from gpu_trading_env.data.synthetic import planted_rule_exposure

        exposure = args.exposure * planted_rule_exposure(data)
    else:
        exposure = np.full(data.n_bars, args.exposure)
    result = backtest(exposure_policy(exposure, config), data, config)
    metrics = _report(
        Path(args.out),
        result,
        {"rule": args.rule, "exposure": args.exposure},
        f"rule '{args.rule}'",
    )
    _print_metrics(metrics, Path(args.out))
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    import runpy

    script = Path(__file__).resolve().parent.parent / "benchmarks" / "env_throughput.py"
    if not script.exists():
        raise SystemExit("the benchmarks/ folder is not installed; run it from a source checkout")
    sys.argv = [str(script), "--steps", str(args.steps)]
    runpy.run_path(str(script), run_name="__main__")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpu-trading-env", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--data",
            default=None,
            help="CSV or Parquet of OHLCV bars (default: built-in synthetic data)",
        )
        p.add_argument(
            "--train-fraction", type=float, default=0.8, help="bars before the out-of-sample split"
        )
        p.add_argument("--episode-length", type=int, default=200)
        p.add_argument(
            "--env",
            nargs="*",
            metavar="FIELD=VALUE",
            help="EnvConfig overrides; the commands default to diversity_penalty=0.0 and risk_penalty_scale=0.0",
        )
        p.add_argument("--out", default="runs/latest", help="report folder")

    t = sub.add_parser("train", help="train GpuDQN and write a report")
    common(t)
    t.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    t.add_argument("--num-envs", type=int, default=None)
    t.add_argument("--timesteps", type=int, default=None)
    t.add_argument("--learning-rate", type=float, default=3e-4)
    t.add_argument("--gamma", type=float, default=0.9)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--curiosity", action="store_true")
    t.add_argument("--verbose", type=int, default=0)
    t.add_argument("--no-progress", action="store_true", help="no progress bar")
    t.set_defaults(func=cmd_train)

    e = sub.add_parser("eval", help="backtest a saved model and write a report")
    common(e)
    e.add_argument("--model", required=True)
    e.set_defaults(func=cmd_eval)

    b = sub.add_parser("backtest", help="backtest a fixed rule and write a report")
    common(b)
    b.add_argument("--rule", choices=["planted", "buy_and_hold"], default="planted")
    b.add_argument("--exposure", type=float, default=1.0)
    b.set_defaults(func=cmd_backtest)

    n = sub.add_parser("bench", help="env throughput on this machine")
    n.add_argument("--steps", type=int, default=200)
    n.set_defaults(func=cmd_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "train_fraction", 0.5) <= 0 or getattr(args, "train_fraction", 0.5) > 1:
        raise SystemExit(f"--train-fraction {args.train_fraction} is invalid: allowed is (0, 1]")
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
