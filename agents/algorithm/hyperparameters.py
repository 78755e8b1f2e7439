"""The checks of GpuDQN's options, in one place: numbers before anything is built, choices and
the prioritized buffer's arguments.

SB3 accepted ``gamma=2.0``, ``tau=5.0`` and ``exploration_final_eps=-1``, failed late (inside
``learn``) on ``gamma=nan``, and met ``train_freq=0`` with a bare ``AssertionError``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
from stable_baselines3.common.buffers import ReplayBuffer

from agents.replay.prioritized_buffer import PrioritizedReplayBuffer

__all__ = [
    "PER_DEFAULTS",
    "ROLLOUT_KERNELS",
    "check_choice",
    "check_dqn_hyperparameters",
    "check_finite_observation",
    "check_flag",
    "replay_buffer_arguments",
]

PER_DEFAULTS: dict[str, float] = {"alpha": 0.6, "beta": 0.4, "epsilon": 1e-6}
ROLLOUT_KERNELS = ("fused", "monolithic")


def replay_buffer_arguments(
    replay_buffer_class: type[ReplayBuffer] | None,
    replay_buffer_kwargs: dict[str, Any] | None,
    n_steps: int,
) -> tuple[type[ReplayBuffer], dict[str, Any]]:
    """GpuDQN's buffer class and arguments: :class:`~agents.PrioritizedReplayBuffer` by default,
    with :data:`PER_DEFAULTS` where not given.

    :raises ValueError: for ``n_steps != 1`` with the prioritized buffer (SB3 would warn and
        train on one-step returns: refused rather than the value dropped).
    :warns UserWarning: for ``handle_timeout_termination=False`` (truncations become terminal).
    """
    if replay_buffer_class is None:
        replay_buffer_class = PrioritizedReplayBuffer
    kwargs = dict(replay_buffer_kwargs or {})
    if issubclass(replay_buffer_class, PrioritizedReplayBuffer):
        for key, value in PER_DEFAULTS.items():
            kwargs.setdefault(key, value)
    if n_steps != 1 and issubclass(replay_buffer_class, PrioritizedReplayBuffer):
        raise ValueError(
            f"n_steps = {n_steps!r} is invalid with PrioritizedReplayBuffer, which stores "
            "one-step transitions: allowed is 1"
        )
    if kwargs.get("handle_timeout_termination", True) is False:
        warnings.warn(
            "replay_buffer_kwargs['handle_timeout_termination'] = False: time-limit "
            "truncations will be treated as terminal and the TD target will stop "
            "bootstrapping at them",
            stacklevel=3,
        )
    return replay_buffer_class, kwargs


def check_choice(field: str, value: Any, allowed: tuple[str, ...]) -> str:
    """``value`` when it is one of ``allowed``; else a ValueError naming the field."""
    if not isinstance(value, str) or value not in allowed:
        names = ", ".join(repr(a) for a in allowed[:-1]) + f" or {allowed[-1]!r}"
        raise ValueError(f"{field} = {value!r} is invalid: allowed is {names}")
    return value


def check_flag(field: str, value: Any) -> bool:
    """``value`` when it is a bool; else a TypeError naming the field."""
    if not isinstance(value, bool):
        raise TypeError(f"{field} = {value!r} is invalid: allowed is True or False")
    return value


def _is_int(x: Any) -> bool:
    return isinstance(x, int | np.integer) and not isinstance(x, bool | np.bool_)


def _is_real(x: Any) -> bool:
    try:
        return not isinstance(x, bool | str | bytes) and math.isfinite(float(x))
    except (TypeError, ValueError, OverflowError):
        return False


def _in(x: Any, lo: float, hi: float, lo_open: bool = False) -> bool:
    return _is_real(x) and (float(x) > lo if lo_open else float(x) >= lo) and float(x) <= hi


_Rule = tuple[str, Any, bool, str]
"""A hyperparameter's rule: ``(name, value, value is allowed, what is allowed)``."""


def check_dqn_hyperparameters(
    *,
    learning_rate: float | Callable[[float], float],
    gamma: float,
    tau: float,
    exploration_fraction: float,
    exploration_initial_eps: float,
    exploration_final_eps: float,
    max_grad_norm: float,
    train_freq: int | tuple[int, str],
    gradient_steps: int,
    batch_size: int,
    buffer_size: int,
    learning_starts: int,
    target_update_interval: int,
    reward_scale: float = 1.0,
) -> None:
    """Raise ValueError naming the first hyperparameter out of its range, its value and the
    range (NaN and infinity are out of every range but ``max_grad_norm``'s ``inf``: no clip).

    :param learning_rate: a finite number >= 0, or a schedule (a callable of the progress left).
    :param train_freq: an int >= 1, or ``(int >= 1, "step" | "episode")``.
    :param gradient_steps: an int >= 1, or -1 (as many as env steps collected).
    """
    # Every rule is evaluated (in this order) before the first failing one is raised.
    rules = _rate_rules(
        learning_rate,
        gamma,
        tau,
        exploration_fraction,
        exploration_initial_eps,
        exploration_final_eps,
        max_grad_norm,
    )
    rules += _count_rules(
        gradient_steps,
        batch_size,
        buffer_size,
        learning_starts,
        target_update_interval,
        reward_scale,
    )
    freq, unit = train_freq if isinstance(train_freq, tuple) else (train_freq, "step")
    rules.append(
        (
            "train_freq",
            train_freq,
            _is_int(freq) and freq >= 1 and unit in ("step", "episode"),
            'an int >= 1, or (int >= 1, "step" | "episode")',
        )
    )
    for name, value, ok, allowed in rules:
        if not ok:
            raise ValueError(f"GpuDQN {name} = {value!r} is invalid: allowed is {allowed}")


def _rate_rules(
    learning_rate: Any,
    gamma: Any,
    tau: Any,
    exploration_fraction: Any,
    exploration_initial_eps: Any,
    exploration_final_eps: Any,
    max_grad_norm: Any,
) -> list[_Rule]:
    """The rules of the rates, probabilities and the gradient clip."""
    return [
        (
            "learning_rate",
            learning_rate,
            callable(learning_rate) or _in(learning_rate, 0.0, math.inf),
            "a finite number >= 0 (0 freezes the network) or a schedule",
        ),
        ("gamma", gamma, _in(gamma, 0.0, 1.0), "a number in [0, 1]"),
        ("tau", tau, _in(tau, 0.0, 1.0, lo_open=True), "a number in (0, 1]"),
        (
            "exploration_fraction",
            exploration_fraction,
            _in(exploration_fraction, 0.0, 1.0),
            "a number in [0, 1]",
        ),
        (
            "exploration_initial_eps",
            exploration_initial_eps,
            _in(exploration_initial_eps, 0.0, 1.0),
            "a probability in [0, 1]",
        ),
        (
            "exploration_final_eps",
            exploration_final_eps,
            _in(exploration_final_eps, 0.0, 1.0),
            "a probability in [0, 1]",
        ),
        (
            "max_grad_norm",
            max_grad_norm,
            not isinstance(max_grad_norm, bool | str | bytes)
            and isinstance(max_grad_norm, int | float)
            and max_grad_norm > 0,  # NaN fails this; inf means no clipping
            "a number > 0 (inf: no clipping)",
        ),
    ]


def _count_rules(
    gradient_steps: Any,
    batch_size: Any,
    buffer_size: Any,
    learning_starts: Any,
    target_update_interval: Any,
    reward_scale: Any,
) -> list[_Rule]:
    """The rules of the step counts, sizes and the reward scale."""
    return [
        (
            "gradient_steps",
            gradient_steps,
            _is_int(gradient_steps) and (gradient_steps >= 1 or gradient_steps == -1),
            "an int >= 1, or -1 (one per env step collected)",
        ),
        ("batch_size", batch_size, _is_int(batch_size) and batch_size >= 1, "an int >= 1"),
        ("buffer_size", buffer_size, _is_int(buffer_size) and buffer_size >= 1, "an int >= 1"),
        (
            "learning_starts",
            learning_starts,
            _is_int(learning_starts) and learning_starts >= 0,
            "an int >= 0",
        ),
        (
            "target_update_interval",
            target_update_interval,
            _is_int(target_update_interval) and target_update_interval >= 1,
            "an int >= 1",
        ),
        (
            "reward_scale",
            reward_scale,
            _in(reward_scale, 0.0, math.inf, lo_open=True) and math.isfinite(float(reward_scale)),
            "a finite number > 0",
        ),
    ]


def check_finite_observation(observation: Any) -> None:
    """Raise ValueError naming the first NaN or infinite value of an observation array (NumPy or
    torch; dict observations are checked per key).

    A NaN observation makes every Q-value NaN and their argmax action 0, an answer that looks
    valid; an all-NaN observation from a broken data feed must not trade.
    """
    if isinstance(observation, dict):
        for key, value in observation.items():
            try:
                check_finite_observation(value)
            except ValueError as exc:
                raise ValueError(f"observation[{key!r}]: {exc}") from None
        return
    if hasattr(observation, "detach"):
        observation = observation.detach().cpu().numpy()
    obs = np.asarray(observation)
    if obs.dtype.kind not in "fc":
        return  # integer observations cannot hold NaN
    bad = ~np.isfinite(obs)
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(
            f"observation has {obs[index]} at index {index} ({int(bad.sum())} of {obs.size} "
            "values not finite): allowed are finite values; check the data feed"
        )
