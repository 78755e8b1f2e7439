"""Checkpoints from which ``GpuDQN.learn`` continues as if it had never stopped.

A checkpoint is a folder of four files, each written atomically:

- ``model.zip``: the model in the weights-only format (weights, optimizer states,
  hyperparameters, ``num_timesteps``, ``_n_calls``, the schedules' progress, ``_last_obs``, ...);
- ``replay_buffer.rb.zip``: the replay buffer (storage, priorities, sum and min trees, the
  Philox counter of its draws);
- ``run_state.zip``: what lives outside the model: the state of the trading env (every
  :class:`~gpu_trading_env.core.state.EnvState` array, its seeds and start-bar counters
  included), SB3's episode monitor, and every random generator (Python's, NumPy's global one,
  torch's CPU and CUDA ones, the action and observation spaces', the fused rollout's, the
  monolithic rollout's counter);
- ``checkpoint.json``, written last: the SHA-256 of the three others. A folder without it, or
  whose files do not match it, is an unfinished checkpoint and is refused (or skipped, when
  :func:`load_checkpoint` picks the latest of a run's checkpoints).

:func:`save_checkpoint` writes the four files into a new folder beside the destination and
switches it in whole, so the destination always holds one complete checkpoint: the previous
one until the new one is complete. :func:`prune_checkpoints` removes old ones except those a
reader pinned with :func:`pinned_checkpoint` (a shared ``flock`` on the index).

:class:`CheckpointEvery` writes one during ``learn`` every so many env steps, at the start of a
rollout (between a gradient step and the next env step, where nothing is half done), into
``folder/step-<num_timesteps>`` and keeps the newest few. To continue::

    model = GpuDQN.load_checkpoint("runs/ckpt", env=env)
    model.learn(model.remaining_timesteps, reset_num_timesteps=False, callback=...)

With the same env settings, this reproduces the uninterrupted run bit for bit on the CPU.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import json
import os
import pathlib
import random
import secrets
import shutil
import socket
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import VecEnvWrapper, VecMonitor

from agents.files.safe_archive import (
    ARRAYS,
    ArchiveError,
    decode,
    encode,
    read_archive,
    tensors_from_bytes,
    tensors_to_bytes,
    write_archive,
)
from agents.files.side_files import read_side_json
from gpu_trading_env.atomic_file import atomic_write

try:
    import fcntl
except ImportError:  # Windows: no pins (pruning does not wait for readers there)
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "CheckpointEvery",
    "checkpoint_extra",
    "load_checkpoint",
    "pinned_checkpoint",
    "prune_checkpoints",
    "save_checkpoint",
]

MODEL_FILE = "model.zip"
BUFFER_FILE = "replay_buffer.rb.zip"
STATE_FILE = "run_state.zip"
INDEX_FILE = "checkpoint.json"
STEP_PREFIX = "step-"
CHECKPOINT_FILES = (MODEL_FILE, BUFFER_FILE, STATE_FILE, INDEX_FILE)
DEFAULT_KEEP = 2  # checkpoints CheckpointEvery keeps
# The folder a save writes before its switch: .<name>.partial-<host>-<pid>-<random>; a pruned
# checkpoint's while it is removed: .<name>.pruned-<host>-<pid>-<random>.
PARTIAL_MARK = ".partial-"
PRUNED_MARK = ".pruned-"
_HOST = hashlib.sha1(socket.gethostname().encode()).hexdigest()[:8]
# What run_state() writes: a run-state file without one of them was not written by it.
RUN_STATE_KEYS = frozenset(
    {
        "python_random", "numpy_global", "torch_cpu", "torch_cuda", "action_space",
        "observation_space", "rollout_generator", "env", "monitor",
    }
)  # fmt: skip


def _sha256(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _vec_envs(env: Any) -> list[Any]:
    """``env`` and every SB3 VecEnv under it, outermost first."""
    chain = []
    while env is not None:
        chain.append(env)
        env = env.venv if isinstance(env, VecEnvWrapper) else None
    return chain


def _space_rng(space: Any) -> Any:
    rng = getattr(space, "_np_random", None)
    return None if rng is None else rng.bit_generator.state


# ---------------------------------------------------------------------------------- state
def run_state(model: Any) -> dict[str, Any]:
    """What a checkpoint holds beyond the model and its buffer (see the module docstring)."""
    state: dict[str, Any] = {
        "python_random": random.getstate(),
        "numpy_global": np.random.get_state(),  # noqa: NPY002 (SB3 seeds the legacy generator)
        "torch_cpu": th.get_rng_state(),
        "torch_cuda": th.cuda.get_rng_state_all() if th.cuda.is_initialized() else None,
        "action_space": _space_rng(model.action_space),
        "observation_space": _space_rng(model.observation_space),
        "rollout_generator": None,
        # The monolithic rollout's exploration Philox counter (its launches so far).
        "rollout_round": getattr(model.rollout, "round", None),
        "env": None,
        "monitor": None,
    }
    generator = getattr(model.rollout, "generator", None)
    if isinstance(generator, th.Generator):
        state["rollout_generator"] = generator.get_state()
    for venv in _vec_envs(model.env):
        if isinstance(venv, VecMonitor):
            state["monitor"] = {
                "episode_returns": venv.episode_returns,
                "episode_lengths": venv.episode_lengths,
                "episode_count": int(venv.episode_count),
            }
            break
    trading = model.trading_env
    if trading is not None:
        state["env"] = {
            "num_envs": int(trading.num_envs),
            **trading.checkpoint_state(),
            "np_random": _space_rng(trading),
        }
    return state


def _set_bit_generator(owner: Any, saved: Any, what: str) -> None:
    if saved is None:
        return
    rng = owner.np_random  # creates it when it was never seeded
    if rng.bit_generator.state["bit_generator"] != saved["bit_generator"]:
        raise ArchiveError(f"{what}: the checkpoint's generator is a {saved['bit_generator']}")
    rng.bit_generator.state = saved


def restore_run_state(model: Any, state: dict[str, Any], where: str) -> None:
    """Put ``state`` (from :func:`run_state`) back into ``model``, its env and this process."""
    saved_env = state["env"]
    trading = model.trading_env
    if saved_env is not None and trading is not None:
        if int(saved_env["num_envs"]) != int(trading.num_envs):
            raise ArchiveError(
                f"{where} was saved with num_envs = {saved_env['num_envs']}; the env given has "
                f"{trading.num_envs}: pass an env with {saved_env['num_envs']} envs"
            )
        try:
            trading.restore_checkpoint(
                saved_env["arrays"], saved_env["seeded"], saved_env["needs_reset"]
            )
        except ValueError as exc:
            raise ArchiveError(f"{where}: {exc}") from None
        _set_bit_generator(trading, saved_env["np_random"], f"{where}: the env's np_random")
        for venv in _vec_envs(model.env):
            # SB3's set_random_seed on load queued seeds for a reset that resuming never does.
            if hasattr(venv, "_reset_seeds"):
                venv._reset_seeds()  # noqa: SLF001 (SB3's VecEnv has no public way)
    elif model.env is not None:
        warnings.warn(
            f"{where}: the env is not a TradingVectorEnv (or the checkpoint has no env state): "
            "it is reset before training, so the resumed run differs from an uninterrupted one",
            UserWarning,
            stacklevel=3,
        )
        model._last_obs = None  # noqa: SLF001 (SB3's; None makes learn reset the env)
    monitor = state["monitor"]
    for venv in _vec_envs(model.env):
        if isinstance(venv, VecMonitor) and monitor is not None:
            venv.episode_returns = np.array(monitor["episode_returns"], dtype=np.float32)
            venv.episode_lengths = np.array(monitor["episode_lengths"], dtype=np.int32)
            venv.episode_count = int(monitor["episode_count"])
    random.setstate(_as_tuples(state["python_random"]))
    np.random.set_state(state["numpy_global"])  # noqa: NPY002
    th.set_rng_state(state["torch_cpu"])
    if state["torch_cuda"] is not None and th.cuda.is_available():
        for index, rng in enumerate(state["torch_cuda"][: th.cuda.device_count()]):
            th.cuda.set_rng_state(rng, index)
    _set_bit_generator(model.action_space, state["action_space"], f"{where}: action space")
    _set_bit_generator(model.observation_space, state["observation_space"], f"{where}: obs space")
    # rollout_round is absent from checkpoints written before it was saved.
    model.queue_rollout_generator_state(state["rollout_generator"], state.get("rollout_round"))


def _as_tuples(value: Any) -> Any:
    """``random.setstate`` wants tuples where JSON kept lists."""
    if isinstance(value, list | tuple):
        return tuple(_as_tuples(v) for v in value)
    return value


# ---------------------------------------------------------------------------------- files
def save_checkpoint(model: Any, folder: str | pathlib.Path, extra: Any = None) -> pathlib.Path:
    """Write a checkpoint of ``model`` into ``folder``, replacing the checkpoint there if any.

    The files are written into a new folder beside ``folder`` and switched in whole once all
    four are complete (:func:`_switch`): a reader of ``folder`` sees the previous complete
    checkpoint or the new one, never a mix, and a save that fails (a full disk, Ctrl-C) leaves
    the previous checkpoint as it was and removes its own partial folder.

    :param folder: A new folder, an empty one or a checkpoint folder; a folder holding other
        files is refused (``FileExistsError`` naming them), since the switch replaces it whole.
    :param extra: Anything :func:`agents.files.safe_archive.encode` holds (numbers, strings, lists,
        dicts, tensors, arrays), read back with :func:`checkpoint_extra`: e.g. a callback's state.
    :return: ``folder``.
    """
    if getattr(model, "data_parallel", None) is not None:
        raise NotImplementedError(
            "checkpoints of data-parallel runs are not supported: every rank has its own env "
            "and replay buffer, which one folder does not hold; save each rank's model and "
            "buffer under its own path instead"
        )
    folder = pathlib.Path(folder)
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(f"cannot write a checkpoint to {str(folder)!r}: it is a file")
    if folder.is_dir():
        foreign = sorted(p.name for p in folder.iterdir() if p.name not in CHECKPOINT_FILES)
        if foreign:
            raise FileExistsError(
                f"cannot write a checkpoint to {str(folder)!r}: it holds files that are not a "
                f"checkpoint's ({', '.join(foreign[:5])}{', ...' if len(foreign) > 5 else ''}), "
                "which the checkpoint would replace; pass a new folder, an empty one or a "
                "checkpoint folder"
            )
    folder.parent.mkdir(parents=True, exist_ok=True)
    partial = folder.parent / f".{folder.name}{PARTIAL_MARK}{_HOST}-{os.getpid()}-{_token()}"
    partial.mkdir()
    try:
        _write_checkpoint_files(model, partial, extra)
        _switch(partial, folder)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return folder


def _write_checkpoint_files(model: Any, folder: pathlib.Path, extra: Any) -> None:
    """The four files of a checkpoint into the new folder ``folder``, the index last."""
    model.save(folder / MODEL_FILE)
    model.save_replay_buffer(folder / BUFFER_FILE)
    arrays: dict[str, th.Tensor] = {}
    manifest = {
        "state": encode(run_state(model), arrays),
        "extra": encode(extra, arrays),
        "num_timesteps": int(model.num_timesteps),
    }
    write_archive(folder / STATE_FILE, "run-state", manifest, {ARRAYS: tensors_to_bytes(arrays)})
    index = {
        "num_timesteps": int(model.num_timesteps),
        "files": {name: _sha256(folder / name) for name in (MODEL_FILE, BUFFER_FILE, STATE_FILE)},
    }
    with atomic_write(folder / INDEX_FILE, "w") as fh:
        json.dump(index, fh, indent=1)


def _token() -> str:
    return secrets.token_hex(4)


def _fsync_dir(folder: pathlib.Path) -> None:
    # A rename is durable only once its folder's entry is on disk (not possible on Windows).
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


def _exchange(a: pathlib.Path, b: pathlib.Path) -> bool:
    """Swap the folders ``a`` and ``b`` in one step (Linux's ``renameat2(RENAME_EXCHANGE)``);
    False where the system or the file system cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    ]
    renameat2.restype = ctypes.c_int
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _switch(new: pathlib.Path, folder: pathlib.Path) -> None:
    """Put the complete checkpoint folder ``new`` at ``folder``: a rename where ``folder`` is
    absent or empty, else an atomic swap with the old checkpoint, which is then removed. Where
    no swap exists, the old folder is renamed aside first: for that moment ``folder`` is absent,
    and a crash there leaves the old checkpoint at ``.<name>.previous-...`` beside it."""
    try:
        os.rename(new, folder)
    except OSError as exc:
        if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
            raise
        if exchange_folders(new, folder):
            shutil.rmtree(new, ignore_errors=True)  # `new` is the old checkpoint now
        else:
            aside = folder.parent / f".{folder.name}.previous-{os.getpid()}-{_token()}"
            os.rename(folder, aside)
            os.rename(new, folder)
            shutil.rmtree(aside, ignore_errors=True)
    _fsync_dir(folder.parent)


# The swap _switch uses (tests replace it to take the path of systems without one).
exchange_folders = _exchange


# ---------------------------------------------------------------------------------- pruning
def _step_number(folder: pathlib.Path) -> int:
    tail = folder.name[len(STEP_PREFIX) :]
    return int(tail) if tail.isdigit() else -1


def _step_folders(folder: pathlib.Path) -> list[pathlib.Path]:
    """The ``step-<n>`` folders in ``folder``, newest (largest n) first."""
    return sorted(
        (p for p in folder.glob(f"{STEP_PREFIX}*") if p.is_dir()), key=_step_number, reverse=True
    )


def _lock(fd: int, shared: bool) -> bool:
    """A non-blocking ``flock`` on ``fd``; True where there is no ``flock`` (Windows)."""
    if fcntl is None:
        return True
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def _pin(folder: pathlib.Path) -> int | None:
    """A shared lock on ``folder``'s index (the file descriptor holding it), or None when the
    folder has no index or is being pruned or was pruned since it was chosen."""
    index = folder / INDEX_FILE
    try:
        fd = os.open(index, os.O_RDONLY)
    except OSError:
        return None
    if _lock(fd, shared=True):
        try:
            if os.stat(index).st_ino == os.fstat(fd).st_ino:
                return fd
        except OSError:
            pass
    os.close(fd)
    return None


def pin_hook(folder: pathlib.Path) -> None:
    """Called after a checkpoint is chosen and before it is pinned (tests widen the race here)."""


@contextlib.contextmanager
def pinned_checkpoint(path: str | pathlib.Path, attempts: int = 5) -> Iterator[pathlib.Path]:
    """The checkpoint folder of ``path`` (itself, or the newest complete ``step-<n>`` in it, as
    :func:`resolve_checkpoint`), pinned for the ``with`` block: :func:`prune_checkpoints` (of
    this process or another, e.g. the run still writing ``path``) does not remove it meanwhile.

    A pin is a shared ``flock`` on the checkpoint's index; a pruned checkpoint's folder is
    renamed away under an exclusive one, so a checkpoint chosen and then pruned before it was
    pinned is seen as gone and the newest one is chosen again (up to ``attempts`` times).

    :raises FileNotFoundError: naming ``path`` when it does not exist.
    :raises ArchiveError: naming ``path`` and why when no complete checkpoint could be pinned.
    """
    folder = pathlib.Path(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"no checkpoint folder {str(folder)!r}")
    single = (folder / INDEX_FILE).exists()
    for _attempt in range(attempts):
        listed = [folder] if single else _step_folders(folder)
        for chosen in listed:
            if not single and not (chosen / INDEX_FILE).exists():
                continue  # unfinished: skipped, as resolve_checkpoint does
            pin_hook(chosen)
            fd = _pin(chosen)
            if fd is None:
                break  # pruned since it was listed: list again
            try:
                resolve_checkpoint(chosen)  # complete, its files matching the index
            except ArchiveError:
                os.close(fd)
                if single:
                    raise
                continue  # damaged: the next older one, as resolve_checkpoint
            try:
                yield chosen
                return
            finally:
                os.close(fd)
        else:
            resolve_checkpoint(folder)  # none is complete: its error says so
        if single:
            raise ArchiveError(
                f"checkpoint {str(folder)!r} was removed as it was about to be read: the run "
                "that wrote it keeps only its newest checkpoints and prunes the older ones; pass "
                "the folder of its checkpoints (the newest is taken and kept while it is read)"
            )
    raise ArchiveError(
        f"the checkpoints in {str(folder)!r} were pruned {attempts} times between choosing one "
        "and pinning it (a run writing there saves faster than this one reads): pass one "
        "checkpoint folder, or resume once that run has stopped"
    )


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _abandoned(path: pathlib.Path, mark: str) -> bool:
    """Whether ``path`` is the partial or pruned folder (``mark``) of a process that is gone
    (this host)."""
    _, _, tail = path.name.partition(mark)
    host, _, rest = tail.partition("-")
    pid = rest.partition("-")[0]
    return os.name == "posix" and host == _HOST and pid.isdigit() and not _pid_alive(int(pid))


def prune_checkpoints(folder: str | pathlib.Path, keep: int) -> list[pathlib.Path]:
    """Remove all but the ``keep`` newest ``step-<n>`` checkpoints in ``folder`` (and what saves
    and prunes killed on this host left). A checkpoint a reader has pinned
    (:func:`pinned_checkpoint`) is kept, for a later prune to remove; each removed one is first
    renamed away under an exclusive lock on its index, so no reader ever opens half of it.

    :returns: the checkpoint folders removed.
    """
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
        raise ValueError(f"keep = {keep!r} is invalid: allowed is an integer >= 0")
    folder = pathlib.Path(folder)
    removed = []
    for old in _step_folders(folder)[keep:]:
        fd = None
        try:
            fd = os.open(old / INDEX_FILE, os.O_RDONLY)
        except FileNotFoundError:
            pass  # unfinished or damaged: no reader pins it
        except OSError:
            continue
        try:
            if fd is not None and not _lock(fd, shared=False):
                continue  # pinned by a reader
            trash = old.parent / f".{old.name}{PRUNED_MARK}{_HOST}-{os.getpid()}-{_token()}"
            try:
                os.rename(old, trash)
            except FileNotFoundError:
                continue  # another pruner took it
            shutil.rmtree(trash, ignore_errors=True)
            removed.append(old)
        finally:
            if fd is not None:
                os.close(fd)
    for mark in (PARTIAL_MARK, PRUNED_MARK):
        for left in folder.glob(f".*{mark}*"):
            if left.is_dir() and _abandoned(left, mark):
                shutil.rmtree(left, ignore_errors=True)
    return removed


def _complete(folder: pathlib.Path) -> str | None:
    """Why ``folder`` is not a complete checkpoint, or None when it is."""
    index_path = folder / INDEX_FILE
    if not index_path.is_file():
        return f"it has no {INDEX_FILE} (not a checkpoint, or its save did not finish)"
    try:
        index = read_side_json(index_path)
        files = index["files"]
        if not isinstance(files, dict):
            raise TypeError(f"its 'files' is a {type(files).__name__}, not a dict")
    except (ValueError, KeyError, TypeError, OSError) as exc:
        return f"its {INDEX_FILE} is damaged ({exc!r})"
    for name in (MODEL_FILE, BUFFER_FILE, STATE_FILE):
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        if _sha256(path) != files.get(name):
            return f"{name} does not match {INDEX_FILE} (damaged, or from another checkpoint)"
    return None


def resolve_checkpoint(path: str | pathlib.Path) -> pathlib.Path:
    """The checkpoint folder of ``path``: ``path`` itself, or the newest complete
    ``step-<n>`` folder in it (a run's :class:`CheckpointEvery` folder).

    :raises FileNotFoundError: naming ``path`` when it does not exist.
    :raises ArchiveError: naming ``path`` and saying why when no complete checkpoint is there.
    """
    folder = pathlib.Path(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"no checkpoint folder {str(folder)!r}")
    if (folder / INDEX_FILE).exists():
        reason = _complete(folder)
        if reason is not None:
            raise ArchiveError(f"checkpoint {str(folder)!r} cannot be used: {reason}")
        return folder
    steps = sorted(
        (p for p in folder.glob(f"{STEP_PREFIX}*") if p.is_dir()),
        key=lambda p: (
            int(p.name[len(STEP_PREFIX) :]) if p.name[len(STEP_PREFIX) :].isdigit() else -1
        ),
        reverse=True,
    )
    for candidate in steps:
        if _complete(candidate) is None:
            return candidate
    if steps:  # why each is unusable: "no checkpoint.json" is not always the reason
        why = "; ".join(f"{p.name}: {_complete(p)}" for p in steps[:3])
        more = f" (and {len(steps) - 3} older)" if len(steps) > 3 else ""
        raise ArchiveError(f"{str(folder)!r} holds no complete checkpoint: {why}{more}")
    raise ArchiveError(
        f"{str(folder)!r} holds no checkpoint: no {INDEX_FILE} and no {STEP_PREFIX}<n> folder"
    )


def _read_state(folder: pathlib.Path) -> tuple[dict[str, Any], Any, int]:
    """``(state, extra, num_timesteps)`` of the checkpoint's run-state file."""
    path = folder / STATE_FILE
    where = repr(str(path))
    manifest, members = read_archive(path, "run-state")
    if set(members) != {ARRAYS}:
        raise ArchiveError(f"{where} holds the members {sorted(members)}; allowed is {[ARRAYS]}")
    arrays = tensors_from_bytes(members[ARRAYS], f"{where} member {ARRAYS!r}")
    try:
        state, extra = decode(manifest["state"], arrays), decode(manifest["extra"], arrays)
        steps = manifest["num_timesteps"]
    except KeyError as exc:
        raise ArchiveError(f"{where} lacks {exc}") from exc
    except ArchiveError as exc:
        raise ArchiveError(f"{where}: {exc}") from exc
    missing = sorted(RUN_STATE_KEYS - set(state)) if isinstance(state, dict) else ["all"]
    if missing:
        raise ArchiveError(f"{where}: its state lacks {missing}")
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
        raise ArchiveError(f"{where}: num_timesteps = {steps!r} is invalid: allowed is an int >= 0")
    return state, extra, steps


def _check_counters(
    model: Any, folder: pathlib.Path, state_steps: int, total_timesteps: int | None
) -> None:
    """The model's step counters against the checkpoint's index and run state, and the run's
    total: a forged counter would make a resumed run stop at once or never."""
    where = repr(str(folder))
    index = read_side_json(folder / INDEX_FILE)
    steps, total = int(model.num_timesteps), int(model._total_timesteps)  # noqa: SLF001 (SB3's)
    if not steps == state_steps == index.get("num_timesteps"):
        raise ArchiveError(
            f"{where}: num_timesteps differs between {MODEL_FILE} ({steps}), {STATE_FILE} "
            f"({state_steps}) and {INDEX_FILE} ({index.get('num_timesteps')!r})"
        )
    if total_timesteps is not None and total != int(total_timesteps):
        raise ArchiveError(
            f"{where}: the model's _total_timesteps = {total} is not this run's total "
            f"{int(total_timesteps)} (env steps)"
        )
    freq = model.train_freq
    per_rollout = int(model.n_envs) * int(freq.frequency)
    if getattr(freq.unit, "value", freq.unit) == "step" and steps > total + per_rollout:
        raise ArchiveError(
            f"{where}: num_timesteps = {steps} is past the run's total {total} by more than one "
            "rollout"
        )


BUFFER_SETTINGS = ("buffer_size", "n_envs", "optimize_memory_usage")


def _buffer_settings(buffer: Any) -> dict[str, Any]:
    """The class, rows and envs of ``buffer`` (its storage is not kept: it is replaced)."""
    return {
        "class": type(buffer).__name__,
        **{f: getattr(buffer, f, None) for f in BUFFER_SETTINGS},
    }


def _check_buffer_settings(loaded: Any, built: dict[str, Any], folder: pathlib.Path) -> None:
    """The checkpoint's buffer of the class, rows and envs that the model's settings build
    (``buffer_size``, ``replay_buffer_class`` of model.zip): a buffer of another size would
    resume another run than the one checkpointed."""
    for field, expected in built.items():
        saved = _buffer_settings(loaded)[field]
        if saved != expected:
            raise ArchiveError(
                f"{str(folder / BUFFER_FILE)!r}: the buffer's {field} = {saved!r} differs from "
                f"the {expected!r} that {MODEL_FILE}'s settings give (a buffer of another run, "
                "or a forged one)"
            )


def load_checkpoint(
    cls: type,
    path: str | pathlib.Path,
    env: Any = None,
    device: Any = "auto",
    total_timesteps: int | None = None,
    **kwargs: Any,
) -> Any:
    """The model of a checkpoint with its replay buffer, its env's state put into ``env`` (of
    the same settings and number of envs) and this process's random generators as they were.

    :param path: A checkpoint folder, or a folder of ``step-<n>`` checkpoints (the newest
        complete one is used).
    :param env: The env to continue in; ``None`` loads the model and buffer only (for
        inspection: ``learn`` needs an env).
    :param total_timesteps: The run's total env steps, when the caller knows it: the model's
        ``_total_timesteps`` must equal it.
    :param kwargs: Passed to ``cls.load``.
    :raises ArchiveError: for a damaged or forged file of the checkpoint, naming it, or step
        counters that differ between its files or from ``total_timesteps``.
    """
    folder = resolve_checkpoint(path)
    model = cls.load(folder / MODEL_FILE, env=env, device=device, force_reset=False, **kwargs)
    state, _, state_steps = _read_state(folder)
    _check_counters(model, folder, state_steps, total_timesteps)
    built = _buffer_settings(model.replay_buffer)  # as model.zip's settings build it
    model.load_replay_buffer(folder / BUFFER_FILE)
    _check_buffer_settings(model.replay_buffer, built, folder)
    try:
        restore_run_state(model, state, repr(str(folder)))
    except (KeyError, TypeError, ValueError, IndexError, OverflowError, RuntimeError) as exc:
        if isinstance(exc, ArchiveError):
            raise
        raise ArchiveError(
            f"{str(folder / STATE_FILE)!r} holds a run state that cannot be restored: {exc!r}"
        ) from exc
    return model


def checkpoint_extra(path: str | pathlib.Path) -> Any:
    """The ``extra`` value saved with the checkpoint in ``path`` (see :func:`resolve_checkpoint`)."""
    return _read_state(resolve_checkpoint(path))[1]


class CheckpointEvery(BaseCallback):
    """Write a checkpoint every ``every`` env steps during ``learn``.

    Written at the start of a rollout once ``num_timesteps`` has passed the next multiple of
    ``every``, into ``folder/step-<num_timesteps>``; the ``keep`` newest are kept. Resume with
    ``GpuDQN.load_checkpoint(folder, env=...)``.

    :param every: Env steps (of all envs) between checkpoints, ``>= 1``.
    :param folder: The run's checkpoint folder.
    :param keep: Checkpoints kept, ``>= 1`` (the older ones are removed after a new one is
        complete, so a crash during a save always leaves one; one a reader has pinned with
        :func:`pinned_checkpoint` stays until a save after the reader is done).
    :param extra: A function returning the ``extra`` value to save (see :func:`save_checkpoint`).
    """

    def __init__(
        self, every: int, folder: str | pathlib.Path, keep: int = DEFAULT_KEEP, extra: Any = None
    ) -> None:
        super().__init__()
        for name, value in (("every", every), ("keep", keep)):
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
                raise ValueError(f"{name} = {value!r} is invalid: allowed is an integer >= 1")
        self.every = int(every)
        self.folder = pathlib.Path(folder)
        self.keep = int(keep)
        self.extra = extra
        self.saved: list[pathlib.Path] = []
        self._last_block = 0

    def _on_rollout_start(self) -> None:
        block = int(self.model.num_timesteps) // self.every
        if block > self._last_block:
            self._last_block = block
            self.save()

    def _init_callback(self) -> None:
        # A resumed run does not write again the checkpoint it started from.
        self._last_block = int(self.model.num_timesteps) // self.every

    def save(self) -> pathlib.Path:
        """Write a checkpoint now; returns its folder."""
        folder = self.folder / f"{STEP_PREFIX}{int(self.model.num_timesteps):012d}"
        save_checkpoint(self.model, folder, None if self.extra is None else self.extra())
        self.saved.append(folder)
        prune_checkpoints(self.folder, self.keep)
        return folder

    def _on_step(self) -> bool:
        return True
