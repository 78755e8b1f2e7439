"""The policies a backtest runs: a trained network's greedy actions, uniform random actions, and
the planted market's known rule."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np

from gpu_trading_env.core.config import EnvConfig
from gpu_trading_env.data.market_data import MarketData
from gpu_trading_env.reports.backtest import (
    BacktestResult,
    BatchPolicy,
    Policy,
    backtest,
    exposure_policy,
)

__all__ = [
    "RULE_EXPOSURE",
    "greedy_batch_policy",
    "greedy_policy",
    "has_known_rule",
    "known_rule",
    "random_policy",
]

# The known rule of the planted market is held at full exposure, as the zoo's reference is
# (agents.pipelines.zoo): without barriers and the risk penalty (the commands' env defaults) the agent can
# hold every exposure level at no penalty.
RULE_EXPOSURE = 1.0


def greedy_batch_policy(q_nets: list[Any]) -> BatchPolicy:
    """Greedy actions of several Q-networks, one observation each (``backtest_batch``'s policy),
    from CPU copies of the networks taken now.

    A backtest asks for one action per bar: a one-row forward. On the GPU each is a host round
    trip, and torch's CPU thread pool on a busy machine made each one slow (figures in
    docs/PERFORMANCE.md). So the forwards run on the CPU: for dueling networks, their trunks and
    advantage heads in NumPy (:class:`agents.rollouts.acting.NumpyGreedy`, without torch's
    per-operator dispatch); otherwise through torch with one intra-op thread, the caller's thread setting restored
    after each call.
    """
    import torch as th

    from agents.rollouts.acting import NumpyGreedy

    fast = NumpyGreedy.of(list(q_nets))
    if fast is not None:

        def numpy_policy(obs: np.ndarray, bar: int) -> np.ndarray:
            return fast(obs)

        return numpy_policy
    nets = [copy.deepcopy(q).to("cpu").eval() for q in q_nets]

    def policy(obs: np.ndarray, bar: int) -> np.ndarray:
        threads = th.get_num_threads()
        th.set_num_threads(1)
        try:
            with th.inference_mode():
                x = th.as_tensor(np.asarray(obs, dtype=np.float32)).reshape(len(nets), 1, -1)
                return np.array([int(q(x[j]).argmax()) for j, q in enumerate(nets)], np.int64)
        finally:
            th.set_num_threads(threads)

    return policy


def greedy_policy(model: Any) -> Policy:
    """The model's greedy action per bar (``backtest``'s policy), from a CPU copy of its
    Q-network taken now; see :func:`greedy_batch_policy`."""
    batch = greedy_batch_policy([model.q_net])

    def policy(obs: np.ndarray, bar: int) -> np.ndarray:
        return batch(np.asarray(obs, dtype=np.float32).reshape(1, -1), bar)

    return policy


def random_policy(n_actions: int, seed: int) -> Callable[[np.ndarray, int], np.ndarray]:
    """Uniform random actions from ``numpy.random.default_rng(seed)``."""
    rng = np.random.default_rng(seed)

    def policy(obs: np.ndarray, bar: int) -> np.ndarray:
        return rng.integers(0, n_actions, size=1)

    return policy


def has_known_rule(data: MarketData) -> bool:
    """Whether ``data`` is the planted synthetic market, whose best rule is known."""
    return "rule_expected_return" in data.metadata


def known_rule(data: MarketData, config: EnvConfig) -> BacktestResult | None:
    """The planted rule's backtest on ``data``, or None if the data is not the planted market."""
    if not has_known_rule(data):
        return None
    from gpu_trading_env.data.synthetic import planted_rule_exposure

    return backtest(
        exposure_policy(RULE_EXPOSURE * planted_rule_exposure(data), config), data, config
    )
