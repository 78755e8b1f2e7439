"""Report folders: every run gets its own, an occupied --out is refused, nothing is left empty.

The first test starts several ``gpu-trading-env`` processes at once, with default and explicit
``--out``, and checks that every run's files are intact and in a folder of its own.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from random_bars import write_daily_bar_csv

from agents import cli
from agents.cli import run_folder
from agents.cli.run_folder import CLAIM
from gpu_trading_env.data.features import WARMUP_BARS

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    run_folder.forget_claims()


def _csv(path: Path, n: int = WARMUP_BARS + 120) -> Path:
    return write_daily_bar_csv(path, n)


def _backtest(*extra: str) -> list[str]:
    return ["backtest", "--data", "t.csv", "--rule", "buy_and_hold", "--train-fraction", "0"] + [
        *extra
    ]


def _train(seed: int, *extra: str) -> list[str]:
    return [
        "train",
        "--data",
        "t.csv",
        "--device",
        "cpu",
        "--timesteps",
        "64",
        "--num-envs",
        "2",
        "--batch-size",
        "16",
        "--eval-every",
        "32",
        "--episode-length",
        "20",
        "--train-fraction",
        "0.6",
        "--no-progress",
        "--torch-threads",
        "1",
        "--seed",
        str(seed),
        # Random bars keep no input, and then no network is trained: these tests need one.
        "--all-inputs",
        *extra,
    ]


def _report_folder(stdout: str) -> Path:
    match = re.search(r"report: (\S+)/index\.html", stdout)
    assert match, stdout
    return Path(match.group(1))


@pytest.mark.slow
def test_runs_started_at_once_keep_their_files_intact_and_separate(in_tmp):
    _csv(in_tmp / "t.csv")
    jobs = {
        # Default-folder backtests started in the same second used to share one folder (train
        # names its folder by the same code; one train run checks its files beside them).
        **{f"bt{k}": _backtest("--exposure", str(e)) for k, e in enumerate((0.25, 0.5))},
        "train1": _train(1),
        # One explicit --out given to two runs at once: exactly one of them may write it.
        "shared_a": _backtest("--exposure", "-0.5", "--out", "shared"),
        "shared_b": _backtest("--exposure", "-0.75", "--out", "shared"),
    }
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-m", "agents.cli", *argv],
            cwd=in_tmp,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, argv in jobs.items()
    }
    done = {name: (p.wait(timeout=280), *p.communicate()) for name, p in procs.items()}

    folders = {}
    for name, (rc, out, err) in done.items():
        if name.startswith("shared"):
            continue
        assert rc == 0, (name, err)
        folders[name] = in_tmp / _report_folder(out)
    assert len(set(folders.values())) == len(folders), folders  # one folder per run

    for k, e in enumerate((0.25, 0.5)):
        folder = folders[f"bt{k}"]
        assert folder.parent == in_tmp / "runs" and folder.name.startswith("backtest-")
        metrics = json.loads((folder / "metrics.json").read_text())
        assert metrics["exposure"] == e  # this run's own report, not a neighbour's
        assert sorted(p.name for p in folder.iterdir()) == sorted(
            [CLAIM, "equity_curve.png", "equity_curve_log.png", "index.html", "metrics.json"]
            + ["position.png"]
        )
    folder = folders["train1"]
    assert json.loads((folder / "metrics.json").read_text())["seed"] == 1
    assert (folder / "model.zip").stat().st_size > 0
    assert (folder / "learning_curve.png").exists()

    codes = sorted(done[n][0] for n in ("shared_a", "shared_b"))
    assert codes == [0, 2], {n: done[n] for n in ("shared_a", "shared_b")}
    winner = next(n for n in ("shared_a", "shared_b") if done[n][0] == 0)
    loser = next(n for n in ("shared_a", "shared_b") if done[n][0] == 2)
    lines = done[loser][2].strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu-trading-env backtest: error: --out shared")
    expected = {"shared_a": -0.5, "shared_b": -0.75}[winner]
    assert json.loads((in_tmp / "shared" / "metrics.json").read_text())["exposure"] == expected
    # Every folder under runs/ belongs to one of the runs above; none is empty.
    assert sorted((in_tmp / "runs").iterdir()) == sorted(
        folders[n] for n in folders if n.startswith(("bt", "train"))
    )


def test_default_names_taken_in_one_second_get_suffixes(in_tmp, monkeypatch):
    monkeypatch.setattr(run_folder.time, "strftime", lambda fmt: "20250102-030405")
    args = cli.build_parser().parse_args(["backtest"])
    got: list[Path] = []
    threads = [
        threading.Thread(target=lambda: got.append(run_folder.claim_out(args, "backtest")))
        for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    names = sorted(p.name for p in got)
    assert names == sorted(
        ["backtest-20250102-030405"] + [f"backtest-20250102-030405-{k}" for k in range(2, 9)]
    )
    assert all((p / CLAIM).is_file() for p in got)


def _one_line_error(capsys, argv: list[str], *needles: str) -> str:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def test_an_occupied_out_is_refused_unless_overwrite_empties_it(in_tmp, capsys):
    _csv(in_tmp / "t.csv")
    assert cli.main(_train(0, "--out", "run")) == 0
    capsys.readouterr()
    before = sorted(p.name for p in (in_tmp / "run").iterdir())
    assert "model.zip" in before
    # A backtest must not mix its report into the training run's folder.
    _one_line_error(
        capsys,
        _backtest("--out", "run"),
        "--out run: the folder exists and is not empty",
        "--overwrite",
    )
    assert sorted(p.name for p in (in_tmp / "run").iterdir()) == before
    # --overwrite empties it first: no stale model.zip or learning curve beside the new report.
    assert cli.main(_backtest("--out", "run", "--overwrite")) == 0
    after = sorted(p.name for p in (in_tmp / "run").iterdir())
    assert "model.zip" not in after and "learning_curve.png" not in after
    assert "metrics.json" in after and CLAIM in after


def test_an_explicit_out_may_be_a_new_nested_folder(in_tmp):
    _csv(in_tmp / "t.csv")
    assert cli.main(_backtest("--exposure", "1.0", "--out", "mine/report")) == 0
    metrics = json.loads((in_tmp / "mine" / "report" / "metrics.json").read_text())
    assert metrics["exposure"] == 1.0


def test_overwrite_never_empties_a_folder_no_command_wrote(in_tmp, capsys):
    _csv(in_tmp / "t.csv")
    (in_tmp / "mine").mkdir()
    (in_tmp / "mine" / "thesis.tex").write_text("years of work")
    _one_line_error(
        capsys,
        _backtest("--out", "mine", "--overwrite"),
        "--overwrite empties only a folder a command wrote",
    )
    assert (in_tmp / "mine" / "thesis.tex").read_text() == "years of work"
    _one_line_error(capsys, ["backtest", "--overwrite"], "--overwrite applies to --out")


def test_file_paths_and_unwritable_parents_are_one_line_errors(in_tmp, capsys, monkeypatch):
    _csv(in_tmp / "t.csv")
    (in_tmp / "afile").write_text("x")
    _one_line_error(capsys, _backtest("--out", "afile"), "--out afile: is a file, not a folder")
    _one_line_error(capsys, _backtest("--out", "afile/sub"), "afile is a file, not a folder")

    def refuse(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self))

    # A read-only parent (simulated: the tests may run as root, whom chmod does not stop).
    monkeypatch.setattr(Path, "mkdir", refuse)
    _one_line_error(
        capsys, _backtest("--out", "ro/x"), "--out ro/x: cannot create the folder", "Permission"
    )
    # No --out was given: the message must not name one.
    line = _one_line_error(
        capsys, _backtest(), "the default report folder in runs/ (no --out given): cannot create"
    )
    assert "--out runs" not in line


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root ignores permissions")
def test_a_read_only_parent_is_a_one_line_error(in_tmp, capsys):
    _csv(in_tmp / "t.csv")
    ro = in_tmp / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        _one_line_error(capsys, _backtest("--out", "ro/x"), "--out ro/x:", "not writable")
    finally:
        ro.chmod(0o755)


def test_an_interrupted_run_leaves_no_empty_folder(in_tmp, capsys, monkeypatch):
    import gpu_trading_env.reports.backtest as backtest_module

    _csv(in_tmp / "t.csv")

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(backtest_module, "backtest", ctrl_c)
    assert cli.main(_backtest()) == 130
    assert "interrupted" in capsys.readouterr().err
    assert not (in_tmp / "runs").exists()  # the run made runs/ and its folder: both gone
    assert cli.main(_backtest("--out", "new/deep")) == 130
    assert not (in_tmp / "new" / "deep").exists()
    (in_tmp / "empty").mkdir()
    assert cli.main(_backtest("--out", "empty")) == 130
    assert (in_tmp / "empty").is_dir() and not any((in_tmp / "empty").iterdir())


def test_an_interrupted_training_run_leaves_no_empty_folder(in_tmp, capsys, monkeypatch):
    import agents.pipelines.model_selection

    _csv(in_tmp / "t.csv")

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(agents.pipelines.model_selection, "train_selected", ctrl_c)
    assert cli.main(_train(0)) == 130
    assert not (in_tmp / "runs").exists()


def test_a_claim_file_that_is_a_link_is_refused_and_its_target_kept(in_tmp, capsys):
    """The claim file was opened through a link: ``--overwrite`` wrote its JSON into the
    link's target."""
    _csv(in_tmp / "t.csv")
    assert cli.main(_backtest("--out", "f")) == 0
    victim = in_tmp / "victim.json"
    victim.write_text((in_tmp / "f" / CLAIM).read_text())
    before = victim.read_text()
    (in_tmp / "f" / CLAIM).unlink()
    (in_tmp / "f" / CLAIM).symlink_to(victim)
    capsys.readouterr()
    _one_line_error(
        capsys, _backtest("--out", "f", "--overwrite"), f"--out f: its {CLAIM} is a symbolic link"
    )
    assert victim.read_text() == before
    assert (in_tmp / "f" / "metrics.json").is_file()  # nothing emptied
