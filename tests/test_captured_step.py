"""The captured train step: where it applies, the saved optimizer state, and (GPU tier) parity
with the eager step after 50 gradient steps, statistics, error flag and save/load."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from eager_captured_parity import assert_steps_agree, copy_training_state
from stable_baselines3.common.buffers import ReplayBuffer

import gpu_trading_env  # noqa: F401  (registers GpuTrading-v0)
from agents import GpuDQN
from agents.algorithm.capturable_adam import adam_update, plain_optimizer_state
from agents.algorithm.captured_step import CapturedTrainStep, captured_train_unsupported
from agents.algorithm.compiled_or_eager import CompiledOrEager, with_own_code
from gpu_trading_env.core.config import EnvConfig

# The source design's env (45 actions, barriers, penalties): all of the step is exercised.
SOURCE = EnvConfig.source_design()

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _model(device: str, num_envs: int = 8, **kw) -> GpuDQN:
    env = gym.make_vec(
        "GpuTrading-v0", num_envs=num_envs, device=device, episode_length=100, config=SOURCE
    )
    params = dict(
        learning_starts=0,
        batch_size=32,
        buffer_size=4096,
        learning_rate=1e-3,
        train_freq=1,
        target_update_interval=5 * num_envs,
        device=device,
        seed=0,
        replay_buffer_kwargs={"seed": 3},
    )
    params.update(kw)
    return GpuDQN("DuelingPolicy", env, **params)


def test_cpu_model_trains_eagerly() -> None:
    model = _model("cpu")
    assert captured_train_unsupported(model) == "the model is on cpu, not a CUDA device"
    model.learn(400)
    assert model.captured_train_step is None and model._n_updates > 0
    assert math.isfinite(model.logger.name_to_value["train/loss"])


def test_each_compiled_part_has_its_own_code_object() -> None:
    """Dynamo's cache and its recompile limit (8) are per code object: every train step's
    compiled loss must have its own, or a process's ninth model runs its loss eagerly."""

    class Part:
        def __init__(self, w: float) -> None:
            self.w = w

        def f(self, x: th.Tensor) -> th.Tensor:
            return x * self.w

    parts = [CompiledOrEager(Part(w).f, "part") for w in (2.0, 3.0)]
    codes = [p.fn.__func__.__code__ for p in parts] + [Part.f.__code__]
    assert len({id(c) for c in codes}) == 3  # distinct objects (they compare equal by value)
    x = th.ones(3)
    assert th.equal(parts[0].fn(x), x * 2.0) and th.equal(parts[1].fn(x), x * 3.0)
    assert parts[1].fn.__self__.w == 3.0 and parts[1].fn.__name__ == "f"


def test_adam_update_is_the_adam_step_and_compiles_once_per_model() -> None:
    """``adam_update`` gives ``optimizer.step()``'s parameters bit for bit, and a compiled clip +
    Adam step of one model after another never recompiles torch's optimizer frames (with
    ``optimizer.step()`` the ninth model in a process hit Dynamo's recompile limit)."""
    import torch._dynamo

    def make(seed: int) -> tuple[th.nn.Module, th.optim.Adam]:
        th.manual_seed(seed)
        net = th.nn.Linear(4, 2)
        kw = {"lr": 1e-2, "weight_decay": 0.1, "decoupled_weight_decay": True, "foreach": True}
        return net, th.optim.Adam(net.parameters(), **kw)

    (net_a, opt_a), (net_b, opt_b) = make(0), make(0)
    update_b = adam_update(opt_b)
    for k in range(4):
        x = th.randn(5, 4, generator=th.Generator().manual_seed(k))
        for net, opt in ((net_a, opt_a), (net_b, opt_b)):
            opt.zero_grad()
            net(x).pow(2).sum().backward()
        opt_a.step()
        with th.no_grad():
            update_b()
    assert all(th.equal(p, q) for p, q in zip(net_a.parameters(), net_b.parameters(), strict=True))

    torch._dynamo.reset()
    with torch._dynamo.config.patch(recompile_limit=2, fail_on_recompile_limit_hit=True):
        for seed in range(3):  # one more model than the limit
            net, opt = make(seed)
            net(th.ones(1, 4)).sum().backward()
            update = adam_update(opt)
            params = list(net.parameters())

            def clip_and_step(params=params, update=update) -> None:
                th.nn.utils.clip_grad_norm_(params, 1.0)
                with th.no_grad():
                    update()

            th.compile(with_own_code(clip_and_step), backend="eager")()
    torch._dynamo.reset()


def test_auto_precision_is_bf16_from_ampere(monkeypatch) -> None:
    from gpu_runtime.precision import resolve_precision

    monkeypatch.setattr(th.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert resolve_precision("auto", "cuda") == "bf16"
    monkeypatch.setattr(th.cuda, "get_device_capability", lambda device=None: (7, 5))
    assert resolve_precision("auto", "cuda") == "tf32"  # a T4: no native bfloat16
    assert resolve_precision("fp32", "cuda") == "fp32"  # a choice is kept as given


def test_captured_train_reasons() -> None:
    model = _model("cpu", replay_buffer_class=ReplayBuffer, replay_buffer_kwargs={})
    assert "not a CUDA device" in captured_train_unsupported(model)
    model.device = th.device("cuda")  # the other checks, without a GPU
    assert "PrioritizedReplayBuffer" in captured_train_unsupported(model)


def test_captured_step_refuses_what_it_cannot_capture() -> None:
    model = _model("cpu")
    with pytest.raises(ValueError, match="does not apply: the model is on cpu"):
        CapturedTrainStep(model)
    with pytest.raises(ValueError, match="train_precision = 'fp16' is invalid: allowed is 'auto'"):
        _model("cpu", train_precision="fp16")


def test_plain_optimizer_state_restores_the_plain_adam() -> None:
    p = th.nn.Parameter(th.ones(3))
    plain = th.optim.Adam([p], lr=1e-3)
    p.grad = th.ones(3)
    plain.step()
    sd = plain.state_dict()
    # The capturable Adam's state dict: tensor lr, fused and capturable, step as a tensor.
    captured = {
        "state": {0: {**sd["state"][0], "step": th.tensor(1.0)}},
        "param_groups": [
            {**sd["param_groups"][0], "lr": th.tensor(1e-3), "fused": True, "capturable": True}
        ],
    }
    flags = {k: sd["param_groups"][0][k] for k in ("fused", "capturable", "foreach")}
    out = plain_optimizer_state(captured, flags)
    assert out["param_groups"][0]["lr"] == pytest.approx(1e-3)
    assert out["param_groups"][0]["fused"] == flags["fused"]
    assert out["param_groups"][0]["capturable"] is False
    assert out["state"][0]["step"].device.type == "cpu" and float(out["state"][0]["step"]) == 1.0
    assert captured["param_groups"][0]["fused"] is True  # the input is not modified
    fresh = th.optim.Adam([th.nn.Parameter(th.ones(3))], lr=1e-3)
    fresh.load_state_dict(out)
    assert th.equal(fresh.state_dict()["state"][0]["exp_avg"], sd["state"][0]["exp_avg"])


def _fill(model: GpuDQN, rows: int, seed: int = 0) -> None:
    """The same random transitions in any model's buffer (episodes end now and then)."""
    g = th.Generator(device=model.device).manual_seed(seed)
    buf = model.replay_buffer
    n, dim = buf.n_envs, buf.obs_shape[0]
    dev = model.device
    for _ in range(rows):
        obs = th.randn(n, dim, device=dev, generator=g)
        nxt = th.randn(n, dim, device=dev, generator=g)
        act = th.randint(0, int(model.action_space.n), (n,), device=dev, generator=g)
        rew = th.randn(n, device=dev, generator=g)
        u = th.rand(n, device=dev, generator=g)
        buf.add_tensors(obs, nxt, act, rew, u < 0.05, (u >= 0.05) & (u < 0.1))


def _train_steps(model: GpuDQN, steps: int) -> None:
    model._setup_learn(total_timesteps=10_000)
    for _ in range(steps):
        model.train(gradient_steps=1, batch_size=model.batch_size)
        model._on_step()  # target updates on SB3's schedule


@pytest.mark.gpu
@pytest.mark.parametrize("double_q, compile_update", [(True, False), (False, False), (True, True)])
def test_captured_step_matches_eager(double_q: bool, compile_update: bool, monkeypatch) -> None:
    """50 steps; before each, the captured model takes the eager one's state, so both sample
    the same batch from the same weights; after each, parameters, target and priorities agree.
    ``compile_update``: clipping and a foreach Adam compiled with the loss."""
    import agents.algorithm.captured_step

    monkeypatch.setattr(agents.algorithm.captured_step, "COMPILE_UPDATE", compile_update)
    prev = th.backends.cuda.matmul.allow_tf32
    th.backends.cuda.matmul.allow_tf32 = False
    try:
        eager = _model("cuda", captured_train=False, double_q=double_q, batch_size=256)
        captured = _model("cuda", train_precision="fp32", double_q=double_q, batch_size=256)
        for m in (eager, captured):
            _fill(m, 400)
            m._setup_learn(total_timesteps=10_000)
        initial_target = captured.q_net_target.shared[0].weight.detach().clone()
        for k in range(50):
            if k > 0:
                copy_training_state(eager, captured)
            for m in (eager, captured):
                m.train(gradient_steps=1, batch_size=m.batch_size)
                m._on_step()  # target updates on SB3's schedule
            assert_steps_agree(eager, captured, k)
    finally:
        th.backends.cuda.matmul.allow_tf32 = prev
    step = captured.captured_train_step
    assert eager.captured_train_step is None and step is not None and step.graph is not None
    assert step.compile_update == compile_update
    assert captured.replay_buffer.tree.sample_calls == eager.replay_buffer.tree.sample_calls == 50
    # The target follows SB3's schedule (every 5th step, the 50th included).
    target = captured.q_net_target.shared[0].weight
    assert not th.equal(target, initial_target)
    assert th.equal(target, captured.q_net.shared[0].weight)
    leaves = captured.replay_buffer.tree.leaves()
    assert np.count_nonzero(leaves[: 400 * 8] != 1.0) > 1000  # the priorities were updated
    step.read_stats()
    assert math.isfinite(step.last_loss) and step.last_td > 0


@pytest.mark.gpu
def test_captured_step_flags_a_rejected_update_at_the_read() -> None:
    model = _model("cuda")
    _fill(model, 100)
    _train_steps(model, 5)
    step = model.captured_train_step
    assert step.graph is not None
    model.replay_buffer.rewards.fill_(float("nan"))
    before = model.replay_buffer.tree.leaves().copy()
    model.train(gradient_steps=3, batch_size=model.batch_size)  # no host read yet
    with pytest.raises(ValueError, match=r"td_errors\[\d+\] of a captured train step"):
        step.read_stats()
    np.testing.assert_array_equal(model.replay_buffer.tree.leaves(), before)
    step.read_stats()  # the flag was cleared


@pytest.mark.gpu
def test_captured_learn_logs_saves_and_loads(tmp_path) -> None:
    model = _model("cuda", num_envs=256, batch_size=512, buffer_size=100_000)
    model.learn(256 * 200)
    step = model.captured_train_step
    assert step is not None and step.graph is not None
    assert math.isfinite(model.logger.name_to_value["train/loss"])
    assert model.policy.optimizer is step.optimizer
    path = tmp_path / "captured.zip"
    model.save(path)
    loaded = GpuDQN.load(path, env=model.env, device="cuda")
    group = loaded.policy.optimizer.param_groups[0]
    assert isinstance(group["lr"], float) and not group["capturable"]
    for a, b in zip(model.q_net.parameters(), loaded.q_net.parameters(), strict=True):
        assert th.equal(a, b)
    loaded.learn(256 * 20, reset_num_timesteps=False)  # a new capture on the loaded model
    assert loaded.captured_train_step is not None and loaded.captured_train_step.graph is not None
