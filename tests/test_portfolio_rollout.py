"""The fused rollout's parts for MultiDiscrete actions (the portfolio env): the replay buffer's
``[N, K]`` action layout, the per-branch greedy argmax, the one-coin-per-env epsilon rule, and
the choice of rollout. The GPU tier (``tests/test_portfolio_rollout_gpu.py``) runs them in
``GpuDQN.learn`` on a CUDA portfolio env."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from stable_baselines3.common.torch_layers import FlattenExtractor

from agents import GpuDQN, PrioritizedReplayBuffer
from agents.algorithm.policies import BranchingDuelingQNetwork
from agents.rollouts.acting import GreedyActor
from agents.rollouts.fused import epsilon_greedy
from agents.rollouts.portfolio_fused import PortfolioRollout
from agents.rollouts.selection import build_rollout

pytestmark = pytest.mark.usefixtures("one_torch_thread")

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
OBS = spaces.Box(-10.0, 10.0, shape=(3,), dtype=np.float32)
K, L = 5, 3
SMALL_ARCH = {"shared": [32], "value": [16], "advantage": [16]}


def _buffer(device: str, action_space: spaces.Space) -> PrioritizedReplayBuffer:
    return PrioritizedReplayBuffer(60, OBS, action_space, device=device, n_envs=3)


def _branching_net(k: int = K, levels: int = L, obs_dim: int = 7) -> BranchingDuelingQNetwork:
    obs_space = spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)
    th.manual_seed(0)
    return BranchingDuelingQNetwork(
        obs_space,
        spaces.MultiDiscrete([levels] * k),
        FlattenExtractor(obs_space),
        obs_dim,
        net_arch=SMALL_ARCH,
    )


# -- the buffer's action layout -------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
def test_multidiscrete_actions_are_stored_as_k_int64_per_env_by_every_add_path(device):
    """``add`` (SB3's loop), ``add_tensors`` (eager fused steps) and ``add_tensors_at`` (the
    graph's write at a device slot; on CUDA the store kernel with ``action_dim = K``) store the
    same ``[N, K]`` actions and transitions, across the wrap-around; a sample returns them as
    ``[B, K]``."""
    space = spaces.MultiDiscrete([L] * K)
    a, b, c = (_buffer(device, space) for _ in range(3))
    assert a.actions.shape == (20, 3, K) and a.actions.dtype == th.int64
    if device == "cpu":  # the NumPy tree has no device-start fill: read the start the same way
        c.tree.fill_range_at = lambda ptr, n: c.tree.fill_range(int(c._fill_start[0]), n)
    else:
        assert c._step_store is not None  # the store kernel takes K actions per env
    slot = th.zeros(1, dtype=th.int64, device=device)
    rng = np.random.default_rng(0)
    for _ in range(25):  # wraps around (20 rows)
        obs = rng.normal(size=(3, 3)).astype(np.float32)
        nxt = rng.normal(size=(3, 3)).astype(np.float32)
        act = rng.integers(0, L, size=(3, K)).astype(np.int64)
        rew = rng.normal(size=3).astype(np.float32)
        term = rng.random(3) < 0.3
        trunc = rng.random(3) < 0.3
        infos = [
            {"TimeLimit.truncated": bool(tr and not te)} for te, tr in zip(term, trunc, strict=True)
        ]
        a.add(obs, nxt, act, rew, term | trunc, infos)
        step = [th.as_tensor(x, device=device) for x in (obs, nxt, act, rew, term, trunc)]
        b.add_tensors(*step)
        c.add_tensors_at(slot, *step)
        c.advance_position()
    for name in ("observations", "next_observations", "actions", "rewards", "dones", "timeouts"):
        assert th.equal(getattr(a, name), getattr(b, name)), name
        assert th.equal(getattr(a, name), getattr(c, name)), name
    np.testing.assert_array_equal(a.tree.leaves(), c.tree.leaves())
    # The last step's actions, env by env, at row (25 - 1) mod 20.
    np.testing.assert_array_equal(c.actions[4].cpu().numpy(), act)
    batch = c.sample(16)
    assert batch.actions.shape == (16, K) and batch.actions.dtype == th.int64
    flat = c.actions.reshape(-1, K)
    assert th.equal(batch.actions, flat[batch.indices])


def test_store_kernel_writes_k_actions_per_env():
    """The store kernel's parameter list carries ``action_dim`` and its launch covers every
    action element: ``inputs_fit`` takes ``[N, K]`` actions for a ``K``-action buffer and
    refuses ``[N]``."""
    from agents.replay.step_store import STORE_KERNEL_PARAMS, inputs_fit

    assert "action_dim" in [name for name, _ in STORE_KERNEL_PARAMS]
    buf = _buffer("cpu", spaces.MultiDiscrete([L] * K))
    flags = th.zeros(3, dtype=th.bool)
    inputs = {
        "obs": th.zeros(3, 3),
        "next_obs": th.zeros(3, 3),
        "action": th.zeros(3, K, dtype=th.int64),
        "reward": th.zeros(3),
        "terminated": flags,
        "truncated": flags,
    }
    assert inputs_fit(buf, inputs)
    assert not inputs_fit(buf, {**inputs, "action": th.zeros(3, dtype=th.int64)})
    discrete = _buffer("cpu", spaces.Discrete(4))
    assert inputs_fit(discrete, {**inputs, "action": th.zeros(3, dtype=th.int64)})


# -- the greedy action ----------------------------------------------------------------------------
@pytest.mark.parametrize("precision", ["fp32", "tf32"])
def test_branch_greedy_action_is_each_branch_argmax_of_q(precision):
    net = _branching_net()
    obs = th.randn(257, 7, generator=th.Generator().manual_seed(1))
    actor = GreedyActor(net, precision)
    assert actor.kind == "branch-advantage"
    actions = actor(obs)
    assert actions.shape == (257, K) and actions.dtype == th.int64
    with th.no_grad():
        q = net(obs)
    assert th.equal(actions, q.argmax(dim=2))
    # Branches choose independently: some rows take different levels in different branches.
    assert (actions != actions[:, :1]).any()


def test_branch_advantages_differ_from_q_by_one_constant_per_branch():
    net = _branching_net()
    obs = th.randn(64, 7, generator=th.Generator().manual_seed(2))
    with th.no_grad():
        q, adv = net(obs), net.branch_advantages(obs)
    assert adv.shape == q.shape == (64, K, L)
    shift = q - adv
    th.testing.assert_close(shift, shift[:, :, :1].expand_as(shift), rtol=0, atol=1e-6)


def test_bf16_branch_actions_are_the_argmax_of_bf16_advantages():
    net = _branching_net()
    obs = th.randn(128, 7, generator=th.Generator().manual_seed(3))
    actions = GreedyActor(net, "bf16")(obs)
    with th.no_grad(), th.autocast("cpu", dtype=th.bfloat16):
        expected = net.branch_advantages(obs).argmax(dim=2)
    assert actions.shape == (128, K)
    assert th.equal(actions, expected)


# -- the epsilon rule -----------------------------------------------------------------------------
def test_one_coin_per_env_explores_all_branches_together():
    gen = th.Generator().manual_seed(4)
    n = 1000
    greedy = th.randint(0, L, (n, K), generator=gen)
    rand = th.randint(0, L, (n, K), generator=gen)
    coins = th.rand(n, generator=gen)
    out = th.empty(n, K, dtype=th.int64)
    actions = epsilon_greedy(greedy, rand, coins, 0.3, out=out)
    assert actions is out
    explore = coins < 0.3
    assert 200 < int(explore.sum()) < 400
    assert th.equal(actions[explore], rand[explore])  # every branch of an exploring env
    assert th.equal(actions[~explore], greedy[~explore])  # no branch of a greedy one
    assert th.equal(epsilon_greedy(greedy, rand, coins, 0.0), greedy)
    assert th.equal(epsilon_greedy(greedy, rand, coins, th.tensor(1.0)), rand)


def test_discrete_epsilon_rule_is_the_one_coin_where():
    gen = th.Generator().manual_seed(5)
    greedy, rand = th.randint(0, 4, (300,), generator=gen), th.randint(0, 4, (300,), generator=gen)
    coins = th.rand(300, generator=gen)
    eps = th.tensor(0.4)
    assert th.equal(epsilon_greedy(greedy, rand, coins, eps), th.where(coins < eps, rand, greedy))


# -- which rollout --------------------------------------------------------------------------------
def _portfolio_model(**kwargs) -> GpuDQN:
    env = gym.make_vec("GpuPortfolio-v0", num_envs=4, device="cpu")
    return GpuDQN(
        "DuelingPolicy",
        env,
        learning_starts=0,
        buffer_size=1000,
        policy_kwargs={"net_arch": SMALL_ARCH},
        seed=0,
        device="cpu",
        **kwargs,
    )


def test_gpu_dqn_finds_the_portfolio_env_and_keeps_sb3s_loop_on_the_cpu():
    model = _portfolio_model()
    assert model.portfolio_env is model.env.venv and model.trading_env is None
    assert not model.uses_fused_rollout(model.env)  # a NumPy env: SB3's loop collects
    assert "portfolio_env" in model._excluded_save_params()


def test_monolithic_rollout_kernel_is_refused_on_the_portfolio_env():
    model = _portfolio_model()
    with pytest.raises(ValueError, match=r"rollout_kernel = 'monolithic' is invalid.*'fused'"):
        build_rollout(model, "monolithic", "auto")


# -- the rollout's eager steps, on a CPU stand-in of the CUDA backend's static outputs ----------
class _StaticOutputs:
    """PortfolioCudaBackend's static-output API (``make_outputs``, ``bind_outputs``,
    ``step_bound``) over the NumPy backend, on CPU torch tensors: the kernel writes its outputs
    into the bound tensors in place, as this does."""

    def __init__(self, backend) -> None:
        self.backend = backend
        self.step_args_version = 0

    def make_outputs(self):
        from gpu_trading_env.core.portfolio_state import (
            PortfolioStepOutputs,
            allocate_portfolio_outputs,
        )

        b = self.backend
        out = allocate_portfolio_outputs(np, b.num_envs, b.n_instruments, b.obs_dim)
        return PortfolioStepOutputs(**{k: th.from_numpy(v) for k, v in vars(out).items()})

    def bind_outputs(self, outputs):
        return outputs

    def prepare_actions(self, actions):
        return actions

    def step_bound(self, actions, bound, check=True):
        out = self.backend.step(actions.numpy())
        for name, value in vars(out).items():
            getattr(bound, name).copy_(th.from_numpy(np.asarray(value)))

    def observe(self):
        return th.from_numpy(np.array(self.backend.observe()))

    def check_errors(self):
        pass

    def __getattr__(self, name):  # close, open, state, params: the NumPy backend's
        return getattr(self.backend, name)


class CpuPortfolioRollout(PortfolioRollout):
    """PortfolioRollout on a CPU env, its backend behind :class:`_StaticOutputs` (the CUDA
    check left out, everything it binds bound as on a GPU)."""

    def _checked_env(self, model):
        env = model.portfolio_env
        env.backend = _StaticOutputs(env.backend)
        self._bind_backend(model, env)
        return env


def test_eager_portfolio_steps_store_what_the_env_gives_for_the_stored_actions():
    """PortfolioRollout's eager steps (greedy and random) store ``[N, K]`` actions and, for
    them, the observations, next observations (final ones where an episode ended), rewards and
    flags of a second env stepped by hand; the two static output sets taken in turn keep a
    step's observation intact while the next step writes."""
    from gpu_trading_env.data.portfolio_markets import ar1_portfolio
    from gpu_trading_env.portfolio_env import PortfolioVectorEnv

    n, k, steps = 16, 4, 30
    kw = dict(num_envs=n, device="cpu", data=ar1_portfolio(400, k), episode_length=10)
    env = PortfolioVectorEnv(**kw, autoreset_mode="same_step")
    env.reset(seed=7)
    model = GpuDQN(
        "DuelingPolicy",
        env,
        buffer_size=n * (steps + 5),
        learning_starts=0,
        policy_kwargs={"net_arch": SMALL_ARCH},
        seed=0,
        device="cpu",
    )
    ro = CpuPortfolioRollout(model, seed=3, cuda_graph=False)
    assert (ro.n_actions, ro.branch_shape) == (3, (k,))
    for t in range(steps):
        ro.step(0.3, random_only=t == 12)
    ended, episodes = ro.ring.drain()
    assert ended == 3 * n and all(e["l"] == 10 for e in episodes)

    ref = PortfolioVectorEnv(**kw, autoreset_mode="same_step")
    obs = th.from_numpy(ref.reset(seed=7)[0])
    buf = model.replay_buffer
    for t in range(steps):
        new_obs, reward, terminated, truncated, info = ref.step(buf.actions[t].numpy())
        new_obs, done = th.from_numpy(new_obs), th.from_numpy(terminated | truncated)
        final = th.from_numpy(info["final_obs"]) if "final_obs" in info else new_obs
        assert th.equal(buf.observations[t], obs), t
        assert th.equal(buf.next_observations[t], th.where(done[:, None], final, new_obs)), t
        assert th.equal(buf.rewards[t], th.from_numpy(reward)), t
        assert th.equal(buf.dones[t], done.float()), t
        assert th.equal(buf.timeouts[t], th.from_numpy(truncated & ~terminated).float()), t
        obs = new_obs
    assert float(buf.timeouts[:steps].sum()) == 3 * n
