"""Gymnasium's generic vector-env tests, adapted to ``TradingVectorEnv``.

Adapted from Gymnasium 1.4.0 (https://github.com/Farama-Foundation/Gymnasium, commit
95a790e199c1ea7befa2fca03ac9fc42001c908d, "Update to v1.4.0"): ``tests/vector/test_vector_env.py``,
the generic parts of ``tests/vector/test_sync_vector_env.py``, ``tests/vector/test_autoreset_mode.py``
and ``tests/vector/test_vector_env_info.py``. Each test names the one it adapts.

Gymnasium's tests vectorise sub-envs (CartPole, a counting env whose episodes end after
``max_count`` steps). Here the N envs are rows of one ``TradingVectorEnv`` on a hand-made market
without barriers, stepped with the flat action: every episode is truncated after exactly
``episode_length`` steps, which plays the counting env's ``max_count``. The tests run in every
autoreset mode where they apply to more than one, on the NumPy backend and (``gpu`` marker) on
CUDA. Cases that cannot apply are skipped with the reason that docs/INTEGRATIONS.md
("Deviations from Gymnasium") lists too.

Gymnasium is distributed under the MIT License:

    Copyright (c) 2016 OpenAI
    Copyright (c) 2022 Farama Foundation

    Permission is hereby granted, free of charge, to any person obtaining a copy
    of this software and associated documentation files (the "Software"), to deal
    in the Software without restriction, including without limitation the rights
    to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
    copies of the Software, and to permit persons to whom the Software is
    furnished to do so, subject to the following conditions:

    The above copyright notice and this permission notice shall be included in
    all copies or substantial portions of the Software.

    THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
    IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
    FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
    AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
    LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
    OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN
    THE SOFTWARE.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import VectorizeMode
from gymnasium.utils.env_checker import data_equivalence
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space
from gymnasium.wrappers.vector import DictInfoToList
from hand_market import hand_market

import gpu_trading_env  # noqa: F401  (registers GpuTrading-v0)
from gpu_trading_env import TradingVectorEnv
from gpu_trading_env.core.config import EnvConfig

# The source design's env (45 actions, barriers, penalties): all of the step is exercised.
SOURCE = EnvConfig.source_design()

EPISODE = 3  # the counting env's max_count
FLAT = 2 * 9  # exposure 0 at the first order type: no trade, no barrier, no ruin
MODES = [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED]
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
STEP_INFO_KEYS = ("reward_components", "portfolio_value", "position", "barrier_label")
FINAL_KEYS = ("final_obs", "_final_obs", "final_info", "_final_info")

# Gymnasium's cases that cannot apply, and why: docs/INTEGRATIONS.md lists the same reasons.
NOT_APPLICABLE = {
    "spaces": "the spaces are fixed by the config (Box observations, Discrete actions per env); "
    "Gymnasium's TESTING_SPACES and CustomSpace are sub-env spaces",
    "sub_env_seeds": "the N envs are rows of one env with one generator; Gymnasium's sub-envs "
    "each have a seed, 0..N-1 by default",
    "sub_env_spaces": "there are no sub-envs whose spaces could differ",
    "registered_envs": "it runs over Gymnasium's registered envs, not over a vector env's API",
    "add_info": "it tests VectorEnv._add_info, which this env does not call: its info arrays "
    "are the step's output arrays",
    "render": "the vector env draws no frames (render_mode is None); the single env renders",
}


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(params=MODES, ids=[m.name for m in MODES])
def mode(request: pytest.FixtureRequest) -> AutoresetMode:
    return request.param


def make(
    device: str, mode: AutoresetMode, num_envs: int = 3, episode: int = EPISODE, **kw: Any
) -> TradingVectorEnv:
    t = np.arange(80)
    close = list(100.0 + 5.0 * np.sin(t / 3.0) + 0.1 * t)
    return TradingVectorEnv(
        num_envs,
        device,
        data=hand_market(close),
        autoreset_mode=mode,
        episode_length=episode,
        barriers=False,
        curiosity_state_dims=7,
        config=SOURCE,
        **kw,
    )


def host(a: Any) -> Any:
    """NumPy of a NumPy, torch or CuPy array (dicts: each value)."""
    if isinstance(a, dict):
        return {k: host(v) for k, v in a.items()}
    if hasattr(a, "detach"):
        return a.detach().cpu().numpy()
    if hasattr(a, "__cuda_array_interface__"):
        return a.get()
    return np.asarray(a)


def flat(env: TradingVectorEnv) -> np.ndarray:
    return np.full(env.num_envs, FLAT, dtype=np.int64)


def host_flags(env: TradingVectorEnv) -> bool:
    """Whether the step's flags are host arrays (then SAME_STEP's final keys follow Gymnasium)."""
    return env.device == "cpu" or env.array_type == "numpy"


def assert_final_keys(env: TradingVectorEnv, info: dict[str, Any], done: np.ndarray) -> None:
    """SAME_STEP's final_obs/final_info: where the flags are on the host, present exactly on the
    steps where an episode ended; on a GPU with device arrays, present on every step (the
    documented deviation); wherever present, masked by ``done``."""
    if env.autoreset_mode != AutoresetMode.SAME_STEP:
        assert not set(FINAL_KEYS) & set(info)
        return
    if host_flags(env) and not done.any():
        assert not set(FINAL_KEYS) & set(info)
        return
    for key in ("_final_obs", "_final_info"):
        np.testing.assert_array_equal(host(info[key]), done)
    for key in STEP_INFO_KEYS:
        np.testing.assert_array_equal(host(info["final_info"]["_" + key]), done)


def reset_ended(env: TradingVectorEnv, terminated: Any, truncated: Any) -> Any:
    """DISABLED mode: reset the ended envs, as a user does; the new observations."""
    ended = host(terminated) | host(truncated)
    if env.autoreset_mode == AutoresetMode.DISABLED and ended.any():
        return env.reset(options={"reset_mask": ended})[0]
    return None


# ------------------------------------------------------------------ test_vector_env.py
def test_vector_env_equal(device: str, mode: AutoresetMode) -> None:
    """test_vector_env_equal (async against sync): the owned outputs and the zero-copy double
    buffer return equal observations, rewards, flags and infos (keys and masks included)."""
    owned = make(device, mode, num_envs=4)
    shared = make(device, mode, num_envs=4, copy_outputs=False)
    assert owned.num_envs == shared.num_envs
    assert owned.observation_space == shared.observation_space
    assert owned.single_observation_space == shared.single_observation_space
    assert owned.action_space == shared.action_space
    assert owned.single_action_space == shared.single_action_space
    obs_a, info_a = owned.reset(seed=0)
    obs_b, info_b = shared.reset(seed=0)
    assert np.all(host(obs_a) == host(obs_b)) and data_equivalence(info_a, info_b)
    owned.action_space.seed(0)
    ended = 0
    for _ in range(30):
        actions = owned.action_space.sample()
        assert actions in shared.action_space
        a = owned.step(actions)
        b = shared.step(actions)
        for x, y in zip(a[:4], b[:4], strict=True):
            assert np.all(host(x) == host(y))
        assert data_equivalence(host(a[4]), host(b[4]))
        ended += int((host(a[2]) | host(a[3])).sum())
        reset_a, reset_b = reset_ended(owned, a[2], a[3]), reset_ended(shared, b[2], b[3])
        assert reset_a is None or np.all(host(reset_a) == host(reset_b))
    assert ended > 0


@pytest.mark.parametrize("copy_outputs", [True, False], ids=["owned", "zero-copy"])
def test_final_obs_rows_that_did_not_end_are_zero(device: str, copy_outputs: bool) -> None:
    """SAME_STEP's final_obs has zeros in the rows that did not end (docs/INTEGRATIONS.md), in
    both output modes: episodes staggered by a partial reset end on different steps, so the
    zero-copy buffer reused two steps later must not show the episode that ended then (an odd
    episode length puts each group's ends on both buffers in turn)."""
    env = make(device, AutoresetMode.SAME_STEP, num_envs=4, copy_outputs=copy_outputs)
    env.reset(seed=0)
    env.step(flat(env))
    env.reset(options={"reset_mask": np.array([True, False, True, False])})
    seen = 0
    for _ in range(12):
        *_, terminated, truncated, info = env.step(flat(env))
        done = host(terminated) | host(truncated)
        if "final_obs" not in info:
            continue
        final_obs = host(info["final_obs"])
        assert np.all(final_obs[~done] == 0), f"rows {np.flatnonzero(~done)} not zero"
        assert np.all(np.any(final_obs[done] != 0, axis=1))
        seen += int(done.any() and not done.all())
    assert seen > 0  # some steps ended some envs and not others


@pytest.mark.gpu
def test_cuda_vector_env_equals_the_numpy_one(mode: AutoresetMode) -> None:
    """test_vector_env_equal for the two backends: the same flags, rewards, observations and
    info keys; SAME_STEP's final keys differ only where the CUDA env keeps them (deviation)."""
    cpu, gpu = make("cpu", mode, num_envs=4), make("cuda", mode, num_envs=4)
    np.testing.assert_allclose(cpu.reset(seed=0)[0], host(gpu.reset(seed=0)[0]), rtol=1e-6)
    cpu.action_space.seed(0)
    for _ in range(30):
        actions = cpu.action_space.sample()
        a, b = cpu.step(actions), gpu.step(actions)
        np.testing.assert_array_equal(a[2], host(b[2]))
        np.testing.assert_array_equal(a[3], host(b[3]))
        np.testing.assert_allclose(a[1], host(b[1]), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(a[0], host(b[0]), rtol=1e-5, atol=1e-7)
        kept = set(FINAL_KEYS) if mode == AutoresetMode.SAME_STEP else set()
        assert set(b[4]) == set(a[4]) | kept
        for key in a[4]:
            if key.startswith("_") and not isinstance(a[4][key], dict):
                np.testing.assert_array_equal(a[4][key], host(b[4][key]))
        if reset_ended(cpu, a[2], a[3]) is not None:
            reset_ended(gpu, b[2], b[3])


def test_vector_obs_action_spaces(device: str, mode: AutoresetMode) -> None:
    """test_vector_obs_action_spaces: observations lie in the batched observation space, and a
    sample of the batched action space steps the env."""
    env = make(device, mode)
    assert env.observation_space == batch_space(env.single_observation_space, env.num_envs)
    assert env.action_space == batch_space(env.single_action_space, env.num_envs)
    obs, _ = env.reset(seed=0)
    assert host(obs) in env.observation_space
    obs = env.step(env.action_space.sample())[0]
    assert host(obs) in env.observation_space


def test_vector_obs_action_spaces_over_testing_spaces() -> None:
    """test_vector_obs_action_spaces over Gymnasium's TESTING_SPACES."""
    pytest.skip(NOT_APPLICABLE["spaces"])


def test_final_obs_info(device: str, mode: AutoresetMode) -> None:
    """test_final_obs_info: final_obs and final_info only in SAME_STEP mode; where the flags are
    on the host only on the steps where an episode ended, as SyncVectorEnv reports them."""
    env = make(device, mode)
    env.reset(seed=0)
    ended_steps = 0
    for _ in range(3 * EPISODE):
        _, _, terminated, truncated, info = env.step(flat(env))
        done = host(terminated) | host(truncated)
        ended_steps += bool(done.any())
        assert_final_keys(env, info, done)
        reset_ended(env, terminated, truncated)
    assert ended_steps >= 2


def test_random_seeding_basics(device: str, mode: AutoresetMode) -> None:
    """test_random_seeding_basics: reset(seed=42) sets the seed, reset(seed=None) keeps it. One
    generator: ``np_random_seed`` is an int, not SyncVectorEnv's tuple of N sub-env seeds."""
    env = make(device, mode)
    first = host(env.reset(seed=42)[0])
    assert env.np_random_seed == 42
    env.reset(seed=None)
    assert env.np_random_seed == 42
    np.testing.assert_array_equal(host(env.reset(seed=42)[0]), first)


def test_random_seeds_set_at_retrieval() -> None:
    """test_random_seeds_set_at_retrieval: SyncVectorEnv's default sub-env seeds 0..N-1."""
    pytest.skip(NOT_APPLICABLE["sub_env_seeds"])


def test_partial_reset(device: str, mode: AutoresetMode) -> None:
    """test_partial_reset: a masked reset restarts the masked envs as a full reset with the same
    seeds would, and leaves the others where they are."""
    env = make(device, mode, episode=10)
    reset_obs = host(env.reset(seed=[0, 1, 2])[0])
    env.action_space.seed(123)
    env.step(env.action_space.sample())
    env.step(env.action_space.sample())
    step_obs = host(env.step(env.action_space.sample())[0])
    reset_mask_obs = host(
        env.reset(seed=[0, 1, 0], options={"reset_mask": np.array([True, True, False])})[0]
    )
    assert np.all(reset_mask_obs[:2] == reset_obs[:2])
    assert np.all(reset_mask_obs[2] == step_obs[2])


def test_partial_reset_failure(device: str, mode: AutoresetMode) -> None:
    """test_partial_reset_failure: Gymnasium's exception types and messages for bad masks, an
    all-False mask included; a mask on the env's device is checked the same way."""
    env = make(device, mode)
    env.reset(options={"reset_mask": np.array([True, True, True])})
    for mask, shape in (
        (np.array([True]), "(1,)"),
        (np.array([True, True, False, False]), "(4,)"),
        (np.array([[True, True, True]]), "(1, 3)"),
    ):
        message = f"`options['reset_mask']` must have shape `(3,)`, got {shape}"
        with pytest.raises(ValueError, match=re.escape(message)):
            env.reset(options={"reset_mask": mask})
    message = (
        "`options['reset_mask']` must contain a boolean array with at least one True value, "
        "got reset_mask=[False False False]"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        env.reset(options={"reset_mask": np.array([False, False, False])})
    for mask, dtype in ((np.array([1, 1, 0]), "int64"), (np.array([1.0, 1.0, 0.0]), "float64")):
        message = f"`options['reset_mask']` must have `dtype=np.bool_`, got {dtype}"
        with pytest.raises(TypeError, match=re.escape(message)):
            env.reset(options={"reset_mask": mask})
    with pytest.raises(TypeError, match=re.escape("must be a numpy array")):
        env.reset(options={"reset_mask": [True, True, True]})
    if device == "cuda":
        import torch

        with pytest.raises(ValueError, match="at least one True value"):
            env.reset(options={"reset_mask": torch.zeros(3, dtype=torch.bool, device="cuda")})
        with pytest.raises(TypeError, match="dtype=np.bool_"):
            env.reset(options={"reset_mask": torch.ones(3, dtype=torch.int64, device="cuda")})


def test_action_count_compatibility(device: str, mode: AutoresetMode) -> None:
    """test_action_count_compatibility: too few or too many actions raise ValueError, a scalar
    TypeError; so does a float dtype (an action type, not a count)."""
    num_envs = 4
    env = make(device, mode, num_envs=num_envs)
    env.reset()
    correct_actions = env.action_space.sample()
    assert len(correct_actions) == num_envs
    obs, rewards, terminations, truncations, _ = env.step(correct_actions)
    assert len(obs) == len(rewards) == len(terminations) == len(truncations) == num_envs
    with pytest.raises(ValueError):
        env.step(correct_actions[: num_envs - 1])
    with pytest.raises(ValueError):
        env.step(np.concatenate([correct_actions, correct_actions[:1]]))
    with pytest.raises(TypeError):
        env.step(0)
    with pytest.raises(TypeError, match="dtype float64 are invalid"):
        env.step(correct_actions.astype(np.float64))
    if device == "cuda":
        import torch

        with pytest.raises(TypeError, match="dtype torch.float32 are invalid"):
            env.step(torch.zeros(num_envs, dtype=torch.float32, device="cuda"))
    env.step(correct_actions)  # nothing changed by the refused calls


# ------------------------------------------------------------------ test_sync_vector_env.py
def test_create_vector_env(device: str, mode: AutoresetMode) -> None:
    """test_create_sync_vector_env."""
    env = make(device, mode, num_envs=8)
    env.close()
    assert env.num_envs == 8


def test_metadata_vector_env(device: str) -> None:
    """test_metadata_sync_vector_env: each env's metadata holds its own mode; the class-level
    metadata is not changed."""
    env_1 = make(device, AutoresetMode.NEXT_STEP)
    env_2 = make(device, AutoresetMode.SAME_STEP)
    assert env_1.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
    assert env_2.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    assert "autoreset_mode" not in TradingVectorEnv.metadata


def test_reset_vector_env(device: str, mode: AutoresetMode) -> None:
    """test_reset_sync_vector_env (a torch tensor on CUDA, the default array type there)."""
    env = make(device, mode, num_envs=8)
    observations, infos = env.reset()
    assert isinstance(env.observation_space, gym.spaces.Box)
    if device == "cpu":
        assert isinstance(observations, np.ndarray)
    obs = host(observations)
    assert obs.dtype == env.observation_space.dtype
    assert obs.shape == (8, *env.single_observation_space.shape) == env.observation_space.shape
    assert infos == {}


@pytest.mark.parametrize("use_single_action_space", [True, False])
def test_step_vector_env(device: str, mode: AutoresetMode, use_single_action_space: bool) -> None:
    """test_step_sync_vector_env."""
    env = make(device, mode, num_envs=8)
    env.reset()
    assert isinstance(env.single_action_space, gym.spaces.Discrete)
    assert isinstance(env.action_space, gym.spaces.MultiDiscrete)
    if use_single_action_space:
        actions = [env.single_action_space.sample() for _ in range(8)]
    else:
        actions = env.action_space.sample()
    observations, rewards, terminations, truncations = map(host, env.step(actions)[:4])
    assert observations.dtype == env.observation_space.dtype
    assert observations.shape == (8, *env.single_observation_space.shape)
    assert isinstance(rewards[0], float | np.floating) and rewards.ndim == 1 and rewards.size == 8
    for flags in (terminations, truncations):
        assert flags.dtype == np.bool_ and flags.ndim == 1 and flags.size == 8


def test_render_vector_env(device: str, mode: AutoresetMode) -> None:
    """test_render_sync_vector, its render_mode=None part: render() returns None."""
    env = make(device, mode)
    assert env.render_mode is None
    env.reset()
    assert env.render() is None


def test_render_vector_env_rgb_array() -> None:
    """test_render_sync_vector, its render_mode="rgb_array" part."""
    pytest.skip(NOT_APPLICABLE["render"])


def test_call_vector_env(device: str, mode: AutoresetMode) -> None:
    """test_call_sync_vector_env: call() returns a tuple of N results, of a method or an
    attribute."""
    env = make(device, mode, num_envs=4)
    env.reset()
    frames = env.call("render")
    assert isinstance(frames, tuple) and frames == (None,) * 4
    modes = env.call("autoreset_mode")
    assert isinstance(modes, tuple) and modes == (mode,) * 4


def test_set_attr_vector_env(device: str, mode: AutoresetMode) -> None:
    """test_set_attr_sync_vector_env, with N equal values: the N envs share one object, so
    differing values raise ValueError (a documented deviation)."""
    env = make(device, mode, num_envs=4)
    env.set_attr("gravity", [9.81] * 4)
    assert env.get_attr("gravity") == (9.81,) * 4
    with pytest.raises(ValueError, match="differing values"):
        env.set_attr("gravity", [9.81, 3.72, 8.87, 1.62])


def test_check_spaces_vector_env() -> None:
    """test_check_spaces_sync_vector_env."""
    pytest.skip(NOT_APPLICABLE["sub_env_spaces"])


def test_custom_space_vector_env() -> None:
    """test_custom_space_sync_vector_env."""
    pytest.skip(NOT_APPLICABLE["spaces"])


def test_vector_env_seed(device: str, mode: AutoresetMode) -> None:
    """test_sync_vector_env_seed: the action space's samples follow its seed."""
    env_1, env_2 = make(device, mode), make(device, mode)
    env_1.action_space.seed(123)
    env_2.action_space.seed(123)
    for _ in range(100):
        assert np.all(env_1.action_space.sample() == env_2.action_space.sample())


def test_vector_determinism_over_registered_envs() -> None:
    """test_sync_vector_determinism."""
    pytest.skip(NOT_APPLICABLE["registered_envs"])


# ------------------------------------------------------------------ test_autoreset_mode.py
def staggered(device: str, mode: AutoresetMode) -> TradingVectorEnv:
    """Envs whose episodes end at the counting env's steps of max_count [2, 3, 3]: every env
    one step in, then envs 1 and 2 restarted."""
    env = make(device, mode)
    env.reset(seed=[0, 1, 2])
    env.step(flat(env))
    env.reset(options={"reset_mask": np.array([False, True, True])})
    return env


def run_staggered(env: TradingVectorEnv, steps: int = 4) -> list[tuple[Any, ...]]:
    """``steps`` flat steps as host arrays ``(obs, reward, terminated, truncated, info)``, the
    info as it came (device arrays included)."""
    out = []
    for _ in range(steps):
        obs, reward, terminated, truncated, info = env.step(flat(env))
        out.append((host(obs), host(reward), host(terminated), host(truncated), info))
        if env.autoreset_mode == AutoresetMode.DISABLED and out[-1][3].any():
            out[-1] += (host(env.reset(options={"reset_mask": out[-1][3]})[0]),)
    return out


def reference(device: str) -> list[tuple[Any, ...]]:
    """The staggered run in DISABLED mode, each ended env reset by mask: the observations the
    other modes' autoresets must show (the same draws of the same Philox streams)."""
    return run_staggered(staggered(device, AutoresetMode.DISABLED))


def assert_episode_masks(info: dict[str, Any], ended: list[bool]) -> None:
    np.testing.assert_array_equal(host(info["_episode_return"]), ended)
    np.testing.assert_array_equal(host(info["_episode_length"]), ended)


def test_autoreset_next_step(device: str) -> None:
    """test_autoreset_next_step: an ended env returns its reset observation one step later, with
    reward 0 and both flags False."""
    env = staggered(device, AutoresetMode.NEXT_STEP)
    assert env.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
    ref = reference(device)
    steps = run_staggered(env)
    never, first, rest = [False] * 3, [True, False, False], [False, True, True]
    for k, (terminated, truncated, ended) in enumerate(
        [(never, never, never), (never, first, first), (never, rest, rest), (never, never, never)]
    ):
        obs, reward, te, tr, info = steps[k]
        np.testing.assert_array_equal(te, terminated)
        np.testing.assert_array_equal(tr, truncated)
        assert_episode_masks(info, ended)
        assert not set(FINAL_KEYS) & set(info)
    np.testing.assert_array_equal(steps[1][0], ref[1][0])  # the ended env's last observation
    np.testing.assert_array_equal(steps[2][0][0], ref[1][5][0])  # its reset, one step later
    assert steps[2][1][0] == 0.0
    np.testing.assert_array_equal(steps[3][0][1:], ref[2][5][1:])
    np.testing.assert_array_equal(steps[3][1][1:], [0.0, 0.0])


def test_autoreset_within_step(device: str) -> None:
    """test_autoreset_within_step: an ended env returns its reset observation in the same step,
    its last one in final_obs, masked by _final_obs (on the host: only where one ended)."""
    env = staggered(device, AutoresetMode.SAME_STEP)
    assert env.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    ref = reference(device)
    steps = run_staggered(env)
    never, first, rest = [False] * 3, [True, False, False], [False, True, True]
    for k, ended in enumerate([never, first, rest, never]):
        obs, reward, te, tr, info = steps[k]
        np.testing.assert_array_equal(tr, ended)
        np.testing.assert_array_equal(reward, ref[k][1])
        assert_episode_masks(info, ended)
        assert_final_keys(env, info, np.asarray(ended))
        if any(ended):
            np.testing.assert_array_equal(host(info["final_obs"])[ended], ref[k][0][ended])
            np.testing.assert_array_equal(obs[ended], ref[k][5][ended])
            assert host(info["final_obs"])[ended] in batch_space(
                env.single_observation_space, sum(ended)
            )
            assert not host(info["final_obs"])[~np.asarray(ended)].any()


def test_autoreset_disabled(device: str) -> None:
    """test_autoreset_disabled: an ended env waits for reset(options={"reset_mask": ...}), which
    restarts it alone."""
    env = staggered(device, AutoresetMode.DISABLED)
    assert env.metadata["autoreset_mode"] == AutoresetMode.DISABLED
    before = host(env.observe())
    steps = run_staggered(env)
    never, first, rest = [False] * 3, [True, False, False], [False, True, True]
    for k, ended in enumerate([never, first, rest, never]):
        obs, reward, te, tr, info = steps[k][:5]
        np.testing.assert_array_equal(tr, ended)
        assert_episode_masks(info, ended)
        assert not set(FINAL_KEYS) & set(info)
        assert not np.array_equal(obs, before)  # every env moved on
        if any(ended):
            reset_obs = steps[k][5]
            keep = ~np.asarray(ended)
            np.testing.assert_array_equal(reset_obs[keep], obs[keep])
            assert not np.array_equal(reset_obs[ended], obs[ended])
            before = reset_obs
        else:
            before = obs


def test_autoreset_metadata(device: str, mode: AutoresetMode) -> None:
    """test_autoreset_metadata: the mode, given as the enum or its value."""
    assert make(device, mode).metadata["autoreset_mode"] == mode
    assert make(device, mode.value).metadata["autoreset_mode"] == mode


def test_same_step_final_obs(device: str) -> None:
    """test_same_step_final_obs (episodes of max_count [2, 3, 3]; over the env's own
    observation space, TESTING_SPACES cannot apply): each ended env's final_obs lies in the
    single observation space, at the step it ended, masked True there alone."""
    env = staggered(device, AutoresetMode.SAME_STEP)
    assert env.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    for ended in ([False] * 3, [True, False, False], [False, True, True]):
        info = env.step(flat(env))[4]
        assert_final_keys(env, info, np.asarray(ended))
        for i in np.flatnonzero(ended):
            assert host(info["final_obs"])[i] in env.single_observation_space


@pytest.mark.parametrize(
    "vectorization_mode",
    [VectorizeMode.VECTOR_ENTRY_POINT, VectorizeMode.SYNC, VectorizeMode.ASYNC],
)
def test_make_vec_autoreset(vectorization_mode: VectorizeMode, mode: AutoresetMode) -> None:
    """test_make_vec_autoreset (which assigns the metadata where it means to assert it). The
    env's own vector entry point takes the mode as a keyword: Gymnasium passes vector_kwargs
    only to its Sync/AsyncVectorEnv."""
    for value in (mode, mode.value):
        if vectorization_mode == VectorizeMode.VECTOR_ENTRY_POINT:
            kwargs: dict[str, Any] = {"autoreset_mode": value}
        else:
            kwargs = {"vector_kwargs": {"autoreset_mode": value}}
        envs = gym.make_vec(
            "GpuTrading-v0",
            num_envs=2,
            vectorization_mode=vectorization_mode,
            episode_length=EPISODE,
            **kwargs,
        )
        assert envs.metadata["autoreset_mode"] == mode
        envs.close()


# ------------------------------------------------------------------ test_vector_env_info.py
def test_vector_add_info() -> None:
    """test_vector_add_info."""
    pytest.skip(NOT_APPLICABLE["add_info"])


def assert_masked(info: dict[str, Any], n: int) -> None:
    """Every key ``k`` (in nested dicts too) comes with ``_k``, a bool [n] array."""
    for key, value in info.items():
        if key.startswith("_"):
            assert key[1:] in info, f"mask {key} without its key"
            continue
        assert "_" + key in info, f"info[{key!r}] has no mask _{key}"
        mask = host(info["_" + key])
        assert mask.dtype == np.bool_ and mask.shape == (n,), (key, mask.dtype, mask.shape)
        if isinstance(value, dict):
            assert_masked(value, n)


def test_vector_return_info(device: str, mode: AutoresetMode) -> None:
    """test_vector_return_info: the reset info and every step's info, each key with its mask;
    the step arrays valid in every row but where SyncVectorEnv has a reset's empty info
    (NEXT_STEP: the rows autoreset in the step; SAME_STEP: the rows that ended), the episode
    statistics where an episode ended."""
    env = make(device, mode)
    _, reset_info = env.reset(seed=0)
    assert reset_info == {}
    last_done = np.zeros(env.num_envs, dtype=bool)
    ended = 0
    for _ in range(2 * EPISODE + 1):
        _, _, terminated, truncated, info = env.step(flat(env))
        assert_masked(info, env.num_envs)
        done = host(terminated) | host(truncated)
        fresh = {AutoresetMode.NEXT_STEP: ~last_done, AutoresetMode.SAME_STEP: ~done}
        for key in STEP_INFO_KEYS:
            np.testing.assert_array_equal(host(info["_" + key]), fresh.get(mode, True))
        np.testing.assert_array_equal(host(info["_episode_return"]), done)
        reset_ended(env, terminated, truncated)
        last_done = done
        ended += int(done.any())
    assert ended == 2


def test_step_info_masks_are_cached_and_read_only(device: str) -> None:
    """The masks of the step arrays are one array made with the env on steps where every row is
    valid (no allocation per step where the flags are on the host); the NumPy one is read-only,
    so no caller can change what later steps report. A step that autoresets rows gets its own."""
    env = make(device, AutoresetMode.NEXT_STEP)
    env.reset(seed=0)
    first = env.step(flat(env))[4]
    second = env.step(flat(env))[4]
    if host_flags(env):
        assert all(second["_" + key] is first["_portfolio_value"] for key in STEP_INFO_KEYS)
    if env.array_type == "numpy":
        with pytest.raises(ValueError, match="read-only"):
            first["_position"][0] = False
    env.step(flat(env))  # every episode ends (EPISODE steps)
    reset_step = env.step(flat(env))[4]
    assert not host(reset_step["_position"]).any()
    assert host(env.step(flat(env))[4]["_position"]).all()
    assert host(first["_position"]).all()  # no later step wrote the mask it returned


@pytest.mark.gpu
@pytest.mark.parametrize("copy_outputs", [True, False])
def test_cuda_steps_follow_the_conventions_without_a_host_sync(
    mode: AutoresetMode, copy_outputs: bool
) -> None:
    """The conventions cost the CUDA step no host sync: torch's sync debug mode raises on any
    synchronising torch call, over steps where episodes end and steps where none does."""
    import torch

    env = make("cuda", mode, episode=4, copy_outputs=copy_outputs)
    env.reset(seed=0)
    actions = torch.full((env.num_envs,), FLAT, dtype=torch.int64, device="cuda")
    for _ in range(2):  # the first steps build the output sets, their views and launch arguments
        env.step(actions)
    torch.cuda.set_sync_debug_mode("error")
    try:
        infos = [env.step(actions)[4] for _ in range(2)]  # the second ends every episode
    finally:
        torch.cuda.set_sync_debug_mode("default")
    for info in infos:
        assert_masked(info, env.num_envs)
        assert set(FINAL_KEYS) <= set(info) or mode != AutoresetMode.SAME_STEP


def test_dict_info_to_list_reads_every_key(mode: AutoresetMode) -> None:
    """Gymnasium's DictInfoToList wrapper, which reads each key's mask, gives every env its
    values of the step arrays (and of the episode statistics where an episode ended); in
    SAME_STEP an ended env's are in its final_info (its own info is the new episode's)."""
    env = DictInfoToList(make("cpu", mode))
    env.reset(seed=0)
    for _ in range(EPISODE):
        _, _, terminated, truncated, infos = env.step(flat(env.unwrapped))
        assert len(infos) == 3
        for i, row in enumerate(infos):
            ended = bool(terminated[i] | truncated[i])
            if mode == AutoresetMode.SAME_STEP and ended:
                row = row["final_info"]
            assert set(STEP_INFO_KEYS) <= set(row)
            assert ("episode_return" in row) == ended
        reset_ended(env.unwrapped, terminated, truncated)


def test_integrations_doc_lists_every_reason_for_a_skip() -> None:
    """docs/INTEGRATIONS.md names each reason these tests skip a Gymnasium case for."""
    doc = Path(__file__).resolve().parents[1] / "docs" / "INTEGRATIONS.md"
    text = " ".join(doc.read_text(encoding="utf-8").split())
    missing = [k for k, reason in NOT_APPLICABLE.items() if reason not in text]
    assert not missing, f"docs/INTEGRATIONS.md does not give the reasons {missing}"


# ------------------------------------------------------------------ against SyncVectorEnv
def assert_info_as_sync(ours: dict[str, Any], sync: dict[str, Any], where: str) -> None:
    """Every key of ``sync`` (SyncVectorEnv's info) is in ``ours`` with an equal ``_key`` mask
    and equal values where masked (nested dicts too); a key only ``ours`` has is valid in no
    row (no env's info has it), the documented deviations aside (checked by the caller)."""
    for key, value in sync.items():
        if key.startswith("_"):
            continue
        assert key in ours, f"{where}: {key} missing"
        mask = host(sync["_" + key])
        np.testing.assert_array_equal(host(ours["_" + key]), mask, err_msg=f"{where}: _{key}")
        if isinstance(value, dict):
            assert_info_as_sync(ours[key], value, f"{where}.{key}")
            continue
        mine = host(ours[key])
        for i in np.flatnonzero(mask):
            np.testing.assert_array_equal(mine[i], np.asarray(value[i]), err_msg=f"{where}[{i}]")
    for key in set(ours) - set(sync):
        if not key.startswith("_") and key not in ("episode_return", "episode_length"):
            assert not host(ours["_" + key]).any(), f"{where}: {key} valid where Sync has none"


@pytest.mark.parametrize("copy_outputs", [True, False], ids=["owned", "zero-copy"])
def test_info_equals_sync_vector_env_of_single_envs(
    mode: AutoresetMode, copy_outputs: bool
) -> None:
    """The info of every step (keys, ``_key`` masks, values where masked) is what Gymnasium's
    SyncVectorEnv builds from the single env ``gym.make("GpuTrading-v0")``, over 60 steps of
    random actions in each autoreset mode: the step arrays' masks are False where SyncVectorEnv
    holds a reset's empty info (NEXT_STEP: rows autoreset in the step; SAME_STEP: rows that
    ended, whose step info is in final_info). The deviation (docs/INTEGRATIONS.md): the episode
    statistics are keys on every step, and in SAME_STEP at the top level too, masked by done.

    A market of episode_length + 1 bars leaves one start bar, so both draw the same episodes;
    the barriers end them at different steps, and a partial reset staggers them further."""
    t = np.arange(9)
    kw = {"data": hand_market(list(100.0 + 5.0 * np.sin(t) + t)), "episode_length": 8}
    kw |= {"config": SOURCE}
    kw |= {"curiosity_state_dims": 7, "profit_target_bps": 30.0, "stop_loss_bps": 30.0}
    sync = gym.vector.SyncVectorEnv(
        [lambda: gym.make("GpuTrading-v0", **kw) for _ in range(4)], autoreset_mode=mode
    )
    ours = TradingVectorEnv(4, "cpu", autoreset_mode=mode, copy_outputs=copy_outputs, **kw)
    for env in (sync, ours):
        env.reset(seed=0)
        env.step(np.zeros(4, dtype=np.int64))
        env.reset(options={"reset_mask": np.array([True, False, True, False])})
    rng = np.random.default_rng(0)
    partial = ended = 0
    for k in range(60):
        actions = rng.integers(0, ours.single_action_space.n, 4)
        a, b = sync.step(actions), ours.step(actions)
        for x, y in zip(a[:4], b[:4], strict=True):
            np.testing.assert_array_equal(x, host(y))
        done = a[2] | a[3]
        partial += int(done.any() and not done.all())
        ended += int(done.sum())
        info = dict(b[4])
        if mode == AutoresetMode.SAME_STEP:  # the deviation: also at the top level
            for key in ("episode_return", "episode_length"):
                np.testing.assert_array_equal(host(info.pop("_" + key)), done)
                value = host(info.pop(key))[done]
                if done.any():
                    np.testing.assert_array_equal(value, a[4]["final_info"][key][done])
        assert_info_as_sync(info, a[4], f"step {k}")
        # DISABLED: every ended env is reset here; NEXT_STEP: some, before their autoreset.
        manual = mode == AutoresetMode.DISABLED or (mode == AutoresetMode.NEXT_STEP and k % 2)
        if manual and done.any():
            for env in (sync, ours):
                env.reset(options={"reset_mask": done})
    assert partial > 5 and ended > 10


def test_reset_step_shapes_and_autoreset_modes_for_every_k(vec_env_k, mode: AutoresetMode) -> None:
    """K = 1 and K = 3 built by id: the spaces' shapes, and each mode's step after the episodes
    of 3 steps end (NEXT_STEP: a reset step with reward 0; SAME_STEP: final_obs; DISABLED: the
    envs wait for a masked reset)."""
    n = 4
    env = vec_env_k(n, episode_length=3, autoreset_mode=mode)
    assert env.metadata["autoreset_mode"] == mode
    obs, _ = env.reset(seed=0)
    assert obs.shape == env.observation_space.shape == (n, env.single_observation_space.shape[0])
    assert env.action_space.shape == ((n,) if vec_env_k.k == 1 else (n, 3))
    for t in range(3):
        obs, reward, term, trunc, info = env.step(env.action_space.sample())
        assert obs.shape == env.observation_space.shape and obs.dtype == np.float32
        assert reward.shape == term.shape == trunc.shape == (n,)
        assert bool((term | trunc).all()) == (t == 2)
    assert info["_episode_length"].all() and (info["episode_length"] == 3).all()
    if mode == AutoresetMode.SAME_STEP:
        assert info["_final_obs"].all() and info["final_obs"].shape == obs.shape
        assert not np.array_equal(info["final_obs"], obs)
    else:
        assert "final_obs" not in info
    if mode == AutoresetMode.DISABLED:
        obs, _ = env.reset(options={"reset_mask": np.ones(n, dtype=bool)})
    last = obs
    obs, reward, term, trunc, info = env.step(env.action_space.sample())
    if mode == AutoresetMode.NEXT_STEP:  # the reset step
        assert (reward == 0).all() and not (term | trunc).any()
        assert not info["_episode_length"].any()
    else:
        assert not np.array_equal(obs, last)
    env.close()
