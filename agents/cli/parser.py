"""The argument parser of the ``gpu-trading-env`` command and its subcommands."""

from __future__ import annotations

import argparse
import difflib
import re
import sys
import textwrap
from typing import Any, NoReturn

from agents.cli.options import DEBUG_HELP, PROG
from agents.pipelines.train_config import (
    EPISODE_LENGTH,
    TRAIN_FRACTION,
    WALKFORWARD_CPU_TIMESTEPS,
    add_training_options,
)
from agents.pipelines.train_config import (
    parse_int as _int,
)

# Every subcommand, in the order --help lists them (agents.cli.COMMANDS runs them).
COMMAND_NAMES = ("train", "walkforward", "eval", "backtest", "sweep", "zoo", "bench")
DESCRIPTION = (
    f"The {PROG} command: {', '.join(COMMAND_NAMES[:-1])} and {COMMAND_NAMES[-1]}; "
    f"'{PROG} COMMAND --help' lists a command's options."
)
# Options a first run does not need: a subcommand's --help names them in one paragraph and
# --help-all explains them, so that --help fits a screen or two.
ADVANCED_OPTIONS = frozenset(
    {
        "--date-format", "--timestamp-unit", "--time-column", "--symbol-column", "--column",
        "--fill-volume", "--checkpoint-every", "--align", "--no-branch-rewards",
        "--no-instrument-encoder", "--no-flat-unpredicted", "--no-branch-inputs", "--sort",
        "--duplicates", "--skip-empty", "--thousands", "--decimal", "--sep", "--max-filled",
        "--prices",
    }
)  # fmt: skip


class _HelpAll(argparse.Action):
    """``--help-all``: the subcommand's help with every option explained, then exit 0."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Any = None) -> None:
        parser.print_help(every_option=True)
        parser.exit()


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line on stderr (argparse prints the usage block too), exit code 2,
    with a "did you mean" for a mistyped option or subcommand.

    Options are never abbreviated: with argparse's prefix matching the typo ``--timestep 1000``
    would silently set ``--timesteps``, and a later option sharing the prefix would change what
    an old command line means. The typo is refused and the nearest option named instead.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self.subcommands: dict[str, _Parser] = {}

    def add_subparsers(self, **kwargs: Any) -> Any:
        action = super().add_subparsers(**kwargs)
        self.subcommands = action.choices  # filled as add_parser is called
        return action

    def advanced_actions(self) -> list[argparse.Action]:
        """This parser's options of :data:`ADVANCED_OPTIONS` and the advanced training settings
        (``train_config.ADVANCED_SETTINGS``)."""
        return [
            a
            for a in self._actions
            if getattr(a, "advanced", False) or ADVANCED_OPTIONS.intersection(a.option_strings)
        ]

    def format_help(self, every_option: bool = False) -> str:
        """The help; a subcommand's without the usage block's every option and, unless
        ``every_option``, with its advanced options named in one paragraph at the end."""
        advanced = [] if every_option else self.advanced_actions()
        saved = [(a, a.help) for a in advanced]
        for a in advanced:
            a.help = argparse.SUPPRESS
        try:
            text = super().format_help()
        finally:
            for a, h in saved:
                a.help = h
        if advanced:
            names = ", ".join(a.option_strings[0] for a in advanced)
            about = f"advanced options ({self.prog} --help-all explains them): {names}"
            lines = textwrap.wrap(about, 79, break_on_hyphens=False, break_long_words=False)
            text += "\n" + "\n".join(lines) + "\n"
        return text

    def print_help(self, file: Any = None, every_option: bool = False) -> None:  # type: ignore[override]
        self._print_message(self.format_help(every_option), file or sys.stdout)

    def option_names(self) -> list[str]:
        """Every long option string this parser accepts, its argument groups' included."""
        return [s for s in self._option_string_actions if s.startswith("--")]

    def suggestion(self, unknown: list[str]) -> str:
        """' (did you mean --x?)' for the unknown options that are close to one of ours."""
        hints = []
        for arg in unknown:
            name = arg.split("=", 1)[0]
            if not name.startswith("-"):
                continue  # a stray value, most often the unknown option's own
            close = difflib.get_close_matches(name, self.option_names(), n=1, cutoff=0.6)
            if close:
                hints.append((name, close[0]))
        if not hints:
            return ""
        if len(hints) == 1:
            return f" (did you mean {hints[0][1]}?)"
        return " (did you mean " + ", ".join(f"{c} for {n}" for n, c in hints) + "?)"

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:  # type: ignore[override]
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            # The subcommand's parser knows its options (argparse reports them at the top).
            target = self.subcommands.get(getattr(ns, "command", None) or "", self)
            target.error(f"unrecognized arguments: {' '.join(extras)}{target.suggestion(extras)}")
        return ns

    def error(self, message: str) -> NoReturn:
        choice = re.search(r"invalid choice: '([^']*)'", message)
        if choice and self.subcommands:
            close = difflib.get_close_matches(choice.group(1), list(self.subcommands), n=1)
            if close:
                message += f" (did you mean {close[0]!r}?)"
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows ``(default: X)`` unless the help text already says what the default is, the
    option is required, or X is None (which tells a reader nothing)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "(default" in text or action.required or action.default is None:
            return text
        return super()._get_help_string(action)


def _data_options(p: argparse.ArgumentParser) -> None:
    """The ``data`` group: the files of bars and how to read them."""
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
        "--features",
        nargs="+",
        metavar="COL",
        help="your own columns of --data (a signal, another market's series) added to the 51 "
        "built-in features, each known at its bar's close (eval: the model's) (default: none)",
    )
    g.add_argument(
        "--fill-volume",
        type=float,
        default=None,
        metavar="V",
        help="volume of bars whose volume is missing, e.g. 0 for FX or index files "
        "(default: refuse a file with a missing volume, naming its line)",
    )
    g.add_argument(
        "--prices",
        choices=["adjusted", "raw"],
        default=None,
        help="adjusted: close = 'Adj Close', open/high/low scaled by Adj Close / Close; raw: "
        "the file's close (default: adjusted where the file has an Adj Close column)",
    )
    g.add_argument("--sort", action="store_true", help="sort bars that are out of time order")
    g.add_argument(
        "--duplicates",
        choices=["first", "last"],
        default=None,
        help="keep this bar of a repeated timestamp (default: refuse it)",
    )
    g.add_argument(
        "--skip-empty", action="store_true", help="leave out bars with no price (default: refuse)"
    )
    for flag, example in (("--sep", ";"), ("--decimal", ","), ("--thousands", ",")):
        g.add_argument(flag, default=None, metavar="CHAR", help=f"CSV {flag[2:]}, e.g. '{example}'")
    g.add_argument(
        "--bars-per-year",
        type=float,
        default=None,
        help="annualisation factor (default: inferred from the timestamps' calendar)",
    )


def _env_options(
    p: argparse.ArgumentParser,
    fraction: float,
    fraction_help: str,
    episode_help: str = f"bars per env episode (default: {EPISODE_LENGTH})",
) -> None:
    """The options of every command that builds an env: data, split, env settings, --out.
    ``--episode-length`` is None where not given (:func:`agents.cli.options.env_config` reads
    it as :data:`EPISODE_LENGTH`), so that ``eval`` can tell the option from its default."""
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    _data_options(p)
    p.add_argument("--train-fraction", type=float, default=fraction, help=fraction_help)
    p.add_argument("--episode-length", type=_int, default=None, help=episode_help)
    p.add_argument(
        "--env",
        nargs="*",
        metavar="FIELD=VALUE",
        help="EnvConfig overrides of its defaults (docs/ENV_SPEC.md, 'Configuration': 3 "
        "actions, short, flat and long at 1 bp; no triple barrier, diversity or risk penalty), "
        "e.g. barriers=True",
    )
    _out_options(p, "report folder")


def _out_options(p: argparse.ArgumentParser, what: str) -> None:
    """``--out`` (``what`` the folder holds) and ``--overwrite``."""
    p.add_argument(
        "--out",
        default=None,
        help=f"{what}: a new or empty folder (default: runs/<command>-<date>-<time>, "
        "made for this run, never an existing one)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="empty --out first if it holds an earlier run's report (default: refuse a "
        "folder that is not empty)",
    )


def _add_train(sub: argparse._SubParsersAction[_Parser], fmt: type[argparse.HelpFormatter]) -> None:
    """The ``train`` subcommand: env options, the training options of ``TrainConfig``, seed,
    checkpoints and resume."""
    t = sub.add_parser(
        "train", help="train GpuDQN on one split and write a report", formatter_class=fmt
    )
    _env_options(t, TRAIN_FRACTION, "fraction of the bars to train on; the rest is out of sample")
    add_training_options(t)
    t.add_argument("--seed", type=_int, default=0, help="random seed")
    t.add_argument(
        "--checkpoint-every",
        type=_int,
        default=None,
        metavar="N",
        help="write a checkpoint every N env steps into OUT/checkpoints (the 2 newest kept), "
        "from which --resume continues the run (default: none)",
    )
    t.add_argument(
        "--resume",
        default=None,
        metavar="DIR",
        help="continue the run whose checkpoints are in DIR (a train folder, its checkpoints "
        "folder or one checkpoint), as if it had not stopped, in that train folder unless --out "
        "names another; pass the same data and training options (a different one is refused) "
        "(default: start anew)",
    )
    t.add_argument(
        "--instrument",
        default=None,
        help="train and evaluate on this instrument alone (default: one policy over every "
        "instrument of the data, on GpuPortfolio-v0 where there are several)",
    )
    _portfolio_options(t, learner=True)


def _portfolio_options(p: argparse.ArgumentParser, learner: bool = False) -> None:
    """The ``portfolio`` group: ``--portfolio`` and ``--align``; with ``learner``, the branching
    learner's switches (``PortfolioTrainConfig``'s ``branch_rewards``, ``instrument_encoder``,
    ``flat_unpredicted`` and ``branch_inputs``, all on by default). The path of several
    instruments is chosen by their number (eval: by the model's run), ``--portfolio`` or not."""
    g = p.add_argument_group("portfolio")
    g.add_argument(
        "--portfolio",
        action="store_true",
        help="insist on the path of several instruments (GpuPortfolio-v0; --env takes "
        "PortfolioConfig's fields, docs/ENV_SPEC.md): refused with one instrument; several "
        "--data files (eval: a model of several) take it without (default: by their number)",
    )
    g.add_argument(
        "--align",
        choices=["ffill"],
        default=None,
        help="several instruments: put them on the union of their timestamps, a missing "
        "bar being the previous close with volume 0 (default: refuse instruments whose "
        "timestamps differ)",
    )
    g.add_argument(
        "--max-filled",
        type=float,
        default=None,
        metavar="SHARE",
        help="with --align ffill: the largest share of an instrument's bars that may be filled "
        "(default: 0.1)",
    )
    if not learner:
        return
    g.add_argument(
        "--no-branch-rewards",
        action="store_true",
        help="several instruments: every branch's TD target from the whole portfolio's reward "
        "(default: each branch's from its own instrument's share of it)",
    )
    g.add_argument(
        "--no-instrument-encoder",
        action="store_true",
        help="several instruments: the branching dueling network alone (default: beside it one "
        "encoder shared by the instruments, agents/algorithm/policies.py)",
    )
    g.add_argument(
        "--no-flat-unpredicted",
        action="store_true",
        help="several instruments: the kept network trades every instrument (default: it holds "
        "flat each instrument whose next return no kept input predicts)",
    )
    g.add_argument(
        "--no-branch-inputs",
        action="store_true",
        help="several instruments: no head of a branch's own on the other instruments' columns "
        "that predict its instrument (default: each branch reads them directly, a follower "
        "its leader's)",
    )


def _add_walkforward(
    sub: argparse._SubParsersAction[_Parser], fmt: type[argparse.HelpFormatter]
) -> None:
    """The ``walkforward`` subcommand: env and training options, the folds' windows and seeds."""
    w = sub.add_parser(
        "walkforward",
        help="train and test on rolling folds of your data and write a report",
        formatter_class=fmt,
    )
    _env_options(w, 0.0, argparse.SUPPRESS)
    add_training_options(w, "env steps per fold and seed", WALKFORWARD_CPU_TIMESTEPS)
    w.add_argument("--folds", type=_int, default=6, help="number of test windows")
    w.add_argument(
        "--train-bars",
        type=_int,
        default=None,
        help="bars of the first training window; later folds train on every bar before their "
        "test window, or on this many with --rolling (default: the bars before the first test "
        "window)",
    )
    w.add_argument(
        "--test-bars",
        type=_int,
        default=None,
        help="bars of each test window (default: the second half of the bars split into "
        "--folds windows, or (bars - train bars) / folds where --train-bars is given)",
    )
    w.add_argument(
        "--rolling",
        action="store_true",
        help="train each fold on the --train-bars bars just before its test window "
        "(default: on every bar before it)",
    )
    w.add_argument("--seeds", type=_int, nargs="+", default=[0], help="one model per seed")
    w.add_argument(
        "--warm-start",
        action="store_true",
        help="start each fold from the previous fold's model (default: from scratch)",
    )
    w.add_argument(
        "--no-confirm",
        action="store_true",
        help="deploy every network train would deploy (default: a fold deploys a network only "
        "where the same seed's network of the previous fold beat its baseline on that fold's "
        "test bars, in return and in Sharpe at the one-sided 20%% level; otherwise its "
        "baseline)",
    )
    w.add_argument("--instrument", default=None, help="instrument to use (default: every one)")
    _portfolio_options(w, learner=True)


def _add_eval(sub: argparse._SubParsersAction[_Parser], fmt: type[argparse.HelpFormatter]) -> None:
    """The ``eval`` subcommand: env options and the saved model to backtest."""
    e = sub.add_parser(
        "eval", help="backtest a saved model and write a report", formatter_class=fmt
    )
    _env_options(
        e,
        TRAIN_FRACTION,
        "bars skipped before the evaluated part; 0 evaluates every bar",
        "bars per env episode, in place of the model's (default: the model's; "
        f"{EPISODE_LENGTH} for a file without an env configuration)",
    )
    e.add_argument("--model", required=True, help="model.zip written by train")
    e.add_argument(
        "--allow-pickle",
        action="store_true",
        help="also load Stable-Baselines3 zips, whose pickled part runs any code it holds: only "
        "for files from a source you trust (default: weights-only files)",
    )
    e.add_argument("--instrument", default=None, help="instrument to use (default: the first)")
    _portfolio_options(e)


def _add_backtest(
    sub: argparse._SubParsersAction[_Parser], fmt: type[argparse.HelpFormatter]
) -> None:
    """The ``backtest`` subcommand: env options and the fixed rule to backtest."""
    b = sub.add_parser(
        "backtest", help="backtest a fixed rule and write a report", formatter_class=fmt
    )
    _env_options(b, TRAIN_FRACTION, "bars skipped before the evaluated part; 0 evaluates every bar")
    b.add_argument(
        "--rule",
        choices=["planted", "buy_and_hold"],
        default=None,
        help="planted: the synthetic market's known rule (only the built-in market has one); "
        "buy_and_hold: a constant exposure (default: planted on the built-in market, "
        "buy_and_hold on --data files)",
    )
    b.add_argument(
        "--exposure",
        type=float,
        default=1.0,
        help="exposure of the rule, in [-1, 1]; on several instruments one of the env's levels",
    )
    b.add_argument("--instrument", default=None, help="instrument to use (default: every one)")
    _portfolio_options(b)


def _add_sweep(sub: argparse._SubParsersAction[_Parser], fmt: type[argparse.HelpFormatter]) -> None:
    """The ``sweep`` subcommand: the grid, seeds, devices and the train options of every run."""
    s = sub.add_parser(
        "sweep",
        help="train a grid of settings x seeds across this machine's devices, with a report",
        formatter_class=fmt,
        description="Each run is one train process (its own folder and report); runs go to "
        "the devices given, --runs-per-device at a time on each. Options after -- are given "
        "to every run, e.g.: sweep --grid gamma=0.5,0.9 --seeds 0 1 2 -- --timesteps 8000000",
    )
    s.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    s.add_argument(
        "--grid",
        action="append",
        metavar="OPTION=V1,V2",
        default=None,
        help="a train option and its values, repeatable; the sweep runs every combination "
        "(default: none, the train defaults)",
    )
    s.add_argument("--seeds", type=_int, nargs="+", default=[0, 1, 2], help="seeds of each setting")
    s.add_argument(
        "--devices",
        nargs="+",
        default=["auto"],
        help="cpu, cuda or cuda:N each; auto: every visible GPU, else the CPU",
    )
    s.add_argument(
        "--runs-per-device", type=_int, default=1, help="runs at the same time on each device"
    )
    _out_options(s, "sweep folder")
    s.add_argument("--no-progress", action="store_true", help="no progress bar")
    s.add_argument(
        "train_args",
        nargs="*",
        metavar="-- TRAIN_OPTION",
        help="after --: train options for every run, not --seed, --out or --device (default: none)",
    )


def _add_zoo(sub: argparse._SubParsersAction[_Parser], fmt: type[argparse.HelpFormatter]) -> None:
    """The ``zoo`` subcommand: markets, seeds, devices and the budget of the market zoo."""
    z = sub.add_parser(
        "zoo",
        help="train's defaults on seeded markets with known best rules (agents/pipelines/zoo.py), a report",
        formatter_class=fmt,
    )
    z.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    z.add_argument(
        "--device",
        default="auto",
        help="auto (every visible GPU, else the CPU), cpu, cuda or cuda:N",
    )
    z.add_argument(
        "--markets", nargs="+", default=None, help="markets to run (default: all of the suite)"
    )
    z.add_argument(
        "--seeds", type=_int, nargs="+", default=[0, 1, 2, 3, 4], help="seeds per market"
    )
    z.add_argument(
        "--runs-per-device", type=_int, default=1, help="runs at the same time on each device"
    )
    z.add_argument(
        "--small",
        action="store_true",
        help="the CPU check: 1,500 bars, 2,000 env steps a run (not a learning result)",
    )
    z.add_argument(
        "--real",
        action="store_true",
        help="the real suite: real bar series from pip packages (pip install -e '.[real]') and "
        "markets whose edge or drift changes (agents/pipelines/zoo.py); with --small: one "
        "series and the shifting markets",
    )
    z.add_argument(
        "--portfolio",
        action="store_true",
        help="the portfolio suite: markets of K = 8 and 32 instruments with known best rules, "
        "train_portfolio's defaults (agents/pipelines/portfolio_zoo.py); with --small: K = 8, "
        "1,500 bars, 2,000 env steps a run; with --real: real daily series traded together, "
        "judged against their baselines",
    )
    z.add_argument(
        "--bars",
        type=_int,
        default=None,
        help="with --portfolio: bars of each market's grid after the warm-up (default: 20,000; "
        "1,500 with --small)",
    )
    z.add_argument(
        "--train-args",
        default=None,
        metavar="'OPTIONS'",
        help="extra train options for every run, quoted, e.g. '--gamma 0.9' (default: none)",
    )
    z.add_argument(
        "--out",
        default=None,
        help="report folder: a new or empty folder (default: runs/zoo-<date>-<time>, made for "
        "this run, never an existing one)",
    )
    z.add_argument(
        "--overwrite",
        action="store_true",
        help="empty --out first if it holds an earlier run's report",
    )
    z.add_argument("--no-progress", action="store_true", help="no progress bar")


def _add_bench(sub: argparse._SubParsersAction[_Parser], fmt: type[argparse.HelpFormatter]) -> None:
    """The ``bench`` subcommand: env throughput."""
    n = sub.add_parser("bench", help="env throughput on this machine", formatter_class=fmt)
    n.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    n.add_argument("--steps", type=_int, default=200, help="env steps per measurement")


def build_parser() -> argparse.ArgumentParser:
    """The ``gpu-trading-env`` parser, its subcommands in the order ``--help`` lists them."""
    fmt = _HelpFormatter
    parser = _Parser(prog=PROG, description=DESCRIPTION, formatter_class=fmt)
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for add in (
        _add_train,
        _add_walkforward,
        _add_eval,
        _add_backtest,
        _add_sweep,
        _add_zoo,
        _add_bench,
    ):
        add(sub, fmt)
    for p in sub.choices.values():
        if p.advanced_actions():
            # The options are listed below the usage line, not in it (train's was 31 lines).
            p.usage = "%(prog)s [options]"
            p.add_argument("--help-all", action=_HelpAll, help="explain every option")
    assert tuple(sub.choices) == COMMAND_NAMES, tuple(sub.choices)
    return parser
