"""GpuDQN on the NumPy trading env: PER loss, double-DQN target, truncation, exploration,
dueling policy, curiosity, save/load."""

from __future__ import annotations

import math
import sys
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from stable_baselines3.common.buffers import ReplayBuffer
from stable_baselines3.common.type_aliases import TrainFreq, TrainFrequencyUnit
from torch import nn
from torch.nn import functional as F

import gpu_trading_env  # noqa: F401  (registers GpuTrading-v0)
from agents import CuriosityModel, DuelingDQNPolicy, GpuDQN, PrioritizedReplayBuffer
from agents.algorithm.policies import DuelingQNetwork
from gpu_trading_env import TradingVectorEnv
from gpu_trading_env.core.config import EnvConfig, action_table
from gpu_trading_env.integrations.sb3_vec_env import SB3VecEnv

# The source design's env (45 actions, barriers, penalties): all of the step is exercised.
SOURCE = EnvConfig.source_design()

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def make_env(num_envs: int = 16, episode_length: int = 100) -> TradingVectorEnv:
    return gym.make_vec(
        "GpuTrading-v0",
        num_envs=num_envs,
        device="cpu",
        episode_length=episode_length,
        config=SOURCE,
    )


def make_model(env=None, **kwargs) -> GpuDQN:
    params = dict(
        learning_starts=200,
        train_freq=4,
        batch_size=64,
        buffer_size=20_000,
        target_update_interval=500,
        seed=0,
        device="cpu",
    )
    params.update(kwargs)
    return GpuDQN("DuelingPolicy", env if env is not None else make_env(), **params)


def fill_buffer(model: GpuDQN, steps: int) -> None:
    """Collect transitions without training (learning never starts)."""
    model.learning_starts = 10**9
    model.learn(steps)


@pytest.fixture(scope="module")
def trained() -> GpuDQN:
    model = make_model()
    model.learn(3_000)
    return model


def test_learn_builds_the_sb3_parts_and_trains_with_finite_loss(trained: GpuDQN) -> None:
    assert isinstance(trained.env, SB3VecEnv)
    assert isinstance(trained.trading_env, TradingVectorEnv)
    assert isinstance(trained.policy, DuelingDQNPolicy)
    assert isinstance(trained.replay_buffer, PrioritizedReplayBuffer)
    assert trained.replay_buffer.alpha == 0.6 and trained.replay_buffer.epsilon == 1e-6
    assert trained.num_timesteps >= 3_000 and trained._n_updates > 0
    assert len(trained.ep_info_buffer) > 0
    trained.train(gradient_steps=2, batch_size=64)
    logged = trained.logger.name_to_value
    assert math.isfinite(logged["train/loss"]) and math.isfinite(logged["train/mean_td_error"])
    assert 0.4 <= logged["train/per_beta"] <= 1.0
    assert trained.replay_buffer.beta > 0.4  # annealed with progress


def test_save_load_gives_identical_q_values(trained: GpuDQN, tmp_path) -> None:
    path = tmp_path / "gpu_dqn.zip"
    trained.save(path)
    obs = th.as_tensor(trained.replay_buffer.observations[:4].reshape(-1, 54))
    loaded = GpuDQN.load(path, device="cpu")
    assert isinstance(loaded.policy, DuelingDQNPolicy)
    assert loaded.double_q and loaded.trading_env is None
    with th.no_grad():
        th.testing.assert_close(loaded.q_net(obs), trained.q_net(obs), rtol=0, atol=0)
        th.testing.assert_close(loaded.q_net_target(obs), trained.q_net_target(obs))
    reloaded = GpuDQN.load(path, env=make_env(), device="cpu")
    assert isinstance(reloaded.trading_env, TradingVectorEnv)
    reloaded.learn(64)


def test_mlp_policy_and_plain_replay_buffer() -> None:
    model = GpuDQN(
        "MlpPolicy",
        make_env(4),
        learning_starts=32,
        batch_size=16,
        replay_buffer_class=ReplayBuffer,
        buffer_size=2_000,
        seed=0,
        device="cpu",
    )
    model.learn(256)
    model.train(gradient_steps=1, batch_size=16)
    assert math.isfinite(model.logger.name_to_value["train/loss"])
    assert "train/per_beta" not in model.logger.name_to_value


def test_loss_uses_importance_weights_and_updates_priorities() -> None:
    model = make_model(learning_rate=0.0, max_grad_norm=1e9)
    fill_buffer(model, 512)
    buffer = model.replay_buffer
    batch = buffer.sample(8)
    with th.no_grad():
        target = model.compute_td_target(batch.rewards, batch.next_observations, batch.dones)
        q = th.gather(model.q_net(batch.observations), 1, batch.actions.long())
    elementwise = F.smooth_l1_loss(q, target, reduction="none").reshape(-1)

    def train_with(weights: th.Tensor) -> tuple[float, list[th.Tensor]]:
        buffer.sample = lambda batch_size, env=None: batch._replace(weights=weights)
        model.train(gradient_steps=1, batch_size=8)
        grads = [p.grad.clone() for p in model.q_net.parameters()]
        return model.logger.name_to_value["train/loss"], grads

    one_hot = th.zeros(8, 1)
    one_hot[3] = 1.0
    loss_one, grads_one = train_with(one_hot)
    assert loss_one == pytest.approx(float(elementwise[3]) / 8, rel=1e-5)
    loss_all, _ = train_with(th.ones(8, 1))
    assert loss_all == pytest.approx(float(elementwise.mean()), rel=1e-5)

    # The gradient of the one-weight loss is the gradient of sample 3 alone.
    model.q_net.zero_grad()
    q3 = model.q_net(batch.observations[3:4])[0, batch.actions[3, 0].long()]
    (F.smooth_l1_loss(q3, target[3, 0]) / 8).backward()
    for got, p in zip(grads_one, model.q_net.parameters(), strict=True):
        th.testing.assert_close(got, p.grad, rtol=1e-4, atol=1e-7)

    # Priorities: all at the initial maximum before, |td| + epsilon (^alpha) after.
    fresh = make_model()
    fill_buffer(fresh, 512)
    filled = fresh.replay_buffer.size() * fresh.n_envs
    before = fresh.replay_buffer.tree.leaves()[:filled]
    assert np.all(before == before[0])
    fresh.train(gradient_steps=1, batch_size=64)
    after = fresh.replay_buffer.tree.leaves()[:filled]
    assert np.count_nonzero(after != before) > 0


class FixedQ(nn.Module):
    """Q-values looked up by the row id stored in observation dim 0."""

    def __init__(self, table: list[list[float]]) -> None:
        super().__init__()
        self.table = th.tensor(table)

    def forward(self, obs: th.Tensor) -> th.Tensor:
        return self.table[obs[:, 0].long()]


def test_double_dqn_target_on_hand_built_batch() -> None:
    model = make_model(env=make_env(2), gamma=0.5)
    model.q_net = FixedQ([[1.0, 5.0, 2.0], [3.0, 0.0, 1.0]])
    model.q_net_target = FixedQ([[10.0, 20.0, 30.0], [40.0, 50.0, 60.0]])
    rewards = th.tensor([[1.0], [2.0]])
    next_obs = th.tensor([[0.0], [1.0]])
    not_done = th.zeros(2, 1)
    # Online argmax picks actions 1 and 0; the target net rates them 20 and 40.
    th.testing.assert_close(
        model.compute_td_target(rewards, next_obs, not_done), th.tensor([[11.0], [22.0]])
    )
    th.testing.assert_close(
        model.compute_td_target(rewards, next_obs, th.tensor([[0.0], [1.0]])),
        th.tensor([[11.0], [2.0]]),
    )
    model.double_q = False  # the max of the target net: 30 and 60
    th.testing.assert_close(
        model.compute_td_target(rewards, next_obs, not_done), th.tensor([[16.0], [32.0]])
    )


def test_weighted_td_loss_on_hand_built_batch() -> None:
    from agents.algorithm.dqn_loss import weighted_td_loss

    q = th.tensor([[1.0], [0.0], [2.0]], requires_grad=True)
    target = th.tensor([[1.5], [3.0], [2.0]])
    # smooth_l1: 0.5 * 0.5**2 = 0.125 (quadratic), 3 - 0.5 = 2.5 (linear), 0.
    loss, td = weighted_td_loss(q, target, th.tensor([1.0, 0.5, 1.0]))
    th.testing.assert_close(loss, th.tensor((0.125 + 0.5 * 2.5) / 3))
    th.testing.assert_close(td, th.tensor([0.5, 3.0, 0.0]))
    assert not td.requires_grad
    unweighted, _ = weighted_td_loss(q, target)
    th.testing.assert_close(unweighted, th.tensor((0.125 + 2.5) / 3))


def test_truncation_bootstraps_termination_does_not() -> None:
    model = make_model(env=make_env(16, episode_length=20))
    fill_buffer(model, 2_000)
    buffer = model.replay_buffer
    n = buffer.size() * buffer.n_envs
    dones = buffer.dones.reshape(-1)[:n]
    timeouts = buffer.timeouts.reshape(-1)[:n]
    truncated = th.nonzero((dones == 1) & (timeouts == 1)).reshape(-1)
    terminated = th.nonzero((dones == 1) & (timeouts == 0)).reshape(-1)
    assert truncated.numel() > 0 and terminated.numel() > 0

    trunc_batch = buffer._get_samples(truncated)
    term_batch = buffer._get_samples(terminated)
    assert th.all(trunc_batch.dones == 0) and th.all(term_batch.dones == 1)
    with th.no_grad():
        y_trunc = model.compute_td_target(
            trunc_batch.rewards, trunc_batch.next_observations, trunc_batch.dones
        )
        y_term = model.compute_td_target(
            term_batch.rewards, term_batch.next_observations, term_batch.dones
        )
        q_next = model.q_net_target(trunc_batch.next_observations)
        a_next = model.q_net(trunc_batch.next_observations).argmax(dim=1, keepdim=True)
    th.testing.assert_close(y_term, term_batch.rewards)
    th.testing.assert_close(
        y_trunc, trunc_batch.rewards + model.gamma * th.gather(q_next, 1, a_next)
    )


def test_exploration_coin_is_drawn_per_env() -> None:
    model = make_model(env=make_env(4))
    obs = np.repeat(model.env.reset()[:1], 256, axis=0)
    greedy, _ = model.predict(obs, deterministic=True)
    assert np.all(greedy == greedy[0])
    model.exploration_rate = 0.5
    actions, _ = model.predict(obs, deterministic=False)
    assert actions.shape == (256,) and actions.dtype == np.int64
    differ = int(np.count_nonzero(actions != greedy[0]))
    # About half the envs explore (and a random action is rarely the greedy one).
    assert 80 < differ < 170
    model.exploration_rate = 0.0
    np.testing.assert_array_equal(model.predict(obs)[0], greedy)


def test_dueling_network_shape_and_combination() -> None:
    model = make_model(env=make_env(2))
    net = model.q_net
    assert isinstance(net, DuelingQNetwork)
    linears = [m for m in net.shared if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(54, 256), (256, 256)]
    assert [m.out_features for m in net.value_head if isinstance(m, nn.Linear)] == [128, 1]
    assert [m.out_features for m in net.advantage_head if isinstance(m, nn.Linear)] == [128, 45]
    acts = [m for m in net.modules() if isinstance(m, nn.LeakyReLU)]
    assert len(acts) == 4 and all(a.negative_slope == 0.01 for a in acts)

    obs = th.randn(5, 54)
    with th.no_grad():
        value, adv = net.value_and_advantage(obs)
        th.testing.assert_close(net(obs), value + adv - adv.mean(dim=1, keepdim=True))
        assert th.all(net(obs).argmax(dim=1) == net._predict(obs))

    custom = GpuDQN(
        "DuelingPolicy",
        make_env(2),
        policy_kwargs={"net_arch": {"shared": [32], "value": [8], "adv": [16]}},
        buffer_size=1_000,
        device="cpu",
    )
    sizes = [m.out_features for m in custom.q_net.modules() if isinstance(m, nn.Linear)]
    assert sizes == [32, 8, 1, 16, 45]


@pytest.mark.gpu
@pytest.mark.parametrize(
    "arch, fusable",
    [
        (None, True),
        ({"shared": [64], "value": [32, 16], "advantage": [24, 8]}, True),
        ({"value": [8], "advantage": [8, 8]}, False),  # unequal depths: the two Sequentials
    ],
)
def test_fused_heads_match_the_two_sequentials_on_cuda(arch, fusable: bool) -> None:
    """On CUDA both heads run as one chain of products; values and gradients are the heads'."""
    from stable_baselines3.common.torch_layers import FlattenExtractor

    space = gym.spaces.Box(-1.0, 1.0, (54,), np.float32)
    net = DuelingQNetwork(space, gym.spaces.Discrete(45), FlattenExtractor(space), 54, arch)
    net = net.cuda()
    assert net.chainable() is fusable
    x = th.randn(300, 54, device="cuda", generator=th.Generator("cuda").manual_seed(0))
    prev = th.backends.cuda.matmul.allow_tf32
    th.backends.cuda.matmul.allow_tf32 = False
    try:
        results = []
        for fused in (True, False):
            net._fusable = fused and fusable
            net.zero_grad()
            q = net(x)
            (q * th.linspace(-1, 1, 45, device="cuda")).sum().backward()
            results.append((q.detach(), [p.grad.clone() for p in net.parameters()]))
    finally:
        th.backends.cuda.matmul.allow_tf32 = prev
        net._fusable = None
    (q_fused, g_fused), (q_ref, g_ref) = results
    th.testing.assert_close(q_fused, q_ref, rtol=1e-5, atol=1e-6)
    for a, b in zip(g_fused, g_ref, strict=True):
        th.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_curiosity_model_matches_env_bonus_and_learns() -> None:
    env = TradingVectorEnv(8, "cpu", episode_length=50, autoreset_mode="same_step", config=SOURCE)
    cfg = env.config
    table = action_table(cfg).category
    th.manual_seed(0)
    model = CuriosityModel(cfg.curiosity_state_dims, 3, cfg.curiosity_hidden)
    env.set_curiosity_weights(*model.export_weights())
    obs, _ = env.reset(seed=3)
    rng = np.random.default_rng(0)
    for _ in range(5):
        prev = th.as_tensor(obs.copy())
        actions = rng.integers(0, cfg.n_actions, 8)
        obs, _, term, trunc, info = env.step(actions)
        done = (term | trunc)[:, None]
        next_obs = th.as_tensor(np.where(done, info.get("final_obs", obs), obs))
        with th.no_grad():
            err = model.prediction_error(prev, th.as_tensor(actions), next_obs, table)
        expected = th.clamp(err, max=cfg.curiosity_max_reward) * cfg.curiosity_scale
        np.testing.assert_allclose(
            info["reward_components"][:, 4], expected.numpy(), rtol=1e-4, atol=1e-7
        )

    batch_obs = th.randn(64, 54)
    batch_next = th.randn(64, 54)
    batch_act = th.as_tensor(rng.integers(0, 45, 64))
    with th.no_grad():
        start = model.prediction_error(batch_obs, batch_act, batch_next, table).mean().item()
    for _ in range(200):
        model.train_step(batch_obs, batch_act, batch_next, table)
    with th.no_grad():
        end = model.prediction_error(batch_obs, batch_act, batch_next, table).mean().item()
    assert end < 0.8 * start


def test_gpu_dqn_trains_curiosity_and_pushes_weights(tmp_path) -> None:
    env = make_env(8, episode_length=50)
    model = make_model(env=env, curiosity=True, curiosity_train_freq=2, curiosity_batch_size=128)
    assert env.unwrapped.backend.curiosity is None
    model.learn(800)
    weights = env.unwrapped.backend.curiosity
    assert weights is not None
    np.testing.assert_array_equal(weights.w1, model.curiosity_model.fc1.weight.detach().numpy())
    assert math.isfinite(model.logger.name_to_value["train/curiosity_loss"])

    path = tmp_path / "curious.zip"
    model.save(path)
    loaded = GpuDQN.load(path, device="cpu")
    assert loaded.curiosity_model is not None
    th.testing.assert_close(loaded.curiosity_model.fc2.weight, model.curiosity_model.fc2.weight)


def test_curiosity_needs_a_trading_env() -> None:
    with pytest.raises(ValueError, match="curiosity"):
        GpuDQN("MlpPolicy", "CartPole-v1", curiosity=True, buffer_size=100, device="cpu")


def test_n_step_returns_are_refused_with_the_prioritized_buffer() -> None:
    env = TradingVectorEnv(2, "cpu", config=SOURCE)
    with pytest.raises(ValueError, match=r"n_steps = 3 is invalid with PrioritizedReplayBuffer"):
        GpuDQN("DuelingPolicy", env, buffer_size=100, n_steps=3, device="cpu")


def test_switches_the_env_to_same_step_autoreset() -> None:
    env = TradingVectorEnv(2, "cpu", autoreset_mode="next_step", config=SOURCE)
    GpuDQN("DuelingPolicy", env, buffer_size=100, device="cpu")
    assert env.autoreset_mode.name == "SAME_STEP"


def test_single_gym_env_with_curiosity() -> None:
    env = gym.make("GpuTrading-v0", episode_length=50, config=SOURCE)
    model = make_model(
        env=env,
        learning_starts=50,
        curiosity=True,
        curiosity_train_freq=2,
        curiosity_batch_size=32,
        buffer_size=1_000,
    )
    assert model.trading_env is None
    model.learn(200)
    assert env.unwrapped._venv.backend.curiosity is not None


def test_collect_rollouts_delegates_to_fused_rollout_on_cuda(monkeypatch) -> None:
    model = make_model(env=make_env(2))
    assert not model.uses_fused_rollout(model.env)
    calls = []

    class FakeRollout:
        def __init__(self, m: GpuDQN, seed: int | None, act_precision: str) -> None:
            calls.append(("init", m))
            assert act_precision == "tf32"  # the model is on the CPU: no bf16 acting
            assert seed is None  # not resuming: the rollout seeds its generator itself

        def collect(self, n_steps: int, callback, learning_starts: int):
            calls.append(("collect", n_steps, learning_starts))
            return n_steps, 3, True  # vector steps, as FusedRollout.collect returns

    # A CUDA-looking trading env routes collect_rollouts to agents.rollouts.fused.FusedRollout.
    monkeypatch.setattr(model.trading_env, "device", "cuda:0")
    monkeypatch.setitem(
        sys.modules, "agents.rollouts.fused", SimpleNamespace(FusedRollout=FakeRollout)
    )
    assert model.uses_fused_rollout(model.env)
    callback = SimpleNamespace(
        on_rollout_start=lambda: calls.append("start"), on_rollout_end=lambda: calls.append("end")
    )
    out = model.collect_rollouts(
        model.env,
        callback,
        TrainFreq(4, TrainFrequencyUnit.STEP),
        model.replay_buffer,
        learning_starts=7,
    )
    assert tuple(out) == (8, 3, True)  # env-steps: 4 vector steps x 2 envs, as SB3 counts
    assert calls == [("init", model), "start", ("collect", 4, 7), "end"]
    assert model._episode_num == 3
    model.fused_rollout = False
    assert not model.uses_fused_rollout(model.env)


@pytest.mark.gpu
def test_fused_rollout_trains_with_finite_loss_and_saves_on_cuda(tmp_path) -> None:
    env = gym.make_vec(
        "GpuTrading-v0", num_envs=1024, device="cuda", episode_length=100, config=SOURCE
    )
    model = GpuDQN(
        "DuelingPolicy",
        env,
        learning_starts=4096,
        train_freq=4,
        batch_size=256,
        buffer_size=200_000,
        curiosity=True,
        curiosity_train_freq=5,
        device="cuda",
        seed=0,
    )
    assert model.uses_fused_rollout(model.env)
    model.learn(80_000)
    assert model._n_updates > 0 and len(model.ep_info_buffer) > 0
    assert math.isfinite(model.logger.name_to_value["train/loss"])
    assert env.unwrapped.backend.curiosity is not None
    # train_precision "auto": bf16 products (and acting) on a GPU of compute capability 8.0+.
    native_bf16 = th.cuda.get_device_capability()[0] >= 8
    assert model.rollout.act_precision == ("bf16" if native_bf16 else "tf32")
    assert model.captured_train_step.precision == ("bf16" if native_bf16 else "tf32")

    path = tmp_path / "fused.zip"
    model.save(path)
    loaded = GpuDQN.load(path, device="cuda")
    obs = model.replay_buffer.observations[:2].reshape(-1, 54)
    with th.no_grad():
        assert th.equal(loaded.q_net(obs), model.q_net(obs))


def test_compile_train_must_be_a_bool() -> None:
    import gymnasium as gym

    env = gym.make_vec("GpuTrading-v0", num_envs=2, device="cpu", config=SOURCE)
    with pytest.raises(TypeError, match="compile_train = 'yes' is invalid"):
        GpuDQN("DuelingPolicy", env, buffer_size=100, device="cpu", compile_train="yes")


@pytest.mark.parametrize("tau", [1.0, 0.3])
def test_target_update_is_sb3_polyak_update(tau: float) -> None:
    """GpuDQN._on_step updates the target as SB3's DQN does: same steps, same values (bitwise)."""
    from stable_baselines3.common.utils import polyak_update

    model = make_model(tau=tau, target_update_interval=64)  # 16 envs: every 4th vector step
    model._setup_learn(total_timesteps=1_000)
    with th.no_grad():
        for p in model.q_net.parameters():
            p.add_(th.randn_like(p))
    reference = [p.detach().clone() for p in model.q_net_target.parameters()]
    for step in range(1, 9):
        model._on_step()
        if step % 4 == 0:
            targets = [th.nn.Parameter(t) for t in reference]
            polyak_update(model.q_net.parameters(), targets, tau)
            reference = [t.detach() for t in targets]
        for got, want in zip(model.q_net_target.parameters(), reference, strict=True):
            assert th.equal(got, want), f"step {step}"
    assert model._n_calls == 8
    assert model.exploration_rate == model.exploration_schedule(model._current_progress_remaining)


def test_training_mode_switch_skips_the_module_walk_without_dropout() -> None:
    model = make_model()
    policy = model.policy
    calls = []
    policy.set_training_mode = lambda mode: calls.append(mode)  # type: ignore[method-assign]
    model.set_training_mode(not policy.training)
    model.set_training_mode(not policy.training)
    assert calls == []  # no dropout or batch norm: only the flag moved
    with_dropout = make_model(policy_kwargs={"net_arch": {"shared": [32]}})
    with_dropout.q_net.shared.append(nn.Dropout(0.5))
    with_dropout.set_training_mode(not with_dropout.policy.training)
    assert with_dropout.q_net.shared[-1].training == with_dropout.policy.training
