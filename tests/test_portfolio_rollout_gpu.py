"""GPU tier: GpuDQN's fused rollout on a CUDA portfolio env (K = 8 instruments,
``MultiDiscrete([3] * 8)`` actions).

``learn`` collects through :class:`~agents.rollouts.portfolio_fused.PortfolioRollout` (graph
replays that store in the graph); the transitions it stores are those of stepping a second env
by hand with the same actions, drawn by a reference actor with the same generator and weights;
a saved model loads and acts alike. The Discrete path is held to its host rollout by
``tests/test_fused_rollout.py``, unchanged.
"""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

N_ENVS = 256
K = 8
STEPS = 90
EPSILON = 0.3
RANDOM_STEP = 50
EPISODE_LENGTH = 30


def _data():
    from gpu_trading_env.data.portfolio_markets import ar1_portfolio

    return ar1_portfolio(800, K, seed=0)


def _env(data, num_envs: int = N_ENVS):
    from gpu_trading_env.portfolio_env import PortfolioVectorEnv

    return PortfolioVectorEnv(
        num_envs=num_envs,
        device="cuda",
        data=data,
        episode_length=EPISODE_LENGTH,
        autoreset_mode="same_step",  # GpuDQN's mode: no switch (and reset) after reset(seed=7)
    )


def _model(env, **kwargs):
    from agents import GpuDQN

    params = dict(
        buffer_size=N_ENVS * (STEPS + 10),
        learning_starts=0,
        batch_size=256,
        train_freq=1,
        gradient_steps=1,
        compile_train=False,  # the captured step without torch.compile: seconds, not tens
        seed=0,
        device="cuda",
    )
    params.update(kwargs)
    return GpuDQN("DuelingPolicy", env, **params)


def test_learn_collects_through_the_fused_portfolio_rollout():
    import torch as th

    from agents.rollouts.portfolio_fused import PortfolioRollout

    env = _env(_data())
    model = _model(env, learning_starts=N_ENVS * 10, exploration_fraction=0.5)
    assert model.uses_fused_rollout(model.env)
    model.learn(N_ENVS * STEPS)
    ro = model.rollout
    assert isinstance(ro, PortfolioRollout)
    assert ro.captured and ro.stores_in_graph  # greedy steps replay the graph, store in it
    assert model.num_timesteps == N_ENVS * STEPS and model._n_updates > 0
    step = model.captured_train_step
    assert step is not None and step.graph is not None and not step.graph_failed
    buf = model.replay_buffer
    assert buf.pos == STEPS and buf.actions.shape[1:] == (N_ENVS, K)
    actions = buf.actions[:STEPS]
    assert actions.dtype == th.int64 and int(actions.min()) == 0 and int(actions.max()) == 2
    # Per-branch actions: envs take different levels in different instruments.
    assert bool((actions != actions[..., :1]).any())
    assert th.isfinite(buf.rewards[:STEPS]).all()
    # Episodes of 30 steps ended and reached SB3's statistics through the episode ring.
    assert len(model.ep_info_buffer) > 0
    assert all(e["l"] == EPISODE_LENGTH for e in model.ep_info_buffer)


def test_stored_transitions_are_what_the_env_gave_for_the_same_actions():
    """Fused steps (graph replays, one eager random step amid them) against a second env
    stepped by hand: the reference actor (same weights, same generator seed) draws the same
    actions, and each stored field is the env's output for them."""
    import torch as th

    from agents.rollouts.portfolio_fused import PortfolioRollout

    data = _data()
    fused_env = _env(data)
    fused_env.reset(seed=7)
    fused = _model(fused_env)
    store = fused.replay_buffer._step_store
    assert store is not None  # the store kernel takes K actions per env
    launches = []

    def counted(*args):
        launches.append(1)
        return store(*args)

    fused.replay_buffer._step_store = counted
    ro = PortfolioRollout(fused, seed=3)
    for k in range(STEPS):
        ro.step(EPSILON, random_only=k == RANDOM_STEP)
    assert ro.stores_in_graph and len(launches) == 1  # recorded once, in the capture

    host_env = _env(data)
    host = _model(host_env)
    host.q_net.load_state_dict(fused.q_net.state_dict())
    obs = host_env.reset(seed=7)[0]
    ref_actor = PortfolioRollout(host, seed=3)  # only its act(): the same generator stream
    buf = fused.replay_buffer
    explored = 0
    for t in range(STEPS):
        actions = ref_actor.act(obs, EPSILON, random_only=t == RANDOM_STEP)
        assert th.equal(buf.actions[t], actions), f"step {t}"
        greedy = ref_actor._greedy(obs)
        explored += int((actions != greedy).any(dim=1).sum())
        new_obs, reward, terminated, truncated, info = host_env.step(actions)
        done = terminated | truncated
        next_obs = th.where(done[:, None], info["final_obs"], new_obs)  # on CUDA in every step
        assert th.equal(buf.observations[t], obs), f"step {t}"
        assert th.equal(buf.next_observations[t], next_obs), f"step {t}"
        assert th.equal(buf.rewards[t], reward), f"step {t}"
        assert th.equal(buf.dones[t], done.float()), f"step {t}"
        assert th.equal(buf.timeouts[t], (truncated & ~terminated).float()), f"step {t}"
        obs = new_obs
    assert buf.pos == STEPS
    assert float(buf.timeouts.sum()) >= N_ENVS * (STEPS // EPISODE_LENGTH - 1)  # time limits
    assert explored > 0  # some envs explored (all branches at once) on greedy steps
    ro.drain_episode_stats()  # reads the env's error word: no invalid action was stepped


def test_save_load_after_learn_acts_alike_and_learns_on(tmp_path):
    import torch as th

    from agents import GpuDQN
    from agents.rollouts.portfolio_fused import PortfolioRollout

    data = _data()
    model = _model(_env(data))
    model.learn(N_ENVS * 40)
    path = tmp_path / "portfolio_model.zip"
    model.save(path)
    env = _env(data)
    loaded = GpuDQN.load(path, env=env, device="cuda")
    obs = env.reset(seed=11)[0]
    a, _ = model.predict(obs.cpu().numpy(), deterministic=True)
    b, _ = loaded.predict(obs.cpu().numpy(), deterministic=True)
    assert a.shape == (N_ENVS, K)
    np.testing.assert_array_equal(a, b)
    for p, q in zip(model.policy.parameters(), loaded.policy.parameters(), strict=True):
        assert th.equal(p, q)
    loaded.learn(N_ENVS * 20, reset_num_timesteps=False)
    assert isinstance(loaded.rollout, PortfolioRollout) and loaded.rollout.captured


def test_the_discrete_path_keeps_its_rollout_actor_and_one_action_per_env():
    """On the single-instrument env ``learn`` still builds the Discrete ``FusedRollout``
    (advantage-chain actor, ``[N]`` actions, the store kernel at ``action_dim = 1``); its
    transitions are held to the host rollout bit for bit by ``tests/test_fused_rollout.py``."""
    from agents.rollouts.fused import FusedRollout
    from agents.rollouts.portfolio_fused import PortfolioRollout
    from gpu_trading_env import MarketData, TradingVectorEnv

    data = MarketData.synthetic(kind="planted", n_bars=2000, seed=1)
    env = TradingVectorEnv(num_envs=N_ENVS, device="cuda", data=data, episode_length=50)
    model = _model(env)
    model.learn(N_ENVS * 20)
    ro = model.rollout
    assert type(ro) is FusedRollout and not isinstance(ro, PortfolioRollout)
    assert ro.branch_shape == () and ro.stores_in_graph
    assert ro._actor is not None and ro._actor.kind.startswith("advantage")
    assert model.replay_buffer.actions.shape[1:] == (N_ENVS, 1)
    assert model.replay_buffer._step_store is not None


def test_kernels_compiled_in_the_background_are_the_ones_the_portfolio_path_loads():
    """``portfolio_path_kernels`` lists every module a first ``learn`` on the portfolio env
    loads, with the arguments its users pass: none is compiled again."""
    from agents.rollouts.fused import start_compiling_kernels
    from agents.rollouts.portfolio_fused import portfolio_path_kernels
    from gpu_runtime.device import compiled_modules

    for thread in start_compiling_kernels("cuda:0", portfolio_path_kernels()):
        thread.join()
    ready = compiled_modules()
    for spec in portfolio_path_kernels():
        assert (spec, 0) in ready, spec[0].name
    _model(_env(_data(), num_envs=64)).learn(64 * 20)
    sources = {spec[0] for spec in portfolio_path_kernels()}
    again = [s for s, _ in compiled_modules()[len(ready) :] if s[0] in sources]
    assert again == [], f"compiled again with other arguments: {[s[0].name for s in again]}"


@pytest.mark.parametrize("encoder", ["branching", "instrument_encoder", "evidence"])
def test_branch_rewards_store_each_instruments_share_in_graph_steps(encoder):
    """With ``branch_rewards`` the fused steps (graph replays and eager ones) store float32
    ``[N, K]`` rewards: the shares of a second env stepped by hand with the stored actions,
    which add up to its reward; the captured train step trains on them (with the branching
    network and with the instrument encoder)."""
    import torch as th

    from agents.rollouts.branch_rewards import instrument_rewards
    from agents.rollouts.portfolio_fused import DeviceBranchRewards, PortfolioRollout

    data = _data()
    fused_env = _env(data)
    fused_env.reset(seed=7)
    kwargs = {"instrument_encoder": encoder != "branching"}
    if encoder == "evidence":  # each branch its own columns, gathered inside the graph
        kwargs["branch_columns"] = [[j, j + 1] for j in range(K)]
    fused = _model(fused_env, branch_rewards=True, policy_kwargs=kwargs)
    buf = fused.replay_buffer
    assert buf.rewards.shape[1:] == (N_ENVS, K) and buf._step_store is None  # torch copies
    ro = PortfolioRollout(fused, seed=3)
    for k in range(STEPS):
        ro.step(EPSILON, random_only=k == RANDOM_STEP)
    assert ro.captured and ro.stores_in_graph

    host_env = _env(data)
    host_env.reset(seed=7)
    ref = DeviceBranchRewards(host_env.backend, th.device(host_env.device))
    for t in range(STEPS):
        ref.snapshot()
        _, reward, _, _, info = host_env.step(buf.actions[t])
        want = instrument_rewards(
            ref.close, ref.open, ref.before, info["positions"], info["costs"], fill_next_open=False
        )
        th.testing.assert_close(buf.rewards[t], want, msg=f"step {t}")
        th.testing.assert_close(want.double().sum(1), reward.double(), rtol=1e-5, atol=1e-7)
    from stable_baselines3.common.logger import Logger

    fused.set_logger(Logger(folder=None, output_formats=[]))  # train() outside learn()
    fused.learning_starts = 0
    fused.train(gradient_steps=4, batch_size=256)
    step = fused.captured_train_step
    assert step is not None and not step.graph_failed
    step.read_stats()  # raises where a priority update saw a NaN or negative TD error
