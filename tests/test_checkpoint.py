"""Checkpoints: atomic model and replay-buffer saves, CheckpointCallback, resume with curiosity."""

from __future__ import annotations

import pickle
import zipfile

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from stable_baselines3.common.callbacks import CheckpointCallback

import gpu_trading_env  # noqa: F401  (registers GpuTrading-v0)
from agents import GpuDQN, PrioritizedReplayBuffer
from agents.replay.prioritized_buffer import LinearBetaSchedule
from gpu_trading_env.atomic_file import atomic_write
from gpu_trading_env.core.config import EnvConfig

# The source design's env (45 actions, barriers, penalties): all of the step is exercised.
SOURCE = EnvConfig.source_design()

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def make_env(num_envs: int = 8, seed: int = 3):
    env = gym.make_vec(
        "GpuTrading-v0", num_envs=num_envs, device="cpu", episode_length=50, config=SOURCE
    )
    env.reset(seed=seed)
    return env


def make_model(env, **kwargs) -> GpuDQN:
    params = dict(
        learning_starts=100,
        train_freq=4,
        batch_size=32,
        buffer_size=4_000,
        target_update_interval=200,
        seed=0,
        device="cpu",
        curiosity=True,
        curiosity_train_freq=2,
        curiosity_batch_size=64,
    )
    params.update(kwargs)
    return GpuDQN("DuelingPolicy", env, **params)


@pytest.fixture(scope="module")
def trained() -> GpuDQN:
    model = make_model(make_env())
    model.learn(600)
    return model


def test_default_beta_schedule_pickles() -> None:
    space = gym.spaces.Box(-1, 1, (3,), np.float32)
    buf = PrioritizedReplayBuffer(64, space, gym.spaces.Discrete(4), device="cpu", beta=0.4)
    assert buf.beta_schedule == LinearBetaSchedule(0.4)
    buf.set_progress(0.25)
    clone = pickle.loads(pickle.dumps(buf))
    assert clone.beta == buf.beta == pytest.approx(0.4 + 0.6 * 0.75)


def test_replay_buffer_round_trip(trained: GpuDQN, tmp_path) -> None:
    path = tmp_path / "buffer"
    trained.save_replay_buffer(path)
    assert (tmp_path / "buffer.rb.zip").stat().st_size > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["buffer.rb.zip"]  # no temporaries left

    model = make_model(make_env())
    model.load_replay_buffer(tmp_path / "buffer.rb.zip")
    old, new = trained.replay_buffer, model.replay_buffer
    assert new.pos == old.pos and new.full == old.full
    th.testing.assert_close(new.observations, old.observations, rtol=0, atol=0)
    for a, b in zip(new.tree.to_numpy(), old.tree.to_numpy(), strict=True):
        np.testing.assert_array_equal(a, b)
    assert new.tree.sample_calls == old.tree.sample_calls
    # The next stratified draw is the same in both (Philox key and counter were saved).
    ia, wa = new.tree.sample(16, beta=0.5)
    ib, wb = pickle.loads(pickle.dumps(old.tree)).sample(16, beta=0.5)
    np.testing.assert_array_equal(ia, ib)
    np.testing.assert_array_equal(wa, wb)


def _break_midway(monkeypatch) -> None:
    """Make archive writes store half of a member and then fail, as a full disk would."""
    writestr = zipfile.ZipFile.writestr

    def broken(self, name, data, *args, **kwargs):
        if name == "manifest.json":
            return writestr(self, name, data, *args, **kwargs)
        writestr(self, name, data[: len(data) // 2], *args, **kwargs)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(zipfile.ZipFile, "writestr", broken)


def test_failed_replay_buffer_save_keeps_the_old_file(trained: GpuDQN, tmp_path, monkeypatch):
    path = tmp_path / "buffer.rb.zip"
    trained.save_replay_buffer(path)
    before = path.read_bytes()
    _break_midway(monkeypatch)
    with pytest.raises(OSError, match="No space left"):
        trained.save_replay_buffer(path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["buffer.rb.zip"]
    model = make_model(make_env())
    model.load_replay_buffer(path)
    assert model.replay_buffer.size() == trained.replay_buffer.size()


def test_failed_model_save_keeps_the_old_file(trained: GpuDQN, tmp_path, monkeypatch) -> None:
    path = tmp_path / "model.zip"
    trained.save(path)
    before = path.read_bytes()
    _break_midway(monkeypatch)
    with pytest.raises(OSError, match="No space left"):
        trained.save(path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["model.zip"]
    loaded = GpuDQN.load(path, device="cpu")
    obs = th.as_tensor(np.random.default_rng(0).normal(size=(4, *trained.observation_space.shape)))
    with th.no_grad():
        th.testing.assert_close(loaded.q_net(obs.float()), trained.q_net(obs.float()))


def test_atomic_write_failure_keeps_text_file(tmp_path) -> None:
    path = tmp_path / "report.txt"
    with atomic_write(path, "w") as fh:
        fh.write("old")
    with pytest.raises(RuntimeError), atomic_write(path, "w") as fh:
        fh.write("new, half")
        raise RuntimeError("interrupted")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["report.txt"]
    with pytest.raises(ValueError, match="folder"):
        atomic_write(tmp_path, "w").__enter__()
    with pytest.raises(ValueError, match="mode"):
        atomic_write(path, "a").__enter__()


def test_checkpoint_callback_saves_buffer_through_learn(tmp_path) -> None:
    model = make_model(make_env(), curiosity=False)
    callback = CheckpointCallback(
        save_freq=10, save_path=str(tmp_path), name_prefix="ck", save_replay_buffer=True
    )
    model.learn(400, callback=callback)
    assert model.num_timesteps >= 400
    buffers = sorted(tmp_path.glob("ck_replay_buffer_*_steps.pkl"))
    models = sorted(tmp_path.glob("ck_*_steps.zip"))
    assert len(buffers) >= 2 and len(models) >= 2
    assert all(p.stat().st_size > 0 for p in buffers)
    assert not list(tmp_path.glob(".*.tmp"))
    last = max(buffers, key=lambda p: int(p.stem.split("_")[-2]))
    # SB3 names the file .pkl; the content is the weights-only archive all the same.
    assert zipfile.is_zipfile(last)
    fresh = make_model(make_env(), curiosity=False)
    fresh.load_replay_buffer(last)
    restored = fresh.replay_buffer
    assert isinstance(restored, PrioritizedReplayBuffer)
    # SB3 calls the callback before storing that step's transitions.
    assert restored.size() == int(last.stem.split("_")[-2]) // model.n_envs - 1


def test_resume_restores_curiosity_weights_and_continues(trained: GpuDQN, tmp_path) -> None:
    env_weights = trained.trading_env.backend.curiosity
    assert env_weights is not None  # curiosity rounds ran
    trained.save(tmp_path / "model.zip")
    trained.save_replay_buffer(tmp_path / "buffer.pkl")

    env = make_env()
    resumed = GpuDQN.load(tmp_path / "model.zip", env=env, device="cpu")
    restored = env.unwrapped.backend.curiosity
    assert restored is not None, "the reward function changed on resume (no curiosity bonus)"
    for name in ("w1", "b1", "w2", "b2"):
        np.testing.assert_array_equal(
            np.asarray(getattr(restored, name)), np.asarray(getattr(env_weights, name))
        )
    # Same weights, same seed, same actions: the same rewards, curiosity component included.
    ref = make_env()
    ref.unwrapped.set_curiosity_weights(*(np.asarray(w) for w in vars(env_weights).values()))
    env.reset(seed=11)
    ref.reset(seed=11)
    actions = np.random.default_rng(1).integers(0, env.single_action_space.n, size=(5, 8))
    for a in actions:
        _, r1, *_, i1 = env.step(a)
        _, r2, *_, i2 = ref.step(a)
        np.testing.assert_array_equal(r1, r2)
        np.testing.assert_array_equal(i1["reward_components"], i2["reward_components"])

    resumed.load_replay_buffer(tmp_path / "buffer.pkl")
    assert resumed.replay_buffer.size() == trained.replay_buffer.size()
    steps = resumed.num_timesteps
    resumed.learn(200, reset_num_timesteps=False)
    assert resumed.num_timesteps >= steps + 200
    assert resumed._n_updates > trained._n_updates

    # A model loaded without env restores the weights when the env is attached later.
    later = GpuDQN.load(tmp_path / "model.zip", device="cpu")
    env2 = make_env()
    later.set_env(env2)
    assert env2.unwrapped.backend.curiosity is not None


def test_untrained_curiosity_is_not_installed_on_load(tmp_path) -> None:
    model = make_model(make_env())
    model.save(tmp_path / "fresh.zip")
    env = make_env()
    GpuDQN.load(tmp_path / "fresh.zip", env=env, device="cpu")
    assert env.unwrapped.backend.curiosity is None


@pytest.mark.gpu
def test_cuda_buffer_pickles_and_stores_through_its_kernel_after_loading() -> None:
    space = gym.spaces.Box(-1, 1, (3,), np.float32)
    buf = PrioritizedReplayBuffer(64, space, gym.spaces.Discrete(4), device="cuda", n_envs=2)
    assert buf._step_store is not None
    clone = pickle.loads(pickle.dumps(buf))
    assert clone._step_store is not None and clone._step_store.buffer is clone
    slot = th.zeros(1, dtype=th.int64, device="cuda")
    obs = th.arange(6, dtype=th.float32, device="cuda").reshape(2, 3)
    flags = th.tensor([True, False], device="cuda")
    action = th.tensor([1, 3], device="cuda")
    clone.add_tensors_at(slot, obs, obs + 1, action, th.ones(2, device="cuda"), flags, ~flags)
    assert th.equal(clone.observations[0], obs) and th.equal(clone.next_observations[0], obs + 1)
    assert clone.actions[0, :, 0].tolist() == [1, 3] and clone.dones[0].tolist() == [1.0, 1.0]
    assert clone.timeouts[0].tolist() == [0.0, 1.0] and int(slot[0]) == 1
    assert th.count_nonzero(buf.observations) == 0  # the original's storage is untouched


@pytest.mark.gpu
def test_cuda_tree_pickles_with_its_state() -> None:
    from agents.replay.segment_tree import CudaSumMinTree

    tree = CudaSumMinTree(5000, seed=4)
    tree.fill_range(0, 3000)
    rng = np.random.default_rng(0)
    tree.update(rng.integers(0, 3000, 9000), rng.exponential(size=9000), alpha=0.6, epsilon=1e-6)
    tree.sample(64, beta=0.4)
    clone = pickle.loads(pickle.dumps(tree))
    for a, b in zip(clone.to_numpy(), tree.to_numpy(), strict=True):
        np.testing.assert_array_equal(a, b)
    assert clone.max_value_host() == tree.max_value_host()
    ia, wa = clone.sample(256, beta=0.4)
    ib, wb = tree.sample(256, beta=0.4)
    np.testing.assert_array_equal(ia.get(), ib.get())
    np.testing.assert_array_equal(wa.get(), wb.get())


@pytest.mark.gpu
def test_fused_rollout_graph_on_the_last_device() -> None:
    """The CUDA-graph paths (rollout and train step, curiosity on) on the highest device index
    (cuda:1 on a two-GPU host)."""
    import warnings

    dev = f"cuda:{th.cuda.device_count() - 1}"
    env = gym.make_vec("GpuTrading-v0", num_envs=256, device=dev, episode_length=30, config=SOURCE)
    model = GpuDQN(
        "DuelingPolicy", env, buffer_size=20_000, learning_starts=512, batch_size=64, seed=0,
        device=dev, curiosity=True, curiosity_train_freq=2, curiosity_batch_size=64,
    )  # fmt: skip
    with warnings.catch_warnings():
        # Either graph falling back to eager stepping is a failure here (the rollout's
        # "CUDA graph capture failed", the train step's "CUDA graph capture of the train step").
        warnings.filterwarnings("error", message="CUDA graph capture")
        model.learn(256 * 40)  # about 10 train calls: two warm-up steps, then the capture
    assert model.rollout is not None and model.rollout.captured
    step = model.captured_train_step
    assert step is not None and step.graph is not None and not step.graph_failed
    assert th.isfinite(model.replay_buffer.rewards[: model.replay_buffer.size()]).all()
