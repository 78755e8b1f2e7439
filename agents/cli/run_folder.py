"""The report folder of a command run: claimed atomically, never shared, removed if left empty.

- Without ``--out``, a run gets ``runs/<command>-<YYYYmmdd-HHMMSS>`` made with an exclusive
  ``mkdir``; when another run made that name first (two runs in the same second), ``-2``,
  ``-3``... are tried in turn, so no two runs ever write one folder.
- An explicit ``--out`` may name a new folder or an empty one. One that holds anything is
  refused unless ``--overwrite`` is given, which empties it first, and only when it is a folder
  a command wrote (it holds the claim file :data:`CLAIM`): ``--out ~ --overwrite`` must not
  wipe a home folder.
- The claim file is created with ``O_EXCL`` in every folder a run takes, so of two runs given the
  same ``--out`` at once exactly one proceeds; the other stops with a one-line error.
- A path that is a file, a parent that cannot be written or is a file: a one-line error (exit 2).
- A run that stops on an error or Ctrl-C before writing anything removes the folder it made
  (:func:`release_unwritten`), so an interrupted run leaves no empty folder behind.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

from agents.cli.options import UsageError

__all__ = ["CLAIM", "check_out", "claim_out", "release_unwritten"]

CLAIM = ".gpu-trading-env-run"  # JSON: the command, its process id and start time
RUNS_ROOT = Path("runs")
_MAX_SUFFIX = 10_000

# Folders this process claimed, with whether it made them (and the root it made, if any).
_claimed: list[tuple[Path, bool]] = []


def _problem(out: Path, overwrite: bool) -> str | None:
    """Why ``out`` cannot be the run's folder, or None."""
    if out.exists() and not out.is_dir():
        return "is a file, not a folder; pass a folder path"
    if out.is_dir():
        entries = list(out.iterdir())
        if entries and not overwrite:
            return (
                "the folder exists and is not empty; pass a new folder, or --overwrite to empty "
                "it first"
            )
        if entries and not (out / CLAIM).is_file():
            return (
                f"--overwrite empties only a folder a command wrote (it holds {CLAIM}); this one "
                "does not: pass a new folder, or empty it yourself"
            )
        if not os.access(out, os.W_OK | os.X_OK):
            return "the folder is not writable; pass a folder you can write"
        return None
    parent = next((p for p in out.parents if p.exists()), Path("."))
    if not parent.is_dir():
        return f"{parent} is a file, not a folder"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"cannot create it: {parent} is not writable; pass a folder you can write"
    return None


def check_out(args: argparse.Namespace) -> None:
    """Refuse a bad ``--out`` before any work starts (:func:`claim_out` checks again, atomically)."""
    given = getattr(args, "out", None)
    if given:
        problem = _problem(Path(given), bool(getattr(args, "overwrite", False)))
        if problem:
            raise UsageError(f"--out {given}: {problem}")
    elif getattr(args, "overwrite", False):
        raise UsageError("--overwrite applies to --out: pass --out FOLDER with it")


def claim_out(args: argparse.Namespace, command: str) -> Path:
    """The run's folder (``--out``, or a new ``runs/<command>-<date>-<time>``), created now and
    claimed by this process; raises UsageError naming the folder and the fix."""
    given = getattr(args, "out", None)
    try:
        if given:
            out = _claim_explicit(Path(given), bool(getattr(args, "overwrite", False)), command)
        else:
            out = _claim_default(command)
    except OSError as exc:
        where = given if given else str(RUNS_ROOT)
        raise UsageError(
            f"--out {where}: cannot create the folder ({exc.strerror or exc}); pass a folder you "
            "can write"
        ) from None
    return out


def _claim_default(command: str) -> Path:
    made_root = not RUNS_ROOT.exists()
    if RUNS_ROOT.exists() and not RUNS_ROOT.is_dir():
        raise UsageError(f"{RUNS_ROOT} is a file: the default report folders go in it; pass --out")
    RUNS_ROOT.mkdir(parents=True, exist_ok=True)
    base = f"{command}-{time.strftime('%Y%m%d-%H%M%S')}"
    for k in range(1, _MAX_SUFFIX):
        out = RUNS_ROOT / (base if k == 1 else f"{base}-{k}")
        try:
            out.mkdir()  # exclusive: of two runs that pick this name, one gets it
        except FileExistsError:
            continue
        if made_root:  # released after the folder in it (the list is released last-in first)
            _claimed.append((RUNS_ROOT, True))
        _claimed.append((out, True))
        _write_claim(out, command)
        return out
    raise UsageError(f"{RUNS_ROOT}/{base}: {_MAX_SUFFIX} folders of that name exist; pass --out")


def _claim_explicit(out: Path, overwrite: bool, command: str) -> Path:
    problem = _problem(out, overwrite)
    if problem:
        raise UsageError(f"--out {out}: {problem}")
    made = False
    if not out.exists():
        try:
            out.mkdir(parents=True)
            made = True
        except FileExistsError:
            pass  # another run made it meanwhile: the claim below decides who owns it
    if overwrite and (out / CLAIM).is_file():
        owner = _claim_owner(out)
        if owner is not None and owner != os.getpid():
            raise UsageError(
                f"--out {out}: a run that is still going (process {owner}) writes this folder; "
                "pass a new folder"
            )
        for entry in out.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    elif any(out.iterdir()):
        raise UsageError(
            f"--out {out}: the folder exists and is not empty (another run took it); pass a new "
            "folder"
        )
    try:
        _write_claim(out, command)
    except FileExistsError:
        raise UsageError(
            f"--out {out}: another run took this folder at the same time; pass a new folder"
        ) from None
    _claimed.append((out, made))
    return out


def _write_claim(out: Path, command: str) -> None:
    with open(out / CLAIM, "x", encoding="utf-8") as fh:  # "x": O_CREAT | O_EXCL
        json.dump({"command": command, "pid": os.getpid(), "started": time.time()}, fh)


def _claim_owner(out: Path) -> int | None:
    """The process id in ``out``'s claim if that process is alive on this host, else None."""
    try:
        pid = int(json.loads((out / CLAIM).read_text(encoding="utf-8"))["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if os.name != "posix":
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except OSError:
        return pid
    return pid


def _holds_output(folder: Path) -> bool:
    """Whether ``folder`` holds any file but the claim (empty sub-folders do not count)."""
    for _root, _dirs, files in os.walk(folder):
        if any(not (Path(_root) == folder and f == CLAIM) for f in files):
            return True
    return False


def release_unwritten() -> list[Path]:
    """Remove the folders this process claimed that hold nothing but the claim (a run stopped by
    an error or Ctrl-C before its first file); an explicit ``--out`` that existed before the
    run is only emptied of the claim. Returns the folders removed."""
    removed = []
    while _claimed:
        folder, made = _claimed.pop()
        try:
            if folder == RUNS_ROOT:
                if made and not any(folder.iterdir()):
                    folder.rmdir()
                continue
            if not folder.is_dir() or _holds_output(folder):
                continue
            if made:
                shutil.rmtree(folder)
                removed.append(folder)
            else:
                (folder / CLAIM).unlink(missing_ok=True)
        except OSError:
            continue  # best effort: never mask the error that stopped the run
    return removed


def forget_claims() -> None:
    """Keep every claimed folder (the run completed)."""
    _claimed.clear()
