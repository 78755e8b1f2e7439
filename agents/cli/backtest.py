"""``gpu-trading-env eval`` (a saved model) and ``backtest`` (a fixed rule): backtest, then report."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from agents.cli.data import load_data, per_year_of, split_data
from agents.cli.options import UsageError
from agents.cli.report import single_report
from agents.cli.run_folder import claim_out


def evaluated_part(data: Any, fraction: float) -> Any:
    if fraction == 0.0:
        return data
    return split_data(data, fraction, "pass --train-fraction 0 to evaluate every bar")[1]


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
    an EnvConfig is evaluated in the command line's env."""
    if args.portfolio:
        from agents.cli.portfolio_eval import cmd_eval_portfolio

        return cmd_eval_portfolio(args)
    from agents import GpuDQN
    from agents.cli.options import parse_env_overrides
    from agents.files.safe_archive import ArchiveError
    from agents.pipelines.backtest_policies import greedy_policy, known_rule

    try:
        model = GpuDQN.load(
            args.model,
            device="cpu",
            allow_pickle=args.allow_pickle,
            for_inference=True,
            tensorboard_log=None,  # eval writes no training logs
        )
    except ArchiveError as exc:  # refused pickle, damaged file: one line naming the file
        raise UsageError(f"--model: {exc}") from exc
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
    if args.portfolio:
        from agents.cli.portfolio_backtest import cmd_backtest_portfolio

        return cmd_backtest_portfolio(args)
    from agents.pipelines.backtest_policies import has_known_rule
    from gpu_trading_env.reports.backtest import exposure_policy

    data, part, per_year = evaluated_instrument(args)
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
