"""Weights-only model and replay-buffer files: exact round trips, checksums, clear errors about
files, and no code run by loading a crafted file (agents.files.model_files, agents.files.safe_archive)."""

from __future__ import annotations

import base64
import io
import json
import os
import pickle
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import stable_baselines3
import torch as th
from crafted_archives import rewrite, set_attribute
from stable_baselines3.common.save_util import save_to_pkl

import gpu_trading_env  # noqa: F401  (registers GpuTrading-v0)
from agents import GpuDQN
from agents.files.safe_archive import ArchiveError, PickleRefusedError

pytestmark = pytest.mark.usefixtures("one_torch_thread")
ROOT = Path(__file__).resolve().parents[1]


def make_env(num_envs: int = 4):
    env = gym.make_vec("GpuTrading-v0", num_envs=num_envs, device="cpu", episode_length=30)
    env.reset(seed=3)
    return env


def make_model(env, **kwargs) -> GpuDQN:
    params = dict(
        learning_starts=40, buffer_size=400, batch_size=16, seed=0, device="cpu", train_freq=2
    )
    params.update(kwargs)
    return GpuDQN("DuelingPolicy", env, **params)


@pytest.fixture(scope="module")
def trained() -> GpuDQN:
    model = make_model(make_env(), curiosity=True, curiosity_train_freq=2, curiosity_batch_size=16)
    model.learn(200)
    return model


class WritesMarker:
    """Unpickling it opens (creates) the marker file: stands for any code an attacker runs."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def crafted_sb3_zip(model: GpuDQN, path: Path, marker: Path) -> Path:
    """A genuine SB3 zip whose ``data`` member carries a cloudpickled payload."""
    stable_baselines3.DQN.save(model, path)  # SB3's own format
    with zipfile.ZipFile(path) as zf:
        members = {name: zf.read(name) for name in zf.namelist()}
    data = json.loads(members["data"])
    payload = base64.b64encode(pickle.dumps(WritesMarker(marker))).decode()
    data["gamma"] = {":type:": "<class 'float'>", ":serialized:": payload}
    members["data"] = json.dumps(data).encode()
    with zipfile.ZipFile(path, "w") as zf:
        for name, content in members.items():
            zf.writestr(name, content)
    return path


# ---------------------------------------------------------------------------- round trips
def test_model_round_trips_exactly_in_the_weights_only_format(trained: GpuDQN, tmp_path) -> None:
    trained.save(tmp_path / "x")  # SB3's habit: the suffix is added
    path = tmp_path / "x.zip"
    with zipfile.ZipFile(path) as zf:
        assert sorted(zf.namelist()) == [
            "arrays.pt",
            "manifest.json",
            "manifest.sha256",
            "params.pt",
            "pytorch_variables.pt",
        ]
        manifest = json.loads(zf.read("manifest.json"))
    assert all(len(m["sha256"]) == 64 for m in manifest["members"].values())

    loaded = GpuDQN.load(tmp_path / "x", device="cpu")
    for name in ("policy", "curiosity_model"):
        a, b = getattr(trained, name).state_dict(), getattr(loaded, name).state_dict()
        assert a.keys() == b.keys() and all(th.equal(a[k], b[k]) for k in a)
    for a, b in ((trained.policy.optimizer, loaded.policy.optimizer),):
        sa, sb = a.state_dict(), b.state_dict()
        assert sa["param_groups"] == sb["param_groups"]
        for k in sa["state"]:
            assert all(th.equal(sa["state"][k][f], sb["state"][k][f]) for f in sa["state"][k])
    for attr in (
        "num_timesteps", "_n_calls", "_n_updates", "_train_calls", "learning_rate", "gamma",
        "batch_size", "train_freq", "replay_buffer_kwargs", "exploration_schedule",
        "observation_space", "action_space", "policy_class", "replay_buffer_class",
        "_current_progress_remaining", "exploration_rate", "_curiosity_installed",
    ):  # fmt: skip
        assert repr(getattr(loaded, attr)) == repr(getattr(trained, attr)), attr
    np.testing.assert_array_equal(loaded._last_obs, trained._last_obs)
    np.testing.assert_array_equal(loaded._curiosity_categories, trained._curiosity_categories)


def test_replay_buffer_round_trips_with_its_tree(trained: GpuDQN, tmp_path) -> None:
    trained.save_replay_buffer(tmp_path / "rb")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rb.rb.zip"]
    model = make_model(make_env())
    model.load_replay_buffer(tmp_path / "rb")
    old, new = trained.replay_buffer, model.replay_buffer
    assert (new.pos, new.full, new.seed, new.alpha) == (old.pos, old.full, old.seed, old.alpha)
    for name in ("observations", "next_observations", "actions", "rewards", "dones", "timeouts"):
        assert th.equal(getattr(new, name), getattr(old, name)), name
    for a, b in zip(new.tree.to_numpy(), old.tree.to_numpy(), strict=True):
        np.testing.assert_array_equal(a, b)
    assert new.max_priority == old.max_priority
    ia, wa = new.tree.sample(16, beta=0.5)
    ib, wb = pickle.loads(pickle.dumps(old.tree)).sample(16, beta=0.5)
    np.testing.assert_array_equal(ia, ib)
    np.testing.assert_array_equal(wa, wb)


def test_a_lambda_learning_rate_is_named_and_comes_back_through_custom_objects(tmp_path) -> None:
    model = make_model(make_env(), learning_rate=lambda p: 1e-3 * p)
    with pytest.warns(UserWarning, match="learning_rate"):
        model.save(tmp_path / "m.zip")
    with pytest.raises(ArchiveError, match=r"custom_objects=\{'learning_rate'"):
        GpuDQN.load(tmp_path / "m.zip", device="cpu")
    loaded = GpuDQN.load(tmp_path / "m.zip", device="cpu", custom_objects={"learning_rate": 5e-4})
    assert loaded.lr_schedule(1.0) == 5e-4


# ---------------------------------------------------------------------------- SB3 pickles
def test_sb3_zip_and_pickled_buffer_load_only_with_allow_pickle(trained: GpuDQN, tmp_path):
    stable_baselines3.DQN.save(trained, tmp_path / "sb3.zip")
    with pytest.raises(PickleRefusedError, match="allow_pickle=True") as err:
        GpuDQN.load(tmp_path / "sb3.zip", device="cpu")
    assert "sb3.zip" in str(err.value) and "runs any code" in str(err.value)
    loaded = GpuDQN.load(tmp_path / "sb3.zip", device="cpu", allow_pickle=True)
    a, b = trained.policy.state_dict(), loaded.policy.state_dict()
    assert all(th.equal(a[k], b[k]) for k in a)

    save_to_pkl(tmp_path / "old.pkl", trained.replay_buffer)
    model = make_model(make_env())
    with pytest.raises(PickleRefusedError, match="old.pkl"):
        model.load_replay_buffer(tmp_path / "old.pkl")
    model.load_replay_buffer(tmp_path / "old.pkl", allow_pickle=True)
    assert th.equal(model.replay_buffer.observations, trained.replay_buffer.observations)


def test_crafted_model_zip_runs_no_code_through_load(trained: GpuDQN, tmp_path) -> None:
    marker = tmp_path / "pwned"
    path = crafted_sb3_zip(trained, tmp_path / "evil.zip", marker)
    with pytest.raises(PickleRefusedError, match="evil.zip"):
        GpuDQN.load(path, device="cpu")
    with pytest.raises(PickleRefusedError):
        GpuDQN.load(path, device="cpu", custom_objects={"gamma": 0.9})
    assert not marker.exists()
    # The payload is live: the explicit opt-in does run it (what the refusal prevents).
    GpuDQN.load(path, device="cpu", allow_pickle=True)
    assert marker.exists()


def test_crafted_model_zip_runs_no_code_through_cli_eval(trained: GpuDQN, tmp_path) -> None:
    marker = tmp_path / "pwned"
    path = crafted_sb3_zip(trained, tmp_path / "evil.zip", marker)
    proc = subprocess.run(
        [sys.executable, "-m", "agents.cli", "eval", "--model", str(path),
         "--out", str(tmp_path / "out")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "evil.zip" in proc.stderr and "--allow-pickle" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not marker.exists()


def test_crafted_buffer_files_run_no_code(trained: GpuDQN, tmp_path) -> None:
    marker = tmp_path / "pwned"
    model = make_model(make_env())
    # 1. A plain pickle.
    (tmp_path / "evil.pkl").write_bytes(pickle.dumps(WritesMarker(marker)))
    with pytest.raises(PickleRefusedError, match="evil.pkl"):
        model.load_replay_buffer(tmp_path / "evil.pkl")
    # 2. A well-formed archive (checksums right) whose tensor member pickles the payload.
    trained.save_replay_buffer(tmp_path / "evil.rb.zip")
    buf = io.BytesIO()
    th.save({"a0": WritesMarker(marker)}, buf)
    rewrite(tmp_path / "evil.rb.zip", lambda m: None, {"arrays.pt": buf.getvalue()})
    with pytest.raises(ArchiveError, match="evil.rb.zip.*weights-only"):
        model.load_replay_buffer(tmp_path / "evil.rb.zip")
    # 3. A manifest naming a class outside the allowed modules.
    trained.save_replay_buffer(tmp_path / "cls.rb.zip")
    rewrite(tmp_path / "cls.rb.zip", lambda m: m.update({"class": "os:system"}))
    with pytest.raises(ArchiveError, match="'os:system' is not one the archive may name"):
        model.load_replay_buffer(tmp_path / "cls.rb.zip")
    assert not marker.exists()


# ---------------------------------------------------------------------------- damaged files
def _flip_member_byte(path: Path, member: str) -> None:
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo(member)
    raw = bytearray(path.read_bytes())
    name_len = int.from_bytes(raw[info.header_offset + 26 : info.header_offset + 28], "little")
    extra_len = int.from_bytes(raw[info.header_offset + 28 : info.header_offset + 30], "little")
    start = info.header_offset + 30 + name_len + extra_len
    raw[start + info.file_size // 2] ^= 0x01
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("member", ["params.pt", "arrays.pt", "manifest.json"])
def test_a_flipped_byte_in_a_model_file_is_an_error_naming_it(trained, tmp_path, member) -> None:
    trained.save(tmp_path / "m.zip")
    _flip_member_byte(tmp_path / "m.zip", member)
    with pytest.raises(ArchiveError, match="m.zip"):
        GpuDQN.load(tmp_path / "m.zip", device="cpu")


def test_a_changed_buffer_member_fails_its_sha256(trained: GpuDQN, tmp_path) -> None:
    trained.save_replay_buffer(tmp_path / "b.rb.zip")
    with zipfile.ZipFile(tmp_path / "b.rb.zip") as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    data = bytearray(members["arrays.pt"])
    data[len(data) // 2] ^= 0x01  # zipfile writes a new CRC: only the SHA-256 can tell
    members["arrays.pt"] = bytes(data)
    with zipfile.ZipFile(tmp_path / "b.rb.zip", "w") as zf:
        for name, content in members.items():
            zf.writestr(name, content)
    model = make_model(make_env())
    with pytest.raises(ArchiveError, match=r"b\.rb\.zip.*\(SHA-256\) of its member 'arrays.pt'"):
        model.load_replay_buffer(tmp_path / "b.rb.zip")


@pytest.mark.parametrize("damage", ["empty", "truncated", "garbage"])
def test_empty_truncated_or_garbage_files_raise_errors_naming_them(trained, tmp_path, damage):
    trained.save(tmp_path / "m.zip")
    trained.save_replay_buffer(tmp_path / "b.rb.zip")
    for name in ("m.zip", "b.rb.zip"):
        path = tmp_path / name
        raw = path.read_bytes()
        damaged = {
            "empty": b"",
            "truncated": raw[: len(raw) // 2],
            "garbage": np.random.default_rng(0).bytes(4096),
        }[damage]
        path.write_bytes(damaged)
    with pytest.raises(ArchiveError, match="m.zip"):
        GpuDQN.load(tmp_path / "m.zip", device="cpu")
    with pytest.raises(ArchiveError, match="b.rb.zip"):
        make_model(make_env()).load_replay_buffer(tmp_path / "b.rb.zip")


def test_missing_files_are_named_as_given(tmp_path) -> None:
    with pytest.raises(FileNotFoundError) as err:
        GpuDQN.load(tmp_path / "nope.zip")
    assert "nope.zip'" in str(err.value) and "nope.zip.zip" not in str(err.value)
    with pytest.raises(FileNotFoundError, match=r"nope'.*nope\.zip'"):
        GpuDQN.load(tmp_path / "nope")


def test_buffer_of_another_number_of_envs_is_refused_at_load(tmp_path) -> None:
    four = make_model(make_env(4))
    four.learn(60)
    four.save_replay_buffer(tmp_path / "b.rb.zip")
    eight = make_model(make_env(8))
    with pytest.raises(ArchiveError, match=r"b\.rb\.zip.*n_envs = 4.*8 envs"):
        eight.load_replay_buffer(tmp_path / "b.rb.zip")


def test_saves_to_an_existing_folder_are_refused(trained: GpuDQN, tmp_path) -> None:
    folder = tmp_path / "existing_folder"
    folder.mkdir()
    with pytest.raises(IsADirectoryError, match="existing_folder.*folder"):
        trained.save_replay_buffer(folder)
    with pytest.raises(IsADirectoryError, match="existing_folder.*folder"):
        trained.save(folder)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing_folder"]
    assert not any(folder.iterdir())


def test_saves_remove_stale_temporaries_of_killed_saves(trained: GpuDQN, tmp_path) -> None:
    old = [tmp_path / ".m.zip.k1.tmp", tmp_path / ".b.rb.zip.k2.tmp"]
    for p in old:
        p.write_bytes(b"x" * 100)
        os.utime(p, (time.time() - 3600, time.time() - 3600))
    fresh = tmp_path / ".m.zip.live.tmp"  # a save in progress elsewhere: kept
    fresh.write_bytes(b"y")
    other = tmp_path / ".other.zip.k3.tmp"  # another file's: kept
    other.write_bytes(b"z")
    os.utime(other, (time.time() - 3600, time.time() - 3600))
    trained.save(tmp_path / "m.zip")
    trained.save_replay_buffer(tmp_path / "b.rb.zip")
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [".m.zip.live.tmp", ".other.zip.k3.tmp", "b.rb.zip", "m.zip"]


def test_a_live_writers_temporary_is_kept_however_old(trained: GpuDQN, tmp_path) -> None:
    """Another process still writing ``m.zip`` (its temporary untouched for an hour, its
    process alive) keeps its temporary through a save of the same path; a dead writer's goes."""
    from gpu_trading_env.atomic_file import _HOST

    writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    try:
        live = tmp_path / f".m.zip.{_HOST}.{writer.pid}.abc123.tmp"
        gone = tmp_path / f".m.zip.{_HOST}.{dead.pid}.def456.tmp"
        for p in (live, gone):
            p.write_bytes(b"partial save")
            os.utime(p, (time.time() - 3600, time.time() - 3600))
        trained.save(tmp_path / "m.zip")
        assert live.exists() and not gone.exists()
    finally:
        writer.kill()
        writer.wait()


@pytest.mark.parametrize("field", ["n_categories", "hidden"])
def test_curiosity_sizes_beyond_the_saved_weights_are_refused_before_building(
    trained: GpuDQN, tmp_path, field
) -> None:
    """The curiosity model's input of ``state_dims + n_categories`` counts: a file declaring
    10**5 categories (or a hidden layer 100 times wider) over its few saved weights is refused
    before the model is built (10**7 categories built 2 GB)."""
    trained.save(tmp_path / "m.zip")
    dims = dict(trained._curiosity_dims)
    dims[field] = 10**5 if field == "n_categories" else 100 * dims["hidden"]
    rewrite(tmp_path / "m.zip", set_attribute("_curiosity_dims", {"__dict__": dims}))
    with pytest.raises(ArchiveError, match=r"m\.zip.*_curiosity_dims.*needs \d+ weights or more"):
        GpuDQN.load(tmp_path / "m.zip", device="cpu")


def test_file_objects_round_trip(trained: GpuDQN) -> None:
    model_file, buffer_file = io.BytesIO(), io.BytesIO()
    trained.save(model_file)
    trained.save_replay_buffer(buffer_file)
    model_file.seek(0)
    buffer_file.seek(0)
    loaded = GpuDQN.load(model_file, env=make_env(), device="cpu")
    loaded.load_replay_buffer(buffer_file)
    a, b = trained.policy.state_dict(), loaded.policy.state_dict()
    assert all(th.equal(a[k], b[k]) for k in a)
    assert th.equal(loaded.replay_buffer.rewards, trained.replay_buffer.rewards)


def test_prioritized_dqn_files_are_weights_only_too(tmp_path) -> None:
    from agents import PrioritizedDQN, PrioritizedReplayBuffer

    env = gym.make("CartPole-v1")
    model = PrioritizedDQN(
        "MlpPolicy", env, replay_buffer_class=PrioritizedReplayBuffer, learning_starts=10,
        buffer_size=200, seed=0, device="cpu",
    )  # fmt: skip
    model.learn(60)
    model.save(tmp_path / "per")
    model.save_replay_buffer(tmp_path / "per")
    loaded = PrioritizedDQN.load(tmp_path / "per", env=env, device="cpu")
    loaded.load_replay_buffer(tmp_path / "per.rb.zip")
    a, b = model.policy.state_dict(), loaded.policy.state_dict()
    assert all(th.equal(a[k], b[k]) for k in a) and loaded.num_timesteps == model.num_timesteps
    assert th.equal(loaded.replay_buffer.observations, model.replay_buffer.observations)
    stable_baselines3.DQN.save(model, tmp_path / "sb3.zip")
    with pytest.raises(PickleRefusedError):
        PrioritizedDQN.load(tmp_path / "sb3.zip")


def test_a_forged_class_name_is_refused(trained: GpuDQN, tmp_path) -> None:
    """A file may name networks, optimizers and buffers only: not, say, a logger whose
    construction writes a file wherever the forger wants."""
    trained.save(tmp_path / "m.zip")
    forged = {"__class__": "stable_baselines3.common.logger:CSVOutputFormat"}
    rewrite(tmp_path / "m.zip", set_attribute("policy_class", forged))
    with pytest.raises(ArchiveError, match="policy_class.*CSVOutputFormat.*not one the archive"):
        GpuDQN.load(tmp_path / "m.zip", device="cpu")


def test_files_written_before_the_agents_rooms_still_load(trained: GpuDQN, tmp_path) -> None:
    """A file of the flat ``agents/`` layout names ``agents.policies:DuelingDQNPolicy``; it
    loads as the class now in ``agents.algorithm.policies``."""
    trained.save(tmp_path / "m.zip")
    with zipfile.ZipFile(tmp_path / "m.zip") as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    manifest = json.loads(members["manifest.json"])
    assert manifest["data"]["policy_class"] == {
        "__class__": "agents.algorithm.policies:DuelingDQNPolicy"
    }
    old_name = {"__class__": "agents.policies:DuelingDQNPolicy"}
    rewrite(tmp_path / "m.zip", set_attribute("policy_class", old_name))
    loaded = GpuDQN.load(tmp_path / "m.zip", device="cpu")
    assert loaded.policy_class is type(trained.policy)
    for name, value in trained.policy.state_dict().items():
        assert th.equal(loaded.policy.state_dict()[name], value), name


def test_a_model_saved_with_the_old_defaults_builds_the_env_it_was_trained_on() -> None:
    """tests/data holds a file saved by version 0.1.0 (commit ef105a8) from
    ``gym.make_vec("GpuTrading-v0", ...)`` with no config, when EnvConfig's defaults were the
    source design's. The file records every field, so it loads and builds that env, not
    today's defaults: 45 actions, barriers and both penalties on."""
    from gpu_trading_env import EnvConfig, MarketData

    path = ROOT / "tests/data/model_saved_by_0.1.0_default_env.zip"
    model = GpuDQN.load(path, device="cpu")
    old = EnvConfig.source_design(episode_length=20, autoreset_mode="same_step")
    assert model.env_config == old != EnvConfig(episode_length=20, autoreset_mode="same_step")
    env = model.make_env(MarketData.synthetic("planted", 300, seed=0, phi=0.3), num_envs=2)
    assert env.config == old and env.single_action_space == gym.spaces.Discrete(45)
    actions, _ = model.predict(env.reset(seed=0)[0], deterministic=True)
    assert actions.shape == (2,) and all(0 <= a < 45 for a in actions.tolist())
