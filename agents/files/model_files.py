"""The files of :class:`~agents.GpuDQN`: models and replay buffers in the weights-only format.

A model file (``model.zip``) is an :mod:`agents.files.safe_archive` archive of kind ``"model"``:
``manifest.json`` holds the class, every saved attribute as JSON (hyperparameters, spaces,
schedules, counters such as ``num_timesteps``) and the list of attributes that could not be
written (a ``lambda`` learning rate, a class from outside the project); ``params.pt`` the state
dicts (policy, its optimizer, the curiosity model and its optimizer) and ``arrays.pt`` the
arrays among the attributes (``_last_obs``, ...), both read with ``torch.load(weights_only=True)``.

A replay-buffer file is an archive of kind ``"replay-buffer"``: the buffer's class and settings
as JSON; its storage, its sum and min trees and its Philox counter as tensors and numbers.

Stable-Baselines3's pickle-based files load only with ``allow_pickle=True``
(:class:`~agents.files.safe_archive.PickleRefusedError` otherwise).
"""

from __future__ import annotations

import io
import json
import math
import os
import pathlib
import pickle
import warnings
import zipfile
from collections.abc import Iterable
from typing import IO, Any, TypeVar

import numpy as np
import stable_baselines3
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import ReplayBuffer
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.save_util import recursive_getattr, recursive_setattr
from stable_baselines3.common.utils import check_for_correct_spaces, get_device

from agents.files.safe_archive import (
    ARRAYS,
    ArchiveError,
    UnencodableValue,
    _class_name,
    _import_class,
    _short,
    archive_member,
    decode,
    encode,
    manifest_field,
    named_tensors,
    read_archive,
    resolve_existing,
    sniff,
    source_name,
    tensors_from_bytes,
    tensors_to_bytes,
    write_archive,
)
from gpu_trading_env.atomic_file import with_suffix_if_missing

__all__ = [
    "WeightsOnlyFiles",
    "BUFFER_SUFFIX",
    "MODEL_SUFFIX",
    "load_model_files",
    "load_replay_buffer_file",
    "model_payload",
    "save_model_file",
    "save_replay_buffer_file",
]

MODEL_SUFFIX = "zip"
BUFFER_SUFFIX = "rb.zip"
PARAMS = "params.pt"
TORCH_VARIABLES = "pytorch_variables.pt"
# Attributes that _setup_model builds again from others (learning_rate, exploration_*): a value
# that could not be saved there is no loss.
REBUILT_BY_SETUP = frozenset({"lr_schedule", "exploration_schedule"})

# What every model file must hold: the spaces the network is built for and its class.
REQUIRED_ATTRIBUTES = ("observation_space", "action_space", "policy_class")
MODEL_PICKLE_HINT = "GpuDQN.load(path, allow_pickle=True), or the command's --allow-pickle"
BUFFER_PICKLE_HINT = "model.load_replay_buffer(path, allow_pickle=True)"


def _writable_path(path: Any, suffix: str) -> Any:
    """``path`` with ``.suffix`` when it has none; a folder is refused before the suffix is
    added (``save("runs/x")`` with a folder ``runs/x`` must not write ``runs/x.zip``)."""
    if not isinstance(path, str | os.PathLike):
        return path
    if pathlib.Path(path).is_dir():
        raise IsADirectoryError(
            f"cannot save to {str(path)!r}: it is a folder (allowed: a file path, e.g. "
            f"{str(pathlib.Path(path) / ('file.' + suffix))!r})"
        )
    return with_suffix_if_missing(path, suffix)


def _readable(path: Any, suffix: str) -> pathlib.Path | IO[bytes]:
    """The file to read: a path (see :func:`~agents.files.safe_archive.resolve_existing`), or a
    binary file object (read into memory when it cannot seek)."""
    if isinstance(path, str | os.PathLike):
        return resolve_existing(path, suffix)
    if not hasattr(path, "read"):
        raise TypeError(
            f"path = {path!r} is invalid: allowed is a file path (str or os.PathLike) or a "
            "binary file object"
        )
    if not (hasattr(path, "seekable") and path.seekable()):
        return io.BytesIO(path.read())
    return path


def _where(path: Any) -> str:
    """``path`` for messages, quoted."""
    if isinstance(path, str | os.PathLike):
        return repr(str(path))
    return repr(source_name(path))


# ---------------------------------------------------------------------------------- models
# Attributes that _setup_model (or an env) sets and a file holds, though a model constructed
# without an env has none of them yet.
SET_BY_SETUP = frozenset(
    {
        "lr_schedule",
        "exploration_schedule",
        "batch_norm_stats",
        "batch_norm_stats_target",
        "observation_space",
        "action_space",
        "n_envs",
    }
)
# Counters of a run: ints >= 0.
COUNTERS = frozenset(
    {
        "num_timesteps",
        "_total_timesteps",
        "_num_timesteps_at_start",
        "_episode_num",
        "_n_updates",
        "_n_calls",
        "_train_calls",
    }
)
# Attributes whose type differs from the constructor's default, checked on their own.
SPECIAL = frozenset(
    {"train_freq", "max_grad_norm", "learning_rate", "start_time", "seed", "exploration_rate"}
)


def _is_int(x: Any) -> bool:
    return isinstance(x, int | np.integer) and not isinstance(x, bool | np.bool_)


def _is_real(x: Any) -> bool:
    return isinstance(x, int | float | np.integer | np.floating) and not isinstance(x, bool)


def check_off_policy_attributes(model: Any, data: dict[str, Any], where: str) -> None:
    """Raise :class:`ArchiveError` naming the file and the first attribute of ``data`` that a
    freshly constructed ``model`` (of the loading class, no env) would not hold: an unknown name,
    a type other than its default's (``batch_size = "32"``), a non-finite float, a counter < 0,
    ``n_envs`` < 1, an exploration rate outside [0, 1], an observation or last observation
    that does not match the spaces."""
    fresh = vars(model)
    # What save leaves out (device, env, policy, ...) a file must not set either.
    excluded = set(model._excluded_save_params())  # noqa: SLF001 (SB3's hook)
    allowed = (set(fresh) - excluded) | SET_BY_SETUP | set(model.extra_saved_attributes())
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ArchiveError(
            f"{where}: attributes {unknown} are not ones {type(model).__name__} saves (a forged "
            "or foreign file)"
        )

    _check_attribute_types(fresh, data, where)
    _check_attribute_ranges(data, where)
    _check_spaces_and_observations(data, where)


def _bad_attribute(where: str, data: dict[str, Any], name: str, allowed_text: str) -> ArchiveError:
    """The error naming the file, attribute ``name``, its value and what is allowed."""
    return ArchiveError(
        f"{where}, attribute {name!r} = {_short(data[name])} is invalid: allowed is {allowed_text}"
    )


def _check_attribute_types(fresh: dict[str, Any], data: dict[str, Any], where: str) -> None:
    """Each attribute of ``data`` of the type of the fresh model's (``fresh``, its ``vars``)
    default; counters ints >= 0."""

    def bad(name: str, allowed_text: str) -> ArchiveError:
        return _bad_attribute(where, data, name, allowed_text)

    for name, value in data.items():
        default = fresh.get(name)
        if name in COUNTERS:
            if not _is_int(value) or value < 0:
                raise bad(name, "an int >= 0 (a counter of the run)")
        elif name in SPECIAL or name in ("policy_class",):
            continue
        elif isinstance(default, bool):
            if not isinstance(value, bool | np.bool_):
                raise bad(name, "True or False")
        elif _is_int(default):
            if not _is_int(value):
                raise bad(name, "an int")
        elif isinstance(default, float):
            if not _is_real(value) or not math.isfinite(float(value)):
                raise bad(name, "a finite number")
        elif isinstance(default, str):
            if not isinstance(value, str):
                raise bad(name, "a str")
        elif isinstance(default, dict):
            if not isinstance(value, dict):
                raise bad(name, "a dict")


def _check_attribute_ranges(data: dict[str, Any], where: str) -> None:
    """The attributes with a range of their own (``n_envs`` >= 1, exploration rate in [0, 1],
    ...) inside it."""
    checks = [
        ("n_envs", lambda v: _is_int(v) and v >= 1, "an int >= 1"),
        ("_stats_window_size", lambda v: _is_int(v) and v >= 1, "an int >= 1"),
        ("start_time", lambda v: _is_real(v) and math.isfinite(float(v)), "a finite number"),
        ("seed", lambda v: v is None or _is_int(v), "None or an int"),
        (
            "exploration_rate",
            lambda v: _is_real(v) and 0.0 <= float(v) <= 1.0,
            "a probability in [0, 1]",
        ),
        (
            "_current_progress_remaining",
            lambda v: _is_real(v) and math.isfinite(float(v)) and float(v) <= 1.0,
            "a finite number <= 1",
        ),
        ("action_noise", lambda v: v is None, "None"),
        ("tensorboard_log", lambda v: v is None or isinstance(v, str), "None or a folder (str)"),
        ("verbose", lambda v: _is_int(v) and 0 <= v <= 2, "0, 1 or 2"),
    ]
    for name, ok, allowed_text in checks:
        if name in data and not ok(data[name]):
            raise _bad_attribute(where, data, name, allowed_text)


def _check_spaces_and_observations(data: dict[str, Any], where: str) -> None:
    """The spaces Gymnasium spaces, the last observations (and episode starts) of the shape of
    ``n_envs`` envs of the observation space."""

    def bad(name: str, allowed_text: str) -> ArchiveError:
        return _bad_attribute(where, data, name, allowed_text)

    obs_space = data.get("observation_space")
    if not isinstance(obs_space, spaces.Space):
        raise bad("observation_space", "a Gymnasium space")
    if not isinstance(data.get("action_space"), spaces.Space):
        raise bad("action_space", "a Gymnasium space")
    n_envs = data.get("n_envs", 1)
    for name in ("_last_obs", "_last_original_obs"):
        value = data.get(name)
        if value is None or not isinstance(obs_space, spaces.Box):
            continue
        if not isinstance(value, np.ndarray) or value.shape != (n_envs, *obs_space.shape):
            raise bad(
                name,
                f"None or an array of shape {(n_envs, *obs_space.shape)} (n_envs = {n_envs}: a "
                "file saved with another number of envs loads with an env of that many)",
            )
    starts = data.get("_last_episode_starts")
    if starts is not None and (not isinstance(starts, np.ndarray) or starts.shape != (n_envs,)):
        raise bad("_last_episode_starts", f"None or an array of shape ({n_envs},)")


def model_payload(
    model: Any, exclude: Iterable[str] | None = None, include: Iterable[str] | None = None
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """``(attributes, state dicts, torch variables)`` that SB3's ``save`` would write, with its
    rules for ``exclude`` / ``include`` (``BaseAlgorithm.save``)."""
    data = model.__dict__.copy()
    excluded = set(exclude or []).union(model._excluded_save_params())  # noqa: SLF001 (SB3's hook)
    if include is not None:
        excluded = excluded.difference(include)
    state_dict_names, torch_variable_names = model._get_torch_save_params()  # noqa: SLF001
    for name in state_dict_names + torch_variable_names:
        excluded.add(name.split(".")[0])
    for name in excluded:
        data.pop(name, None)
    variables = {name: recursive_getattr(model, name) for name in torch_variable_names}
    return data, model.get_parameters(), variables


def save_model_file(
    model: Any,
    path: str | os.PathLike[str] | io.BufferedIOBase,
    exclude: Iterable[str] | None = None,
    include: Iterable[str] | None = None,
) -> None:
    """Write ``model`` in the weights-only format (a path without a suffix gets ``.zip``).

    Attributes that JSON and tensors cannot hold (a ``lambda`` schedule, an object of a class
    from outside the project) are left out with a warning naming them; load them back through
    ``custom_objects``.
    """
    data, params, variables = model_payload(model, exclude, include)
    arrays: dict[str, th.Tensor] = {}
    encoded: dict[str, Any] = {}
    not_saved: dict[str, str] = {}
    for name, value in data.items():
        scratch: dict[str, th.Tensor] = {}
        try:
            encoded[name] = encode(value, scratch)
        except UnencodableValue as exc:
            not_saved[name] = str(exc)
            continue
        for key, tensor in scratch.items():  # renumber into the shared table
            arrays[f"{name}/{key}"] = tensor
        encoded[name] = _prefix_refs(encoded[name], f"{name}/")
    lost = sorted(set(not_saved) - REBUILT_BY_SETUP)
    if lost:
        warnings.warn(
            f"{type(model).__name__}.save: attributes {lost} cannot be written in the "
            f"weights-only format ({'; '.join(f'{k}: {not_saved[k]}' for k in lost)}); pass "
            "them to load through custom_objects={name: value}",
            UserWarning,
            stacklevel=3,
        )
    manifest = {
        "class": _class_name(type(model)),
        "data": encoded,
        "not_saved": not_saved,
        "state_dicts": sorted(params),
        "pytorch_variables": sorted(variables),
        "versions": {"torch": th.__version__, "stable_baselines3": stable_baselines3.__version__},
    }
    members = {
        PARAMS: tensors_to_bytes(params),
        ARRAYS: tensors_to_bytes(arrays),
        TORCH_VARIABLES: tensors_to_bytes(variables),
    }
    write_archive(_writable_path(path, MODEL_SUFFIX), "model", manifest, members)


def _prefix_refs(value: Any, prefix: str) -> Any:
    """Encoded ``value`` with its array references renamed ``prefix + key``."""
    if isinstance(value, list):
        return [_prefix_refs(v, prefix) for v in value]
    if isinstance(value, dict):
        if "__array__" in value:
            return {**value, "__array__": prefix + value["__array__"]}
        return {k: _prefix_refs(v, prefix) for k, v in value.items()}
    return value


def _check_sb3_data(file: pathlib.Path | IO[bytes]) -> None:
    """An SB3 zip's ``data`` member holds the attributes SB3's ``load`` reads first (else SB3
    raises a bare KeyError): one :class:`ArchiveError` naming the file and what it lacks. Reads
    the member as JSON text only; the pickles in its values stay undecoded."""
    where = repr(source_name(file))
    start = None if isinstance(file, pathlib.Path) else file.tell()
    try:
        with zipfile.ZipFile(file) as zf:
            data = json.loads(zf.read("data"))
    except (zipfile.BadZipFile, KeyError, ValueError, OSError) as exc:
        raise ArchiveError(f"{where}: its 'data' member is not SB3's JSON ({exc})") from None
    finally:
        if start is not None:
            file.seek(start)
    if not isinstance(data, dict):
        raise ArchiveError(f"{where}: its 'data' member is {type(data).__name__}, not an object")
    missing = [name for name in REQUIRED_ATTRIBUTES if name not in data]
    if len(missing) == 1:
        raise ArchiveError(f"{where} lacks the attribute {missing[0]!r}")
    if missing:
        raise ArchiveError(f"{where} lacks the attributes {missing}")


def check_finite_weights(params: dict[str, Any], where: str) -> None:
    """Raise :class:`ArchiveError` naming ``where`` and the first floating-point tensor of the
    state dicts ``params`` holding NaN or an infinity (a network that acts on such weights
    answers one action whatever it sees)."""
    for name, tensor in named_tensors(params):
        if tensor.is_floating_point() and not bool(th.isfinite(tensor).all()):
            raise ArchiveError(
                f"{where}: tensor {name!r} holds NaN or infinite values; allowed are finite "
                "weights (the run that saved it diverged, or the file was edited)"
            )


def load_model_files(
    path: str | os.PathLike[str] | io.BufferedIOBase,
    custom_objects: dict[str, Any] | None,
    allow_pickle: bool,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any] | None, bool]:
    """``(attributes, state dicts, torch variables, is_sb3_zip)`` of a model file.

    For an SB3 zip (``allow_pickle=True`` only) the first three are ``None`` and the caller
    hands the path to SB3's own ``load``.

    :raises FileNotFoundError: naming the path as given.
    :raises PickleRefusedError: for an SB3 zip without ``allow_pickle``.
    :raises ArchiveError: for a damaged file, naming it.
    """
    file = _readable(path, MODEL_SUFFIX)
    if allow_pickle and sniff(file) == "sb3-zip":
        _check_sb3_data(file)
        return {}, {}, None, True
    manifest, members = read_archive(file, "model", MODEL_PICKLE_HINT)
    where = repr(source_name(file))
    attributes = manifest_field(manifest, "data", dict, where)
    not_saved = manifest_field({"not_saved": {}, **manifest}, "not_saved", dict, where)
    params, arrays, variables = (
        tensors_from_bytes(archive_member(members, m, where), f"{where} member {m!r}")
        for m in (PARAMS, ARRAYS, TORCH_VARIABLES)
    )
    for member, value in ((PARAMS, params), (ARRAYS, arrays), (TORCH_VARIABLES, variables)):
        if not isinstance(value, dict):
            raise ArchiveError(
                f"{where} member {member!r} holds a {type(value).__name__}; allowed is a dict"
            )
    check_finite_weights(params, f"{where} member {PARAMS!r}")
    custom = dict(custom_objects or {})
    data: dict[str, Any] = {}
    try:
        for name, value in attributes.items():
            data[name] = custom.pop(name) if name in custom else decode(value, arrays)
    except ArchiveError as exc:
        raise ArchiveError(f"{where}, attribute {name!r}: {exc}") from exc
    missing = sorted(set(not_saved) - REBUILT_BY_SETUP - set(custom))
    if missing:
        raise ArchiveError(
            f"{where} was saved without the attributes {missing} (the weights-only format "
            "cannot hold them: " + "; ".join(str(not_saved[k]) for k in missing) + "); "
            "pass them to load: custom_objects={" + ", ".join(f"{k!r}: ..." for k in missing) + "}"
        )
    data.update(custom)
    return data, params, variables, False


def build_loaded_model(
    cls: type,
    data: dict[str, Any],
    params: dict[str, Any],
    variables: dict[str, Any] | None,
    env: Any,
    device: th.device | str,
    force_reset: bool,
    kwargs: dict[str, Any],
    where: str = "the model file",
) -> Any:
    """The model from its attributes and state dicts, as SB3's ``BaseAlgorithm.load`` builds it
    after unpickling (same checks of the env's spaces, same ``_setup_model`` then
    ``set_parameters``); the patches SB3 applies to files of its old versions do not apply.

    Every attribute (the file's, then ``kwargs``) passes the model's
    :meth:`WeightsOnlyFiles.check_loaded_attributes` before anything is allocated. A file's
    ``tensorboard_log`` is not used: only ``kwargs`` sets one.
    """
    policy_kwargs = data.get("policy_kwargs")
    if isinstance(policy_kwargs, dict):
        policy_kwargs.pop("device", None)
    if "policy_kwargs" in kwargs and kwargs["policy_kwargs"] != data.get("policy_kwargs"):
        raise ValueError(
            "The specified policy kwargs do not equal the stored policy kwargs. Stored kwargs: "
            f"{data.get('policy_kwargs')}, specified kwargs: {kwargs['policy_kwargs']}"
        )
    for name in REQUIRED_ATTRIBUTES:
        if name not in data:
            raise ArchiveError(f"{where} lacks the attribute {name!r}")
    if env is not None:
        env = cls._wrap_env(env, data["verbose"])
        cls.check_env_spaces(env, data["observation_space"], data["action_space"])
        if force_reset:
            data["_last_obs"] = None  # the env is reset before training (SB3 issue 597)
        data["n_envs"] = env.num_envs
    if not (
        isinstance(data["policy_class"], type) and issubclass(data["policy_class"], BasePolicy)
    ):
        raise ArchiveError(
            f"{where}, attribute 'policy_class': {data['policy_class']!r} is not a policy class"
        )
    model = cls(policy=data["policy_class"], env=env, device=device, _init_setup_model=False)
    # Where the saving run logged is not where this one writes (train saves its own report
    # folder in every model): dropped without a word; only load's tensorboard_log= sets one.
    data.pop("tensorboard_log", None)
    merged = {**data, **kwargs}
    model.check_loaded_attributes(merged, params, where)
    model.__dict__.update(merged)
    try:
        model._setup_model()
        model.set_parameters(params, exact_match=True, device=device)
        for name, value in (variables or {}).items():
            if value is not None:
                recursive_setattr(model, f"{name}.data", value.data)
    except (ValueError, TypeError, KeyError, AttributeError, AssertionError, RuntimeError) as exc:
        # The constructors' own checks (the buffer's alpha, the policy's arguments, the state
        # dicts' shapes), named with the file.
        raise ArchiveError(f"{where} does not build a model: {exc}") from exc
    if model.use_sde:
        model.policy.reset_noise()
    return model


# ---------------------------------------------------------------------------------- buffers
def _tree_state(tree: Any) -> dict[str, Any]:
    sum_tree, min_tree = tree.to_numpy()
    return {
        "capacity": int(tree.capacity),
        "seed": int(tree.seed),
        "sample_calls": int(tree.sample_calls),
        "sum_tree": np.array(sum_tree, dtype=np.float64),
        "min_tree": np.array(min_tree, dtype=np.float64),
        "max_value": np.array([tree.max_value_host()], dtype=np.float64),
    }


def _restore_tree(buffer: Any, state: dict[str, Any], where: str) -> Any:
    """The buffer's tree (of its device's backend) holding ``state``."""
    tree = buffer._make_tree(int(state["capacity"]), int(state["seed"]))  # noqa: SLF001
    n = 2 * tree.pow2
    for key in ("sum_tree", "min_tree"):
        if np.shape(state[key]) != (n,):
            raise ArchiveError(
                f"{where}: {key} has shape {np.shape(state[key])}; a tree of capacity "
                f"{state['capacity']} has {n} nodes"
            )
    if tree.backend == "cuda":
        tree.__setstate__({**state, "device": tree.device})
    else:
        tree.sum_tree[:] = state["sum_tree"]
        tree.min_tree[:] = state["min_tree"]
        tree.max_value[:] = state["max_value"]
        tree.sample_calls = int(state["sample_calls"])
    return tree


def save_replay_buffer_file(buffer: Any, path: str | os.PathLike[str] | io.BufferedIOBase) -> None:
    """Write ``buffer`` (an SB3 ``ReplayBuffer`` or subclass of the project or SB3) as arrays and
    JSON; a path without a suffix gets ``.rb.zip``; a folder is refused.

    :raises TypeError: for a buffer holding something the format cannot (a ``lambda`` beta).
    """
    dest = _writable_path(path, BUFFER_SUFFIX)
    state = dict(buffer.__getstate__())
    tree = state.pop("tree", None)
    state.pop("_step_store", None)  # made anew on loading
    arrays: dict[str, th.Tensor] = {}
    cls_name = _class_name(type(buffer))
    encoded = {}
    for name, value in [("class", type(buffer)), *state.items()]:
        try:
            encoded[name] = encode(value, arrays)
        except UnencodableValue as exc:
            raise TypeError(
                f"the replay buffer ({type(buffer).__name__}) cannot be saved as arrays and "
                f"JSON: its {name!r} is a {exc} (a beta schedule must be a float or agents' "
                "LinearBetaSchedule)"
            ) from exc
    del encoded["class"]  # only checked: load imports it by name
    tree_encoded = None if tree is None else encode(_tree_state(tree), arrays)
    manifest = {
        "class": cls_name,
        "n_envs": int(buffer.n_envs),
        "state": encoded,
        "tree": tree_encoded,
    }
    write_archive(dest, "replay-buffer", manifest, {ARRAYS: tensors_to_bytes(arrays)})


def load_replay_buffer_file(
    model: Any, path: str | os.PathLike[str] | io.BufferedIOBase, allow_pickle: bool
) -> Any:
    """The replay buffer in ``path``, on ``model.device``, checked against ``model``'s number of
    envs and spaces before anything is built.

    :raises PickleRefusedError: for a pickled buffer without ``allow_pickle``.
    :raises ArchiveError: for a damaged file or one that does not fit ``model``.
    """
    file = _readable(path, BUFFER_SUFFIX)
    where = repr(source_name(file))
    if allow_pickle and sniff(file) == "pickle":
        try:
            if isinstance(file, pathlib.Path):
                with open(file, "rb") as fh:
                    buffer = pickle.load(fh)  # noqa: S301 (the caller opted in)
            else:
                buffer = pickle.load(file)  # noqa: S301
        except (pickle.UnpicklingError, EOFError, AttributeError, ImportError) as exc:
            raise ArchiveError(f"{where} is a damaged or truncated pickle: {exc!r}") from exc
    else:
        manifest, members = read_archive(file, "replay-buffer", BUFFER_PICKLE_HINT)
        buffer = _buffer_from_archive(model, manifest, members, where)
    if not isinstance(buffer, ReplayBuffer):
        raise ArchiveError(f"{where} holds a {type(buffer).__name__}, not a replay buffer")
    _check_fits(model, buffer.n_envs, buffer.observation_space, buffer.action_space, where)
    return buffer


def _check_fits(model: Any, n_envs: int, obs_space: Any, action_space: Any, where: str) -> None:
    if not _is_int(n_envs) or n_envs < 1:
        raise ArchiveError(
            f"{where}: the buffer's n_envs = {_short(n_envs)} is invalid: allowed is an int >= 1"
        )
    if model.env is not None and int(n_envs) != int(model.n_envs):
        raise ArchiveError(
            f"{where} was saved by a model with n_envs = {n_envs}; this model steps "
            f"{model.n_envs} envs: load it into a model with {n_envs} envs"
        )
    for what, saved, mine in (
        ("observation", obs_space, model.observation_space),
        ("action", action_space, model.action_space),
    ):
        if saved != mine:
            raise ArchiveError(
                f"{where} holds transitions of the {what} space {saved}; this model's is {mine}"
            )


def _buffer_from_archive(
    model: Any, manifest: dict[str, Any], members: dict[str, bytes], where: str
) -> Any:
    try:
        cls = _import_class(manifest_field(manifest, "class", str, where), (ReplayBuffer,))
    except UnencodableValue as exc:
        raise ArchiveError(f"{where}: {exc}") from exc
    saved = manifest_field(manifest, "state", dict, where)
    device = get_device(model.device)
    arrays = archive_member(members, ARRAYS, where)
    arrays = tensors_from_bytes(arrays, f"{where} member {ARRAYS!r}", device)
    if not isinstance(arrays, dict):
        raise ArchiveError(f"{where} member {ARRAYS!r} holds no dict of arrays")
    try:
        state = {name: decode(value, arrays) for name, value in saved.items()}
        tree_state = None if manifest.get("tree") is None else decode(manifest["tree"], arrays)
    except (ArchiveError, KeyError) as exc:
        raise ArchiveError(f"{where}: {exc}") from exc
    _check_fits(
        model,
        state.get("n_envs", -1),
        state.get("observation_space"),
        state.get("action_space"),
        where,
    )
    check_buffer_state(state, tree_state, where)
    state["device"] = device
    buffer = cls.__new__(cls)
    buffer.__dict__["device"] = device
    if tree_state is not None:
        state["tree"] = _restore_tree(buffer, tree_state, where)
    setstate = getattr(buffer, "__setstate__", None)  # PrioritizedReplayBuffer rebuilds a kernel
    if setstate is not None:
        setstate(state)
    else:
        buffer.__dict__.update(state)
    return buffer


def _host(x: Any) -> np.ndarray:
    return x.detach().cpu().numpy() if isinstance(x, th.Tensor) else np.asarray(x)


def check_buffer_state(state: dict[str, Any], tree: dict[str, Any] | None, where: str) -> None:
    """Raise :class:`ArchiveError` naming ``where`` and the first field of a replay buffer's
    saved state that the buffer could not have written: sizes and position out of range,
    storage of another shape, out-of-range actions, non-finite rewards or
    observations, done flags other than 0 and 1, and (with ``tree``) priorities < 0, NaN,
    zero on a written slot, non-zero on an empty one, or inner nodes that are not the sums and
    minima of their children."""

    def bad(field: str, allowed: str) -> ArchiveError:
        return ArchiveError(
            f"{where}: the buffer's {field} = {_short(state.get(field, '?'))} is invalid: "
            f"allowed is {allowed}"
        )

    rows, n_envs, pos, full = (state.get(k) for k in ("buffer_size", "n_envs", "pos", "full"))
    if not _is_int(rows) or rows < 1:
        raise bad("buffer_size", "an int >= 1")
    if not _is_int(n_envs) or n_envs < 1:
        raise bad("n_envs", "an int >= 1")
    if not isinstance(full, bool):
        raise bad("full", "True or False")
    if not _is_int(pos) or not 0 <= pos < rows:
        raise bad("pos", f"an int in [0, {rows})")
    obs_space, action_space = state.get("observation_space"), state.get("action_space")
    obs_shape = tuple(getattr(obs_space, "shape", None) or ())
    used = rows if full else pos
    # One reward a transition, or one a branch of a MultiDiscrete action (branch_rewards).
    reward_dim = state.get("reward_dim", 1)
    branches = len(action_space.nvec) if isinstance(action_space, spaces.MultiDiscrete) else 1
    if not _is_int(reward_dim) or reward_dim not in (1, branches):
        raise bad("reward_dim", f"1 or {branches} (the action space's branches)")
    shapes = {
        "observations": (rows, n_envs, *obs_shape),
        "next_observations": (rows, n_envs, *obs_shape),
        "actions": (rows, n_envs, state.get("action_dim", 1)),
        "rewards": (rows, n_envs) if reward_dim == 1 else (rows, n_envs, reward_dim),
        "dones": (rows, n_envs),
        "timeouts": (rows, n_envs),
    }
    for field, shape in shapes.items():
        value = state.get(field)
        if field == "next_observations" and value is None and state.get("optimize_memory_usage"):
            continue
        if not isinstance(value, th.Tensor | np.ndarray) or tuple(value.shape) != shape:
            raise ArchiveError(
                f"{where}: the buffer's {field} has shape {tuple(getattr(value, 'shape', ()))}; "
                f"a buffer of {rows} rows and {n_envs} envs stores {shape}"
            )
        # Checked where the storage lives (a GPU buffer is not copied to the host for this).
        written = th.as_tensor(value[:used])
        if (
            field in ("observations", "next_observations", "rewards")
            and written.is_floating_point()
        ):
            if not bool(th.isfinite(written).all()):
                raise ArchiveError(f"{where}: the buffer's {field} hold NaN or infinite values")
        if field in ("dones", "timeouts") and not bool(((written == 0) | (written == 1)).all()):
            raise ArchiveError(f"{where}: the buffer's {field} hold values other than 0 and 1")
        if field == "actions" and isinstance(action_space, spaces.Discrete) and written.numel():
            lo, hi = int(action_space.start), int(action_space.start + action_space.n)
            whole = not written.is_floating_point() or bool((written == written.round()).all())
            if not (whole and int(written.min()) >= lo and int(written.max()) < hi):
                raise ArchiveError(
                    f"{where}: the buffer's actions hold values outside {lo}..{hi - 1}, the "
                    "actions of its action space"
                )
        if (
            field == "actions"
            and isinstance(action_space, spaces.MultiDiscrete)
            and written.numel()
        ):
            _check_multidiscrete_actions(written, action_space, where)
    if tree is not None:
        _check_tree(tree, rows * n_envs, used * n_envs, where)


def _check_multidiscrete_actions(
    written: th.Tensor, space: spaces.MultiDiscrete, where: str
) -> None:
    """Raise :class:`ArchiveError` where a buffer's ``[rows, n_envs, K]`` actions hold a value
    outside ``start[d]..start[d] + nvec[d] - 1`` in some dimension ``d`` (or a fraction)."""
    lo = th.as_tensor(np.asarray(space.start, dtype=np.int64).reshape(-1))
    hi = lo + th.as_tensor(np.asarray(space.nvec, dtype=np.int64).reshape(-1))
    values = written.reshape(-1, lo.numel())
    whole = not values.is_floating_point() or bool((values == values.round()).all())
    low, high = values.min(dim=0).values.cpu(), values.max(dim=0).values.cpu()
    bad = [d for d in range(lo.numel()) if not (low[d] >= lo[d] and high[d] < hi[d])]
    if not whole or bad:
        d = bad[0] if bad else 0
        raise ArchiveError(
            f"{where}: the buffer's actions hold values outside {int(lo[d])}..{int(hi[d]) - 1} "
            f"in dimension {d} (or fractions), the actions of its action space {space}"
        )


def _check_tree(tree: dict[str, Any], capacity: int, written: int, where: str) -> None:
    saved = tree.get("capacity") if isinstance(tree, dict) else None
    if saved != capacity:
        raise ArchiveError(
            f"{where}: the buffer's tree has capacity {_short(saved)}; its storage has "
            f"{capacity} slots"
        )
    for key in ("seed", "sample_calls"):
        if not _is_int(tree.get(key, None)) or (key == "sample_calls" and tree[key] < 0):
            raise ArchiveError(
                f"{where}: the tree's {key!r} = {_short(tree.get(key, 'missing'))} is invalid: "
                "allowed is an int" + (" >= 0" if key == "sample_calls" else "")
            )
    pow2 = 1 << max(capacity - 1, 0).bit_length()
    sums, mins, top = (_host(tree.get(k)) for k in ("sum_tree", "min_tree", "max_value"))
    for key, value in (("sum_tree", sums), ("min_tree", mins)):
        if value.shape != (2 * pow2,) or value.dtype != np.float64:
            raise ArchiveError(
                f"{where}: the tree's {key} has shape {value.shape} and dtype {value.dtype}; a "
                f"tree of capacity {capacity} has {2 * pow2} float64 nodes"
            )
    leaves = sums[pow2 : pow2 + capacity]
    if not (np.isfinite(leaves).all() and (leaves >= 0).all()):
        raise ArchiveError(f"{where}: the tree's priorities hold negative, NaN or infinite values")
    if not (leaves[:written] > 0).all() or (sums[pow2 + written :] != 0).any():
        raise ArchiveError(
            f"{where}: the tree's priorities are 0 on written slots or non-zero on empty ones "
            f"(the buffer has {written} written slots)"
        )
    if top.shape != (1,) or not (np.isfinite(top).all() and top[0] > 0):
        raise ArchiveError(f"{where}: the tree's max_value {_short(top)} is not a number > 0")
    level_sums, level_mins = sums[pow2:], np.where(sums[pow2:] > 0, sums[pow2:], np.inf)
    if not np.array_equal(mins[pow2:], level_mins):
        raise ArchiveError(f"{where}: the tree's min_tree leaves differ from its priorities")
    start = pow2
    while start > 1:
        level_sums = level_sums[0::2] + level_sums[1::2]
        level_mins = np.minimum(level_mins[0::2], level_mins[1::2])
        start //= 2
        if not np.allclose(sums[start : 2 * start], level_sums, rtol=1e-9, atol=0.0) or not (
            np.array_equal(mins[start : 2 * start], level_mins)
        ):
            raise ArchiveError(
                f"{where}: the tree's inner nodes are not the sums and minima of their children"
            )


# What load(for_inference=True) sets over a file's attributes: what only training needs.
INFERENCE_ATTRIBUTES: dict[str, Any] = {
    "buffer_size": 1,
    "_last_obs": None,
    "_last_original_obs": None,
    "_last_episode_starts": None,
}

SelfFiles = TypeVar("SelfFiles", bound="WeightsOnlyFiles")


class WeightsOnlyFiles:
    """Base class before an SB3 algorithm (``class GpuDQN(WeightsOnlyFiles, ..., DQN)``): its
    ``save`` / ``load`` and ``save_replay_buffer`` / ``load_replay_buffer`` use the weights-only
    format; SB3's pickle-based files load only with ``allow_pickle=True``."""

    def extra_saved_attributes(self) -> tuple[str, ...]:
        """Attributes a caller may set on the model for its file beyond the constructor's."""
        return ()

    @classmethod
    def check_env_spaces(cls, env: Any, observation_space: Any, action_space: Any) -> None:
        """Raise ValueError where ``env`` (an SB3 ``VecEnv``, given to :meth:`load`) has other
        spaces than the file's: SB3's ``check_for_correct_spaces`` (subclasses word it)."""
        check_for_correct_spaces(env, observation_space, action_space)

    def check_loaded_attributes(
        self, data: dict[str, Any], params: dict[str, Any], where: str
    ) -> None:
        """Raise :class:`~agents.files.safe_archive.ArchiveError` naming ``where`` and the first
        attribute of ``data`` (a file's, with load's keyword arguments) this freshly
        constructed model would refuse; called before anything is allocated.

        :param params: The file's state dicts (subclasses compare network sizes with them).
        """
        check_off_policy_attributes(self, data, where)

    def save(
        self,
        path: str | os.PathLike[str] | io.BufferedIOBase,
        exclude: Iterable[str] | None = None,
        include: Iterable[str] | None = None,
    ) -> None:
        """Save the model in the weights-only format (:mod:`agents.files.model_files`), atomically: a
        save that fails leaves the old file intact.

        SB3's arguments and habits: a path without a suffix gets ``.zip``; ``exclude`` and
        ``include`` name attributes as in SB3. The file holds state dicts (read back with
        ``torch.load(weights_only=True)``) and JSON, never a pickle, and a SHA-256 of each
        part. A folder as ``path`` is refused. Data-parallel: rank 0 writes, the other ranks
        return without writing.
        """
        dp = getattr(self, "data_parallel", None)
        if dp is not None and not dp.is_main:
            return
        save_model_file(self, path, exclude=exclude, include=include)

    def save_replay_buffer(self, path: str | os.PathLike[str] | io.BufferedIOBase) -> None:
        """Save the replay buffer as arrays and JSON with checksums (:mod:`agents.files.model_files`),
        atomically; a path without a suffix gets ``.rb.zip``; a folder is refused."""
        assert self.replay_buffer is not None, "the replay buffer is not set up"
        save_replay_buffer_file(self.replay_buffer, path)

    def load_replay_buffer(
        self,
        path: str | os.PathLike[str] | io.BufferedIOBase,
        truncate_last_traj: bool = True,
        allow_pickle: bool = False,
    ) -> None:
        """Load a replay buffer saved by :meth:`save_replay_buffer` onto this model's device.

        :param truncate_last_traj: SB3's argument (``HerReplayBuffer`` only; unused here).
        :param allow_pickle: Also read a pickled buffer (SB3's format). Unpickling runs any code
            the file holds: only for files from a source you trust.
        :raises FileNotFoundError: naming ``path``.
        :raises agents.files.safe_archive.PickleRefusedError: for a pickle without ``allow_pickle``.
        :raises agents.files.safe_archive.ArchiveError: for a damaged file, or one saved with another
            number of envs or other spaces than this model's, naming the file.
        """
        self.replay_buffer = load_replay_buffer_file(self, path, allow_pickle=allow_pickle)

    @classmethod
    def load(  # type: ignore[override]
        cls: type[SelfFiles],
        path: str | os.PathLike[str] | io.BufferedIOBase,
        env: Any = None,
        device: th.device | str = "auto",
        custom_objects: dict[str, Any] | None = None,
        print_system_info: bool = False,
        force_reset: bool = True,
        allow_pickle: bool = False,
        for_inference: bool = False,
        **kwargs: Any,
    ) -> SelfFiles:
        """Load a model saved by :meth:`save`.

        SB3's arguments: a path without a suffix is also looked up with ``.zip``;
        ``custom_objects`` replaces saved attributes (and supplies those the weights-only
        format could not hold, which the error lists); ``force_reset`` discards the saved last
        observation when ``env`` is given.

        :param allow_pickle: Also read SB3's own zips, whose ``data`` member is a cloudpickle:
            unpickling runs any code the file holds, so only for files from a source you trust.
            Without it such a file raises :class:`~agents.files.safe_archive.PickleRefusedError`.
        :param for_inference: The model only acts (``predict``, backtests): its replay buffer has
            one slot instead of the file's ``buffer_size``, the saved last observations are
            dropped and, without ``env``, it is built for one env (a file's sizes then cost no
            memory beyond its weights); ``kwargs`` still override. Not for ``learn``.
        :raises FileNotFoundError: naming ``path`` as given.
        :raises agents.files.safe_archive.ArchiveError: for a damaged, truncated or empty file,
            naming it.
        """
        if for_inference:
            acting = dict(INFERENCE_ATTRIBUTES, **({} if env is not None else {"n_envs": 1}))
            kwargs = {**acting, **kwargs}
        data, params, variables, sb3_zip = load_model_files(path, custom_objects, allow_pickle)
        if sb3_zip:
            model = super().load(
                path,
                env=env,
                device=device,
                custom_objects=custom_objects,
                print_system_info=print_system_info,
                force_reset=force_reset,
                **kwargs,
            )
        else:
            if print_system_info:
                from stable_baselines3.common.utils import get_system_info

                get_system_info()
            model = build_loaded_model(
                cls, data, params, variables, env, device, force_reset, kwargs, _where(path)
            )
        return model
