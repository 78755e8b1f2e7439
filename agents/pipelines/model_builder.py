"""The GpuDQN of one ``train`` run, built from its settings (``untrained_model``), with the
reward scale and the learning-rate schedule it is built with."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from agents.pipelines.train_config import TrainSettings
from gpu_trading_env.core.config import EnvConfig
from gpu_trading_env.data.market_data import MarketData
from gpu_trading_env.reports.metrics import returns_of

__all__ = ["auto_reward_scale", "learning_rate_schedule", "make_train_env", "untrained_model"]


def make_train_env(fit: MarketData, config: EnvConfig, settings: TrainSettings) -> Any:
    """The vector env the network trains in: ``settings.num_envs`` envs over ``fit`` on
    ``settings.device``."""
    import gymnasium as gym

    import gpu_trading_env  # noqa: F401  (registers the env)

    return gym.make_vec(
        "GpuTrading-v0",
        num_envs=settings.num_envs,
        device=settings.device,
        data=fit,
        config=config,
    )


def untrained_model(
    fit: MarketData,
    config: EnvConfig,
    settings: TrainSettings,
    seed: int,
    buffer_size: int | None = None,
) -> tuple[Any, Any]:
    """A new GpuDQN for ``settings`` on an env over ``fit``: ``(model, env)``.

    :param buffer_size: the replay buffer's size; None: ``settings.buffer_size``.
    """
    from agents import GpuDQN

    env = make_train_env(fit, config, settings)
    width = int(settings.net_width)
    hidden = ([width, width], [width // 2]) if width else ([], [])  # 0: Q linear in the obs
    policy_kwargs: dict[str, Any] = {
        "net_arch": {"shared": hidden[0], "value": hidden[1], "advantage": hidden[1]}
    }
    reward_scale = (
        auto_reward_scale(fit) if settings.reward_scale is None else float(settings.reward_scale)
    )
    if settings.weight_decay:
        policy_kwargs["optimizer_kwargs"] = {
            "weight_decay": settings.weight_decay,
            "decoupled_weight_decay": True,
        }
    model = GpuDQN(
        "DuelingPolicy",
        env,
        policy_kwargs=policy_kwargs,
        learning_rate=learning_rate_schedule(settings),
        buffer_size=settings.buffer_size if buffer_size is None else int(buffer_size),
        learning_starts=settings.learning_starts,
        batch_size=settings.batch_size,
        gamma=settings.gamma,
        reward_scale=reward_scale,
        train_freq=1,
        gradient_steps=settings.gradient_steps,
        target_update_interval=settings.target_update_interval,
        exploration_fraction=settings.exploration_fraction,
        exploration_final_eps=settings.exploration_final_eps,
        curiosity=settings.curiosity,
        train_precision=settings.train_precision,
        tensorboard_log=settings.tensorboard_log,
        verbose=settings.verbose,
        seed=seed,
        device=settings.device,  # cpu, cuda or cuda:N, as the env
    )
    return model, env


def learning_rate_schedule(settings: TrainSettings) -> Any:
    """``settings.learning_rate``, or SB3's ``LinearSchedule`` from it to
    ``settings.final_learning_rate`` over the run (a plain class: saved with the model)."""
    if settings.final_learning_rate is None:
        return settings.learning_rate
    from stable_baselines3.common.utils import LinearSchedule

    return LinearSchedule(settings.learning_rate, settings.final_learning_rate, 1.0)


def auto_reward_scale(data: MarketData) -> float:
    """One over the standard deviation of the close-to-close returns of ``data`` (every
    instrument's bars, no return across an instrument boundary): the reward scale with which a
    bar's reward at full exposure has a standard deviation of about 1. 1.0 where the closes
    never move."""
    returns = [
        returns_of(np.asarray(data.close[data.instrument_rows(k)], dtype=np.float64))
        for k in range(data.n_instruments)
        if data.bars_per_instrument[k] > 1
    ]
    sd = float(np.std(np.concatenate(returns))) if returns else 0.0
    return 1.0 / sd if sd > 0.0 and math.isfinite(1.0 / sd) else 1.0
