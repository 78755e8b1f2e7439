"""Checkpoints that are never lost and run folders claimed safely (agents.files.checkpoint's
save, switch, pins and pruning; agents.cli.run_folder's lock; train --resume in its folder)."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import gymnasium as gym
import pytest
from random_bars import write_daily_bar_csv

import gpu_trading_env  # noqa: F401  (registers GpuTrading-v0)
from agents import GpuDQN, cli
from agents.cli import run_folder
from agents.cli.run_folder import CLAIM
from agents.files import checkpoint as checkpoint_module
from agents.files import safe_archive
from agents.files.checkpoint import (
    pinned_checkpoint,
    prune_checkpoints,
    resolve_checkpoint,
    save_checkpoint,
)
from agents.files.safe_archive import ArchiveError
from agents.files.side_files import MAX_SIDE_FILE_BYTES, read_side_file, read_side_json
from gpu_trading_env.data.features import WARMUP_BARS

pytestmark = pytest.mark.usefixtures("one_torch_thread")
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_daily_bar_csv(tmp_path / "t.csv", WARMUP_BARS + 120)
    yield tmp_path
    run_folder.release_unwritten()


def _train(*extra: str) -> list[str]:
    return ["train", "--data", "t.csv", "--device", "cpu", "--timesteps", "64",
            "--num-envs", "2", "--batch-size", "16", "--eval-every", "32",
            "--episode-length", "20", "--train-fraction", "0.6", "--no-progress",
            "--torch-threads", "1", "--all-inputs", *extra]  # fmt: skip


def _backtest(*extra: str) -> list[str]:
    return ["backtest", "--data", "t.csv", "--rule", "buy_and_hold", "--train-fraction", "0",
            *extra]  # fmt: skip


def _steps(folder: Path) -> list[str]:
    return sorted(p.name for p in (folder / "checkpoints").iterdir())


def _small_model() -> GpuDQN:
    env = gym.make_vec("GpuTrading-v0", num_envs=2, device="cpu", episode_length=30)
    return GpuDQN("DuelingPolicy", env, learning_starts=20, buffer_size=200, batch_size=8,
                  seed=0, device="cpu")  # fmt: skip


def _trained_run(in_tmp: Path, name: str = "d") -> Path:
    assert cli.main(_train("--checkpoint-every", "16", "--out", name)) == 0
    return in_tmp / name


# ------------------------------------------------------------------ resume in place


def test_resume_with_overwrite_of_its_own_folder_is_refused_and_keeps_it(in_tmp, capsys):
    """``--resume D --out D --overwrite`` emptied D, checkpoints included, before reading them."""
    d = _trained_run(in_tmp)
    before = _steps(d)
    assert len(before) == 2
    capsys.readouterr()
    assert cli.main(_train("--resume", "d", "--out", "d", "--overwrite")) == 2
    err = capsys.readouterr().err
    assert "--overwrite would empty the checkpoints it reads" in err and len(err.splitlines()) == 1
    assert _steps(d) == before and (d / "metrics.json").is_file()
    # Resuming through the checkpoints folder's path is the same folder.
    assert cli.main(_train("--resume", "d/checkpoints", "--overwrite")) == 2


def test_resume_without_out_continues_in_the_runs_own_folder(in_tmp, capsys):
    d = _trained_run(in_tmp)
    (d / "metrics.json").unlink()  # the run "stopped" before its report
    assert cli.main(_train("--resume", "d", "--checkpoint-every", "16")) == 0
    assert (d / "metrics.json").is_file() and not (in_tmp / "runs").exists()
    assert len(_steps(d)) == 2  # the resumed-from checkpoint is pruned once the run is done
    claim = json.loads((d / CLAIM).read_text())
    assert claim["state"] == "completed" and claim["command"] == "train"


def test_resume_with_another_gradient_steps_is_refused_naming_both(in_tmp, capsys):
    d = _trained_run(in_tmp)
    capsys.readouterr()
    resumed = _train("--resume", "d", "--gradient-steps", "3", "--seed", "4", "--buffer-size", "99")
    assert cli.main(resumed) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "--gradient-steps 1 (given: 3)" in err and "--seed 0 (given: 4)" in err, err
    assert "--buffer-size 64 (given: 99)" in err, err  # 64 steps of 2 envs: a buffer of 64
    assert _steps(d) and (d / "metrics.json").is_file()


def test_a_failed_run_releases_its_claim_and_resume_retries_it(in_tmp, capsys, monkeypatch):
    """A run that failed after its first checkpoint: the folder is kept, its claim says
    ``failed``, its lock is free, and the retry is ``--resume`` into the same folder."""
    real_save = checkpoint_module.CheckpointEvery.save

    def save_then_fail(self):
        real_save(self)
        raise RuntimeError("a failure after the first checkpoint")

    with monkeypatch.context() as patch:
        patch.setattr(checkpoint_module.CheckpointEvery, "save", save_then_fail)
        assert cli.main(_train("--checkpoint-every", "16", "--out", "d")) == 1
    d = in_tmp / "d"
    assert json.loads((d / CLAIM).read_text())["state"] == "failed"
    fd = os.open(d / CLAIM, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if the claim were still held
    finally:
        os.close(fd)
    capsys.readouterr()
    assert cli.main(_train("--out", "d")) == 2
    assert "pass --resume d to continue it" in capsys.readouterr().err
    assert cli.main(_train("--resume", "d")) == 0
    assert (d / "metrics.json").is_file()


def test_ctrl_c_before_the_first_checkpoint_says_how_to_get_one(in_tmp, capsys, monkeypatch):
    import agents.pipelines.model_selection

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    real = agents.pipelines.model_selection.train_selected
    monkeypatch.setattr(agents.pipelines.model_selection, "train_selected", ctrl_c)
    assert cli.main(_train("--out", "a")) == 130
    err = capsys.readouterr().err
    assert "no checkpoint was written" in err and "--checkpoint-every N" in err
    assert not (in_tmp / "a").exists()
    assert cli.main(_train("--out", "b", "--checkpoint-every", "1000")) == 130
    assert "no checkpoint was written yet (the first comes after 1,000" in capsys.readouterr().err
    # Resumed into a new folder: the checkpoint it started from can still be resumed.
    monkeypatch.setattr(agents.pipelines.model_selection, "train_selected", real)
    _trained_run(in_tmp, "d")
    monkeypatch.setattr(agents.pipelines.model_selection, "train_selected", ctrl_c)
    capsys.readouterr()
    assert cli.main(_train("--resume", "d", "--out", "c")) == 130
    err = capsys.readouterr().err
    assert "cannot be resumed" not in err and "train --resume d (with the same options)" in err


# ------------------------------------------------------------------ claims


def test_a_second_overwrite_waits_for_no_claim_it_does_not_hold(in_tmp, monkeypatch):
    """Run B starts while run A holds the claim of the same ``--out``: B is refused and empties
    nothing (both used to go on, one report lost)."""
    assert cli.main(_backtest("--out", "f")) == 0
    args_b = cli.build_parser().parse_args(_backtest("--out", "f", "--overwrite"))
    seen = []

    def second_run_meanwhile() -> None:
        monkeypatch.setattr(run_folder, "claim_pause", lambda: None)
        (in_tmp / "f" / "a-file").write_text("run A's")
        with pytest.raises(cli.UsageError, match="still going"):
            run_folder.claim_out(args_b, "backtest")
        seen.append((in_tmp / "f" / "a-file").read_text())

    monkeypatch.setattr(run_folder, "claim_pause", second_run_meanwhile)
    args_a = cli.build_parser().parse_args(_backtest("--out", "f", "--overwrite"))
    out = run_folder.claim_out(args_a, "backtest")
    assert seen == ["run A's"] and out == Path("f")
    run_folder.forget_claims()


def test_two_overwrite_processes_on_one_folder_one_goes_on(in_tmp):
    """Two processes, each pausing 0.6 s with the claim held: exactly one exits 0."""
    assert cli.main(_backtest("--out", "f")) == 0
    code = (
        "import sys, time; from agents import cli; from agents.cli import run_folder; "
        "run_folder.claim_pause = lambda: time.sleep(0.6); "
        "sys.exit(cli.main(sys.argv[1:]))"
    )
    argv = [sys.executable, "-c", code, *_backtest("--out", "f", "--overwrite")]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True) for _ in "ab"]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    assert sorted(rc for rc, _ in results) == [0, 2], results
    assert "still going" in next(err for rc, err in results if rc == 2)


def test_a_live_pid_in_a_finished_runs_claim_does_not_block(in_tmp):
    """Claims are locks, not process ids: a process id reused by another process (a container
    restarted) does not keep a finished folder from ``--overwrite``."""
    assert cli.main(_backtest("--out", "f")) == 0
    claim = json.loads((in_tmp / "f" / CLAIM).read_text())
    (in_tmp / "f" / CLAIM).write_text(json.dumps({**claim, "pid": os.getppid()}))
    assert cli.main(_backtest("--out", "f", "--overwrite")) == 0


def test_a_huge_claim_file_is_refused_without_being_read(in_tmp, capsys):
    """A run folder whose claim is a sparse file of 256 MB: the folder is refused as one not a
    command wrote, reading at most MAX_SIDE_FILE_BYTES + 1 bytes of it (the review's 2 GB
    claim cost 4.3 GB to refuse)."""
    (in_tmp / "f").mkdir()
    (in_tmp / "f" / "notes.txt").write_text("a file of the user's")
    with open(in_tmp / "f" / CLAIM, "wb") as fh:
        fh.truncate(256 << 20)
    tracemalloc.start()
    try:
        assert cli.main(_backtest("--out", "f")) == 2
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "not empty" in capsys.readouterr().err
    assert peak < MAX_SIDE_FILE_BYTES + (16 << 20), peak


def test_side_files_are_read_only_when_regular_and_small(tmp_path):
    """metrics.json linked to /dev/zero, a FIFO, a folder, a file over the cap: one
    ArchiveError naming it, at once (nothing waits on the FIFO's writer); a checkpoint whose
    checkpoint.json is over the cap is one that cannot be used."""
    zero, fifo, big = tmp_path / "metrics.json", tmp_path / "fifo.json", tmp_path / "big.json"
    zero.symlink_to("/dev/zero")
    os.mkfifo(fifo)
    big.write_bytes(b" " * 1001)
    for path, message in (
        (zero, "not a regular file"),
        (fifo, "not a regular file"),
        (tmp_path, "not a regular file"),
    ):
        with pytest.raises(ArchiveError, match=rf"{path.name}.*{message}"):
            read_side_json(path)
    with pytest.raises(ArchiveError, match=r"big.json' has more than 1000 bytes"):
        read_side_file(big, limit=1000)
    with pytest.raises(json.JSONDecodeError):  # within the cap it is read and parsed
        read_side_json(big, limit=1001)
    (tmp_path / "ok.json").write_text('{"a": 1}')
    assert read_side_json(tmp_path / "ok.json") == {"a": 1}
    folder = save_checkpoint(_small_model(), tmp_path / "ck")
    with open(folder / "checkpoint.json", "r+b") as fh:
        fh.truncate(MAX_SIDE_FILE_BYTES + 1)
    with pytest.raises(ArchiveError, match="checkpoint.json is damaged.*has more than"):
        resolve_checkpoint(folder)


def test_resume_of_a_run_still_going_is_refused_in_place_and_pinned_elsewhere(in_tmp, capsys):
    d = _trained_run(in_tmp)
    fd = os.open(d / CLAIM, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the run "still going"
    try:
        capsys.readouterr()
        assert cli.main(_train("--resume", "d")) == 2
        assert "is still going" in capsys.readouterr().err
        assert cli.main(_train("--resume", "d", "--out", "e")) == 0
        assert (in_tmp / "e" / "metrics.json").is_file()
    finally:
        os.close(fd)


def test_resume_refuses_a_run_folder_holding_links_and_writes_nothing_through_them(
    in_tmp, capsys, monkeypatch
):
    """A run folder whose report names were links: ``train --resume`` overwrote their targets
    (a ``.pth`` file in site-packages ran at the next Python start)."""
    import agents.pipelines.model_selection

    d = _trained_run(in_tmp)
    outside = in_tmp / "outside"
    outside.mkdir()
    (outside / "victim.pth").write_text("mine")
    (d / "index.html").unlink()
    (d / "index.html").symlink_to(outside / "victim.pth")
    (d / "metrics.json").unlink()
    (d / "metrics.json").symlink_to(outside / "created.pth")  # dangling: was created
    (in_tmp / "d-link").symlink_to(d)

    def no_training(*args, **kwargs):
        raise AssertionError("trained before the folder was checked")

    monkeypatch.setattr(agents.pipelines.model_selection, "train_selected", no_training)
    capsys.readouterr()
    assert cli.main(_train("--resume", "d")) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(
        "gpu-trading-env train: error: --resume d (its run folder d): it holds the symbolic link"
    ), err
    assert "remove the link, or pass --out NEW" in err
    # A run folder that is itself a link is refused, naming the option that gave it.
    assert cli.main(_train("--resume", "d-link/checkpoints")) == 2
    assert "--resume d-link/checkpoints (its run folder d-link): is a symbolic link" in (
        capsys.readouterr().err
    )
    assert (outside / "victim.pth").read_text() == "mine"
    assert sorted(p.name for p in outside.iterdir()) == ["victim.pth"]


def test_resume_messages_name_what_was_passed_and_why(in_tmp, capsys):
    """``--resume`` of a file, and of checkpoints that all have an index but are damaged."""
    d = _trained_run(in_tmp)
    newest = d / "checkpoints" / _steps(d)[-1]
    capsys.readouterr()
    assert cli.main(_train("--resume", str(newest / "checkpoint.json"))) == 2
    err = capsys.readouterr().err
    assert "checkpoint.json: is a file; pass the train run's folder" in err, err
    for step in _steps(d):
        with open(d / "checkpoints" / step / "model.zip", "ab") as fh:
            fh.write(b"x")
    assert cli.main(_train("--resume", "d")) == 2
    err = capsys.readouterr().err
    assert "model.zip does not match checkpoint.json" in err and "no checkpoint.json" not in err


# ------------------------------------------------------------------ saves


def _failing_nth_write(monkeypatch, n: int) -> None:
    """Every write of a checkpoint's files goes through atomic_write: the n-th raises ENOSPC."""
    calls = [0]
    for module in (safe_archive, checkpoint_module):
        real = module.atomic_write

        def full_disk(*args, _real=real, **kwargs):
            calls[0] += 1
            if calls[0] == n:
                raise OSError(errno.ENOSPC, "No space left on device", str(args[0]))
            return _real(*args, **kwargs)

        monkeypatch.setattr(module, "atomic_write", full_disk)


@pytest.mark.parametrize("nth", [1, 2, 3, 4])
def test_a_save_that_fails_midway_leaves_the_previous_checkpoint(tmp_path, monkeypatch, nth):
    model = _small_model()
    model.learn(40)
    save_checkpoint(model, tmp_path / "ck")
    model.learn(40, reset_num_timesteps=False)
    with monkeypatch.context() as patch:
        _failing_nth_write(patch, nth)
        with pytest.raises(OSError, match="No space left"):
            save_checkpoint(model, tmp_path / "ck")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]  # no partial folder left
    again = GpuDQN.load_checkpoint(tmp_path / "ck", env=None, device="cpu")
    assert again.num_timesteps == 40


@pytest.mark.parametrize("swap", [True, False])
def test_a_second_save_replaces_the_checkpoint_whole(tmp_path, monkeypatch, swap):
    if not swap:  # a system without renameat2(RENAME_EXCHANGE)
        monkeypatch.setattr(checkpoint_module, "exchange_folders", lambda a, b: False)
    model = _small_model()
    model.learn(40)
    save_checkpoint(model, tmp_path / "ck")
    model.learn(40, reset_num_timesteps=False)
    save_checkpoint(model, tmp_path / "ck")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]
    assert GpuDQN.load_checkpoint(tmp_path / "ck", env=None, device="cpu").num_timesteps == 80
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("x")
    with pytest.raises(FileExistsError, match=r"'.*mine'.*notes\.txt.*pass a new folder"):
        save_checkpoint(model, tmp_path / "mine")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "x"


# ------------------------------------------------------------------ pins and pruning


def _three_checkpoints(folder: Path) -> GpuDQN:
    model = _small_model()
    for _ in range(3):
        model.learn(24, reset_num_timesteps=model.num_timesteps == 0)
        save_checkpoint(model, folder / f"step-{model.num_timesteps:012d}")
    return model


def test_pruning_keeps_a_pinned_checkpoint_until_it_is_released(tmp_path):
    ck = tmp_path / "ck"
    _three_checkpoints(ck)
    oldest, middle, newest = sorted(ck.iterdir())
    with pinned_checkpoint(oldest) as pinned:
        assert pinned == oldest
        assert prune_checkpoints(ck, 1) == [middle]
        assert GpuDQN.load_checkpoint(pinned, env=None, device="cpu").num_timesteps == 24
    assert prune_checkpoints(ck, 1) == [oldest]
    assert list(ck.iterdir()) == [newest]
    # What a killed save or prune left is removed; a live process's partial folder is not.
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    host = checkpoint_module._HOST
    dead = ck / f".step-000000000096.partial-{host}-{gone.pid}-0a1b2c3d"
    pruned = ck / f".step-000000000012.pruned-{host}-{gone.pid}-0a1b2c3d"
    live = ck / f".step-000000000120.partial-{host}-{os.getpid()}-0a1b2c3d"
    for left in (dead, pruned, live):
        left.mkdir()
    prune_checkpoints(ck, 1)
    assert sorted(ck.iterdir()) == [live, newest]
    with pytest.raises(ValueError, match="keep = -1 is invalid"):
        prune_checkpoints(ck, -1)


def test_a_checkpoint_pruned_between_choice_and_pin_is_chosen_again(tmp_path, monkeypatch):
    """The writer prunes the chosen checkpoint before the reader pins it: the reader takes the
    newest one then; given that one checkpoint by name, it says it was pruned."""
    ck = tmp_path / "ck"
    model = _three_checkpoints(ck)
    chosen = []

    def writer_saves_and_prunes(folder: Path) -> None:
        chosen.append(folder.name)
        if len(chosen) == 1:
            model.learn(24, reset_num_timesteps=False)
            save_checkpoint(model, ck / f"step-{model.num_timesteps:012d}")
            prune_checkpoints(ck, 1)

    monkeypatch.setattr(checkpoint_module, "pin_hook", writer_saves_and_prunes)
    with pinned_checkpoint(ck) as pinned:
        assert pinned.name == "step-000000000096"
    assert chosen == ["step-000000000072", "step-000000000096"]
    chosen.clear()
    monkeypatch.setattr(
        checkpoint_module, "pin_hook", lambda folder: prune_checkpoints(ck, 0) and None
    )
    with pytest.raises(ArchiveError, match="was removed as it was about to be read"):
        with pinned_checkpoint(ck / "step-000000000096"):
            pass
    with pytest.raises(FileNotFoundError):
        resolve_checkpoint(ck / "step-000000000096")
