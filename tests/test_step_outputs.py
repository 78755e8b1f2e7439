"""The vector step's output modes: owned outputs written in place, the zero-copy buffers, and
``step_into`` (allocated once, what a CUDA graph captures), on the CPU and (GPU tier) on CUDA.

Each mode must give the same numbers as the others for the same actions; owned outputs must
never alias an earlier step's; a captured ``step_into`` replayed must match eager stepping.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpu_trading_env import TradingVectorEnv
from gpu_trading_env.core.config import EnvConfig
from gpu_trading_env.core.state import OUTPUT_FIELDS

# The source design's env (45 actions, barriers, penalties): all of the step is exercised.
SOURCE = EnvConfig.source_design()

MODES = ["same_step", "next_step", "disabled"]
N = 64
STEPS = 40


def _actions(n_actions: int, n: int, steps: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, n_actions, (steps, n))


def _host(a) -> np.ndarray:
    if hasattr(a, "detach"):
        return a.detach().cpu().numpy()
    return a.get() if hasattr(a, "get") else np.asarray(a)


def _step_record(env: TradingVectorEnv, actions) -> list[np.ndarray]:
    obs, reward, term, trunc, info = env.step(actions)
    record = [obs, reward, term, trunc]
    record += [info[k] for k in ("reward_components", "portfolio_value", "position")]
    record += [info[k] for k in ("barrier_label", "episode_return", "episode_length")]
    if "final_obs" in info:
        done = _host(info["_final_obs"])
        record += [_host(info["final_obs"])[done]]
    return [_host(a).copy() for a in record]


def _into_record(env: TradingVectorEnv, actions, out: dict) -> list[np.ndarray]:
    env.step_into(actions, out)
    keys = ("obs", "reward", "terminated", "truncated", "components", "portfolio_value")
    keys += ("position", "barrier_label", "episode_return", "episode_length")
    record = [_host(out[k]).copy() for k in keys]
    if env.autoreset_mode.name == "SAME_STEP":
        record += [_host(out["final_obs"])[_host(out["done"])]]
    return record


def _assert_same(a: list[np.ndarray], b: list[np.ndarray]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


def _env(device: str, mode: str, **kw) -> TradingVectorEnv:
    kw.setdefault("config", SOURCE)
    return TradingVectorEnv(N, device, autoreset_mode=mode, episode_length=7, **kw)


# ------------------------------------------------------------------ CPU
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("array_type", ["numpy", "torch"])
def test_owned_zero_copy_and_step_into_agree(mode: str, array_type: str) -> None:
    envs = [_env("cpu", mode, array_type=array_type, copy_outputs=c) for c in (True, False)]
    into = _env("cpu", mode, array_type=array_type)
    for e in (*envs, into):
        e.reset(seed=5)
    out = into.make_outputs()
    for acts in _actions(envs[0].single_action_space.n, N, STEPS):
        owned, zero_copy = (_step_record(e, acts) for e in envs)
        _assert_same(owned, zero_copy)
        _assert_same(owned[:10], _into_record(into, acts, out)[:10])


@pytest.mark.parametrize("mode", MODES)
def test_owned_outputs_share_no_memory_across_steps(mode: str) -> None:
    """Every array of a step is new storage: not an earlier step's, not the double buffer's."""
    env = _env("cpu", mode)
    env.reset(seed=1)
    seen = []
    buffers = [env.backend._outputs[k]._block[0] for k in range(2)]
    for acts in _actions(env.single_action_space.n, N, 4):
        obs, reward, term, trunc, info = env.step(acts)
        arrays = [obs, reward, term, trunc, *(v for v in info.values() if hasattr(v, "shape"))]
        for a in arrays:
            assert not any(np.shares_memory(a, b) for b in buffers)
            assert not any(np.shares_memory(a, b) for b in seen)
        seen.append(obs.base if obs.base is not None else obs)


def test_same_step_final_obs_rows_that_did_not_end_are_zero() -> None:
    env = _env("cpu", "same_step")
    env.reset(seed=2)
    ended_steps = 0
    for acts in _actions(env.single_action_space.n, N, 10):
        info = env.step(acts)[4]
        if "final_obs" in info:  # on the host: only on steps where an episode ended
            ended_steps += 1
            assert not info["final_obs"][~info["_final_obs"]].any()
    assert ended_steps > 0


def test_step_into_rejects_bad_outputs_and_leaves_state() -> None:
    env = _env("cpu", "next_step")
    env.reset(seed=0)
    out = env.make_outputs()
    before = env.observe().copy()
    acts = np.zeros(N, dtype=np.int64)
    with pytest.raises(ValueError, match=r"outputs without \['reward'\]"):
        env.step_into(acts, {k: v for k, v in out.items() if k != "reward"})
    with pytest.raises(ValueError, match=r"outputs\['obs'\] = ndarray is invalid: .*float32"):
        env.step_into(acts, {**out, "obs": out["obs"].astype(np.float64)})
    with pytest.raises(ValueError, match=r"outputs\['done'\] .* \(64,\)"):
        env.step_into(acts, {**out, "done": np.zeros(N + 1, bool)})
    np.testing.assert_array_equal(env.observe(), before)
    fresh = _env("cpu", "next_step")
    with pytest.raises(RuntimeError, match="before reset"):
        fresh.step_into(acts, fresh.make_outputs())
    assert set(out) == set(OUTPUT_FIELDS)


def test_step_into_checks_the_same_outputs_once() -> None:
    """The arrays of the last checked call are not checked again; another array, or a torch
    tensor whose memory moved (``set_``), is checked and written where it now lies."""
    import torch

    env = _env("cpu", "next_step", array_type="torch")
    ref = _env("cpu", "next_step", array_type="torch")
    env.reset(seed=4)
    ref.reset(seed=4)
    binds = []
    bind = env.backend.bind_outputs
    env.backend.bind_outputs = lambda o, trusted=False: binds.append(1) or bind(o, trusted)
    out = env.make_outputs()
    plan = _actions(env.single_action_space.n, N, 6)
    for acts in plan[:3]:
        env.step_into(acts, out)
        ref_reward = ref.step(acts)[1]
        np.testing.assert_array_equal(out["reward"].numpy(), ref_reward.numpy())
    assert len(binds) == 1
    out["reward"].set_(torch.zeros(N, dtype=torch.float32))  # same object, new memory
    env.step_into(plan[3], out)
    assert len(binds) == 2
    np.testing.assert_array_equal(out["reward"].numpy(), ref.step(plan[3])[1].numpy())
    with pytest.raises(ValueError, match=r"outputs\['obs'\] = Tensor is invalid"):
        env.step_into(plan[4], {**out, "obs": out["obs"].double()})
    with pytest.raises(ValueError, match=r"outputs without \['reward'\]"):
        env.step_into(plan[4], {k: v for k, v in out.items() if k != "reward"})


# ------------------------------------------------------------------ GPU tier
@pytest.mark.gpu
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("array_type", ["torch", "cupy"])
def test_cuda_owned_zero_copy_and_step_into_agree(mode: str, array_type: str) -> None:
    import torch

    n = 4096
    envs = [
        TradingVectorEnv(
            n,
            "cuda",
            autoreset_mode=mode,
            episode_length=7,
            array_type=array_type,
            copy_outputs=c,
            config=SOURCE,
        )
        for c in (True, False)
    ]
    into = TradingVectorEnv(n, "cuda", autoreset_mode=mode, episode_length=7, config=SOURCE)
    for e in (*envs, into):
        e.reset(seed=5)
    out = into.make_outputs()
    for acts in _actions(envs[0].single_action_space.n, n, STEPS):
        owned, zero_copy = (_step_record(e, torch.as_tensor(acts, device="cuda")) for e in envs)
        _assert_same(owned, zero_copy)
        got = _into_record(into, torch.as_tensor(acts, device="cuda"), out)
        _assert_same(owned[:10], got[:10])
        if mode == "same_step":
            _assert_same(owned[10:], got[10:])


@pytest.mark.gpu
@pytest.mark.parametrize("mode", MODES)
def test_cuda_graph_captures_step_into_and_replays_like_eager(mode: str) -> None:
    """The documented capture (docs/PERFORMANCE.md): actions and outputs allocated once, one
    ``step_into`` inside ``torch.cuda.graph``; each replay equals one eager step."""
    import torch

    n, steps = 4096, 60
    captured = TradingVectorEnv(n, "cuda", autoreset_mode=mode, episode_length=7, config=SOURCE)
    eager = TradingVectorEnv(n, "cuda", autoreset_mode=mode, episode_length=7, config=SOURCE)
    captured.reset(seed=9)
    eager.reset(seed=9)
    plan = torch.as_tensor(_actions(captured.single_action_space.n, n, steps + 1), device="cuda")
    actions = torch.zeros(n, dtype=torch.int64, device="cuda")
    out = captured.make_outputs()
    # Warm up on a side stream (as torch.cuda.graph's docs ask): one real step.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        actions.copy_(plan[0])
        captured.step_into(actions, out)
    torch.cuda.current_stream().wait_stream(side)
    want = _step_record(eager, plan[0])
    _assert_same(want[:10], _into_record_view(out, mode)[:10])
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured.step_into(actions, out)
    for k in range(1, steps + 1):
        actions.copy_(plan[k])
        graph.replay()
        want = _step_record(eager, plan[k])
        got = _into_record_view(out, mode)
        _assert_same(want, got)
    captured.check_errors()  # every action was valid: nothing recorded


def _into_record_view(out: dict, mode: str) -> list[np.ndarray]:
    keys = ("obs", "reward", "terminated", "truncated", "components", "portfolio_value")
    keys += ("position", "barrier_label", "episode_return", "episode_length")
    record = [_host(out[k]).copy() for k in keys]
    if mode == "same_step":
        record += [_host(out["final_obs"])[_host(out["done"])]]
    return record


@pytest.mark.gpu
def test_cuda_step_into_checks_outputs_and_defers_bad_actions() -> None:
    import torch

    env = TradingVectorEnv(256, "cuda", config=SOURCE)
    env.reset(seed=0)
    out = env.make_outputs()
    acts = torch.zeros(256, dtype=torch.int64, device="cuda")
    with pytest.raises(ValueError, match=r"outputs\['obs'\] = Tensor is invalid"):
        env.step_into(acts, {**out, "obs": out["obs"].double()})
    with pytest.raises(ValueError, match=r"outputs\['reward'\] = Tensor is invalid"):
        env.step_into(acts, {**out, "reward": out["reward"].cpu()})
    bad = int(env.single_action_space.n)
    acts[3] = bad  # out of range: recorded on the device, raised at the check
    env.step_into(acts, out)
    with pytest.raises(ValueError, match=rf"actions\[3\] = {bad} is invalid"):
        env.check_errors()


@pytest.mark.parametrize("mode", ["disabled", "next_step"])
@pytest.mark.parametrize("case", range(3))
def test_numpy_step_around_waiting_envs_matches_the_reference(mode: str, case: int) -> None:
    """Most envs running, a few waiting (DISABLED: frozen where they ended, possibly on the
    instrument's last bar or ruined; NEXT_STEP: just reset): every output and every state
    array, ring included, bit for bit as the reference step."""
    from dataclasses import fields

    import step_oracle as ref
    from test_reference_step import random_config, same_bits

    from gpu_trading_env import EnvConfig, MarketData
    from gpu_trading_env.core.state import EnvState, StepOutputs

    rng = np.random.default_rng(50 + case)
    # Barriers that rarely fire: episodes end by length, staggered by the masked resets below.
    wide = {"profit_target_bps": 5000.0, "stop_loss_bps": 5000.0, "episode_length": 20}
    config = EnvConfig(**{**random_config(rng), "autoreset_mode": mode, **wide})
    data = MarketData.synthetic("gbm", n_bars=120, n_instruments=2, seed=case)
    env = TradingVectorEnv(200, data=data, config=config)
    backend = env.backend
    env.reset(seed=case)
    state = EnvState(**{k: v.copy() for k, v in vars(backend.state).items()})
    around = 0
    for t in range(60):
        waiting = int((backend.state.done_flag != 0).sum())
        if t < 20 or waiting > 20:
            # Restart a random tenth of the envs (staggering the episodes) and, in DISABLED
            # mode, the waiting ones, as a user does; the reference continues from there.
            mask = (rng.random(200) < 0.1) | (waiting > 20) & (backend.state.done_flag != 0)
            env.reset(options={"reset_mask": mask})
            state = EnvState(**{k: v.copy() for k, v in vars(backend.state).items()})
            waiting = int((backend.state.done_flag != 0).sum())
        around += 0 < 5 * waiting <= 200
        actions = rng.integers(0, config.n_actions, 200)
        state, expected = ref.step(state, actions, backend)
        got = backend.step(backend.prepare_actions(actions))
        for f in fields(StepOutputs):
            if f.name != "final_obs":
                assert same_bits(getattr(expected, f.name), getattr(got, f.name)), (t, f.name)
        for f in fields(EnvState):
            assert same_bits(getattr(state, f.name), getattr(backend.state, f.name)), (t, f.name)
    assert around >= 5, "the steps with a few waiting envs were not exercised"
