"""``gpu-trading-env train``: GpuDQN on one split, model selection on a validation window, a report.

The training budgets of ``train`` and ``walkforward`` (:func:`train_settings`) are here too.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from agents.cli.data import load_data, per_year_of, split_data
from agents.cli.options import UsageError, tensorboard_installed
from agents.cli.report import single_report
from agents.cli.run_folder import claim_out

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


def train_settings(args: argparse.Namespace, device: str, timesteps_cpu: int) -> Any:
    """``TrainSettings`` from the training options; budgets not given are the device's defaults
    (``timesteps_cpu`` env steps on the CPU)."""
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
        train_precision=args.train_precision,
        fallback=not args.no_fallback,
        net_width=args.net_width,
        weight_decay=args.weight_decay,
        verbose=args.verbose,
        progress_bar=not args.no_progress,
    )


def resume_folder(given: str) -> Path:
    """The checkpoint ``--resume`` names: in a train folder's ``checkpoints``, a checkpoints
    folder (the newest complete one) or one checkpoint."""
    from agents.checkpoint import resolve_checkpoint
    from agents.safe_archive import ArchiveError

    base = Path(given)
    folder = base / "checkpoints" if (base / "checkpoints").is_dir() else base
    try:
        return resolve_checkpoint(folder)
    except (ArchiveError, FileNotFoundError) as exc:
        raise UsageError(f"--resume {given}: {exc}") from exc


def cmd_train(args: argparse.Namespace) -> int:
    from agents.walkforward import known_rule, train_selected

    data = load_data(args)
    train_data, test_data = split_data(
        data, args.train_fraction, "pass a fraction that leaves bars on both sides"
    )
    per_year = per_year_of(args, data)
    settings = train_settings(args, args.device, CPU_DEFAULTS["timesteps"])
    resume = resume_folder(args.resume) if args.resume is not None else None
    if args.checkpoint_every is not None and args.checkpoint_every < 1:
        raise UsageError(
            f"--checkpoint-every {args.checkpoint_every} is invalid: allowed is an integer >= 1"
        )
    out = claim_out(args, "train")
    if tensorboard_installed():
        settings.tensorboard_log = str(out / "tensorboard")
    run = train_selected(
        train_data,
        test_data.instrument(0),
        args.config,
        settings,
        seed=args.seed,
        per_year=per_year,
        checkpoint_every=args.checkpoint_every,
        checkpoint_dir=out / "checkpoints",
        resume_from=resume,
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
        "kept_policy": run["kept"],
        "fallback_test": run["gate"],
        "network_strategy": run["network_test"].strategy.to_dict(),
        "last_model_strategy": run["last_test"].strategy.to_dict(),
    }
    if run["kept"] != "network":
        print(
            f"kept policy: {run['kept']} (the network did not beat it on the validation window; "
            "--no-fallback keeps the network)"
        )
    rule = known_rule(test_data.instrument(0), args.config)
    if rule is not None:
        rule_return = rule.strategy.total_return
        # The agent's out-of-sample total return as a fraction of the known rule's.
        extra["agent_return_vs_known_rule"] = (
            run["test"].strategy.total_return / rule_return if rule_return else None
        )
        rule_sharpe = rule.strategy.sharpe
        extra["agent_sharpe_vs_known_rule"] = (
            run["test"].strategy.sharpe / rule_sharpe if rule_sharpe else None
        )
    single_report(
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
