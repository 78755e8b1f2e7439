"""``gpu-trading-env eval`` (a saved model) and ``backtest`` (a fixed rule): backtest, then report.

Both take one instrument or several: a model of several instruments (its run's ``metrics.json``
says ``"kind": "portfolio"``) or several ``--data`` files go through the portfolio env, beside
flat and equal-weight buy-and-hold (:func:`portfolio_backtest_report`).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from agents.cli.data import (
    is_synthetic,
    load_data,
    per_year_of,
    portfolio_data_of,
    runs_portfolio,
    split_data,
)
from agents.cli.metrics_schema import PORTFOLIO_BACKTEST_KEYS
from agents.cli.options import UsageError
from agents.cli.report import PortfolioPage, describe_data, single_report, write_portfolio_page
from agents.cli.run_folder import claim_out
from agents.files.side_files import ArchiveError, read_side_json


def evaluated_part(data: Any, fraction: float) -> Any:
    if fraction == 0.0:
        return data
    return split_data(data, fraction, "pass --train-fraction 0 to evaluate every bar")[1]


def _load_model(args: argparse.Namespace) -> Any:
    """``--model`` loaded for inference on the CPU; a refused or damaged file is one line."""
    from agents import GpuDQN

    try:
        return GpuDQN.load(
            args.model,
            device="cpu",
            allow_pickle=args.allow_pickle,
            for_inference=True,
            tensorboard_log=None,  # eval writes no training logs
        )
    except ArchiveError as exc:  # refused pickle, damaged file: one line naming the file
        raise UsageError(f"--model: {exc}") from exc


def evaluated_instrument(args: argparse.Namespace) -> tuple[Any, Any, float]:
    """``(data, part, bars per year)``: the data, the evaluated bars of ``--instrument``."""
    data = load_data(args)
    part = evaluated_part(data, args.train_fraction).instrument(args.instrument or 0)
    return data, part, per_year_of(args, part)


def backtest_report(
    args: argparse.Namespace,
    data: Any,
    part: Any,
    per_year: float,
    policy: Any,
    title: str,
    extra: dict[str, Any],
    rule: Any = None,
    deployed: str = "",
) -> int:
    """Backtest ``policy`` on ``part`` and write the report to ``--out`` (or a new folder,
    :func:`~agents.cli.run_folder.claim_out`)."""
    from gpu_trading_env.reports.backtest import backtest

    out = claim_out(args, args.command)
    result = backtest(policy, part, args.config, per_year=per_year)
    what = (
        "every bar"
        if args.train_fraction == 0.0
        else f"the last {1 - args.train_fraction:.0%} of the bars"
    )
    single_report(
        out,
        result,
        data,
        args,
        args.config,
        per_year,
        title,
        extra,
        rule=rule,
        heading=f"{title} on {what}",
        evaluated=part,
        deployed=deployed or title,
        window=f"on {what}",
    )
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    """Backtest a saved model on the evaluated bars, in the env :meth:`GpuDQN.env_setup` gives
    (the data with the model's input selection, the model's saved EnvConfig with the
    ``--env`` fields and ``--episode-length`` given on the command line); a file saved without
    an EnvConfig is evaluated in the command line's env. A model of several instruments is
    evaluated on them (:func:`_eval_portfolio`), by its run's metrics.json or its own file."""
    if args.portfolio:
        return _eval_portfolio(args, saved_portfolio_setup(Path(args.model)))
    from agents.cli.options import parse_env_overrides
    from agents.pipelines.backtest_policies import greedy_policy, known_rule

    model = _load_model(args)
    if model.portfolio_setup is not None:  # a model of several, its metrics.json not beside it
        return _eval_portfolio(args, model.portfolio_setup, model)
    # The bars are read with the columns the model was trained on beside the built-in features.
    saved = list(getattr(model, "extra_features", []))
    if args.features is not None and list(args.features) != saved:
        raise UsageError(
            f"--features {' '.join(args.features)}: the model {args.model} was trained on "
            f"{saved or 'no extra columns'}; leave --features out (eval reads the model's)"
        )
    if saved and not args.data:
        raise UsageError(
            f"--model {args.model} reads the extra feature column(s) {saved}: pass --data, the "
            "bars with those columns"
        )
    args.features = saved or None
    data, part, per_year = evaluated_instrument(args)
    if model.env_config is not None:
        given = {pair.partition("=")[0] for pair in args.env or []}
        overrides = {k: v for k, v in parse_env_overrides(args.env).items() if k in given}
        if args.episode_length is not None:  # given: it replaces the model's
            overrides["episode_length"] = args.episode_length
        config, hint = None, ""
    else:
        overrides, config = {}, args.config
        hint = (
            " (the file carries no env configuration, so it is evaluated in the --env "
            "settings: pass those it was trained with)"
        )
    try:
        setup = model.env_setup(part, config, **overrides)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"--model {args.model}: {exc}{hint}") from exc
    args.config = setup.config  # the report states the env the model was evaluated in
    return backtest_report(
        args,
        data,
        setup.data,
        per_year,
        greedy_policy(model),
        "GpuDQN backtest",
        {"model": str(args.model)},
        rule=known_rule(setup.data, setup.config),
        deployed=f"the saved model {Path(args.model).name}",
    )


def cmd_backtest(args: argparse.Namespace) -> int:
    from agents.pipelines.backtest_policies import has_known_rule
    from gpu_trading_env.reports.backtest import exposure_policy

    data = load_data(args)
    if runs_portfolio(args, data):
        return _backtest_portfolio(args, data)
    part = evaluated_part(data, args.train_fraction).instrument(args.instrument or 0)
    per_year = per_year_of(args, part)
    rule = args.rule
    if rule is None:
        # Only the planted market has a rule known to work; on real bars, the rule a newcomer
        # can judge anything against is holding the instrument.
        rule = "planted" if has_known_rule(part) else "buy_and_hold"
    if rule == "planted":
        if not has_known_rule(part):
            raise UsageError(
                "--rule planted: this data has no planted rule (only the built-in synthetic "
                "market has one); pass --rule buy_and_hold"
            )
        from gpu_trading_env.data.synthetic import planted_rule_exposure

        exposure = args.exposure * planted_rule_exposure(part)
    else:
        exposure = np.full(part.n_bars, args.exposure)
    return backtest_report(
        args,
        data,
        part,
        per_year,
        exposure_policy(exposure, args.config),
        f"rule {rule}",
        {"rule": rule, "exposure": args.exposure},
        deployed=f"the rule {rule} at exposure {args.exposure:g}",
    )


# ------------------------------------------------------------------ several instruments


def portfolio_backtest_report(
    args: argparse.Namespace,
    data: Any,
    pdata: Any,
    env: Any,
    policy: Any,
    row: tuple[str, str],
    text: tuple[str, str, str],
    extra: dict[str, Any],
) -> int:
    """Backtest ``policy`` (levels int [T, K] or a level policy) in the portfolio env ``env``
    over ``pdata``'s bars after ``--train-fraction``, beside flat and equal-weight buy-and-hold;
    write the report (``backtest_report``'s for several instruments).

    :param row: the policy's legend and metrics.json's key (``<key>_backtest``).
    :param text: the report's title, the verdict (before " on <bars>") and the deployed policy.
    """
    from agents.pipelines.portfolio_backtest import (
        backtest_portfolios,
        buy_and_hold_portfolio,
        flat_level,
    )

    n = pdata.n_bars
    start = int(math.floor(args.train_fraction * n))
    if n - start < 3:
        raise UsageError(
            f"--train-fraction {args.train_fraction} leaves {n - start} of the {n} bars: allowed "
            "is a fraction that leaves at least 3"
        )
    flat = np.full((n, pdata.n_instruments), flat_level(env), dtype=np.int64)
    tested, flat_bt = backtest_portfolios([policy, flat], pdata, env, start, n, args.bars_per_year)
    bh = buy_and_hold_portfolio(pdata, env, start, n, args.bars_per_year)
    out = claim_out(args, args.command)
    what = "every bar" if start == 0 else f"the bars after the first {args.train_fraction:.0%}"
    (legend, key), (title, verdict, deployed) = row, text
    page = PortfolioPage(
        title=f"{title}, {pdata.n_instruments} instruments",
        heading=f"backtest of {what}",
        verdict=f"{verdict} on {what}",
        rows=[(legend, tested), ("flat", flat_bt), ("equal-weight buy and hold", bh)],
        weights=(tested, key),
        notes=[describe_data(data)],
        metrics={
            "kind": "portfolio",
            **extra,
            "instruments": list(pdata.instruments),
            "window": [start, n],
            f"{key}_backtest": tested.to_dict(),
            "flat": flat_bt.to_dict(),
            "buy_and_hold": bh.to_dict(),
        },
        capital=float(env.initial_capital),
        synthetic=is_synthetic(data),
        deployed=deployed,
        window=f"on {what}",
        keys=PORTFOLIO_BACKTEST_KEYS,
    )
    write_portfolio_page(out, page)
    return 0


def saved_portfolio_setup(model: Path) -> dict[str, Any]:
    """The env of a model of several instruments, from its run's ``metrics.json``: as
    ``GpuDQN.portfolio_setup`` (the PortfolioConfig's fields, the instruments, the kept
    columns), which files saved before it held are without.

    :raises UsageError: where the file is missing, is not such a run's, or holds no settings.
    """
    path = model.parent / "metrics.json"
    try:
        metrics = read_side_json(path)
    except FileNotFoundError:
        raise UsageError(
            f"--model {model}: eval of several instruments reads the run's {path}, which is "
            "missing: pass the model.zip of a train folder of several instruments"
        ) from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"--model {model}: {path} is not JSON ({exc})") from None
    except ArchiveError as exc:
        raise UsageError(f"--model {model}: {exc}") from None
    kind = metrics.get("kind") if isinstance(metrics, dict) else None
    if kind != "portfolio":
        raise UsageError(
            f"--model {model}: {path} is not the run of a train of several instruments (its "
            f"'kind' is {kind!r}), which eval --portfolio takes; leave out --portfolio for a "
            "model of one instrument"
        )
    try:
        inputs = metrics.get("inputs")
        kept = None if inputs is None else list(inputs["kept"])
        return {
            "env": dict(metrics["config"]["env"]),
            "instruments": metrics["instruments"],
            "kept": kept,
        }
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"--model {model}: {path} holds no valid run settings ({exc})") from None


def _eval_portfolio(args: argparse.Namespace, setup: dict[str, Any], model: Any = None) -> int:
    """eval of a model of several instruments (``setup``: its env, as ``GpuDQN.portfolio_setup``;
    ``model``: loaded already, or None) on the bars of ``--data`` (its instruments, in its
    order) in its own env, the columns it does not see zeroed."""
    from agents.algorithm.saved_env import portfolio_env_setup
    from agents.pipelines.portfolio_training import greedy_level_policy

    for option, given in (
        ("--instrument", args.instrument is not None),
        ("--env", bool(args.env)),
        ("--episode-length", args.episode_length is not None),
    ):
        if given:
            raise UsageError(
                f"{option} is invalid with eval --portfolio (a model of several instruments): it "
                "is evaluated on every instrument it trained on, in its own env; leave it out"
            )
    names = f"--model {args.model} (trained on {', '.join(setup['instruments'])})"
    data = load_data(args)
    try:
        seen, env = portfolio_env_setup(portfolio_data_of(args, data, names), setup, {})
    except (TypeError, ValueError) as exc:
        raise UsageError(f"--model {args.model}: {exc}") from None
    model = _load_model(args) if model is None else model
    nvec = getattr(model.action_space, "nvec", None)
    if nvec is None or tuple(nvec) != (env.n_levels,) * seen.n_instruments:
        raise UsageError(
            f"--model {args.model}: its action space {model.action_space} is not the "
            f"portfolio's MultiDiscrete([{env.n_levels}] * {seen.n_instruments})"
        )
    return portfolio_backtest_report(
        args,
        data,
        seen,
        env,
        greedy_level_policy(model.q_net),
        ("model", "model"),
        (
            "GpuDQN portfolio backtest",
            f"the saved model of {args.model}",
            f"the saved model {args.model}",
        ),
        {"model": str(args.model)},
    )


def _backtest_portfolio(args: argparse.Namespace, data: Any) -> int:
    """backtest on several instruments: ``--rule buy_and_hold`` at ``--exposure`` (one of the
    env's levels) in each, rebalanced every bar under the gross cap ``max_leverage``."""
    if args.instrument is not None:
        raise UsageError(
            "--instrument is invalid with backtest --portfolio: every instrument of --data is "
            "traded; leave it out"
        )
    rule = args.rule or "buy_and_hold"
    if rule != "buy_and_hold":
        raise UsageError(
            f"--rule {rule} is invalid with --portfolio (several instruments): allowed is "
            "buy_and_hold (a planted rule belongs to the built-in single-instrument market)"
        )
    env = args.config
    levels = [float(x) for x in env.exposure_levels]
    if float(args.exposure) not in levels:
        raise UsageError(
            f"--exposure {args.exposure} is invalid with --portfolio (several instruments): "
            f"allowed is one of the env's exposure levels {levels} (--env exposure_levels=... "
            "sets them)"
        )
    pdata = portfolio_data_of(args, data)
    name = f"rule {rule} (exposure {args.exposure:g} each)"
    held = np.full((pdata.n_bars, pdata.n_instruments), levels.index(float(args.exposure)))
    return portfolio_backtest_report(
        args,
        data,
        pdata,
        env,
        held,
        (name, "rule"),
        ("Portfolio backtest", f"{name}, rebalanced every bar under the gross cap,", name),
        {"rule": rule, "exposure": float(args.exposure)},
    )
