"""``gpu-trading-env sweep`` and :mod:`agents.pipelines.sweep`: grid x seeds, the launcher, the report."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from agents.cli import main
from agents.pipelines import sweep
from agents.pipelines.sweep_result import SeedSpread, SweepLaunch


def test_plan_covers_the_grid_times_the_seeds(tmp_path: Path) -> None:
    grid = [("learning-rate", ["1e-4", "3e-4"]), ("gamma", ["0.5", "0.9", "0.99"])]
    runs = sweep.plan_runs(grid, [0, 7], tmp_path)
    assert len(runs) == 2 * 3 * 2
    assert runs[0].setting == (("learning-rate", "1e-4"), ("gamma", "0.5"))
    assert runs[-1].setting == (("learning-rate", "3e-4"), ("gamma", "0.99"))
    assert [r.seed for r in runs[:2]] == [0, 7]
    assert len({r.out for r in runs}) == len(runs)  # one folder per run
    assert all(r.out.parent.parent == tmp_path for r in runs)
    assert sweep.plan_runs([], [3], tmp_path)[0].out == tmp_path / "defaults" / "seed3"
    clash = sweep.plan_runs([("data", ["a/b.csv", "a_b.csv"])], [0], tmp_path)
    assert [r.out.parent.name for r in clash] == ["data_a_b.csv", "data_a_b.csv-2"]


def _fake_train(tmp_path: Path, returns: dict[tuple[str, int], float | None], val_sharpe=None):
    """A ``train_command`` whose process writes a metrics.json with the given test return (and
    validation Sharpe, default 1.0), or exits 1 where the return is None: the launcher and the
    report without training."""

    def command(run, common, device):
        key = (sweep.setting_label(run.setting), run.seed)
        ret = returns[key]
        if ret is None:
            code = "import sys; print('boom'); sys.exit(1)"
        else:
            sharpe = (val_sharpe or {}).get(key, 1.0)
            metrics = {
                "strategy": {"total_return": ret, "costs_paid": 0.01},
                "buy_and_hold": {"total_return": 0.05},
                "validation": {
                    "strategy": {"sharpe": sharpe, "total_return": sharpe / 10},
                    "buy_and_hold": {"total_return": 0.02},
                },
                "data": "Data: DAILY.csv; instrument DAILY: 500 bars, 2015-01-01 to 2016-12-01.",
                "order_cost_bps": [1.0, 0.5, 1.5],
                "agent_return_vs_known_rule": ret / 9.0,
                "train_seconds": 1.5,
            }
            code = (
                f"import json, pathlib; p = pathlib.Path({str(run.out)!r}); "
                f"p.mkdir(parents=True); (p / 'metrics.json').write_text(json.dumps({metrics!r}))"
            )
        return [sys.executable, "-c", code]

    return command


def test_a_run_log_that_is_a_link_is_replaced_not_written_through(tmp_path, monkeypatch):
    """The run's log was opened through whatever was at its name: a link's target was
    overwritten with the run's output."""
    monkeypatch.setattr(sweep, "train_command", _fake_train(tmp_path, {("gamma=0.5", 0): None}))
    (run,) = sweep.plan_runs([("gamma", ["0.5"])], [0], tmp_path / "sweep")
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    run.log.parent.mkdir(parents=True)
    run.log.symlink_to(victim)
    (result,) = sweep.run_sweep([run], [], ["cpu"])
    assert result.returncode == 1 and victim.read_text() == "mine"
    assert not run.log.is_symlink() and "boom" in run.log.read_text()


def test_launcher_and_report_with_a_failed_run(tmp_path: Path, monkeypatch) -> None:
    returns = {("gamma=0.5", 0): 1.0, ("gamma=0.5", 1): 3.0, ("gamma=0.9", 0): -0.5}
    returns[("gamma=0.9", 1)] = None  # this run fails
    monkeypatch.setattr(sweep, "train_command", _fake_train(tmp_path, returns))
    runs = sweep.plan_runs([("gamma", ["0.5", "0.9"])], [0, 1], tmp_path)
    done = []
    results = sweep.run_sweep(runs, [], ["cpu"], runs_per_device=3, on_done=done.append)
    assert [r.run for r in results] == runs and len(done) == 4
    summary = sweep.aggregate(results)
    a, b = summary.settings
    assert a.label == "gamma=0.5" and a.finished == 2 and a.failed == 0
    assert a.total_return.mean == pytest.approx(2.0)
    assert a.total_return.std == pytest.approx(math.sqrt(2.0))  # sample sd of 1 and 3
    assert a.vs_known_rule.mean == pytest.approx(2.0 / 9.0)
    assert b.finished == 1 and b.failed == 1 and summary.failed == 1
    assert b.total_return == SeedSpread(mean=-0.5, std=0.0, min=-0.5, max=-0.5)
    failed = next(r for r in b.runs if r.returncode != 0)
    assert "boom" in Path(failed.log).read_text()
    paths = sweep.write_report(summary, tmp_path)
    assert json.loads(paths["json"].read_text())["settings"][0]["total_return"]["mean"] == 2.0
    rows = paths["csv"].read_text().splitlines()
    assert rows[1].startswith("1,gamma=0.5,2,0,1.0,") and rows[2].startswith("2,gamma=0.9,1,1,")
    assert paths["png"].stat().st_size > 1000
    page = paths["html"].read_text()
    assert "gamma_0.5/seed1/index.html" in page and "failed (1)" in page


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--grid", "gamma"], "--grid 'gamma' is invalid: pass OPTION=V1,V2"),
        (["--grid", "gamma=0.5,"], "--grid 'gamma=0.5,' is invalid"),
        (["--grid", "seed=1,2"], "the sweep sets --seed itself; use the sweep's --seeds"),
        (["--grid", "gamma=0.5", "--grid", "gamma=0.9"], "option 'gamma' is given twice"),
        (["--grid", "gamma=0.5,0.5"], "a value is repeated"),
        (["--grid", "gamma=2.0"], "the run 'gamma=2.0', seed 0: --gamma"),
        (["--grid", "learnin-rate=1e-4"], "unrecognized arguments: --learnin-rate 1e-4"),
        (["--grid", "batch-size=many"], "argument --batch-size: 'many' is not an integer"),
        (["--devices", "gpu"], "--devices 'gpu' is invalid: allowed is auto, or any of cpu"),
        (["--devices", "cpu", "cpu"], "--devices cpu is given twice"),
        (["--runs-per-device", "0"], "--runs-per-device 0 is invalid: allowed is 1 to 256"),
        (["--seeds", "1", "1"], "--seeds [1, 1] is invalid: a seed is repeated"),
        (["--", "--seed", "3"], "train option '--seed' is invalid here"),
        (["--", "--device=cpu"], "train option '--device=cpu' is invalid here"),
        (["--grid", "gamma=0.5,0.9", "--", "--gamma", "0.7"], "--grid sets --gamma too"),
    ],
)
def test_bad_sweep_options_fail_before_anything_runs(argv, message, tmp_path, capsys) -> None:
    out = tmp_path / "sweep"
    devices = [] if "--devices" in argv else ["--devices", "cpu"]
    head = [a for a in argv if a != "--"]
    tail = argv[argv.index("--") :] if "--" in argv else []
    if tail:
        head = argv[: argv.index("--")]
    code = main(["sweep", *devices, *head, "--out", str(out), *tail])
    assert code == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_gpu_devices_are_refused_without_a_gpu(tmp_path, capsys) -> None:
    from gpu_runtime.device import cuda_available

    if cuda_available():
        pytest.skip("this machine has a GPU")
    code = main(["sweep", "--devices", "cuda:0", "--out", str(tmp_path / "s")])
    assert code == 2
    assert "--devices cuda:0: this machine has no CUDA device with CuPy" in capsys.readouterr().err


def test_existing_folder_is_refused(tmp_path, capsys) -> None:
    (tmp_path / "old.txt").write_text("x")
    assert main(["sweep", "--devices", "cpu", "--out", str(tmp_path)]) == 2
    assert "the folder exists and is not empty" in capsys.readouterr().err


def test_sweep_trains_every_run_and_reports_their_mean(tmp_path, capsys, small_bar_file) -> None:
    """The command as a user runs it, small: one setting x 2 seeds of real `train` runs, two at
    a time (the grid's combinations and their grouping in the report are the tests above, with
    runs that write their metrics without training)."""
    out = tmp_path / "sweep"
    code = main(
        ["sweep", "--grid", "gamma=0.9", "--seeds", "0", "1", "--devices", "cpu",
         "--runs-per-device", "2", "--out", str(out), "--no-progress", "--",
         "--timesteps", "1000", "--num-envs", "4", "--batch-size", "32",
         "--eval-every", "500", "--torch-threads", "1",
         "--data", str(small_bar_file), "--episode-length", "50"]
    )  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0, printed
    summary = json.loads((out / "sweep.json").read_text())
    (setting,) = summary["settings"]
    assert setting["label"] == "gamma=0.9" and setting["finished"] == 2
    runs = [json.loads((Path(r["out"]) / "metrics.json").read_text()) for r in setting["runs"]]
    assert sorted(m["seed"] for m in runs) == [0, 1]  # each run trained under its own seed
    returns = [m["strategy"]["total_return"] for m in runs]
    assert setting["total_return"]["mean"] == pytest.approx(sum(returns) / 2)
    assert all((Path(r["out"]) / "index.html").is_file() for r in setting["runs"])
    assert summary["train_options"][:2] == ["--timesteps", "1000"]
    # sweep.json documents itself: every top-level key in words.
    keys = summary["schema"]["keys"]
    assert set(keys) == set(summary) and "undocumented" not in keys.values(), keys
    assert "gamma=0.9" in printed and (out / "index.html").is_file()


def test_settings_are_ranked_on_validation_with_the_test_beside(tmp_path, monkeypatch) -> None:
    """The setting with the better test return but the worse validation Sharpe ranks second:
    choosing on test returns would select on the test data. The table names the ranking, the
    data, the costs, and shows buy-and-hold on both windows."""
    returns = {("gamma=0.5", 0): 3.0, ("gamma=0.5", 1): 2.0, ("gamma=0.9", 0): 0.5}
    returns[("gamma=0.9", 1)] = 0.7
    val = {("gamma=0.5", 0): 0.2, ("gamma=0.5", 1): 0.4, ("gamma=0.9", 0): 1.5}
    val[("gamma=0.9", 1)] = 2.5
    monkeypatch.setattr(sweep, "train_command", _fake_train(tmp_path, returns, val))
    runs = sweep.plan_runs([("gamma", ["0.5", "0.9"])], [0, 1], tmp_path)
    summary = sweep.aggregate(sweep.run_sweep(runs, [], ["cpu"]))
    first, second = summary.settings
    assert (first.label, first.rank) == ("gamma=0.9", 1)
    assert (second.label, second.rank) == ("gamma=0.5", 2)
    assert first.validation_sharpe.mean == pytest.approx(2.0)
    assert first.total_return.mean == pytest.approx(0.6)
    table = sweep.summary_table(summary)
    assert "Ranked by mean validation Sharpe" in table
    assert "DAILY.csv" in table and "1, 0.5, 1.5 bps" in table
    head = next(line for line in table.splitlines() if line.startswith("rank"))
    for column in ("VALIDATION Sharpe", "val. buy&hold", "test return", "test buy&hold"):
        assert column in head
    assert "costs paid" in head


def _fixed_metrics(ret: float, sharpe: float) -> dict:
    return {
        "strategy": {"total_return": ret, "costs_paid": 0.01},
        "buy_and_hold": {"total_return": 0.05},
        "validation": {
            "strategy": {"sharpe": sharpe, "total_return": sharpe / 10},
            "buy_and_hold": {"total_return": 0.02},
        },
        "data": "Data: DAILY.csv.",
        "order_cost_bps": [1.0, 0.5, 1.5],
        "agent_return_vs_known_rule": ret / 9.0,
        "train_seconds": 1.5,
    }


SWEEP_CSV = """\
rank,setting,finished,failed,validation_sharpe_mean,validation_sharpe_std,validation_return_mean,\
validation_buy_and_hold_mean,return_mean,return_std,return_min,return_max,test_buy_and_hold_mean,\
test_costs_paid_mean,vs_rule_mean,vs_rule_std,train_seconds_mean
1,gamma=0.9,1,1,1.5,0.0,0.15,0.02,-0.5,0.0,-0.5,-0.5,0.05,0.01,-0.05555555555555555,0.0,1.5
2,gamma=0.5,2,0,0.30000000000000004,0.14142135623730953,0.03,0.02,2.0,1.4142135623730951,1.0,3.0,\
0.05,0.01,0.2222222222222222,0.15713484026367722,1.5
"""


def test_report_files_keep_their_columns_and_values(tmp_path: Path) -> None:
    """sweep.csv and sweep.json of fixed runs, as the report has always written them."""
    import dataclasses

    runs = sweep.plan_runs([("gamma", ["0.5", "0.9"])], [0, 1], tmp_path / "runs")
    results = [
        sweep.RunResult(runs[0], 0, "cpu", 2.0, _fixed_metrics(1.0, 0.2)),
        sweep.RunResult(runs[1], 0, "cpu", 3.0, _fixed_metrics(3.0, 0.4)),
        sweep.RunResult(runs[2], 0, "cuda:0", 4.0, _fixed_metrics(-0.5, 1.5)),
        sweep.RunResult(runs[3], 1, "cuda:0", 5.0, None),
    ]
    launch = SweepLaunch(["cpu"], 1, [0, 1], ["--timesteps", "9"], 7.0)
    summary = dataclasses.replace(sweep.aggregate(results), launch=launch)
    paths = sweep.write_report(summary, tmp_path / "report")
    assert paths["csv"].read_text().replace("\r\n", "\n") == SWEEP_CSV
    doc = json.loads(paths["json"].read_text())
    assert list(doc) == [
        "settings", "runs", "failed", "ranked_by", "data", "order_cost_bps", "devices",
        "runs_per_device", "seeds", "train_options", "wall_seconds",
    ]  # fmt: skip
    first = doc["settings"][0]
    assert list(first) == [
        "setting", "label", "runs", "finished", "failed", "validation_sharpe",
        "validation_return", "validation_buy_and_hold", "total_return", "test_buy_and_hold",
        "test_costs_paid", "vs_known_rule", "train_seconds", "rank",
    ]  # fmt: skip
    assert first["runs"][0] == {
        "seed": 0, "returncode": 0, "device": "cuda:0", "wall_seconds": 4.0,
        "out": str(runs[2].out), "log": str(runs[2].log), "validation_sharpe": 1.5,
        "validation_return": 0.15, "validation_buy_and_hold": 0.02, "total_return": -0.5,
        "test_buy_and_hold": 0.05, "test_costs_paid": 0.01, "vs_known_rule": -0.5 / 9.0,
        "train_seconds": 1.5,
    }  # fmt: skip
    assert first["runs"][1]["validation_sharpe"] is None and first["runs"][1]["returncode"] == 1
    assert first["total_return"] == {"mean": -0.5, "std": 0.0, "min": -0.5, "max": -0.5}
    assert doc["ranked_by"].startswith("mean validation Sharpe of the kept models")
    assert (doc["data"], doc["failed"], doc["wall_seconds"]) == ("Data: DAILY.csv.", 1, 7.0)


def test_sweep_of_several_files_trains_one_policy_over_them(tmp_path, capsys) -> None:
    """Three --data files: each run is train's run of several instruments, and the sweep reads
    its figures as those of one instrument's run (the kept policy's test return)."""
    from random_bars import write_daily_bar_csv

    from gpu_trading_env.data.features import WARMUP_BARS

    files = [
        str(write_daily_bar_csv(tmp_path / f"{s}.csv", WARMUP_BARS + 300, seed=i))
        for i, s in enumerate("ABC")
    ]
    out = tmp_path / "sweep"
    code = main(
        ["sweep", "--seeds", "0", "--devices", "cpu", "--out", str(out), "--no-progress", "--",
         "--timesteps", "1000", "--num-envs", "4", "--batch-size", "32", "--net-width", "8",
         "--torch-threads", "1", "--all-inputs", "--data", *files, "--episode-length", "50"]
    )  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0, printed
    (setting,) = json.loads((out / "sweep.json").read_text())["settings"]
    assert setting["finished"] == 1
    (m,) = [json.loads((Path(r["out"]) / "metrics.json").read_text()) for r in setting["runs"]]
    assert m["kind"] == "portfolio" and m["instruments"] == ["A", "B", "C"]
    assert setting["total_return"]["mean"] == pytest.approx(m["test"]["kept"]["total_return"])
    assert "out of sample" in printed
