"""SB3VecEnv: the Stable-Baselines3 VecEnv contract over TradingVectorEnv (NumPy backend)."""

from __future__ import annotations

import re

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode
from stable_baselines3 import A2C, DQN, PPO
from stable_baselines3.common.env_checker import check_env
from stable_baselines3.common.monitor import Monitor

from gpu_trading_env import TradingEnv, TradingVectorEnv
from gpu_trading_env.core.config import EnvConfig
from gpu_trading_env.integrations.sb3_vec_env import SB3VecEnv

# The source design's env (45 actions, barriers, penalties): all of the step is exercised.
SOURCE = EnvConfig.source_design()

N = 8
EPISODE_LENGTH = 64


@pytest.fixture
def venv() -> SB3VecEnv:
    return SB3VecEnv(TradingVectorEnv(N, "cpu", episode_length=EPISODE_LENGTH, config=SOURCE))


@pytest.mark.parametrize(
    ("algo", "kwargs", "steps"),
    [
        (DQN, {"learning_starts": 64, "batch_size": 32, "train_freq": 4}, 1024),
        (PPO, {"n_steps": 32, "batch_size": 64, "n_epochs": 2}, 512),
        (A2C, {"n_steps": 8}, 512),
    ],
    ids=["DQN", "PPO", "A2C"],
)
def test_sb3_algorithms_run_and_record_monitor_episodes(
    venv: SB3VecEnv, algo, kwargs, steps
) -> None:
    model = algo("MlpPolicy", venv, seed=0, device="cpu", **kwargs)
    model.learn(steps)
    assert model.num_timesteps >= steps
    # Monitor-format episode statistics reach SB3's ep_rew_mean buffer.
    assert len(model.ep_info_buffer) > 0
    ep = model.ep_info_buffer[-1]
    assert set(ep) == {"r", "l", "t"}
    assert isinstance(ep["r"], float) and isinstance(ep["l"], int)
    assert 1 <= ep["l"] <= EPISODE_LENGTH


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_step_outputs_are_numpy_copies(venv: SB3VecEnv) -> None:
    obs0 = venv.reset()
    assert isinstance(obs0, np.ndarray) and obs0.dtype == np.float32
    assert obs0.shape == (N, *venv.observation_space.shape)
    keep = obs0.copy()
    rng = np.random.default_rng(0)
    for _ in range(3):
        obs, rewards, dones, infos = venv.step(rng.integers(0, 45, N))
    # The env reuses two output buffers; what SB3 holds on to must not change under it.
    np.testing.assert_array_equal(obs0, keep)
    assert rewards.dtype == np.float32 and rewards.shape == (N,)
    assert dones.dtype == bool and dones.shape == (N,)
    assert isinstance(infos, list) and len(infos) == N
    assert {"reward_components", "portfolio_value", "position", "barrier_label"} <= set(infos[0])
    assert infos[0]["reward_components"].shape == (5,)


def test_step_arrays_shared_mask_is_read_once_per_step(monkeypatch) -> None:
    """The four step arrays share one ``_key`` mask: the adapter reads it once per step (on a
    GPU each read is a device-to-host copy), not once per key."""
    import gpu_trading_env.integrations.sb3_vec_env as sb3_vec_env

    env = TradingVectorEnv(
        N, "cpu", episode_length=EPISODE_LENGTH, autoreset_mode="same_step", config=SOURCE
    )
    venv = SB3VecEnv(env)
    venv.reset()
    masks = []  # the step arrays' mask of each step (a new one where an episode ended)
    real_step, real = env.step, sb3_vec_env.to_numpy

    def step(actions):
        out = real_step(actions)
        masks.append(out[4]["_position"])
        return out

    monkeypatch.setattr(env, "step", step)
    reads = []
    monkeypatch.setattr(sb3_vec_env, "to_numpy", lambda a: reads.append(a is masks[-1]) or real(a))
    infos = venv.step(np.zeros(N, dtype=np.int64))[3]
    assert sum(reads) == 1
    assert all("position" in row and "barrier_label" in row for row in infos)


def test_terminal_observation_and_timelimit_flags(venv: SB3VecEnv) -> None:
    """Compare with the same env run without autoreset, resetting ended envs by hand."""
    seed = 11
    ref = TradingVectorEnv(
        N, "cpu", episode_length=EPISODE_LENGTH, autoreset_mode="disabled", config=SOURCE
    )
    venv.seed(seed)
    obs = venv.reset()
    ref_obs, _ = ref.reset(seed=[seed + i for i in range(N)])
    np.testing.assert_array_equal(obs, ref_obs)

    n_feat = venv.observation_space.shape[0] - 3
    rng = np.random.default_rng(1)
    seen_trunc = seen_term = 0
    for _ in range(300):
        actions = rng.integers(0, 45, N)
        obs, rewards, dones, infos = venv.step(actions)
        ref_obs, ref_rew, term, trunc, _ = ref.step(actions)
        np.testing.assert_allclose(rewards, ref_rew, rtol=1e-6, atol=1e-7)
        np.testing.assert_array_equal(dones, term | trunc)
        for i in range(N):
            assert infos[i]["TimeLimit.truncated"] == bool(trunc[i] and not term[i])
            if dones[i]:
                # The observation that ended the episode, not the next episode's first one.
                np.testing.assert_array_equal(infos[i]["terminal_observation"], ref_obs[i])
                assert infos[i]["episode"]["l"] <= EPISODE_LENGTH
                # A fresh episode: initial capital, flat.
                assert obs[i, n_feat] == pytest.approx(1.0)
                assert obs[i, n_feat + 1] == 0.0
            else:
                assert "terminal_observation" not in infos[i]
                assert "episode" not in infos[i]
        seen_trunc += int((trunc & ~term).sum())
        seen_term += int(term.sum())
        if dones.any():
            ref_obs, _ = ref.reset(options={"reset_mask": dones.copy()})
        np.testing.assert_array_equal(obs, ref_obs)
    assert seen_trunc > 0 and seen_term > 0


def test_seed_and_options_are_passed_on_reset(venv: SB3VecEnv) -> None:
    other = SB3VecEnv(TradingVectorEnv(N, "cpu", episode_length=EPISODE_LENGTH, config=SOURCE))
    venv.seed(5)
    other.seed(5)
    np.testing.assert_array_equal(venv.reset(), other.reset())
    actions = np.arange(N) % 45
    np.testing.assert_array_equal(venv.step(actions)[0], other.step(actions)[0])

    venv.set_options({"start_index": 100})
    a = venv.reset()
    venv.set_options({"start_index": 100})
    np.testing.assert_array_equal(a, venv.reset())
    assert np.all(a == a[0])  # one instrument, same bar

    venv.set_options([{"start_index": 100 + i} for i in range(N)])
    b = venv.reset()
    assert not np.array_equal(b[0], b[1])
    np.testing.assert_array_equal(b[0], a[0])
    assert venv._options == [{} for _ in range(N)]
    assert venv._seeds == [None] * N


def test_attr_and_method_access(venv: SB3VecEnv) -> None:
    assert venv.get_attr("num_envs") == [N] * N
    assert venv.get_attr("config", indices=[0, 3]) == [venv.venv.config] * 2
    assert venv.has_attr("max_position") and not venv.has_attr("no_such_attribute")
    venv.set_attr("custom_flag", 3)
    assert venv.venv.custom_flag == 3
    assert venv.get_attr("custom_flag", indices=1) == [3]
    venv.reset()
    out = venv.env_method("observe", indices=[0, 1])
    assert len(out) == 2 and out[0].shape == (N, venv.observation_space.shape[0])
    assert venv.env_is_wrapped(object) == [False] * N
    with pytest.raises(NotImplementedError):
        venv.get_images()
    venv.close()


def test_switches_the_trading_env_to_same_step() -> None:
    for mode in ("next_step", "disabled"):
        venv = TradingVectorEnv(2, "cpu", autoreset_mode=mode, episode_length=4, config=SOURCE)
        sb3 = SB3VecEnv(gym.wrappers.vector.RecordEpisodeStatistics(venv))
        assert venv.autoreset_mode == AutoresetMode.SAME_STEP
        assert venv.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
        sb3.reset()
        flat = venv.config.encode_action(2)  # no position, so no barrier ends it early
        for _ in range(4):
            obs, _, dones, infos = sb3.step(np.full(2, flat, dtype=np.int64))
        assert dones.all()
        assert all("terminal_observation" in i and "episode" in i for i in infos)


def test_rejects_a_vector_env_that_cannot_reset_in_the_same_step() -> None:
    cartpoles = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
    with pytest.raises(ValueError, match="autoreset_mode"):
        SB3VecEnv(cartpoles)


def test_keep_info_false_keeps_sb3_keys() -> None:
    venv = SB3VecEnv(TradingVectorEnv(4, "cpu", episode_length=8, config=SOURCE), keep_info=False)
    venv.reset()
    flat = venv.venv.config.encode_action(2)  # no position, so no barrier ends it early
    for _ in range(8):
        _, _, dones, infos = venv.step(np.full(4, flat, dtype=np.int64))
    assert dones.all()
    assert set(infos[0]) == {"TimeLimit.truncated", "terminal_observation", "episode"}
    assert all(info["TimeLimit.truncated"] for info in infos)
    assert all(info["episode"]["l"] == 8 for info in infos)


@pytest.mark.parametrize("render_mode", [None, "rgb_array"])
def test_single_env_passes_sb3_check_env(render_mode: str | None) -> None:
    # The render check closes the env and then resets it again (CartPole-v1 passes): close()
    # used to make every later reset raise.
    env = TradingEnv(render_mode=render_mode, config=SOURCE)
    check_env(env, warn=True, skip_render_check=False)
    weights = _curiosity_weights(env)
    env.set_curiosity_weights(*weights)
    obs, _ = env.reset(seed=5)
    ref = TradingEnv(render_mode=render_mode, config=SOURCE)
    ref.set_curiosity_weights(*weights)
    np.testing.assert_array_equal(obs, ref.reset(seed=5)[0])
    for a in (1, 2, 0, 3):  # the reopened env steps as a new one, curiosity bonus included
        assert env.step(a)[1] == ref.step(a)[1]


def _curiosity_weights(env: TradingEnv) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(0)
    d, h = env.config.curiosity_state_dims, env.config.curiosity_hidden
    shapes = ((h, d + 3), (h,), (d, h), (d,))
    return tuple(rng.normal(0, 0.5, s).astype(np.float32) for s in shapes)


@pytest.mark.gpu
def test_cuda_env_matches_numpy_env_through_adapter() -> None:
    cpu = SB3VecEnv(TradingVectorEnv(N, "cpu", episode_length=EPISODE_LENGTH, config=SOURCE))
    gpu = SB3VecEnv(TradingVectorEnv(N, "cuda", episode_length=EPISODE_LENGTH, config=SOURCE))
    cpu.seed(2)
    gpu.seed(2)
    np.testing.assert_allclose(gpu.reset(), cpu.reset(), rtol=1e-5, atol=1e-6)
    rng = np.random.default_rng(3)
    n_done = 0
    for _ in range(200):
        actions = rng.integers(0, 45, N)
        obs_g, rew_g, done_g, infos_g = gpu.step(actions)
        obs_c, rew_c, done_c, infos_c = cpu.step(actions)
        assert isinstance(obs_g, np.ndarray) and obs_g.dtype == np.float32
        np.testing.assert_array_equal(done_g, done_c)
        np.testing.assert_allclose(rew_g, rew_c, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(obs_g, obs_c, rtol=1e-5, atol=1e-6)
        for i in np.flatnonzero(done_g):
            n_done += 1
            np.testing.assert_allclose(
                infos_g[i]["terminal_observation"],
                infos_c[i]["terminal_observation"],
                rtol=1e-5,
                atol=1e-6,
            )
            assert infos_g[i]["TimeLimit.truncated"] == infos_c[i]["TimeLimit.truncated"]
            assert infos_g[i]["episode"]["l"] == infos_c[i]["episode"]["l"]
    assert n_done > 0


# ------------------------------------------------------------------ Gymnasium wrappers under SB3
def _flat(env) -> int:
    return env.unwrapped.config.encode_action(2)


@pytest.mark.parametrize(
    "wrap",
    [
        lambda e: gym.wrappers.vector.TransformObservation(e, lambda o: o + 1000.0),
        gym.wrappers.vector.NormalizeObservation,
        lambda e: gym.wrappers.vector.DtypeObservation(e, np.float64),
    ],
    ids=["TransformObservation", "NormalizeObservation", "DtypeObservation"],
)
def test_refuses_observation_wrappers_it_would_bypass(wrap) -> None:
    """Switching to SAME_STEP under them would hand SB3 untransformed terminal observations."""
    env = TradingVectorEnv(N, "cpu", episode_length=8, config=SOURCE)
    wrapped = wrap(env)
    with pytest.raises(ValueError, match=type(wrapped).__name__ + r".*VecNormalize\(SB3VecEnv"):
        SB3VecEnv(wrapped)
    assert env.autoreset_mode == AutoresetMode.NEXT_STEP  # refused before switching anything


def test_vec_normalize_normalises_terminal_observations() -> None:
    """The way the refusal names: normalise on the SB3 side, terminal observations included."""
    from stable_baselines3.common.vec_env import VecNormalize

    norm = VecNormalize(
        SB3VecEnv(TradingVectorEnv(N, "cpu", episode_length=8, config=SOURCE)), norm_reward=False
    )
    plain = SB3VecEnv(TradingVectorEnv(N, "cpu", episode_length=8, config=SOURCE))
    norm.seed(3)
    plain.seed(3)
    norm.reset()
    plain.reset()
    rng = np.random.default_rng(0)
    ended = 0
    for _ in range(30):
        actions = rng.integers(0, 45, N)
        obs, _, dones, infos = norm.step(actions)
        raw_obs, _, raw_dones, raw_infos = plain.step(actions)
        np.testing.assert_array_equal(dones, raw_dones)
        np.testing.assert_allclose(obs, norm.normalize_obs(raw_obs), rtol=1e-6, atol=1e-6)
        for i in np.flatnonzero(dones):
            ended += 1
            np.testing.assert_allclose(
                infos[i]["terminal_observation"],
                norm.normalize_obs(raw_infos[i]["terminal_observation"]),
                rtol=1e-6,
                atol=1e-6,
            )
    assert ended > 0


def test_reward_wrappers_are_kept_and_record_episode_statistics_follows_the_switch() -> None:
    """RecordEpisodeStatistics built over NEXT_STEP counts SAME_STEP episodes right after it."""
    env = TradingVectorEnv(N, "cpu", episode_length=8, config=SOURCE)
    stats = gym.wrappers.vector.RecordEpisodeStatistics(env)
    sb3 = SB3VecEnv(gym.wrappers.vector.ClipReward(stats, min_reward=-1.0, max_reward=1.0))
    assert env.autoreset_mode == AutoresetMode.SAME_STEP
    sb3.seed(1)
    sb3.reset()
    rng = np.random.default_rng(5)
    running = np.zeros(N)
    returns, lengths = [], []
    for _ in range(100):
        _, rewards, dones, infos = sb3.step(rng.integers(0, 45, N))
        # ClipReward is outside: the statistics sum the env's own rewards.
        running += np.array([info["reward_components"].sum() for info in infos])
        for i in np.flatnonzero(dones):
            returns.append(running[i])
            lengths.append(infos[i]["episode"]["l"])
            assert infos[i]["episode"]["r"] == pytest.approx(running[i], abs=1e-4)
            running[i] = 0.0
    assert len(returns) > 20
    # The wrapper's own queues (last 100 episodes) hold exactly the same episodes.
    np.testing.assert_allclose(list(stats.return_queue), returns[-100:], rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(list(stats.length_queue), lengths[-100:])


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_same_step_sync_and_async_vector_envs_report_episodes(mode: str) -> None:
    """Statistics under info['final_info'] become SB3's info['episode'] (rollout/ep_rew_mean);
    terminal observations and rewards equal single envs replayed with the same seeds."""
    n, seed = 3, 7
    venv = gym.make_vec(
        "GpuTrading-v0",
        num_envs=n,
        vectorization_mode=mode,
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
        episode_length=6,
        config=SOURCE,
    )
    sb3 = SB3VecEnv(venv)
    assert sb3.env_is_wrapped(Monitor)[0] == (mode == "sync")
    replay = [TradingEnv(episode_length=6, config=SOURCE) for _ in range(n)]
    sb3.seed(seed)
    obs = sb3.reset()
    for i, env in enumerate(replay):
        np.testing.assert_array_equal(obs[i], env.reset(seed=seed + i)[0])
    rng = np.random.default_rng(2)
    running = np.zeros(n)
    episodes = 0
    for _ in range(25):
        actions = rng.integers(0, 45, n)
        obs, rewards, dones, infos = sb3.step(actions)
        for i, env in enumerate(replay):
            r_obs, r_rew, term, trunc, _ = env.step(actions[i])
            assert rewards[i] == pytest.approx(r_rew, abs=1e-6)
            running[i] += r_rew
            assert dones[i] == (term or trunc)
            if dones[i]:
                np.testing.assert_array_equal(infos[i]["terminal_observation"], r_obs)
                assert infos[i]["episode"]["r"] == pytest.approx(running[i], abs=1e-4)
                assert infos[i]["episode"]["l"] <= 6
                running[i] = 0.0
                episodes += 1
                r_obs, _ = env.reset()
            else:
                assert "episode" not in infos[i]
            np.testing.assert_array_equal(obs[i], r_obs)
    sb3.close()
    assert episodes >= n * 3


@pytest.mark.parametrize("algo", ["PPO", "GpuDQN"])
def test_sb3_and_gpudqn_log_episodes_of_a_same_step_sync_vector_env(algo: str) -> None:
    from agents import GpuDQN

    venv = gym.make_vec(
        "GpuTrading-v0",
        num_envs=4,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
        episode_length=10,
        config=SOURCE,
    )
    if algo == "PPO":
        model = PPO("MlpPolicy", SB3VecEnv(venv), n_steps=16, batch_size=32, n_epochs=1, seed=0)
    else:
        model = GpuDQN("DuelingPolicy", venv, learning_starts=32, batch_size=16, seed=0)
    model.learn(256)
    assert len(model.ep_info_buffer) >= 20  # 256 steps / 10-step episodes
    assert all(1 <= ep["l"] <= 10 for ep in model.ep_info_buffer)


def test_the_error_for_a_next_step_sync_vector_env_advises_a_call_that_works() -> None:
    # The advice used to be autoreset_mode='same_step', which make_vec gives to the single envs.
    kwargs = {"num_envs": 2, "vectorization_mode": "sync", "episode_length": 4, "barriers": False}
    with pytest.raises(ValueError, match=r"SB3VecEnv needs AutoresetMode.SAME_STEP") as err:
        SB3VecEnv(gym.make_vec("GpuTrading-v0", **kwargs))
    found = re.search(r"vector_kwargs=(\{[^}]*\})", str(err.value))
    assert found is not None, str(err.value)
    advised = eval(found.group(1), {"AutoresetMode": AutoresetMode})  # noqa: S307 (our text)
    venv = SB3VecEnv(gym.make_vec("GpuTrading-v0", vector_kwargs=advised, **kwargs))
    venv.reset()
    for _ in range(4):
        _, _, dones, infos = venv.step(np.zeros(2, dtype=np.int64))
    assert dones.all() and all("terminal_observation" in i for i in infos)


def test_wraps_every_k_with_terminal_observations_and_monitor_episodes(vec_env_k) -> None:
    """K = 1 and K = 3 built by id: SB3VecEnv switches the NEXT_STEP env to SAME_STEP, gives
    SB3's terminal_observation and Monitor-style episodes, and says it is Monitor-wrapped."""
    n = 3
    raw = vec_env_k(n, episode_length=2)
    venv = SB3VecEnv(raw)
    assert raw.unwrapped.autoreset_mode == AutoresetMode.SAME_STEP
    obs = venv.reset()
    assert obs.shape == (n, *venv.observation_space.shape)
    actions = np.stack([venv.action_space.sample() for _ in range(n)])
    for _ in range(2):
        obs, rewards, dones, infos = venv.step(actions)
    assert obs.shape == (n, *venv.observation_space.shape) and rewards.shape == (n,)
    assert dones.all()
    for info in infos:
        assert info["terminal_observation"].shape == venv.observation_space.shape
        assert info["TimeLimit.truncated"] and info["episode"]["l"] == 2
    assert venv.env_is_wrapped(Monitor) == [True] * n
