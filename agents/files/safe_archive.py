"""Weights-only archives: the file format of saved models, replay buffers and checkpoints.

An archive is a zip file (stored, not compressed) with a ``manifest.json`` and members of
tensors written by ``torch.save``. Nothing in it is a pickle of arbitrary objects:

- tensors and NumPy arrays are read back with ``torch.load(weights_only=True)``, whose
  unpickler builds tensors and plain containers only and refuses every other global;
- everything else (settings, hyperparameters, spaces, schedules, counters, generator states) is
  JSON through :func:`encode` / :func:`decode`: numbers, strings, lists, tuples, dicts, deques,
  Gymnasium spaces, ``torch.device``, references to classes of the project, of
  Stable-Baselines3 and of ``torch.nn`` / ``torch.optim`` (imported by name, never unpickled),
  and instances of the few plain classes listed in :data:`PLAIN_CLASSES`;
- the manifest records the SHA-256 of every member; :func:`read_archive` checks each one before
  anything is decoded, so a flipped byte raises :class:`ArchiveError` naming the file and member.

Stable-Baselines3's own zips hold a cloudpickle (their ``data`` member) and SB3's replay
buffers are pickles: reading either runs whatever code the file holds. They are recognised
(:func:`sniff`) and refused unless the caller opts in (:class:`PickleRefusedError`).
"""

from __future__ import annotations

import collections
import contextlib
import enum
import hashlib
import importlib
import io
import json
import math
import os
import pathlib
import time
import zipfile
from collections.abc import Mapping
from typing import IO, Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import BaseBuffer

from gpu_trading_env.atomic_file import atomic_write

__all__ = [
    "ArchiveError",
    "PickleRefusedError",
    "UnencodableValue",
    "PLAIN_CLASSES",
    "decode",
    "encode",
    "read_archive",
    "remove_stale_temporaries",
    "resolve_existing",
    "sniff",
    "source_name",
    "tensors_from_bytes",
    "tensors_to_bytes",
    "write_archive",
]

FORMAT = "gpu-trading-env"
VERSION = 1
MANIFEST = "manifest.json"
ARRAYS = "arrays.pt"  # the tensors that encode() took out of the JSON values

# Modules whose classes may be named in an archive (class references such as policy_class,
# optimizer_class or activation_fn); importing them runs only installed, trusted code.
CLASS_MODULE_PREFIXES = (
    "agents.",
    "gpu_trading_env.",
    "stable_baselines3.",
    "torch.nn",
    "torch.optim",
)

# Where modules of the project went when agents/ was sorted into rooms: files written before
# name a class by its old module (``agents.policies:DuelingDQNPolicy``) and still load.
MOVED_MODULES = {
    **{
        f"agents.{m}": f"agents.algorithm.{m}"
        for m in (
            "captured_step",
            "curiosity",
            "curiosity_training",
            "distributed",
            "dqn_loss",
            "gpu_dqn",
            "hyperparameters",
            "policies",
            "sb3_integration",
            "sb3_per",
        )
    },
    **{
        f"agents.{m}": f"agents.pipelines.{m}"
        for m in ("baseline_policies", "progress", "sweep", "train_settings", "walkforward", "zoo")
    },
    **{f"agents.{m}": f"agents.files.{m}" for m in ("checkpoint", "model_files", "safe_archive")},
}

# What a class named in an archive must derive from: a file then chooses among networks,
# optimizers and buffers, whose construction only allocates (a policy_class that writes files
# on construction, say, cannot be smuggled in).
CLASS_BASES: tuple[type, ...] = (th.nn.Module, th.optim.Optimizer, BaseBuffer)

# Objects rebuilt from their attributes (``__dict__``), or from their fields for a NamedTuple,
# or from their value for an Enum. Each holds plain values and nothing callable but itself.
PLAIN_CLASSES = frozenset(
    {
        "stable_baselines3.common.utils:LinearSchedule",
        "stable_baselines3.common.utils:FloatSchedule",
        "stable_baselines3.common.utils:ConstantSchedule",
        "stable_baselines3.common.type_aliases:TrainFreq",
        "stable_baselines3.common.type_aliases:TrainFrequencyUnit",
        "agents.replay.prioritized_buffer:LinearBetaSchedule",
    }
)

# A temporary file of atomic_write older than this is taken for the leftover of a killed save.
STALE_SECONDS = 60.0


class ArchiveError(ValueError):
    """A file that is missing a part, damaged or not what it should be; the message names it."""


class PickleRefusedError(ArchiveError):
    """A pickle-based file (an SB3 zip or a pickled buffer) read without the opt-in."""


class UnencodableValue(TypeError):
    """A value :func:`encode` cannot write as JSON and tensors (a lambda, an unknown class)."""


# ---------------------------------------------------------------------------------- paths
def resolve_existing(path: str | os.PathLike[str], suffix: str) -> pathlib.Path:
    """The file to read for ``path``: ``path`` itself, or ``path.suffix`` when ``path`` has no
    suffix and only that exists (SB3's rule for ``load("model")``).

    :raises FileNotFoundError: naming ``path`` as given (and the name with the suffix, if tried).
    :raises IsADirectoryError: when ``path`` is a folder.
    """
    p = pathlib.Path(path)
    if p.is_dir():
        raise IsADirectoryError(f"{str(p)!r} is a folder: allowed is a file written by save")
    if p.exists():
        return p
    if p.suffix == "" and suffix:
        with_suffix = pathlib.Path(f"{p}.{suffix.lstrip('.')}")
        if with_suffix.is_file():
            return with_suffix
        raise FileNotFoundError(f"no such file: {str(p)!r} (nor {str(with_suffix)!r})")
    raise FileNotFoundError(f"no such file: {str(p)!r}")


def remove_stale_temporaries(dest: pathlib.Path, older_than: float = STALE_SECONDS) -> list[str]:
    """Remove the temporaries that killed saves of ``dest`` left (``.{name}.*.tmp`` beside it,
    :func:`~gpu_trading_env.atomic_file.atomic_write`'s names) and that no one wrote to for
    ``older_than`` seconds; a save in progress keeps writing to its own, so it is spared.

    :return: The names removed.
    """
    removed = []
    now = time.time()
    with contextlib.suppress(OSError):
        for tmp in dest.parent.glob(f".{dest.name}.*.tmp"):
            with contextlib.suppress(OSError):
                if now - tmp.stat().st_mtime >= older_than:
                    tmp.unlink()
                    removed.append(tmp.name)
    return removed


# ---------------------------------------------------------------------------------- tensors
def tensors_to_bytes(tensors: Mapping[str, Any]) -> bytes:
    """``torch.save`` of a dict of tensors (and plain containers) into bytes."""
    buf = io.BytesIO()
    th.save(dict(tensors), buf)
    return buf.getvalue()


def tensors_from_bytes(data: bytes, where: str, map_location: Any = "cpu") -> Any:
    """``torch.load(weights_only=True)`` of :func:`tensors_to_bytes`' output.

    :param where: The file and member, for the error message.
    :raises ArchiveError: when the bytes are not a weights-only torch file.
    """
    try:
        return th.load(io.BytesIO(data), map_location=map_location, weights_only=True)
    except Exception as exc:  # torch raises UnpicklingError, RuntimeError, EOFError, ...
        raise ArchiveError(f"{where} is not a weights-only torch file: {exc}") from exc


# ---------------------------------------------------------------------------------- values
def _class_name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _import_class(name: str, bases: tuple[type, ...] | None = None) -> type:
    """The class ``module:qualname``, imported only from :data:`CLASS_MODULE_PREFIXES` and, unless
    ``bases`` is None, only a subclass of ``bases`` (default :data:`CLASS_BASES`)."""
    allowed_modules = CLASS_MODULE_PREFIXES
    module_name, _, qualname = name.partition(":")
    module_name = MOVED_MODULES.get(module_name, module_name)
    if not qualname or not any(
        module_name == p.rstrip(".") or module_name.startswith(p) for p in allowed_modules
    ):
        raise UnencodableValue(
            f"class {name!r} is not one the archive may name: allowed are classes of the "
            f"modules {', '.join(allowed_modules)} (pass other objects through custom_objects)"
        )
    try:
        obj: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise UnencodableValue(f"class {name!r} does not exist in this installation") from exc
    if not isinstance(obj, type):
        raise UnencodableValue(f"{name!r} is not a class")
    if bases is not None and not issubclass(obj, bases):
        raise UnencodableValue(
            f"class {name!r} is not one the archive may name: allowed are torch modules, "
            "optimizers and replay buffers (pass other classes through custom_objects)"
        )
    return obj


def _encode_space(space: spaces.Space, arrays: dict[str, th.Tensor]) -> dict[str, Any]:
    if isinstance(space, spaces.Box):
        return {
            "type": "Box",
            "low": encode(space.low, arrays),
            "high": encode(space.high, arrays),
            "dtype": str(space.dtype),
        }
    if isinstance(space, spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, spaces.MultiDiscrete):
        return {
            "type": "MultiDiscrete",
            "nvec": encode(space.nvec, arrays),
            "start": encode(space.start, arrays),
        }
    if isinstance(space, spaces.MultiBinary):
        return {"type": "MultiBinary", "n": encode(space.n, arrays)}
    if isinstance(space, spaces.Dict):
        return {"type": "Dict", "spaces": {k: _encode_space(s, arrays) for k, s in space.items()}}
    if isinstance(space, spaces.Tuple):
        return {"type": "Tuple", "spaces": [_encode_space(s, arrays) for s in space.spaces]}
    raise UnencodableValue(f"space {space!r}: allowed are Box, Discrete, MultiDiscrete, ...")


def _decode_space(d: dict[str, Any], arrays: Mapping[str, Any]) -> spaces.Space:
    kind = d.get("type")
    if kind == "Box":
        low, high = decode(d["low"], arrays), decode(d["high"], arrays)
        return spaces.Box(low=low, high=high, shape=low.shape, dtype=np.dtype(d["dtype"]))
    if kind == "Discrete":
        return spaces.Discrete(int(d["n"]), start=int(d["start"]))
    if kind == "MultiDiscrete":
        return spaces.MultiDiscrete(decode(d["nvec"], arrays), start=decode(d["start"], arrays))
    if kind == "MultiBinary":
        return spaces.MultiBinary(decode(d["n"], arrays))
    if kind == "Dict":
        return spaces.Dict({k: _decode_space(s, arrays) for k, s in d["spaces"].items()})
    if kind == "Tuple":
        return spaces.Tuple([_decode_space(s, arrays) for s in d["spaces"]])
    raise ArchiveError(f"unknown space type {kind!r}")


def encode(value: Any, arrays: dict[str, th.Tensor]) -> Any:
    """``value`` as a JSON value; its tensors and arrays go into ``arrays`` (by reference).

    :raises UnencodableValue: for a value outside what the module docstring lists.
    """
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int) and not isinstance(value, enum.Enum):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"__float__": repr(value)}
    if isinstance(value, np.generic) and not isinstance(value, np.object_):
        return {"__npscalar__": encode(np.asarray(value), arrays)}
    if isinstance(value, np.ndarray | th.Tensor):
        if isinstance(value, np.ndarray):
            if value.dtype.kind not in "biufc":
                raise UnencodableValue(f"array of dtype {value.dtype}: allowed are numbers")
            tensor, numpy = th.from_numpy(np.array(value, copy=True, order="C")), True
        else:
            tensor, numpy = value.detach(), False
            if tensor.untyped_storage().nbytes() != tensor.numel() * tensor.element_size():
                tensor = tensor.clone()  # a view: torch.save would write its whole storage
        key = f"a{len(arrays)}"
        arrays[key] = tensor
        return {"__array__": key, "numpy": numpy}
    if isinstance(value, th.device):
        return {"__device__": str(value)}
    if isinstance(value, spaces.Space):
        return {"__space__": _encode_space(value, arrays)}
    if isinstance(value, type):
        name = _class_name(value)
        _import_class(name, CLASS_BASES)  # refuse now what load would refuse
        return {"__class__": name}
    if isinstance(value, collections.deque):
        return {"__deque__": [encode(v, arrays) for v in value], "maxlen": value.maxlen}
    name = _class_name(type(value))
    if name in PLAIN_CLASSES:
        if isinstance(value, enum.Enum):
            return {"__object__": name, "value": encode(value.value, arrays)}
        if isinstance(value, tuple) and hasattr(value, "_fields"):
            return {"__object__": name, "fields": [encode(v, arrays) for v in value]}
        return {"__object__": name, "state": encode(dict(vars(value)), arrays)}
    if isinstance(value, tuple):
        return {"__tuple__": [encode(v, arrays) for v in value]}
    if isinstance(value, list):
        return [encode(v, arrays) for v in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise UnencodableValue(f"dict with keys {list(value)!r}: allowed are str keys")
        return {"__dict__": {k: encode(v, arrays) for k, v in value.items()}}
    raise UnencodableValue(f"{type(value).__module__}.{type(value).__qualname__} object")


def decode(value: Any, arrays: Mapping[str, Any]) -> Any:
    """The inverse of :func:`encode`; classes are imported by name only from the allowed modules.

    :raises ArchiveError: for a value :func:`encode` does not write (a damaged or forged file).
    """
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list):
        return [decode(v, arrays) for v in value]
    if not isinstance(value, dict) or len(value) == 0:
        raise ArchiveError(f"unexpected value {value!r}")
    tag = next(iter(value))
    try:
        if tag == "__float__":
            if value[tag] not in ("nan", "inf", "-inf"):
                raise ArchiveError(f"unexpected float {value[tag]!r}")
            return float(value[tag])
        if tag == "__npscalar__":
            return decode(value[tag], arrays)[()]
        if tag == "__array__":
            tensor = arrays[value[tag]]
            return tensor.cpu().numpy() if value["numpy"] else tensor
        if tag == "__device__":
            return th.device(value[tag])
        if tag == "__space__":
            return _decode_space(value[tag], arrays)
        if tag == "__class__":
            return _import_class(value[tag], CLASS_BASES)
        if tag == "__deque__":
            return collections.deque((decode(v, arrays) for v in value[tag]), value["maxlen"])
        if tag == "__tuple__":
            return tuple(decode(v, arrays) for v in value[tag])
        if tag == "__dict__":
            return {k: decode(v, arrays) for k, v in value[tag].items()}
        if tag == "__object__":
            if value[tag] not in PLAIN_CLASSES:
                raise ArchiveError(f"object of class {value[tag]!r} is not allowed in an archive")
            cls = _import_class(value[tag])
            if issubclass(cls, enum.Enum):
                return cls(decode(value["value"], arrays))
            if "fields" in value:
                return cls(*(decode(v, arrays) for v in value["fields"]))
            obj = cls.__new__(cls)
            obj.__dict__.update(decode(value["state"], arrays))
            return obj
    except UnencodableValue as exc:
        raise ArchiveError(str(exc)) from exc
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, ArchiveError):
            raise
        raise ArchiveError(f"malformed value {value!r}: {exc!r}") from exc
    raise ArchiveError(f"unexpected value {value!r}")


# ---------------------------------------------------------------------------------- archives
def source_name(source: pathlib.Path | IO[bytes]) -> str:
    """``source`` for messages: the path, or a file object's name."""
    if isinstance(source, pathlib.Path):
        return str(source)
    return str(getattr(source, "name", f"<{type(source).__name__}>"))


def sniff(source: pathlib.Path | IO[bytes]) -> str:
    """What ``source`` (a path or a seekable binary file object, left at its position) holds:
    ``"archive"`` (this module's format), ``"sb3-zip"`` (a zip with SB3's pickled ``data``
    member), ``"pickle"`` (starts like a pickle), ``"empty"`` or ``"unknown"``. Reads the first
    bytes and the zip directory only: nothing is unpickled."""
    if isinstance(source, pathlib.Path):
        with open(source, "rb") as fh:
            return sniff(fh)
    start = source.tell()
    try:
        return _sniff_open(source)
    finally:
        source.seek(start)


def _sniff_open(fh: IO[bytes]) -> str:
    start = fh.tell()
    head = fh.read(4)
    fh.seek(start)
    if not head:
        return "empty"
    if len(head) > 1 and head[0] == 0x80 and 2 <= head[1] <= 5:  # PROTO opcode, protocol 2-5
        return "pickle"
    if head == b"PK\x03\x04" or zipfile.is_zipfile(fh):
        fh.seek(start)
        try:
            with zipfile.ZipFile(fh) as zf:
                names = set(zf.namelist())
        except (zipfile.BadZipFile, OSError, ValueError):
            return "unknown"
        if MANIFEST in names:
            return "archive"
        if "data" in names:
            return "sb3-zip"
    return "unknown"


def write_archive(
    path: str | os.PathLike[str] | io.BufferedIOBase,
    kind: str,
    manifest: dict[str, Any],
    members: Mapping[str, bytes],
) -> None:
    """Write ``members`` and the manifest (with ``format``, ``kind``, ``version`` and each
    member's SHA-256 added) as one zip file, atomically for a path: a failed save leaves the
    previous file; leftovers of killed saves of the same file are removed first.

    :param path: The file (written as given: the caller adds any suffix) or a binary file object.
    :param kind: ``"model"``, ``"replay-buffer"`` or ``"run-state"``; checked on reading.
    """
    head = {
        "format": FORMAT,
        "kind": kind,
        "version": VERSION,
        "members": {
            name: {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
            for name, data in members.items()
        },
    }
    text = json.dumps({**head, **manifest}, indent=1, allow_nan=False).encode("utf-8")

    def write(fh: Any) -> None:
        with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
            zf.writestr(MANIFEST, text)
            for name, data in members.items():
                zf.writestr(name, data)

    if isinstance(path, str | os.PathLike):
        dest = pathlib.Path(path)
        if dest.is_dir():
            raise IsADirectoryError(
                f"cannot save to {str(dest)!r}: it is a folder (allowed: a file path)"
            )
        remove_stale_temporaries(dest)
        with atomic_write(dest) as fh:
            write(fh)
    else:
        write(path)


def read_archive(
    path: pathlib.Path | IO[bytes], kind: str, pickle_hint: str = ""
) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The manifest and the members of an archive, every member's SHA-256 checked.

    :param path: The file, or a seekable binary file object.
    :param kind: The kind expected (see :func:`write_archive`).
    :param pickle_hint: How to opt into a pickle-based file, for :class:`PickleRefusedError`.
    :raises PickleRefusedError: for an SB3 zip or a pickle.
    :raises ArchiveError: for anything else that is not a complete, intact archive of ``kind``.
    """
    name = source_name(path)
    found = sniff(path)
    if found in ("sb3-zip", "pickle"):
        what = (
            "a Stable-Baselines3 zip: its 'data' member is read by unpickling"
            if found == "sb3-zip"
            else "a pickle: reading it means unpickling"
        )
        raise PickleRefusedError(
            f"{name!r} is {what}, which runs any code the file holds. Load it only if it "
            f"comes from a source you trust: {pickle_hint}. Saving it again then writes the "
            "weights-only format, which loads without that risk."
        )
    if found == "empty":
        raise ArchiveError(f"{name!r} is empty (0 bytes): the save that wrote it did not finish")
    if found != "archive":
        raise ArchiveError(
            f"{name!r} is not a {FORMAT} {kind} file (no zip archive with a {MANIFEST}): "
            "damaged, truncated, or another kind of file"
        )
    try:
        with zipfile.ZipFile(path) as zf:
            manifest = json.loads(zf.read(MANIFEST).decode("utf-8"))
            if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
                raise ArchiveError(f"{name!r}: {MANIFEST} does not describe a {FORMAT} file")
            if manifest.get("kind") != kind:
                raise ArchiveError(
                    f"{name!r} holds a {manifest.get('kind')!r}, not a {kind!r}: pass a {kind} file"
                )
            if manifest.get("version") != VERSION:
                raise ArchiveError(
                    f"{name!r} has format version {manifest.get('version')!r}; this installation "
                    f"reads version {VERSION}"
                )
            members = {}
            for member, meta in manifest["members"].items():
                data = zf.read(member)
                if hashlib.sha256(data).hexdigest() != meta["sha256"]:
                    raise ArchiveError(
                        f"{name!r} is damaged: the checksum (SHA-256) of its member {member!r} "
                        "does not match the one recorded when it was saved"
                    )
                members[member] = data
    except ArchiveError:
        raise
    except (zipfile.BadZipFile, KeyError, ValueError, OSError, EOFError, TypeError) as exc:
        raise ArchiveError(f"{name!r} is damaged or truncated: {exc}") from exc
    return manifest, members
