"""The Gymnasium contract of ``TradingVectorEnv`` and ``TradingEnv`` on the NumPy backend:
autoreset modes, seeding, reset options, input validation, several instruments, registration
and the env checkers of Gymnasium and Stable-Baselines3.

Markets are hand-made (``hand_market``) so that the first feature of an observation encodes the
bar it shows: ``features[t, 0] = 0.01 + 0.001*t`` with t the global row.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode
from hand_market import hand_market

import gpu_trading_env  # noqa: F401  (registers GpuTrading-v0)
from gpu_runtime.device import cuda_available
from gpu_trading_env import EnvConfig, TradingEnv, TradingVectorEnv

N_BARS = 60
EP_LEN = 5
SHORT, HALF_SHORT, FLAT, HALF_LONG, LONG = range(5)


def act(e: int, o: int = 0, k: int = 0) -> int:
    return e * 9 + o * 3 + k


def wavy_close(n: int = N_BARS) -> list[float]:
    t = np.arange(n)
    return list(100.0 + 5.0 * np.sin(t / 3.0) + 0.1 * t)


def make(num_envs=3, mode="same_step", n_instruments=1, n_bars=N_BARS, **kw) -> TradingVectorEnv:
    cfg = {
        "episode_length": EP_LEN,
        "curiosity_state_dims": 7,
        "autoreset_mode": mode,
        "barriers": False,
        **kw,
    }
    data = hand_market(wavy_close(n_bars), n_instruments=n_instruments)
    # The source design's 45 actions (act() above) and its shaping, so the autoreset and seeding
    # contracts are checked with every part of the step that carries state across steps.
    return TradingVectorEnv(num_envs, "cpu", data=data, config=EnvConfig.source_design(**cfg))


def bar_of(obs: np.ndarray) -> np.ndarray:
    """The global bar an observation shows (decoded from its first feature)."""
    return np.rint((np.asarray(obs)[..., 0].astype(np.float64) - 0.01) / 0.001).astype(np.int64)


def is_reset_obs(obs: np.ndarray) -> np.ndarray:
    """Flat with the initial capital: value feature 1, position feature 0 (spread 0)."""
    return (obs[..., -3] == 1.0) & (obs[..., -2] == 0.0)


def run(env: TradingVectorEnv, actions: np.ndarray) -> list[tuple]:
    out = []
    for a in actions:
        obs, r, te, tr, info = env.step(a)
        out.append(
            (
                obs.copy(),
                r.copy(),
                te.copy(),
                tr.copy(),
                info["reward_components"].copy(),
                info["portfolio_value"].copy(),
                info["position"].copy(),
                info["barrier_label"].copy(),
            )
        )
    return out


def assert_same(a: list[tuple], b: list[tuple]) -> None:
    for x, y in zip(a, b, strict=True):
        for u, v in zip(x, y, strict=True):
            np.testing.assert_array_equal(u, v)


# ------------------------------------------------------------------------------ autoreset


def test_autoreset_mode_metadata_and_attribute():
    for value, mode in [
        ("same_step", AutoresetMode.SAME_STEP),
        ("NextStep", AutoresetMode.NEXT_STEP),
        (AutoresetMode.DISABLED, AutoresetMode.DISABLED),
    ]:
        env = make(mode=value)
        assert env.autoreset_mode == mode
        assert env.metadata["autoreset_mode"] == mode
    assert make(autoreset_mode=AutoresetMode.SAME_STEP).autoreset_mode == AutoresetMode.SAME_STEP
    # The default is Gymnasium's own vector default.
    assert TradingVectorEnv(1, "cpu").autoreset_mode == AutoresetMode.NEXT_STEP


def test_same_step_final_obs_and_reset_obs():
    same = make(mode="same_step")
    ref = make(mode="disabled")
    starts = np.array([0, 10, 20])
    same.reset(seed=4, options={"start_index": starts})
    ref.reset(seed=4, options={"start_index": starts})
    actions = np.array([act(LONG), act(SHORT), act(HALF_LONG)])
    for i in range(EP_LEN):
        obs, r, te, tr, info = same.step(actions)
        obs_r, r_r, te_r, tr_r, info_r = ref.step(actions)
        np.testing.assert_array_equal(r, r_r)
        np.testing.assert_array_equal(te | tr, te_r | tr_r)
        np.testing.assert_array_equal(info["portfolio_value"], info_r["portfolio_value"])
        done = te | tr
        np.testing.assert_array_equal(info["_episode_return"], done)
        if i < EP_LEN - 1:
            assert not done.any()
            assert "final_obs" not in info  # on the host only steps where an episode ended
            np.testing.assert_array_equal(obs, obs_r)
        else:
            np.testing.assert_array_equal(info["_final_obs"], done)
    assert tr.all() and not te.any()
    # final_obs is the observation the ended episode would have shown next ...
    np.testing.assert_array_equal(info["final_obs"], obs_r)
    assert not is_reset_obs(info["final_obs"]).any()
    np.testing.assert_array_equal(bar_of(info["final_obs"]), starts + EP_LEN)
    # ... and obs is the first observation of the new episode, at a drawn start bar
    assert is_reset_obs(obs).all()
    assert ((bar_of(obs) >= 0) & (bar_of(obs) < N_BARS - EP_LEN)).all()
    np.testing.assert_array_equal(same.observe(), obs)
    np.testing.assert_array_equal(info["episode_length"], [EP_LEN] * 3)
    # the next step continues from the new start bar, flat
    obs2, *_ = same.step(np.full(3, act(FLAT)))
    np.testing.assert_array_equal(bar_of(obs2), bar_of(obs) + 1)


def test_same_step_episode_return_is_sum_of_rewards():
    env = make(num_envs=2, mode="same_step")
    env.reset(seed=1)
    rng = np.random.default_rng(0)
    total = np.zeros(2)
    for _ in range(EP_LEN):
        _, r, te, tr, info = env.step(rng.integers(0, 45, 2))
        total += r
    assert (te | tr).all()
    np.testing.assert_allclose(info["episode_return"], total, rtol=1e-5, atol=1e-6)


def test_next_step_mode():
    env = make(num_envs=2, mode="next_step")
    env.reset(seed=2, options={"start_index": np.array([3, 7])})
    for _ in range(EP_LEN):
        obs, r, te, tr, info = env.step(np.full(2, act(LONG)))
    assert tr.all()
    assert "final_obs" not in info
    np.testing.assert_array_equal(bar_of(obs), [3 + EP_LEN, 7 + EP_LEN])  # last obs, not reset
    assert not is_reset_obs(obs).any()
    # the step after done: reset obs, reward 0, flags False, action ignored
    obs, r, te, tr, info = env.step(np.full(2, act(SHORT)))
    assert is_reset_obs(obs).all()
    np.testing.assert_array_equal(r, 0.0)
    assert not te.any() and not tr.any()
    np.testing.assert_array_equal(info["position"], 0.0)
    np.testing.assert_array_equal(info["reward_components"], 0.0)
    start = bar_of(obs)
    assert ((start >= 0) & (start < N_BARS - EP_LEN)).all()
    # then the new episode runs normally from that bar
    obs, r, te, tr, info = env.step(np.full(2, act(SHORT)))
    np.testing.assert_array_equal(bar_of(obs), start + 1)
    assert (info["position"] < 0).all()


def test_next_step_only_the_ended_env_resets():
    env = make(num_envs=2, mode="next_step")
    last = N_BARS - 2  # one step, then truncated at the end of data
    env.reset(seed=2, options={"start_index": np.array([last, 0])})
    obs, r, te, tr, _ = env.step(np.full(2, act(LONG)))
    np.testing.assert_array_equal(tr, [True, False])
    obs, r, te, tr, info = env.step(np.full(2, act(LONG)))
    assert is_reset_obs(obs[0]) and r[0] == 0.0
    assert bar_of(obs[1]) == 2 and info["position"][1] > 0  # env 1 stepped on


def test_disabled_mode_freezes_until_reset_mask():
    env = make(num_envs=2, mode="disabled")
    last = N_BARS - 2
    env.reset(seed=2, options={"start_index": np.array([last, 0])})
    obs, r, te, tr, info = env.step(np.full(2, act(LONG)))
    np.testing.assert_array_equal(tr, [True, False])
    assert "final_obs" not in info
    frozen_obs, frozen_pos = obs[0].copy(), info["position"][0]
    frozen_value = info["portfolio_value"][0]
    for k in range(3):
        obs, r, te, tr, info = env.step(np.full(2, act(SHORT)))
        np.testing.assert_array_equal(obs[0], frozen_obs)
        assert r[0] == 0.0
        assert info["position"][0] == frozen_pos
        assert info["portfolio_value"][0] == frozen_value
        assert bar_of(obs[1]) == 2 + k  # env 1 continues
        assert info["position"][1] < 0
    np.testing.assert_array_equal(env.observe()[0], frozen_obs)
    before = obs[1].copy()
    obs, _ = env.reset(options={"reset_mask": np.array([True, False])})
    assert is_reset_obs(obs[0])
    np.testing.assert_array_equal(obs[1], before)  # untouched
    obs, r, te, tr, info = env.step(np.full(2, act(FLAT)))
    assert not tr[0] and not te[0]
    assert bar_of(obs[1]) == 5


# ------------------------------------------------------------------------------ seeding


def test_same_seed_same_trajectory_including_autoreset_starts():
    rng = np.random.default_rng(5)
    actions = rng.integers(0, 45, (4 * EP_LEN + 3, 4))
    a, b = make(num_envs=4), make(num_envs=4)
    oa, _ = a.reset(seed=123)
    ob, _ = b.reset(seed=123)
    np.testing.assert_array_equal(oa, ob)
    ra, rb = run(a, actions), run(b, actions)
    assert_same(ra, rb)
    # several auto-resets happened, at more than one start bar
    starts = {tuple(bar_of(x[0][-1:]).tolist()) for x in ra[EP_LEN - 1 :: EP_LEN]}
    assert len(starts) > 1


def test_different_seeds_differ():
    a, b = make(num_envs=4), make(num_envs=4)
    oa, _ = a.reset(seed=1)
    ob, _ = b.reset(seed=2)
    actions = np.full((3 * EP_LEN, 4), act(LONG))
    ra, rb = run(a, actions), run(b, actions)
    bars_a = np.array([bar_of(oa)] + [bar_of(x[0]) for x in ra])
    bars_b = np.array([bar_of(ob)] + [bar_of(x[0]) for x in rb])
    assert not np.array_equal(bars_a, bars_b)


def test_reseeding_restarts_the_stream():
    actions = np.random.default_rng(1).integers(0, 45, (3 * EP_LEN, 3))
    a = make()
    a.reset(seed=9)
    first = run(a, actions)
    o, _ = a.reset(seed=9)
    b = make()
    ob, _ = b.reset(seed=9)
    np.testing.assert_array_equal(o, ob)
    assert_same(run(a, actions), first)


def test_reset_without_seed_continues_the_stream_reproducibly():
    a, b = make(num_envs=4), make(num_envs=4)
    a.reset(seed=3)
    b.reset(seed=3)
    for _ in range(3):
        oa, _ = a.reset()
        ob, _ = b.reset()
        np.testing.assert_array_equal(oa, ob)


def test_per_env_seed_list():
    seeds = [11, 22, 33]
    env = make()
    obs_list, _ = env.reset(seed=seeds)
    for i, s in enumerate(seeds):
        single = make()
        obs_s, _ = single.reset(seed=s)
        np.testing.assert_array_equal(obs_list[i], obs_s[i])  # env i is keyed by (seed_i, i)
    with pytest.raises(ValueError, match="seed"):
        env.reset(seed=[1, 2])
    with pytest.raises((ValueError, gym.error.Error), match="[Ss]eed"):
        env.reset(seed=-1)


def test_start_bars_are_drawn_over_the_whole_valid_range():
    n_bars, ep = 16, 5
    env = make(num_envs=64, n_bars=n_bars, episode_length=ep)
    seen = set()
    for s in range(4):
        obs, _ = env.reset(seed=s)
        b = bar_of(obs)
        assert ((b >= 0) & (b < n_bars - ep)).all()
        seen.update(b.tolist())
    assert seen == set(range(n_bars - ep))  # [lo, hi - episode_length), uniformly


# ------------------------------------------------------------------------------ reset options


def test_start_index_int_and_array():
    env = make()
    obs, _ = env.reset(seed=0, options={"start_index": 7})
    np.testing.assert_array_equal(bar_of(obs), [7, 7, 7])
    assert is_reset_obs(obs).all()
    obs, _ = env.reset(options={"start_index": np.array([0, 5, N_BARS - 2])})
    np.testing.assert_array_equal(bar_of(obs), [0, 5, N_BARS - 2])
    obs, _ = env.reset(options={"start_index": [-1, 4, -1]})  # -1 draws
    assert bar_of(obs)[1] == 4


def test_reset_mask_resets_a_subset_only():
    env = make(num_envs=3, mode="disabled")
    env.reset(seed=0, options={"start_index": np.array([0, 10, 20])})
    for _ in range(2):
        obs, *_ = env.step(np.full(3, act(LONG)))
    before = obs.copy()
    obs, _ = env.reset(
        options={
            "reset_mask": np.array([False, True, False]),
            "start_index": np.array([30, 30, 30]),
        }
    )
    np.testing.assert_array_equal(obs[[0, 2]], before[[0, 2]])
    assert bar_of(obs[1]) == 30 and is_reset_obs(obs[1])
    _, _, _, _, info = env.step(np.full(3, act(FLAT)))
    # envs 0 and 2 were still long (and sold now); env 1 started flat at bar 30
    np.testing.assert_array_equal(info["position"], 0.0)
    assert info["portfolio_value"][1] == 100_000.0  # flat, no trade, no cost
    obs, *_ = env.step(np.full(3, act(FLAT)))
    np.testing.assert_array_equal(bar_of(obs), [4, 32, 24])


# ------------------------------------------------------------------------------ bad input


def test_bad_actions():
    env = make()
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"shape \(4,\)"):
        env.step(np.zeros(4, dtype=np.int64))
    with pytest.raises(TypeError, match="dtype float64"):
        env.step(np.array([0.5, 1.0, 2.0]))
    with pytest.raises(ValueError, match=r"actions\[1\] = 45"):
        env.step(np.array([0, 45, 0]))
    with pytest.raises(ValueError, match=r"actions\[2\] = -1"):
        env.step(np.array([0, 0, -1]))
    # integral floats are refused too (as by the single env and the CUDA backend)
    with pytest.raises(TypeError, match="dtype float64 are invalid: allowed is an integer"):
        env.step(np.array([0.0, 1.0, 44.0]))
    torch = pytest.importorskip("torch")
    env.step(torch.tensor([1, 2, 3]))


def test_bad_start_index():
    env = make()
    with pytest.raises(ValueError, match=rf"start_index\[0\] = {N_BARS - 1}"):
        env.reset(seed=0, options={"start_index": N_BARS - 1})
    with pytest.raises(ValueError, match=r"start_index\[1\] = -2"):
        env.reset(seed=0, options={"start_index": [0, -2, 0]})
    with pytest.raises(ValueError, match="start_index"):
        env.reset(seed=0, options={"start_index": [0, 1]})
    with pytest.raises(ValueError, match="start_index"):
        env.reset(seed=0, options={"start_index": np.array([0.0, 1.5, 2.0])})


def test_scalar_float_start_index_is_rejected():
    env = make()
    with pytest.raises(ValueError, match="start_index"):
        env.reset(seed=0, options={"start_index": 1.5})


def test_bad_reset_options():
    env = make()
    with pytest.raises(ValueError, match="start_bar"):
        env.reset(seed=0, options={"start_bar": 3})
    with pytest.raises(TypeError, match="reset_mask"):
        env.reset(seed=0, options={"reset_mask": np.array([1, 0, 1])})
    with pytest.raises(ValueError, match="reset_mask"):
        env.reset(seed=0, options={"reset_mask": np.array([True, False])})


def test_unknown_config_kwarg():
    with pytest.raises(TypeError, match="max_positon"):
        make(max_positon=3)
    with pytest.raises(TypeError, match="bogus"):
        gym.make("GpuTrading-v0", bogus=1)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("initial_capital", -1.0),
        ("initial_capital", float("nan")),
        ("max_position", 0.0),
        ("exposure_levels", (2.0, 0.0)),
        ("exposure_levels", ()),
        ("order_cost_bps", (-1.0,)),
        ("sub_actions", 0),
        ("reserve_pct", 100.0),
        ("spread", -0.1),
        ("fill", "vwap"),
        ("barriers", 1),
        ("profit_target_bps", 0.0),
        ("stop_loss_bps", 10_000.0),
        ("max_holding_bars", 0),
        ("diversity_window", 0),
        ("diversity_threshold_bits", 2.0),
        ("diversity_min_entries", 0),
        ("curiosity_max_reward", 0.0),
        ("episode_length", 0),
        ("episode_length", 2.5),
        ("autoreset_mode", "sometimes"),
    ],
)
def test_bad_config_field_names_field_and_value(field, value):
    with pytest.raises(ValueError) as err:
        EnvConfig(**{field: value})
    msg = str(err.value)
    assert field in msg and repr(value) in msg, msg
    with pytest.raises(ValueError, match=field):
        make(**{field: value})


def test_bad_num_envs_and_device():
    with pytest.raises(ValueError, match="num_envs"):
        make(num_envs=0)
    with pytest.raises(ValueError, match="device"):
        TradingVectorEnv(
            1, "tpu", data=hand_market(wavy_close()), episode_length=5, curiosity_state_dims=7
        )
    # A CUDA device number that is not a number is refused by name, before CuPy is needed.
    with pytest.raises(ValueError, match=r"device = 'cuda:1:2' is invalid"):
        TradingVectorEnv(1, "cuda:1:2", data=hand_market(wavy_close()), episode_length=5)


def test_cuda_index_reads_the_device_number() -> None:
    from gpu_runtime.device import cuda_index

    assert cuda_index("cuda") is None and cuda_index("cuda:0") == 0 and cuda_index("cuda:3") == 3
    with pytest.raises(ValueError, match="'cuda:x' is invalid"):
        cuda_index("cuda:x")


def test_episode_longer_than_data_is_rejected():
    with pytest.raises(ValueError, match="episode_length"):
        make(n_bars=10, episode_length=10)


def test_cuda_without_cupy_raises_clear_error():
    if cuda_available():
        pytest.skip("a CUDA device and CuPy are available here")
    with pytest.raises(RuntimeError, match="CuPy") as err:
        TradingVectorEnv(
            4, "cuda", data=hand_market(wavy_close()), episode_length=5, curiosity_state_dims=7
        )
    assert "device='cpu'" in str(err.value)


# ------------------------------------------------------------------------------ instruments


def test_several_instruments():
    n_bars, n_inst, n_envs, ep = 20, 3, 7, 4
    env = make(num_envs=n_envs, n_instruments=n_inst, n_bars=n_bars, episode_length=ep)
    inst = np.arange(n_envs) % n_inst
    lo, hi = inst * n_bars, (inst + 1) * n_bars
    for s in range(5):
        obs, _ = env.reset(seed=s)
        b = bar_of(obs)
        assert ((b >= lo) & (b < hi - ep)).all(), (b, lo)
    # start_index counts from the instrument's first bar
    obs, _ = env.reset(options={"start_index": 2})
    np.testing.assert_array_equal(bar_of(obs), lo + 2)
    # episodes never leave their instrument, across auto-resets
    rng = np.random.default_rng(0)
    for _ in range(6 * ep):
        obs, _, te, tr, info = env.step(rng.integers(0, 45, n_envs))
        b = bar_of(obs)
        assert ((b >= lo) & (b < hi)).all()
        if not (te | tr).any():
            assert "final_obs" not in info
            continue
        fb = bar_of(info["final_obs"])[te | tr]
        assert ((fb >= lo[te | tr]) & (fb < hi[te | tr])).all()
    # the last valid start index of each instrument truncates after one step
    obs, _ = env.reset(options={"start_index": n_bars - 2})
    _, _, te, tr, _ = env.step(np.full(n_envs, act(FLAT)))
    assert tr.all() and not te.any()


def test_synthetic_multi_instrument_env_trades_its_instrument():
    data = gpu_trading_env.MarketData.synthetic("gbm", n_bars=300, n_instruments=2, seed=1)
    env = TradingVectorEnv(4, "cpu", data=data, episode_length=10)
    obs, _ = env.reset(seed=0, options={"start_index": 5})
    offsets = data.instrument_offsets
    for i in range(4):
        k = i % 2
        np.testing.assert_array_equal(obs[i, :-3], data.features[offsets[k] + 5])


# ------------------------------------------------------------------------------ registration


def test_make_vec_64_envs_steps():
    envs = gym.make_vec("GpuTrading-v0", num_envs=64, device="cpu")
    obs, info = envs.reset(seed=0)
    assert obs.shape == (64, envs.single_observation_space.shape[0])
    assert envs.action_space.shape == (64,)
    for _ in range(5):
        obs, r, te, tr, info = envs.step(envs.action_space.sample())
        assert obs.shape[0] == 64 and r.shape == (64,) and r.dtype == np.float32
        assert info["reward_components"].shape == (64, 5)
        assert envs.observation_space.contains(obs)
    envs.close()


def test_gymnasium_check_env():
    from gymnasium.utils.env_checker import check_env

    env = gym.make("GpuTrading-v0")
    with pytest.warns(UserWarning, match="infinity"):
        check_env(env.unwrapped)


def test_sb3_check_env():
    from stable_baselines3.common.env_checker import check_env

    check_env(gym.make("GpuTrading-v0").unwrapped, warn=False)


def test_single_env_step_after_done_raises():
    config = EnvConfig.source_design(episode_length=3, curiosity_state_dims=7)
    env = TradingEnv(data=hand_market(wavy_close(8)), config=config)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(0)
    obs, info = env.reset(seed=0, options={"start_index": 0})
    assert obs.shape == env.observation_space.shape and info == {}
    for i in range(3):
        obs, r, te, tr, info = env.step(act(FLAT))
        assert tr == (i == 2) and not te
        assert isinstance(r, float)
    assert info["episode_length"] == 3 and "episode" not in info
    with pytest.raises(RuntimeError, match="reset"):
        env.step(act(FLAT))
    env.reset()
    env.step(act(FLAT))
    with pytest.raises(ValueError, match="reset_mask"):
        env.reset(options={"reset_mask": np.array([True])})
    with pytest.raises(ValueError, match="action"):
        env.step(45)


@pytest.mark.parametrize("mode", ["next_step", "disabled"])
def test_envs_still_running_step_as_if_alone(mode):
    # env 0 ends after one step and waits; env 1 must follow exactly the trajectory it has
    # when stepped with nobody waiting (diversity ring, barriers and curiosity included)
    kw = {
        "episode_length": 30,
        "barriers": True,
        "profit_target_bps": 300.0,
        "stop_loss_bps": 300.0,
        "max_holding_bars": 4,
        "diversity_window": 5,
    }
    rng = np.random.default_rng(3)
    w = [rng.normal(0, 0.2, s).astype(np.float32) for s in ((64, 10), (64,), (7, 64), (7,))]
    actions = rng.integers(0, 45, (12, 2))
    pair, alone = make(num_envs=2, mode=mode, **kw), make(num_envs=2, mode=mode, **kw)
    pair.set_curiosity_weights(*w)
    alone.set_curiosity_weights(*w)
    pair.reset(seed=0, options={"start_index": np.array([N_BARS - 2, 3])})
    alone.reset(seed=0, options={"start_index": np.array([3, 3])})
    for a in actions:
        p = pair.step(a)
        q = alone.step(np.full(2, a[1]))
        np.testing.assert_array_equal(p[0][1], q[0][0])
        assert p[1][1] == q[1][0]
        np.testing.assert_array_equal(p[4]["reward_components"][1], q[4]["reward_components"][0])
        assert p[4]["barrier_label"][1] == q[4]["barrier_label"][0]
        assert p[4]["position"][1] == q[4]["position"][0]


def test_same_step_info_has_final_info():
    env = make(num_envs=2, mode="same_step")
    env.reset(seed=0, options={"start_index": np.array([N_BARS - 2, 0])})
    _, _, te, tr, info = env.step(np.full(2, act(LONG)))
    np.testing.assert_array_equal(te | tr, [True, False])
    assert "final_info" in info and isinstance(info["final_info"], dict)
    np.testing.assert_array_equal(info["_final_info"], [True, False])


def test_seeded_masked_reset_leaves_other_envs_streams_alone():
    only_0, only_1 = np.array([True, False]), np.array([False, True])
    a, b = make(num_envs=2, mode="disabled"), make(num_envs=2, mode="disabled")
    for env in (a, b):
        env.reset(seed=5)
        env.reset()
    a.reset(seed=7, options={"reset_mask": only_0})  # touches env 0 only
    oa, _ = a.reset(options={"reset_mask": only_1})
    ob, _ = b.reset(options={"reset_mask": only_1})
    assert bar_of(oa)[1] == bar_of(ob)[1]  # env 1's third draw in both


@pytest.mark.parametrize("env_id", ["GpuTrading-v0", "GpuPortfolio-v0"])
def test_actions_outside_the_space_are_refused_naming_them_and_the_space(env_id: str) -> None:
    env = gym.make_vec(env_id, num_envs=4)
    env.reset(seed=0)
    good = env.action_space.sample()
    rest = (0,) * (good.ndim - 1)
    too_big = good.copy()
    too_big[(1, *rest)] = 99
    negative = good.astype(np.int32)
    negative[(2, *rest)] = -1
    huge = good.astype(np.uint64)
    huge[(0, *rest)] = 2**63 + 1  # negative if it were read as int64
    refused = (too_big, negative, huge, good.astype(np.float32), good[:-1], np.int64(1))
    for bad in refused:
        assert bad not in env.action_space
        with pytest.raises((TypeError, ValueError)) as err:
            env.step(bad)
        text = str(err.value)
        assert f"of shape {bad.shape}, dtype {bad.dtype}" in text, text
        assert f"action_space: 4 x {env.single_action_space}" in text, text
    env.step(good)  # the refused calls changed nothing


def test_a_restored_next_step_env_masks_the_rows_it_autoresets() -> None:
    # A checkpoint taken after episodes ended: the restored env's next step autoresets them,
    # and their info is a reset's (SyncVectorEnv's empty info), as in the env that saved it.
    env = make(3, mode="next_step", episode_length=2, barriers=False)
    env.reset(seed=0)
    env.step(np.zeros(3, dtype=np.int64))
    assert (env.step(np.zeros(3, dtype=np.int64))[3]).all()
    saved = env.checkpoint_state()
    restored = make(3, mode="next_step", episode_length=2, barriers=False)
    restored.restore_checkpoint(**saved)
    for e in (env, restored):
        info = e.step(np.zeros(3, dtype=np.int64))[4]
        assert not info["_position"].any() and not info["_reward_components"].any()
