"""The settings of one portfolio training run (:class:`PortfolioTrainConfig`), the one place
they are written.

The settings the single env's ``train`` also has take :class:`~agents.pipelines.train_config.
TrainConfig`'s field (default, help, check), so that ``train --portfolio`` reads the same
options with the same defaults; the budgets whose default depends on the device (``num_envs``,
``timesteps``, ``batch_size``, ``buffer_size``, ``gradient_steps``) have the portfolio's own
CPU and GPU defaults, which a ``None`` option resolves to. Kept apart from the training code so
that the command line reads it without importing torch.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agents.pipelines.train_config import (
    EPISODE_LENGTH,
    PORTFOLIO_BUFFER_SIZE,
    TRAIN_FRACTION,
    Setting,
    TrainConfig,
    option_name,
    run_buffer_size,
)
from gpu_trading_env.core.portfolio_config import PortfolioConfig, portfolio_field_names

__all__ = [
    "PORTFOLIO_ENV_DEFAULTS",
    "PortfolioTrainConfig",
    "PortfolioTrainConfigError",
    "portfolio_env_config",
]

# The training env's defaults: episodes of train's length, the portfolio env's own other
# defaults (short / flat / long per instrument, 1 bp, gross exposure capped at 1).
PORTFOLIO_ENV_DEFAULTS: dict[str, Any] = {"episode_length": EPISODE_LENGTH}

_TRAIN_FIELDS = {f.name: f for f in dataclasses.fields(TrainConfig)}

# (CPU, GPU) budgets: the CPU's finish a run in about a minute on two cores; the GPU's are sized
# for a run of at most a minute on one GPU at K = 8 and K = 32; the buffer's are caps
# (run_buffer_size), whose observations (K·F + 1 + K floats each, twice) fit beside the network
# at K = 32.
_NUM_ENVS = (16, 4096)
_TIMESTEPS = (30_000, 4_000_000)
_BATCH_SIZE = (128, 4096)
_BUFFER_SIZE = PORTFOLIO_BUFFER_SIZE
_GRADIENT_STEPS = (1, 2)


class PortfolioTrainConfigError(ValueError):
    """A setting out of its range: ``field``, ``value`` and ``allowed``."""

    def __init__(self, name: str, value: Any, allowed: str, option: str | None = None) -> None:
        what = f"{option} {value}" if option else f"PortfolioTrainConfig.{name} = {value!r}"
        super().__init__(f"{what} is invalid: allowed is {allowed}")
        self.field, self.value, self.allowed = name, value, allowed


def _switch(default: bool, text: str) -> Any:
    """A True/False setting of the branching learner (no command-line option of its own: the
    commands' ``--no-...`` switches set it)."""
    check = (lambda v: isinstance(v, bool), "True or False")
    return field(default=default, metadata={"setting": Setting(text, check=check, option=None)})


def _shared(name: str) -> Any:
    """TrainConfig's field ``name``: its default and its setting (help, check, option)."""
    f = _TRAIN_FIELDS[name]
    return field(default=f.default, metadata=f.metadata)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _budget(name: str, lo: int, hi: int, defaults: tuple[int, int]) -> Any:
    cpu, gpu = defaults
    # The buffer's defaults are caps on the run's transitions (run_buffer_size).
    what = "default: the run's transitions, at most" if name == "buffer_size" else "default"
    setting = Setting(
        _TRAIN_FIELDS[name].metadata["setting"].help,
        check=(
            lambda v: _is_int(v) and lo <= v <= hi,
            f"{lo:,} to {hi:,} (portfolio {what} {cpu:,} on the CPU, {gpu:,} on a GPU)",
        ),
        cpu=cpu,
        gpu=gpu,
    )
    return field(default=None, metadata={"setting": setting})


def _fraction_check(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and 0.0 < float(v) < 1.0


@dataclass(frozen=True, kw_only=True)
class PortfolioTrainConfig:
    """Budget, hyper-parameters and env of one portfolio training run, validated on
    construction (:class:`PortfolioTrainConfigError` names the field, the value and what is
    allowed).

    A budget left None takes the portfolio's default of the device it runs on
    (:meth:`resolved`). The splits are chronological over the aligned bars: the first
    ``train_fraction`` of them for training, of which the last ``val_fraction`` validate the
    snapshots; the rest are the test bars.
    """

    num_envs: int | None = _budget("num_envs", 1, 2**24, _NUM_ENVS)
    timesteps: int | None = _budget("timesteps", 1, 10**10, _TIMESTEPS)
    batch_size: int | None = _budget("batch_size", 1, 2**20, _BATCH_SIZE)
    buffer_size: int | None = _budget("buffer_size", 1, 2**34, _BUFFER_SIZE)
    gradient_steps: int | None = _budget("gradient_steps", 1, 1024, _GRADIENT_STEPS)
    learning_rate: float = _shared("learning_rate")
    final_learning_rate: float | None = _shared("final_learning_rate")
    gamma: float = _shared("gamma")
    val_fraction: float = _shared("val_fraction")
    eval_every: int | None = _shared("eval_every")
    train_precision: str = _shared("train_precision")
    fallback: bool = _shared("fallback")
    select_inputs: bool = _shared("select_inputs")
    net_width: int = _shared("net_width")
    weight_decay: float = _shared("weight_decay")
    reward_scale: float | None = _shared("reward_scale")
    exploration_fraction: float = _shared("exploration_fraction")
    exploration_final_eps: float = _shared("exploration_final_eps")
    torch_threads: int | None = _shared("torch_threads")
    verbose: int = _shared("verbose")
    branch_rewards: bool = _switch(
        True,
        "each branch's TD target from its own instrument's share of the reward (False: "
        "the whole portfolio's reward, one target shared by the branches)",
    )
    branch_values: bool = _switch(
        False,
        "one value a branch in the branching dueling head, V_k(s) (False: one V(s) "
        "shared by the branches)",
    )
    instrument_encoder: bool = _switch(
        True,
        "one encoder shared by the instruments beside the trunk, heads shared by the "
        "branches (InstrumentEncoderQNetwork)",
    )
    flat_unpredicted: bool = _switch(
        True,
        "the kept network holds flat each instrument whose next return no kept input "
        "predicts on the training bars (the input selection's tests); needs "
        "select_inputs",
    )
    branch_inputs: bool = _switch(
        True,
        "with instrument_encoder, each branch also reads, in a head of its own, the "
        "other instruments' columns the input selection's tests found predicting its "
        "instrument (a follower its leader's); needs select_inputs",
    )
    train_fraction: float = field(
        default=TRAIN_FRACTION,
        metadata={
            "setting": Setting(
                "first part of the bars for training (the rest: the test bars)",
                check=(_fraction_check, "a number in (0, 1)"),
                option=None,
            )
        },
    )
    env: PortfolioConfig = field(
        default_factory=lambda: PortfolioConfig(**PORTFOLIO_ENV_DEFAULTS),
        metadata={
            "setting": Setting(
                "the training env's settings",
                check=(lambda v: isinstance(v, PortfolioConfig), "a PortfolioConfig"),
                option=None,
            )
        },
    )

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            check = f.metadata["setting"].check
            value = getattr(self, f.name)
            if value is not None and check is not None and not check[0](value):
                raise PortfolioTrainConfigError(f.name, value, check[1])
        if 0.0 not in self.env.exposure_levels:
            raise PortfolioTrainConfigError(
                "env",
                self.env.exposure_levels,
                "exposure_levels with a 0.0 level (flat is the policy a network must beat)",
            )

    def replace(self, **changes: Any) -> PortfolioTrainConfig:
        """A copy with ``changes`` (validated again)."""
        return dataclasses.replace(self, **changes)

    def resolved(self, device: str) -> PortfolioTrainConfig:
        """This config with every budget left None set to its default on ``device`` (``"cpu"``:
        the CPU's, anything else a GPU's); the buffer's: room for the run's transitions, at
        most that default (:func:`~agents.pipelines.train_config.run_buffer_size`)."""
        gpu = str(device) != "cpu"
        changes = {}
        for f in dataclasses.fields(self):
            s: Setting = f.metadata["setting"]
            if s.by_device and getattr(self, f.name) is None:
                changes[f.name] = s.gpu if gpu else s.cpu
        if self.buffer_size is None:
            steps = self.timesteps or changes["timesteps"]
            envs = self.num_envs or changes["num_envs"]
            changes["buffer_size"] = run_buffer_size(steps, envs, changes["buffer_size"])
        return self.replace(**changes) if changes else self

    @property
    def learning_starts(self) -> int:
        """Env steps of random actions before the first gradient step: ten vector steps, at
        least 1,000 transitions (needs :meth:`resolved`)."""
        return max(10 * int(self.num_envs or 0), 1000)

    @property
    def target_update_interval(self) -> int:
        """Env steps between target-network copies: 50 a run, at most one a vector step."""
        return max(int(self.timesteps or 0) // 50, int(self.num_envs or 0))

    @property
    def snapshot_every(self) -> int:
        """Env steps between weight snapshots: ``eval_every``, or a fifth of the run."""
        return self.eval_every or max(int(self.timesteps or 0) // 5, int(self.num_envs or 0))

    @property
    def curve_every(self) -> int:
        """Env steps between the learning curve's points: 1% of the run."""
        return max(int(self.timesteps or 0) // 100, int(self.num_envs or 0))

    def to_dict(self) -> dict[str, Any]:
        """Every setting, the env's as a dict of its fields (JSON-ready)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "env"}
        out["env"] = {
            k: (v.name if hasattr(v, "name") else v)
            for k, v in dataclasses.asdict(self.env).items()
        }
        return out

    @classmethod
    def from_options(
        cls, args: argparse.Namespace, env: PortfolioConfig | None = None
    ) -> PortfolioTrainConfig:
        """The config of ``train``'s parsed options (the fields shared with TrainConfig, and the
        budgets: None where not given); ``env``: the training env (default: its defaults).

        :raises PortfolioTrainConfigError: naming the option, the value and what is allowed.
        """
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name not in _TRAIN_FIELDS:
                continue
            tf = _TRAIN_FIELDS[f.name]
            s: Setting = tf.metadata["setting"]
            if s.option is None:
                continue
            dest = option_name(tf).removeprefix("--").replace("-", "_")
            if not hasattr(args, dest):
                continue
            value = getattr(args, dest)
            values[f.name] = (not value) if s.negated else value
        if getattr(args, "train_fraction", None) is not None:
            values["train_fraction"] = args.train_fraction
        # The learner's switches, options of train and walkforward --portfolio alone.
        if getattr(args, "no_branch_rewards", False):
            values["branch_rewards"] = False
        if getattr(args, "no_instrument_encoder", False):
            values["instrument_encoder"] = False
        if getattr(args, "no_flat_unpredicted", False):
            values["flat_unpredicted"] = False
        if getattr(args, "no_branch_inputs", False):
            values["branch_inputs"] = False
        if env is not None:
            values["env"] = env
        try:
            return cls(**values)
        except PortfolioTrainConfigError as exc:
            tf = _TRAIN_FIELDS.get(exc.field)
            option = option_name(tf) if tf is not None else "--" + exc.field.replace("_", "-")
            raise PortfolioTrainConfigError(exc.field, exc.value, exc.allowed, option) from None


def portfolio_env_config(episode_length: int, pairs: Sequence[str] | None) -> PortfolioConfig:
    """The training env of ``train --portfolio``: ``episode_length`` and the ``--env
    FIELD=VALUE`` overrides (values read as Python literals) over :data:`PORTFOLIO_ENV_DEFAULTS`.

    :raises ValueError: on a pair that is not ``FIELD=VALUE`` with FIELD one of
        PortfolioConfig's, or a value PortfolioConfig refuses.
    """
    import ast

    values: dict[str, Any] = dict(PORTFOLIO_ENV_DEFAULTS, episode_length=episode_length)
    for pair in pairs or []:
        key, sep, raw = pair.partition("=")
        if not sep or key not in portfolio_field_names():
            raise ValueError(
                f"--env {pair!r} is invalid with --portfolio: pass FIELD=VALUE with FIELD one of "
                f"{', '.join(portfolio_field_names())}"
            )
        try:
            values[key] = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            values[key] = raw
    try:
        return PortfolioConfig(**values)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"--env / --episode-length: {exc}") from None
