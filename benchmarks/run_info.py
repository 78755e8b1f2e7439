"""What every benchmark records about its run: the commit and the machine."""

from __future__ import annotations

import os
import platform
import subprocess


def commit() -> str:
    """Short commit hash: ``GTE_COMMIT`` (set where the tree travels without git history), else
    git's HEAD, with ``+modified`` where tracked files differ from it (a copied working tree
    can carry older git metadata than its files: the hash alone would name the wrong tree)."""
    if os.environ.get("GTE_COMMIT"):
        return os.environ["GTE_COMMIT"]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except Exception:
        return "unknown"
    return f"{head}+modified" if changed else head


def machine() -> dict[str, object]:
    """Commit, GPU name (None without CUDA), CPU count and Python version."""
    gpu = None
    try:
        import torch

        if torch.cuda.is_available():
            gpu = torch.cuda.get_device_name()
    except ImportError:
        pass
    return {
        "commit": commit(),
        "gpu": gpu,
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
    }
