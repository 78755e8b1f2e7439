"""The settings of one ``train`` run (:class:`TrainConfig`), the one place they are written.

Each field holds its default, its help text and, where the CPU and a GPU differ, both defaults
(:class:`Setting`, the field's metadata). The options of ``train`` and ``walkforward`` and their
help are generated from the fields (:func:`add_training_options`), and the zoo reads the same
options through :func:`train_options_parser`. The commands' episode length
(:data:`EPISODE_LENGTH`; their env is EnvConfig's defaults with the ``--env`` overrides) and split
(:data:`TRAIN_FRACTION`) are here too. Kept apart from the training code so that the command line
can show these defaults in its help without importing torch.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpu_runtime.precision import PRECISION_SETTINGS
from gpu_trading_env.core.config import EnvConfig, config_field_names

__all__ = [
    "CPU_TORCH_THREADS",
    "EPISODE_LENGTH",
    "PORTFOLIO_BUFFER_SIZE",
    "TRAIN_FRACTION",
    "WALKFORWARD_CPU_TIMESTEPS",
    "Setting",
    "TrainConfig",
    "TrainConfigError",
    "TrainSettings",
    "add_training_options",
    "parse_env_overrides",
    "parse_int",
    "run_buffer_size",
    "set_torch_threads",
    "train_env_config",
    "train_options_parser",
]

# walkforward trains folds x seeds models: a smaller budget per model on the CPU.
WALKFORWARD_CPU_TIMESTEPS = 50_000
# Torch's intra-op threads on the CPU: one degrades gracefully beside other CPU-bound jobs and
# keeps a sweep's parallel runs from oversubscribing (docs/PERFORMANCE.md, "The CPU quickstart on
# 2 cores").
CPU_TORCH_THREADS = 1
# The part of the bars ``train`` trains on (``eval`` and ``backtest`` skip it by default).
TRAIN_FRACTION = 0.8
# --episode-length of the commands that build an env from their options (eval's default is the
# model's own).
EPISODE_LENGTH = 200


class TrainConfigError(ValueError):
    """A setting out of its range: ``field``, ``value`` and ``allowed`` (what is allowed)."""

    def __init__(self, name: str, value: Any, allowed: str, option: str | None = None) -> None:
        what = f"{option} {value}" if option else f"TrainConfig.{name} = {value!r}"
        super().__init__(f"{what} is invalid: allowed is {allowed}")
        self.field, self.value, self.allowed = name, value, allowed


@dataclass(frozen=True)
class Setting:
    """What a :class:`TrainConfig` field holds besides its default (the field's metadata).

    :param help: the option's help text as users read it (``%`` unescaped).
    :param check: ``(test, allowed)``: ``test(value)`` is true for a valid value; ``allowed`` says
        what is allowed, in the error.
    :param cpu, gpu: the defaults on the CPU and on a GPU of a field whose default is None.
    :param option: the command-line option, ``--name`` of the field unless given; None: a
        setting without an option.
    :param negated: a boolean option that turns the field off (``--no-fallback``).
    :param option_default: the option's default where the command line resolves it (``auto``).
    :param choices: the option's allowed values.
    """

    help: str
    check: tuple[Callable[[Any], bool], str] | None = None
    cpu: Any = None
    gpu: Any = None
    option: str | None = ""
    negated: bool = False
    option_default: Any = None
    choices: tuple[Any, ...] | None = None

    @property
    def by_device(self) -> bool:
        return self.cpu is not None or self.gpu is not None


def _setting(default: Any, help: str, **kwargs: Any) -> Any:
    return field(default=default, metadata={"setting": Setting(help, **kwargs)})


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _int_range(lo: int, hi: int, hint: str) -> tuple[Callable[[Any], bool], str]:
    return (lambda v: _is_int(v) and lo <= v <= hi), f"{lo:,} to {hi:,} ({hint})"


def _budget(lo: int, hi: int, cpu: int, gpu: int) -> tuple[Callable[[Any], bool], str]:
    return _int_range(lo, hi, f"default {cpu:,} on the CPU, {gpu:,} on a GPU")


def _number(test: Callable[[float], bool], allowed: str) -> tuple[Callable[[Any], bool], str]:
    def ok(v: Any) -> bool:
        return isinstance(v, int | float) and not isinstance(v, bool) and test(float(v))

    return ok, allowed


def _valid_device(name: Any) -> bool:
    return isinstance(name, str) and (
        name in ("cpu", "cuda") or (name.startswith("cuda:") and name[5:].isdigit())
    )


# Budgets that finish in minutes on two CPU cores and on one GPU; on the CPU the gradient steps
# are most of the time, hence 24 envs (docs/PERFORMANCE.md, "The CPU quickstart on 2 cores"). The
# GPU budget and gradient steps per vector step are the market zoo's choice (experiments/README.md,
# "Reward scale, width and budget" and "The number of updates").
_NUM_ENVS = (24, 4096)
_TIMESTEPS = (200_000, 6_000_000)
_BATCH_SIZE = (128, 4096)
_BUFFER_SIZE = (200_000, 2_000_000)
# train --portfolio's caps: observations of K instruments (K·F + 1 + K floats each, twice) fit
# beside the network at K = 32 on one GPU (agents/pipelines/portfolio_train_config.py).
PORTFOLIO_BUFFER_SIZE = (100_000, 1_000_000)
_GRADIENT_STEPS = (1, 2)


@dataclass(kw_only=True)
class TrainConfig:
    """Budget and hyper-parameters of one training run, validated on construction.

    The fields are in the order of the command line's training options. A field whose default is
    None and that has CPU and GPU defaults (``num_envs``, ``timesteps``, ``batch_size``,
    ``buffer_size``, ``gradient_steps``, ``torch_threads``) takes the default of ``device``.

    :raises TrainConfigError: on a value out of its range, naming the field, the value and what is
        allowed.
    """

    device: str = _setting(
        "cpu",
        "auto, cpu, cuda or cuda:N",
        check=(_valid_device, "cpu, cuda or cuda:N"),
        option_default="auto",
    )
    num_envs: int | None = _setting(
        None,
        "parallel envs",
        check=_budget(1, 2**24, *_NUM_ENVS),
        cpu=_NUM_ENVS[0],
        gpu=_NUM_ENVS[1],
    )
    timesteps: int | None = _setting(
        None,
        "env steps",
        check=_budget(1, 10**10, *_TIMESTEPS),
        cpu=_TIMESTEPS[0],
        gpu=_TIMESTEPS[1],
    )
    batch_size: int | None = _setting(
        None,
        "SGD batch",
        check=_budget(1, 2**20, *_BATCH_SIZE),
        cpu=_BATCH_SIZE[0],
        gpu=_BATCH_SIZE[1],
    )
    # None: run_buffer_size, room for every transition of the run up to the device's cap.
    buffer_size: int | None = _setting(
        None,
        "replay buffer transitions; a longer run overwrites its oldest (default: room for "
        "every transition of the run, --timesteps rounded up to a whole step of the envs, at "
        "most the device's cap",
        check=_int_range(
            1,
            2**34,
            f"default: the run's transitions, at most {_BUFFER_SIZE[0]:,} on the CPU, "
            f"{_BUFFER_SIZE[1]:,} on a GPU",
        ),
        cpu=_BUFFER_SIZE[0],
        gpu=_BUFFER_SIZE[1],
    )
    learning_rate: float = _setting(
        3e-4,
        "Adam step size",
        check=_number(lambda v: math.isfinite(v) and v > 0, "a finite number > 0"),
    )
    # SB3's gradient_steps with train_freq=1.
    gradient_steps: int | None = _setting(
        None,
        "gradient steps per vector step of the envs",
        check=_budget(1, 1024, *_GRADIENT_STEPS),
        cpu=_GRADIENT_STEPS[0],
        gpu=_GRADIENT_STEPS[1],
    )
    # Reached linearly from learning_rate (SB3's LinearSchedule); None keeps it constant.
    final_learning_rate: float | None = _setting(
        None,
        "Adam step size at the end of training, reached linearly from --learning-rate "
        "(default: none, the step size stays constant)",
        check=_number(lambda v: math.isfinite(v) and v >= 0, "a finite number >= 0"),
    )
    gamma: float = _setting(
        0.5,
        "discount factor (rewards of trading pay off within a few bars)",
        check=_number(lambda v: 0.0 < v <= 1.0, "a number in (0, 1]"),
    )
    # A window long enough for the fallback's test to see a weak edge (experiments/README.md,
    # "Validation window and actions").
    val_fraction: float = _setting(
        0.4,
        "last part of the training bars held out to select the model",
        check=_number(lambda v: 0.0 < v <= 0.5, "(0, 0.5]"),
    )
    # None: snapshot_every's default.
    eval_every: int | None = _setting(
        None,
        "env steps between the weight snapshots backtested on the validation window after "
        "training (default: a tenth of --timesteps)",
        check=_int_range(1, 10**10, "env steps between snapshots; default a tenth of --timesteps"),
    )
    train_precision: str = _setting(
        "auto",
        "matrix products of the GPU train step; auto: bf16 on GPUs that compute it natively "
        "(compute capability 8.0+), else tf32 (default: auto; ignored on the CPU)",
        check=(lambda v: v in PRECISION_SETTINGS, ", ".join(PRECISION_SETTINGS)),
        choices=tuple(PRECISION_SETTINGS),
    )
    # False keeps the best snapshot whatever it earned (agents.pipelines.deployment).
    fallback: bool = _setting(
        True,
        "keep the network even where it does not beat the best parameter-free policy (flat, "
        "hold long or hold short) on the validation window (default: that policy is kept then; "
        "agents/pipelines/deployment.py)",
        option="--no-fallback",
        negated=True,
    )
    # 0: off (agents.pipelines.deployment).
    predictability_level: float = _setting(
        0.01,
        "where the network's inputs predict the next bar's return on the training bars at this "
        "level (the input selection's family-wise test; with --all-inputs a robust Wald test of "
        "every feature), the fallback deploys a network that beats flat on the validation "
        "window, allowing for its choice among snapshots, at 87.5% one-sided confidence; "
        "elsewhere it must beat flat at 95%; 0 turns the test off",
        check=_number(lambda v: 0.0 <= v < 1.0, "[0, 1) (0 turns the test off)"),
    )
    # False: every feature, no forecast (agents.pipelines.input_selection).
    select_inputs: bool = _setting(
        True,
        "give the network every feature (default: only those whose slope on the next bar's "
        "return is significant on the training bars, Holm-corrected, and a fitted regime "
        "filter's forecast where it predicts out of its fitting sample; the rest are zeros; "
        "agents/pipelines/input_selection.py)",
        option="--all-inputs",
        negated=True,
    )
    # The width that fitted the zoo's weak edges out of sample (experiments/README.md, "Reward
    # scale, width and budget").
    net_width: int = _setting(
        32,
        "dueling Q-network: a trunk of two layers of this width, value and advantage heads of "
        "half of it; 0: no hidden layers (Q-values linear in the observation)",
        check=(
            lambda v: _is_int(v) and (v == 0 or 2 <= v <= 4096),
            "0 (no hidden layers) or an integer in [2, 4096]",
        ),
    )
    # The decay chosen on the market zoo (experiments/README.md, "Reward scale, width and
    # budget").
    weight_decay: float = _setting(
        0.1,
        "decoupled weight decay of the Q-network's Adam (AdamW-style); 0 turns it off",
        check=_number(lambda v: 0.0 <= v < 1.0, "a number in [0, 1)"),
    )
    # GpuDQN's reward_scale; None: agents.pipelines.model_selection.auto_reward_scale, so that a
    # bar's reward at full exposure is of order 1 whatever the market's volatility.
    reward_scale: float | None = _setting(
        None,
        "factor on the rewards in the TD target (the policy does not depend on it; learning "
        "does: Q-value differences of a fraction of a bar's return are below what Adam "
        "resolves); default: one over the standard deviation of the training bars' returns",
        check=_number(lambda v: math.isfinite(v) and v > 0, "a finite number > 0"),
    )
    # The deployed network is the first; off: not yet measured on the market zoo.
    cross_fit: bool = _setting(
        False,
        "train a second network on the last part of the training bars and judge it on the "
        "first, so that the fallback's test sees twice the validation bars (one more training; "
        "the first network is the one kept)",
    )
    curiosity: bool = _setting(False, "ICM curiosity bonus")
    verbose: int = _setting(
        0, "SB3 verbosity", check=(lambda v: v in (0, 1, 2), "0, 1 or 2"), choices=(0, 1, 2)
    )
    # A bar on a terminal, else a plain line every 10 s.
    progress_bar: bool = _setting(True, "no progress bar", option="--no-progress", negated=True)
    # None on a GPU: torch's own count.
    torch_threads: int | None = _setting(
        None,
        f"torch's CPU threads (default: {CPU_TORCH_THREADS} with --device cpu, which keeps "
        "parallel runs from oversubscribing the cores: docs/PERFORMANCE.md; torch's own count on "
        "a GPU)",
        check=_int_range(1, 1024, "1 is fastest for the CPU defaults' small batches"),
        cpu=CPU_TORCH_THREADS,
    )
    # The exploration schedule of SB3's DQN: epsilon from 1 down to exploration_final_eps over
    # this part of the run.
    exploration_fraction: float = _setting(
        0.3,
        "part of the run over which epsilon falls to --exploration-final-eps",
        check=_number(lambda v: 0.0 < v <= 1.0, "a number in (0, 1]"),
        option=None,
    )
    exploration_final_eps: float = _setting(
        0.02,
        "epsilon of the greedy actions after the exploration",
        check=_number(lambda v: 0.0 <= v <= 1.0, "a number in [0, 1]"),
        option=None,
    )
    # Set by train to its report folder where tensorboard is installed.
    tensorboard_log: str | None = _setting(None, "TensorBoard folder", option=None)

    def __post_init__(self) -> None:
        gpu = self.device != "cpu"
        for f in dataclasses.fields(self):
            s = setting(f)
            if s.by_device and getattr(self, f.name) is None and f.name != "buffer_size":
                setattr(self, f.name, s.gpu if gpu else s.cpu)
        for f in dataclasses.fields(self):
            self.check(f.name, getattr(self, f.name))
        if self.buffer_size is None:
            cap = _BUFFER_SIZE[1] if gpu else _BUFFER_SIZE[0]
            self.buffer_size = run_buffer_size(self.timesteps, self.num_envs, cap)

    @staticmethod
    def check(name: str, value: Any) -> None:
        """Raise :class:`TrainConfigError` where ``value`` is not allowed for the field ``name``
        (None passes: a default to come)."""
        s = setting(_FIELDS[name])
        if value is not None and s.check is not None and not s.check[0](value):
            raise TrainConfigError(name, value, s.check[1])

    @classmethod
    def device_defaults(cls, device: str) -> dict[str, Any]:
        """``{field: default}`` of the fields whose default depends on the device."""
        gpu = device != "cpu"
        return {
            f.name: (setting(f).gpu if gpu else setting(f).cpu)
            for f in dataclasses.fields(cls)
            if setting(f).by_device
        }

    @classmethod
    def from_options(
        cls, args: argparse.Namespace, timesteps_cpu: int | None = None
    ) -> TrainConfig:
        """The config of the options :func:`add_training_options` made (``args.device``
        resolved: cpu, cuda or cuda:N); ``timesteps_cpu``: the command's CPU budget where
        ``--timesteps`` is not given (None: the field's)."""
        values = {}
        for f in option_fields():
            value = getattr(args, _dest(f))
            values[f.name] = (not value) if setting(f).negated else value
        if values["timesteps"] is None and values["device"] == "cpu":
            values["timesteps"] = timesteps_cpu
        try:
            return cls(**values)
        except TrainConfigError as exc:
            f = _FIELDS[exc.field]
            option = option_name(f) if setting(f).option is not None else None
            raise TrainConfigError(exc.field, exc.value, exc.allowed, option) from None

    @property
    def learning_starts(self) -> int:
        """Env steps of random actions before the first gradient step: ten vector steps of the
        envs, at least 1,000 transitions."""
        return max(10 * int(self.num_envs or 0), 1000)

    @property
    def target_update_interval(self) -> int:
        """Env steps between target-network copies: 50 copies a run, at most one a vector
        step."""
        return max(int(self.timesteps or 0) // 50, int(self.num_envs or 0))

    @property
    def snapshot_every(self) -> int:
        """Env steps between weight snapshots: ``eval_every``, or a tenth of the run (at least one
        vector step)."""
        return self.eval_every or max(int(self.timesteps or 0) // 10, int(self.num_envs or 0))

    @property
    def curve_every(self) -> int:
        """Env steps between the learning curve's points: 1% of the run, at least one vector
        step."""
        return max(int(self.timesteps or 0) // 100, int(self.num_envs or 0))


def run_buffer_size(timesteps: int, num_envs: int, cap: int) -> int:
    """The default replay buffer of a run: room for every transition it stores (``timesteps``
    rounded up to a whole vector step of ``num_envs`` envs), at most ``cap`` transitions (the
    device's default, where a longer run overwrites its oldest). A run that fits stores and
    samples the same transitions as in any larger buffer, at a fraction of its memory.

    :param timesteps: the run's env steps, >= 1.
    :param num_envs: its parallel envs, >= 1.
    :param cap: the most transitions, >= 1.
    """
    steps = -(-int(timesteps) // int(num_envs))
    return min(int(cap), steps * int(num_envs))


TrainSettings = TrainConfig  # the name the pipelines used first
_FIELDS = {f.name: f for f in dataclasses.fields(TrainConfig)}


def setting(f: dataclasses.Field[Any]) -> Setting:
    """The :class:`Setting` of a :class:`TrainConfig` field."""
    return f.metadata["setting"]


def option_name(f: dataclasses.Field[Any]) -> str:
    """The command-line option of a field with one: ``--num-envs``, ``--no-fallback``."""
    s = setting(f)
    return s.option or "--" + f.name.replace("_", "-")


def _dest(f: dataclasses.Field[Any]) -> str:
    return option_name(f).removeprefix("--").replace("-", "_")


def option_fields() -> list[dataclasses.Field[Any]]:
    """The fields that are command-line options, in the options' order."""
    return [f for f in dataclasses.fields(TrainConfig) if setting(f).option is not None]


def parse_int(text: str) -> int:
    """An integer option: ``200_000`` or ``200000``."""
    try:
        return int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def option_help(f: dataclasses.Field[Any], timesteps_cpu: int | None = None) -> str:
    """The help of a field's option as users read it: its text, and the CPU and GPU defaults of
    a field that has them (``timesteps_cpu``: the command's own CPU budget)."""
    s = setting(f)
    text = s.help
    if f.name == "buffer_size":
        cpu, gpu = PORTFOLIO_BUFFER_SIZE
        text += f": {s.cpu:,} on the CPU, {s.gpu:,} on a GPU; {cpu:,} and {gpu:,} with --portfolio)"
    elif s.by_device and s.gpu is not None:
        cpu = timesteps_cpu if f.name == "timesteps" and timesteps_cpu is not None else s.cpu
        text += f" (default: {cpu:,} on the CPU, {s.gpu:,} on a GPU)"
    return text


# The settings a command's --help names in one line and --help-all explains (the parser's
# ADVANCED_OPTIONS holds the other commands' options).
ADVANCED_SETTINGS = frozenset(
    {
        "buffer_size", "gradient_steps", "final_learning_rate", "gamma", "eval_every",
        "train_precision", "predictability_level", "net_width", "weight_decay", "reward_scale",
        "cross_fit", "curiosity", "verbose", "torch_threads",
    }
)  # fmt: skip


def add_training_options(
    p: argparse.ArgumentParser,
    timesteps_help: str | None = None,
    timesteps_cpu: int | None = None,
) -> None:
    """The ``training`` options of ``train`` and ``walkforward``, one per :class:`TrainConfig`
    field with an option; ``timesteps_help``/``timesteps_cpu``: the command's own words and CPU
    budget for ``--timesteps``."""
    hints = {f.name: f.type for f in dataclasses.fields(TrainConfig)}
    g = p.add_argument_group("training")
    for f in option_fields():
        s = setting(f)
        text = option_help(f, timesteps_cpu)
        if f.name == "timesteps" and timesteps_help is not None:
            text = text.replace(s.help, timesteps_help, 1)
        kwargs: dict[str, Any] = {"help": text.replace("%", "%%")}
        if hints[f.name] == "bool":
            kwargs["action"] = "store_true"
        else:
            kind = hints[f.name].split(" ")[0]
            if kind == "int":
                kwargs["type"] = int if s.choices else parse_int
            elif kind == "float":
                kwargs["type"] = float
            if s.choices:
                kwargs["choices"] = list(s.choices)
            kwargs["default"] = s.option_default if s.option_default is not None else f.default
        action = g.add_argument(option_name(f), **kwargs)
        action.advanced = f.name in ADVANCED_SETTINGS  # read by the parser's --help


def train_options_parser() -> argparse.ArgumentParser:
    """A parser of ``train``'s split, env and training options (no data, folder or seed), for
    runs that train as ``train`` does (the zoo)."""
    p = argparse.ArgumentParser(prog="train options", allow_abbrev=False)
    # The command line's own help of these three is train's (agents.cli.parser).
    p.add_argument("--train-fraction", type=float, default=TRAIN_FRACTION, help=argparse.SUPPRESS)
    p.add_argument(
        "--episode-length", type=parse_int, default=EPISODE_LENGTH, help=argparse.SUPPRESS
    )
    p.add_argument("--env", nargs="*", metavar="FIELD=VALUE", help=argparse.SUPPRESS)
    add_training_options(p)
    return p


def parse_env_overrides(pairs: Sequence[str] | None) -> dict[str, Any]:
    """``["key=value", ...]`` into EnvConfig overrides of its defaults (values parsed as Python
    literals).

    :raises ValueError: on a pair that is not ``FIELD=VALUE`` with FIELD one of EnvConfig's.
    """
    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, raw = pair.partition("=")
        if not sep or key not in config_field_names():
            raise ValueError(
                f"--env {pair!r} is invalid: pass FIELD=VALUE with FIELD one of "
                f"{', '.join(config_field_names())}"
            )
        try:
            out[key] = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            out[key] = raw
    return out


def train_env_config(episode_length: int, pairs: Sequence[str] | None) -> EnvConfig:
    """The commands' EnvConfig: EnvConfig's defaults (the recommended env), ``episode_length``
    and the ``--env`` overrides.

    :raises ValueError: on a bad override or a value EnvConfig refuses.
    """
    overrides = parse_env_overrides(pairs)
    try:
        return EnvConfig(episode_length=episode_length, **overrides)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"--env / --episode-length: {exc}") from None


def set_torch_threads(config: TrainConfig) -> None:
    """Torch's intra-op threads to ``config.torch_threads`` (None: torch's own count)."""
    if config.torch_threads is not None:
        import torch

        torch.set_num_threads(config.torch_threads)
