"""What would walkforward's out-of-sample check have deployed on recorded real-series folds?

Replays the folds ``experiments.real_walkforward`` recorded (each fold's deployed policy, its
return, its baseline's, and the trained network's test return, deployed or not) under
``walk_forward(confirm=True)``'s rule (:class:`agents.pipelines.walkforward.OutOfSampleRecord`):
a network is deployed on fold k only where the same seed's network of fold k - 1 beat its
baseline on fold k - 1's test bars; otherwise the fold's baseline is. Folds train from scratch,
so the rule changes what is deployed and nothing that is trained: the replay is what the
rule gives on those runs. The recorded folds keep no per-bar returns, so the replay applies the
rule's return condition alone (``OutOfSampleRecord.returned_baseline``), not its Sharpe
interval: it deploys at least what the rule deploys. Per series and seed group: networks
deployed, those more than 5% below their baseline, and the mean return minus the baseline's a
fold, without and with it.

    python3 -m experiments.real_walkforward_confirm docs/zoo/real_walkforward_h100.json \\
        --groups 0,1,2 3,4,5
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

SHORTFALL = 0.05  # the "more than 5% below the baseline"


def replay(folds: list[dict]) -> list[tuple[bool, float, bool, float]]:
    """Per fold: (network deployed, return minus baseline's) without and with the check."""
    from agents.pipelines.walkforward import OutOfSampleRecord

    out, previous = [], None
    for f in folds:
        excess = f["return"] - f["baseline_return"]
        network = f["kept"] == "network"
        confirmed = network and previous is not None and previous.returned_baseline
        out.append((network, excess, confirmed, excess if confirmed or not network else 0.0))
        previous = OutOfSampleRecord(f.get("network_return"), f["baseline_return"])
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("json", type=Path, help="experiments.real_walkforward's --out file")
    p.add_argument("--groups", nargs="+", default=None, help="seed groups, e.g. 0,1,2 3,4,5")
    args = p.parse_args(argv)
    runs = json.loads(args.json.read_text())["runs"]
    seeds = sorted({r["seed"] for r in runs})
    groups = [[int(s) for s in g.split(",")] for g in args.groups] if args.groups else [seeds]
    print("series, seeds: pairs | without the check: networks, > 5% below, mean excess | with it")
    for series in dict.fromkeys(r["series"] for r in runs):
        for group in groups:
            rows = [
                row
                for r in runs
                if r["series"] == series and r["seed"] in group
                for row in replay(r["folds"])
            ]
            n = len(rows)
            if not n:
                continue
            old_bad = sum(net and ex < -SHORTFALL for net, ex, _, _ in rows)
            new_bad = sum(conf and ex < -SHORTFALL for _, ex, conf, _ in rows)
            print(
                f"{series}, seeds {group}: {n} | {sum(r[0] for r in rows)}, {old_bad} "
                f"({old_bad / n:.0%}), {sum(r[1] for r in rows) / n:+.1%} | "
                f"{sum(r[2] for r in rows)}, {new_bad} ({new_bad / n:.0%}), "
                f"{sum(r[3] for r in rows) / n:+.1%}"
            )


if __name__ == "__main__":
    main()
