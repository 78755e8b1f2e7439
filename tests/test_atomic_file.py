"""Atomic writes clean up the temporaries that killed writes left behind (and only those)."""

from __future__ import annotations

import os
import pathlib
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


# ------------------------------------------------------------------ report files


def _report_files(folder):
    """Write every kind of report file into ``folder``: metrics.json, index.html and a PNG."""
    import numpy as np

    from gpu_trading_env.reports.report import plot_learning_curve, write_html, write_json

    write_json({"sharpe": 1.0}, folder / "metrics.json")
    write_html(folder, "title", ["a note"], [["series"], ["strategy"]], [])
    plot_learning_curve(np.arange(3), np.zeros(3), folder / "learning_curve.png")


def _report_files_one(folder, name):
    import numpy as np

    from gpu_trading_env.reports.report import plot_learning_curve, write_html, write_json

    if name == "metrics.json":
        write_json({"sharpe": 2.0}, folder / name)
    elif name == "index.html":
        write_html(folder, "other", [], [["series"]], [])
    else:
        plot_learning_curve(np.arange(4), np.ones(4), folder / name)


def test_report_files_replace_a_symbolic_link_and_never_write_its_target(tmp_path):
    """A run folder whose report names are links (to a ``.pth`` file, say) had the targets
    overwritten on ``train --resume``, and a dangling link created its target."""
    run, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    run.mkdir()
    elsewhere.mkdir()
    victim = elsewhere / "victim.pth"
    victim.write_text("mine")
    (run / "metrics.json").symlink_to(victim)
    (run / "index.html").symlink_to(elsewhere / "created.pth")  # dangling
    (run / "learning_curve.png").symlink_to(elsewhere)  # a folder
    _report_files(run)
    assert victim.read_text() == "mine"
    assert sorted(p.name for p in elsewhere.iterdir()) == ["victim.pth"]
    for name in ("metrics.json", "index.html", "learning_curve.png"):
        assert not (run / name).is_symlink() and (run / name).stat().st_size > 0


def test_a_full_disk_leaves_the_previous_report_whole_and_names_the_file(tmp_path, monkeypatch):
    import errno

    _report_files(tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    def full_disk(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic_file.os, "fsync", full_disk)
    for name in before:
        with pytest.raises(OSError, match="No space left on device") as info:
            _report_files_one(tmp_path, name)
        assert info.value.errno == errno.ENOSPC and info.value.filename == str(tmp_path / name)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # no temporary left


def test_a_png_that_fails_midway_leaves_no_partial_file(tmp_path, monkeypatch):
    """savefig wrote straight into the file: a disk that filled as it wrote left a part (a
    0-byte PNG at worst) in place of the previous plot."""
    import errno

    from matplotlib.backends.backend_agg import FigureCanvasAgg

    _report_files(tmp_path)
    png = tmp_path / "learning_curve.png"
    before = png.read_bytes()

    def full_disk(self, target, *args, **kwargs):
        fh = open(target, "wb") if isinstance(target, str | os.PathLike) else target  # noqa: SIM115
        fh.write(b"\x89PNG\r\n")
        fh.flush()
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(FigureCanvasAgg, "print_png", full_disk)
    with pytest.raises(OSError, match="No space left"):
        _report_files_one(tmp_path, png.name)
    assert png.read_bytes() == before


def test_plot_text_from_files_is_drawn_as_written(tmp_path):
    """An instrument name with TeX between dollars (``$\\frac$``) failed the plot after training."""
    import numpy as np

    from gpu_trading_env.reports.report import plot_curves

    ts = np.arange("2020-01-01", "2020-01-11", dtype="datetime64[D]").astype("datetime64[ns]")
    plot_curves(ts, {"$\\frac$ costs in": np.linspace(1, 2, 10)}, tmp_path / "e.png", "$x^$")
    assert (tmp_path / "e.png").stat().st_size > 1000


def _direct_writes(path):
    """``file:line call`` of each write in ``path`` that bypasses the atomic writer: a
    ``write_text``/``write_bytes``, an ``open`` for writing, a ``savefig`` into a file."""
    import ast

    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        at = 1 if isinstance(func, ast.Name) else 0  # open(path, mode), Path.open(mode)
        mode = node.args[at] if len(node.args) > at else None
        mode = next((k.value for k in node.keywords if k.arg == "mode"), mode)
        writes_open = (
            name == "open" and isinstance(mode, ast.Constant) and set(str(mode.value)) & set("wax+")
        )
        to_file = name == "savefig" and not (
            node.args and isinstance(node.args[0], ast.Name) and node.args[0].id == "buffer"
        )
        if name in ("write_text", "write_bytes") or writes_open or to_file:
            found.append(f"{path}:{node.lineno} {name}")
    return found


def test_every_file_the_packages_write_goes_through_the_atomic_writer():
    """docs/RELIABILITY.md says so; report files were written with ``write_text`` and
    ``savefig``, which follow a link at their name and leave a part of a file behind."""
    root = pathlib.Path(__file__).resolve().parents[1]
    found = []
    for package in ("agents", "gpu_trading_env", "gpu_runtime"):
        for path in sorted((root / package).rglob("*.py")):
            found += _direct_writes(path)
    assert found == []
