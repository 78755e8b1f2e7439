"""The files of :class:`~agents.GpuDQN`: what it saves beyond SB3's attributes, and checkpoints.

:class:`~agents.files.model_files.WeightsOnlyFiles` writes and reads the weights-only format;
this mixin adds what belongs to GpuDQN: the captured step's Adam saved as the plain Adam it
replaced, the curiosity model and its optimizer among the state dicts, the curiosity weights put
back into the env on load, the attributes that are rebuilt rather than saved, and
:meth:`~GpuDQNFiles.save_checkpoint` / :meth:`~GpuDQNFiles.load_checkpoint`
(:mod:`agents.files.checkpoint`).
"""

from __future__ import annotations

import inspect
import io
import math
import os
import pathlib
from typing import Any, TypeVar

import numpy as np
import torch as th
from gymnasium import spaces
from gymnasium.vector import VectorEnv as GymVectorEnv
from stable_baselines3.common.buffers import ReplayBuffer
from stable_baselines3.common.type_aliases import GymEnv, TrainFreq

from agents.algorithm.curiosity import check_positive_ints
from agents.algorithm.hyperparameters import (
    ROLLOUT_KERNELS,
    check_choice,
    check_dqn_hyperparameters,
    check_flag,
)
from agents.algorithm.policies import DuelingDQNPolicy, resolve_dueling_arch
from agents.algorithm.saved_env import EnvSetup, check_spaces, env_setup, portfolio_env_setup
from agents.files.model_files import WeightsOnlyFiles
from agents.files.safe_archive import ArchiveError
from agents.files.saved_inputs import InputSelection
from gpu_runtime.precision import check_precision
from gpu_trading_env.core.config import EnvConfig
from gpu_trading_env.core.constants import N_PORTFOLIO_FEATURES
from gpu_trading_env.data.market_data import MarketData
from gpu_trading_env.vector_env import TradingVectorEnv

__all__ = ["GpuDQNFiles", "check_dqn_file_attributes", "memory_limit_bytes"]

# Bytes per stored transition beyond its two observations: action, reward, done, timeout, and
# the sum and min trees' two float64 nodes per leaf (their size is rounded up to a power of 2).
TRANSITION_OVERHEAD_BYTES = 8 + 3 * 4 + 2 * 2 * 2 * 8
# States of a saved regime model (the input selection fits 3).
MAX_REGIME_STATES = 16
DQN_NAMES = (
    "learning_rate", "gamma", "tau", "exploration_fraction", "exploration_initial_eps",
    "exploration_final_eps", "max_grad_norm", "train_freq", "gradient_steps", "batch_size",
    "buffer_size", "learning_starts", "target_update_interval", "reward_scale",
)  # fmt: skip


def memory_limit_bytes(device: Any) -> int:
    """The memory of ``device``: a CUDA device's total, else the host's physical memory."""
    device = th.device(device)
    if device.type == "cuda":
        return int(th.cuda.get_device_properties(device).total_memory)
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def _min_chain_weights(widths: list[int]) -> int:
    """The weights of a chain of linear layers ``widths[0] -> widths[1] -> ...`` (no biases)."""
    return sum(a * b for a, b in zip(widths, widths[1:], strict=False))


def _network_weights(policy_class: type, obs_dim: int, n_actions: int, net_arch: Any) -> int:
    """A lower bound of the weights of one Q-network of ``policy_class`` with ``net_arch``."""
    if issubclass(policy_class, DuelingDQNPolicy):
        arch = resolve_dueling_arch(net_arch)
        trunk = arch["shared"][-1] if arch["shared"] else obs_dim
        return (
            _min_chain_weights([obs_dim, *arch["shared"]])
            + _min_chain_weights([trunk, *arch["value"], 1])
            + _min_chain_weights([trunk, *arch["advantage"], n_actions])
        )
    widths = [64, 64] if net_arch is None else list(net_arch)
    if any(isinstance(w, bool) or not isinstance(w, int) or w < 1 for w in widths):
        raise ValueError(f"net_arch = {net_arch!r} is invalid: allowed is a list of ints >= 1")
    return _min_chain_weights([obs_dim, *widths, n_actions])


def _numel(state_dict: Any) -> int:
    if not isinstance(state_dict, dict):
        return 0
    return sum(int(v.numel()) for v in state_dict.values() if isinstance(v, th.Tensor))


def check_dqn_file_attributes(
    data: dict[str, Any], params: dict[str, Any], device: Any, where: str
) -> None:
    """Raise :class:`~agents.files.safe_archive.ArchiveError` naming ``where`` and the first
    attribute of a GpuDQN or PrioritizedDQN file (with load's keyword arguments, over the fresh
    model's defaults) that GpuDQN's constructor would refuse, or whose sizes do not fit: a
    network larger than the weights the file holds, a replay buffer larger than ``device``'s
    memory, a curiosity model larger than its saved weights. Called before anything is
    allocated."""
    try:
        values = {name: data.get(name, 1.0) for name in DQN_NAMES}  # reward_scale: GpuDQN's
        freq = values["train_freq"]
        if isinstance(freq, TrainFreq):
            values["train_freq"] = (freq.frequency, getattr(freq.unit, "value", freq.unit))
        check_dqn_hyperparameters(**values)
        check_positive_ints(
            **{
                k: data[k]
                for k in (
                    "curiosity_train_freq",
                    "curiosity_batch_size",
                    "curiosity_gradient_steps",
                )
                if k in data
            }
        )
        if "curiosity_learning_rate" in data and not (
            math.isfinite(float(data["curiosity_learning_rate"]))
            and data["curiosity_learning_rate"] > 0
        ):
            raise ValueError(
                f"curiosity_learning_rate = {data['curiosity_learning_rate']!r} is invalid: "
                "allowed is a finite number > 0"
            )
        for name in ("rollout_kernel",):
            if name in data:
                check_choice(name, data[name], ROLLOUT_KERNELS)
        if "train_precision" in data:
            check_precision("train_precision", data["train_precision"], allow_auto=True)
        for name in (
            "compile_train",
            "captured_train",
            "fused_rollout",
            "double_q",
            "curiosity",
            "branch_rewards",
        ):
            if name in data:
                check_flag(name, data[name])
        _check_sizes(data, params, device)
    except (ValueError, TypeError) as exc:
        if isinstance(exc, ArchiveError):
            raise
        raise ArchiveError(f"{where}: {exc}") from None
    _check_input_selection(data.get("input_selection"), data["observation_space"], where)
    extra = data.get("extra_features", [])
    if not isinstance(extra, list) or not all(isinstance(c, str) and c for c in extra):
        raise ArchiveError(
            f"{where}, attribute 'extra_features' = {extra!r} is invalid: allowed is a list of "
            "column names"
        )
    _check_env_config(data.get("_env_config"), data["action_space"], where)
    _check_portfolio_setup(data.get("portfolio_setup"), data["action_space"], where)


def _check_portfolio_setup(setup: Any, action_space: Any, where: str) -> None:
    """The saved ``portfolio_setup``: None, or a PortfolioConfig's fields, K instrument names
    and the kept columns (None or names), of the model's K branches of n_levels actions."""
    if setup is None:
        return
    from gpu_trading_env.core.portfolio_config import PortfolioConfig

    try:
        config = PortfolioConfig(**setup["env"])
        names, kept = setup["instruments"], setup["kept"]
        if not all(isinstance(n, str) for n in [*names, *(kept or [])]):
            raise ValueError("instruments and kept columns must be names")
        strays = [k for k in kept or [] if k.partition(":")[0] not in names]
        if strays:
            raise ValueError(f"kept columns {strays} of no instrument of {names}")
    except (KeyError, TypeError, ValueError) as exc:
        raise ArchiveError(
            f"{where}, attribute 'portfolio_setup' (the portfolio env): {exc}"
        ) from None
    nvec = tuple(int(n) for n in getattr(action_space, "nvec", ()))
    if nvec != (config.n_levels,) * len(names):
        raise ArchiveError(
            f"{where}, attribute 'portfolio_setup' (the portfolio env) has {len(names)} "
            f"instruments of {config.n_levels} levels; the model's action space is {action_space}"
        )


def _check_env_config(fields: Any, action_space: Any, where: str) -> None:
    """The saved ``_env_config``: None, or every field of an EnvConfig the constructor accepts,
    of as many actions as the model's action space."""
    if fields is None:
        return
    try:
        config = EnvConfig.from_dict(fields)
    except (ValueError, TypeError) as exc:
        raise ArchiveError(
            f"{where}, attribute '_env_config' (the env configuration): {exc}"
        ) from None
    n = int(getattr(action_space, "n", -1))
    if config.n_actions != n:
        raise ArchiveError(
            f"{where}, attribute '_env_config' (the env configuration) has {config.n_actions} "
            f"actions (exposure levels x order types x sub-actions); the model's action space "
            f"has {n}"
        )


def _check_input_selection(selection: Any, observation_space: Any, where: str) -> None:
    """A pipeline's ``input_selection``: a dict whose regime model (if any) has at most
    :data:`MAX_REGIME_STATES` states and parameters of the sizes of its state count, that
    :meth:`InputSelection.from_dict` reads, of as many inputs as the observations have."""
    if selection is None:
        return
    if not isinstance(selection, dict):
        raise ArchiveError(f"{where}: attribute 'input_selection' is not a dict")
    regime = selection.get("regime")
    if regime is not None:
        _check_regime(regime, where)
    try:
        chosen = InputSelection.from_dict(selection)
    except (ValueError, TypeError) as exc:
        raise ArchiveError(f"{where}, attribute 'input_selection': {exc}") from None
    width = len(chosen.input_names) + N_PORTFOLIO_FEATURES
    if tuple(observation_space.shape) != (width,):
        raise ArchiveError(
            f"{where}, attribute 'input_selection' gives observations of shape ({width},) "
            f"({len(chosen.input_names)} inputs and {N_PORTFOLIO_FEATURES} portfolio values); "
            f"the model's observation space has shape {tuple(observation_space.shape)}"
        )


def _check_regime(regime: Any, where: str) -> None:
    """A saved regime model of at most :data:`MAX_REGIME_STATES` states, its parameters of the
    sizes of its state count (checked before its forward filter is built)."""
    try:
        k = len(regime["mus"])
        sizes = {
            "sigmas": len(regime["sigmas"]),
            "initial": len(regime["initial"]),
            "transition": len(regime["transition"]),
        }
        rows = {len(row) for row in regime["transition"]}
    except (KeyError, TypeError) as exc:
        raise ArchiveError(f"{where}: input_selection's regime is malformed: {exc!r}") from None
    if not 1 <= k <= MAX_REGIME_STATES:
        raise ArchiveError(
            f"{where}: input_selection's regime model has {k} states; allowed are 1 to "
            f"{MAX_REGIME_STATES} (its forward filter needs memory in the square of the count)"
        )
    if set(sizes.values()) != {k} or rows != {k}:
        raise ArchiveError(
            f"{where}: input_selection's regime model has {k} means but parameters of sizes "
            f"{sizes} (transition rows of {sorted(rows)})"
        )


def _check_sizes(data: dict[str, Any], params: dict[str, Any], device: Any) -> None:
    obs_space, action_space = data["observation_space"], data["action_space"]
    if not isinstance(obs_space, spaces.Box) or not isinstance(
        action_space, spaces.Discrete | spaces.MultiDiscrete
    ):
        raise ValueError(
            f"observation_space {obs_space} and action_space {action_space}: allowed are a Box "
            "and a Discrete or MultiDiscrete space"
        )
    obs_dim = int(np.prod(obs_space.shape))
    # A branching network's K heads of L outputs hold at least the weights of one head of K * L.
    n_actions = (
        int(action_space.n)
        if isinstance(action_space, spaces.Discrete)
        else int(np.sum(action_space.nvec))
    )
    policy_kwargs = data.get("policy_kwargs") or {}
    if not isinstance(policy_kwargs, dict):
        raise ValueError(f"policy_kwargs = {policy_kwargs!r} is invalid: allowed is a dict")
    needed = _network_weights(
        data["policy_class"], obs_dim, n_actions, policy_kwargs.get("net_arch")
    )
    held = _numel(params.get("policy"))
    if 2 * needed > held:  # the Q-network and its target
        raise ValueError(
            f"policy_kwargs net_arch = {policy_kwargs.get('net_arch')!r} with {obs_dim} inputs "
            f"and {n_actions} actions needs at least {2 * needed} weights (network and target); "
            f"the file's policy holds {held}"
        )
    n_envs = int(data.get("n_envs", 1))
    slots = max(int(data["buffer_size"]) // n_envs, 1) * n_envs
    item = np.dtype(obs_space.dtype).itemsize
    buffer_bytes = slots * (2 * obs_dim * item + TRANSITION_OVERHEAD_BYTES)
    limit = memory_limit_bytes(device)
    if buffer_bytes > limit:
        raise ValueError(
            f"buffer_size = {data['buffer_size']!r} with {n_envs} envs and {obs_dim} observation "
            f"values needs {buffer_bytes} bytes of replay buffer; the device {device} has "
            f"{limit} (pass buffer_size= to load for a smaller one)"
        )
    buffer_class = data.get("replay_buffer_class")
    if not (isinstance(buffer_class, type) and issubclass(buffer_class, ReplayBuffer)):
        raise ValueError(f"replay_buffer_class = {buffer_class!r} is not a replay buffer class")
    kwargs = data.get("replay_buffer_kwargs") or {}
    accepted = set(inspect.signature(buffer_class.__init__).parameters) - {
        "self", "buffer_size", "observation_space", "action_space", "device", "n_envs",
        "optimize_memory_usage",
    }  # fmt: skip
    if not isinstance(kwargs, dict) or set(kwargs) - accepted:
        raise ValueError(
            f"replay_buffer_kwargs = {kwargs!r} is invalid: allowed are the keys {sorted(accepted)}"
        )
    dims = data.get("_curiosity_dims")
    if data.get("curiosity") and dims is not None:
        if not isinstance(dims, dict) or set(dims) != {"state_dims", "n_categories", "hidden"}:
            raise ValueError(f"_curiosity_dims = {dims!r} is invalid")
        check_positive_ints(**dims)
        held = _numel(params.get("curiosity_model"))
        # fc1: (state_dims + n_categories) -> hidden, fc2: hidden -> state_dims (no biases).
        needed = dims["hidden"] * (2 * dims["state_dims"] + dims["n_categories"])
        if needed > held:
            raise ValueError(
                f"_curiosity_dims = {dims!r} needs {needed} weights or more; the file's "
                f"curiosity model holds {held}"
            )


SelfGpuDQN = TypeVar("SelfGpuDQN", bound="GpuDQNFiles")


class GpuDQNFiles(WeightsOnlyFiles):
    """Mixin of :class:`~agents.GpuDQN` (before SB3's ``DQN`` in its bases): its saves and loads.

    Calls the host's ``_restore_curiosity_weights`` after a load.
    """

    _captured_step: Any
    curiosity_model: Any
    _total_timesteps: int
    num_timesteps: int

    def extra_saved_attributes(self) -> tuple[str, ...]:
        """``input_selection``: the inputs a pipeline chose for the network (a dict);
        ``extra_features``: the data's own columns beside the built-in features (a list);
        ``portfolio_setup``: a portfolio model's env (``saved_env.portfolio_setup_of``)."""
        return ("input_selection", "extra_features", "portfolio_setup")

    # ------------------------------------------------------------------ the env it acts on
    @property
    def env_config(self) -> EnvConfig | None:
        """The EnvConfig of the trading env the model was built on or last learned on, saved
        with it (as :meth:`EnvConfig.to_dict`); ``None`` where it was not a
        :class:`~gpu_trading_env.TradingVectorEnv` or the file was saved without one. A
        pipeline that deploys a baseline sets the config the baseline was evaluated in."""
        fields = getattr(self, "_env_config", None)
        return None if fields is None else EnvConfig.from_dict(fields)

    @env_config.setter
    def env_config(self, config: EnvConfig | None) -> None:
        if config is not None and not isinstance(config, EnvConfig):
            raise TypeError(
                f"env_config of type {type(config).__name__} is invalid: allowed is EnvConfig "
                "or None"
            )
        self._env_config = None if config is None else config.to_dict()

    def env_setup(
        self,
        data: MarketData | str | os.PathLike[str],
        config: EnvConfig | None = None,
        **overrides: Any,
    ) -> EnvSetup:
        """The data and config of the env this model acts on (what :meth:`make_env` builds
        from): ``data`` (MarketData or a CSV/Parquet file) with the saved input selection
        applied, and the saved :attr:`env_config` with ``overrides`` of its fields. A file is
        read with the extra feature columns the model was trained on (``extra_features``);
        MarketData must hold them.

        :param config: the EnvConfig to use instead of the saved one (a model saved without
            one needs it: the settings it was trained with).
        :raises ValueError: one line, where the model carries no env configuration and
            ``config`` is None, or the data or overrides give other spaces than the model's.
        """
        base = self.env_config if config is None else config
        if base is None:
            raise ValueError(
                f"this {type(self).__name__} carries no env configuration (its file was saved "
                "without one, or it was trained on another env than a TradingVectorEnv): pass "
                "the EnvConfig it was trained with, model.make_env(data, config=EnvConfig(...)), "
                "or build the env yourself with gym.make_vec('GpuTrading-v0', data=..., "
                "config=...) on data given its inputs (agents.files.saved_inputs.apply_inputs)"
            )
        return env_setup(
            data,
            base,
            getattr(self, "input_selection", None),
            overrides,
            self.observation_space,
            self.action_space,
            extra_features=getattr(self, "extra_features", None),
        )

    def make_env(
        self,
        data: Any,
        num_envs: int = 1,
        device: str = "cpu",
        config: EnvConfig | None = None,
        **overrides: Any,
    ) -> TradingVectorEnv:
        """The env this model acts on: a :class:`~gpu_trading_env.TradingVectorEnv` of
        ``num_envs`` envs on ``device`` over ``data`` (MarketData or a CSV/Parquet file of
        bars) with the saved input selection applied, in the saved :attr:`env_config` with
        ``overrides`` of its fields (e.g. ``autoreset_mode="same_step"``). Its observations go
        to :meth:`predict` as they are; the wrappers the model trained through, if any, are
        not part of it.

        ``model = GpuDQN.load("run/model.zip"); env = model.make_env("bars.csv");
        obs, _ = env.reset(seed=0); actions, _ = model.predict(obs, deterministic=True)``

        A portfolio model (one trained on ``GpuPortfolio-v0``) gets a
        :class:`~gpu_trading_env.portfolio_env.PortfolioVectorEnv` of its saved PortfolioConfig
        over ``data``: its K instruments' files (a list, in the model's order), MarketData or
        PortfolioData, the columns it does not see set to zero.

        :param config: as in :meth:`env_setup` (a single-instrument model's).
        :raises ValueError: as :meth:`env_setup`; for a portfolio model, one line naming its
            instruments where ``data`` holds others.
        """
        portfolio = getattr(self, "portfolio_setup", None)
        if portfolio is not None:
            from gpu_trading_env.portfolio_env import PortfolioVectorEnv

            bars, cfg = portfolio_env_setup(data, portfolio, overrides)
            env = PortfolioVectorEnv(num_envs, device=device, data=bars, config=cfg)
            check_spaces(
                env.single_observation_space,
                env.single_action_space,
                self.observation_space,
                self.action_space,
            )
            return env  # type: ignore[return-value]
        if isinstance(data, list | tuple) and len(data) == 1:
            data = data[0]  # one instrument's file, given as the list of K = 1 files
        setup = self.env_setup(data, config, **overrides)
        return TradingVectorEnv(num_envs, device=device, data=setup.data, config=setup.config)

    @classmethod
    def check_env_spaces(cls, env: Any, observation_space: Any, action_space: Any) -> None:
        """An env of other shapes than the model's: one line naming both and pointing to
        :meth:`make_env`; then SB3's own check of the spaces' bounds and dtypes."""
        check_spaces(env.observation_space, env.action_space, observation_space, action_space)
        super().check_env_spaces(env, observation_space, action_space)

    def check_loaded_attributes(
        self, data: dict[str, Any], params: dict[str, Any], where: str
    ) -> None:
        """:meth:`WeightsOnlyFiles.check_loaded_attributes`, then GpuDQN's own options and sizes
        (:func:`check_dqn_file_attributes`)."""
        super().check_loaded_attributes(data, params, where)
        defaults = {k: v for k, v in vars(self).items() if k in DQN_NAMES}
        check_dqn_file_attributes({**defaults, **data}, params, self.device, where)

    def get_parameters(self) -> dict[str, dict]:
        """SB3's parameters; the captured step's Adam is saved as the plain Adam it replaced."""
        params = super().get_parameters()
        step = self._captured_step
        if step is not None and self.policy.optimizer is step.optimizer:
            from agents.algorithm.capturable_adam import plain_optimizer_state

            params["policy.optimizer"] = plain_optimizer_state(
                params["policy.optimizer"], step.plain_flags
            )
        return params

    def load_replay_buffer(
        self,
        path: str | pathlib.Path | io.BufferedIOBase,
        truncate_last_traj: bool = True,
        allow_pickle: bool = False,
    ) -> None:
        """:meth:`WeightsOnlyFiles.load_replay_buffer`; then the saved curiosity weights go back
        into the env."""
        super().load_replay_buffer(path, truncate_last_traj, allow_pickle=allow_pickle)
        self._restore_curiosity_weights()

    @classmethod
    def load(  # type: ignore[override]
        cls: type[SelfGpuDQN],
        path: str | pathlib.Path | io.BufferedIOBase,
        env: GymEnv | GymVectorEnv | None = None,
        device: th.device | str = "auto",
        custom_objects: dict[str, Any] | None = None,
        print_system_info: bool = False,
        force_reset: bool = True,
        allow_pickle: bool = False,
        for_inference: bool = False,
        **kwargs: Any,
    ) -> SelfGpuDQN:
        """:meth:`WeightsOnlyFiles.load`; with ``env`` given, the saved curiosity weights go back
        into it."""
        model = super().load(
            path,
            env=env,
            device=device,
            custom_objects=custom_objects,
            print_system_info=print_system_info,
            force_reset=force_reset,
            allow_pickle=allow_pickle,
            for_inference=for_inference,
            **kwargs,
        )
        model._restore_curiosity_weights()  # noqa: SLF001 (GpuDQN's own step, split out here)
        return model

    def save_checkpoint(self, path: str | pathlib.Path) -> pathlib.Path:
        """Write a checkpoint into the folder ``path`` (:mod:`agents.files.checkpoint`): model, replay
        buffer, env state and every random generator, from which :meth:`load_checkpoint` and
        ``learn(model.remaining_timesteps, reset_num_timesteps=False)`` continue this run as if
        it had not stopped. Call it between ``learn`` calls, or use
        :class:`~agents.files.checkpoint.CheckpointEvery` during one.

        :return: The folder.
        """
        from agents.files.checkpoint import save_checkpoint

        return save_checkpoint(self, path)

    @classmethod
    def load_checkpoint(
        cls: type[SelfGpuDQN],
        path: str | pathlib.Path,
        env: GymEnv | GymVectorEnv | None = None,
        device: th.device | str = "auto",
        **kwargs: Any,
    ) -> SelfGpuDQN:
        """The model of a checkpoint written by :meth:`save_checkpoint` or
        :class:`~agents.files.checkpoint.CheckpointEvery` (``path``: its folder, or the folder of a
        run's checkpoints: the newest complete one), with its replay buffer; the env's state goes
        into ``env`` (same settings and number of envs) and the process's random generators
        are set as they were (:func:`agents.files.checkpoint.load_checkpoint`)."""
        from agents.files.checkpoint import load_checkpoint

        return load_checkpoint(cls, path, env=env, device=device, **kwargs)

    @property
    def remaining_timesteps(self) -> int:
        """Env steps left of the last ``learn``'s ``total_timesteps`` (0 when it finished):
        ``learn(model.remaining_timesteps, reset_num_timesteps=False)`` finishes a resumed run."""
        return max(int(self._total_timesteps) - int(self.num_timesteps), 0)

    def _excluded_save_params(self) -> list[str]:
        return [
            *super()._excluded_save_params(),
            "trading_env",
            "portfolio_env",
            "curiosity_model",
            "_curiosity",
            "_fused_rollout",
            "_captured_step",
            "_captured_unsupported",
            "_mode_free",
            "_target_update",
            "_pending_rollout_generator",
            "_pending_rollout_round",
            "_pre_step",
        ]

    def _get_torch_save_params(self) -> tuple[list[str], list[str]]:
        state_dicts, variables = super()._get_torch_save_params()
        if self.curiosity_model is not None:
            state_dicts = [*state_dicts, "curiosity_model", "curiosity_model.optimizer"]
        return state_dicts, variables
