"""The trading env as each RL library's users call it, on the CPU, with the data checked.

Each test runs a few thousand env-steps and asserts what the library stored or saw: every
stored next observation equals the observation the agent acted on next (on steps that did not
end an episode), and after every done the next observation is a fresh episode's first one
(portfolio value exactly 1, flat). Also: outputs the caller owns, Gymnasium's own wrappers,
episode statistics, keyword handling and the module-qualified id in a fresh process.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

import gpu_trading_env  # noqa: F401  (registers GpuTrading-v0)
from gpu_trading_env import TradingEnv, TradingVectorEnv
from gpu_trading_env.core.config import EnvConfig
from gpu_trading_env.integrations.sb3_vec_env import SB3VecEnv

# The source design's env (45 actions, barriers, penalties): all of the step is exercised.
SOURCE = EnvConfig.source_design()

ROOT = Path(__file__).resolve().parent.parent
EP_LEN = 12
N = 4


def make(num_envs: int = N, **kwargs) -> TradingVectorEnv:
    kwargs.setdefault("episode_length", EP_LEN)
    kwargs.setdefault("config", SOURCE)
    return TradingVectorEnv(num_envs, "cpu", **kwargs)


def is_reset_obs(obs: np.ndarray) -> np.ndarray:
    """First observation of an episode: value / initial capital == 1 and flat."""
    obs = np.asarray(obs)
    return (obs[..., -3] == 1.0) & (obs[..., -2] == 0.0)


def replay(seed: int, actions: np.ndarray, extra_resets: int = 0, **kwargs) -> dict:
    """A plain env (DISABLED mode, ended envs reset by mask) under ``seed`` and ``actions``
    [T, N]: what every library should have stored. ``obs`` [T, N, D] is what each action was
    chosen on, ``next_obs`` the true next observation (an episode's last one at dones).
    ``extra_resets``: resets without a seed after the seeded one, as some libraries do."""
    kwargs.setdefault("episode_length", EP_LEN)
    kwargs.setdefault("config", SOURCE)
    env = TradingVectorEnv(actions.shape[1], "cpu", autoreset_mode="disabled", **kwargs)
    obs, _ = env.reset(seed=seed)
    for _ in range(extra_resets):
        obs, _ = env.reset()
    out: dict[str, list] = {"obs": [], "next_obs": [], "reward": [], "done": []}
    for a in actions:
        nxt, reward, term, trunc, _ = env.step(a)
        done = term | trunc
        for key, value in zip(out, (obs, nxt, reward, done), strict=True):
            out[key].append(value)
        obs = nxt
        if done.any():
            fresh, _ = env.reset(options={"reset_mask": done.copy()})
            obs = np.where(done[:, None], fresh, nxt)
    return {key: np.stack(value) for key, value in out.items()}


# ------------------------------------------------------------------ the documented matrix
def test_every_matrix_row_names_existing_tests() -> None:
    """docs/INTEGRATIONS.md: each row of the library matrix names tests, and each exists."""
    import re

    text = (ROOT / "docs" / "INTEGRATIONS.md").read_text()
    header = "| Library | Way of use | Autoreset mode | Data checked | Tests |"
    lines = text[text.index(header) :].splitlines()[2:]
    rows = [line for line in itertools.takewhile(lambda line: line.startswith("|"), lines)]
    assert len(rows) >= 20
    for row in rows:
        names = re.findall(r"`(test_\w+\.py)::(test_\w+)`", row.rsplit("|", 2)[-2])
        assert names, f"row names no test: {row[:80]}"
        for file, name in names:
            source = (ROOT / "tests" / file).read_text()
            assert re.search(rf"^def {name}\(", source, re.M), f"{file}::{name} does not exist"


# ------------------------------------------------------------------ owned outputs
def hold_five_steps(env: TradingVectorEnv, to_numpy) -> None:
    env.reset(seed=3)
    rng = np.random.default_rng(0)
    held, copies = [], []
    for _ in range(5):
        actions = rng.integers(0, env.single_action_space.n, env.num_envs)
        obs, reward, term, trunc, info = env.step(actions)
        arrays = [obs, reward, term, trunc]
        arrays += [v for v in info.values() if not isinstance(v, dict)]
        arrays += list(info.get("final_info", {}).values())
        held.append(arrays)
        copies.append([to_numpy(a).copy() for a in arrays])
    for _ in range(3):  # later steps must not write to what was handed out
        env.step(rng.integers(0, env.single_action_space.n, env.num_envs))
    for arrays, saved in zip(held, copies, strict=True):
        for a, c in zip(arrays, saved, strict=True):
            np.testing.assert_array_equal(to_numpy(a), c)


@pytest.mark.parametrize("mode", ["same_step", "next_step", "disabled"])
@pytest.mark.parametrize("array_type", ["numpy", "torch"])
def test_arrays_of_five_steps_stay_unchanged(mode: str, array_type: str) -> None:
    env = make(16, autoreset_mode=mode, episode_length=2, array_type=array_type)
    hold_five_steps(env, lambda a: a.numpy() if hasattr(a, "numpy") else np.asarray(a))


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["same_step", "next_step", "disabled"])
@pytest.mark.parametrize("array_type", ["torch", "cupy"])
def test_arrays_of_five_steps_stay_unchanged_cuda(mode: str, array_type: str) -> None:
    env = TradingVectorEnv(
        4096, "cuda", autoreset_mode=mode, episode_length=2, array_type=array_type, config=SOURCE
    )

    def host(a):
        return a.detach().cpu().numpy() if hasattr(a, "detach") else a.get()

    hold_five_steps(env, host)


def test_zero_copy_outputs_are_the_double_buffer() -> None:
    env = make(copy_outputs=False)
    env.reset(seed=0)
    first = env.step(np.zeros(N, dtype=np.int64))[0]
    env.step(np.zeros(N, dtype=np.int64))
    third = env.step(np.zeros(N, dtype=np.int64))[0]
    assert third is first  # documented: overwritten two steps later


# ------------------------------------------------------------------ contract details
def test_disabled_mode_reports_each_episode_once() -> None:
    env = make(2, autoreset_mode="disabled", episode_length=3)
    env.reset(seed=1, options={"start_index": 0})
    flat = env.config.encode_action(2)
    reported = np.zeros(2, dtype=int)
    for _ in range(8):  # 3 steps to the end, then 5 frozen steps
        _, _, term, trunc, info = env.step(np.full(2, flat))
        reported += info["_episode_return"]
        assert not info["_episode_return"][~(term | trunc)].any()
    assert (term | trunc).all()
    np.testing.assert_array_equal(reported, [1, 1])


def test_step_before_reset_and_after_close_raise_and_change_nothing() -> None:
    env = make(2)
    before = env.observe().copy()
    with pytest.raises(RuntimeError, match="before reset"):
        env.step(np.zeros(2, dtype=np.int64))
    np.testing.assert_array_equal(env.observe(), before)
    env.reset(seed=0)
    env.close()
    with pytest.raises(RuntimeError, match="after close"):
        env.step(np.zeros(2, dtype=np.int64))
    with pytest.raises(RuntimeError, match="after close"):
        env.reset()


def test_set_autoreset_mode_keeps_running_episodes_and_demands_reset_of_waiting_ones() -> None:
    env = make(2, autoreset_mode="next_step", episode_length=3)
    env.reset(seed=0)
    flat = env.config.encode_action(2)
    env.step(np.full(2, flat))
    env.set_autoreset_mode("same_step")  # both envs are running: no reset needed
    for _ in range(2):
        obs, _, term, trunc, info = env.step(np.full(2, flat))
    assert (term | trunc).all() and is_reset_obs(obs).all() and "final_obs" in info
    env.set_autoreset_mode("disabled")
    env.step(np.full(2, flat))
    env.step(np.full(2, flat))
    _, _, term, trunc, _ = env.step(np.full(2, flat))
    assert (term | trunc).all()
    env.set_autoreset_mode("next_step")  # envs wait for a reset
    with pytest.raises(RuntimeError, match="before reset"):
        env.step(np.full(2, flat))
    env.reset()
    env.step(np.full(2, flat))


def test_call_get_attr_set_attr() -> None:
    env = make(3)
    assert env.get_attr("num_envs") == (3, 3, 3)
    env.reset(seed=0)
    obs = env.call("observe")
    assert len(obs) == 3 and obs[0].shape == (3, env.single_observation_space.shape[0])
    assert env.call("render") == (None, None, None)
    env.set_attr("note", "x")
    env.set_attr("note2", ["y"] * 3)
    assert env.get_attr("note") == ("x",) * 3 and env.note2 == "y"
    with pytest.raises(ValueError, match="share one attribute"):
        env.set_attr("note", ["a", "b", "c"])
    with pytest.raises(ValueError, match="3 values"):
        env.set_attr("note", ["a", "a"])


def test_keywords_as_gymnasium_envs() -> None:
    with pytest.raises(TypeError, match=r"got an unexpected keyword argument 'frameskip'"):
        TradingVectorEnv(2, frameskip=4, config=SOURCE)
    with pytest.raises(TypeError, match=r"got an unexpected keyword argument 'frameskip'"):
        TradingEnv(frameskip=4, config=SOURCE)
    single = gym.make("GpuTrading-v0", device="cpu", episode_length=EP_LEN, config=SOURCE)
    assert single.observation_space.shape == single.unwrapped.observation_space.shape
    for mode in ("sync", "async", "vector_entry_point"):
        venv = gym.make_vec(
            "GpuTrading-v0",
            num_envs=2,
            vectorization_mode=mode,
            device="cpu",
            render_mode=None,
            config=SOURCE,
        )
        obs, _ = venv.reset(seed=0)
        assert obs.shape[0] == 2
        venv.close()
    with pytest.raises(ValueError, match="render_mode"):
        TradingVectorEnv(2, render_mode="human", config=SOURCE)


@pytest.mark.parametrize("mode", ["sync", "async", "vector_entry_point"])
def test_make_vec_max_episode_steps_truncates_in_every_mode(mode: str) -> None:
    """Gymnasium passes ``max_episode_steps`` to vector entry points; it means TimeLimit."""
    venv = gym.make_vec(
        "GpuTrading-v0", num_envs=N, vectorization_mode=mode, max_episode_steps=10, config=SOURCE
    )
    flat = np.full(N, make(1).config.encode_action(2))  # flat: no barrier ends it early
    venv.reset(seed=0)
    for t in range(1, 21):  # two episodes: NEXT_STEP, so step 11 is the reset step
        _, reward, term, trunc, _ = venv.step(flat)
        assert not term.any()
        np.testing.assert_array_equal(trunc, np.full(N, t in (10, 21)))
        if t == 11:
            np.testing.assert_array_equal(reward, 0.0)
    venv.close()
    rng = np.random.default_rng(4)
    venv = gym.make_vec(
        "GpuTrading-v0", num_envs=N, vectorization_mode=mode, max_episode_steps=10, config=SOURCE
    )
    venv.reset(seed=1)
    length = np.zeros(N, dtype=int)
    prev_done = np.zeros(N, dtype=bool)
    for _ in range(60):
        _, _, term, trunc, _ = venv.step(rng.integers(0, 45, N))
        length = np.where(prev_done, 0, length + 1)
        prev_done = term | trunc
        assert (length <= 10).all() and prev_done[length == 10].all()
    venv.close()


def test_max_episode_steps_is_the_episode_length_and_checked() -> None:
    """In the vector entry point it is the env's own limit: data equal to episode_length=10."""
    limited = gym.make_vec(
        "GpuTrading-v0", num_envs=N, max_episode_steps=10, episode_length=50, config=SOURCE
    )
    plain = make(episode_length=10)
    assert limited.config.episode_length == 10
    assert make(max_episode_steps=100, episode_length=7).config.episode_length == 7
    rng = np.random.default_rng(2)
    np.testing.assert_array_equal(limited.reset(seed=5)[0], plain.reset(seed=5)[0])
    for _ in range(40):
        actions = rng.integers(0, 45, N)
        for a, b in zip(limited.step(actions)[:4], plain.step(actions)[:4], strict=True):
            np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="max_episode_steps = 0 is invalid"):
        make(max_episode_steps=0)
    with pytest.raises(TypeError, match="max_episode_steps = 2.5 is invalid"):
        make(max_episode_steps=2.5)


def _run_in_a_fresh_process(code: str) -> str:
    """``code`` in a new Python process that sees this checkout and nothing it has imported
    (what a subprocess vector env or a remote runner sees); its stdout."""
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def test_module_qualified_id_in_a_fresh_process() -> None:
    code = textwrap.dedent(
        """
        import sys
        import gymnasium as gym
        assert "gpu_trading_env" not in sys.modules
        env = gym.make("gpu_trading_env:GpuTrading-v0", episode_length=5)
        env.reset(seed=0)
        venv = gym.make_vec("gpu_trading_env:GpuTrading-v0", num_envs=3)
        obs, _ = venv.reset(seed=0)
        venv.step(venv.action_space.sample())
        print(type(venv).__name__, obs.shape[0])
        """
    )
    stdout = _run_in_a_fresh_process(code)
    assert stdout.split() == ["TradingVectorEnv", "3"]


# ------------------------------------------------------------------ RLlib (without ray)
def test_plain_id_is_unknown_in_a_fresh_process_and_the_rllib_registration() -> None:
    """What a remote RLlib runner sees: the plain id is unknown until the package is imported;
    register_rllib_env() puts it in RLlib's registry, whose creator builds the env in each of
    RLlib's vectorize modes (a registered creator gets env_config, plus num_envs in
    VECTOR_ENTRY_POINT mode)."""
    code = textwrap.dedent(
        """
        import gymnasium as gym
        try:
            gym.make_vec("GpuTrading-v0", num_envs=2)
        except gym.error.Error as err:
            print(type(err).__name__)
        """
    )
    stdout = _run_in_a_fresh_process(code)
    assert stdout.split() == ["NameNotFound"]

    from gpu_trading_env.integrations.rllib_env import rllib_env_creator

    class EnvContext(dict):  # RLlib's: a dict with the runner's indices as attributes
        worker_index = 1
        vector_index = 0

    ctx = EnvContext(episode_length=EP_LEN)
    single = rllib_env_creator(ctx)
    assert isinstance(single, TradingEnv) and single.config.episode_length == EP_LEN
    vector = rllib_env_creator(ctx | {"num_envs": 3})
    assert isinstance(vector, TradingVectorEnv) and vector.num_envs == 3
    assert vector.autoreset_mode == AutoresetMode.NEXT_STEP  # what RLlib's runner assumes
    plain = make(3)
    np.testing.assert_array_equal(vector.reset(seed=2)[0], plain.reset(seed=2)[0])
    with pytest.raises(TypeError, match="unexpected keyword argument 'frameskip'"):
        rllib_env_creator({"frameskip": 4})


def test_register_rllib_env(monkeypatch) -> None:
    import types

    from gpu_trading_env.integrations.rllib_env import register_rllib_env, rllib_env_creator

    try:
        import ray.tune.registry  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match=r"ray\[rllib\].*gpu_trading_env:GpuTrading-v0"):
            register_rllib_env()
    registered = {}
    registry = types.ModuleType("ray.tune.registry")
    registry.register_env = lambda name, creator: registered.update({name: creator})
    for module in ("ray", "ray.tune"):
        monkeypatch.setitem(sys.modules, module, types.ModuleType(module))
    monkeypatch.setitem(sys.modules, "ray.tune.registry", registry)
    register_rllib_env()
    assert registered == {"GpuTrading-v0": rllib_env_creator}
    with pytest.raises(ValueError, match="name = '' is invalid"):
        register_rllib_env("")


# ------------------------------------------------------------------ Gymnasium wrappers
def test_gymnasium_vector_wrappers_and_episode_statistics() -> None:
    base = make(8)
    env = gym.wrappers.vector.RecordEpisodeStatistics(base)
    env = gym.wrappers.vector.NormalizeObservation(env)
    env = gym.wrappers.vector.ClipReward(env, min_reward=-1.0, max_reward=1.0)
    obs, _ = env.reset(seed=0)
    rng = np.random.default_rng(1)
    prev_done = np.zeros(8, dtype=bool)
    n_episodes = 0
    for _ in range(400):
        obs, reward, term, trunc, info = env.step(rng.integers(0, 45, 8))
        assert np.isfinite(obs).all() and (np.abs(reward) <= 1.0).all()
        # NEXT_STEP: the step after a done is the reset step, reward 0.
        np.testing.assert_array_equal(reward[prev_done], 0.0)
        assert not (term | trunc)[prev_done].any()
        if "episode" in info:
            mask = info["_episode"]
            np.testing.assert_array_equal(mask, info["_episode_return"])
            np.testing.assert_allclose(
                info["episode"]["r"][mask], info["episode_return"][mask], rtol=1e-4, atol=1e-4
            )
            np.testing.assert_array_equal(info["episode"]["l"][mask], info["episode_length"][mask])
            n_episodes += int(mask.sum())
        prev_done = term | trunc
    assert n_episodes > 100


def test_gymnasium_next_step_loop_data_equals_a_plain_env() -> None:
    """Gymnasium's own loop (NEXT_STEP, RecordEpisodeStatistics): each episode's observations,
    rewards and statistics equal a plain env's; the step after a done is the reset step."""
    seed, steps = 9, 150
    env = gym.wrappers.vector.RecordEpisodeStatistics(
        gym.make_vec("GpuTrading-v0", num_envs=N, episode_length=EP_LEN, config=SOURCE)
    )
    ref = make(autoreset_mode="disabled")
    obs, _ = env.reset(seed=seed)
    ref_obs, _ = ref.reset(seed=seed)
    np.testing.assert_array_equal(obs, ref_obs)
    rng = np.random.default_rng(6)
    prev_done = np.zeros(N, dtype=bool)
    running = np.zeros(N)
    episodes = 0
    for _ in range(steps):
        actions = rng.integers(0, 45, N)
        obs, reward, term, trunc, info = env.step(actions)
        # The plain env steps the running envs (its ended ones wait, frozen) and resets those
        # that ended in the step before, which is what NEXT_STEP does in this step.
        ref_obs, ref_reward, ref_term, ref_trunc, _ = ref.step(actions)
        if prev_done.any():
            fresh, _ = ref.reset(options={"reset_mask": prev_done.copy()})
            ref_obs = np.where(prev_done[:, None], fresh, ref_obs)
            ref_reward = np.where(prev_done, 0.0, ref_reward)
            ref_term, ref_trunc = ref_term & ~prev_done, ref_trunc & ~prev_done
        np.testing.assert_array_equal(obs, ref_obs)
        np.testing.assert_array_equal(reward, ref_reward)
        np.testing.assert_array_equal(term, ref_term)
        np.testing.assert_array_equal(trunc, ref_trunc)
        running += reward
        done = term | trunc
        if done.any():
            np.testing.assert_array_equal(info["_episode"], done)
            np.testing.assert_allclose(info["episode"]["r"][done], running[done], rtol=1e-6)
            np.testing.assert_allclose(info["episode_return"][done], running[done], atol=1e-4)
            episodes += int(done.sum())
        running[done] = 0.0
        prev_done = done
    assert episodes >= N * 10


def test_gymnasium_single_env_record_episode_statistics() -> None:
    env = gym.wrappers.RecordEpisodeStatistics(
        gym.make("GpuTrading-v0", episode_length=EP_LEN, config=SOURCE)
    )
    env.reset(seed=0)
    episodes = 0
    for _ in range(300):
        _, _, term, trunc, info = env.step(env.action_space.sample())
        if term or trunc:
            assert info["episode"]["l"] == info["episode_length"]
            assert info["episode"]["r"] == pytest.approx(info["episode_return"], abs=1e-4)
            episodes += 1
            env.reset()
    assert episodes > 20


# ------------------------------------------------------------------ Stable-Baselines3
class RecordingVectorEnv(gym.vector.VectorWrapper):
    """Keeps a copy of every observation the wrapped vector env returns."""

    def __init__(self, env: gym.vector.VectorEnv) -> None:
        super().__init__(env)
        self.observations: list[np.ndarray] = []
        self.dones: list[np.ndarray] = []
        self.rewards: list[np.ndarray] = []

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.observations.append(np.array(obs, copy=True))
        self.dones.append(np.zeros(self.num_envs, dtype=bool))
        return obs, info

    def step(self, actions):
        obs, reward, term, trunc, info = self.env.step(actions)
        self.observations.append(np.array(obs, copy=True))
        self.dones.append(np.asarray(term | trunc).copy())
        self.rewards.append(np.array(reward, copy=True))
        return obs, reward, term, trunc, info

    def call(self, name: str, *args, **kwargs):
        return self.env.call(name, *args, **kwargs)


def test_sb3_ppo_rollout_buffer_holds_the_env_observations(one_torch_thread) -> None:
    from stable_baselines3 import PPO

    rec = RecordingVectorEnv(make(N))
    model = PPO("MlpPolicy", SB3VecEnv(rec), n_steps=64, batch_size=64, n_epochs=1, seed=0)
    model.learn(total_timesteps=64 * N * 8)
    assert rec.unwrapped.autoreset_mode == AutoresetMode.SAME_STEP
    # The last rollout, which PPO's training flattened env-major: [N * n_steps, D].
    flat = model.rollout_buffer.observations
    stored = flat.reshape(N, 64, -1).transpose(1, 0, 2)
    seen = np.stack(rec.observations)[-65:-1]  # what the env returned before each of its steps
    np.testing.assert_array_equal(stored, seen)
    dones = np.stack(rec.dones)[-65:-1]  # whether the step that returned it ended an episode
    assert dones.any() and is_reset_obs(stored[dones]).all()
    assert len(model.ep_info_buffer) > 0


def test_sb3_dqn_with_per_priorities_change_and_transitions_chain(one_torch_thread) -> None:
    from agents import PrioritizedDQN, PrioritizedReplayBuffer

    env = SB3VecEnv(make(N))
    model = PrioritizedDQN(
        "MlpPolicy",
        env,
        replay_buffer_class=PrioritizedReplayBuffer,
        buffer_size=4000,
        learning_starts=200,
        train_freq=1,
        batch_size=32,
        seed=0,
    )
    model.learn(total_timesteps=2400)
    buf = model.replay_buffer
    filled = buf.size() * buf.n_envs
    leaves = np.asarray(buf.tree.leaves())[:filled]
    assert np.unique(leaves).size > 10  # priorities were written back
    assert buf.beta > 0.4
    obs = buf.observations[: buf.pos].numpy()  # [T, N, D], rows in time order
    nxt = buf.next_observations[: buf.pos].numpy()
    done = buf.dones[: buf.pos].numpy().astype(bool) | buf.timeouts[: buf.pos].numpy().astype(bool)
    chain = ~done[:-1]
    np.testing.assert_array_equal(nxt[:-1][chain], obs[1:][chain])
    assert done.any() and is_reset_obs(obs[1:][done[:-1]]).all()
    assert not is_reset_obs(nxt[done]).all()  # the stored next obs is the true last one


def test_prioritized_dqn_loss_is_the_importance_weighted_mean(one_torch_thread) -> None:
    """mean_i(w_i * huber_i) with w of shape [B, 1], not mean(w) * mean(huber) (a [B, B] product)."""
    import dataclasses

    import torch as th
    from torch.nn import functional as F

    from agents import PrioritizedDQN, PrioritizedReplayBuffer

    model = PrioritizedDQN(
        "MlpPolicy",
        SB3VecEnv(make(N)),
        replay_buffer_class=PrioritizedReplayBuffer,
        buffer_size=2000,
        learning_starts=100,
        train_freq=1,
        batch_size=16,
        seed=0,
    )
    model.learn(total_timesteps=300)
    buf = model.replay_buffer
    batch = buf.sample(16)
    weights = th.linspace(0.05, 1.0, 16).reshape(-1, 1)
    batch = (
        dataclasses.replace(batch, weights=weights)
        if dataclasses.is_dataclass(batch)
        else (batch._replace(weights=weights))
    )
    with th.no_grad():
        best = model.q_net_target(batch.next_observations).max(dim=1).values.reshape(-1, 1)
        target = batch.rewards + (1 - batch.dones) * model.gamma * best
        q = model.q_net(batch.observations).gather(1, batch.actions.long())
        huber = F.smooth_l1_loss(q, target, reduction="none")
        expected = float((weights * huber).mean())
        wrong = float(weights.mean() * huber.mean())
    assert abs(expected - wrong) > 1e-3 * abs(expected)  # the test tells the two apart
    buf.sample = lambda *a, **k: batch
    model.train(gradient_steps=1, batch_size=16)
    assert model.logger.name_to_value["train/loss"] == pytest.approx(expected, rel=1e-5)


def test_plain_sb3_dqn_with_per_warns_that_priorities_never_change(one_torch_thread) -> None:
    from stable_baselines3 import DQN

    from agents import PrioritizedReplayBuffer

    model = DQN(
        "MlpPolicy",
        SB3VecEnv(make(N)),
        replay_buffer_class=PrioritizedReplayBuffer,
        learning_starts=50,
        train_freq=1,
        batch_size=16,
        seed=0,
    )
    with pytest.warns(UserWarning, match="PrioritizedDQN"):
        model.learn(total_timesteps=600)


def sb3_evaluation_episodes(rec: RecordingVectorEnv, n_episodes: int) -> list[float]:
    """The episode returns SB3's evaluate_policy keeps, from the rewards the env returned:
    env i contributes its first (n_episodes + i) // n_envs finished episodes."""
    n = rec.num_envs
    targets = [(n_episodes + i) // n for i in range(n)]
    counts, running, kept = [0] * n, np.zeros(n), []
    for reward, done in zip(rec.rewards, rec.dones[1:], strict=True):
        running += reward
        for i in np.flatnonzero(done):
            if counts[i] < targets[i]:
                kept.append(float(running[i]))
                counts[i] += 1
            running[i] = 0.0
    return kept


def test_evaluate_policy_and_eval_callback_with_gpudqn(one_torch_thread, recwarn, tmp_path) -> None:
    from stable_baselines3.common.callbacks import EvalCallback
    from stable_baselines3.common.evaluation import evaluate_policy

    from agents import GpuDQN

    model = GpuDQN(
        "DuelingPolicy",
        gym.make_vec("GpuTrading-v0", num_envs=N, episode_length=EP_LEN, config=SOURCE),
        seed=0,
    )
    rec = RecordingVectorEnv(make(N))
    returns, lengths = evaluate_policy(
        model, GpuDQN.make_eval_env(rec), n_eval_episodes=10, return_episode_rewards=True
    )
    assert len(returns) == 10 and all(1 <= n <= EP_LEN for n in lengths)
    np.testing.assert_allclose(
        sorted(returns), sorted(sb3_evaluation_episodes(rec, 10)), rtol=1e-5, atol=1e-4
    )
    assert not [w for w in recwarn if "Monitor" in str(w.message)]

    eval_env = gym.make_vec("GpuTrading-v0", num_envs=2, episode_length=EP_LEN, config=SOURCE)
    callback = EvalCallback(
        GpuDQN.make_eval_env(eval_env),
        eval_freq=25,
        n_eval_episodes=4,
        log_path=str(tmp_path),
        verbose=0,
    )
    model.learn(total_timesteps=N * 60, callback=callback)
    assert len(callback.evaluations_results) == 2  # after 25 and 50 of the 60 vector steps
    assert all(len(r) == 4 for r in callback.evaluations_results)
    assert np.isfinite(callback.last_mean_reward)
    assert all(1 <= n <= EP_LEN for n in callback.evaluations_length[-1])
    assert not [w for w in recwarn if "same type" in str(w.message)]


# ------------------------------------------------------------------ TorchRL
def check_collected(td, n_done_min: int) -> None:
    """Batch [N, T] of a TorchRL collector: chained observations, reset after every done."""
    obs = td["observation"].numpy()
    nxt = td["next", "observation"].numpy()
    done = td["next", "done"].squeeze(-1).numpy()
    chain = ~done[:, :-1]
    np.testing.assert_array_equal(nxt[:, :-1][chain], obs[:, 1:][chain])
    assert done.sum() >= n_done_min
    assert is_reset_obs(obs[:, 1:][done[:, :-1]]).all()


def test_torchrl_gym_wrapper_collector(one_torch_thread) -> None:
    pytest.importorskip("torchrl")
    from torchrl.collectors import Collector
    from torchrl.envs.utils import check_env_specs

    from gpu_trading_env.integrations.torchrl_env import make_torchrl_env

    env = make_torchrl_env(num_envs=N, episode_length=EP_LEN, config=SOURCE)
    check_env_specs(env)
    collector = Collector(env, policy=None, frames_per_batch=N * 300, total_frames=N * 600)
    batches = 0
    for td in collector:
        assert td.batch_size == torch.Size([N, 300])
        check_collected(td, n_done_min=60)
        batches += 1
    collector.shutdown()
    assert batches == 2


def test_torchrl_make_torchrl_env_data_equals_a_plain_env(one_torch_thread) -> None:
    pytest.importorskip("torchrl")
    from torchrl.collectors import Collector

    from gpu_trading_env.integrations.torchrl_env import make_torchrl_env

    env = make_torchrl_env(num_envs=N, episode_length=EP_LEN, config=SOURCE)
    env.set_seed(5)
    collector = Collector(env, policy=None, frames_per_batch=N * 100, total_frames=N * 100)
    td = next(iter(collector))
    collector.shutdown()
    actions = td["action"].numpy().argmax(-1).T  # one-hot [N, T] -> [T, N]
    ref = replay(5, actions, extra_resets=1)  # set_seed resets with the seed, the collector again
    np.testing.assert_array_equal(td["observation"].numpy().swapaxes(0, 1), ref["obs"])
    np.testing.assert_array_equal(td["next", "observation"].numpy().swapaxes(0, 1), ref["next_obs"])
    np.testing.assert_array_equal(td["next", "reward"].squeeze(-1).numpy().T, ref["reward"])
    np.testing.assert_array_equal(td["next", "done"].squeeze(-1).numpy().T, ref["done"])
    assert ref["done"].sum() >= N * 5


def test_torchrl_gym_env_by_id(one_torch_thread) -> None:
    pytest.importorskip("torchrl")
    from torchrl.collectors import Collector
    from torchrl.envs import GymEnv
    from torchrl.envs.utils import check_env_specs

    env = GymEnv(
        "GpuTrading-v0", episode_length=EP_LEN
    )  # frameskip fallback needs the std TypeError
    check_env_specs(env)
    collector = Collector(env, policy=None, frames_per_batch=1000, total_frames=1000)
    for td in collector:
        check_collected(td.unsqueeze(0), n_done_min=20)
    collector.shutdown()


def test_torchrl_gym_env_by_id_with_num_envs_is_refused(one_torch_thread) -> None:
    """TorchRL's NEXT_STEP AsyncVectorEnv would store zeros as next observations at dones."""
    pytest.importorskip("torchrl")
    from torchrl.envs import GymEnv

    with pytest.raises(RuntimeError, match=r"num_envs=2\) is refused.*NEXT_STEP.*make_torchrl_env"):
        GymEnv("GpuTrading-v0", num_envs=2, episode_length=EP_LEN)
    single = GymEnv("GpuTrading-v0", episode_length=EP_LEN)  # a single env stays allowed
    assert single.batch_size == torch.Size([])
    TradingEnv(episode_length=EP_LEN, config=SOURCE)  # and so does the env outside TorchRL


# ------------------------------------------------------------------ skrl
@pytest.mark.parametrize("headless", [True, False])
def test_skrl_ppo_stores_the_env_observations(headless: bool, one_torch_thread) -> None:
    pytest.importorskip("skrl")
    from skrl.agents.torch.ppo import PPO, PPO_CFG
    from skrl.envs.wrappers.torch import wrap_env
    from skrl.memories.torch import RandomMemory
    from skrl.trainers.torch import SequentialTrainer
    from skrl.utils.model_instantiators.torch import categorical_model, deterministic_model

    rollouts, timesteps = 32, 512
    rec = RecordingVectorEnv(make(N, autoreset_mode="same_step"))
    env = wrap_env(rec, wrapper="gymnasium")
    layers = [{"name": "net", "input": "OBSERVATIONS", "layers": [32], "activations": "relu"}]
    models = {
        "policy": categorical_model(
            observation_space=env.observation_space,
            action_space=env.action_space,
            device="cpu",
            network=layers,
            output="ACTIONS",
        ),
        "value": deterministic_model(
            observation_space=env.observation_space,
            action_space=env.action_space,
            device="cpu",
            network=layers,
            output="ONE",
        ),
    }
    cfg = PPO_CFG(rollouts=rollouts, learning_epochs=1, mini_batches=2)
    cfg.experiment.write_interval = 0
    cfg.experiment.checkpoint_interval = 0
    agent = PPO(
        models=models,
        memory=RandomMemory(memory_size=rollouts, num_envs=N, device="cpu"),
        observation_space=env.observation_space,
        action_space=env.action_space,
        device="cpu",
        cfg=cfg,
    )
    trainer_cfg = {
        "timesteps": timesteps,
        "headless": headless,
        "disable_progressbar": True,
        "close_environment_at_exit": False,  # its atexit log line outlives pytest's capture
    }
    SequentialTrainer(env=env, agents=agent, cfg=trainer_cfg).train()
    stored = agent.memory.get_tensor_by_name("observations").numpy()  # [rollouts, N, D]
    seen = np.stack(rec.observations)[timesteps - rollouts : timesteps]
    np.testing.assert_array_equal(stored.reshape(seen.shape), seen)
    dones = np.stack(rec.dones)[timesteps - rollouts : timesteps]
    assert dones.any() and is_reset_obs(seen[dones]).all()


def skrl_dqn(env, memory_size: int, agent_class=None):
    from skrl.agents.torch.dqn import DQN, DQN_CFG
    from skrl.memories.torch import RandomMemory
    from skrl.utils.model_instantiators.torch import deterministic_model

    layers = [{"name": "net", "input": "OBSERVATIONS", "layers": [32], "activations": "relu"}]
    models = {
        name: deterministic_model(
            observation_space=env.observation_space,
            action_space=env.action_space,
            device="cpu",
            network=layers,
            output="ACTIONS",
        )
        for name in ("q_network", "target_q_network")
    }
    cfg = DQN_CFG(learning_starts=50, batch_size=16)
    cfg.experiment.write_interval = 0
    cfg.experiment.checkpoint_interval = 0
    return (agent_class or DQN)(
        models=models,
        memory=RandomMemory(memory_size=memory_size, num_envs=env.num_envs, device="cpu"),
        observation_space=env.observation_space,
        action_space=env.action_space,
        device="cpu",
        cfg=cfg,
    )


def test_skrl_dqn_stores_the_true_final_observations(one_torch_thread) -> None:
    """skrl's own DQN, memory and trainer: every stored transition equals a plain env's."""
    pytest.importorskip("skrl")
    from skrl import config
    from skrl.agents.torch.dqn import DQN
    from skrl.trainers.torch import SequentialTrainer

    from gpu_trading_env.integrations.skrl_env import make_skrl_env, with_final_observations

    timesteps = 300
    env = make_skrl_env(num_envs=N, episode_length=8, config=SOURCE)
    agent = skrl_dqn(env, timesteps, with_final_observations(DQN))
    seed = config.torch.key  # what skrl's wrapper resets with
    cfg = {"timesteps": timesteps, "headless": True, "disable_progressbar": True}
    SequentialTrainer(
        env=env, agents=agent, cfg={**cfg, "close_environment_at_exit": False}
    ).train()

    def stored(name: str) -> np.ndarray:
        return agent.memory.get_tensor_by_name(name).numpy()  # [T, N, ...]

    actions = stored("actions")[..., 0].astype(np.int64)
    ref = replay(seed, actions, episode_length=8)
    np.testing.assert_array_equal(stored("observations"), ref["obs"])
    np.testing.assert_array_equal(stored("next_observations"), ref["next_obs"])
    np.testing.assert_array_equal(stored("rewards")[..., 0], ref["reward"])
    done = ref["done"]
    assert done.sum() >= N * 30  # 300 steps of 8-step episodes
    # Within an episode the next observation of step t is the observation of step t + 1.
    chain = ~done[:-1]
    np.testing.assert_array_equal(
        stored("next_observations")[:-1][chain], stored("observations")[1:][chain]
    )
    # ... and at a done it is the episode's last one, not the next episode's first.
    ended = done[:-1]
    assert (
        (stored("next_observations")[:-1][ended] != stored("observations")[1:][ended]).any(-1).all()
    )


def test_skrl_warns_when_it_resets_a_next_step_env(one_torch_thread) -> None:
    pytest.importorskip("skrl")
    from skrl.envs.wrappers.torch import wrap_env

    raw = make(N)  # Gymnasium's default mode: NEXT_STEP
    env = wrap_env(raw, wrapper="gymnasium")
    with pytest.warns(
        UserWarning, match=r"skrl's Gymnasium wrapper is loaded.*NEXT_STEP.*make_skrl_env"
    ):
        env.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        raw.reset()  # once per env
        wrap_env(make(N, autoreset_mode="same_step"), wrapper="gymnasium").reset()


def test_next_step_resets_warn_once_while_skrls_wrapper_is_loaded(monkeypatch) -> None:
    """The reset's check is a look-up in ``sys.modules``, not a walk up the stack: without skrl's
    wrapper loaded it is silent, once it is loaded each NEXT_STEP env warns at its next reset."""
    import inspect
    import types

    from gpu_trading_env import library_checks

    for name in library_checks._SKRL_GYMNASIUM_WRAPPERS:
        monkeypatch.delitem(sys.modules, name, raising=False)

    def no_walk(*args):
        raise AssertionError("reset looked at the stack")

    monkeypatch.setattr(inspect, "currentframe", no_walk)
    monkeypatch.setattr(inspect, "stack", no_walk)
    env, switched = make(N), make(N, autoreset_mode="same_step")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env.reset()  # skrl's wrapper not loaded
        switched.reset()
    wrapper = "skrl.envs.wrappers.torch.gymnasium_envs"
    monkeypatch.setitem(sys.modules, wrapper, types.ModuleType(wrapper))
    with pytest.warns(UserWarning, match=r"if skrl's wrapper drives it.*make_skrl_env") as seen:
        env.reset()
    assert seen[0].filename == __file__  # it names the line that reset the env
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env.reset()  # once per env
        switched.reset()  # SAME_STEP
    switched.set_autoreset_mode("next_step")
    with pytest.warns(UserWarning, match="resets in NEXT_STEP"):
        switched.reset()


def test_make_skrl_env_switches_or_refuses() -> None:
    pytest.importorskip("skrl")
    from gpu_trading_env.integrations.skrl_env import make_skrl_env

    stats = gym.wrappers.vector.RecordEpisodeStatistics(make(N))
    env = make_skrl_env(stats)
    assert stats.unwrapped.autoreset_mode == AutoresetMode.SAME_STEP and env.num_envs == N
    with pytest.raises(ValueError, match="TransformObservation.*final_obs"):
        make_skrl_env(gym.wrappers.vector.TransformObservation(make(N), lambda o: o * 2.0))
    with pytest.raises(TypeError, match="allowed is a TradingVectorEnv"):
        make_skrl_env(gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync"))
    with pytest.raises(TypeError, match="either an env or the keywords"):
        make_skrl_env(make(N), episode_length=5)


def test_skrl_final_observations_need_same_step() -> None:
    from gpu_trading_env.integrations.skrl_env import final_next_observations

    nxt = torch.zeros(2, 3)
    done = torch.tensor([[True], [False]])
    with pytest.raises(RuntimeError, match="make_skrl_env"):
        final_next_observations(nxt, done, ~done, {})
    final = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = final_next_observations(nxt, done, torch.zeros_like(done), {"final_obs": final})
    np.testing.assert_array_equal(out.numpy(), [[0, 1, 2], [0, 0, 0]])
    assert nxt.abs().sum() == 0  # the trainer acts on the input next: it is not written


# ------------------------------------------------------------------ CleanRL style
def test_cleanrl_style_loop_data_equals_a_plain_env() -> None:
    """The loop of examples/cleanrl_style_dqn.py: torch arrays, SAME_STEP, final_obs as the
    bootstrap target; stored transitions and episode returns equal a plain env's."""
    seed, steps = 4, 120
    env = TradingVectorEnv(
        N,
        "cpu",
        array_type="torch",
        episode_length=EP_LEN,
        autoreset_mode="same_step",
        config=SOURCE,
    )
    obs, _ = env.reset(seed=seed)
    gen = torch.Generator().manual_seed(0)
    stored = {"obs": [], "next_obs": [], "reward": [], "done": [], "action": []}
    returns, running = [], torch.zeros(N, dtype=torch.float64)
    for _ in range(steps):
        action = torch.randint(0, env.single_action_space.n, (N,), generator=gen)
        next_obs, reward, terminated, truncated, info = env.step(action)
        done = terminated | truncated
        real_next = next_obs  # as the script
        if "final_obs" in info:
            real_next = torch.where(done[:, None], info["final_obs"], next_obs)
        for key, value in zip(stored, (obs, real_next, reward, done, action), strict=True):
            stored[key].append(value.numpy().copy())
        running += reward.double()
        if done.any():
            np.testing.assert_allclose(
                info["episode_return"][info["_episode_return"]].numpy(),
                running[done].numpy(),
                atol=1e-4,
            )
            returns += info["episode_return"][info["_episode_return"]].tolist()
            running[done] = 0.0
        obs = next_obs
    data = {key: np.stack(value) for key, value in stored.items()}
    ref = replay(seed, data["action"])
    for key in ("obs", "next_obs", "reward", "done"):
        np.testing.assert_array_equal(data[key], ref[key])
    chain = ~data["done"][:-1]
    np.testing.assert_array_equal(data["next_obs"][:-1][chain], data["obs"][1:][chain])
    assert len(returns) == int(ref["done"].sum()) >= N * 8


# ------------------------------------------------------------------ the old module paths
@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("gpu_trading_env.skrl_env", "gpu_trading_env.integrations.skrl_env"),
        ("gpu_trading_env.torchrl_env", "gpu_trading_env.integrations.torchrl_env"),
        ("gpu_trading_env.rllib_env", "gpu_trading_env.integrations.rllib_env"),
        ("gpu_trading_env.library_callers", "gpu_trading_env.library_checks"),
    ],
)
def test_an_old_module_path_is_the_new_module_with_a_deprecation_warning(
    old: str, new: str, monkeypatch
) -> None:
    import importlib

    monkeypatch.delitem(sys.modules, old, raising=False)  # imported before: import it anew
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)


def test_the_old_wrappers_path_gives_the_adapters_objects(monkeypatch) -> None:
    from gpu_trading_env.integrations import mode_switch

    monkeypatch.delitem(sys.modules, "gpu_trading_env.wrappers", raising=False)
    with pytest.warns(DeprecationWarning, match=r"SB3VecEnv from gpu_trading_env\.integrations"):
        from gpu_trading_env.wrappers import SB3VecEnv as OldSB3VecEnv
        from gpu_trading_env.wrappers import env_or_build, switch_to_same_step
    assert OldSB3VecEnv is SB3VecEnv
    assert (env_or_build, switch_to_same_step) == (
        mode_switch.env_or_build,
        mode_switch.switch_to_same_step,
    )


# ------------------------------------------------------------------ every K
def test_torchrl_rollout_for_every_k(vec_env_k, one_torch_thread) -> None:
    """K = 1 and K = 3 built by id, through make_torchrl_env (DISABLED, TorchRL resets): the
    specs check out, episodes of 2 steps end every second step and chain otherwise."""
    pytest.importorskip("torchrl")
    from torchrl.envs.utils import check_env_specs

    from gpu_trading_env.integrations.torchrl_env import make_torchrl_env

    n = 3
    env = make_torchrl_env(vec_env_k(n, episode_length=2))
    check_env_specs(env)
    td = env.rollout(6, break_when_any_done=False)
    dim = env.observation_spec["observation"].shape[-1]
    assert td["observation"].shape == (n, 6, dim) and td["next", "reward"].shape == (n, 6, 1)
    done = td["next", "done"].squeeze(-1).numpy()
    np.testing.assert_array_equal(done, np.tile([False, True] * 3, (n, 1)))
    obs, nxt = td["observation"].numpy(), td["next", "observation"].numpy()
    np.testing.assert_array_equal(nxt[:, 0], obs[:, 1])  # mid-episode steps chain


def test_skrl_wrapper_step_for_every_k(vec_env_k, one_torch_thread) -> None:
    """K = 1 and K = 3 built by id, through make_skrl_env: skrl's wrapper steps [N, K] actions,
    returns [N, 1] rewards and flags, and info's final_obs at the episode ends."""
    pytest.importorskip("skrl")
    from gpu_trading_env.integrations.skrl_env import make_skrl_env

    n = 3
    raw = vec_env_k(n, episode_length=2)
    env = make_skrl_env(raw)
    obs, _ = env.reset()
    assert obs.shape == (n, raw.single_observation_space.shape[0])
    actions = torch.as_tensor(np.stack([raw.single_action_space.sample() for _ in range(n)]))
    for t in range(2):
        nxt, reward, term, trunc, info = env.step(actions.reshape(n, -1))
        assert nxt.shape == obs.shape and reward.shape == term.shape == (n, 1)
        assert bool((term | trunc).all()) == (t == 1)
    assert np.asarray(info["final_obs"]).shape == tuple(obs.shape)
    assert env.render() == (None,) * n


def test_rllib_env_creator_for_every_k(vec_env_k, request) -> None:
    """RLlib's registered creator (VECTOR_ENTRY_POINT: ``num_envs`` given) builds the env of K
    instruments that the id builds."""
    from gpu_trading_env.integrations.rllib_env import rllib_env_creator

    if vec_env_k.k == 3:
        request.applymarker(
            pytest.mark.xfail(
                strict=True,
                reason="rllib_env_creator builds TradingVectorEnv/TradingEnv only: RLlib has no "
                "route to GpuPortfolio-v0 yet (and the portfolio has no single gym.Env for "
                "RLlib's SYNC/ASYNC modes)",
            )
        )
    by_id = vec_env_k(2, episode_length=3)
    data = by_id.unwrapped.data if vec_env_k.k == 3 else None
    env = rllib_env_creator({"num_envs": 2, "episode_length": 3, "data": data})
    assert env.single_action_space == by_id.single_action_space
    assert env.single_observation_space == by_id.single_observation_space
