"""``gpu-trading-env train``: GpuDQN on one split, model selection on a validation window, a report.

The training settings of ``train`` and ``walkforward`` from their options (:func:`train_settings`)
are here too; their defaults are :class:`~agents.pipelines.train_config.TrainConfig`'s.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agents.cli.data import (
    is_synthetic,
    load_data,
    per_year_of,
    portfolio_data_of,
    runs_portfolio,
    split_data,
)
from agents.cli.options import PROG, UsageError, tensorboard_installed
from agents.cli.report import describe_data, portfolio_report, single_report
from agents.cli.run_folder import CHECKPOINTS, claim_out
from agents.pipelines.train_config import CPU_TORCH_THREADS as CPU_TORCH_THREADS
from agents.pipelines.train_config import WALKFORWARD_CPU_TIMESTEPS as WALKFORWARD_CPU_TIMESTEPS
from agents.pipelines.train_config import TrainConfig, set_torch_threads

if TYPE_CHECKING:
    from agents.pipelines.train_result import TrainResult

# The device defaults (agents.pipelines.train_config), by name for the command line's help.
CPU_DEFAULTS = TrainConfig.device_defaults("cpu")
GPU_DEFAULTS = TrainConfig.device_defaults("cuda")
# Env steps a second with the defaults, an order of magnitude for the expected wall time of a
# large --timesteps (docs/PERFORMANCE.md).
TRAIN_RATE = {"cpu": 1_500.0, "gpu": 1.0e7}
# Runs expected to take longer than this get a warning with the expected wall time.
WARN_ABOVE_SECONDS = 3600.0


def train_settings(args: argparse.Namespace, device: str, timesteps_cpu: int) -> TrainConfig:
    """The ``TrainConfig`` of the training options (``device`` resolved); budgets not given are
    the device's defaults (``timesteps_cpu`` env steps on the CPU). Sets torch's threads to the
    config's."""
    given = argparse.Namespace(**{**vars(args), "device": device})
    settings = TrainConfig.from_options(given, timesteps_cpu)
    set_torch_threads(settings)
    rate = TRAIN_RATE["cpu" if device == "cpu" else "gpu"]
    seconds = int(settings.timesteps or 0) / rate
    if seconds > WARN_ABOVE_SECONDS:
        from agents.pipelines.progress import format_seconds

        print(
            f"warning: --timesteps {settings.timesteps:,} on {device}: expect about "
            f"{format_seconds(seconds)} of training (about {rate:,.0f} env steps/s with the "
            "defaults, docs/PERFORMANCE.md); Ctrl-C stops it",
            file=sys.stderr,
        )
    return settings


def resume_folder(given: str) -> Path:
    """The folder ``--resume`` names the checkpoints of: a train folder's ``checkpoints``, a
    checkpoints folder or one checkpoint (:func:`~agents.files.checkpoint.pinned_checkpoint`
    takes the newest complete one)."""
    base = Path(given)
    if not base.exists():
        raise UsageError(f"--resume {given}: no checkpoint folder {given!r}")
    return base / CHECKPOINTS if (base / CHECKPOINTS).is_dir() else base


def pin_resumed(stack: contextlib.ExitStack, given: str) -> Path:
    """The checkpoint ``--resume`` continues from, pinned until ``stack`` closes (a run still
    writing there does not prune it meanwhile); raises UsageError naming ``--resume``."""
    from agents.files.checkpoint import pinned_checkpoint
    from agents.files.safe_archive import ArchiveError

    try:
        return stack.enter_context(pinned_checkpoint(resume_folder(given)))
    except (ArchiveError, FileNotFoundError) as exc:
        raise UsageError(f"--resume {given}: {exc}") from exc


# The run identity's settings (agents.pipelines.model_selection) that an option sets.
RESUMED_OPTIONS = {
    "timesteps": "--timesteps",
    "num_envs": "--num-envs",
    "batch_size": "--batch-size",
    "buffer_size": "--buffer-size",
    "gradient_steps": "--gradient-steps",
    "learning_rate": "--learning-rate",
    "final_learning_rate": "--final-learning-rate",
    "gamma": "--gamma",
    "net_width": "--net-width",
    "weight_decay": "--weight-decay",
    "reward_scale": "--reward-scale",
    "eval_every": "--eval-every",
    "val_fraction": "--val-fraction",
    "curiosity": "--curiosity",
    "seed": "--seed",
}


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return "not given" if value is None else str(value)


def check_resumed_options(given: str, checkpoint: Path, settings: Any, args: Any) -> None:
    """Refuse ``--resume`` with a training option other than the checkpoint's run had: the
    resumed run must train as that run did. One line names each option, the checkpoint's value
    and the one given. Options that act only after training or on the files written
    (``--checkpoint-every``, ``--no-fallback``, ``--predictability-level``, ``--device``,
    ``--train-precision``) are honoured as given."""
    from agents.files.checkpoint import checkpoint_extra
    from agents.files.safe_archive import ArchiveError

    try:
        extra = checkpoint_extra(checkpoint)
    except (ArchiveError, FileNotFoundError) as exc:
        raise UsageError(f"--resume {given}: {exc}") from exc
    saved = extra.get("run") if isinstance(extra, dict) else None
    if not isinstance(saved, dict):
        raise UsageError(
            f"--resume {given}: {str(checkpoint)!r} is not a checkpoint of a train run (it holds "
            "no run settings); pass a folder that train --checkpoint-every wrote"
        )
    now = {key: getattr(settings, key) for key in RESUMED_OPTIONS if key != "seed"}
    now["seed"] = int(args.seed)
    differ = [
        f"{option} {_shown(saved[key])} (given: {_shown(now[key])})"
        for key, option in RESUMED_OPTIONS.items()
        if key in saved and saved[key] != now[key]
    ]
    if "config" in saved and saved["config"] != repr(args.config):
        differ.append("other --env / --episode-length settings")
    if differ:
        raise UsageError(
            f"--resume {given}: the checkpoint's run had {'; '.join(differ)}: pass the run's "
            "options to continue it, or leave out --resume to start a new run"
        )


def describe_inputs(kept: list[str], n_features: int, regime: str) -> str:
    """One line on what the input selection gave the network (``regime``: the forecast's name)."""
    from agents.pipelines.input_selection import REGIME_INPUT, kept_inputs_count

    text = kept_inputs_count([REGIME_INPUT if k == regime else k for k in kept], n_features)
    if not kept:
        text += ": nothing predicted the next return on the training bars"
    return text + " (--all-inputs gives every feature)"


def interrupted_note(out: Path, args: argparse.Namespace) -> str:
    """One line on what a train run stopped by Ctrl-C left to continue from."""
    from agents.files.checkpoint import INDEX_FILE, STEP_PREFIX

    written = sorted((out / CHECKPOINTS).glob(f"{STEP_PREFIX}*/{INDEX_FILE}"))
    if written:
        return (
            f"the newest checkpoint is {written[-1].parent}; train --resume {out} (with the same "
            "options) continues the run"
        )
    if args.resume is not None:
        # The checkpoint it started from is still there: "cannot be resumed" would be false.
        return (
            f"no new checkpoint was written in {out}; train --resume {args.resume} (with the same "
            "options) starts again from the checkpoint this run started from"
        )
    if args.checkpoint_every is None:
        return (
            "no checkpoint was written, so the run cannot be resumed: --checkpoint-every N "
            "writes one every N env steps, from which --resume continues"
        )
    return (
        f"no checkpoint was written yet (the first comes after {args.checkpoint_every:,} env "
        "steps, --checkpoint-every), so the run cannot be resumed"
    )


def _split_for_training(
    args: argparse.Namespace, data: Any
) -> tuple[Any, Any, float, dict[str, Any]]:
    """``(train_data, evaluated, per_year, instruments)``: the training and test bars of the one
    instrument (``--instrument``'s where given), their bars a year and the instrument by role."""
    used = data.instrument(args.instrument or 0)
    train_data, evaluated = split_data(
        used, args.train_fraction, "pass a fraction that leaves bars on both sides"
    )
    instruments = {"trained": list(train_data.instruments), "evaluated": used.instruments[0]}
    return train_data, evaluated, per_year_of(args, evaluated), instruments


def _check_checkpoint_options(args: argparse.Namespace, settings: TrainConfig) -> None:
    """Refuse a ``--checkpoint-every`` below 1, and checkpoints or ``--resume`` with
    ``--cross-fit`` (whose second network checkpoints do not hold)."""
    if args.checkpoint_every is not None and args.checkpoint_every < 1:
        raise UsageError(
            f"--checkpoint-every {args.checkpoint_every} is invalid: allowed is an integer >= 1"
        )
    if settings.cross_fit and (args.checkpoint_every is not None or args.resume is not None):
        raise UsageError(
            "--cross-fit trains a second network that checkpoints do not hold: it cannot be "
            "combined with --checkpoint-every or --resume"
        )


def _train_in_folder(
    args: argparse.Namespace,
    train_data: Any,
    evaluated: Any,
    settings: TrainConfig,
    per_year: float,
) -> tuple[TrainResult, Path]:
    """Claim ``--out`` and train there (from the ``--resume`` checkpoint, pinned meanwhile,
    where given); returns the run and its folder. On Ctrl-C says what there is to resume from."""
    from agents.pipelines.model_selection import train_selected

    with contextlib.ExitStack() as pins:
        resume = None
        if args.resume is not None:
            resume = pin_resumed(pins, args.resume)
            check_resumed_options(args.resume, resume, settings, args)
        out = claim_out(args, "train")
        if tensorboard_installed():
            settings.tensorboard_log = str(out / "tensorboard")
        try:
            run = train_selected(
                train_data,
                evaluated,
                args.config,
                settings,
                seed=args.seed,
                per_year=per_year,
                checkpoint_every=args.checkpoint_every,
                checkpoint_dir=out / CHECKPOINTS,
                resume_from=resume,
            )
        except KeyboardInterrupt:
            print(f"{PROG} train: {interrupted_note(out, args)}", file=sys.stderr)
            raise
    if args.checkpoint_every is not None:
        from agents.files.checkpoint import DEFAULT_KEEP, prune_checkpoints

        # The checkpoint resumed from was pinned while the run saved newer ones beside it.
        prune_checkpoints(out / CHECKPOINTS, DEFAULT_KEEP)
    return run, out


def _model_selection_text(run: TrainResult, settings: TrainConfig) -> str:
    """metrics.json's ``model_selection``: how the kept snapshot was chosen, in words."""
    if run.selected_step is None:
        return "no network trained (no input kept)"
    cross_fit = (
        f", and a second network's on the first {settings.val_fraction:.0%}"
        if run.cross_fit
        else ""
    )
    return (
        f"best validation Sharpe (last {settings.val_fraction:.0%} of the training bars"
        f"{cross_fit}), at step {run.selected_step}"
    )


def _train_metrics(
    run: TrainResult,
    args: argparse.Namespace,
    settings: TrainConfig,
    instruments: dict[str, Any],
) -> dict[str, Any]:
    """The run's part of metrics.json, in its order: device and budget, selection, costs, and
    the input selection where one ran (the data's fields are ``single_report``'s)."""
    summary = run.to_dict()
    extra = {
        "device": args.device,
        "num_envs": settings.num_envs,
        **{k: summary.pop(k) for k in ("timesteps", "train_seconds", "env_steps_per_second")},
        "seed": args.seed,
        "instruments": instruments,
        "model_selection": _model_selection_text(run, settings),
        **{k: v for k, v in summary.items() if k != "inputs"},
        "order_cost_bps": args.config.order_cost_bps,
    }
    if run.inputs is not None:
        extra["inputs"] = summary["inputs"]
    return extra


def _vs_known_rule(run: TrainResult, rule: Any) -> dict[str, float | None]:
    """The agent's out-of-sample total return and Sharpe as fractions of the known rule's
    (None where the rule's is zero)."""
    rule_return = rule.strategy.total_return
    rule_sharpe = rule.strategy.sharpe
    return {
        "agent_return_vs_known_rule": (
            run.test.strategy.total_return / rule_return if rule_return else None
        ),
        "agent_sharpe_vs_known_rule": (
            run.test.strategy.sharpe / rule_sharpe if rule_sharpe else None
        ),
    }


def cmd_train(args: argparse.Namespace) -> int:
    """``train``: train on one split, keep the snapshot best on validation (or a baseline),
    save model.zip and write the out-of-sample report; exit 0."""
    from agents.pipelines.backtest_policies import known_rule

    data = load_data(args)
    if runs_portfolio(args, data):
        return _train_portfolio(args, data)
    train_data, evaluated, per_year, instruments = _split_for_training(args, data)
    settings = train_settings(args, args.device, CPU_DEFAULTS["timesteps"])
    _check_checkpoint_options(args, settings)
    run, out = _train_in_folder(args, train_data, evaluated, settings, per_year)
    run.model.save(out / "model.zip")
    extra = _train_metrics(run, args, settings, instruments)
    if run.inputs is not None:
        from agents.pipelines.input_selection import REGIME_INPUT

        sel = run.inputs
        print(
            f"network inputs: {describe_inputs(list(sel.kept), len(sel.feature_names), REGIME_INPUT)}"
        )
    rule = known_rule(evaluated, args.config)
    if rule is not None:
        extra.update(_vs_known_rule(run, rule))
    # Before the summary, so that its last line is the report folder (as README shows).
    if settings.tensorboard_log is None:
        print(
            "TensorBoard logs not written: tensorboard is not installed (pip install tensorboard)"
        )
    single_report(
        out,
        run.test,
        data,
        args,
        args.config,
        per_year,
        "GpuDQN out-of-sample",
        extra,
        rule=rule,
        learning=run,
        evaluated=evaluated,
        trained=instruments["trained"],
    )
    return 0


# train's options that the run of several instruments has no use for, and their defaults: given
# there they are refused rather than ignored.
SINGLE_ENV_OPTIONS: dict[str, tuple[str, Any]] = {
    "resume": ("--resume", None),
    "checkpoint_every": ("--checkpoint-every", None),
    "instrument": ("--instrument", None),
    "cross_fit": ("--cross-fit", False),
    "curiosity": ("--curiosity", False),
}


def check_portfolio_options(args: argparse.Namespace) -> None:
    """Refuse train's single-env options on several instruments, one line naming the option."""
    for dest, (option, default) in SINGLE_ENV_OPTIONS.items():
        if getattr(args, dest, default) != default:
            raise UsageError(
                f"{option} is invalid with several instruments (--portfolio): it applies to "
                "one instrument's train; leave it out"
            )
    if args.predictability_level != TrainConfig().predictability_level:
        raise UsageError(
            f"--predictability-level {args.predictability_level} is invalid with several "
            "instruments (--portfolio): their validation test has no input selection; leave it out"
        )


def _train_portfolio(args: argparse.Namespace, data: Any) -> int:
    """train on several instruments: one policy over them on ``GpuPortfolio-v0``
    (:func:`~agents.pipelines.portfolio_training.train_portfolio`), model.zip, metrics.json
    and the report; exit 0."""
    from agents.pipelines.portfolio_training import (
        PortfolioTrainConfig,
        PortfolioTrainConfigError,
        check_portfolio_run,
        train_portfolio,
    )

    check_portfolio_options(args)
    pdata = portfolio_data_of(args, data)
    try:
        config = PortfolioTrainConfig.from_options(args, env=args.config)
        check_portfolio_run(pdata, config.resolved(args.device))
    except (PortfolioTrainConfigError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    out = claim_out(args, "train")
    result = train_portfolio(
        pdata,
        config,
        seed=args.seed,
        device=args.device,
        out=out,
        progress=not args.no_progress,
        per_year=args.bars_per_year,
    )
    notes = [
        describe_data(data),
        f"Instruments on one grid of {pdata.n_bars:,} bars"
        + (" (forward-filled where one had no bar: --align ffill)" if args.align else "")
        + f"; fit, validation and test bars: {result.splits.to_dict()}.",
        "Costs are in every curve: "
        f"{result.config.env.cost_bps} bps of each instrument's traded notional; buy and hold "
        "pays them once, to buy.",
        f"Sharpe ratios annualised with {result.test.per_year:,.1f} bars a year, zero risk-free "
        "rate.",
    ]
    portfolio_report(out, result, notes, synthetic=is_synthetic(data))
    return 0
