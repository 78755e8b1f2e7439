"""Side files a command reads back (``metrics.json``, a run folder's claim, a checkpoint's
``checkpoint.json``), each read with a size limit, and :class:`ArchiveError`, the error of every
file the project reads back (:mod:`agents.files.safe_archive` raises it too). Light: no torch,
so the CLI imports it at start.
"""

from __future__ import annotations

import json
import os
import stat
from typing import Any

__all__ = ["MAX_SIDE_FILE_BYTES", "ArchiveError", "read_side_file", "read_side_json"]

# Size of a side file read back (metrics.json, a run folder's claim, checkpoint.json): those
# written hold kilobytes; a link to /dev/zero or a sparse file of gigabytes is refused unread.
MAX_SIDE_FILE_BYTES = 16 << 20


class ArchiveError(ValueError):
    """A file that is missing a part, damaged or not what it should be; the message names it."""


def read_side_file(path: str | os.PathLike[str], limit: int = MAX_SIDE_FILE_BYTES) -> bytes:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes; at most ``limit + 1``
    bytes are read, whatever the file claims (a FIFO is not waited on).

    :raises FileNotFoundError: (and other ``OSError``) as ``open`` raises them.
    :raises ArchiveError: naming ``path`` for a device, FIFO or folder, or a larger file.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ArchiveError(
            f"{str(path)!r} is not a regular file (a device, FIFO or folder); allowed is the "
            "file a command wrote"
        )
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise ArchiveError(
            f"{str(path)!r} has more than {limit} bytes (MAX_SIDE_FILE_BYTES); the files "
            "commands write beside their outputs hold kilobytes"
        )
    return data


def read_side_json(path: str | os.PathLike[str], limit: int = MAX_SIDE_FILE_BYTES) -> Any:
    """``json.loads`` of :func:`read_side_file` (``json.JSONDecodeError`` and
    ``UnicodeDecodeError`` as it raises them).

    :raises ArchiveError: as :func:`read_side_file`, or for JSON nested too deeply to parse.
    """
    data = read_side_file(path, limit)
    try:
        return json.loads(data)
    except RecursionError:
        raise ArchiveError(f"{str(path)!r} is JSON nested too deeply to be a command's") from None
