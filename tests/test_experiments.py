"""The experiments' hooks into the library: what they patch exists where they patch it."""

from __future__ import annotations

import json
from pathlib import Path


def test_learner_lab_sweep_times_the_snapshot_backtests(tmp_path: Path, monkeypatch) -> None:
    """learner_lab's sweep wraps the backtest_batch the snapshot training calls, and puts it
    back afterwards (a train command stands in for the GPU run)."""
    import agents.cli
    import agents.pipelines.snapshot_training as snapshot_training
    from experiments import learner_lab

    real = snapshot_training.backtest_batch
    seen = []

    def fake_main(argv: list[str]) -> int:
        seen.append(snapshot_training.backtest_batch is not real)
        out = Path(argv[argv.index("--out") + 1])
        out.mkdir(parents=True)
        (out / "metrics.json").write_text(json.dumps({"train_seconds": 1.0}))
        return 0

    monkeypatch.setattr(agents.cli, "main", fake_main)
    (row,) = learner_lab.sweep([{"name": "default"}], [0], tmp_path)
    assert seen == [True] and "error" not in row and row["backtest_s"] == 0.0
    assert snapshot_training.backtest_batch is real
