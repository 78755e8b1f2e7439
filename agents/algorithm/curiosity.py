"""ICM forward model (Pathak et al., 2017) that the trading env's curiosity bonus evaluates.

The env computes ``bonus = min(MSE(f(s[:D], onehot(category(a))), s'[:D]), cap) * scale`` with
``f = Linear(D+3, H) -> LeakyReLU(0.01) -> Linear(H, D)`` (``curiosity`` in
``gpu_trading_env/core/reward.py`` and ``curiosity_bonus`` in the CUDA kernel). This module is the
trainable copy of ``f``: :class:`CuriosityModel` learns it from replayed transitions and hands its weights to the
env in torch's ``[out, in]`` layout, which is the layout the env reads.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch as th
from torch import nn
from torch.nn import functional as F

from gpu_trading_env.core.constants import LEAKY_RELU_SLOPE

__all__ = ["CuriosityModel", "check_positive_ints"]


def check_positive_ints(**values: Any) -> None:
    """Raise ValueError naming the first value that is not an int >= 1 (bools are refused)."""
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} = {value!r} is invalid: allowed is an int >= 1")


class CuriosityModel(nn.Module):
    """Forward model ``(s[:D], onehot(category)) -> s'[:D]``.

    :param state_dims: ``D``, the leading observation dims read and predicted
        (``EnvConfig.curiosity_state_dims``, 32 by default).
    :param n_categories: Number of action categories in the one-hot (3: short, flat, long).
    :param hidden: Hidden width ``H`` (``EnvConfig.curiosity_hidden``, 64 by default).
    :param learning_rate: Adam learning rate of :meth:`train_step`.
    :param device: Torch device of the parameters.
    """

    def __init__(
        self,
        state_dims: int = 32,
        n_categories: int = 3,
        hidden: int = 64,
        learning_rate: float = 1e-3,
        device: th.device | str = "cpu",
    ) -> None:
        super().__init__()
        check_positive_ints(state_dims=state_dims, n_categories=n_categories, hidden=hidden)
        self.state_dims = state_dims
        self.n_categories = n_categories
        self.hidden = hidden
        self.fc1 = nn.Linear(state_dims + n_categories, hidden)
        self.fc2 = nn.Linear(hidden, state_dims)
        self.to(device)
        self.optimizer = th.optim.Adam(self.parameters(), lr=learning_rate)

    def forward(self, states: th.Tensor, categories: th.Tensor) -> th.Tensor:
        """Predicted next state.

        :param states: ``[B, >= D]`` float observations (only the first D dims are read).
        :param categories: ``[B]`` (or ``[B, 1]``) int action categories in ``[0, n_categories)``.
        :return: ``[B, D]`` float32 prediction of ``next_states[:, :D]``.
        """
        x = states[:, : self.state_dims].float()
        onehot = F.one_hot(categories.reshape(-1).long(), self.n_categories).to(x.dtype)
        # The env's forward pass (the curiosity bonus of both backends) uses the same slope.
        h = F.leaky_relu(self.fc1(th.cat([x, onehot], dim=1)), negative_slope=LEAKY_RELU_SLOPE)
        return self.fc2(h)

    def categories(self, actions: th.Tensor, category_table: Any) -> th.Tensor:
        """Action categories ``[B]`` int64 from actions ``[B]`` / ``[B, 1]`` and the env's table.

        :param actions: Integer actions.
        :param category_table: ``[n_actions]`` ints (``action_table(config).category``), NumPy
            or torch.
        """
        table = th.as_tensor(
            np.asarray(category_table)
            if not isinstance(category_table, th.Tensor)
            else category_table
        )
        table = table.to(device=actions.device, dtype=th.int64)
        return table[actions.reshape(-1).long()]

    def prediction_error(
        self, obs: th.Tensor, actions: th.Tensor, next_obs: th.Tensor, category_table: Any
    ) -> th.Tensor:
        """Per-transition MSE over the first D dims, ``[B]`` float32 (before the env's cap)."""
        pred = self(obs, self.categories(actions, category_table))
        return ((pred - next_obs[:, : self.state_dims].float()) ** 2).mean(dim=1)

    def train_step(
        self, obs: th.Tensor, actions: th.Tensor, next_obs: th.Tensor, category_table: Any
    ) -> float:
        """One Adam step on the mean squared prediction error of a batch of transitions.

        :param obs: ``[B, obs_dim]`` observations.
        :param actions: ``[B]`` or ``[B, 1]`` integer actions.
        :param next_obs: ``[B, obs_dim]`` next observations (the true ones, before any reset).
        :param category_table: ``[n_actions]`` action categories of the env.
        :return: The batch loss before the step (host float).
        """
        self.train()
        loss = self.prediction_error(obs, actions, next_obs, category_table).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return float(loss.detach())

    def export_weights(self) -> tuple[th.Tensor, th.Tensor, th.Tensor, th.Tensor]:
        """``(w1 [H, D+3], b1 [H], w2 [D, H], b2 [D])`` float32 detached copies, as the env reads
        them in ``TradingVectorEnv.set_curiosity_weights``."""
        return (
            self.fc1.weight.detach().clone().float(),
            self.fc1.bias.detach().clone().float(),
            self.fc2.weight.detach().clone().float(),
            self.fc2.bias.detach().clone().float(),
        )
