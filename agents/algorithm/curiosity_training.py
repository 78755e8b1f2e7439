"""Curiosity rounds of :class:`~agents.GpuDQN`: train the forward model, install it in the env.

The model owns the :class:`~agents.CuriosityModel` and what a save keeps (the layout from the
env's config, and whether the env holds the weights); :class:`CuriosityTraining` trains the
forward model on replayed transitions and hands its weights to the env through the env's public
``set_curiosity_weights``: directly on a :class:`~gpu_trading_env.TradingVectorEnv`, through
SB3's ``env_method`` on any other env (a ``TradingEnv`` in a ``DummyVecEnv``, say).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.vec_env import VecEnv

from gpu_trading_env.core.config import action_table
from gpu_trading_env.core.constants import N_CATEGORIES
from gpu_trading_env.vector_env import TradingVectorEnv

__all__ = ["CuriosityTraining", "curiosity_layout"]


def curiosity_layout(
    env: VecEnv | None, trading_env: TradingVectorEnv | None
) -> tuple[dict[str, int], np.ndarray]:
    """``(dims, categories)`` of the env's curiosity bonus, from its ``EnvConfig``.

    :param env: the model's SB3 env; its first env's ``config`` is read when there is no
        ``trading_env``.
    :param trading_env: the raw trading env under the adapter, or ``None``.
    :return: ``CuriosityModel`` keyword arguments ``state_dims``, ``n_categories``, ``hidden``,
        and the ``[n_actions]`` int64 category of each action.
    :raises ValueError: when neither env carries a gpu_trading_env config.
    """
    config = trading_env.config if trading_env is not None else None
    if config is None and env is not None and env.has_attr("config"):
        config = env.get_attr("config", indices=[0])[0]
    if config is None:
        raise ValueError(
            "curiosity=True is invalid for this env: allowed is a gpu_trading_env env "
            "(TradingVectorEnv or TradingEnv), whose config gives the curiosity layout"
        )
    dims = {
        "state_dims": int(config.curiosity_state_dims),
        "n_categories": N_CATEGORIES,
        "hidden": int(config.curiosity_hidden),
    }
    return dims, np.asarray(action_table(config).category, dtype=np.int64)


class CuriosityTraining:
    """Trains ``model.curiosity_model`` and installs its weights in ``model``'s env.

    :param model: the :class:`~agents.GpuDQN`; read are ``curiosity_model``, ``replay_buffer``,
        ``curiosity_batch_size``, ``curiosity_gradient_steps``, ``logger``, ``device``,
        ``trading_env`` and ``env``.
    :param categories: ``[n_actions]`` int, the category of each action (:func:`curiosity_layout`).
    """

    def __init__(self, model: Any, categories: np.ndarray) -> None:
        self.model = model
        self.categories = categories
        self._table: th.Tensor | None = None  # categories on the model's device, made once

    def train(self) -> float:
        """``curiosity_gradient_steps`` steps on replayed transitions; logs ``train/curiosity_loss``.

        :return: The last batch's mean squared prediction error (before its step).
        """
        m = self.model
        assert m.curiosity_model is not None and m.replay_buffer is not None
        if self._table is None:
            self._table = th.as_tensor(self.categories, device=m.device)
        loss = float("nan")
        for _ in range(m.curiosity_gradient_steps):
            # Raw observations: the env's forward model reads unnormalised ones.
            data = m.replay_buffer.sample(m.curiosity_batch_size)
            loss = m.curiosity_model.train_step(
                data.observations, data.actions, data.next_observations, self._table
            )
        m.logger.record("train/curiosity_loss", loss)
        return loss

    def install(self) -> None:
        """Hand the forward model's weights to the env (the trading env or ``env_method``)."""
        m = self.model
        assert m.curiosity_model is not None
        weights = m.curiosity_model.export_weights()
        te = m.trading_env
        if te is not None:
            if not str(te.device).startswith("cuda"):
                weights = tuple(w.cpu() for w in weights)
            te.set_curiosity_weights(*weights)
        elif m.env is not None:
            m.env.env_method("set_curiosity_weights", *(w.cpu().numpy() for w in weights))
