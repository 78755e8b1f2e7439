"""The report folder of a command run: claimed under a lock, never shared, removed if left empty.

- Without ``--out``, a run gets ``runs/<command>-<YYYYmmdd-HHMMSS>`` made with an exclusive
  ``mkdir``; when another run made that name first (two runs in the same second), ``-2``,
  ``-3``... are tried in turn, so no two runs ever write one folder.
- An explicit ``--out`` may name a new folder or an empty one. One that holds anything is
  refused unless ``--overwrite`` is given, which empties it first, and only when it is a folder
  a command wrote (it holds the claim file :data:`CLAIM`): ``--out ~ --overwrite`` must not
  wipe a home folder.
- The claim is an exclusive lock (``flock``) on :data:`CLAIM`, taken before the folder's
  contents are looked at and held until the run ends: of two runs given the same ``--out`` at
  once exactly one proceeds, the other stops with a one-line error, and nothing is emptied by a
  run that does not hold it. The operating system drops the lock when the process ends however
  it ends (an error, Ctrl-C, ``kill -9``), so a run that stopped never blocks the next one. The
  file itself stays as the mark of a command's folder; it holds the command, process id, start
  time and how the run ended (``running``, ``completed``, ``failed``, ``interrupted``).
- ``train --resume`` continues a run in its own folder (:func:`resumed_run_folder`), which is
  claimed as it is: its checkpoints are kept, its report is replaced when the run ends.
  ``--overwrite`` is refused there, since it would empty the checkpoints being resumed.
- A path that is a file, a parent that cannot be written or is a file: a one-line error (exit 2).
- A run folder that is a symbolic link, or a resumed one holding one, is refused: a report
  written through a link would land outside the folder (every file is written by
  :func:`~gpu_trading_env.atomic_file.atomic_write`, which replaces a link, never follows it).
- A run that stops on an error or Ctrl-C before writing anything removes the folder it made
  (:func:`release_unwritten`), so an interrupted run leaves no empty folder behind.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from agents.cli.options import UsageError
from agents.files.side_files import read_side_json

try:
    import fcntl
except ImportError:  # Windows: msvcrt's byte-range lock instead
    fcntl = None  # type: ignore[assignment]
    import msvcrt

__all__ = [
    "CLAIM",
    "check_out",
    "claim_out",
    "forget_claims",
    "release_unwritten",
    "resumed_run_folder",
]

CLAIM = ".gpu-trading-env-run"  # JSON: command, process id, host, start time, state
RUNS_ROOT = Path("runs")
_MAX_SUFFIX = 10_000
CHECKPOINTS = "checkpoints"  # the train folder's checkpoint folder (agents.cli.train)
# The claim file is opened as itself: a link there must not have its target written.
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


@dataclass
class _Claim:
    """A folder this process claimed: whether it made it, and the locked claim file."""

    folder: Path
    made: bool
    fd: int | None  # None: the runs/ root this process made (released after its folders)
    command: str = ""
    started: float = 0.0


# Released last-in first: a folder before the runs/ root it was made in.
_claimed: list[_Claim] = []


class _Held(Exception):
    """The claim file is locked by another process (``pid`` from the file, when readable)."""

    def __init__(self, pid: int | None) -> None:
        super().__init__(pid)
        self.pid = pid


def _try_lock(fd: int) -> bool:
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        else:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
    except OSError:
        return False
    return True


def _locked(path: Path) -> bool:
    """Whether another process holds the claim file ``path`` now."""
    try:
        fd = os.open(path, os.O_RDWR | _NOFOLLOW)
    except OSError:
        return False
    try:
        return not _try_lock(fd)
    finally:
        os.close(fd)  # closing drops the lock this test took


def _read_claim(path: Path) -> dict | None:
    """The claim's JSON, or None when the file is absent, empty or not a command's claim."""
    try:
        claim = read_side_json(path)  # an ArchiveError (ValueError) for a device or a huge file
    except (OSError, ValueError):
        return None
    return claim if isinstance(claim, dict) and "command" in claim else None


def _take_claim(out: Path) -> tuple[int, bool]:
    """Open ``out/CLAIM`` (created if absent) and lock it: ``(fd, whether a command's claim was
    there before)``. Raises :class:`_Held` when another process holds it."""
    path = out / CLAIM
    for _attempt in range(100):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            try:
                fd = os.open(path, os.O_RDWR | _NOFOLLOW)
            except FileNotFoundError:
                continue  # its holder removed the folder's claim meanwhile: look again
        if not _try_lock(fd):
            os.close(fd)
            claim = _read_claim(path)
            raise _Held(None if claim is None else claim.get("pid"))
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            # An empty claim file is one being created (or left by a claim that failed): only a
            # written claim marks a command's folder.
            return fd, _read_claim(path) is not None
        os.close(fd)  # its holder removed it before this lock: lock the file there now
    raise OSError(f"{path}: the claim file kept changing while it was locked")


def _write_state(claim: _Claim, state: str) -> None:
    """Record the run's command, process and ``state`` in its locked claim file."""
    assert claim.fd is not None
    record = {
        "command": claim.command,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": claim.started,
        "state": state,
    }
    if state != "running":
        record["ended"] = time.time()
    data = json.dumps(record).encode("utf-8")
    os.ftruncate(claim.fd, 0)
    os.lseek(claim.fd, 0, os.SEEK_SET)
    os.write(claim.fd, data)


def _held_message(label: str, pid: int | None) -> str:
    who = f"process {pid}" if pid is not None else "another process"
    return f"{label}: a run that is still going ({who}) holds this folder; pass a new folder"


def _entries(out: Path) -> list[Path]:
    return [p for p in out.iterdir() if p.name != CLAIM]


def _link_in(folder: Path) -> Path | None:
    """The first symbolic link in ``folder`` and its sub-folders (links are not followed)."""
    for root, dirs, files in os.walk(folder):
        for name in (*dirs, *files):
            if (Path(root) / name).is_symlink():
                return Path(root) / name
    return None


def _link_problem(out: Path) -> str | None:
    """Why a resumed run folder cannot be written because of a symbolic link in it, or None."""
    link = _link_in(out)
    if link is None:
        return None
    return (
        f"it holds the symbolic link {link} (to {os.readlink(link)!r}), which no run writes: "
        "the run would write through it, outside the folder; remove the link, or pass --out NEW"
    )


def _problem(out: Path, overwrite: bool, in_place: bool = False) -> str | None:
    """Why ``out`` cannot be the run's folder, or None (checked again under the claim)."""
    if out.is_symlink():
        return (
            f"is a symbolic link (to {os.readlink(out)!r}): a run writes only a real folder; pass "
            "the folder it points to"
        )
    if out.exists() and not out.is_dir():
        return "is a file, not a folder; pass a folder path"
    if out.is_dir():
        if (out / CLAIM).is_symlink():
            return (
                f"its {CLAIM} is a symbolic link, which no run writes; remove it, or pass a new "
                "folder"
            )
        entries = _entries(out)
        has_claim = (out / CLAIM).is_file()
        if entries and not overwrite and not in_place:
            return _occupied(out)
        if entries and not has_claim:
            return (
                f"--overwrite empties only a folder a command wrote (it holds {CLAIM}); this one "
                "does not: pass a new folder, or empty it yourself"
            )
        if not os.access(out, os.W_OK | os.X_OK):
            return "the folder is not writable; pass a folder you can write"
        return _link_problem(out) if in_place else None
    parent = next((p for p in out.parents if p.exists()), Path("."))
    if not parent.is_dir():
        return f"{parent} is a file, not a folder"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"cannot create it: {parent} is not writable; pass a folder you can write"
    return None


def _occupied(out: Path) -> str:
    """The refusal of a folder that is not empty, with the way to continue a stopped train run."""
    claim = _read_claim(out / CLAIM)
    if (
        claim is not None
        and claim.get("command") == "train"
        and claim.get("state") in ("failed", "interrupted", "running")
        and (out / CHECKPOINTS).is_dir()
        and not _locked(out / CLAIM)
    ):
        how = {"running": "was killed", "failed": "failed", "interrupted": "was interrupted"}
        return (
            f"the folder holds a train run that {how[claim['state']]} before its report: pass "
            f"--resume {out} to continue it from its checkpoints, --overwrite to empty it "
            "first, or a new folder"
        )
    return "the folder exists and is not empty; pass a new folder, or --overwrite to empty it first"


def resumed_run_folder(resume: str | os.PathLike[str]) -> Path | None:
    """The train folder that ``--resume`` names or holds the checkpoints of (a train folder,
    its ``checkpoints`` folder or one checkpoint in it), or None when it is not in one."""
    path = Path(resume)
    candidates = [path]
    if path.name == CHECKPOINTS:
        candidates.append(path.parent)
    if path.parent.name == CHECKPOINTS:
        candidates.append(path.parent.parent)
    for folder in candidates:
        if (folder / CLAIM).is_file():
            return folder
    return None


def _same(a: Path, b: Path) -> bool:
    return a.resolve() == b.resolve()


def _inside(child: Path, folder: Path) -> bool:
    return folder.resolve() in (child.resolve(), *child.resolve().parents)


def _resume_target(args: argparse.Namespace) -> tuple[Path | None, bool]:
    """``(the folder the run writes, whether it is the resumed run's own folder)``; the folder
    is None for a run that gets a new ``runs/`` folder. Raises UsageError for ``--resume`` with
    an ``--out`` that would destroy what it reads."""
    given = getattr(args, "out", None)
    resume = getattr(args, "resume", None)
    overwrite = bool(getattr(args, "overwrite", False))
    if resume is None:
        return (Path(given) if given else None), False
    if not Path(resume).exists():
        raise UsageError(f"--resume {resume}: no checkpoint folder {resume!r}")
    if not Path(resume).is_dir():
        raise UsageError(
            f"--resume {resume}: is a file; pass the train run's folder, its {CHECKPOINTS} "
            f"folder or one checkpoint's folder ({Path(resume).parent} if it is one)"
        )
    run = resumed_run_folder(resume)
    if not given:
        if run is None:
            raise UsageError(
                f"--resume {resume}: it is not in a train run's folder (no {CLAIM} there or "
                f"above its {CHECKPOINTS} folder); pass --out FOLDER for the resumed run's report"
            )
        if overwrite:
            raise UsageError(_in_place_overwrite(resume, run))
        return run, True
    out = Path(given)
    if run is not None and out.exists() and _same(out, run):
        if overwrite:
            raise UsageError(_in_place_overwrite(resume, run))
        return out, True
    if overwrite and out.exists() and _inside(Path(resume), out):
        raise UsageError(
            f"--out {given} --overwrite would empty {given}, which holds the checkpoint "
            f"--resume {resume} reads: pass a new folder for --out"
        )
    return out, False


def _in_place_overwrite(resume: str, run: Path) -> str:
    return (
        f"--resume {resume} continues the run in its folder {run} (its checkpoints kept, its "
        "report replaced at the end); --overwrite would empty the checkpoints it reads: leave "
        "out --overwrite, or pass --out NEW for a new folder"
    )


def _label(args: argparse.Namespace, out: Path | None) -> str:
    """The option that named the run's folder ``out``, for messages: ``--out``, or ``--resume``
    for a resumed run's own folder, or the default root where neither was given."""
    if getattr(args, "out", None):
        return f"--out {args.out}"
    if getattr(args, "resume", None) is not None and out is not None:
        return f"--resume {args.resume} (its run folder {out})"
    return f"the default report folder in {RUNS_ROOT}/ (no --out given)"


def check_out(args: argparse.Namespace) -> None:
    """Refuse a bad ``--out`` before any work starts (:func:`claim_out` checks again, under the
    claim)."""
    given = getattr(args, "out", None)
    if not given and getattr(args, "overwrite", False) and getattr(args, "resume", None) is None:
        raise UsageError("--overwrite applies to --out: pass --out FOLDER with it")
    out, in_place = _resume_target(args)
    if out is not None:
        problem = _problem(out, bool(getattr(args, "overwrite", False)), in_place)
        if problem:
            raise UsageError(f"{_label(args, out)}: {problem}")


def claim_out(args: argparse.Namespace, command: str) -> Path:
    """The run's folder (``--out``; the resumed run's own folder for ``train --resume`` without
    ``--out``; else a new ``runs/<command>-<date>-<time>``), created now and claimed by this
    process until it ends; raises UsageError naming the folder and the fix."""
    out, in_place = _resume_target(args)
    try:
        if out is not None:
            overwrite = bool(getattr(args, "overwrite", False))
            return _claim_explicit(out, overwrite, command, in_place, _label(args, out))
        return _claim_default(command)
    except OSError as exc:
        raise UsageError(
            f"{_label(args, out)}: cannot create the folder ({exc.strerror or exc}); pass "
            "--out FOLDER you can write"
        ) from None


def _register(out: Path, made: bool, fd: int, command: str) -> None:
    claim = _Claim(out, made, fd, command, time.time())
    try:
        _write_state(claim, "running")
    except BaseException:
        os.close(fd)
        raise
    _claimed.append(claim)


def _claim_default(command: str) -> Path:
    made_root = not RUNS_ROOT.exists()
    if RUNS_ROOT.exists() and not RUNS_ROOT.is_dir():
        raise UsageError(f"{RUNS_ROOT} is a file: the default report folders go in it; pass --out")
    RUNS_ROOT.mkdir(parents=True, exist_ok=True)
    if made_root:
        _claimed.append(_Claim(RUNS_ROOT, True, None))
    base = f"{command}-{time.strftime('%Y%m%d-%H%M%S')}"
    for k in range(1, _MAX_SUFFIX):
        out = RUNS_ROOT / (base if k == 1 else f"{base}-{k}")
        try:
            out.mkdir()  # exclusive: of two runs that pick this name, one gets it
        except FileExistsError:
            continue
        try:
            fd, _ = _take_claim(out)
        except _Held:
            continue  # an explicit --out of another run took the new folder first
        _register(out, True, fd, command)
        return out
    raise UsageError(f"{RUNS_ROOT}/{base}: {_MAX_SUFFIX} folders of that name exist; pass --out")


def claim_pause() -> None:
    """Called with the claim held, before the folder is looked at (tests widen the race here)."""


def _claim_explicit(out: Path, overwrite: bool, command: str, in_place: bool, label: str) -> Path:
    problem = _problem(out, overwrite, in_place)
    if problem:
        raise UsageError(f"{label}: {problem}")
    made = False
    if not out.exists():
        try:
            out.mkdir(parents=True)
            made = True
        except FileExistsError:
            pass  # another run made it meanwhile: the claim below decides who owns it
    try:
        fd, commands_folder = _take_claim(out)
    except _Held as held:
        if in_place:
            who = f"process {held.pid}" if held.pid is not None else "another process"
            raise UsageError(
                f"{label}: the run there is still going ({who}) and writes its folder; pass "
                "--out NEW to continue from its newest checkpoint in a new folder"
            ) from None
        raise UsageError(_held_message(label, held.pid)) from None
    try:
        claim_pause()
        entries = _entries(out)
        link = _link_problem(out) if in_place else None
        if link is not None:
            raise UsageError(f"{label}: {link}")
        if entries and not commands_folder:
            raise UsageError(
                f"{label}: "
                + (
                    f"--overwrite empties only a folder a command wrote (it holds {CLAIM}); this "
                    "one does not: pass a new folder, or empty it yourself"
                    if overwrite
                    else "the folder exists and is not empty; pass a new folder"
                )
            )
        if entries and not in_place:
            if not overwrite:
                raise UsageError(f"{label}: {_occupied(out)}")
            for entry in entries:
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
        _register(out, made, fd, command)
    except BaseException:
        if not commands_folder:
            (out / CLAIM).unlink(missing_ok=True)  # the empty claim file this run created
        os.close(fd)
        if made:
            shutil.rmtree(out, ignore_errors=True)
        raise
    return out


def _holds_output(folder: Path) -> bool:
    """Whether ``folder`` holds any file but the claim (empty sub-folders do not count)."""
    for _root, _dirs, files in os.walk(folder):
        if any(not (Path(_root) == folder and f == CLAIM) for f in files):
            return True
    return False


def release_unwritten(outcome: str = "failed") -> list[Path]:
    """End the claims of a run stopped by an error (``outcome`` ``"failed"``) or Ctrl-C
    (``"interrupted"``): a folder it made that holds nothing but the claim is removed, an
    explicit ``--out`` that existed before the run is only emptied of the claim, and a folder
    that holds the run's files keeps them with ``outcome`` in its claim. Every lock is
    released. Returns the folders removed."""
    removed = []
    while _claimed:
        claim = _claimed.pop()
        folder = claim.folder
        try:
            if claim.fd is None:
                if claim.made and folder.is_dir() and not any(folder.iterdir()):
                    folder.rmdir()
                continue
            if not folder.is_dir():
                continue
            if _holds_output(folder):
                _write_state(claim, outcome)
            elif claim.made:
                shutil.rmtree(folder)
                removed.append(folder)
            else:
                (folder / CLAIM).unlink(missing_ok=True)
        except OSError:
            continue  # best effort: never mask the error that stopped the run
        finally:
            if claim.fd is not None:
                os.close(claim.fd)
    return removed


def forget_claims() -> None:
    """Keep every claimed folder and mark its run completed (the run finished); the locks are
    released."""
    while _claimed:
        claim = _claimed.pop()
        if claim.fd is None:
            continue
        try:
            _write_state(claim, "completed")
        except OSError:
            pass  # the report is written; a claim file that cannot be updated changes nothing
        finally:
            os.close(claim.fd)
