"""Atomic file writes: a reader sees the old file or the complete new one, never a part.

Every file the project writes (model archives, replay buffers, reports) goes through
:func:`atomic_write`: the bytes go to a temporary file in the destination's folder, are flushed
and ``fsync``-ed, and only then is the temporary renamed over the destination with
``os.replace`` (atomic on POSIX and Windows within one file system). A write that raises midway
removes the temporary and leaves the previous file untouched.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import tempfile
from collections.abc import Iterator
from typing import IO

__all__ = ["atomic_write", "with_suffix_if_missing"]


def with_suffix_if_missing(path: str | os.PathLike[str], suffix: str) -> pathlib.Path:
    """``path`` with ``.suffix`` appended when it has none (SB3's ``open_path`` rule)."""
    p = pathlib.Path(path)
    if p.suffix == "" and suffix:
        p = pathlib.Path(f"{p}.{suffix.lstrip('.')}")
    return p


def _fsync_dir(folder: pathlib.Path) -> None:
    # The rename is durable only once the folder entry is on disk; not possible on Windows.
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike[str], mode: str = "wb") -> Iterator[IO]:
    """Open a temporary file next to ``path``; on a clean exit it replaces ``path`` atomically.

    :param path: Destination file. Missing parent folders are created.
    :param mode: ``"wb"`` (default) or ``"w"`` (text, UTF-8).
    :raises ValueError: on another mode, or when ``path`` is an existing folder.
    """
    if mode not in ("wb", "w"):
        raise ValueError(f"mode must be 'wb' or 'w', got {mode!r}")
    dest = pathlib.Path(path)
    if dest.is_dir():
        raise ValueError(f"cannot write to {str(dest)!r}: it is a folder (allowed: a file path)")
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    tmp = pathlib.Path(tmp_name)
    try:
        kwargs = {"encoding": "utf-8", "newline": ""} if mode == "w" else {}
        with os.fdopen(fd, mode, **kwargs) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        if dest.exists():
            # mkstemp creates 0600; keep the permissions the destination had.
            with contextlib.suppress(OSError):
                os.chmod(tmp, dest.stat().st_mode & 0o7777)
        else:
            umask = os.umask(0)
            os.umask(umask)
            with contextlib.suppress(OSError):
                os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _fsync_dir(dest.parent)
