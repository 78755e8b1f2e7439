"""Atomic file writes: a reader sees the old file or the complete new one, never a part.

Every file the project writes (model archives, replay buffers, reports) goes through
:func:`atomic_write`: the bytes go to a temporary file in the destination's folder, are flushed
and ``fsync``-ed, and only then is the temporary renamed over the destination with
``os.replace`` (atomic on POSIX and Windows within one file system). A write that raises midway
removes the temporary and leaves the previous file untouched. A destination that is a symbolic
link is replaced by the new file; the file it pointed to is never written.

A process killed midway (``kill -9``, a power cut) cannot remove its temporary, so each write
first removes the stale temporaries of the same destination: they are named
``.<name>.<host>.<pid>.<random>.tmp`` (``host`` 8 hex digits of the host name's hash), and one is
stale when its process is gone (same host, POSIX) or when it is older than
:data:`STALE_TEMP_SECONDS` (another host, or an older name without a process id). A temporary of
a live writer on this host is never touched, so two processes saving the same file at once both
complete (the last rename wins).
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import pathlib
import socket
import stat
import tempfile
import time
from collections.abc import Iterator
from typing import IO

__all__ = [
    "STALE_TEMP_SECONDS",
    "atomic_write",
    "atomic_write_bytes",
    "atomic_write_text",
    "remove_stale_temporaries",
    "with_suffix_if_missing",
]

# A temporary this old is taken as abandoned whatever wrote it: a save of a few GB takes
# minutes, not a day.
STALE_TEMP_SECONDS = 24 * 3600.0
_HOST = hashlib.sha1(socket.gethostname().encode()).hexdigest()[:8]


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


def _process_alive(pid: int) -> bool:
    if os.name != "posix":
        return True  # no signal 0 on Windows (os.kill would send CTRL_C_EVENT): age decides
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, owned by another user
    except OSError:
        return True
    return True


def remove_stale_temporaries(path: str | os.PathLike[str]) -> list[pathlib.Path]:
    """Remove the temporaries of ``path`` that killed writes left behind (see the module doc).

    :returns: the paths removed.
    """
    dest = pathlib.Path(path)
    removed = []
    now = time.time()
    for tmp in dest.parent.glob(f".{glob.escape(dest.name)}.*.tmp"):
        parts = tmp.name[len(dest.name) + 2 : -len(".tmp")].split(".")
        try:
            age = now - tmp.lstat().st_mtime
        except OSError:
            continue  # removed meanwhile
        ours = len(parts) == 3 and parts[0] == _HOST and parts[1].isdigit()
        if ours and int(parts[1]) == os.getpid():
            continue  # this process's own writer (another thread) is at work
        dead = ours and not _process_alive(int(parts[1]))
        if dead or age > STALE_TEMP_SECONDS:
            with contextlib.suppress(OSError):
                tmp.unlink()
                removed.append(tmp)
    return removed


def _mode_of(dest: pathlib.Path) -> int:
    """The permissions of the new file: those of the regular file it replaces, else the
    umask's default (a symbolic link's 0777, or its target's, must not be copied)."""
    try:
        st = os.lstat(dest)
        if stat.S_ISREG(st.st_mode):
            return st.st_mode & 0o7777
    except OSError:
        pass
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _named(exc: OSError, dest: pathlib.Path) -> OSError:
    """``exc`` naming ``dest`` where it names no file (a failed ``write`` or ``fsync``), so the
    error says which file could not be written, and that the old one is unchanged."""
    if exc.filename is not None or exc.errno is None:
        return exc
    reason = exc.strerror or os.strerror(exc.errno)
    return OSError(exc.errno, f"{reason} (not written; a previous version is unchanged)", str(dest))


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike[str], mode: str = "wb") -> Iterator[IO]:
    """Open a temporary file next to ``path``; on a clean exit it replaces ``path`` atomically.

    :param path: Destination file. Missing parent folders are created. A symbolic link there is
        replaced, never followed.
    :param mode: ``"wb"`` (default) or ``"w"`` (text, UTF-8).
    :raises ValueError: on another mode, or when ``path`` is an existing folder.
    :raises OSError: naming ``path`` when the write fails (a full disk: ``errno.ENOSPC``).
    """
    if mode not in ("wb", "w"):
        raise ValueError(f"mode must be 'wb' or 'w', got {mode!r}")
    dest = pathlib.Path(path)
    if dest.is_dir() and not dest.is_symlink():
        raise ValueError(f"cannot write to {str(dest)!r}: it is a folder (allowed: a file path)")
    dest.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(dest)
    fd, tmp_name = tempfile.mkstemp(
        prefix=f".{dest.name}.{_HOST}.{os.getpid()}.", suffix=".tmp", dir=dest.parent
    )
    tmp = pathlib.Path(tmp_name)
    try:
        kwargs = {"encoding": "utf-8", "newline": ""} if mode == "w" else {}
        with os.fdopen(fd, mode, **kwargs) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        with contextlib.suppress(OSError):
            os.chmod(tmp, _mode_of(dest))  # mkstemp creates 0600
        os.replace(tmp, dest)  # a link at dest is replaced itself: rename does not follow it
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        named = _named(exc, dest) if isinstance(exc, OSError) else exc
        if named is exc:
            raise
        raise named from exc
    _fsync_dir(dest.parent)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` through :func:`atomic_write`."""
    with atomic_write(path) as fh:
        fh.write(data)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` through :func:`atomic_write`."""
    with atomic_write(path, "w") as fh:
        fh.write(text)
