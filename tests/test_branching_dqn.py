"""GpuDQN on MultiDiscrete action spaces: the Branching Dueling Q-Network's head, its
mean-of-branches double-DQN target and loss, priorities, files, and learning on a bandit of K
independent signs whose optimum is known."""

from __future__ import annotations

import itertools

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from eager_captured_parity import assert_steps_agree, copy_training_state
from gymnasium import spaces
from stable_baselines3.common.vec_env import DummyVecEnv
from torch import nn

from agents import DuelingDQNPolicy, GpuDQN
from agents.algorithm.dqn_loss import taken_q, td_target, weighted_td_loss
from agents.algorithm.policies import BranchingDuelingQNetwork, BranchLinear

pytestmark = pytest.mark.usefixtures("one_torch_thread")

K, L = 4, 3
SMALL_ARCH = {"shared": [64], "value": [32], "advantage": [32]}


class SignBandit(gym.Env):
    """One-step episodes: the observation is K independent signs ``s_d`` in {-1, +1}, the action
    an exposure level per sign (``MultiDiscrete([L] * K)``, levels ``linspace(-1, 1, L)``), the
    reward ``sum_d exposure(a_d) * s_d``. Best: the top level where ``s_d > 0``, level 0
    elsewhere, reward K."""

    def __init__(self, k: int = K, levels: int = L) -> None:
        self.k = k
        self.observation_space = spaces.Box(-1.0, 1.0, (k,), np.float32)
        self.action_space = spaces.MultiDiscrete([levels] * k)
        self.exposure = np.linspace(-1.0, 1.0, levels)
        self.signs = np.ones(k, dtype=np.float32)

    def reset(self, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.signs = self.np_random.choice([-1.0, 1.0], size=self.k).astype(np.float32)
        return self.signs, {}

    def step(self, action):
        reward = float(np.sum(self.exposure[np.asarray(action)] * self.signs))
        return self.signs, reward, True, False, {}


def bandit_env(n_envs: int = 8) -> DummyVecEnv:
    return DummyVecEnv([SignBandit for _ in range(n_envs)])


def make_model(env=None, **kwargs) -> GpuDQN:
    """GpuDQN with the sign bandit's settings (test_gpu_dqn.py's make_model holds the trading
    env's: the two share the pattern, not a value)."""
    params = dict(
        learning_starts=200,
        train_freq=1,
        gradient_steps=2,
        batch_size=128,
        buffer_size=10_000,
        target_update_interval=200,
        exploration_fraction=0.3,
        learning_rate=3e-3,
        policy_kwargs={"net_arch": SMALL_ARCH},
        seed=0,
        device="cpu",
    )
    params.update(kwargs)
    return GpuDQN("DuelingPolicy", env if env is not None else bandit_env(), **params)


def all_sign_patterns(k: int = K) -> np.ndarray:
    return np.array(list(itertools.product([-1.0, 1.0], repeat=k)), dtype=np.float32)


def best_actions(signs: np.ndarray) -> np.ndarray:
    return np.where(signs > 0, L - 1, 0).astype(np.int64)


class FixedBranchQ(nn.Module):
    """Returns a fixed ``[B, K, L]`` Q-table whatever the observation."""

    def __init__(self, q: np.ndarray) -> None:
        super().__init__()
        self.q = th.as_tensor(q, dtype=th.float32)

    def forward(self, obs: th.Tensor) -> th.Tensor:
        return self.q[: obs.shape[0]]


# -- the head ------------------------------------------------------------------------------------
def test_head_shapes_and_dueling_identity() -> None:
    model = make_model()
    net = model.q_net
    assert isinstance(net, BranchingDuelingQNetwork)
    assert isinstance(model.q_net_target, BranchingDuelingQNetwork)
    assert (net.n_branches, net.n_levels) == (K, L)
    obs = th.as_tensor(all_sign_patterns())
    q = net(obs)
    assert q.shape == (16, K, L) and q.dtype == th.float32
    value, adv = net.value_and_advantage(obs)
    assert value.shape == (16, 1) and adv.shape == (16, K, L)
    # Q_d(s, a) = V(s) + A_d(s, a) - mean_a A_d(s, a): the mean over each branch's actions is V.
    th.testing.assert_close(q, value.unsqueeze(-1) + adv - adv.mean(dim=2, keepdim=True))
    th.testing.assert_close(q.mean(dim=2), value.expand(16, K))
    # Each branch has its own advantage weights: changing branch 0's leaves the others.
    last = net.advantage_head[-1]
    assert isinstance(last, BranchLinear) and last.weight.shape == (
        K,
        L,
        SMALL_ARCH["advantage"][0],
    )
    with th.no_grad():
        last.weight[0] += 1.0
        q2 = net(obs)
    th.testing.assert_close(q2[:, 1:], q[:, 1:])
    assert not th.allclose(q2[:, 0], q[:, 0])
    # Actions: [N, K] for a batch, [K] for one observation, each branch's argmax.
    actions, _ = model.predict(obs.numpy(), deterministic=True)
    assert actions.shape == (16, K)
    np.testing.assert_array_equal(actions, q2.argmax(dim=2).numpy())
    one, _ = model.predict(obs[0].numpy(), deterministic=True)
    assert one.shape == (K,)
    explored, _ = model.predict(obs.numpy(), deterministic=False)  # exploration rate 1 at start
    assert explored.shape == (16, K) and explored.min() >= 0 and explored.max() < L


def test_branch_linear_is_k_separate_linear_layers() -> None:
    th.manual_seed(0)
    layer = BranchLinear(3, 5, 2)
    x = th.randn(7, 3, 5)
    want = th.stack([x[:, d] @ layer.weight[d].T + layer.bias[d] for d in range(3)], dim=1)
    th.testing.assert_close(layer(x), want)


def test_default_arch_builds_the_branching_head_of_the_default_widths() -> None:
    model = GpuDQN("DuelingPolicy", bandit_env(2), seed=0, device="cpu", buffer_size=100)
    head = model.q_net.advantage_head
    assert head[0].out_features == K * 128 and head[-1].weight.shape == (K, L, 128)


@pytest.mark.parametrize(
    ("space", "field"),
    [
        (spaces.MultiDiscrete([3, 2]), "nvec"),
        (spaces.MultiDiscrete([3, 3], start=[1, 1]), "start"),
        (spaces.MultiDiscrete([[3, 3], [3, 3]]), "nvec"),
        (spaces.MultiDiscrete([1, 1]), "nvec"),
    ],
)
def test_unsupported_multidiscrete_spaces_are_refused(space, field: str) -> None:
    env = SignBandit(2)
    env.action_space = space
    with pytest.raises(ValueError, match=f"action_space.{field}"):
        GpuDQN("DuelingPolicy", env, device="cpu", buffer_size=100)


def test_policies_without_a_branching_form_are_refused() -> None:
    with pytest.raises(ValueError, match="policy = 'DQNPolicy'.*allowed is 'DuelingPolicy'"):
        GpuDQN("MlpPolicy", bandit_env(2), device="cpu", buffer_size=100)
    with pytest.raises(ValueError, match="curiosity = True is invalid"):
        GpuDQN("DuelingPolicy", bandit_env(2), device="cpu", buffer_size=100, curiosity=True)


# -- target, loss, priorities --------------------------------------------------------------------
def numpy_reference(q_online, q_next_online, q_next_target, actions, rewards, dones, gamma, w):
    """The BDQ "mean" target, loss and priorities by hand, one transition at a time."""
    b, k, _ = q_online.shape
    targets, losses, priorities = [], [], []
    for i in range(b):
        branch_next = [q_next_target[i, d, int(np.argmax(q_next_online[i, d]))] for d in range(k)]
        y = rewards[i] + gamma * (1.0 - dones[i]) * sum(branch_next) / k
        huber = []
        errors = []
        for d in range(k):
            delta = q_online[i, d, actions[i, d]] - y
            huber.append(0.5 * delta**2 if abs(delta) < 1.0 else abs(delta) - 0.5)
            errors.append(abs(delta))
        targets.append(y)
        losses.append(w[i] * sum(huber) / k)
        priorities.append(sum(errors) / k)
    return np.array(targets), sum(losses) / b, np.array(priorities)


def test_target_loss_and_priorities_match_a_hand_computation() -> None:
    rng = np.random.default_rng(3)
    b = 5
    q_online = rng.normal(0, 2, (b, K, L))
    q_next_online = rng.normal(0, 2, (b, K, L))
    q_next_target = rng.normal(0, 2, (b, K, L))
    actions = rng.integers(0, L, (b, K))
    rewards = rng.normal(0, 1, b)
    dones = np.array([0.0, 1.0, 0.0, 0.0, 1.0])
    w = rng.uniform(0.2, 1.0, b)
    gamma = 0.9
    y_ref, loss_ref, prio_ref = numpy_reference(
        q_online, q_next_online, q_next_target, actions, rewards, dones, gamma, w
    )

    def t(x, dtype=th.float64):
        return th.as_tensor(np.asarray(x), dtype=dtype)

    y = td_target(
        t(rewards).reshape(-1, 1),
        t(dones).reshape(-1, 1),
        gamma,
        t(q_next_target),
        t(q_next_online),
    )
    np.testing.assert_allclose(y.numpy().reshape(-1), y_ref, rtol=1e-12)
    q = taken_q(t(q_online).requires_grad_(), t(actions, th.int64))
    assert q.shape == (b, K)
    loss, td = weighted_td_loss(q, y, t(w))
    np.testing.assert_allclose(float(loss), loss_ref, rtol=1e-12)
    np.testing.assert_allclose(td.numpy(), prio_ref, rtol=1e-12)
    assert td.shape == (b,) and not td.requires_grad
    # Without double DQN: the target network's max in each branch, averaged.
    y_max = td_target(
        t(rewards).reshape(-1, 1), t(dones).reshape(-1, 1), gamma, t(q_next_target), None
    )
    want = rewards + gamma * (1 - dones) * q_next_target.max(axis=2).mean(axis=1)
    np.testing.assert_allclose(y_max.numpy().reshape(-1), want, rtol=1e-12)


def test_model_target_uses_online_argmax_and_target_values_per_branch() -> None:
    model = make_model(env=bandit_env(2), gamma=0.5)
    online = np.zeros((2, 2, 3))
    online[0] = [[0, 5, 1], [9, 0, 0]]  # picks 1 and 0
    online[1] = [[0, 0, 7], [0, 3, 0]]  # picks 2 and 1
    target = np.arange(12, dtype=float).reshape(2, 2, 3) * 10  # rates them 10, 30 / 80, 100
    model.q_net = FixedBranchQ(online)
    model.q_net_target = FixedBranchQ(target)
    got = model.compute_td_target(th.tensor([[1.0], [2.0]]), th.zeros(2, K), th.zeros(2, 1))
    th.testing.assert_close(got, th.tensor([[1.0 + 0.5 * 20.0], [2.0 + 0.5 * 90.0]]))


def test_train_step_loss_and_priorities_are_the_hand_computed_ones() -> None:
    model = make_model(learning_rate=0.0, max_grad_norm=1e9, gamma=0.7)
    model.learning_starts = 10**9
    model.learn(400)  # fills the buffer, no training
    buffer = model.replay_buffer
    assert buffer.actions.shape == (buffer.buffer_size, 8, K) and buffer.actions.dtype == th.int64
    assert int(buffer.actions.min()) >= 0 and int(buffer.actions.max()) < L
    batch = buffer.sample(16)
    assert batch.actions.shape == (16, K)
    weights = th.linspace(0.3, 1.0, 16).reshape(-1, 1)
    batch = batch._replace(weights=weights)
    with th.no_grad():
        q_online = model.q_net(batch.observations).numpy()
        q_next_online = model.q_net(batch.next_observations).numpy()
        q_next_target = model.q_net_target(batch.next_observations).numpy()
    _, loss_ref, prio_ref = numpy_reference(
        q_online.astype(np.float64),
        q_next_online.astype(np.float64),
        q_next_target.astype(np.float64),
        batch.actions.numpy(),
        batch.rewards.numpy().reshape(-1).astype(np.float64),
        batch.dones.numpy().reshape(-1).astype(np.float64),
        0.7,
        weights.numpy().reshape(-1).astype(np.float64),
    )
    buffer.sample = lambda batch_size, env=None: batch
    model.train(gradient_steps=1, batch_size=16)
    assert model.logger.name_to_value["train/loss"] == pytest.approx(loss_ref, rel=1e-5)
    assert model.logger.name_to_value["train/mean_td_error"] == pytest.approx(
        prio_ref.mean(), rel=1e-5
    )
    leaves = buffer.tree.leaves()[batch.indices.numpy()]
    want = (prio_ref + buffer.epsilon) ** buffer.alpha
    np.testing.assert_allclose(leaves, want, rtol=1e-5)


# -- files ----------------------------------------------------------------------------------------
def test_save_load_round_trip_predicts_the_same_actions(tmp_path) -> None:
    model = make_model()
    model.learn(1_000)
    obs = all_sign_patterns()
    q_before = model.q_net(th.as_tensor(obs)).detach()
    actions, _ = model.predict(obs, deterministic=True)
    path = tmp_path / "bdq.zip"
    model.save(path)
    loaded = GpuDQN.load(path, device="cpu")
    assert isinstance(loaded.policy, DuelingDQNPolicy)
    assert isinstance(loaded.q_net, BranchingDuelingQNetwork)
    assert loaded.action_space == model.action_space
    th.testing.assert_close(loaded.q_net(th.as_tensor(obs)).detach(), q_before)
    again, _ = loaded.predict(obs, deterministic=True)
    np.testing.assert_array_equal(again, actions)
    # A loaded model learns on as before, and refuses an env of other branches.
    loaded.set_env(bandit_env())
    loaded.learn(200)
    with pytest.raises(ValueError, match="this model acts on"):
        loaded.set_env(DummyVecEnv([lambda: SignBandit(K, L + 1)]))


def test_replay_buffer_round_trip_and_out_of_range_actions_refused(tmp_path) -> None:
    from agents.files.safe_archive import ArchiveError

    model = make_model()
    model.learning_starts = 10**9
    model.learn(300)
    model.save_replay_buffer(tmp_path / "buffer")
    other = make_model()
    other.load_replay_buffer(tmp_path / "buffer")
    assert th.equal(other.replay_buffer.actions, model.replay_buffer.actions)
    model.replay_buffer.actions[3, 1, 2] = L  # one level past the last, in branch 2
    model.save_replay_buffer(tmp_path / "bad")
    with pytest.raises(ArchiveError, match=r"actions hold values outside 0\.\.2 in dimension 2"):
        other.load_replay_buffer(tmp_path / "bad")


# -- learning -------------------------------------------------------------------------------------
def test_learns_each_branch_best_action_on_the_sign_bandit() -> None:
    model = make_model()
    model.learn(8_000)
    signs = all_sign_patterns()
    actions, _ = model.predict(signs, deterministic=True)
    np.testing.assert_array_equal(actions, best_actions(signs))
    # The greedy policy earns the optimum K on every pattern.
    env = SignBandit()
    rewards = [env.step(a)[1] for env.signs, a in zip(signs, actions, strict=True)]
    assert np.allclose(rewards, K)


def test_sb3_vec_env_passes_multidiscrete_actions_through() -> None:
    from gymnasium.vector import AutoresetMode, SyncVectorEnv

    from gpu_trading_env.integrations.sb3_vec_env import SB3VecEnv

    venv = SyncVectorEnv([SignBandit for _ in range(3)], autoreset_mode=AutoresetMode.SAME_STEP)
    env = SB3VecEnv(venv)
    assert env.action_space == spaces.MultiDiscrete([L] * K)
    env.seed(5)
    obs = env.reset()
    actions = best_actions(obs)
    _, rewards, dones, _ = env.step(list(actions.reshape(-1)))  # N * K values, as [N, K]
    np.testing.assert_allclose(rewards, K)
    assert dones.all()
    model = make_model(env=SB3VecEnv(venv))
    model.learn(300)
    assert model.replay_buffer.actions.shape[1:] == (3, K)


def test_short_learn_on_the_portfolio_env() -> None:
    pytest.importorskip("gpu_trading_env.portfolio_env")
    env = gym.make_vec("GpuPortfolio-v0", num_envs=8, device="cpu")
    space = env.single_action_space
    assert isinstance(space, spaces.MultiDiscrete)
    model = make_model(env=env, train_freq=4, gradient_steps=1, batch_size=64, learning_starts=100)
    assert isinstance(model.q_net, BranchingDuelingQNetwork)
    assert model.q_net.n_branches == len(space.nvec)
    model.learn(2_000)
    assert model._n_updates > 0
    model.train(gradient_steps=2, batch_size=64)
    logged = model.logger.name_to_value
    assert np.isfinite(logged["train/loss"]) and np.isfinite(logged["train/mean_td_error"])
    obs, _ = env.reset(seed=1)
    actions, _ = model.predict(obs, deterministic=True)
    assert actions.shape == (8, len(space.nvec)) and all(space.contains(a) for a in actions)


# -- GPU ------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_captured_train_step_learns_the_sign_bandit_on_cuda() -> None:
    model = make_model(device="cuda", learning_starts=200)
    model.learn(8_000)
    step = model.captured_train_step
    assert step is not None and step.graph is not None and not step.graph_failed
    signs = all_sign_patterns()
    actions, _ = model.predict(signs, deterministic=True)
    np.testing.assert_array_equal(actions, best_actions(signs))


@pytest.mark.gpu
def test_captured_and_eager_steps_agree_on_cuda() -> None:
    """Ten gradient steps (fp32 products); before each, the captured model takes the eager
    one's state, so both sample the same batch from the same weights; after each, the weights
    and the priorities agree (the graph replays from the third step on)."""
    prev = th.backends.cuda.matmul.allow_tf32
    th.backends.cuda.matmul.allow_tf32 = False
    try:
        models = []
        for captured in (False, True):
            model = make_model(
                device="cuda",
                captured_train=captured,
                train_precision="fp32",
                learning_rate=1e-3,
                replay_buffer_kwargs={"seed": 3},
            )
            model.learning_starts = 10**9
            model.learn(400)  # the same seeded random transitions in both buffers
            models.append(model)
        eager, captured = models
        np.testing.assert_array_equal(
            eager.replay_buffer.actions.cpu().numpy(), captured.replay_buffer.actions.cpu().numpy()
        )
        for k in range(10):
            if k > 0:
                copy_training_state(eager, captured)
            for m in (eager, captured):
                m.train(gradient_steps=1, batch_size=128)
            assert_steps_agree(eager, captured, k)
    finally:
        th.backends.cuda.matmul.allow_tf32 = prev
    step = captured.captured_train_step
    assert eager.captured_train_step is None and step is not None and step.graph is not None
    step.read_stats()
    assert np.isfinite(step.last_loss) and step.last_td > 0
