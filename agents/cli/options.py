"""The options of the ``gpu-trading-env`` command: their meaning and their checks.

Every option is checked (:func:`validate`) before any work starts and before any folder is made;
a bad one raises :class:`UsageError`, which ``main`` prints as one line with exit code 2.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from agents.pipelines import train_config
from agents.pipelines.train_config import (
    EPISODE_LENGTH,
    TrainConfig,
    TrainConfigError,
    option_fields,
    option_name,
)
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


def parse_env_overrides(pairs: list[str] | None) -> dict[str, Any]:
    """``["key=value", ...]`` into EnvConfig overrides of its defaults (values parsed as Python
    literals)."""
    try:
        return train_config.parse_env_overrides(pairs)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def env_config(args: argparse.Namespace) -> EnvConfig:
    """The EnvConfig of a command: ``--episode-length`` or ``--env episode_length=N``
    (:data:`EPISODE_LENGTH` where neither is given; both are refused) and the ``--env``
    overrides."""
    overrides = parse_env_overrides(args.env)
    length = EPISODE_LENGTH if args.episode_length is None else args.episode_length
    if "episode_length" in overrides:
        if args.episode_length is not None:
            raise UsageError(
                f"--episode-length {args.episode_length} and --env "
                f"episode_length={overrides['episode_length']!r} both set the episode length: "
                "pass one of them"
            )
        length = overrides.pop("episode_length")
        lo, hi, hint = INT_RANGES["episode_length"]
        if isinstance(length, int) and not isinstance(length, bool):  # else EnvConfig names it
            _check(
                lo <= length <= hi, "--env episode_length =", length, f"{lo:,} to {hi:,} ({hint})"
            )
    try:
        return EnvConfig(episode_length=length, **overrides)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"--env / --episode-length: {exc}") from None


def portfolio_env(args: argparse.Namespace) -> Any:
    """The PortfolioConfig of a run of several instruments: ``--episode-length`` and the ``--env``
    overrides of PortfolioConfig's fields."""
    from agents.pipelines.portfolio_train_config import portfolio_env_config

    length = EPISODE_LENGTH if args.episode_length is None else args.episode_length
    try:
        return portfolio_env_config(length, args.env)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


# ---------------------------------------------------------------------- option checks


def _check(ok: bool, option: str, value: Any, allowed: str) -> None:
    if not ok:
        raise UsageError(f"{option} {value} is invalid: allowed is {allowed}")


# Upper bounds of the integer options: far above any useful run, low enough that a stray digit
# or a unit mix-up (10000000000000 env steps: 200,000 hours at the quickstart's CPU rate) is an
# error before any work, not a run that never ends.
INT_RANGES: dict[str, tuple[int, int, str]] = {
    "steps": (1, 10**6, "env steps per measurement"),
    "folds": (1, 1000, "test windows"),
    "episode_length": (2, 10**8, "bars per episode"),
    "train_bars": (2, 10**9, "bars"),
    "test_bars": (2, 10**9, "bars"),
    "seed": (0, 2**32 - 1, "NumPy's seed range"),
    "seeds": (0, 2**32 - 1, "NumPy's seed range"),
    "runs_per_device": (1, 256, "runs at a time on each device"),
}


def _check_int(name: str, value: int) -> None:
    lo, hi, hint = INT_RANGES[name]
    _check(lo <= value <= hi, "--" + name.replace("_", "-"), value, f"{lo:,} to {hi:,} ({hint})")


def _check_training(args: argparse.Namespace) -> None:
    """The training options given, by TrainConfig's own checks (``--device`` is resolved
    apart)."""
    for f in option_fields():
        value = getattr(args, f.name, None)
        if f.name == "device" or value is None or isinstance(value, bool):
            continue
        try:
            TrainConfig.check(f.name, value)
        except TrainConfigError as exc:
            _check(False, option_name(f), value, exc.allowed)


def _check_seeds(seeds: Any) -> None:
    """Distinct ``--seeds``, checked before any work: walkforward trained every fold before a
    repeat failed it."""
    if isinstance(seeds, list) and len(set(seeds)) != len(seeds):
        twice = sorted({s for s in seeds if seeds.count(s) > 1})
        raise UsageError(
            f"--seeds {seeds} is invalid: a seed is repeated ({', '.join(map(str, twice))}); "
            "allowed are distinct seeds, each trains its own model"
        )


def validate(args: argparse.Namespace) -> None:
    """Every numeric option and every path, before any work or folder."""
    c = args.command
    for name in INT_RANGES:
        v = getattr(args, name, None)
        for one in v if isinstance(v, list) else [v]:
            if one is not None:
                _check_int(name, one)
    _check_seeds(getattr(args, "seeds", None))
    _check_training(args)
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
    for flag in ("sep", "decimal", "thousands"):
        char = getattr(args, flag, None)
        if char is not None and len(char) != 1:
            _check(False, f"--{flag}", repr(char), "one character, e.g. ';' or ','")
    if getattr(args, "max_filled", None) is not None:
        if getattr(args, "align", None) is None:
            raise UsageError("--max-filled is invalid without --align ffill: it bounds the fill")
        mf = args.max_filled
        _check(0.0 <= mf <= 1.0, "--max-filled", mf, "a share in [0, 1], e.g. 0.3")
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
        _check_portfolio_switches(args)
        # A portfolio's env is a PortfolioConfig (zoo --portfolio builds its own).
        args.config = portfolio_env(args) if args.portfolio else env_config(args)


def _check_portfolio_switches(args: argparse.Namespace) -> None:
    """Set ``args.portfolio``: the K-instrument path, by the number of instruments (several
    ``--data`` files and no ``--instrument``; eval: the model's run), or ``--portfolio``.
    Refuse the portfolio's own options on the one-instrument path."""
    if args.command == "eval":
        args.portfolio = args.portfolio or saved_kind(args.model) == "portfolio"
    else:
        several = len(args.data or []) > 1 and args.instrument is None
        args.portfolio = args.portfolio or several
    if args.portfolio:
        if getattr(args, "features", None):
            raise UsageError(
                "--features is invalid with --portfolio or several instruments: the portfolio env reads the "
                "built-in features only (train one instrument with --features, or leave it out)"
            )
        return
    if getattr(args, "align", None) is not None:
        raise UsageError(
            "--align ffill is invalid with one instrument: it aligns the instruments of several "
            "--data files (or --portfolio)"
        )
    for flag in (
        "no_branch_rewards",
        "no_instrument_encoder",
        "no_flat_unpredicted",
        "no_branch_inputs",
    ):
        if getattr(args, flag, False):
            raise UsageError(
                f"--{flag.replace('_', '-')} is invalid with one instrument: it switches off a "
                "part of the branching learner of several instruments"
            )


def saved_kind(model: Path) -> str | None:
    """The ``kind`` the run folder of ``model`` records in its ``metrics.json`` (``"portfolio"``
    for a run of several instruments); None where there is no such file or it is unreadable
    (the model's load says what is wrong)."""
    from agents.files.side_files import ArchiveError, read_side_json

    try:
        metrics = read_side_json(Path(model).parent / "metrics.json")
    except (OSError, ValueError, ArchiveError):  # the model's own load reports what is wrong
        return None
    return metrics.get("kind") if isinstance(metrics, dict) else None


def resolve_model_path(given: str) -> Path:
    """A saved model: ``DIR/model.zip``, ``DIR/model`` (SB3 adds .zip) or ``DIR``."""
    p = Path(given)
    for cand in (p, p.with_name(p.name + ".zip"), p / "model.zip"):
        if cand.is_file():
            return cand
    raise UsageError(f"--model {given}: no such file (pass the model.zip that train wrote)")
