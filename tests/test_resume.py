"""Resume = one run: N steps, a checkpoint, fresh objects, N more steps equal 2N steps in one
process (agents.files.checkpoint, GpuDQN.save_checkpoint / load_checkpoint, CheckpointEvery)."""

from __future__ import annotations

import random
import shutil

import gymnasium as gym
import numpy as np
import pytest
import torch as th

import gpu_trading_env  # noqa: F401  (registers GpuTrading-v0)
from agents import CheckpointEvery, GpuDQN
from agents.files.checkpoint import checkpoint_extra, resolve_checkpoint
from agents.files.safe_archive import ArchiveError
from gpu_runtime.device import to_numpy
from gpu_trading_env.core.config import EnvConfig
from gpu_trading_env.core.state import STATE_FIELDS

# The source design's env (45 actions, barriers, penalties): all of the step is exercised.
SOURCE = EnvConfig.source_design()

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def make_env(device: str = "cpu", num_envs: int = 4):
    return gym.make_vec(
        "GpuTrading-v0", num_envs=num_envs, device=device, episode_length=30, config=SOURCE
    )


def make_model(env, device: str = "cpu", **kwargs) -> GpuDQN:
    params = dict(
        learning_starts=40,
        buffer_size=400,  # wraps around before the end: the tree's old leaves are overwritten
        batch_size=16,
        train_freq=2,
        target_update_interval=40,
        exploration_fraction=0.5,  # still exploring at the checkpoint: the coins matter
        seed=0,
        device=device,
        curiosity=True,
        curiosity_train_freq=3,
        curiosity_batch_size=16,
    )
    params.update(kwargs)
    return GpuDQN("DuelingPolicy", env, **params)


def _scramble_process_generators() -> None:
    """What another process (or other work in this one) would leave in the generators."""
    random.seed(99)
    np.random.seed(99)  # noqa: NPY002
    th.manual_seed(99)


def _compare(a: GpuDQN, b: GpuDQN, exact: bool) -> None:
    """Assert that two models (and their buffers and envs) hold the same run. Every mismatch is
    collected first, so a failure names all the parts that differ (and by how much), not the
    first one only: where a resume goes wrong is read from which parts agree."""
    diffs: list[str] = []

    def same(x, y, what):
        x, y = th.as_tensor(x), th.as_tensor(y)
        if exact:
            ok = x.shape == y.shape and th.equal(x, y)
        else:
            ok = x.shape == y.shape and th.allclose(
                x.double().cpu(), y.double().cpu(), rtol=1e-4, atol=1e-5
            )
        if not ok:
            gap = (
                (x.double().cpu() - y.double().cpu()).abs().max().item()
                if x.shape == y.shape
                else f"shapes {tuple(x.shape)} vs {tuple(y.shape)}"
            )
            diffs.append(f"{what}: max |diff| {gap}")

    assert (a.num_timesteps, a._n_calls, a._n_updates) == (
        b.num_timesteps,
        b._n_calls,
        b._n_updates,
    )
    assert a.exploration_rate == b.exploration_rate
    ra, rb = a.replay_buffer, b.replay_buffer
    assert (ra.pos, ra.full, ra.tree.sample_calls) == (rb.pos, rb.full, rb.tree.sample_calls)
    for name in ("observations", "next_observations", "actions", "rewards", "dones", "timeouts"):
        same(getattr(ra, name), getattr(rb, name), name)
    for k, (x, y) in enumerate(zip(ra.tree.to_numpy(), rb.tree.to_numpy(), strict=True)):
        same(x, y, f"priority tree {k}")
    sa, sb = a.trading_env.backend.state, b.trading_env.backend.state
    for field in STATE_FIELDS:
        x, y = np.asarray(to_numpy(getattr(sa, field))), np.asarray(to_numpy(getattr(sb, field)))
        if not exact and x.dtype.kind == "f":
            same(x, y, f"env state {field}")
        elif not np.array_equal(x, y):
            diffs.append(f"env state {field}: {int((x != y).sum())} of {x.size} differ")
    for name in ("policy", "curiosity_model"):
        ma, mb = getattr(a, name), getattr(b, name)
        if ma is None and mb is None:  # a run without curiosity
            continue
        if ma is None or mb is None:
            diffs.append(f"{name}: {type(ma).__name__} vs {type(mb).__name__}")
            continue
        sa, sb = ma.state_dict(), mb.state_dict()
        for key in sa:
            same(sa[key], sb[key], f"{name}.{key}")
    oa, ob = a.policy.optimizer.state_dict()["state"], b.policy.optimizer.state_dict()["state"]
    for k in oa:
        for field in oa[k]:
            same(th.as_tensor(oa[k][field]).float(), th.as_tensor(ob[k][field]).float(),
                 f"optimizer {k}.{field}")  # fmt: skip
    assert not diffs, f"{len(diffs)} parts differ:\n" + "\n".join(diffs)


def process_generators() -> tuple[bytes, ...]:
    """Python's and NumPy's global generators and torch's CPU one, as bytes."""
    return (
        repr(random.getstate()).encode(),
        np.random.get_state()[1].tobytes(),  # noqa: NPY002
        th.get_rng_state().numpy().tobytes(),
    )


def _run_and_resume(
    tmp_path, device: str, total: int, every: int, **kwargs
) -> tuple[GpuDQN, GpuDQN, tuple[bytes, ...], tuple[bytes, ...]]:
    """The run through, the run resumed at ``every``, and the process's generators (see
    :func:`process_generators`) after each."""
    reference = make_model(make_env(device), device, **kwargs)
    reference.learn(total, callback=CheckpointEvery(every, tmp_path / "ck", keep=1))
    generators = process_generators()
    # Only the checkpoint at `every` steps: the run is cut there.
    (folder,) = sorted((tmp_path / "ck").iterdir())
    assert folder.name == f"step-{every:012d}"

    _scramble_process_generators()
    resumed = GpuDQN.load_checkpoint(tmp_path / "ck", env=make_env(device), device=device)
    assert resumed.num_timesteps == every and resumed.remaining_timesteps == total - every
    resumed.learn(resumed.remaining_timesteps, reset_num_timesteps=False)
    return reference, resumed, generators, process_generators()


def test_checkpoint_and_resume_equal_one_run_bit_for_bit_on_cpu(tmp_path) -> None:
    reference, resumed, gen_a, gen_b = _run_and_resume(tmp_path, "cpu", total=400, every=200)
    assert reference.replay_buffer.full  # the buffer wrapped around
    assert reference._train_calls >= 3 * reference.curiosity_train_freq
    _compare(reference, resumed, exact=True)
    assert gen_a == gen_b  # the process's generators went on as in the run through
    # The env steps on identically after both runs: same observations and rewards.
    actions = np.random.default_rng(5).integers(0, 45, size=(3, 4))
    for act in actions:
        out_a = reference.trading_env.step(act)
        out_b = resumed.trading_env.step(act)
        np.testing.assert_array_equal(out_a[0], out_b[0])
        np.testing.assert_array_equal(out_a[1], out_b[1])


def test_checkpoint_and_resume_without_curiosity_on_cpu(tmp_path) -> None:
    reference, resumed, gen_a, gen_b = _run_and_resume(
        tmp_path, "cpu", total=400, every=200, curiosity=False
    )
    assert reference.curiosity_model is None and resumed.curiosity_model is None
    _compare(reference, resumed, exact=True)
    assert gen_a == gen_b


def test_resume_without_the_env_state_would_differ(tmp_path) -> None:
    """The check above has teeth: a model and buffer reloaded the SB3 way (env reset, generators
    not restored) do not reproduce the uninterrupted run."""
    reference = make_model(make_env())
    reference.learn(400, callback=CheckpointEvery(200, tmp_path / "ck", keep=1))
    folder = resolve_checkpoint(tmp_path / "ck")
    _scramble_process_generators()
    plain = GpuDQN.load(folder / "model.zip", env=make_env(), device="cpu")
    plain.load_replay_buffer(folder / "replay_buffer.rb.zip")
    plain.learn(200, reset_num_timesteps=False)
    with pytest.raises(AssertionError):
        _compare(reference, plain, exact=True)


def test_checkpoint_every_keeps_the_newest_complete_ones(tmp_path) -> None:
    model = make_model(make_env(), curiosity=False)
    calls = []
    callback = CheckpointEvery(
        80, tmp_path / "ck", keep=2, extra=lambda: calls.append(1) or {"n": len(calls)}
    )
    model.learn(400, callback=callback)
    names = sorted(p.name for p in (tmp_path / "ck").iterdir())
    assert names == ["step-000000000240", "step-000000000320"]
    assert len(callback.saved) == 4 and checkpoint_extra(tmp_path / "ck") == {"n": 4}
    # A save killed before its index was written: the previous checkpoint is used.
    (tmp_path / "ck" / "step-000000000320" / "checkpoint.json").unlink()
    assert resolve_checkpoint(tmp_path / "ck").name == "step-000000000240"
    # A file swapped from another checkpoint is caught by the index.
    shutil.copy(
        tmp_path / "ck" / "step-000000000320" / "replay_buffer.rb.zip",
        tmp_path / "ck" / "step-000000000240" / "replay_buffer.rb.zip",
    )
    with pytest.raises(ArchiveError, match="holds no complete checkpoint"):
        resolve_checkpoint(tmp_path / "ck")
    with pytest.raises(ArchiveError, match=r"step-000000000240.*replay_buffer\.rb\.zip does not"):
        GpuDQN.load_checkpoint(tmp_path / "ck" / "step-000000000240", env=make_env())
    with pytest.raises(FileNotFoundError, match="nowhere"):
        GpuDQN.load_checkpoint(tmp_path / "nowhere", env=make_env())


def test_save_checkpoint_and_an_env_of_another_size(tmp_path) -> None:
    model = make_model(make_env(), curiosity=False)
    model.learn(80)
    model.save_checkpoint(tmp_path / "ck")
    with pytest.raises(ValueError, match="spaces|n_envs|num_envs"):
        GpuDQN.load_checkpoint(tmp_path / "ck", env=make_env(num_envs=8))
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError, match="file"):
        model.save_checkpoint(tmp_path / "file")


@pytest.mark.gpu
def test_checkpoint_and_resume_equal_one_run_on_cuda(tmp_path) -> None:
    """The CUDA twin (fused rollout, captured train step): equal to float tolerance.

    The rollout's step graph is captured before the first curiosity round in the run through
    and after it (bonus on) in the resumed run: both must step with the bonus once it is on.
    The resumed rollout must not draw its seed from NumPy's global generator either.
    """
    reference, resumed, gen_a, gen_b = _run_and_resume(tmp_path, "cuda", total=400, every=200)
    _compare(reference, resumed, exact=False)
    assert gen_a[:2] == gen_b[:2]  # Python's and NumPy's global generators


@pytest.mark.gpu
def test_checkpoint_and_resume_of_the_monolithic_rollout_on_cuda(tmp_path) -> None:
    """The monolithic kernel keys its exploration draws by launch: the count is resumed."""
    reference, resumed, _, _ = _run_and_resume(
        tmp_path, "cuda", total=400, every=200, rollout_kernel="monolithic"
    )
    assert resumed._fused_rollout.round == reference._fused_rollout.round == 400 // 4 // 2
    _compare(reference, resumed, exact=False)


@pytest.mark.gpu
def test_checkpoint_and_resume_without_curiosity_on_cuda(tmp_path) -> None:
    reference, resumed, _, _ = _run_and_resume(
        tmp_path, "cuda", total=400, every=200, curiosity=False
    )
    assert reference.curiosity_model is None
    _compare(reference, resumed, exact=False)


@pytest.mark.slow
def test_cli_train_resume_continues_the_run(tmp_path, monkeypatch, capsys, small_bar_file) -> None:
    """``train --checkpoint-every`` then ``train --resume`` from the checkpoint halfway: the
    same selected model and the same report numbers as the run that went through."""
    import json

    from agents import cli

    monkeypatch.chdir(tmp_path)
    # --all-inputs: a network is trained (and checkpointed) whatever the bars.
    argv = ["train", "--device", "cpu", "--timesteps", "1600", "--num-envs", "8",
            "--eval-every", "400", "--no-progress", "--torch-threads", "1",
            "--data", str(small_bar_file), "--episode-length", "50", "--all-inputs"]  # fmt: skip
    assert cli.main([*argv, "--checkpoint-every", "1200", "--out", "a"]) == 0
    assert sorted(p.name for p in (tmp_path / "a" / "checkpoints").iterdir()) == [
        "step-000000001200"
    ]
    assert cli.main([*argv, "--resume", "a", "--out", "b"]) == 0
    a = GpuDQN.load(tmp_path / "a" / "model.zip", device="cpu")
    b = GpuDQN.load(tmp_path / "b" / "model.zip", device="cpu")
    sa, sb = a.policy.state_dict(), b.policy.state_dict()
    assert all(th.equal(sa[k], sb[k]) for k in sa)
    ma = json.loads((tmp_path / "a" / "metrics.json").read_text())
    mb = json.loads((tmp_path / "b" / "metrics.json").read_text())
    for key in ("strategy", "model_selection", "last_model_strategy", "learning_curve"):
        assert ma[key] == mb[key], key
    capsys.readouterr()
    assert cli.main([*argv, "--seed", "1", "--resume", "a", "--out", "c"]) == 2
    assert "the checkpoint's run had --seed 0 (given: 1)" in capsys.readouterr().err
    assert cli.main([*argv, "--resume", "nowhere", "--out", "d"]) == 2
    assert "--resume nowhere: no checkpoint folder 'nowhere'" in capsys.readouterr().err
    assert cli.main([*argv, "--checkpoint-every", "0", "--out", "e"]) == 2
