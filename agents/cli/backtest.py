"""``gpu-trading-env eval`` (a saved model) and ``backtest`` (a fixed rule): backtest, then report."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from agents.cli.data import load_data, per_year_of, split_data
from agents.cli.options import UsageError
from agents.cli.report import single_report
from agents.cli.run_folder import claim_out
from gpu_trading_env.core.constants import N_PORTFOLIO_FEATURES


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
    )
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from agents import GpuDQN
    from agents.files.safe_archive import ArchiveError
    from agents.pipelines.backtest_policies import greedy_policy, known_rule

    data, part, per_year = evaluated_instrument(args)
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
    selection = getattr(model, "input_selection", None)
    if selection is not None:
        # The inputs chosen on the model's training bars, given to these bars the same way.
        from agents.pipelines.input_selection import InputSelection, apply_inputs

        try:
            part = apply_inputs(part, InputSelection.from_dict(selection))
        except ValueError as exc:
            raise UsageError(f"--model {args.model}: {exc}") from exc
    if model.observation_space.shape != (part.n_features + N_PORTFOLIO_FEATURES,):
        raise UsageError(
            f"--model {args.model} expects {model.observation_space.shape[0]} observation "
            f"values but the data gives {part.n_features + N_PORTFOLIO_FEATURES}: evaluate on data with the "
            "features the model was trained on"
        )
    if int(model.action_space.n) != args.config.n_actions:
        # train's env changed (three actions by default, five and 45 before); a model of
        # another layout would get actions this env does not have.
        raise UsageError(
            f"--model {args.model} acts in {int(model.action_space.n)} actions but this env has "
            f"{args.config.n_actions} (exposure levels x order types x sub-actions): pass the "
            "--env settings it was trained with, e.g. --env 'exposure_levels=(-1.0,-0.5,0.0,"
            "0.5,1.0)' for the five exposures of earlier releases, adding "
            "'order_cost_bps=(1.0,0.5,1.5)' sub_actions=3 for EnvConfig's 45-action layout"
        )
    return backtest_report(
        args,
        data,
        part,
        per_year,
        greedy_policy(model),
        "GpuDQN backtest",
        {"model": str(args.model)},
        rule=known_rule(part, args.config),
    )


def cmd_backtest(args: argparse.Namespace) -> int:
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
    )
