"""Data-parallel GpuDQN (agents.algorithm.distributed) with two gloo processes on the CPU.

- ``train`` on fixed batches: after every gradient step the two ranks hold the same parameters
  bit for bit, and they follow a single process fed the union of the two ranks' batches;
- ``learn`` on the env with prioritized replay: same parameters (online and target) after every
  vector step, global step counters, per-rank env shards, saving on rank 0 only;
- one rank (a world of one) trains exactly as without ``distributed``; bad arguments name
  the field.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch as th
import torch.distributed as dist
import torch.multiprocessing as mp
from stable_baselines3.common.buffers import ReplayBufferSamples
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import Logger
from torch import nn

import gpu_trading_env  # noqa: F401  (registers GpuTrading-v0)
from agents import GpuDQN
from gpu_trading_env.core.config import EnvConfig

# The source design's env (45 actions, barriers, penalties): all of the step is exercised.
SOURCE = EnvConfig.source_design()

pytestmark = pytest.mark.usefixtures("one_torch_thread")

WORLD = 2
NUM_ENVS = 8
BATCH = 32
TRAIN_STEPS = 300
CHECKPOINTS = (1, 2, 10, 50, 100, 200, 300)
LEARN_STEPS = 2_048  # global env-steps: 128 vector steps per rank
OBS_DIM = 54
# The union comparison needs a step that is continuous in its inputs, so that float summation
# order (batch 2 x B against 2B) moves the result by float noise only: tanh instead of the
# LeakyReLU kink, the max target instead of the double-DQN argmax. With those kinks a unit or an
# argmax near its switch point flips now and then (one in a few hundred steps here), and Adam
# carries the difference on.
SMOOTH = {"double_q": False, "policy_kwargs": {"activation_fn": nn.Tanh}}


def make_model(**kwargs) -> GpuDQN:
    env = gym.make_vec(
        "GpuTrading-v0", num_envs=NUM_ENVS, device="cpu", episode_length=50, config=SOURCE
    )
    params = dict(
        learning_rate=1e-3,
        learning_starts=256,
        train_freq=1,
        batch_size=BATCH,
        buffer_size=4_096,
        target_update_interval=512,
        max_grad_norm=0.2,  # small enough to clip: the clip must act on the averaged gradient
        seed=0,
        device="cpu",
    )
    # A small network: what is checked (identical ranks, the averaged gradient) does not
    # depend on the width, and the 256-256 default made this module's ranks a quarter of a
    # minute of the CPU suite.
    policy_kwargs = {"net_arch": {"shared": [64, 64], "value": [32], "advantage": [32]}}
    policy_kwargs.update(kwargs.pop("policy_kwargs", {}))
    params.update(kwargs, policy_kwargs=policy_kwargs)
    return GpuDQN("DuelingPolicy", env, **params)


def fixed_batch(step: int, rank: int, n_actions: int) -> ReplayBufferSamples:
    """Rank ``rank``'s batch of gradient step ``step`` (the same in every process)."""
    g = th.Generator().manual_seed(10_000 * step + rank)
    return ReplayBufferSamples(
        observations=th.randn(BATCH, OBS_DIM, generator=g),
        actions=th.randint(0, n_actions, (BATCH, 1), generator=g),
        next_observations=th.randn(BATCH, OBS_DIM, generator=g),
        dones=(th.rand(BATCH, 1, generator=g) < 0.1).float(),
        rewards=th.randn(BATCH, 1, generator=g),
    )


def union_batch(step: int, n_actions: int) -> ReplayBufferSamples:
    parts = [fixed_batch(step, r, n_actions) for r in range(WORLD)]
    return ReplayBufferSamples(
        *(None if f[0] is None else th.cat(f) for f in zip(*parts, strict=True))
    )


def flat_policy(model: GpuDQN) -> th.Tensor:
    return th.cat([t.detach().reshape(-1).clone() for t in model.policy.state_dict().values()])


def feed(model: GpuDQN, batches) -> None:
    """``model.train`` samples ``batches(step)`` instead of its replay buffer."""
    calls = iter(range(1, 10**9))
    model.set_logger(Logger(folder=None, output_formats=[]))  # train() outside learn()
    model.replay_buffer.sample = lambda batch_size, env=None: batches(next(calls))


def rendezvous(folder: Path | str) -> str:
    """A file rendezvous for ``init_process_group`` in a fresh folder: no port to pick (a port
    found free can be taken by another process before rank 0 binds it)."""
    return f"file://{Path(folder) / 'rendezvous'}"


# ---------------------------------------------------------------------- the two ranks


def _worker(rank: int, init_method: str, out: str) -> None:
    th.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=init_method,
        rank=rank,
        world_size=WORLD,
        timeout=timedelta(seconds=60),
    )
    try:
        results = {"train": _train_fixed_batches(rank), "learn": _learn(rank, Path(out))}
        if rank == 0:
            th.save(results, Path(out) / "results.pt")
        dist.barrier()  # neither rank tears the group down while the other still uses it
    finally:
        dist.destroy_process_group()


def _train_fixed_batches(rank: int) -> dict:
    model = make_model(distributed=True, **SMOOTH)
    dp = model.data_parallel
    n_actions = int(model.action_space.n)
    out: dict = {"initial_spread": dp.parameter_spread(model), "spreads": [], "params": {}}
    feed(model, lambda step: fixed_batch(step, rank, n_actions))
    for step in range(1, TRAIN_STEPS + 1):
        model.train(gradient_steps=1, batch_size=BATCH)
        out["spreads"].append(dp.parameter_spread(model))
        if step in CHECKPOINTS:
            out["params"][step] = flat_policy(model)
    return out


class _CheckEveryStep(BaseCallback):
    def __init__(self) -> None:
        super().__init__()
        self.spreads: list[float] = []
        self.timesteps: list[int] = []

    def _on_step(self) -> bool:
        self.spreads.append(self.model.data_parallel.parameter_spread(self.model))
        self.timesteps.append(int(self.model.num_timesteps))
        return True


def _learn(rank: int, out: Path) -> dict:
    model = make_model(distributed=True)
    check = _CheckEveryStep()
    model.learn(LEARN_STEPS, callback=check)
    dp = model.data_parallel
    model.save(out / f"model_rank{rank}.zip")
    first_obs = th.as_tensor(model.replay_buffer.observations[0]).double().sum().reshape(1)
    gathered = [th.zeros(1, dtype=th.float64) for _ in range(WORLD)]
    dist.all_gather(gathered, first_obs)
    target_copied = not th.equal(
        model.q_net_target.state_dict()["shared.0.weight"],
        make_model().q_net_target.state_dict()["shared.0.weight"],
    )
    return {
        "spreads": check.spreads,
        "timesteps": check.timesteps,
        "final_spread": dp.parameter_spread(model),
        "num_timesteps": int(model.num_timesteps),
        "n_updates": int(model._n_updates),
        "first_obs_sums": [float(g) for g in gathered],
        "target_copied": target_copied,
        "flat_gradients": int(dp.flat_gradients.numel()),
    }


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("distributed")
    env = {"OMP_NUM_THREADS": "1"}
    previous = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        mp.spawn(_worker, args=(rendezvous(out), str(out)), nprocs=WORLD, join=True)
    finally:
        for k, v in previous.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    results = th.load(out / "results.pt", weights_only=False)
    results["out"] = out
    return results


# ---------------------------------------------------------------------- the tests


def test_ranks_start_and_stay_identical_on_fixed_batches(two_ranks: dict) -> None:
    train = two_ranks["train"]
    assert train["initial_spread"] == 0.0  # seeds 0 and 1 initialise differently: broadcast
    assert len(train["spreads"]) == TRAIN_STEPS
    assert max(train["spreads"]) == 0.0  # bit for bit after every gradient step


def test_two_ranks_equal_one_process_fed_the_union_of_their_batches(two_ranks: dict) -> None:
    reference = make_model(**SMOOTH)
    n_actions = int(reference.action_space.n)
    feed(reference, lambda step: union_batch(step, n_actions))
    params = two_ranks["train"]["params"]
    for step in range(1, TRAIN_STEPS + 1):
        reference.train(gradient_steps=1, batch_size=WORLD * BATCH)
        if step in CHECKPOINTS:
            th.testing.assert_close(
                params[step], flat_policy(reference), rtol=1e-4, atol=1e-5, msg=f"step {step}"
            )
    # The batches moved the parameters (the comparison is not of two untouched networks).
    initial = flat_policy(make_model())
    assert (params[TRAIN_STEPS] - initial).abs().max() > 1e-2


def test_learn_keeps_ranks_identical_with_global_counters(two_ranks: dict) -> None:
    learn = two_ranks["learn"]
    assert max(learn["spreads"]) == 0.0 and learn["final_spread"] == 0.0
    assert learn["target_copied"]  # target updates happened, at the same step on both ranks
    # Counters are global: one vector step adds WORLD * NUM_ENVS on every rank.
    assert learn["num_timesteps"] == LEARN_STEPS
    assert learn["timesteps"] == list(range(WORLD * NUM_ENVS, LEARN_STEPS + 1, WORLD * NUM_ENVS))
    # train_freq=1, one gradient step per vector step once num_timesteps > learning_starts.
    assert learn["n_updates"] == sum(t > 256 for t in learn["timesteps"])
    # Env shards are seeded seed + rank: different data on the two ranks.
    a, b = learn["first_obs_sums"]
    assert a != b
    assert learn["flat_gradients"] == sum(p.numel() for p in make_model().q_net.parameters())


def test_only_rank_zero_saves(two_ranks: dict) -> None:
    out = two_ranks["out"]
    assert (out / "model_rank0.zip").is_file()
    assert not (out / "model_rank1.zip").exists()
    loaded = GpuDQN.load(out / "model_rank0.zip", device="cpu")
    assert loaded.data_parallel is None and loaded.seed == 0


# ---------------------------------------------------------------------- one process


@pytest.fixture
def world_of_one():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_world_of_one_trains_as_without_distributed(world_of_one) -> None:
    a = make_model(distributed=True)
    b = make_model()
    a.learn(1_024)
    b.learn(1_024)
    assert a.num_timesteps == b.num_timesteps and a._n_updates == b._n_updates > 0
    th.testing.assert_close(flat_policy(a), flat_policy(b), rtol=0, atol=0)


def test_curiosity_with_distributed_is_refused(world_of_one) -> None:
    with pytest.raises(ValueError, match=r"curiosity = True is invalid with distributed = True"):
        make_model(distributed=True, curiosity=True)


def test_distributed_without_a_process_group_is_refused() -> None:
    assert not dist.is_initialized()
    with pytest.raises(ValueError, match=r"distributed = True is invalid here.*init_process_group"):
        make_model(distributed=True)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"process_group": object()}, r"process_group = .* is invalid with distributed = False"),
        ({"distributed": 1}, r"distributed = 1 is invalid: allowed is True or False"),
    ],
)
def test_bad_distributed_arguments(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make_model(**kwargs)


def test_not_distributed_changes_nothing() -> None:
    model = make_model()
    assert model.data_parallel is None
    assert np.isfinite(flat_policy(model).numpy()).all()


# ---------------------------------------------------------------------- GPUs (NCCL)


def _fused_model(device: str, **kwargs) -> GpuDQN:
    env = gym.make_vec(
        "GpuTrading-v0", num_envs=512, device=device, episode_length=100, config=SOURCE
    )
    params = dict(
        learning_starts=5_120,
        train_freq=1,
        batch_size=512,
        buffer_size=200_000,
        target_update_interval=51_200,
        seed=0,
        device=device,
    )
    # A small network: what is checked (identical ranks, the averaged gradient) does not
    # depend on the width, and the 256-256 default made this module's ranks a quarter of a
    # minute of the CPU suite.
    policy_kwargs = {"net_arch": {"shared": [64, 64], "value": [32], "advantage": [32]}}
    policy_kwargs.update(kwargs.pop("policy_kwargs", {}))
    params.update(kwargs, policy_kwargs=policy_kwargs)
    return GpuDQN("DuelingPolicy", env, **params)


@pytest.mark.gpu
def test_nccl_all_reduce_is_captured_in_the_train_step_graph() -> None:
    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
    try:
        model = _fused_model("cuda", distributed=True)
        model.learn(100 * 512)
        step = model.captured_train_step
        assert step is not None and step.graph is not None and not step.graph_failed
        assert model.data_parallel.flat_gradients.is_cuda
        assert model._n_updates > 50 and model.data_parallel.parameter_spread(model) == 0.0
        model.release_cuda_graphs()
        assert step.graph is None and not model.rollout.captured
        model.learn(20 * 512, reset_num_timesteps=False)  # captures again
        assert step.graph is not None
        model.release_cuda_graphs()
    finally:
        dist.destroy_process_group()


def _gpu_worker(rank: int, init_method: str, out: str) -> None:
    th.cuda.set_device(rank)
    dist.init_process_group(
        "nccl",
        init_method=init_method,
        rank=rank,
        world_size=WORLD,
        timeout=timedelta(seconds=120),
    )
    try:
        model = _fused_model(f"cuda:{rank}", distributed=True)
        check = _CheckEveryStep()
        model.learn(200 * 512 * WORLD, callback=check)
        step = model.captured_train_step
        result = {
            "spreads": check.spreads,
            "num_timesteps": int(model.num_timesteps),
            "captured": step is not None and step.graph is not None and not step.graph_failed,
            "fused": model.rollout is not None,
        }
        if rank == 0:
            th.save(result, Path(out) / "gpu.pt")
        dist.barrier()
        model.release_cuda_graphs()  # else the destroy waits forever (pytorch/pytorch#115388)
    finally:
        dist.destroy_process_group()


@pytest.mark.gpu
@pytest.mark.skipif(th.cuda.device_count() < WORLD, reason=f"needs {WORLD} GPUs")
def test_two_gpus_stay_identical_on_the_fused_captured_path(tmp_path: Path) -> None:
    ranks = mp.spawn(
        _gpu_worker, args=(rendezvous(tmp_path), str(tmp_path)), nprocs=WORLD, join=False
    )
    deadline = time.monotonic() + 300
    while not ranks.join(timeout=5):  # raises when a rank fails
        if time.monotonic() > deadline:  # a hang fails the test instead of stalling the tier
            for process in ranks.processes:
                process.kill()
            pytest.fail("the two NCCL ranks did not finish within 300 s")
    result = th.load(tmp_path / "gpu.pt", weights_only=False)
    assert result["fused"] and result["captured"]
    assert result["num_timesteps"] == 200 * 512 * WORLD
    assert max(result["spreads"]) == 0.0
