"""Dueling Q-network (Wang et al., 2016) as a Stable-Baselines3 DQN policy, and its branching
form (Tavakoli et al., 2018) for ``MultiDiscrete`` action spaces.

``Q(s, a) = V(s) + A(s, a) - mean_a' A(s, a')``, with a shared trunk and separate value and
advantage heads. The default shape is the source design's network: a 256-256 shared trunk and
128-unit heads, LeakyReLU(0.01) everywhere. ``GpuDQN("DuelingPolicy", env)`` selects it; with a
``MultiDiscrete([L] * K)`` action space the policy builds :class:`BranchingDuelingQNetwork`
(one advantage head per action dimension, ``Q_d(s, a_d) = V(s) + A_d(s, a_d) - mean A_d(s, .)``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.torch_layers import (
    BaseFeaturesExtractor,
    FlattenExtractor,
    create_mlp,
)
from stable_baselines3.common.type_aliases import PyTorchObs, Schedule
from stable_baselines3.dqn.policies import DQNPolicy, QNetwork
from torch import nn

from agents.network_layout import DEFAULT_DUELING_ARCH, aligned_width, run_chain

__all__ = [
    "DEFAULT_DUELING_ARCH",
    "BranchLinear",
    "BranchingDuelingQNetwork",
    "DuelingDQNPolicy",
    "DuelingQNetwork",
    "InstrumentEncoderQNetwork",
    "aligned_width",
    "portfolio_layout",
    "resolve_dueling_arch",
    "run_chain",
]

# Activations that act on each element alone: applying one to both heads' hidden units side
# by side equals applying it to each head.
ELEMENTWISE: tuple[type[nn.Module], ...] = (
    nn.ReLU, nn.LeakyReLU, nn.Tanh, nn.ELU, nn.GELU, nn.SiLU, nn.Sigmoid, nn.Softplus, nn.Mish,
    nn.SELU, nn.CELU, nn.Hardtanh, nn.ReLU6, nn.Hardswish, nn.Hardsigmoid, nn.Identity,
)  # fmt: skip


def resolve_dueling_arch(net_arch: list[int] | dict[str, list[int]] | None) -> dict[str, list[int]]:
    """Normalise ``net_arch`` to ``{"shared": [...], "value": [...], "advantage": [...]}``.

    :param net_arch: ``None`` (the default 256-256 / 128 / 128), a list of ints (the shared
        trunk; both heads keep 128 units) or a dict with any of the keys ``"shared"``,
        ``"value"``, ``"advantage"`` (``"adv"`` is accepted for ``"advantage"``); missing keys
        take their defaults.
    :return: A new dict with all three keys, each a list of positive ints.
    """
    if net_arch is None:
        arch = {k: list(v) for k, v in DEFAULT_DUELING_ARCH.items()}
    elif isinstance(net_arch, dict):
        unknown = sorted(set(net_arch) - {"shared", "value", "advantage", "adv"})
        if unknown:
            raise ValueError(
                f"net_arch keys {unknown} are invalid: allowed are 'shared', 'value', 'advantage'"
            )
        arch = {k: list(v) for k, v in DEFAULT_DUELING_ARCH.items()}
        for key, value in net_arch.items():
            arch["advantage" if key == "adv" else key] = list(value)
    elif isinstance(net_arch, list | tuple):
        arch = {k: list(v) for k, v in DEFAULT_DUELING_ARCH.items()}
        arch["shared"] = list(net_arch)
    else:
        raise TypeError(
            f"net_arch of type {type(net_arch).__name__} is invalid: allowed is None, a list of "
            "ints or a dict with 'shared', 'value', 'advantage'"
        )
    for key, sizes in arch.items():
        if any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in sizes):
            raise ValueError(f"net_arch[{key!r}] = {sizes!r} is invalid: allowed is ints >= 1")
    return arch


def _init_trunk_and_value(
    net: QNetwork,
    observation_space: spaces.Space,
    action_space: spaces.Space,
    features_extractor: BaseFeaturesExtractor,
    features_dim: int,
    net_arch: list[int] | dict[str, list[int]] | None,
    activation_fn: type[nn.Module],
    normalize_images: bool,
) -> tuple[dict[str, list[int]], int]:
    """What both dueling networks build before their advantage head: BasePolicy's setup, the
    resolved ``net_arch``, the ``shared`` trunk and the ``value_head`` (in that order, so the
    initial weights follow torch's generator alike). Returns ``(arch, trunk width)``."""
    # QNetwork.__init__ would build a plain MLP we do not use; BasePolicy sets up the rest.
    BasePolicy.__init__(
        net,
        observation_space,
        action_space,
        features_extractor=features_extractor,
        normalize_images=normalize_images,
    )
    arch = resolve_dueling_arch(net_arch)
    net.net_arch = arch
    net.activation_fn = activation_fn
    net.features_dim = features_dim
    trunk_dim = arch["shared"][-1] if arch["shared"] else features_dim
    net.shared = nn.Sequential(*create_mlp(features_dim, -1, arch["shared"], activation_fn))
    net.value_head = nn.Sequential(*create_mlp(trunk_dim, 1, arch["value"], activation_fn))
    return arch, trunk_dim


class DuelingQNetwork(QNetwork):
    """Dueling action-value network: ``Q = V + A - mean(A)``.

    Layers: ``shared`` (features -> trunk, activation after every layer), ``value_head``
    (trunk -> value hidden layers -> 1) and ``advantage_head`` (trunk -> advantage hidden
    layers -> n_actions), each an ``nn.Sequential`` of ``nn.Linear`` and activation modules
    with weights in torch's ``[out, in]`` layout.

    :param observation_space: Observation space.
    :param action_space: Action space (``Discrete``).
    :param features_extractor: Features extractor (``FlattenExtractor`` for vector observations).
    :param features_dim: Number of features out of the extractor.
    :param net_arch: ``{"shared", "value", "advantage"}`` layer sizes, see
        :func:`resolve_dueling_arch`.
    :param activation_fn: Activation class (default ``nn.LeakyReLU``, slope 0.01).
    :param normalize_images: Whether to divide image observations by 255.
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Discrete,
        features_extractor: BaseFeaturesExtractor,
        features_dim: int,
        net_arch: list[int] | dict[str, list[int]] | None = None,
        activation_fn: type[nn.Module] = nn.LeakyReLU,
        normalize_images: bool = True,
    ) -> None:
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
        n_actions = int(self.action_space.n)
        self.advantage_head = nn.Sequential(
            *create_mlp(trunk_dim, n_actions, arch["advantage"], activation_fn)
        )

    def forward(self, obs: PyTorchObs) -> th.Tensor:
        """Q-values.

        :param obs: Observations ``[B, *obs_shape]``.
        :return: Q-values ``[B, n_actions]`` float32.
        """
        value, adv = self.value_and_advantage(obs)
        # Subtracting the mean advantage makes V and A identifiable (Wang et al., eq. 9).
        return value + adv - adv.mean(dim=1, keepdim=True)

    def value_and_advantage(self, obs: PyTorchObs) -> tuple[th.Tensor, th.Tensor]:
        """The two heads before they are combined.

        :param obs: Observations ``[B, *obs_shape]``.
        :return: ``(V [B, 1], A [B, n_actions])``.
        """
        features = self.extract_features(obs, self.features_extractor)
        if not (features.is_cuda and self.chainable()):  # on the CPU, launches cost nothing
            h = self.shared(features)
            return self.value_head(h), self.advantage_head(h)
        # Where torch.compile traces this (the captured train step), the products run on widths
        # padded to multiples of 8: the pads fuse into the casts and gathers around them, and
        # cuBLAS picks faster aligned kernels than for the 54-feature input and the 4-wide
        # output (figures in docs/PERFORMANCE.md). Eagerly, each pad would be a launch of its own.
        x = run_chain(self.chain(), features, aligned=th.compiler.is_compiling())
        return x[:, :1], x[:, 1:]

    def greedy_chain(self) -> list[tuple[th.Tensor, th.Tensor] | nn.Module] | None:
        """The shared trunk and the advantage head as one chain (``(weight, bias)`` of each
        linear layer, and the activation modules), or ``None`` when a layer of theirs is not a
        biased ``nn.Linear`` or an elementwise activation.

        ``Q(s, .) = V(s) + A(s, .) - mean A(s, .)`` differs from ``A(s, .)`` by a constant per
        state, so the greedy action is ``argmax A``: acting needs neither the value head nor
        the mean (see :mod:`agents.rollouts.acting`).
        """
        ops: list[tuple[th.Tensor, th.Tensor] | nn.Module] = []
        for m in (*self.shared, *self.advantage_head):
            if isinstance(m, nn.Linear) and m.bias is not None:
                ops.append((m.weight, m.bias))
            elif type(m) in ELEMENTWISE:
                ops.append(m)
            else:
                return None
        return ops

    def chain(self) -> list[tuple[th.Tensor, th.Tensor] | nn.Module]:
        """The network after the features extractor as one chain: ``(weight, bias)`` of each
        linear layer, and the activation modules, with both heads merged into single layers.

        The heads' first layers stand side by side (they read the same trunk output), their
        later layers block-diagonal (the added terms are exact zeros), so the chain computes
        the two heads' values up to the summation order of the products with half as many
        products: at batch 4,096 each product is a launch of a few microseconds, and a
        gradient step runs three forwards and a backward. The last layer's output is
        ``[V, A_1, ..., A_n]``. Needs :meth:`chainable`.
        """
        ops: list[tuple[th.Tensor, th.Tensor] | nn.Module] = [
            (m.weight, m.bias) if isinstance(m, nn.Linear) else m for m in self.shared
        ]
        for k, (v, a) in enumerate(zip(self.value_head, self.advantage_head, strict=True)):
            if isinstance(v, nn.Linear):
                weight = (
                    th.cat([v.weight, a.weight]) if k == 0 else th.block_diag(v.weight, a.weight)
                )
                ops.append((weight, th.cat([v.bias, a.bias])))
            else:
                ops.append(v)  # the same elementwise activation on both halves
        return ops

    def chainable(self) -> bool:
        """Whether the trunk and both heads are biased Linear layers and elementwise
        activations, the heads of the same depth (what :meth:`chain` computes)."""
        fusable = getattr(self, "_fusable", None)
        if fusable is None:

            def linear(m: nn.Module) -> bool:
                return isinstance(m, nn.Linear) and m.bias is not None

            def elementwise(m: nn.Module) -> bool:
                return type(m) in ELEMENTWISE

            fusable = (
                all(linear(m) or elementwise(m) for m in self.shared)
                and len(self.value_head) == len(self.advantage_head)
                and all(
                    (linear(v) and linear(a))
                    or (type(v) is type(a) and elementwise(v) and repr(v) == repr(a))
                    for v, a in zip(self.value_head, self.advantage_head, strict=False)
                )
            )
            self._fusable = fusable
        return fusable


def check_branching_space(action_space: spaces.Space) -> tuple[int, int]:
    """``(K, L)`` of a ``MultiDiscrete([L] * K)`` action space, the one a branching head takes.

    :raises ValueError: naming the space, for another kind of space, a ``nvec`` of more than
        one dimension or of unequal entries, an entry below 2, or a ``start`` other than 0.
    """
    if not isinstance(action_space, spaces.MultiDiscrete):
        raise ValueError(
            f"action_space = {action_space} is invalid for a branching head: allowed is "
            "MultiDiscrete([L] * K)"
        )
    nvec = np.asarray(action_space.nvec)
    start = np.asarray(getattr(action_space, "start", np.zeros_like(nvec)))
    if nvec.ndim != 1 or nvec.size < 1:
        raise ValueError(
            f"action_space.nvec = {nvec.tolist()} is invalid for a branching head: allowed is "
            "one dimension of K >= 1 entries"
        )
    if len(set(nvec.tolist())) != 1 or int(nvec[0]) < 2:
        raise ValueError(
            f"action_space.nvec = {nvec.tolist()} is invalid for a branching head: allowed are "
            "K equal entries L >= 2 (MultiDiscrete([L] * K))"
        )
    if np.any(start != 0):
        raise ValueError(
            f"action_space.start = {start.tolist()} is invalid for a branching head: allowed "
            "is 0 in every dimension"
        )
    return int(nvec.size), int(nvec[0])


class BranchLinear(nn.Module):
    """K independent linear layers applied side by side: ``y[:, d] = x[:, d] @ W_d^T + b_d``.

    Initialised as ``nn.Linear`` initialises each of them (uniform in
    ``+-1 / sqrt(in_features)``).

    :param n_branches: K.
    :param in_features: inputs of each branch.
    :param out_features: outputs of each branch.
    """

    def __init__(self, n_branches: int, in_features: int, out_features: int) -> None:
        super().__init__()
        self.n_branches = int(n_branches)
        self.in_features = int(in_features)
        self.out_features = int(out_features)
        self.weight = nn.Parameter(th.empty(self.n_branches, self.out_features, self.in_features))
        self.bias = nn.Parameter(th.empty(self.n_branches, self.out_features))
        bound = 1.0 / math.sqrt(self.in_features)
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: th.Tensor) -> th.Tensor:
        """:param x: ``[B, K, in_features]``. :return: ``[B, K, out_features]``."""
        return th.einsum("bki,koi->bko", x, self.weight) + self.bias

    def extra_repr(self) -> str:
        return f"n_branches={self.n_branches}, in_features={self.in_features}, out_features={self.out_features}"


def branch_advantage_head(
    trunk_dim: int, n_branches: int, widths: list[int], activation_fn: type[nn.Module]
) -> nn.Sequential:
    """K advantage heads of the same shape, each its own weights: one ``nn.Linear`` ``trunk ->
    K * widths[0]`` (the K first layers side by side), a ``nn.Unflatten`` to ``[B, K,
    widths[0]]``, then the activations and :class:`BranchLinear` layers up to ``[B, K,
    widths[-1]]``."""
    layers: list[nn.Module] = [
        nn.Linear(trunk_dim, n_branches * widths[0]),
        nn.Unflatten(1, (n_branches, widths[0])),
    ]
    for w_in, w_out in zip(widths[:-1], widths[1:], strict=True):
        layers += [activation_fn(), BranchLinear(n_branches, w_in, w_out)]
    return nn.Sequential(*layers)


class BranchingDuelingQNetwork(QNetwork):
    """Branching Dueling Q-Network (Tavakoli et al., 2018) for ``MultiDiscrete([L] * K)``.

    ``Q_d(s, a_d) = V(s) + A_d(s, a_d) - mean_a A_d(s, a)`` for each branch ``d = 1..K``: a
    shared trunk, one value head and K advantage heads of the same shape (each branch its own
    weights). The greedy action is ``argmax_a Q_d(s, a)`` in every branch.

    Layers: ``shared`` and ``value_head`` as :class:`DuelingQNetwork`'s; ``advantage_head`` a
    ``nn.Sequential`` whose first layer is one ``nn.Linear`` ``trunk -> K * width`` (the K
    branches' first layers side by side), then a ``nn.Unflatten`` to ``[B, K, width]``, the
    activations, and :class:`BranchLinear` layers up to ``[B, K, L]``.

    :param observation_space: Observation space.
    :param action_space: ``MultiDiscrete([L] * K)`` (``start`` 0).
    :param features_extractor: Features extractor.
    :param features_dim: Number of features out of the extractor.
    :param net_arch: ``{"shared", "value", "advantage"}`` layer sizes (``"advantage"``: the
        hidden layers of each branch), see :func:`resolve_dueling_arch`.
    :param activation_fn: Activation class (default ``nn.LeakyReLU``, slope 0.01).
    :param normalize_images: Whether to divide image observations by 255.
    :param branch_values: One value a branch, ``V_d(s)`` (the value head's last layer ``K``
        wide: ``Q_d = V_d + A_d - mean A_d``), for branches whose returns differ (GpuDQN's
        ``branch_rewards``); ``False``: one ``V(s)`` shared by the branches.
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
        branch_values: bool = False,
    ) -> None:
        n_branches, n_levels = check_branching_space(action_space)
        if not isinstance(branch_values, bool):
            raise TypeError(
                f"branch_values = {branch_values!r} is invalid: allowed is True or False"
            )
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
        self.n_branches = n_branches
        self.n_levels = n_levels
        self.branch_values = branch_values
        if branch_values:  # the value head's last layer K wide: V [B, K]
            value_in = arch["value"][-1] if arch["value"] else trunk_dim
            self.value_head[-1] = nn.Linear(value_in, n_branches)
        widths = [*arch["advantage"], n_levels]
        self.advantage_head = branch_advantage_head(trunk_dim, n_branches, widths, activation_fn)

    def forward(self, obs: PyTorchObs) -> th.Tensor:
        """Q-values of every branch.

        :param obs: Observations ``[B, *obs_shape]``.
        :return: ``[B, K, L]`` float32, ``Q_d(s, a)`` at ``[:, d, a]``.
        """
        value, adv = self.value_and_advantage(obs)
        # The mean over each branch's actions makes V and A_d identifiable (Tavakoli et al., eq. 1).
        return value.unsqueeze(-1) + adv - adv.mean(dim=2, keepdim=True)

    def value_and_advantage(self, obs: PyTorchObs) -> tuple[th.Tensor, th.Tensor]:
        """The heads before they are combined: ``(V [B, 1] (``[B, K]`` with
        ``branch_values``), A [B, K, L])``."""
        features = self.extract_features(obs, self.features_extractor)
        h = self.shared(features)
        return self.value_head(h), self.advantage_head(h)

    def branch_advantages(self, obs: PyTorchObs) -> th.Tensor:
        """The K advantage heads alone, ``A [B, K, L]`` float32, without the value head.

        ``Q_d(s, .)`` differs from ``A_d(s, .)`` by one constant per state and branch, so each
        branch's greedy action is ``argmax_a A_d(s, a)``: the fused rollout acts on this
        (:class:`~agents.rollouts.acting.GreedyActor`).
        """
        features = self.extract_features(obs, self.features_extractor)
        return self.advantage_head(self.shared(features))

    def _predict(self, observation: PyTorchObs, deterministic: bool = True) -> th.Tensor:
        """Greedy actions ``[B, K]`` int64: each branch's argmax."""
        return self(observation).argmax(dim=2)


# -- the instrument encoder ----------------------------------------------------------------------
# A branching dueling Q-network for the portfolio env whose weights are shared by the
# instruments (:class:`InstrumentEncoderQNetwork`).
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
    """A branching dueling Q-network for the portfolio env whose weights the instruments share.

    The observation is ``[features_0 .. features_{K-1} (F each), V/C0, pos_0 .. pos_{K-1}]``.
    One encoder reads each instrument's slice ``[features_k, pos_k, V/C0, e_k]`` (``e_k`` a
    learned embedding of the instrument), so what it learns of one instrument's features serves
    the others; beside it the dueling trunk reads the whole observation (a follower needs its
    leader's features). The heads, shared by the branches, read ``z_k = [encoder(slice_k),
    trunk(obs)]``: ``V_k = value(z_k)`` ``[B, K]`` (one value a branch); the advantage is the
    sum of a head shared by the branches on ``encoder(slice_k)`` (``encoder_advantage``) and
    each branch's own head on the trunk (``advantage_head``, :class:`BranchingDuelingQNetwork`'s),
    ``[B, K, L]``; ``Q_k(s, a) = V_k + A_k(a) - mean A_k``. Its interface is
    :class:`BranchingDuelingQNetwork`'s (``forward``, ``value_and_advantage``,
    ``branch_advantages``, ``_predict``, ``n_branches``, ``n_levels``), which the fused
    rollout, the captured step and the backtests use; ``set_flat_policy`` zeroes both heads.

    :param observation_space: ``Box`` of ``K·F + 1 + K`` floats.
    :param action_space: ``MultiDiscrete([L] * K)``.
    :param features_extractor: Features extractor (a flatten: the observation as it is).
    :param features_dim: Its output width (``K·F + 1 + K``).
    :param net_arch: ``{"shared", "value", "advantage"}`` as the dueling networks': the trunk over
        the whole observation, and the hidden widths of the branches' heads; the encoder has
        two layers of the heads' first width.
    :param activation_fn: Activation class.
    :param normalize_images: Whether to divide image observations by 255.
    :param branch_columns: For each branch k, the feature columns of the observation
        (``instrument·F + feature``) found to predict instrument k's returns: a third advantage,
        each branch's own head on those columns alone (``evidence_head``), so a branch reads
        the few columns that carry its edge directly, not through a trunk all K share; its
        last layer starts at zero. None: no such head.
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
        branch_columns: list[list[int]] | None = None,
    ) -> None:
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
        # Two advantages added: one head shared by the branches on each instrument's encoding
        # (what one instrument teaches serves all), and each branch's own head on the trunk, as
        # BranchingDuelingQNetwork's (which leader's features belong to which follower).
        self.encoder_advantage = nn.Sequential(
            *create_mlp(width, n_levels, arch["advantage"], activation_fn)
        )
        widths = [*arch["advantage"], n_levels]
        self.advantage_head = branch_advantage_head(trunk_dim, n_branches, widths, activation_fn)
        self.branch_columns = check_branch_columns(branch_columns, n_branches, self.n_features)
        self.evidence_head: nn.Sequential | None = None
        if self.branch_columns is not None:
            index, mask = evidence_index(self.branch_columns)
            self.register_buffer("evidence_index", index)
            self.register_buffer("evidence_mask", mask)
            sizes = [index.shape[1], *arch["advantage"], n_levels]
            layers: list[nn.Module] = []
            for w_in, w_out in zip(sizes[:-1], sizes[1:], strict=True):
                layers += [BranchLinear(n_branches, w_in, w_out), activation_fn()]
            self.evidence_head = nn.Sequential(*layers[:-1])
            # The head starts at zero: the network starts as the one without it, and the head
            # grows where its columns pay instead of moving every branch from the first update.
            with th.no_grad():
                self.evidence_head[-1].weight.zero_()
                self.evidence_head[-1].bias.zero_()

    def _parts(self, obs: PyTorchObs) -> tuple[th.Tensor, th.Tensor, th.Tensor | None]:
        """``(encodings [B, K, width], trunk [B, trunk], evidence advantage [B, K, L] or
        None)``."""
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
        evidence = None
        if self.evidence_head is not None:
            # Each branch's own columns, [B, K, C]; a padded slot reads column 0 times 0.
            picked = x[:, self.evidence_index] * self.evidence_mask.to(x.dtype)
            evidence = self.evidence_head(picked)
        return self.encoder(slices), self.shared(x), evidence

    def _advantages(self, h: th.Tensor, g: th.Tensor, evidence: th.Tensor | None) -> th.Tensor:
        adv = self.encoder_advantage(h) + self.advantage_head(g)
        return adv if evidence is None else adv + evidence

    def forward(self, obs: PyTorchObs) -> th.Tensor:
        """:return: ``[B, K, L]`` float32, ``Q_k(s, a)`` at ``[:, k, a]``."""
        value, adv = self.value_and_advantage(obs)
        return value.unsqueeze(-1) + adv - adv.mean(dim=2, keepdim=True)

    def value_and_advantage(self, obs: PyTorchObs) -> tuple[th.Tensor, th.Tensor]:
        """``(V [B, K], A [B, K, L])``."""
        h, g, evidence = self._parts(obs)
        z = th.cat([h, g.unsqueeze(1).expand(*h.shape[:2], g.shape[1])], dim=2)
        return self.value_head(z).squeeze(-1), self._advantages(h, g, evidence)

    def branch_advantages(self, obs: PyTorchObs) -> th.Tensor:
        """``A [B, K, L]`` without the value head: each branch's greedy action is its argmax."""
        return self._advantages(*self._parts(obs))

    def _predict(self, observation: PyTorchObs, deterministic: bool = True) -> th.Tensor:
        """Greedy actions ``[B, K]`` int64."""
        return self(observation).argmax(dim=2)

    def extra_repr(self) -> str:
        columns = (
            ""
            if self.branch_columns is None
            else f", evidence columns={self.evidence_index.shape[1]}"
        )
        return f"n_branches={self.n_branches}, n_features={self.n_features}{columns}"


def check_branch_columns(
    branch_columns: Any, n_branches: int, n_features: int
) -> list[list[int]] | None:
    """``branch_columns`` as K lists of ints, each in ``0 .. K·F - 1`` (None stays None).

    :raises ValueError: naming the branch and the column where one is out of range, or where
        there are not K lists.
    """
    if branch_columns is None:
        return None
    columns = list(branch_columns)
    if len(columns) != n_branches:
        raise ValueError(
            f"branch_columns of {len(columns)} lists is invalid: allowed is one list a branch "
            f"({n_branches})"
        )
    out: list[list[int]] = []
    for k, cols in enumerate(columns):
        cols = list(cols)
        whole = all(isinstance(c, int | np.integer) and not isinstance(c, bool) for c in cols)
        row = [int(c) for c in cols] if whole else []
        if not whole or any(not 0 <= c < n_branches * n_features for c in row):
            raise ValueError(
                f"branch_columns[{k}] = {list(cols)!r} is invalid: allowed are integer feature "
                f"columns 0..{n_branches * n_features - 1} (instrument·F + feature, F = "
                f"{n_features})"
            )
        out.append(sorted(set(row)))
    return out


def evidence_index(branch_columns: list[list[int]]) -> tuple[th.Tensor, th.Tensor]:
    """``(index int64 [K, C], mask float32 [K, C])``: each branch's columns padded to the
    longest list (C >= 1) with column 0 and mask 0."""
    width = max(1, *(len(c) for c in branch_columns))
    index = th.zeros(len(branch_columns), width, dtype=th.int64)
    mask = th.zeros(len(branch_columns), width)
    for k, cols in enumerate(branch_columns):
        index[k, : len(cols)] = th.tensor(cols, dtype=th.int64)
        mask[k, : len(cols)] = 1.0
    return index, mask


class DuelingDQNPolicy(DQNPolicy):
    """DQN policy with a :class:`DuelingQNetwork` as online and target network.

    Same arguments as SB3's ``DQNPolicy``, with dueling defaults: ``net_arch=None`` means
    ``{"shared": [256, 256], "value": [128], "advantage": [128]}`` and ``activation_fn``
    defaults to ``nn.LeakyReLU`` (slope 0.01). With a ``MultiDiscrete([L] * K)`` action space
    both networks are :class:`BranchingDuelingQNetwork` (Q-values ``[B, K, L]``, actions
    ``[B, K]``).

    :param observation_space: Observation space.
    :param action_space: Action space: ``Discrete`` or ``MultiDiscrete([L] * K)``.
    :param lr_schedule: Learning rate schedule.
    :param net_arch: Layer sizes (list: shared trunk; dict: see :func:`resolve_dueling_arch`).
    :param activation_fn: Activation class.
    :param features_extractor_class: Features extractor class.
    :param features_extractor_kwargs: Its keyword arguments.
    :param normalize_images: Whether to divide image observations by 255.
    :param optimizer_class: Optimizer class (``th.optim.Adam``).
    :param optimizer_kwargs: Optimizer keyword arguments, excluding the learning rate.
    :param branch_values: With ``MultiDiscrete``, one value a branch
        (:class:`BranchingDuelingQNetwork`'s ``branch_values``).
    :param instrument_encoder: With the portfolio env's ``MultiDiscrete``, the network whose
        weights the instruments share
        (:class:`InstrumentEncoderQNetwork`).
    :param branch_columns: With ``instrument_encoder``, each branch's evidence columns
        (:class:`InstrumentEncoderQNetwork`'s ``branch_columns``).
    """

    q_net: DuelingQNetwork | BranchingDuelingQNetwork
    q_net_target: DuelingQNetwork | BranchingDuelingQNetwork

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Discrete | spaces.MultiDiscrete,
        lr_schedule: Schedule,
        net_arch: list[int] | dict[str, list[int]] | None = None,
        activation_fn: type[nn.Module] = nn.LeakyReLU,
        features_extractor_class: type[BaseFeaturesExtractor] = FlattenExtractor,
        features_extractor_kwargs: dict[str, Any] | None = None,
        normalize_images: bool = True,
        optimizer_class: type[th.optim.Optimizer] = th.optim.Adam,
        optimizer_kwargs: dict[str, Any] | None = None,
        branch_values: bool = False,
        instrument_encoder: bool = False,
        branch_columns: list[list[int]] | None = None,
    ) -> None:
        # Read by make_q_net, which DQNPolicy.__init__ calls.
        self.branch_values = branch_values
        self.instrument_encoder = instrument_encoder
        self.branch_columns = branch_columns
        super().__init__(
            observation_space,
            action_space,
            lr_schedule,
            # DQNPolicy would turn None into [64, 64]; resolve the dueling default first.
            net_arch=resolve_dueling_arch(net_arch),  # type: ignore[arg-type]
            activation_fn=activation_fn,
            features_extractor_class=features_extractor_class,
            features_extractor_kwargs=features_extractor_kwargs,
            normalize_images=normalize_images,
            optimizer_class=optimizer_class,
            optimizer_kwargs=optimizer_kwargs,
        )

    def _get_constructor_parameters(self) -> dict[str, Any]:
        return {
            **super()._get_constructor_parameters(),
            "branch_values": self.branch_values,
            "instrument_encoder": self.instrument_encoder,
            "branch_columns": self.branch_columns,
        }

    def make_q_net(self) -> DuelingQNetwork | BranchingDuelingQNetwork:
        # A separate features extractor per network, as SB3's DQNPolicy does.
        net_args = self._update_features_extractor(self.net_args, features_extractor=None)
        encoder = getattr(self, "instrument_encoder", False)
        if not isinstance(encoder, bool):
            raise TypeError(
                f"instrument_encoder = {encoder!r} is invalid: allowed is True or False"
            )
        if encoder:
            if not isinstance(self.action_space, spaces.MultiDiscrete):
                raise ValueError(
                    f"instrument_encoder = True is invalid with the action space "
                    f"{self.action_space}: allowed is the portfolio env's MultiDiscrete([L] * K)"
                )
            columns = getattr(self, "branch_columns", None)
            return InstrumentEncoderQNetwork(**net_args, branch_columns=columns).to(self.device)
        if getattr(self, "branch_columns", None) is not None:
            raise ValueError(
                "branch_columns is invalid without instrument_encoder = True: allowed is None "
                "(the evidence head is the instrument encoder's)"
            )
        if isinstance(self.action_space, spaces.MultiDiscrete):
            branch_values = getattr(self, "branch_values", False)
            return BranchingDuelingQNetwork(**net_args, branch_values=branch_values).to(self.device)
        return DuelingQNetwork(**net_args).to(self.device)
