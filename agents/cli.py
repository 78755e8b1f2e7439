"""The ``gpu-trading-env`` command: ``train``, ``walkforward``, ``eval``, ``backtest`` and ``bench``.

    gpu-trading-env train --out runs/quickstart      # GpuDQN on the built-in data, then a report
    gpu-trading-env walkforward --data prices.csv    # rolling folds on your own bars
    gpu-trading-env eval --model runs/quickstart/model.zip --data prices.csv
    gpu-trading-env backtest --rule planted
    gpu-trading-env bench

Errors are one line on stderr naming the problem and the fix, with exit code 2 for bad options
and bad data (1 for anything else); ``--debug`` shows the traceback. Every option is checked
before any work starts and before any folder is made. ``--device auto`` (the default) uses the
GPU when CuPy and a CUDA device are present.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from gpu_trading_env.core.config import EnvConfig
from gpu_trading_env.gpu.device import cuda_available

PROG = "gpu-trading-env"

# Budgets that finish in minutes: on two CPU cores (the README's quickstart), and on one GPU.
CPU_DEFAULTS = {"num_envs": 16, "timesteps": 200_000, "batch_size": 128, "buffer_size": 200_000}
GPU_DEFAULTS = {
    "num_envs": 4096,
    "timesteps": 24_000_000,
    "batch_size": 4096,
    "buffer_size": 2_000_000,
}
# walkforward trains folds x seeds models: a smaller budget per model on the CPU.
WALKFORWARD_CPU_TIMESTEPS = 50_000


DEBUG_HELP = "show the traceback of an error"


class UsageError(Exception):
    """A bad option or bad data: printed as one line, exit code 2."""


def tensorboard_installed() -> bool:
    """TensorBoard is optional: ``train`` logs to it only where it is installed."""
    import importlib.util

    return importlib.util.find_spec("tensorboard") is not None


def resolve_device(name: str) -> str:
    if name == "auto":
        return "cuda" if cuda_available() else "cpu"
    if name != "cpu" and not (name == "cuda" or (name.startswith("cuda:") and name[5:].isdigit())):
        raise UsageError(f"--device {name!r} is invalid: allowed is auto, cpu, cuda or cuda:N")
    if name.startswith("cuda") and not cuda_available():
        raise UsageError(
            f"--device {name}: no CUDA device with CuPy was found; pass --device cpu "
            "(or install gpu-trading-env[cuda12] on a machine with a GPU)"
        )
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
            raise UsageError(
                f"--env {pair!r} is invalid: pass FIELD=VALUE with FIELD one of "
                f"{', '.join(config_field_names())}"
            )
        try:
            out[key] = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            out[key] = raw
    return out


def env_config(args: argparse.Namespace) -> EnvConfig:
    """The EnvConfig of a command: ``--episode-length`` and the ``--env`` overrides."""
    overrides = parse_env_overrides(args.env)
    try:
        return EnvConfig(episode_length=args.episode_length, **overrides)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"--env / --episode-length: {exc}") from None


# ---------------------------------------------------------------------- option checks


def _check(ok: bool, option: str, value: Any, allowed: str) -> None:
    if not ok:
        raise UsageError(f"{option} {value} is invalid: allowed is {allowed}")


def validate(args: argparse.Namespace) -> None:
    """Every numeric option and every path, before any work or folder."""
    c = args.command
    for name in ("timesteps", "num_envs", "steps", "folds", "eval_every", "batch_size"):
        v = getattr(args, name, None)
        if v is not None:
            _check(v > 0, "--" + name.replace("_", "-"), v, "an integer > 0")
    if getattr(args, "episode_length", None) is not None:
        _check(args.episode_length >= 2, "--episode-length", args.episode_length, "an integer >= 2")
    for name in ("train_bars", "test_bars"):
        v = getattr(args, name, None)
        if v is not None:
            _check(v >= 2, "--" + name.replace("_", "-"), v, "an integer >= 2")
    if hasattr(args, "train_fraction"):
        f = args.train_fraction
        if c == "train":
            _check(0.0 < f < 1.0, "--train-fraction", f, "a number in (0, 1), e.g. 0.8")
        else:
            _check(
                0.0 <= f < 1.0,
                "--train-fraction",
                f,
                "a number in [0, 1): bars before the evaluated part, 0 for all bars",
            )
    if getattr(args, "val_fraction", None) is not None:
        _check(0.0 < args.val_fraction <= 0.5, "--val-fraction", args.val_fraction, "(0, 0.5]")
    if getattr(args, "learning_rate", None) is not None:
        _check(args.learning_rate > 0, "--learning-rate", args.learning_rate, "a number > 0")
    if getattr(args, "gamma", None) is not None:
        _check(0.0 < args.gamma <= 1.0, "--gamma", args.gamma, "a number in (0, 1]")
    if getattr(args, "exposure", None) is not None:
        _check(-1.0 <= args.exposure <= 1.0, "--exposure", args.exposure, "a number in [-1, 1]")
    if getattr(args, "bars_per_year", None) is not None:
        _check(args.bars_per_year > 0, "--bars-per-year", args.bars_per_year, "a number > 0")
    for s in getattr(args, "seeds", None) or []:
        _check(s >= 0, "--seeds", s, "integers >= 0")
    if getattr(args, "seed", None) is not None:
        _check(args.seed >= 0, "--seed", args.seed, "an integer >= 0")
    if getattr(args, "torch_threads", None) is not None:
        _check(args.torch_threads > 0, "--torch-threads", args.torch_threads, "an integer > 0")
    for pair in getattr(args, "column", None) or []:
        field, sep, name = pair.partition("=")
        if not sep or field.lower() not in ("open", "high", "low", "close", "volume") or not name:
            raise UsageError(
                f"--column {pair!r} is invalid: pass FIELD=NAME with FIELD one of open, high, "
                "low, close, volume, e.g. --column 'close=Adj Close'"
            )
    for path in getattr(args, "data", None) or []:
        if not Path(path).is_file():
            raise UsageError(f"--data {path}: no such file")
    if getattr(args, "model", None) is not None:
        args.model = resolve_model_path(args.model)
    if getattr(args, "device", None) is not None:
        args.device = resolve_device(args.device)
    if hasattr(args, "episode_length"):
        args.config = env_config(args)


def resolve_model_path(given: str) -> Path:
    """A saved model: ``DIR/model.zip``, ``DIR/model`` (SB3 adds .zip) or ``DIR``."""
    p = Path(given)
    for cand in (p, p.with_name(p.name + ".zip"), p / "model.zip"):
        if cand.is_file():
            return cand
    raise UsageError(f"--model {given}: no such file (pass the model.zip that train wrote)")


def default_out(command: str) -> Path:
    """``runs/<command>-<YYYYmmdd-HHMMSS>``, with ``-2``, ``-3``... if that folder exists."""
    base = Path("runs") / f"{command}-{time.strftime('%Y%m%d-%H%M%S')}"
    out, k = base, 1
    while out.exists():
        k += 1
        out = base.with_name(f"{base.name}-{k}")
    return out


def load_data(args: argparse.Namespace) -> Any:
    """The data of ``--data`` (or the built-in synthetic market) as MarketData."""
    from gpu_trading_env.data.market_data import MarketData

    if not args.data:
        if args.date_format or args.timestamp_unit or args.column:
            raise UsageError(
                "--date-format, --timestamp-unit and --column apply to --data files: pass --data"
            )
        data = MarketData.default()
    else:
        data = _load_files(args)
    if getattr(args, "instrument", None) is not None and args.instrument not in data.instruments:
        raise UsageError(
            f"--instrument {args.instrument!r}: the data has {', '.join(data.instruments)}"
        )
    return data


def _load_files(args: argparse.Namespace) -> Any:
    from gpu_trading_env.data.loaders import load_bars

    columns = dict(pair.partition("=")[::2] for pair in args.column or [])
    try:
        return load_bars(
            args.data,
            date_format=args.date_format,
            timestamp_unit=args.timestamp_unit,
            time_column=args.time_column,
            symbol_column=args.symbol_column,
            columns={k.lower(): v for k, v in columns.items()},
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def is_synthetic(data: Any) -> bool:
    return data.metadata.get("source") == "synthetic"


def per_year_of(args: argparse.Namespace, data: Any) -> float:
    from gpu_trading_env.reports.metrics import bars_per_year

    if args.bars_per_year is not None:
        return float(args.bars_per_year)
    return bars_per_year(data.instrument(0).timestamps)


def _split(data: Any, fraction: float, what: str) -> tuple[Any, Any]:
    try:
        return data.split(fraction)
    except ValueError as exc:
        raise UsageError(f"--train-fraction {fraction}: {exc}; {what}") from None


# ---------------------------------------------------------------------- reports


def _fmt(m: dict[str, Any]) -> str:
    return (
        f"return {m['total_return']:+8.2%}  annual {m['annual_return']:+8.2%}  "
        f"Sharpe {m['sharpe']:6.2f}  Sortino {m['sortino']:6.2f}  "
        f"max drawdown {m['max_drawdown']:6.2%}"
    )


def _summary_lines(rows: list[tuple[str, dict[str, Any]]]) -> list[str]:
    width = max(len(name) for name, _ in rows)
    return [f"  {name:{width}s}  {_fmt(m)}" for name, m in rows]


def _table(rows: list[tuple[str, dict[str, Any]]]) -> list[list[Any]]:
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
                f"{m['sharpe']:.2f}",
                f"{m['sortino']:.2f}",
                f"{m['max_drawdown']:.2%}",
                "n/a" if m.get("turnover") is None else f"{m['turnover']:.1f}",
                "n/a" if m.get("costs_paid") is None else f"{m['costs_paid']:.2%}",
                "n/a" if m.get("exposure") is None else f"{m['exposure']:.2f}",
                "n/a" if m.get("hit_rate") is None else f"{m['hit_rate']:.1%}",
            ]
        )
    return out


def _notes(data: Any, per_year: float, args: argparse.Namespace, config: EnvConfig) -> list[str]:
    src = (
        f"Data: SYNTHETIC ({data.metadata.get('kind', 'synthetic')} market, seed "
        f"{data.metadata.get('seed')}), {data!r}"
        if is_synthetic(data)
        else f"Data: {', '.join(map(str, args.data))}, {data!r}"
    )
    how = (
        "given by --bars-per-year"
        if args.bars_per_year is not None
        else "inferred from the timestamps"
    )
    return [
        src,
        f"Annualised with {per_year:.1f} bars a year ({how}).",
        f"Costs are in every curve marked 'costs in': {config.order_cost_bps} bps of traded "
        "notional per order type; buy-and-hold pays the market order's cost to buy and to sell.",
        "Returns and drawdowns are fractions of the starting value; Sharpe and Sortino are "
        "annualised with a zero risk-free rate.",
    ]


def _single_report(
    out: Path,
    result: Any,
    data: Any,
    args: argparse.Namespace,
    config: EnvConfig,
    per_year: float,
    title: str,
    extra: dict[str, Any],
    rule: Any = None,
    learning: dict[str, Any] | None = None,
) -> None:
    from gpu_trading_env.reports.report import (
        plot_equity,
        plot_learning_curve,
        plot_position,
        write_html,
        write_json,
    )

    synthetic = is_synthetic(data)
    out.mkdir(parents=True, exist_ok=True)
    metrics = {**result.to_dict(), "synthetic_data": synthetic, "bars_per_year": per_year, **extra}
    rows = [
        ("strategy", result.strategy.to_dict()),
        ("buy and hold", result.benchmark.to_dict()),
        ("buy and hold, frictionless", result.frictionless_buy_and_hold.to_dict()),
    ]
    curves = {}
    if rule is not None:
        metrics["known_rule"] = {"strategy": rule.strategy.to_dict(), "exposure": 0.5}
        rows.append(("known rule (0.5 exposure)", rule.strategy.to_dict()))
        curves[f"known rule, costs in (Sharpe {rule.strategy.sharpe:.2f})"] = rule.equity
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
    if learning is not None:
        curve = learning["curve"]
        steps, rets = zip(*curve, strict=True) if curve else ((), ())
        plot_learning_curve(
            np.array(steps),
            np.array(rets),
            out / "learning_curve.png",
            evals=learning["evals"],
            selected=learning["selected_step"],
        )
        images.append(("learning_curve.png", "Learning curve and greedy-policy evaluations"))
        metrics["learning_curve"] = {
            "timesteps": list(steps),
            "mean_episode_return": list(rets),
            "evaluations": learning["evals"],
            "selected_step": learning["selected_step"],
        }
    write_json(metrics, out / "metrics.json")
    page = write_html(out, title, _notes(data, per_year, args, config), _table(rows), images)
    print(f"out-of-sample ({result.instrument}, {result.strategy.n_bars} bars, costs in):")
    for line in _summary_lines(rows):
        print(line)
    if is_synthetic(data):
        print("  (synthetic data)")
    print(f"report: {page}  (metrics: {out / 'metrics.json'})")


# ---------------------------------------------------------------------- commands


def _settings(args: argparse.Namespace, device: str, timesteps_cpu: int) -> Any:
    from agents.walkforward import TrainSettings

    defaults = GPU_DEFAULTS if device != "cpu" else CPU_DEFAULTS
    if args.torch_threads is not None:
        import torch

        torch.set_num_threads(args.torch_threads)
    return TrainSettings(
        timesteps=args.timesteps or (defaults["timesteps"] if device != "cpu" else timesteps_cpu),
        num_envs=args.num_envs or defaults["num_envs"],
        batch_size=args.batch_size or defaults["batch_size"],
        buffer_size=defaults["buffer_size"],
        learning_rate=args.learning_rate,
        gamma=args.gamma,
        eval_every=args.eval_every,
        val_fraction=args.val_fraction,
        device=device,
        curiosity=args.curiosity,
        verbose=args.verbose,
        progress_bar=not args.no_progress,
    )


def cmd_train(args: argparse.Namespace) -> int:
    from agents.walkforward import known_rule, train_selected

    data = load_data(args)
    train_data, test_data = _split(
        data, args.train_fraction, "pass a fraction that leaves bars on both sides"
    )
    per_year = per_year_of(args, data)
    settings = _settings(args, args.device, CPU_DEFAULTS["timesteps"])
    out = Path(args.out) if args.out else default_out("train")
    out.mkdir(parents=True, exist_ok=True)
    if tensorboard_installed():
        settings.tensorboard_log = str(out / "tensorboard")
    run = train_selected(
        train_data,
        test_data.instrument(0),
        args.config,
        settings,
        seed=args.seed,
        per_year=per_year,
    )
    run["model"].save(out / "model.zip")
    extra = {
        "device": args.device,
        "num_envs": settings.num_envs,
        "timesteps": run["timesteps"],
        "train_seconds": run["train_seconds"],
        "env_steps_per_second": run["timesteps"] / run["train_seconds"],
        "seed": args.seed,
        "model_selection": "best validation Sharpe (last "
        f"{settings.val_fraction:.0%} of the training bars), at step {run['selected_step']}",
        "last_model_strategy": run["last_test"].strategy.to_dict(),
    }
    rule = known_rule(test_data.instrument(0), args.config)
    if rule is not None:
        rule_return = rule.strategy.total_return
        # The agent's out-of-sample total return as a fraction of the known rule's.
        extra["agent_return_vs_known_rule"] = (
            run["test"].strategy.total_return / rule_return if rule_return else None
        )
    _single_report(
        out,
        run["test"],
        data,
        args,
        args.config,
        per_year,
        "GpuDQN out-of-sample",
        extra,
        rule=rule,
        learning=run,
    )
    if settings.tensorboard_log is None:
        print(
            "TensorBoard logs not written: tensorboard is not installed (pip install tensorboard)"
        )
    return 0


def _evaluated_part(data: Any, fraction: float) -> Any:
    if fraction == 0.0:
        return data
    return _split(data, fraction, "pass --train-fraction 0 to evaluate every bar")[1]


def cmd_eval(args: argparse.Namespace) -> int:
    from agents import GpuDQN
    from agents.walkforward import greedy_policy, known_rule
    from gpu_trading_env.reports.backtest import backtest

    data = load_data(args)
    part = _evaluated_part(data, args.train_fraction).instrument(args.instrument or 0)
    per_year = per_year_of(args, data)
    model = GpuDQN.load(args.model, device="cpu")
    if model.observation_space.shape != (part.n_features + 3,):
        raise UsageError(
            f"--model {args.model} expects {model.observation_space.shape[0]} observation "
            f"values but the data gives {part.n_features + 3}: evaluate on data with the "
            "features the model was trained on"
        )
    out = Path(args.out) if args.out else default_out("eval")
    result = backtest(greedy_policy(model), part, args.config, per_year=per_year)
    _single_report(
        out,
        result,
        data,
        args,
        args.config,
        per_year,
        "GpuDQN backtest",
        {"model": str(args.model)},
        rule=known_rule(part, args.config),
    )
    return 0


def cmd_backtest(args: argparse.Namespace) -> int:
    from gpu_trading_env.reports.backtest import backtest, exposure_policy

    data = load_data(args)
    part = _evaluated_part(data, args.train_fraction).instrument(args.instrument or 0)
    per_year = per_year_of(args, data)
    if args.rule == "planted":
        from gpu_trading_env.data.synthetic import planted_rule_exposure

        exposure = args.exposure * planted_rule_exposure(part)
    else:
        exposure = np.full(part.n_bars, args.exposure)
    out = Path(args.out) if args.out else default_out("backtest")
    result = backtest(exposure_policy(exposure, args.config), part, args.config, per_year=per_year)
    _single_report(
        out,
        result,
        data,
        args,
        args.config,
        per_year,
        f"rule '{args.rule}'",
        {"rule": args.rule, "exposure": args.exposure},
    )
    return 0


def cmd_walkforward(args: argparse.Namespace) -> int:
    from agents.walkforward import walk_forward
    from gpu_trading_env.reports.report import (
        plot_curves,
        plot_folds,
        plot_learning_curve,
        plot_position,
        write_html,
        write_json,
    )

    data = load_data(args)
    one = data.instrument(args.instrument or 0)
    per_year = per_year_of(args, one)
    try:  # the windows, checked before any training
        one.walk_forward(args.folds, args.train_bars, args.test_bars)
    except ValueError as exc:
        raise UsageError(f"{exc}: pass fewer --folds or smaller --train-bars/--test-bars") from None
    settings = _settings(args, args.device, WALKFORWARD_CPU_TIMESTEPS)
    out = Path(args.out) if args.out else default_out("walkforward")
    out.mkdir(parents=True, exist_ok=True)
    res = walk_forward(
        one,
        args.config,
        settings,
        folds=args.folds,
        train_bars=args.train_bars,
        test_bars=args.test_bars,
        seeds=args.seeds,
        warm_start=args.warm_start,
        per_year=per_year,
    )
    synthetic = is_synthetic(data)
    st = res["stitched"]
    agg = res["aggregate"]
    label = f"GpuDQN, {len(args.seeds)} seed(s) averaged"
    curves = {
        f"{label}, costs in (Sharpe {agg['ensemble']['sharpe']:.2f})": st["ensemble"],
        f"buy and hold, costs in (Sharpe {agg['buy_and_hold']['sharpe']:.2f})": st["buy_and_hold"],
        f"random policy, costs in (Sharpe {agg['random']['sharpe']:.2f})": st["random"],
    }
    if "rule" in st:
        curves[f"known rule, costs in (Sharpe {agg['rule']['sharpe']:.2f})"] = st["rule"]
    images = []
    title = f"Walk-forward, out-of-sample windows stitched: {one.instruments[0]}"
    for log_scale, name in ((False, "equity_curve.png"), (True, "equity_curve_log.png")):
        plot_curves(
            st["timestamps"],
            curves,
            out / name,
            title,
            log_scale=log_scale,
            synthetic=synthetic,
            boundaries=st["boundaries"],
        )
        images.append(
            (
                name,
                f"Stitched out-of-sample value and drawdown ({'log' if log_scale else 'linear'} scale); dotted lines start folds",
            )
        )
    plot_position(
        st["timestamps"],
        st["exposure"],
        out / "position.png",
        f"Exposure held, seed {args.seeds[0]}",
        synthetic=synthetic,
    )
    images.append(("position.png", f"Exposure held out of sample (seed {args.seeds[0]})"))
    bars = []
    for f in res["folds"]:
        row = {f"GpuDQN seed {s['seed']}": 100 * s["strategy"]["total_return"] for s in f["seeds"]}
        row["buy and hold"] = 100 * f["buy_and_hold"]["total_return"]
        row["random"] = 100 * f["random"]["total_return"]
        if f["rule"] is not None:
            row["known rule"] = 100 * f["rule"]["total_return"]
        bars.append(row)
    plot_folds(bars, out / "folds.png", synthetic=synthetic)
    images.append(("folds.png", "Total return of each fold's out-of-sample window, costs in"))
    for f in res["folds"]:
        s0 = f["seeds"][0]
        steps, rets = zip(*s0["learning_curve"], strict=True) if s0["learning_curve"] else ((), ())
        name = f"learning_curve_fold{f['fold']}.png"
        plot_learning_curve(
            np.array(steps),
            np.array(rets),
            out / name,
            evals=s0["evaluations"],
            selected=s0["selected_step"],
            title=f"Fold {f['fold']}, seed {s0['seed']}: learning curve",
        )
        images.append(
            (name, f"Fold {f['fold']}: training curve, validation and out-of-sample Sharpe")
        )
    ci = res["sharpe_vs_buy_and_hold"]
    metrics = {
        "instrument": one.instruments[0],
        "synthetic_data": synthetic,
        "bars_per_year": per_year,
        "costs_included": True,
        "aggregate": agg,
        "sharpe_vs_buy_and_hold": ci,
        "beats_buy_and_hold_every_fold": res["beats_buy_and_hold_every_fold"],
        "folds": [{k: v for k, v in f.items() if not k.startswith("_")} for f in res["folds"]],
        "settings": {
            **res["settings"],
            "folds": args.folds,
            "train_bars": args.train_bars,
            "test_bars": args.test_bars,
            "seeds": args.seeds,
            "warm_start": args.warm_start,
            "env": {k: str(v) for k, v in asdict(args.config).items()},
        },
    }
    write_json(metrics, out / "metrics.json")
    rows = [(f"{label}", agg["ensemble"])]
    rows += [(f"GpuDQN seed {s}", m) for s, m in agg["seeds"].items()]
    rows += [("buy and hold", agg["buy_and_hold"]), ("random policy", agg["random"])]
    if "rule" in agg:
        rows.append(("known rule (0.5 exposure)", agg["rule"]))
    notes = _notes(data, per_year, args, args.config) + [
        f"{args.folds} folds; each trains from {'the previous fold (warm start)' if args.warm_start else 'scratch'} "
        f"for {settings.timesteps} env steps per seed; the model kept is the one with the best "
        f"Sharpe on the last {settings.val_fraction:.0%} of its training window (validation), "
        "never the out-of-sample window.",
        f"Sharpe of the seed-averaged strategy minus buy-and-hold's: {ci['difference']:+.2f}, "
        f"{ci['level']:.0%} block-bootstrap interval [{ci['low']:+.2f}, {ci['high']:+.2f}] "
        f"(blocks of {ci['block']} bars, {ci['n_boot']} resamples, costs in both).",
    ]
    page = write_html(out, title, notes, _table(rows), images)
    print(f"walk-forward out-of-sample ({one.instruments[0]}, {args.folds} folds, costs in):")
    for line in _summary_lines(rows):
        print(line)
    print(
        f"  Sharpe minus buy-and-hold: {ci['difference']:+.2f}, {ci['level']:.0%} interval "
        f"[{ci['low']:+.2f}, {ci['high']:+.2f}]"
    )
    beats = res["beats_buy_and_hold_every_fold"]
    print(
        f"  beats buy-and-hold in every fold: {', '.join(f'seed {s}: {b}' for s, b in beats.items())}"
    )
    if synthetic:
        print("  (synthetic data)")
    print(f"report: {page}  (metrics: {out / 'metrics.json'})")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from gpu_trading_env.data.market_data import MarketData
    from gpu_trading_env.throughput import bench_cuda, bench_numpy, bench_sync, format_rows

    data = MarketData.default()
    rows = [bench_sync(data, 16, max(20, args.steps // 4))]
    rows += [bench_numpy(data, n, args.steps) for n in (256, 4096)]
    gpu = cuda_available()
    if gpu:
        rows += [bench_cuda(data, n, args.steps) for n in (2**16, 2**20)]
    print(f"# env throughput on this machine (CUDA {'found' if gpu else 'not found'})")
    for line in format_rows(rows):
        print(line)
    print("# the full sweep: python benchmarks/env_throughput.py (in a source checkout)")
    return 0


# ---------------------------------------------------------------------- parser


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line on stderr (argparse prints the usage block too), exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows ``(default: X)`` unless the help text already says what the default is."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "(default" in text:
            return text
        return super()._get_help_string(action)


def _int(text: str) -> int:
    try:
        return int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def build_parser() -> argparse.ArgumentParser:
    fmt = _HelpFormatter
    parser = _Parser(prog=PROG, description=__doc__.splitlines()[0], formatter_class=fmt)
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def data_options(p: argparse.ArgumentParser) -> None:
        g = p.add_argument_group("data")
        g.add_argument(
            "--data",
            nargs="+",
            metavar="FILE",
            default=None,
            help="CSV or Parquet files of OHLCV bars; several files are several instruments "
            "(default: the built-in synthetic market with a planted signal)",
        )
        g.add_argument(
            "--date-format",
            default=None,
            help="strftime format of text timestamps, e.g. '%%d.%%m.%%Y %%H:%%M:%%S.%%f' "
            "(default: ISO, or day-first/month-first when the data shows which)",
        )
        g.add_argument(
            "--timestamp-unit",
            choices=["s", "ms", "us", "ns"],
            default=None,
            help="unit of numeric epoch timestamps (default: by their magnitude)",
        )
        g.add_argument(
            "--time-column",
            default=None,
            help="timestamp column (default: one named like time/date, any case)",
        )
        g.add_argument(
            "--symbol-column",
            default=None,
            help="instrument column of a long-format file (default: instrument/symbol/ticker/asset/pair)",
        )
        g.add_argument(
            "--column",
            action="append",
            metavar="FIELD=NAME",
            default=None,
            help="the file's column for an OHLCV field, e.g. --column 'close=Adj Close' (repeat)",
        )
        g.add_argument(
            "--bars-per-year",
            type=float,
            default=None,
            help="annualisation factor (default: inferred from the timestamps' calendar)",
        )

    def env_options(p: argparse.ArgumentParser, fraction: float, fraction_help: str) -> None:
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
        data_options(p)
        p.add_argument("--train-fraction", type=float, default=fraction, help=fraction_help)
        p.add_argument("--episode-length", type=_int, default=200, help="bars per env episode")
        p.add_argument(
            "--env",
            nargs="*",
            metavar="FIELD=VALUE",
            help="EnvConfig overrides (docs/ENV_SPEC.md) (default: EnvConfig's, with "
            "diversity_penalty=0.0 and risk_penalty_scale=0.0)",
        )
        p.add_argument(
            "--out",
            default=None,
            help="report folder (default: runs/<command>-<date>-<time>, never an existing one)",
        )

    def train_options(p: argparse.ArgumentParser, timesteps_help: str) -> None:
        g = p.add_argument_group("training")
        g.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
        g.add_argument(
            "--num-envs", type=_int, default=None, help="parallel envs (default: 16 CPU, 4096 GPU)"
        )
        g.add_argument("--timesteps", type=_int, default=None, help=timesteps_help)
        g.add_argument(
            "--batch-size", type=_int, default=None, help="SGD batch (default: 128 CPU, 4096 GPU)"
        )
        g.add_argument("--learning-rate", type=float, default=3e-4, help="Adam step size")
        g.add_argument("--gamma", type=float, default=0.9, help="discount factor")
        g.add_argument(
            "--val-fraction",
            type=float,
            default=0.2,
            help="last part of the training bars held out to select the model",
        )
        g.add_argument(
            "--eval-every",
            type=_int,
            default=None,
            help="env steps between validation backtests (default: a tenth of --timesteps)",
        )
        g.add_argument("--curiosity", action="store_true", help="ICM curiosity bonus")
        g.add_argument("--verbose", type=int, choices=[0, 1, 2], default=0, help="SB3 verbosity")
        g.add_argument("--no-progress", action="store_true", help="no progress bar")
        g.add_argument(
            "--torch-threads",
            type=_int,
            default=None,
            help="torch CPU threads (default: torch's; 1 is faster on a busy machine)",
        )

    t = sub.add_parser(
        "train", help="train GpuDQN on one split and write a report", formatter_class=fmt
    )
    env_options(t, 0.8, "fraction of the bars to train on; the rest is out of sample")
    train_options(t, "env steps (default: 200,000 on CPU, 4,000,000 on GPU)")
    t.add_argument("--seed", type=_int, default=0, help="random seed")
    t.set_defaults(func=cmd_train)

    w = sub.add_parser(
        "walkforward",
        help="train and test on rolling folds of your data and write a report",
        formatter_class=fmt,
    )
    env_options(w, 0.0, argparse.SUPPRESS)
    train_options(w, "env steps per fold and seed (default: 50,000 on CPU, 4,000,000 on GPU)")
    w.add_argument("--folds", type=_int, default=4, help="number of test windows")
    w.add_argument(
        "--train-bars",
        type=_int,
        default=None,
        help="bars of each training window (default: the bars before the first test window)",
    )
    w.add_argument(
        "--test-bars",
        type=_int,
        default=None,
        help="bars of each test window (default: bars / (folds + 1))",
    )
    w.add_argument("--seeds", type=_int, nargs="+", default=[0], help="one model per seed")
    w.add_argument(
        "--warm-start",
        action="store_true",
        help="start each fold from the previous fold's model (default: from scratch)",
    )
    w.add_argument("--instrument", default=None, help="instrument to use (default: the first)")
    w.set_defaults(func=cmd_walkforward)

    e = sub.add_parser(
        "eval", help="backtest a saved model and write a report", formatter_class=fmt
    )
    env_options(e, 0.8, "bars skipped before the evaluated part; 0 evaluates every bar")
    e.add_argument("--model", required=True, help="model.zip written by train")
    e.add_argument("--instrument", default=None, help="instrument to use (default: the first)")
    e.set_defaults(func=cmd_eval)

    b = sub.add_parser(
        "backtest", help="backtest a fixed rule and write a report", formatter_class=fmt
    )
    env_options(b, 0.8, "bars skipped before the evaluated part; 0 evaluates every bar")
    b.add_argument(
        "--rule",
        choices=["planted", "buy_and_hold"],
        default="planted",
        help="planted: the synthetic market's known rule; buy_and_hold: a constant exposure",
    )
    b.add_argument("--exposure", type=float, default=1.0, help="exposure of the rule, in [-1, 1]")
    b.add_argument("--instrument", default=None, help="instrument to use (default: the first)")
    b.set_defaults(func=cmd_backtest)

    n = sub.add_parser("bench", help="env throughput on this machine", formatter_class=fmt)
    n.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    n.add_argument("--steps", type=_int, default=200, help="env steps per measurement")
    n.set_defaults(func=cmd_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    prog = f"{PROG} {args.command}"
    try:
        validate(args)
        return int(args.func(args) or 0)
    except UsageError as exc:
        if args.debug:
            raise
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if args.debug:
            raise
        first = str(exc).splitlines()[0] if str(exc) else ""
        print(
            f"{prog}: error: {type(exc).__name__}: {first} (run again with --debug for the traceback)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
