"""GpuDQN's ``branch_rewards`` on the portfolio env: the instruments' shares of the reward add
up to the env's reward (NumPy and torch forms, fill at close and at the next open, simple and log
rewards, K = 1..8), the per-branch TD target and loss, the buffer's ``[K]`` rewards, training
and the model file (CPU)."""

from __future__ import annotations

from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch as th

import gpu_trading_env  # noqa: F401  (registers the envs)
from agents import GpuDQN, PrioritizedReplayBuffer
from agents.algorithm.dqn_loss import taken_q, td_target, weighted_td_loss
from agents.pipelines.portfolio_train_config import PortfolioTrainConfig, PortfolioTrainConfigError
from agents.rollouts.branch_rewards import instrument_rewards, pre_step
from agents.rollouts.portfolio_fused import DeviceBranchRewards
from gpu_trading_env.core.portfolio_config import PortfolioConfig
from gpu_trading_env.data.portfolio_markets import portfolio_market

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def portfolio_env(k: int, n: int = 16, **config):
    data = portfolio_market("ar1", 400, k, seed=k)
    cfg = PortfolioConfig(episode_length=30, autoreset_mode="same_step", **config)
    return gym.make_vec("GpuPortfolio-v0", num_envs=n, device="cpu", data=data, config=cfg)


def branch_model(env, **policy_kwargs) -> GpuDQN:
    """A small GpuDQN with per-branch rewards on ``env`` (CPU) and the policy's keywords."""
    return GpuDQN(
        "DuelingPolicy",
        env,
        device="cpu",
        buffer_size=1_000,
        batch_size=16,
        learning_starts=50,
        branch_rewards=True,
        policy_kwargs=policy_kwargs,
        seed=0,
    )


@pytest.mark.parametrize("k", range(1, 9))
@pytest.mark.parametrize(
    "config",
    [
        {},
        {"fill": "next_open", "cost_bps": 5.0},
        {"reward": "log", "exposure_levels": (-1.0, -0.5, 0.0, 0.5, 1.0), "leverage": 0.5},
    ],
    ids=["close", "next_open", "log"],
)
def test_instrument_shares_add_up_to_the_env_reward(k: int, config: dict) -> None:
    env = portfolio_env(k, **config)
    backend = env.unwrapped.backend
    levels = len(env.unwrapped.config.exposure_levels)
    rng = np.random.default_rng(k)
    env.reset(seed=k)
    device = DeviceBranchRewards(backend, th.device("cpu"))  # torch form, on NumPy's memory
    for _ in range(60):  # two episodes' ends and starts
        before = pre_step(backend.state)
        device.snapshot()
        actions = rng.integers(0, levels, (16, k))
        _, reward, _, _, info = env.step(actions)
        shares = instrument_rewards(
            backend.close,
            backend.open,
            before,
            info["positions"],
            info["costs"],
            fill_next_open=config.get("fill") == "next_open",
            reward=reward,
            log_reward=config.get("reward") == "log",
        )
        assert shares.shape == (16, k) and shares.dtype == np.float32
        np.testing.assert_allclose(shares.astype(np.float64).sum(1), reward, rtol=1e-5, atol=1e-7)
        out = SimpleNamespace(
            positions=th.as_tensor(info["positions"]),
            costs=th.as_tensor(info["costs"]),
            reward=th.as_tensor(reward),
        )
        np.testing.assert_allclose(device.rewards(out).numpy(), shares, rtol=1e-6, atol=1e-9)
    env.close()


def test_a_flat_instrument_earns_nothing_and_pays_its_own_cost() -> None:
    env = portfolio_env(3, n=2, cost_bps=(10.0, 0.0, 0.0))
    backend = env.unwrapped.backend
    env.reset(seed=0)
    before = pre_step(backend.state)
    _, reward, _, _, info = env.step(np.array([[2, 1, 1], [1, 1, 2]]))  # long A / long C
    shares = instrument_rewards(
        backend.close, backend.open, before, info["positions"], info["costs"], fill_next_open=False
    )
    assert (shares[:, 1] == 0.0).all() and shares[1, 0] == 0.0 and shares[0, 2] == 0.0
    v0 = backend.params.initial_capital
    assert shares[0, 0] == pytest.approx(
        (info["positions"][0, 0] * np.diff(backend.close[before.bar[0] : before.bar[0] + 2, 0])[0]
         - info["costs"][0, 0]) / v0,
        rel=1e-6,
    )  # fmt: skip
    np.testing.assert_allclose(shares.sum(1), reward, rtol=1e-5)


# -- target and loss -----------------------------------------------------------------------------
def test_per_branch_target_loss_and_priorities_by_hand() -> None:
    rng = np.random.default_rng(0)
    b, k, n_levels, gamma = 6, 4, 3, 0.9
    q_online = rng.normal(0, 1, (b, k, n_levels))
    q_next_online = rng.normal(0, 1, (b, k, n_levels))
    q_next_target = rng.normal(0, 1, (b, k, n_levels))
    actions = rng.integers(0, n_levels, (b, k))
    rewards = rng.normal(0, 1, (b, k))
    dones = rng.integers(0, 2, b).astype(np.float64)
    w = rng.uniform(0.2, 1.0, b)
    pick = q_next_online.argmax(axis=2)
    next_q = np.take_along_axis(q_next_target, pick[..., None], 2)[..., 0]
    y_ref = rewards + gamma * (1 - dones)[:, None] * next_q  # each branch its own
    q_ref = np.take_along_axis(q_online, actions[..., None], 2)[..., 0]
    delta = q_ref - y_ref
    huber = np.where(np.abs(delta) < 1, 0.5 * delta**2, np.abs(delta) - 0.5)

    def t(x, dtype=th.float64):
        return th.as_tensor(np.asarray(x), dtype=dtype)

    y = td_target(t(rewards), t(dones).reshape(-1, 1), gamma, t(q_next_target), t(q_next_online))
    assert y.shape == (b, k)
    np.testing.assert_allclose(y.numpy(), y_ref, rtol=1e-12)
    q = taken_q(t(q_online).requires_grad_(), t(actions, th.int64))
    loss, td = weighted_td_loss(q, y, t(w))
    np.testing.assert_allclose(float(loss.detach()), (w[:, None] * huber).mean(), rtol=1e-12)
    np.testing.assert_allclose(td.numpy(), np.abs(delta).mean(1), rtol=1e-12)
    loss.backward()  # the gradient reaches every branch's taken Q-value
    with pytest.raises(ValueError, match=r"rewards of shape \(6, 3\) are invalid with 4 branches"):
        td_target(t(rewards[:, :3]), t(dones).reshape(-1, 1), gamma, t(q_next_target), None)


# -- buffer, model, settings ---------------------------------------------------------------------
def test_buffer_stores_and_samples_one_reward_a_branch() -> None:
    from gymnasium import spaces

    obs_space = spaces.Box(-1, 1, (3,), np.float32)
    act_space = spaces.MultiDiscrete([3] * 4)
    buf = PrioritizedReplayBuffer(64, obs_space, act_space, "cpu", n_envs=2, reward_dim=4, seed=0)
    assert buf.rewards.shape == (32, 2, 4)
    r = np.arange(8, dtype=np.float32).reshape(2, 4)
    o = np.zeros((2, 3), np.float32)
    buf.add(o, o, np.zeros((2, 4)), r, np.zeros(2), [{}, {}])
    buf.add_tensors(*(th.as_tensor(x) for x in (o, o, np.zeros((2, 4), np.int64), r + 10)),
                    th.zeros(2, dtype=th.bool), th.zeros(2, dtype=th.bool))  # fmt: skip
    batch = buf.sample(16)
    assert batch.rewards.shape == (16, 4)
    rows = {tuple(x) for x in batch.rewards.numpy().tolist()}
    assert rows <= {tuple(x) for x in np.concatenate([r, r + 10]).tolist()}
    for bad in (0, True, 2.5):
        with pytest.raises(ValueError, match=f"reward_dim = {bad!r} is invalid: allowed is"):
            PrioritizedReplayBuffer(8, obs_space, act_space, "cpu", reward_dim=bad)


def test_model_learns_with_branch_rewards_and_round_trips(tmp_path) -> None:
    env = portfolio_env(3, n=8)
    model = GpuDQN(
        "DuelingPolicy",
        env,
        device="cpu",
        buffer_size=4_000,
        batch_size=32,
        learning_starts=200,
        train_freq=2,
        branch_rewards=True,
        seed=0,
    )
    model.learn(1_200)
    buf = model.replay_buffer
    assert buf.rewards.shape == (buf.buffer_size, 8, 3) and model._n_updates > 0
    assert np.isfinite(model.logger.name_to_value["train/loss"])
    assert float(buf.rewards[: buf.pos].abs().sum()) > 0.0
    path = tmp_path / "branch.zip"
    model.save(path)
    loaded = GpuDQN.load(path, device="cpu")
    assert loaded.branch_rewards is True and loaded.replay_buffer_kwargs["reward_dim"] == 3
    obs = env.unwrapped.observe()
    np.testing.assert_array_equal(
        loaded.predict(obs, deterministic=True)[0], model.predict(obs, deterministic=True)[0]
    )
    loaded.set_env(env)
    model.save_replay_buffer(tmp_path / "buffer.zip")
    loaded.load_replay_buffer(tmp_path / "buffer.zip")
    assert th.equal(loaded.replay_buffer.rewards, buf.rewards)
    loaded.learn(200)  # and trains on
    env.close()


def test_branch_rewards_refused_where_there_are_no_branches() -> None:
    env = gym.make_vec("GpuTrading-v0", num_envs=2, device="cpu")
    with pytest.raises(ValueError, match="branch_rewards = True is invalid with the action space"):
        GpuDQN("DuelingPolicy", env, device="cpu", buffer_size=100, branch_rewards=True)
    with pytest.raises(TypeError, match="branch_rewards = 1 is invalid"):
        GpuDQN("DuelingPolicy", env, device="cpu", buffer_size=100, branch_rewards=1)
    with pytest.raises(PortfolioTrainConfigError, match="branch_rewards = 'yes' is invalid"):
        PortfolioTrainConfig(branch_rewards="yes")


def test_fused_rollout_steps_store_each_instruments_share() -> None:
    """PortfolioRollout's eager steps with ``branch_rewards`` (the CPU stand-in of the CUDA
    backend's static outputs of tests/test_portfolio_rollout.py): the stored ``[N, K]`` rewards
    are the NumPy shares of a second env stepped by hand with the stored actions."""
    from test_portfolio_rollout import SMALL_ARCH, CpuPortfolioRollout

    from gpu_trading_env.portfolio_env import PortfolioVectorEnv

    n, k, steps = 16, 4, 30
    data = portfolio_market("lead_lag", 400, k, seed=1)
    kw = dict(num_envs=n, device="cpu", data=data, episode_length=10, fill="next_open")
    env = PortfolioVectorEnv(**kw, autoreset_mode="same_step")
    env.reset(seed=7)
    model = GpuDQN(
        "DuelingPolicy",
        env,
        buffer_size=n * (steps + 5),
        learning_starts=0,
        policy_kwargs={"net_arch": SMALL_ARCH},
        branch_rewards=True,
        seed=0,
        device="cpu",
    )
    ro = CpuPortfolioRollout(model, seed=3, cuda_graph=False)
    for t in range(steps):
        ro.step(0.3, random_only=t == 12)
    ref = PortfolioVectorEnv(**kw, autoreset_mode="same_step")
    ref.reset(seed=7)
    buf = model.replay_buffer
    assert buf.rewards.shape[1:] == (n, k)
    for t in range(steps):
        before = pre_step(ref.backend.state)
        _, reward, _, _, info = ref.step(buf.actions[t].numpy())
        want = instrument_rewards(
            ref.backend.close,
            ref.backend.open,
            before,
            info["positions"],
            info["costs"],
            fill_next_open=True,
        )
        np.testing.assert_allclose(buf.rewards[t].numpy(), want, rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(want.sum(1), reward, rtol=1e-5, atol=1e-7)


def test_branch_values_give_each_branch_its_value_and_round_trip(tmp_path) -> None:
    from agents.pipelines.portfolio_training import set_flat_policy

    env = portfolio_env(3, n=4)
    model = branch_model(env, branch_values=True)
    obs = th.as_tensor(env.unwrapped.observe())
    value, adv = model.q_net.value_and_advantage(obs)
    assert value.shape == (4, 3) and adv.shape == (4, 3, 3)
    q = model.q_net(obs)  # Q_d = V_d + A_d - mean A_d: each branch's mean is its own value
    th.testing.assert_close(q.mean(dim=2), value)
    model.learn(200)
    model.save(tmp_path / "values.zip")
    loaded = GpuDQN.load(tmp_path / "values.zip", device="cpu")
    assert loaded.q_net.branch_values and loaded.policy.branch_values
    th.testing.assert_close(loaded.q_net(obs), model.q_net(obs))
    set_flat_policy(loaded, 1)
    assert (loaded.predict(obs.numpy(), deterministic=True)[0] == 1).all()
    with pytest.raises(TypeError, match="branch_values = 'yes' is invalid"):
        GpuDQN("DuelingPolicy", env, device="cpu", policy_kwargs={"branch_values": "yes"})
    env.close()


# -- the instrument encoder ----------------------------------------------------------------------
SMALL = {"shared": [32, 32], "value": [16], "advantage": [16]}


def test_instrument_encoder_shares_its_weights_and_round_trips(tmp_path) -> None:
    from agents.algorithm.policies import InstrumentEncoderQNetwork, portfolio_layout
    from agents.pipelines.portfolio_training import set_flat_policy

    env = portfolio_env(4, n=4)
    model = branch_model(env, instrument_encoder=True, net_arch=SMALL)
    net = model.q_net
    assert isinstance(net, InstrumentEncoderQNetwork) and net.n_features == 51
    # One encoder and its advantage head for the four instruments (sizes that do not grow with
    # K), beside each branch's own head on the trunk.
    assert net.encoder[0].in_features == 51 + 2 + 8
    assert net.encoder_advantage[-1].out_features == 3
    assert net.advantage_head[-1].weight.shape[:2] == (4, 3)
    obs = th.as_tensor(env.unwrapped.observe())
    value, adv = net.value_and_advantage(obs)
    assert value.shape == (4, 4) and adv.shape == (4, 4, 3)
    th.testing.assert_close(net(obs).mean(dim=2), value)
    th.testing.assert_close(net.branch_advantages(obs), adv)
    model.learn(200)
    model.save(tmp_path / "encoder.zip")
    loaded = GpuDQN.load(tmp_path / "encoder.zip", device="cpu")
    assert isinstance(loaded.q_net, InstrumentEncoderQNetwork)
    th.testing.assert_close(loaded.q_net(obs), model.q_net(obs))
    set_flat_policy(loaded, 1)
    assert (loaded.predict(obs.numpy(), deterministic=True)[0] == 1).all()
    with pytest.raises(ValueError, match="observation of 10 floats is invalid for instrument_enc"):
        portfolio_layout(10, 4)
    env.close()


def test_instrument_encoder_refused_without_branches() -> None:
    env = gym.make_vec("GpuTrading-v0", num_envs=2, device="cpu")
    with pytest.raises(ValueError, match="instrument_encoder = True is invalid with the action"):
        GpuDQN("DuelingPolicy", env, device="cpu", policy_kwargs={"instrument_encoder": True})
    with pytest.raises(TypeError, match="instrument_encoder = 1 is invalid"):
        GpuDQN("DuelingPolicy", env, device="cpu", policy_kwargs={"instrument_encoder": 1})


def test_evidence_head_reads_each_branchs_own_columns_and_round_trips(tmp_path) -> None:
    from agents.pipelines.portfolio_training import set_flat_policy

    env = portfolio_env(4, n=4)
    columns = [[0, 1], [], [51], [104, 102, 103]]
    model = branch_model(env, instrument_encoder=True, branch_columns=columns, net_arch=SMALL)
    net = model.q_net
    assert net.branch_columns == [[0, 1], [], [51], [102, 103, 104]]
    assert net.evidence_index.shape == (4, 3) and net.evidence_mask.sum(1).tolist() == [2, 0, 1, 3]
    obs = th.as_tensor(env.unwrapped.observe()).clone()
    _, _, evidence = net._parts(obs)
    assert evidence.shape == (4, 4, 3)
    # It starts at zero: the untrained network acts as the one without the head.
    assert not evidence.any()
    with th.no_grad():  # trained weights, for the routing below
        net.evidence_head[-1].weight.normal_(0.0, 0.5)
        net.evidence_head[-1].bias.normal_(0.0, 0.5)
    _, _, evidence = net._parts(obs)
    moved = obs.clone()
    moved[:, 0] += 1.0  # column 0: branch 0's alone
    _, _, after = net._parts(moved)
    assert not th.allclose(after[:, 0], evidence[:, 0])
    th.testing.assert_close(after[:, 1:], evidence[:, 1:])
    # A branch without columns gets its head's constant, whatever the observation.
    th.testing.assert_close(evidence[:, 1], evidence[:1, 1].expand(4, 3))
    th.testing.assert_close(net.branch_advantages(obs), net.value_and_advantage(obs)[1])
    model.learn(200)
    model.save(tmp_path / "evidence.zip")
    loaded = GpuDQN.load(tmp_path / "evidence.zip", device="cpu")
    assert loaded.q_net.branch_columns == net.branch_columns
    th.testing.assert_close(loaded.q_net(obs), model.q_net(obs))
    set_flat_policy(loaded, 1)
    assert (loaded.predict(moved.numpy() * 100.0, deterministic=True)[0] == 1).all()
    env.close()


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"branch_columns": [[0]] * 3}, ValueError, "branch_columns of 3 lists is invalid"),
        ({"branch_columns": [[0], [204], [], []]}, ValueError, r"branch_columns\[1\] = \[204\]"),
        (
            {"branch_columns": [[0], [-1], [], []]},
            ValueError,
            r"allowed are integer feature columns 0..203",
        ),
        ({"branch_columns": [[True], [], [], []]}, ValueError, r"branch_columns\[0\] = \[True\]"),
        ({"branch_columns": [["a"], [], [], []]}, ValueError, r"branch_columns\[0\] = \['a'\]"),
        ({"branch_columns": [[1.5], [], [], []]}, ValueError, r"branch_columns\[0\] = \[1.5\]"),
    ],
)
def test_branch_columns_errors_name_the_branch_and_what_is_allowed(kwargs, error, message) -> None:
    env = portfolio_env(4, n=2)
    with pytest.raises(error, match=message):
        GpuDQN(
            "DuelingPolicy", env, device="cpu", policy_kwargs={"instrument_encoder": True, **kwargs}
        )
    with pytest.raises(ValueError, match="branch_columns is invalid without instrument_encoder"):
        GpuDQN("DuelingPolicy", env, device="cpu", policy_kwargs={"branch_columns": [[0]] * 4})
    env.close()
