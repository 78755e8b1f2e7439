"""``gpu-trading-env zoo``: ``train``'s defaults on seeded markets with known best rules.

    gpu-trading-env zoo --device cuda                  # 8 markets x 5 seeds, a report
    gpu-trading-env zoo --small --markets builtin gbm_flat --seeds 0   # the CPU check of CI
    gpu-trading-env zoo --real --device cuda           # real series and shifting markets
    gpu-trading-env zoo --real --small --seeds 0       # its CPU check

See :mod:`agents.pipelines.zoo` for the markets, their references and the targets.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from typing import TYPE_CHECKING

from agents.cli.options import UsageError
from agents.cli.run_folder import claim_out
from agents.cli.run_progress import RunProgress

if TYPE_CHECKING:
    from agents.pipelines.zoo import ZooBudget
    from agents.pipelines.zoo_result import ZooRow


def _check_real_packages(markets: list) -> None:
    """One UsageError naming each missing package of the real series chosen, before any run."""
    from gpu_trading_env.data.real_series import real_frame

    missing = {}
    for m in markets:
        if m.kind == "real":
            try:
                real_frame(m.params["series"])
            except ImportError:
                missing[m.name] = m.title
    if missing:
        raise UsageError(
            f"--markets: the real series {', '.join(missing)} need packages that are not "
            f'installed ({"; ".join(missing.values())}): pip install -e ".[real]"'
        )


def _chosen_markets(args: argparse.Namespace) -> list[str]:
    """The names of the markets to run (``--markets``, else the suite's default), each checked
    against the suite of ``--real`` and for its packages; raises UsageError naming the option."""
    from agents.pipelines.zoo import MARKETS_BY_NAME, SMALL_REAL_MARKETS, SUITES

    suite = [m.name for m in SUITES["real" if args.real else "zoo"]]
    default = list(SMALL_REAL_MARKETS) if args.real and args.small else suite
    markets = args.markets or default
    bad = [m for m in markets if m not in suite]
    if bad:
        flag = "--real" if args.real else "the zoo (without --real)"
        raise UsageError(
            f"--markets {' '.join(bad)} is invalid for {flag}: allowed are {', '.join(suite)}"
        )
    _check_real_packages([MARKETS_BY_NAME[m] for m in markets])
    return markets


def _check_seeds_and_runs(args: argparse.Namespace) -> None:
    """Refuse repeated or negative ``--seeds`` and a ``--runs-per-device`` below 1."""
    if len(set(args.seeds)) != len(args.seeds) or min(args.seeds) < 0:
        raise UsageError(f"--seeds {args.seeds} is invalid: allowed are distinct integers >= 0")
    if args.runs_per_device < 1:
        raise UsageError(f"--runs-per-device {args.runs_per_device} is invalid: allowed is >= 1")


def _extra_train_args(
    args: argparse.Namespace, markets: list[str], budget: ZooBudget
) -> tuple[str, ...]:
    """``--train-args`` as a tuple of options, refused where it sets what the zoo sets itself
    or where any market's train command line with it is invalid (checked before the first run)."""
    from agents.pipelines.zoo import MARKETS_BY_NAME, train_args

    extra = tuple(shlex.split(args.train_args or ""))
    for owned in ("--seed", "--device", "--out", "--data"):
        if owned in extra:
            raise UsageError(f"--train-args {args.train_args!r}: the zoo sets {owned} itself")
    for m in markets:
        try:
            train_args(MARKETS_BY_NAME[m], 0, "cpu", budget, extra)
        except SystemExit:
            raise UsageError(
                f"--train-args {args.train_args!r} is not a valid train command line"
            ) from None
        except ValueError as exc:
            raise UsageError(f"--train-args {args.train_args!r}: {exc}") from None
    return extra


def _done_line(row: ZooRow) -> str:
    """One run's progress line: its error, or the agent's Sharpe and return beside the
    reference's and the chosen baseline's."""
    from agents.pipelines.zoo_result import FailedZooRun

    what = (
        f"error {row.error}"
        if isinstance(row, FailedZooRun)
        else f"agent Sharpe {row.agent.sharpe:.2f} vs reference "
        f"{row.reference.sharpe:.2f} ({row.kept} kept), return "
        f"{row.agent.total_return:+.1%} vs the chosen baseline's "
        f"({row.baseline}) {row.chosen_baseline.total_return:+.1%}, "
        f"{row.seconds:.0f} s"
    )
    return f"{row.market} seed {row.seed}: {what}"


def _print_summary(rows: list[ZooRow], smoke: bool = False) -> None:
    """The zoo's summary table on the console, its columns aligned (``smoke``: ``--small``)."""
    from agents.pipelines.zoo_report import summarize, summary_table

    table = summary_table(summarize(rows), smoke=smoke)
    widths = [max(len(r[k]) for r in table) for k in range(len(table[0]))]
    for r in table:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))


def cmd_zoo(args: argparse.Namespace) -> int:
    """``zoo``: every market x seed run, a report; exit 1 where a run failed, else 0."""
    from agents.cli.sweep import resolve_devices
    from agents.pipelines.zoo import SMALL, ZooBudget, run_zoo
    from agents.pipelines.zoo_report import write_report
    from agents.pipelines.zoo_result import FailedZooRun

    markets = _chosen_markets(args)
    _check_seeds_and_runs(args)
    devices = resolve_devices([args.device] if args.device != "auto" else ["auto"])
    budget = SMALL if args.small else ZooBudget()
    extra = _extra_train_args(args, markets, budget)
    out = claim_out(args, "zoo")
    total = len(markets) * len(args.seeds)
    if args.small:
        from agents.pipelines.zoo_report import SMOKE_TEST_NOTE

        print(f"market zoo, smoke test: {SMOKE_TEST_NOTE}.", flush=True)
    print(
        f"market zoo: {len(markets)} markets x {len(args.seeds)} seeds = {total} runs on "
        f"{', '.join(devices)} ({args.runs_per_device} at a time each); report in {out}",
        flush=True,
    )
    progress = RunProgress(total, "zoo", bar=not args.no_progress)
    start = time.perf_counter()
    rows = run_zoo(
        markets,
        args.seeds,
        devices,
        runs_per_device=args.runs_per_device,
        budget=budget,
        extra_train_args=extra,
        on_done=lambda row: progress.done(_done_line(row)),
    )
    progress.close()
    command = "gpu-trading-env " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    meta = {
        "markets": markets,
        "seeds": list(args.seeds),
        "devices": devices,
        "runs_per_device": args.runs_per_device,
        "small": bool(args.small),
        "suite": "real" if args.real else "zoo",
        "train_args": list(extra),
        "wall_seconds": time.perf_counter() - start,
    }
    paths = write_report(rows, out, command, meta)
    from agents.pipelines.zoo_report import zoo_lead

    print(zoo_lead(rows))
    _print_summary(rows, smoke=bool(args.small))
    print(f"report: {paths['html']}  (every run: {paths['csv']}, {paths['json']})")
    return 1 if any(isinstance(r, FailedZooRun) for r in rows) else 0
