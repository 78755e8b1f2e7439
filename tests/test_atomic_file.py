"""Atomic writes clean up the temporaries that killed writes left behind (and only those)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from gpu_trading_env import atomic_file
from gpu_trading_env.atomic_file import STALE_TEMP_SECONDS, atomic_write

# A child that opens an atomic write of PATH, writes half, then dies like kill -9 (no cleanup).
_KILLED_WRITER = """
import os, sys
from gpu_trading_env.atomic_file import atomic_write
with atomic_write(sys.argv[1]) as fh:
    fh.write(b"half of a new file")
    fh.flush()
    os._exit(9)
"""


def _killed_write(path) -> None:
    rc = subprocess.call([sys.executable, "-c", _KILLED_WRITER, str(path)], cwd=os.getcwd())
    assert rc == 9


def test_temporaries_of_killed_writes_are_removed_by_the_next_write(tmp_path):
    path = tmp_path / "rb.pkl"
    with atomic_write(path) as fh:
        fh.write(b"old")
    for _ in range(3):
        _killed_write(path)
    # Each write removed the one its killed predecessor left: they do not pile up.
    left = sorted(p.name for p in tmp_path.iterdir() if p.name != "rb.pkl")
    assert len(left) == 1 and left[0].startswith(".rb.pkl.") and left[0].endswith(".tmp")
    assert path.read_bytes() == b"old"  # the killed writes never replaced the file
    with atomic_write(path) as fh:
        fh.write(b"new")
    assert [p.name for p in tmp_path.iterdir()] == ["rb.pkl"]
    assert path.read_bytes() == b"new"


def test_a_live_writers_temporary_is_kept_and_other_files_untouched(tmp_path):
    path = tmp_path / "model.zip"
    other = tmp_path / ".other.zip.x.1.abc.tmp"  # another destination's temporary
    other.write_bytes(b"x")
    with atomic_write(path) as outer:
        outer.write(b"first")
        # A second write of the same file meanwhile (same process: another thread's save).
        with atomic_write(path) as inner:
            inner.write(b"second")
        assert path.read_bytes() == b"second"
    assert path.read_bytes() == b"first"  # the outer writer's temporary survived, then won
    assert sorted(p.name for p in tmp_path.iterdir()) == [other.name, "model.zip"]


def test_old_temporaries_without_a_process_id_go_by_age(tmp_path):
    path = tmp_path / "rb.pkl"
    old = tmp_path / ".rb.pkl.k2j4abcd.tmp"  # the name of earlier releases (mkstemp only)
    fresh = tmp_path / ".rb.pkl.zz9_x1q2.tmp"
    old.write_bytes(b"x")
    fresh.write_bytes(b"y")
    day_ago = time.time() - STALE_TEMP_SECONDS - 60
    os.utime(old, (day_ago, day_ago))
    with atomic_write(path) as fh:
        fh.write(b"new")
    assert sorted(p.name for p in tmp_path.iterdir()) == [fresh.name, "rb.pkl"]


@pytest.mark.skipif(os.name != "posix", reason="process check is POSIX only")
def test_a_live_process_on_this_host_keeps_its_temporary(tmp_path):
    path = tmp_path / "b.pkl"
    live = tmp_path / f".b.pkl.{atomic_file._HOST}.{os.getppid()}.abcdefgh.tmp"
    live.write_bytes(b"x")
    with atomic_write(path) as fh:
        fh.write(b"new")
    assert live.exists()
