"""The options of the ``gpu-trading-env`` command: their meaning and their checks.

Every option is checked (:func:`validate`) before any work starts and before any folder is made;
a bad one raises :class:`UsageError`, which ``main`` prints as one line with exit code 2.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from gpu_runtime.device import cuda_available
from gpu_trading_env.core.config import EnvConfig

PROG = "gpu-trading-env"
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


# The commands' own env defaults: the reward is the portfolio's return after costs. EnvConfig
# keeps the source design's shaping on, and each term pays for something other than the return:
# - the diversity penalty fires on any two-sided strategy whose long/short mix is not exactly
#   balanced, and on staying out;
# - the risk penalty arrives one step after the trade that caused it;
# - the triple barrier's reward scale halves the loss of a bar that hits the stop and adds half
#   to one that hits the profit target, so every barrier hit pays about half its move: being in
#   a volatile market pays whatever its direction, and the agent traded a driftless random walk;
#   the barriers themselves close positions that the strategy meant to hold.
# All three stay available through --env (e.g. --env barriers=True).
# The actions are three exposure levels (short, flat, long) at the market order's cost. EnvConfig's 45 actions
# hold each exposure nine times (three order types that differ only in cost, three sub-actions
# that change nothing), and a Q-learner estimates each of the 45 from the transitions that took
# it: a ninth of the data per estimate, and argmax over nine noisy copies. On the market zoo
# that is the difference between finding an edge of a few basis points and trading noise.
TRAIN_ENV_DEFAULTS = {
    "diversity_penalty": 0.0,
    "risk_penalty_scale": 0.0,
    "barriers": False,
    "order_cost_bps": (1.0,),
    "sub_actions": 1,
    # Short, flat, long: each exposure's value is learned from a third of the transitions
    # instead of a fifth; the half exposures added nothing on the zoo's markets that the
    # weak edges did not pay for (docs/ZOO.md, "Validation window and actions").
    "exposure_levels": (-1.0, 0.0, 1.0),
}


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


# Upper bounds of the integer options: far above any useful run, low enough that a stray digit
# or a unit mix-up (10000000000000 env steps: 200,000 hours at the quickstart's CPU rate) is an
# error before any work, not a run that never ends.
INT_RANGES: dict[str, tuple[int, int, str]] = {
    "timesteps": (1, 10**10, ""),
    "num_envs": (1, 2**24, ""),
    "batch_size": (1, 2**20, ""),
    "gradient_steps": (1, 1024, ""),
    "eval_every": (1, 10**10, "env steps between snapshots; default a tenth of --timesteps"),
    "steps": (1, 10**6, "env steps per measurement"),
    "folds": (1, 1000, "test windows"),
    "episode_length": (2, 10**8, "bars per episode"),
    "train_bars": (2, 10**9, "bars"),
    "test_bars": (2, 10**9, "bars"),
    "torch_threads": (1, 1024, "1 is fastest for the CPU defaults' small batches"),
    "seed": (0, 2**32 - 1, "NumPy's seed range"),
    "seeds": (0, 2**32 - 1, "NumPy's seed range"),
    "runs_per_device": (1, 256, "runs at a time on each device"),
}


def _check_int(name: str, value: int) -> None:
    lo, hi, hint = INT_RANGES[name]
    if not hint:  # a training budget: its hint is the device defaults, from the code
        from agents.cli.train import CPU_DEFAULTS, GPU_DEFAULTS

        hint = f"default {CPU_DEFAULTS[name]:,} on the CPU, {GPU_DEFAULTS[name]:,} on a GPU"
    _check(lo <= value <= hi, "--" + name.replace("_", "-"), value, f"{lo:,} to {hi:,} ({hint})")


def validate(args: argparse.Namespace) -> None:
    """Every numeric option and every path, before any work or folder."""
    c = args.command
    for name in INT_RANGES:
        v = getattr(args, name, None)
        for one in v if isinstance(v, list) else [v]:
            if one is not None:
                _check_int(name, one)
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
    for name, allowed in (
        ("predictability_level", "[0, 1) (0 turns the test off)"),
        ("weight_decay", "a number in [0, 1)"),
    ):
        if getattr(args, name, None) is not None:
            value = getattr(args, name)
            _check(0.0 <= value < 1.0, "--" + name.replace("_", "-"), value, allowed)
    if getattr(args, "val_fraction", None) is not None:
        _check(0.0 < args.val_fraction <= 0.5, "--val-fraction", args.val_fraction, "(0, 0.5]")
    if getattr(args, "learning_rate", None) is not None:
        lr = args.learning_rate
        _check(math.isfinite(lr) and lr > 0, "--learning-rate", lr, "a finite number > 0")
    if getattr(args, "net_width", None) is not None:
        _check(
            args.net_width == 0 or 2 <= args.net_width <= 4096,
            "--net-width",
            args.net_width,
            "0 (no hidden layers) or an integer in [2, 4096]",
        )
    if getattr(args, "final_learning_rate", None) is not None:
        flr = args.final_learning_rate
        _check(
            math.isfinite(flr) and flr >= 0, "--final-learning-rate", flr, "a finite number >= 0"
        )
    if getattr(args, "reward_scale", None) is not None:
        _check(
            math.isfinite(args.reward_scale) and args.reward_scale > 0,
            "--reward-scale",
            args.reward_scale,
            "a finite number > 0",
        )
    if getattr(args, "gamma", None) is not None:
        _check(0.0 < args.gamma <= 1.0, "--gamma", args.gamma, "a number in (0, 1]")
    if getattr(args, "exposure", None) is not None:
        _check(-1.0 <= args.exposure <= 1.0, "--exposure", args.exposure, "a number in [-1, 1]")
    if getattr(args, "fill_volume", None) is not None:
        _check(
            math.isfinite(args.fill_volume) and args.fill_volume >= 0,
            "--fill-volume",
            args.fill_volume,
            "a number >= 0",
        )
    if getattr(args, "bars_per_year", None) is not None:
        bpy = args.bars_per_year
        _check(math.isfinite(bpy) and bpy > 0, "--bars-per-year", bpy, "a finite number > 0")
    for pair in getattr(args, "column", None) or []:
        field, sep, name = pair.partition("=")
        if not sep or field.lower() not in ("open", "high", "low", "close", "volume") or not name:
            raise UsageError(
                f"--column {pair!r} is invalid: pass FIELD=NAME with FIELD one of open, high, "
                "low, close, volume, e.g. --column 'close=Adj Close'"
            )
    for path in getattr(args, "data", None) or []:
        if Path(path).is_dir():
            raise UsageError(f"--data {path}: is a folder; pass the CSV or Parquet files in it")
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
