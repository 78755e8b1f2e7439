"""Weights-only archives: the file format of saved models, replay buffers and checkpoints.

An archive is a zip file (stored, not compressed) with a ``manifest.json`` and members of
tensors written by ``torch.save``. Nothing in it is a pickle of arbitrary objects:

- tensors and NumPy arrays are read back with ``torch.load(weights_only=True)``, whose
  unpickler builds tensors and plain containers only and refuses every other global;
- everything else (settings, hyperparameters, spaces, schedules, counters, generator states) is
  JSON through :func:`encode` / :func:`decode`: numbers, strings, lists, tuples, dicts, deques,
  Gymnasium spaces, ``torch.device``, references to the classes named exactly in
  :data:`ALLOWED_CLASSES` (looked up there before anything is imported, never unpickled), and
  instances of the few plain classes listed in :data:`PLAIN_CLASSES` (rebuilt through their
  constructors), nested at most :data:`MAX_DEPTH` levels;
- the manifest records the SHA-256 and size of every member, and ``manifest.sha256`` the
  manifest's own; :func:`read_archive` checks every size in the zip directory before anything
  is read (members are stored, never compressed) and every checksum before anything is
  decoded, so a flipped byte raises :class:`ArchiveError` naming the file and member.

Stable-Baselines3's own zips hold a cloudpickle (their ``data`` member) and SB3's replay
buffers are pickles: reading either runs whatever code the file holds. They are recognised
(:func:`sniff`) and refused unless the caller opts in (:class:`PickleRefusedError`).
"""

from __future__ import annotations

import collections
import contextlib
import enum
import glob
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

from agents.files.side_files import ArchiveError
from gpu_trading_env.atomic_file import atomic_write

__all__ = [
    "ArchiveError",
    "PickleRefusedError",
    "UnencodableValue",
    "PLAIN_CLASSES",
    "archive_member",
    "decode",
    "encode",
    "manifest_field",
    "read_archive",
    "remove_stale_temporaries",
    "resolve_existing",
    "sniff",
    "source_name",
    "named_tensors",
    "tensors_from_bytes",
    "tensors_to_bytes",
    "write_archive",
]

FORMAT = "gpu-trading-env"
VERSION = 2  # 2: the manifest has its own checksum member; 1 (read too): it has none
READ_VERSIONS = (1, 2)
MANIFEST = "manifest.json"
MANIFEST_DIGEST = "manifest.sha256"  # the SHA-256 of manifest.json, as 64 hex digits
ARRAYS = "arrays.pt"  # the tensors that encode() took out of the JSON values

# The torch classes an archive may name (activations, optimizers), by their own module's name.
_TORCH_CLASSES = (
    th.nn.ReLU, th.nn.LeakyReLU, th.nn.Tanh, th.nn.ELU, th.nn.GELU, th.nn.SiLU, th.nn.Sigmoid,
    th.nn.Softplus, th.nn.Mish, th.nn.SELU, th.nn.CELU, th.nn.Hardtanh, th.nn.ReLU6,
    th.nn.Hardswish, th.nn.Hardsigmoid, th.nn.Identity, th.nn.Flatten,
    th.optim.Adam, th.optim.AdamW, th.optim.SGD, th.optim.RMSprop,
)  # fmt: skip

# Every class an archive may name (policy_class, activation_fn, optimizer_class,
# replay_buffer_class, features_extractor_class, a buffer file's class), exactly as
# ``module:qualname``: networks of flat observations, whose sizes load checks. A name is looked up here before anything is imported: a file cannot make
# the loader import a module of its choosing (whose import could run code) or walk attributes
# out of an allowed module.
ALLOWED_CLASSES = frozenset(
    {
        "agents.algorithm.policies:DuelingDQNPolicy",
        "agents.replay.prioritized_buffer:PrioritizedReplayBuffer",
        "stable_baselines3.dqn.policies:DQNPolicy",
        "stable_baselines3.common.buffers:ReplayBuffer",
        "stable_baselines3.common.buffers:NStepReplayBuffer",
        "stable_baselines3.common.torch_layers:FlattenExtractor",
        *(f"{c.__module__}:{c.__qualname__}" for c in _TORCH_CLASSES),
    }
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

# What a class named in an archive must derive from (a second check after the list).
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

# Nesting of a JSON value: the files written hold 10 levels or fewer; deeper is a forged file
# (Python's own limit would end the load with a RecursionError).
MAX_DEPTH = 64
# Size of a manifest: those written hold kilobytes of settings (arrays go into members).
MAX_MANIFEST_BYTES = 16 << 20

# A temporary named without its writer's process id (older saves') older than this is a leftover.
STALE_SECONDS = 60.0


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
    """Remove the temporaries that killed saves of ``dest`` left in names without a writer's
    host and process id (``.{name}.*.tmp`` of older saves) that no one wrote to for
    ``older_than`` seconds. Names of :func:`~gpu_trading_env.atomic_file.atomic_write`
    (``.{name}.{host}.{pid}.{random}.tmp``) are left to its own cleanup, which spares the
    temporaries of live writers however long their save takes.

    :return: The names removed.
    """
    removed = []
    now = time.time()
    with contextlib.suppress(OSError):
        for tmp in dest.parent.glob(f".{glob.escape(dest.name)}.*.tmp"):
            parts = tmp.name[len(dest.name) + 2 : -len(".tmp")].split(".")
            if len(parts) == 3 and len(parts[0]) == 8 and parts[1].isdigit():
                continue  # atomic_write's name: its owner may be alive
            with contextlib.suppress(OSError):
                if now - tmp.lstat().st_mtime >= older_than:
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
        with zipfile.ZipFile(io.BytesIO(data)) as inner:
            records = inner.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, EOFError) as exc:
        raise ArchiveError(f"{where} is not a weights-only torch file: {exc}") from exc
    if any(r.compress_type != zipfile.ZIP_STORED for r in records) or sum(
        r.file_size for r in records
    ) > len(data):
        # torch's reader allocates a record's stated size before it inflates it.
        raise ArchiveError(
            f"{where} is not a weights-only torch file: its records are compressed or larger "
            "than the member (torch.save stores them)"
        )
    try:
        loaded = th.load(io.BytesIO(data), map_location=map_location, weights_only=True)
    except Exception as exc:  # torch raises UnpicklingError, RuntimeError, EOFError, ...
        raise ArchiveError(f"{where} is not a weights-only torch file: {exc}") from exc
    _check_tensor_bytes(loaded, len(data), where)
    return loaded


def named_tensors(value: Any, prefix: str = "") -> list[tuple[str, th.Tensor]]:
    """The tensors in ``value`` (nested dicts, lists and tuples), each with its path of keys
    (``policy/q_net.0.weight``)."""
    found, stack = [], [(prefix, value)]
    while stack:
        name, item = stack.pop()
        if isinstance(item, th.Tensor):
            found.append((name, item))
        elif isinstance(item, dict):
            stack.extend((f"{name}/{k}" if name else str(k), v) for k, v in item.items())
        elif isinstance(item, list | tuple):
            stack.extend((f"{name}/{i}" if name else str(i), v) for i, v in enumerate(item))
    return found


def _check_tensor_bytes(loaded: Any, held: int, where: str) -> None:
    """Every tensor's elements stored in bytes of its own: a tensor of shape ``(10**5, 10**4)``
    with strides of 0 over a 4-byte storage (or many views of one storage) would size networks
    and buffers of gigabytes from a file of kilobytes. The bytes the member holds are the cap.

    :raises ArchiveError: naming ``where``, the tensor, its shape and the bytes it needs.
    """
    total = 0
    for name, tensor in named_tensors(loaded):
        if tensor.layout != th.strided:
            raise ArchiveError(
                f"{where}: tensor {name!r} has the layout {tensor.layout}; allowed are dense "
                "(strided) tensors, as a state dict holds"
            )
        needs = tensor.numel() * tensor.element_size()
        stored = tensor.untyped_storage().nbytes() - tensor.storage_offset() * tensor.element_size()
        if needs > stored:
            raise ArchiveError(
                f"{where}: tensor {name!r} of shape {tuple(tensor.shape)} and strides "
                f"{tensor.stride()} needs {needs} bytes; its storage holds {stored} (allowed: "
                "every element stored once, as torch.save writes a state dict)"
            )
        total += needs
    if total > held:
        raise ArchiveError(
            f"{where}: its tensors need {total} bytes; the member holds {held} (allowed: every "
            "element stored once, as torch.save writes a state dict)"
        )


# ---------------------------------------------------------------------------------- values
def _class_name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _import_class(
    name: Any,
    bases: tuple[type, ...] | None = CLASS_BASES,
    allowed: frozenset[str] = ALLOWED_CLASSES,
) -> type:
    """The class ``module:qualname`` when that exact name (after :data:`MOVED_MODULES`) is in
    ``allowed``; the module is imported only then. Unless ``bases`` is None, only a subclass of
    ``bases``.

    :raises UnencodableValue: for a name not in ``allowed`` (nothing imported), or one that does
        not resolve to that very class.
    """
    if not isinstance(name, str):
        raise UnencodableValue(
            f"class name {name!r} is invalid: allowed is a 'module:qualname' str"
        )
    module_name, _, qualname = name.partition(":")
    canonical = f"{MOVED_MODULES.get(module_name, module_name)}:{qualname}"
    if canonical not in allowed:
        raise UnencodableValue(
            f"class {name!r} is not one the archive may name: allowed are the networks, "
            "activations, optimizers, buffers and schedules of safe_archive.ALLOWED_CLASSES "
            "and PLAIN_CLASSES (pass other objects through custom_objects)"
        )
    module_name, _, qualname = canonical.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise UnencodableValue(f"class {name!r} does not exist in this installation") from exc
    if not isinstance(obj, type) or _class_name(obj) != canonical:
        raise UnencodableValue(
            f"{name!r} does not name the class {canonical!r} in this installation"
        )
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


def _decode_space(d: dict[str, Any], arrays: Mapping[str, Any], depth: int) -> spaces.Space:
    if not isinstance(d, dict) or depth > MAX_DEPTH:
        raise ArchiveError(f"space {_short(d)} is not a dict of at most {MAX_DEPTH} levels")
    kind = d.get("type")
    if kind == "Box":
        low, high = _decode(d["low"], arrays, depth), _decode(d["high"], arrays, depth)
        dtype = np.dtype(d["dtype"])
        if dtype.kind not in "biuf" or not isinstance(low, np.ndarray):
            raise ArchiveError(f"Box of dtype {dtype} or bounds {_short(low)}: allowed are numbers")
        return spaces.Box(low=low, high=high, shape=low.shape, dtype=dtype)
    if kind == "Discrete":
        return spaces.Discrete(int(d["n"]), start=int(d["start"]))
    if kind == "MultiDiscrete":
        return spaces.MultiDiscrete(
            _decode(d["nvec"], arrays, depth), start=_decode(d["start"], arrays, depth)
        )
    if kind == "MultiBinary":
        return spaces.MultiBinary(_decode(d["n"], arrays, depth))
    if kind == "Dict":
        return spaces.Dict({k: _decode_space(s, arrays, depth + 1) for k, s in d["spaces"].items()})
    if kind == "Tuple":
        return spaces.Tuple([_decode_space(s, arrays, depth + 1) for s in d["spaces"]])
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
    """The inverse of :func:`encode`; classes are imported by name only from the allowed list.

    :raises ArchiveError: for a value :func:`encode` does not write (a damaged or forged file),
        or nested deeper than :data:`MAX_DEPTH`.
    """
    return _decode(value, arrays, 0)


def _decode(value: Any, arrays: Mapping[str, Any], depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise ArchiveError(
            f"a value is nested deeper than {MAX_DEPTH} levels (allowed: {MAX_DEPTH})"
        )
    if value is None or isinstance(value, bool | int | float | str):
        return value
    depth += 1
    if isinstance(value, list):
        return [_decode(v, arrays, depth) for v in value]
    if not isinstance(value, dict) or len(value) == 0:
        raise ArchiveError(f"unexpected value {_short(value)}")
    tag = next(iter(value))
    try:
        if tag == "__float__":
            if value[tag] not in ("nan", "inf", "-inf"):
                raise ArchiveError(f"unexpected float {_short(value[tag])}")
            return float(value[tag])
        if tag == "__npscalar__":
            scalar = _decode(value[tag], arrays, depth)
            if not isinstance(scalar, np.ndarray) or scalar.shape != ():
                raise ArchiveError(f"__npscalar__ {_short(value)} is not a 0-d array")
            return scalar[()]
        if tag == "__array__":
            tensor = arrays[value[tag]]
            if not isinstance(tensor, th.Tensor) or not isinstance(value["numpy"], bool):
                raise ArchiveError(f"array reference {_short(value)} names no tensor")
            return tensor.cpu().numpy() if value["numpy"] else tensor
        if tag == "__device__":
            return th.device(value[tag])
        if tag == "__space__":
            return _decode_space(value[tag], arrays, depth)
        if tag == "__class__":
            return _import_class(value[tag], CLASS_BASES)
        if tag == "__deque__":
            maxlen = value["maxlen"]
            if maxlen is not None and not (isinstance(maxlen, int) and 0 <= maxlen):
                raise ArchiveError(f"deque maxlen {_short(maxlen)}: allowed is None or an int >= 0")
            return collections.deque((_decode(v, arrays, depth) for v in value[tag]), maxlen)
        if tag == "__tuple__":
            return tuple(_decode(v, arrays, depth) for v in value[tag])
        if tag == "__dict__":
            return {str(k): _decode(v, arrays, depth) for k, v in value[tag].items()}
        if tag == "__object__":
            if value[tag] not in PLAIN_CLASSES:
                raise ArchiveError(
                    f"object of class {_short(value[tag])} is not allowed in an archive"
                )
            cls = _import_class(value[tag], None, PLAIN_CLASSES)
            if issubclass(cls, enum.Enum):
                return cls(_decode(value["value"], arrays, depth))
            if "fields" in value:
                return cls(*(_decode(v, arrays, depth) for v in value["fields"]))
            state = _decode(value["state"], arrays, depth)
            if not isinstance(state, dict) or not all(map(_plain_field, state.values())):
                raise ArchiveError(
                    f"object {_short(value)}: allowed are fields of finite numbers and "
                    "plain objects"
                )
            obj = cls(**state)  # the constructor's own checks
            if set(vars(obj)) != set(state):
                raise ArchiveError(
                    f"object {_short(value)} does not hold the fields of {cls.__name__}"
                )
            return obj
    except UnencodableValue as exc:
        raise ArchiveError(str(exc)) from exc
    except (KeyError, TypeError, ValueError, AttributeError, RuntimeError, AssertionError) as exc:
        if isinstance(exc, ArchiveError):
            raise
        raise ArchiveError(f"malformed value {_short(value)}: {exc!r}") from exc
    raise ArchiveError(f"unexpected value {_short(value)}")


def _plain_field(value: Any) -> bool:
    """Whether ``value`` may be a field of a plain object: a finite number or a plain object."""
    if isinstance(value, bool | int):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    return _class_name(type(value)) in PLAIN_CLASSES


def _short(value: Any, limit: int = 200) -> str:
    """``repr(value)`` cut to ``limit`` characters (a forged value can be megabytes long)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


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
            zf.writestr(MANIFEST_DIGEST, hashlib.sha256(text).hexdigest())
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
            return _read_open_archive(zf, name, kind)
    except ArchiveError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, KeyError, ValueError,
            OSError, EOFError, TypeError, RecursionError) as exc:  # fmt: skip
        raise ArchiveError(f"{name!r} is damaged or truncated: {exc}") from exc


def manifest_field(manifest: Mapping[str, Any], key: str, kind: type | tuple, where: str) -> Any:
    """``manifest[key]``, of type ``kind``.

    :raises ArchiveError: naming ``where`` and the field when it is missing or of another type.
    """
    names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
    if key not in manifest:
        raise ArchiveError(f"{where}: its {MANIFEST} lacks the field {key!r} (a {names})")
    value = manifest[key]
    if not isinstance(value, kind):
        raise ArchiveError(
            f"{where}: its {MANIFEST}'s field {key!r} is a {type(value).__name__}; allowed is a "
            f"{names}"
        )
    return value


def archive_member(members: Mapping[str, bytes], name: str, where: str) -> bytes:
    """The bytes of member ``name``; :class:`ArchiveError` naming ``where`` when it has none."""
    if name not in members:
        raise ArchiveError(
            f"{where} lacks the member {name!r} (it holds {sorted(members)}): not a complete file"
        )
    return members[name]


def _read_open_archive(
    zf: zipfile.ZipFile, name: str, kind: str
) -> tuple[dict[str, Any], dict[str, bytes]]:
    """:func:`read_archive` of an open zip: every size checked before anything is read, the
    manifest's checksum before it is parsed, each member's before it is returned."""
    infos = _member_infos(zf, name)
    _check_no_overlap(zf, infos, name)
    if infos[MANIFEST].file_size > MAX_MANIFEST_BYTES:
        raise ArchiveError(
            f"{name!r}: {MANIFEST} has {infos[MANIFEST].file_size} bytes; allowed are at most "
            f"{MAX_MANIFEST_BYTES} (the settings of a model, buffer or run state)"
        )
    text = zf.read(MANIFEST)
    digest = None
    if MANIFEST_DIGEST in infos:
        if infos[MANIFEST_DIGEST].file_size != 64:
            raise ArchiveError(f"{name!r}: {MANIFEST_DIGEST} is not 64 hex digits")
        digest = zf.read(MANIFEST_DIGEST).decode("ascii")
        if hashlib.sha256(text).hexdigest() != digest:
            raise ArchiveError(
                f"{name!r} is damaged: the checksum (SHA-256) of its {MANIFEST} does not match "
                f"the one recorded in {MANIFEST_DIGEST} when it was saved"
            )
    try:
        manifest = json.loads(text.decode("utf-8"))
    except RecursionError:
        raise ArchiveError(
            f"{name!r}: {MANIFEST} is nested too deeply to be a file written by save"
        ) from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ArchiveError(f"{name!r}: {MANIFEST} does not describe a {FORMAT} file")
    if manifest.get("kind") != kind:
        raise ArchiveError(
            f"{name!r} holds a {_short(manifest.get('kind'))}, not a {kind!r}: pass a {kind} file"
        )
    version = manifest.get("version")
    if version not in READ_VERSIONS:
        raise ArchiveError(
            f"{name!r} has format version {_short(version)}; this installation reads versions "
            f"{', '.join(map(str, READ_VERSIONS))}"
        )
    if version >= 2 and digest is None:
        raise ArchiveError(f"{name!r} (format version {version}) lacks its {MANIFEST_DIGEST}")
    listed = manifest.get("members")
    if not isinstance(listed, dict):
        raise ArchiveError(f"{name!r}: {MANIFEST}'s 'members' is not a dict of members")
    present = set(infos) - {MANIFEST, MANIFEST_DIGEST}
    if present != set(listed):
        raise ArchiveError(
            f"{name!r}: its members {sorted(present)} differ from those its {MANIFEST} lists "
            f"{sorted(listed)}"
        )
    return manifest, _read_members(zf, name, infos, listed)


def _member_infos(zf: zipfile.ZipFile, name: str) -> dict[str, zipfile.ZipInfo]:
    """The zip's members by name, each once and stored (not compressed)."""
    infos = {}
    for info in zf.infolist():
        if info.filename in infos:
            raise ArchiveError(f"{name!r} holds the member {info.filename!r} twice (a forged file)")
        if info.compress_type != zipfile.ZIP_STORED:
            raise ArchiveError(
                f"{name!r}: its member {info.filename!r} is compressed (zip method "
                f"{info.compress_type}); allowed is stored, as save writes every member"
            )
        infos[info.filename] = info
    return infos


def _check_no_overlap(zf: zipfile.ZipFile, infos: dict[str, zipfile.ZipInfo], name: str) -> None:
    """Each member's local header and data in bytes of its own, before the zip's directory:
    members whose data hold the next ones (an overlapping zip bomb) would make a file of
    megabytes read as gigabytes, and pass every checksum."""
    end, previous = 0, None
    for info in sorted(infos.values(), key=lambda i: i.header_offset):
        if info.header_offset < end:
            raise ArchiveError(
                f"{name!r}: its members {previous.filename!r} and {info.filename!r} share bytes "
                "(overlapping entries, a zip bomb); allowed are members stored apart, as save "
                "writes them"
            )
        encoding = "utf-8" if info.flag_bits & 0x800 else "cp437"
        header = 30 + len(info.orig_filename.encode(encoding, errors="replace"))
        end, previous = info.header_offset + header + info.compress_size, info
    if previous is not None and end > zf.start_dir:
        raise ArchiveError(
            f"{name!r}: its member {previous.filename!r} runs into the zip's directory "
            "(overlapping entries, a zip bomb)"
        )


def _read_members(
    zf: zipfile.ZipFile,
    name: str,
    infos: dict[str, zipfile.ZipInfo],
    listed: dict[str, Any],
) -> dict[str, bytes]:
    """The bytes of each member the manifest lists, its size checked before it is read and its
    SHA-256 before it is returned."""
    members = {}
    for member, meta in listed.items():
        size = meta.get("bytes") if isinstance(meta, dict) else None
        if not isinstance(size, int) or isinstance(size, bool) or size != infos[member].file_size:
            raise ArchiveError(
                f"{name!r}: member {member!r} has {infos[member].file_size} bytes; its "
                f"{MANIFEST} records {_short(size)}"
            )
        sha = hashlib.sha256()
        chunks = []
        with zf.open(infos[member]) as fh:
            for block in iter(lambda fh=fh: fh.read(1 << 20), b""):
                sha.update(block)
                chunks.append(block)
        if sha.hexdigest() != meta.get("sha256"):
            raise ArchiveError(
                f"{name!r} is damaged: the checksum (SHA-256) of its member {member!r} "
                "does not match the one recorded when it was saved"
            )
        members[member] = b"".join(chunks)
    return members
