"""A branching dueling Q-network for the portfolio env whose weights are shared by the
instruments: :class:`InstrumentEncoderQNetwork`.

The portfolio observation is ``[features_0 .. features_{K-1} (F each), V/C0, pos_0 .. pos_{K-1}]``
(``D = K·F + 1 + K``). One encoder reads each instrument's own slice, ``[features_k, pos_k, V/C0,
e_k]`` with ``e_k`` a learned embedding of the instrument, so what it learns of one instrument's
features serves every other; beside it the dueling trunk reads the whole observation (a follower
needs its leader's features). Each branch's advantage and value heads, shared by the branches,
read ``z_k = [encoder(slice_k), trunk(obs)]``::

    A_k(s, .) = advantage(z_k)      [B, K, L]
    V_k(s)    = value(z_k)          [B, K]   (one value a branch: each instrument's return)
    Q_k(s, a) = V_k(s) + A_k(s, a) - mean_a A_k(s, .)

It keeps :class:`~agents.algorithm.policies.BranchingDuelingQNetwork`'s interface
(``forward``, ``value_and_advantage``, ``branch_advantages``, ``_predict``, ``n_branches``,
``n_levels``, ``advantage_head`` ending in the layer that gives the levels), so the fused rollout,
the captured step, the backtests and ``set_flat_policy`` take it as they take that one.
"""

from __future__ import annotations

import math

import torch as th
from gymnasium import spaces
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor, create_mlp
from stable_baselines3.common.type_aliases import PyTorchObs
from stable_baselines3.dqn.policies import QNetwork
from torch import nn

__all__ = ["EMBEDDING_DIM", "InstrumentEncoderQNetwork", "portfolio_layout"]

EMBEDDING_DIM = 8  # the learned instrument embedding e_k


def portfolio_layout(obs_dim: int, n_instruments: int) -> int:
    """F, the features of one instrument, of a portfolio observation of ``obs_dim`` floats.

    :raises ValueError: where ``obs_dim`` is not ``K·F + 1 + K`` for an integer ``F >= 1``.
    """
    k = int(n_instruments)
    rest = int(obs_dim) - 1 - k
    if k < 1 or rest < k or rest % k:
        raise ValueError(
            f"observation of {obs_dim} floats is invalid for instrument_encoder with {k} "
            "instruments: allowed is K·F + 1 + K floats (the portfolio env's layout) with F >= 1"
        )
    return rest // k


class InstrumentEncoderQNetwork(QNetwork):
    """The module doc's network, for ``MultiDiscrete([L] * K)`` on a portfolio observation.

    :param observation_space: ``Box`` of ``K·F + 1 + K`` floats.
    :param action_space: ``MultiDiscrete([L] * K)``.
    :param features_extractor: Features extractor (a flatten: the observation as it is).
    :param features_dim: Its output width (``K·F + 1 + K``).
    :param net_arch: ``{"shared", "value", "advantage"}`` as the dueling networks': the trunk over
        the whole observation, and the hidden widths of the branches' heads; the encoder has
        two layers of the heads' first width.
    :param activation_fn: Activation class.
    :param normalize_images: Whether to divide image observations by 255.
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.MultiDiscrete,
        features_extractor: BaseFeaturesExtractor,
        features_dim: int,
        net_arch: list[int] | dict[str, list[int]] | None = None,
        activation_fn: type[nn.Module] = nn.LeakyReLU,
        normalize_images: bool = True,
    ) -> None:
        from agents.algorithm.policies import _init_trunk_and_value, check_branching_space

        n_branches, n_levels = check_branching_space(action_space)
        arch, trunk_dim = _init_trunk_and_value(
            self,
            observation_space,
            action_space,
            features_extractor,
            features_dim,
            net_arch,
            activation_fn,
            normalize_images,
        )
        self.n_branches, self.n_levels = n_branches, n_levels
        self.n_features = portfolio_layout(features_dim, n_branches)
        self.branch_values = True
        width = (arch["advantage"] or arch["value"] or [64])[0]
        self.embedding = nn.Parameter(
            th.randn(n_branches, EMBEDDING_DIM) / math.sqrt(EMBEDDING_DIM)
        )
        slice_dim = self.n_features + 2 + EMBEDDING_DIM
        self.encoder = nn.Sequential(*create_mlp(slice_dim, -1, [width, width], activation_fn))
        z_dim = width + trunk_dim
        self.value_head = nn.Sequential(*create_mlp(z_dim, 1, arch["value"], activation_fn))
        self.advantage_head = nn.Sequential(
            *create_mlp(z_dim, n_levels, arch["advantage"], activation_fn)
        )

    def _branch_inputs(self, obs: PyTorchObs) -> th.Tensor:
        """``z [B, K, width + trunk]``: each instrument's encoding beside the trunk's output."""
        x = self.extract_features(obs, self.features_extractor)
        b, k, f = x.shape[0], self.n_branches, self.n_features
        slices = th.cat(
            [
                x[:, : k * f].reshape(b, k, f),
                x[:, k * f + 1 :].unsqueeze(-1),  # pos_k
                x[:, k * f : k * f + 1].unsqueeze(1).expand(b, k, 1),  # V / C0
                self.embedding.to(x.dtype).unsqueeze(0).expand(b, k, EMBEDDING_DIM),
            ],
            dim=2,
        )
        g = self.shared(x)
        return th.cat([self.encoder(slices), g.unsqueeze(1).expand(b, k, g.shape[1])], dim=2)

    def forward(self, obs: PyTorchObs) -> th.Tensor:
        """:return: ``[B, K, L]`` float32, ``Q_k(s, a)`` at ``[:, k, a]``."""
        value, adv = self.value_and_advantage(obs)
        return value.unsqueeze(-1) + adv - adv.mean(dim=2, keepdim=True)

    def value_and_advantage(self, obs: PyTorchObs) -> tuple[th.Tensor, th.Tensor]:
        """``(V [B, K], A [B, K, L])``."""
        z = self._branch_inputs(obs)
        return self.value_head(z).squeeze(-1), self.advantage_head(z)

    def branch_advantages(self, obs: PyTorchObs) -> th.Tensor:
        """``A [B, K, L]`` without the value head: each branch's greedy action is its argmax."""
        return self.advantage_head(self._branch_inputs(obs))

    def _predict(self, observation: PyTorchObs, deterministic: bool = True) -> th.Tensor:
        """Greedy actions ``[B, K]`` int64."""
        return self(observation).argmax(dim=2)

    def extra_repr(self) -> str:
        return f"n_branches={self.n_branches}, n_features={self.n_features}"
