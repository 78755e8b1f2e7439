"""``gpu-trading-env eval --portfolio``: a model that ``train --portfolio`` saved, backtested on
the last part of the bars of ``--data`` (the same instruments, in the same order) in the env it
was trained in, beside flat and equal-weight buy-and-hold.

The run's ``metrics.json`` beside ``model.zip`` holds what the model needs besides its weights:
the instruments, the env's settings and the input columns it sees (the others are zeros).
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agents.cli.data import is_synthetic
from agents.cli.options import UsageError
from agents.cli.portfolio_train import portfolio_data_of
from agents.cli.report import describe_data
from agents.cli.run_folder import claim_out
from agents.files.side_files import ArchiveError, read_side_json

__all__ = ["SavedPortfolioRun", "cmd_eval_portfolio", "input_mask", "saved_portfolio_run"]


@dataclass(frozen=True)
class SavedPortfolioRun:
    """What ``metrics.json`` of a ``train --portfolio`` run says about its model.

    :param instruments: the K instruments, in the model's order.
    :param env: the training env's ``PortfolioConfig``.
    :param kept: the ``instrument:feature`` columns the model sees; None: every column.
    """

    instruments: tuple[str, ...]
    env: Any
    kept: list[str] | None


def saved_portfolio_run(model: Path) -> SavedPortfolioRun:
    """The run of ``model`` from the ``metrics.json`` beside it.

    :raises UsageError: where the file is missing, is not a portfolio run's, or its env
        settings are refused.
    """
    from gpu_trading_env.core.portfolio_config import PortfolioConfig

    path = model.parent / "metrics.json"
    try:
        metrics = read_side_json(path)
    except FileNotFoundError:
        raise UsageError(
            f"--model {model}: eval --portfolio reads the run's {path}, which is missing: pass "
            "the model.zip of a train --portfolio folder"
        ) from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"--model {model}: {path} is not JSON ({exc})") from None
    except ArchiveError as exc:
        raise UsageError(f"--model {model}: {exc}") from None
    if not isinstance(metrics, dict) or metrics.get("kind") != "portfolio":
        raise UsageError(
            f"--model {model}: {path} is not a train --portfolio run's (its 'kind' is "
            f"{metrics.get('kind') if isinstance(metrics, dict) else None!r}): eval --portfolio "
            "takes the model of such a run"
        )
    try:
        env = PortfolioConfig(**metrics["config"]["env"])
        inputs = metrics.get("inputs")
        kept = None if inputs is None else list(inputs["kept"])
        return SavedPortfolioRun(tuple(metrics["instruments"]), env, kept)
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"--model {model}: {path} holds no valid run settings ({exc})") from None


def input_mask(kept: list[str] | None, data: Any) -> np.ndarray:
    """bool [K, F]: the columns of ``data`` named in ``kept`` (every column where None).

    :raises UsageError: naming a kept column the data has no feature of.
    """
    mask = np.zeros((data.n_instruments, data.n_features), dtype=bool)
    if kept is None:
        mask[:] = True
        return mask
    for name in kept:
        instrument, _, feature = name.partition(":")
        if instrument not in data.instruments or feature not in data.feature_names:
            raise UsageError(
                f"the model sees column {name!r}, which --data has no feature of: allowed are "
                "bars with the features the model was trained on"
            )
        mask[data.instruments.index(instrument), data.feature_names.index(feature)] = True
    return mask


def _refuse_options(args: argparse.Namespace) -> None:
    for option, given in (
        ("--instrument", args.instrument is not None),
        ("--env", bool(args.env)),
        ("--episode-length", args.episode_length is not None),
    ):
        if given:
            raise UsageError(
                f"{option} is invalid with eval --portfolio: the model is evaluated on every "
                "instrument it trained on, in its own env (metrics.json); leave it out"
            )


def _load_model(args: argparse.Namespace, k: int, levels: int) -> Any:
    from agents import GpuDQN

    try:
        model = GpuDQN.load(
            args.model,
            device="cpu",
            allow_pickle=args.allow_pickle,
            for_inference=True,
            tensorboard_log=None,
        )
    except ArchiveError as exc:
        raise UsageError(f"--model: {exc}") from exc
    nvec = getattr(model.action_space, "nvec", None)
    if nvec is None or tuple(nvec) != (levels,) * k:
        raise UsageError(
            f"--model {args.model}: its action space {model.action_space} is not the portfolio's "
            f"MultiDiscrete([{levels}] * {k})"
        )
    return model


def cmd_eval_portfolio(args: argparse.Namespace) -> int:
    """``eval --portfolio``: backtest the saved model on the bars after ``--train-fraction``
    beside flat and equal-weight buy-and-hold; write the report; exit 0."""
    from agents.cli.portfolio_report import PortfolioPage, write_portfolio_page
    from agents.pipelines.portfolio_backtest import (
        backtest_portfolios,
        buy_and_hold_portfolio,
        flat_level,
    )
    from agents.pipelines.portfolio_inputs import zero_columns
    from agents.pipelines.portfolio_training import greedy_level_policy

    _refuse_options(args)
    run = saved_portfolio_run(Path(args.model))
    data, pdata = portfolio_data_of(args)
    if pdata.instruments != run.instruments:
        raise UsageError(
            f"--data holds the instruments {list(pdata.instruments)}, the model was trained on "
            f"{list(run.instruments)}: allowed are the same instruments in the same order"
        )
    mask = input_mask(run.kept, pdata)
    seen = zero_columns(pdata, mask)
    model = _load_model(args, pdata.n_instruments, run.env.n_levels)
    start = int(math.floor(args.train_fraction * pdata.n_bars))
    if pdata.n_bars - start < 3:
        raise UsageError(
            f"--train-fraction {args.train_fraction} leaves {pdata.n_bars - start} of the "
            f"{pdata.n_bars} bars: allowed is a fraction that leaves at least 3"
        )
    flat = np.full((pdata.n_bars, pdata.n_instruments), flat_level(run.env), dtype=np.int64)
    network, flat_bt = backtest_portfolios(
        [greedy_level_policy(model.q_net), flat],
        seen,
        run.env,
        start,
        pdata.n_bars,
        args.bars_per_year,
    )
    bh = buy_and_hold_portfolio(pdata, run.env, start, pdata.n_bars, args.bars_per_year)
    out = claim_out(args, "eval")
    what = "every bar" if start == 0 else f"the bars after the first {args.train_fraction:.0%}"
    page = PortfolioPage(
        title=f"GpuDQN portfolio backtest, {len(pdata.instruments)} instruments",
        heading=f"backtest of {what}",
        verdict=f"the saved model of {args.model} on {what}",
        rows=[("model", network), ("flat", flat_bt), ("equal-weight buy and hold", bh)],
        weights=(network, "model"),
        notes=[describe_data(data)],
        metrics={
            "kind": "portfolio",
            "model": str(args.model),
            "instruments": list(pdata.instruments),
            "window": [start, pdata.n_bars],
            "model_backtest": network.to_dict(),
            "flat": flat_bt.to_dict(),
            "buy_and_hold": bh.to_dict(),
        },
        capital=float(run.env.initial_capital),
        synthetic=is_synthetic(data),
        deployed=f"the saved model {args.model}",
        window=f"on {what}",
    )
    write_portfolio_page(out, page)
    return 0
