"""PrioritizedReplayBuffer: SB3 contract, priorities, weights, timeouts; CPU and GPU tiers."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from stable_baselines3 import DQN
from stable_baselines3.common.buffers import ReplayBuffer
from stable_baselines3.common.evaluation import evaluate_policy

from agents import PrioritizedReplayBuffer
from agents.replay.prioritized_buffer import BetaAnnealingCallback, PrioritizedReplayBufferSamples

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
OBS = spaces.Box(-10.0, 10.0, shape=(3,), dtype=np.float32)
ACT = spaces.Discrete(4)


def _buffer(device, size=100, n_envs=2, **kwargs) -> PrioritizedReplayBuffer:
    return PrioritizedReplayBuffer(size, OBS, ACT, device=device, n_envs=n_envs, **kwargs)


def _fill(buf: PrioritizedReplayBuffer, steps: int, start: int = 0) -> None:
    e = buf.n_envs
    for t in range(start, start + steps):
        obs = np.full((e, 3), t, dtype=np.float32) + np.arange(e)[:, None] * 0.1
        buf.add(
            obs,
            obs + 1000,
            np.arange(e) % 4,
            np.full(e, float(t)),
            np.ones(e) if t % 5 == 4 else np.zeros(e),
            [{"TimeLimit.truncated": (t % 10 == 9) and i == 0} for i in range(e)],
        )


@pytest.mark.parametrize("device", DEVICES)
def test_is_an_sb3_replay_buffer_with_device_storage(device):
    buf = _buffer(device, size=100, n_envs=2)
    assert isinstance(buf, ReplayBuffer)
    assert buf.buffer_size == 50 and buf.tree.capacity == 100
    assert buf.observations.shape == (50, 2, 3) and buf.observations.dtype == th.float32
    assert buf.actions.shape == (50, 2, 1) and buf.actions.dtype == th.int64
    for name in ("rewards", "dones", "timeouts"):
        t = getattr(buf, name)
        assert t.shape == (50, 2) and t.dtype == th.float32
    assert buf.observations.device.type == device
    assert buf.tree.backend == ("numpy" if device == "cpu" else "cuda")


@pytest.mark.parametrize("device", DEVICES)
def test_sample_shapes_dtypes_and_contents(device):
    buf = _buffer(device, size=100, n_envs=2)
    _fill(buf, 30)
    s = buf.sample(64)
    assert isinstance(s, PrioritizedReplayBufferSamples)
    assert s.observations.shape == s.next_observations.shape == (64, 3)
    assert s.actions.shape == (64, 1) and s.actions.dtype == th.int64
    assert s.dones.shape == s.rewards.shape == s.weights.shape == (64, 1)
    assert s.dones.dtype == s.rewards.dtype == s.weights.dtype == th.float32
    assert s.indices.shape == (64,) and s.indices.dtype == th.int64
    assert s.discounts is None
    for t in (s.observations, s.actions, s.weights, s.indices):
        assert t.device.type == device
    idx = s.indices.cpu().numpy()
    row, env = idx // 2, idx % 2
    assert np.all(row < 30)
    np.testing.assert_allclose(s.observations[:, 0].cpu().numpy(), row + 0.1 * env, rtol=1e-6)
    np.testing.assert_allclose(
        s.next_observations.cpu().numpy(), s.observations.cpu().numpy() + 1000
    )
    np.testing.assert_array_equal(s.rewards[:, 0].cpu().numpy(), row)
    np.testing.assert_array_equal(s.actions[:, 0].cpu().numpy(), env % 4)
    # All priorities equal (max priority 1): every weight is 1.
    np.testing.assert_array_equal(s.weights.cpu().numpy(), 1.0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("handle", [True, False])
def test_dones_exclude_timeouts(device, handle):
    buf = _buffer(device, size=40, n_envs=2, handle_timeout_termination=handle)
    _fill(buf, 20)
    s = buf._get_samples(np.arange(40))
    idx = np.arange(40)
    t, env = idx // 2, idx % 2
    done = (t % 5 == 4).astype(np.float32)
    timeout = ((t % 10 == 9) & (env == 0)).astype(np.float32)
    expected = done * (1 - timeout) if handle else done
    np.testing.assert_array_equal(s.dones[:, 0].cpu().numpy(), expected)
    assert expected.sum() < done.sum() or not handle


@pytest.mark.parametrize("int64_actions", [True, False])
@pytest.mark.parametrize("device", DEVICES)
def test_add_tensors_matches_add(device, int64_actions):
    """``add``, ``add_tensors`` and the graph's ``add_tensors_at`` (slot on the device) store
    the same transitions and priorities, across the wrap-around; on CUDA through the store
    kernel (int64 actions) and through the torch path (int32 actions, which it casts)."""
    a, b = _buffer(device, size=60, n_envs=3), _buffer(device, size=60, n_envs=3)
    c = _buffer(device, size=60, n_envs=3)
    if device == "cpu":  # the NumPy tree has no device-start fill: read the start the same way
        c.tree.fill_range_at = lambda ptr, n: c.tree.fill_range(int(c._fill_start[0]), n)
    slot = th.zeros(1, dtype=th.int64, device=device)
    kernel_calls = []
    if c._step_store is not None:  # count the store kernel's launches

        class Counting:
            def __init__(self, store):
                self.store = store

            def __call__(self, *args):
                kernel_calls.append(1)
                return self.store(*args)

        c._step_store = Counting(c._step_store)
    rng = np.random.default_rng(0)
    for _ in range(25):  # wraps around (20 rows)
        obs = rng.normal(size=(3, 3)).astype(np.float32)
        nxt = rng.normal(size=(3, 3)).astype(np.float32)
        act = rng.integers(0, 4, size=3).astype(np.int64 if int64_actions else np.int32)
        rew = rng.normal(size=3).astype(np.float32)
        term = rng.random(3) < 0.3
        trunc = rng.random(3) < 0.3
        a.add(
            obs,
            nxt,
            act,
            rew,
            term | trunc,
            [
                {"TimeLimit.truncated": bool(tr and not te)}
                for te, tr in zip(term, trunc, strict=True)
            ],
        )
        dev = th.device(device)
        step = [th.as_tensor(x, device=dev) for x in (obs, nxt, act, rew, term, trunc)]
        b.add_tensors(*step)
        c.add_tensors_at(slot, *step)
        c.advance_position()
        assert int(slot[0]) == c.pos  # the device slot moved with the host's position
    assert len(kernel_calls) == (25 if device != "cpu" and int64_actions else 0)
    for name in ("observations", "next_observations", "actions", "rewards", "dones", "timeouts"):
        assert th.equal(getattr(a, name), getattr(b, name)), name
        assert th.equal(getattr(a, name), getattr(c, name)), name
    assert a.pos == b.pos == c.pos == 5 and a.full and b.full and c.full
    np.testing.assert_array_equal(a.tree.leaves(), b.tree.leaves())
    np.testing.assert_array_equal(a.tree.leaves(), c.tree.leaves())


@pytest.mark.parametrize("device", DEVICES)
def test_priorities_drive_sampling_and_weights(device):
    alpha, eps, beta = 0.7, 1e-3, 0.5
    buf = _buffer(device, size=200, n_envs=1, alpha=alpha, epsilon=eps, beta=beta, seed=3)
    _fill(buf, 200)
    rng = np.random.default_rng(1)
    td = rng.uniform(0.0, 2.0, size=200).astype(np.float32)
    td[17] = 500.0
    buf.update_priorities(th.arange(200), th.as_tensor(td))
    p = (td.astype(np.float64) + eps) ** alpha
    np.testing.assert_allclose(buf.tree.leaves(), p, rtol=1e-12)
    assert buf.max_priority == pytest.approx(p.max(), rel=1e-12)
    s = buf.sample(1000)
    idx = s.indices.cpu().numpy()
    assert (idx == 17).mean() > 0.2  # 500**0.7 dominates the total
    prob = p / p.sum()
    w = (200 * prob[idx]) ** -beta / ((200 * prob) ** -beta).max()
    np.testing.assert_allclose(s.weights[:, 0].cpu().numpy(), w, rtol=1e-6)
    # New transitions get the running max priority.
    _fill(buf, 1, start=500)
    assert buf.tree.leaves()[0] == pytest.approx(p.max(), rel=1e-12)


@pytest.mark.parametrize("device", DEVICES)
def test_update_priorities_repeated_indices_last_wins(device):
    buf = _buffer(device, size=10, n_envs=1, alpha=1.0, epsilon=1e-6)
    _fill(buf, 10)
    buf.update_priorities(np.array([3, 3, 5, 3]), np.array([1.0, 2.0, 4.0, 8.0]))
    leaves = buf.tree.leaves()
    assert leaves[3] == pytest.approx(8.0 + 1e-6) and leaves[5] == pytest.approx(4.0 + 1e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("indices", "td", "match"),
    [
        ([0, 1], [0.5, float("nan")], r"td_errors\[1\] = nan"),
        ([0, 1], [float("inf"), 0.5], r"td_errors\[0\] = inf"),
        ([0, 1], [0.5, -0.25], r"td_errors\[1\] = -0.25"),
        ([0, 25], [0.5, 0.5], r"indices\[1\] = 25 is out of range.*< 20"),
    ],
)
def test_bad_td_errors_rejected(device, indices, td, match):
    buf = _buffer(device, size=40, n_envs=2)
    _fill(buf, 10)  # 20 filled slots
    before = buf.tree.leaves()
    for make in (np.asarray, th.as_tensor):
        with pytest.raises(ValueError, match=match):
            buf.update_priorities(make(indices), make(td))
    np.testing.assert_array_equal(buf.tree.leaves(), before)


@pytest.mark.parametrize("device", DEVICES)
def test_sampled_indices_filled_after_wraparound(device):
    buf = _buffer(device, size=777, n_envs=1, seed=1)
    rng = np.random.default_rng(5)
    total = 0
    for steps in (100, 400, 500, 777, 300):
        _fill(buf, steps, start=total)
        total += steps
        s = buf.sample(2048)
        idx = s.indices.cpu().numpy()
        assert np.all(idx < buf.size())
        assert np.all(buf.tree.leaves()[idx] > 0)
        buf.update_priorities(s.indices, th.as_tensor(rng.exponential(size=2048)))


@pytest.mark.parametrize("device", DEVICES)
def test_beta_schedules(device):
    buf = _buffer(device, beta=0.4)
    assert buf.beta == pytest.approx(0.4)
    buf.set_progress(0.5)
    assert buf.beta == pytest.approx(0.7)
    buf.set_progress(0.0)
    assert buf.beta == pytest.approx(1.0)
    with pytest.raises(ValueError, match="progress_remaining"):
        buf.set_progress(1.5)
    buf2 = _buffer(device, beta=lambda p: 0.2 * p)
    buf2.set_progress(0.5)
    assert buf2.beta == pytest.approx(0.1)
    buf3 = _buffer(device, beta=lambda p: 2.0)
    with pytest.raises(ValueError, match="beta"):
        _ = buf3.beta


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"alpha": -0.1}, "alpha must be a finite number >= 0, got -0.1"),
        ({"epsilon": 0.0}, "epsilon must be a finite number > 0, got 0.0"),
        ({"beta": 1.5}, r"beta must be a number in \[0, 1\] or a callable, got 1.5"),
        (
            {"optimize_memory_usage": True, "handle_timeout_termination": False},
            "optimize_memory_usage",
        ),
    ],
)
def test_constructor_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        _buffer("cpu", **kwargs)
    with pytest.raises(ValueError, match="buffer_size"):
        PrioritizedReplayBuffer(0, OBS, ACT, device="cpu")


def test_empty_buffer_sample_raises():
    with pytest.raises(ValueError, match="empty"):
        _buffer("cpu").sample(4)


def test_reset_clears_priorities():
    buf = _buffer("cpu")
    _fill(buf, 10)
    buf.reset()
    assert buf.size() == 0 and buf.tree.total() == 0.0


@pytest.mark.parametrize("device", DEVICES)
def test_sb3_constructs_it_with_kwargs(device):
    model = DQN(
        "MlpPolicy",
        "CartPole-v1",
        buffer_size=1000,
        replay_buffer_class=PrioritizedReplayBuffer,
        replay_buffer_kwargs=dict(alpha=0.5, beta=0.6, epsilon=1e-4),
        learning_starts=50,
        device=device,
        seed=0,
    )
    buf = model.replay_buffer
    assert isinstance(buf, PrioritizedReplayBuffer)
    assert (buf.alpha, buf.epsilon, buf.beta) == (0.5, 1e-4, 0.6)
    model.learn(200, callback=BetaAnnealingCallback())
    assert buf.size() == 200 and buf.beta > 0.6
    assert math.isfinite(model.logger.name_to_value.get("train/loss", 0.0))


@pytest.mark.usefixtures("one_torch_thread")
def test_plain_sb3_dqn_learns_cartpole_with_it():
    """Plain SB3 DQN (no priority updates) with the buffer as replay_buffer_class learns.

    RL Zoo's CartPole settings, with a 64-64 network for its 256-256 and 8,000 steps: the
    greedy policy scored 151, 90, 192, 164 and 158 under seeds 1 to 5 (10 under seed 1 with each
    sampled transition given another's next observation)."""
    env = gym.make("CartPole-v1")
    model = DQN(
        "MlpPolicy",
        env,
        learning_rate=2.3e-3,
        batch_size=64,
        buffer_size=100_000,
        learning_starts=1000,
        gamma=0.99,
        target_update_interval=10,
        train_freq=256,
        gradient_steps=128,
        exploration_fraction=0.16,
        exploration_final_eps=0.04,
        policy_kwargs=dict(net_arch=[64, 64]),
        replay_buffer_class=PrioritizedReplayBuffer,
        replay_buffer_kwargs=dict(alpha=0.6, beta=0.4),
        device="cpu",
        seed=1,
    )
    model.learn(8_000)
    assert math.isfinite(model.logger.name_to_value["train/loss"])
    eval_env = gym.make("CartPole-v1")
    eval_env.reset(seed=0)
    mean_reward, _ = evaluate_policy(model, eval_env, n_eval_episodes=10)
    assert mean_reward > 80, mean_reward  # a random policy scores about 22
