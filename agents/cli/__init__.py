"""The ``gpu-trading-env`` command: ``train``, ``walkforward``, ``eval``, ``backtest``,
``sweep``, ``zoo`` and ``bench`` (``agents.cli.parser.COMMAND_NAMES``; ``--help`` of each lists
its common options and names the advanced ones, ``--help-all`` explains every one).

    gpu-trading-env train --out runs/quickstart      # GpuDQN on the built-in data, then a report
    gpu-trading-env walkforward --data prices.csv    # rolling folds on your own bars
    gpu-trading-env train --data A.csv B.csv C.csv   # one policy over three instruments
    gpu-trading-env sweep --grid gamma=0.5,0.9 --seeds 0 1 2   # settings x seeds, all GPUs
    gpu-trading-env zoo --small                       # seeded markets with known best rules
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
from collections.abc import Callable

from agents.cli.backtest import cmd_backtest, cmd_eval
from agents.cli.bench import cmd_bench
from agents.cli.data import is_synthetic, load_data, per_year_of
from agents.cli.options import (
    DEBUG_HELP,
    PROG,
    UsageError,
    env_config,
    parse_env_overrides,
    resolve_device,
    resolve_model_path,
    tensorboard_installed,
    validate,
)
from agents.cli.parser import build_parser
from agents.cli.portfolio_zoo import cmd_zoo_suite
from agents.cli.run_folder import check_out, claim_out, forget_claims, release_unwritten
from agents.cli.sweep import cmd_sweep
from agents.cli.train import CPU_DEFAULTS, GPU_DEFAULTS, WALKFORWARD_CPU_TIMESTEPS, cmd_train
from agents.cli.walkforward import cmd_walkforward

__all__ = [
    "COMMANDS",
    "CPU_DEFAULTS",
    "DEBUG_HELP",
    "GPU_DEFAULTS",
    "PROG",
    "WALKFORWARD_CPU_TIMESTEPS",
    "UsageError",
    "build_parser",
    "cmd_backtest",
    "cmd_bench",
    "cmd_eval",
    "cmd_train",
    "check_out",
    "claim_out",
    "cmd_walkforward",
    "env_config",
    "is_synthetic",
    "load_data",
    "main",
    "parse_env_overrides",
    "per_year_of",
    "resolve_device",
    "resolve_model_path",
    "tensorboard_installed",
    "validate",
]


# Each subcommand's function. The parser (agents/cli/parser.py) knows only the options, so the
# commands can use it (a sweep checks its runs' train options) without an import circle.
COMMANDS: dict[str, Callable[[argparse.Namespace], int | None]] = {
    "train": cmd_train,
    "walkforward": cmd_walkforward,
    "eval": cmd_eval,
    "backtest": cmd_backtest,
    "sweep": cmd_sweep,
    "zoo": cmd_zoo_suite,
    "bench": cmd_bench,
}

# Options whose value is itself a command line: argparse takes a value that starts with "-" and
# has no space ("--cross-fit") for an option of its own, so it is attached with "=" first.
_COMMAND_LINE_OPTIONS = ("--train-args",)


def _attach_command_line_values(argv: list[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] in _COMMAND_LINE_OPTIONS and i + 1 < len(argv):
            out.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out


def _one_line(text: str) -> str:
    """``text`` with line breaks and other control characters escaped (``\\n``): a message that
    quotes a file name or a value read from a file stays one line and cannot drive the
    terminal."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def main(argv: list[str] | None = None) -> int:
    argv = _attach_command_line_values(list(sys.argv[1:] if argv is None else argv))
    args = build_parser().parse_args(argv)
    prog = f"{PROG} {args.command}"
    try:
        validate(args)
        check_out(args)
        code = int(COMMANDS[args.command](args) or 0)
        forget_claims()
        return code
    except UsageError as exc:
        release_unwritten()
        if args.debug:
            raise
        print(f"{prog}: error: {_one_line(str(exc))}", file=sys.stderr)
        return 2
    except OSError as exc:
        # A file-system failure (a file that cannot be read or written, a full disk): the path
        # and the reason are what the user can act on.
        release_unwritten()
        if args.debug:
            raise
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"{prog}: error: {_one_line(f'{where}{exc.strerror or exc}')}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        # A folder the run made but wrote nothing to is removed: no empty runs/ entries.
        release_unwritten("interrupted")
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        release_unwritten()
        if args.debug:
            raise
        first = _one_line(str(exc).splitlines()[0]) if str(exc) else ""
        print(
            f"{prog}: error: {type(exc).__name__}: {first} (run again with --debug for the traceback)",
            file=sys.stderr,
        )
        return 1
