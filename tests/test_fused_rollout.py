"""GPU tier: the fused rollout stores exactly the transitions of a step-by-step host rollout.

Both start from the same env seed, the same Q-network weights and the same exploration
generator seed. The fused path acts, steps and stores on the GPU; the reference moves every
step through the host: observations to NumPy, actions through ``SB3VecEnv``, transitions stored
with the buffer's SB3 ``add`` (``terminal_observation``, ``TimeLimit.truncated``).
"""

from __future__ import annotations

import numpy as np
import pytest

from gpu_trading_env import MarketData, TradingVectorEnv
from gpu_trading_env.core.config import EnvConfig

# The source design's env (45 actions, barriers, penalties): all of the step is exercised.
SOURCE = EnvConfig.source_design()

pytestmark = pytest.mark.gpu

N_ENVS = 512
STEPS = 120
EPSILON = 0.3
RANDOM_STEP = 60


def _model(env):
    from agents import GpuDQN

    return GpuDQN(
        "DuelingPolicy", env, buffer_size=N_ENVS * STEPS, learning_starts=0, seed=0, device="cuda"
    )


def test_fused_rollout_matches_step_by_step_host_rollout():
    import torch as th

    from agents.rollouts.fused import FusedRollout
    from gpu_trading_env.integrations.sb3_vec_env import SB3VecEnv

    data = MarketData.synthetic(kind="regime", n_bars=3000, n_instruments=2, seed=4)
    kw = dict(
        config=SOURCE,
        num_envs=N_ENVS,
        device="cuda",
        data=data,
        episode_length=30,
        profit_target_bps=30.0,
        stop_loss_bps=20.0,
        autoreset_mode="same_step",  # GpuDQN's mode: no switch (and reset) after reset(seed=7)
    )

    fused_env = TradingVectorEnv(**kw)
    fused_env.reset(seed=7)
    fused = _model(fused_env)
    store = fused.replay_buffer._step_store
    launches = []

    def counted(*args):
        launches.append(1)
        return store(*args)

    fused.replay_buffer._step_store = counted
    ro = FusedRollout(fused, seed=3)
    for k in range(STEPS):
        # One eager (random) step amid the graph replays: the host writes that slot, and the
        # graph's device-side slot must follow.
        ro.step(EPSILON, random_only=k == RANDOM_STEP)
    assert ro.stores_in_graph  # the store ran inside the graph
    assert len(launches) == 1  # through the store kernel, recorded once in the capture

    host_venv = TradingVectorEnv(**kw)
    host = _model(host_venv)
    host.q_net.load_state_dict(fused.q_net.state_dict())
    ref_actor = FusedRollout(host, seed=3)  # only its act(): same generator stream
    sb3_env = SB3VecEnv(host_venv)
    obs = host_venv.reset(seed=7)[0].cpu().numpy()
    for k in range(STEPS):
        actions = ref_actor.act(
            th.as_tensor(obs, device="cuda"), EPSILON, random_only=k == RANDOM_STEP
        )
        actions = actions.cpu().numpy()
        sb3_env.step_async(actions)
        new_obs, rewards, dones, infos = sb3_env.step_wait()
        next_obs = new_obs.copy()
        for i in np.flatnonzero(dones):
            next_obs[i] = infos[i]["terminal_observation"]
        host.replay_buffer.add(obs, next_obs, actions, rewards, dones, infos)
        obs = new_obs

    a, b = fused.replay_buffer, host.replay_buffer
    assert a.pos == b.pos and a.full == b.full
    for name in ("observations", "next_observations", "actions", "rewards", "dones", "timeouts"):
        x, y = getattr(a, name).cpu().numpy(), getattr(b, name).cpu().numpy()
        np.testing.assert_array_equal(x, y, err_msg=name)
    ended = int(a.dones.sum().item())
    assert ended > N_ENVS // 4  # episodes ended (barriers, time limits) during the comparison
    assert float(a.timeouts.sum().item()) > 0
    # Priorities: both trees gave every new transition the running max priority.
    assert a.tree.total() == pytest.approx(b.tree.total(), rel=1e-12)
    np.testing.assert_array_equal(a.tree.leaves(), b.tree.leaves())


def test_graph_steps_follow_the_curiosity_bonus_turned_on_and_off():
    """Installing curiosity weights (or clearing them) after the step graph was captured
    changes the rewards of the graph replays as it changes those of eager steps: the graph is
    captured again (the bonus's on/off flag is a by-value launch argument)."""
    import torch as th

    from agents.rollouts.fused import FusedRollout
    from gpu_trading_env.core.constants import N_CATEGORIES

    data = MarketData.synthetic(kind="regime", n_bars=3000, n_instruments=2, seed=4)
    kw = dict(num_envs=256, device="cuda", data=data, episode_length=30, config=SOURCE)
    rollouts = []
    for cuda_graph in (True, False):
        env = TradingVectorEnv(**kw, autoreset_mode="same_step")
        env.reset(seed=7)
        rollouts.append(FusedRollout(_model(env), seed=3, cuda_graph=cuda_graph))
    graphed, eager = rollouts
    eager.model.q_net.load_state_dict(graphed.model.q_net.state_dict())
    d, h = graphed.env.config.curiosity_state_dims, graphed.env.config.curiosity_hidden
    gen = th.Generator().manual_seed(0)
    shapes = ((h, d + N_CATEGORIES), (h,), (d, h), (d,))
    weights = [th.randn(s, generator=gen).cuda() for s in shapes]
    captured_at = []
    record = graphed._record  # what the rollout's GraphRunner calls to capture
    graphed._record = lambda: (captured_at.append(k), record())[1]
    for k in range(40):
        for ro in rollouts:
            if k == 10:
                ro.env.set_curiosity_weights(*weights)
            elif k == 25:
                ro.env.clear_curiosity_weights()
            ro.step(EPSILON)
        if k == 20:  # new weights while the bonus stays on: copied in place, no capture
            graphed.env.set_curiosity_weights(*weights)
            eager.env.set_curiosity_weights(*weights)
    assert graphed.captured and not eager.captured
    assert captured_at == [2, 10, 25]
    a, b = graphed.model.replay_buffer, eager.model.replay_buffer
    for name in ("observations", "actions", "rewards", "dones"):
        x, y = getattr(a, name).cpu().numpy(), getattr(b, name).cpu().numpy()
        np.testing.assert_array_equal(x, y, err_msg=name)


def test_kernels_compiled_in_the_background_are_the_ones_the_fused_path_loads():
    """``start_compiling_kernels`` covers every module a first ``learn`` loads, with the very
    arguments its users pass: none of them is compiled a second time."""
    from agents.rollouts.fused import fused_path_kernels, start_compiling_kernels
    from gpu_runtime.device import compiled_modules

    for thread in start_compiling_kernels("cuda:0"):
        thread.join()
    ready = compiled_modules()
    for spec in fused_path_kernels():
        assert (spec, 0) in ready, spec[0].name
    data = MarketData.synthetic(kind="planted", n_bars=2000, seed=1)
    env = TradingVectorEnv(num_envs=64, device="cuda", data=data, episode_length=50, config=SOURCE)
    _model(env).learn(64 * 40)
    fused_sources = {spec[0] for spec in fused_path_kernels()}
    again = [s for s, _ in compiled_modules()[len(ready) :] if s[0] in fused_sources]
    assert again == [], f"compiled again with other arguments: {[s[0].name for s in again]}"
    assert start_compiling_kernels("cpu") == []
