"""Crafted model, buffer, checkpoint and run-state files (valid checksums, forged contents):
nothing is imported from a name off the allowlist, nothing large is allocated or inflated
before its size is checked, every attribute and counter is checked, and each is one error
naming the file and the field (agents.files, agents.algorithm.gpu_dqn_files;
docs/RELIABILITY.md, "Model, buffer, checkpoint and run-state files")."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import stable_baselines3
import torch as th
from crafted_archives import (
    read_members,
    rewrite,
    rewrite_sb3_data,
    set_attribute,
    write_members,
    write_overlapping,
)

import gpu_trading_env  # noqa: F401  (registers GpuTrading-v0)
from agents import GpuDQN
from agents.files.safe_archive import ArchiveError

pytestmark = pytest.mark.usefixtures("one_torch_thread")
ROOT = Path(__file__).resolve().parents[1]
PEAK_LIMIT_BYTES = 2 << 30
# A regime model of 200 states (the input selection fits 3): its forward filter over the
# evaluated bars would need gigabytes.
REGIME_200 = {
    "mus": [0.0] * 200,
    "sigmas": [1.0] * 200,
    "initial": [0.005] * 200,
    "transition": [[0.005] * 200] * 200,
    "log_likelihood": 0.0,
    "iterations": 1,
}


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
    model = make_model(make_env())
    model.learn(120)
    return model


@pytest.fixture
def model_file(trained: GpuDQN, tmp_path) -> Path:
    trained.save(tmp_path / "m.zip")
    return tmp_path / "m.zip"


@pytest.fixture
def buffer_file(trained: GpuDQN, tmp_path) -> Path:
    trained.save_replay_buffer(tmp_path / "b.rb.zip")
    return tmp_path / "b.rb.zip"


# ------------------------------------------------------------------------------- class names
SENTINEL = """
import pathlib
pathlib.Path({marker!r}).write_text("imported")
import torch
class Net(torch.nn.Module):
    pass
"""


@pytest.mark.parametrize(
    "name",
    [
        "sentinel_{tag}:Net",
        "agents.cli.__main__:main",
        "agents.algorithm.policies:th.ao.nn.quantized.ReLU6",
        "agents.algorithm.policies:DuelingDQNPolicy.__init__",
        "os:system",
    ],
)
def test_a_class_named_off_the_allowlist_imports_nothing(model_file, tmp_path, monkeypatch, name):
    """A crafted manifest naming a module with an import side effect: refused by its name, the
    module never imported (no marker file, not in sys.modules), one error naming the field."""
    tag = tmp_path.name.replace("-", "_")
    marker = tmp_path / "imported"
    (tmp_path / f"sentinel_{tag}.py").write_text(SENTINEL.format(marker=str(marker)))
    monkeypatch.syspath_prepend(str(tmp_path))
    name = name.format(tag=tag)
    module = name.partition(":")[0]
    before = module in sys.modules
    rewrite(model_file, set_attribute("policy_class", {"__class__": name}))
    with pytest.raises(ArchiveError, match=r"m\.zip.*'policy_class'.*not one the archive may name"):
        GpuDQN.load(model_file, device="cpu")
    assert not marker.exists()
    assert (module in sys.modules) == before


def test_buffer_and_object_class_names_import_nothing(trained, buffer_file, tmp_path, monkeypatch):
    tag = tmp_path.name.replace("-", "_")
    marker = tmp_path / "imported"
    (tmp_path / f"sentinel_{tag}.py").write_text(SENTINEL.format(marker=str(marker)))
    monkeypatch.syspath_prepend(str(tmp_path))
    rewrite(buffer_file, lambda m: m.update({"class": f"sentinel_{tag}:Net"}))
    with pytest.raises(ArchiveError, match="not one the archive may name"):
        trained.load_replay_buffer(buffer_file)
    trained.save(tmp_path / "m.zip")
    forged = {"__object__": f"sentinel_{tag}:Net", "state": {"__dict__": {}}}
    rewrite(tmp_path / "m.zip", set_attribute("learning_rate", forged))
    with pytest.raises(ArchiveError, match="'learning_rate'.*not allowed"):
        GpuDQN.load(tmp_path / "m.zip", device="cpu")
    assert not marker.exists() and f"sentinel_{tag}" not in sys.modules


# ----------------------------------------------------------------------------- the container
def test_the_manifest_is_under_its_checksum(model_file) -> None:
    members = read_members(model_file)
    members["manifest.json"] = members["manifest.json"].replace(
        b'"buffer_size": 400', b'"buffer_size": 900'
    )
    write_members(model_file, members)
    with pytest.raises(ArchiveError, match=r"m\.zip' is damaged.*SHA-256.*manifest\.json"):
        GpuDQN.load(model_file, device="cpu")


def test_version_1_files_without_a_manifest_checksum_still_load(trained, model_file) -> None:
    """Files written before the manifest had its own checksum (format version 1) load; a
    version 2 file without it is refused."""
    members = read_members(model_file)
    del members["manifest.sha256"]
    write_members(model_file, members)
    with pytest.raises(ArchiveError, match=r"format version 2\) lacks its manifest.sha256"):
        GpuDQN.load(model_file, device="cpu")
    manifest = json.loads(members["manifest.json"])
    manifest["version"] = 1
    members["manifest.json"] = json.dumps(manifest).encode()
    write_members(model_file, members)
    loaded = GpuDQN.load(model_file, device="cpu")
    for name, value in trained.policy.state_dict().items():
        assert th.equal(loaded.policy.state_dict()[name], value), name


def test_a_member_larger_than_recorded_is_refused_before_it_is_read(model_file) -> None:
    members = read_members(model_file)
    manifest = json.loads(members["manifest.json"])
    members["arrays.pt"] += b"\0" * 1000  # the manifest still records the old size
    text = json.dumps(manifest).encode()
    members.update(
        {"manifest.json": text, "manifest.sha256": hashlib.sha256(text).hexdigest().encode()}
    )
    write_members(model_file, members)
    with pytest.raises(ArchiveError, match=r"member 'arrays.pt' has \d+ bytes; its manifest"):
        GpuDQN.load(model_file, device="cpu")


def write_bomb(path: Path, model_file: Path, size: int) -> Path:
    members = read_members(model_file)
    manifest = json.loads(members.pop("manifest.json"))
    members.pop("manifest.sha256")
    sha, block = hashlib.sha256(), b"\0" * (1 << 24)
    for _ in range(size // len(block)):
        sha.update(block)
    manifest["members"]["bomb.pt"] = {"sha256": sha.hexdigest(), "bytes": size}
    text = json.dumps(manifest).encode()
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("manifest.json", text)
        zf.writestr("manifest.sha256", hashlib.sha256(text).hexdigest())
        for name, data in members.items():
            zf.writestr(name, data)
        info = zipfile.ZipInfo("bomb.pt")
        info.compress_type = zipfile.ZIP_DEFLATED
        with zf.open(info, "w", force_zip64=True) as fh:
            for _ in range(size // len(block)):
                fh.write(block)
    return path


def test_overlapping_members_are_refused_before_they_are_read(model_file, tmp_path) -> None:
    """A model file of 7 MB with 20 stored members each spanning the ones after them and one
    4 MB kernel (every checksum valid: 80 MB read from 7; the review's 42 MB file read as 2.8 GB)."""
    members = read_members(model_file)
    manifest = json.loads(members.pop("manifest.json"))
    members.pop("manifest.sha256")
    kernel, copies = b"\0" * (4 << 20), 20
    bomb = write_overlapping(tmp_path / "o.zip", {}, kernel, copies)
    with zipfile.ZipFile(bomb) as zf:
        for info in zf.infolist():
            data = zf.read(info)  # what the reader would read (the test's own check)
            manifest["members"][info.filename] = {
                "sha256": hashlib.sha256(data).hexdigest(),
                "bytes": len(data),
            }
    text = json.dumps(manifest).encode()
    head = {"manifest.json": text, "manifest.sha256": hashlib.sha256(text).hexdigest().encode()}
    write_overlapping(bomb, {**head, **members}, kernel, copies)
    assert bomb.stat().st_size < 8 << 20
    with pytest.raises(ArchiveError, match=r"o\.zip.*'pad0.pt' and 'pad1.pt' share bytes"):
        GpuDQN.load(bomb, device="cpu")


def test_a_deflated_member_is_refused_before_it_is_inflated(model_file, tmp_path) -> None:
    bomb = write_bomb(tmp_path / "bomb.zip", model_file, 1 << 26)
    with pytest.raises(ArchiveError, match=r"bomb\.zip.*'bomb.pt' is compressed"):
        GpuDQN.load(bomb, device="cpu")


def test_a_compressed_record_inside_a_torch_member_is_refused(model_file) -> None:
    members = read_members(model_file)
    inner = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(members["arrays.pt"])) as src,
        zipfile.ZipFile(inner, "w", zipfile.ZIP_DEFLATED) as dst,
    ):
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
    rewrite(model_file, lambda m: None, {"arrays.pt": inner.getvalue()})
    with pytest.raises(ArchiveError, match="arrays.pt.*compressed"):
        GpuDQN.load(model_file, device="cpu")


def test_deeply_nested_json_is_one_error_naming_the_file(model_file) -> None:
    deep: object = 0
    for _ in range(100):
        deep = [deep]
    rewrite(model_file, set_attribute("policy_kwargs", {"__dict__": {"net_arch": deep}}))
    with pytest.raises(ArchiveError, match=r"m\.zip.*nested deeper than 64"):
        GpuDQN.load(model_file, device="cpu")
    members = read_members(model_file)
    text = b'{"a": ' * 100_000 + b"0" + b"}" * 100_000
    members.update(
        {"manifest.json": text, "manifest.sha256": hashlib.sha256(text).hexdigest().encode()}
    )
    write_members(model_file, members)
    with pytest.raises(ArchiveError, match=r"m\.zip.*nested too deeply"):
        GpuDQN.load(model_file, device="cpu")


# ------------------------------------------------------------------------------- attributes
@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("gamma", 5.0, "gamma = 5.0 is invalid"),
        ("batch_size", "32", "'batch_size' = '32' is invalid: allowed is an int"),
        ("exploration_rate", {"__float__": "nan"}, "'exploration_rate' = nan is invalid"),
        ("num_timesteps", -5, "'num_timesteps' = -5 is invalid"),
        ("buffer_size", 10**11, "buffer_size = 100000000000 .* needs \\d+ bytes"),
        ("n_envs", 0, "'n_envs' = 0 is invalid"),
        ("rollout_kernel", "evil", "rollout_kernel = 'evil' is invalid"),
        ("policy_kwargs", {"__dict__": {"net_arch": [10**6, 10**6]}}, "needs at least"),
        ("action_space", {"__space__": {"type": "Discrete", "n": 10**9, "start": 0}}, "needs at"),
        ("replay_buffer_kwargs", {"__dict__": {"evil": 1}}, "replay_buffer_kwargs"),
        ("made_up", 1, "'made_up'.* not ones GpuDQN saves"),
        ("device", {"__device__": "cuda:7"}, "'device'.* not ones GpuDQN saves"),
        ("policy_class", {"__class__": "torch.nn.modules.activation:ReLU"}, "not a policy class"),
        ("replay_buffer_kwargs", {"__dict__": {"alpha": -1.0}}, "does not build.*alpha"),
        (
            "policy_kwargs",
            {"__dict__": {"features_extractor_kwargs": {"__dict__": {"features_dim": 10**9}}}},
            "does not build",
        ),
        (
            "input_selection",
            {"__dict__": {"regime": {"__dict__": REGIME_200}}},
            "regime model has 200 states",
        ),
    ],
)
def test_attributes_are_checked_before_anything_is_built(model_file, name, value, message):
    rewrite(model_file, set_attribute(name, value))
    with pytest.raises(ArchiveError, match=rf"m\.zip.*{message}"):
        GpuDQN.load(model_file, device="cpu")


@pytest.mark.parametrize("name", ["observation_space", "action_space", "policy_class"])
def test_a_file_without_its_spaces_or_policy_is_one_error_naming_it(
    trained, model_file, tmp_path, name
) -> None:
    """A model file lacking an attribute every model needs, in the weights-only format
    *(guard)* and in SB3's own zip (``allow_pickle``): one ArchiveError naming the file and the
    attribute, with or without an env, never SB3's bare KeyError."""
    rewrite(model_file, lambda manifest: manifest["data"].pop(name))
    stable_baselines3.DQN.save(trained, tmp_path / "sb3.zip")
    sb3 = rewrite_sb3_data(tmp_path / "sb3.zip", lambda data: data.pop(name), tmp_path / "s.zip")
    for path, pickle in ((model_file, False), (sb3, True)):
        for env in (None, make_env()):
            with pytest.raises(ArchiveError, match=rf"{path.name}' lacks the attribute '{name}'"):
                GpuDQN.load(path, env=env, device="cpu", allow_pickle=pickle)


def test_a_files_tensorboard_folder_is_not_used_nor_warned_about(model_file, tmp_path) -> None:
    """A model trained with TensorBoard logs (what ``train`` saves where tensorboard is
    installed) loads without a warning and without its folder."""
    rewrite(model_file, set_attribute("tensorboard_log", "/etc/anywhere"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = GpuDQN.load(model_file, device="cpu")
    assert model.tensorboard_log is None
    given = GpuDQN.load(model_file, device="cpu", tensorboard_log=str(tmp_path))
    assert given.tensorboard_log == str(tmp_path)


@pytest.mark.parametrize(
    ("edit", "drop", "message"),
    [
        (lambda m: m.pop("data"), (), "manifest.json lacks the field 'data'"),
        (lambda m: m.update(data=[1]), (), "'data' is a list; allowed is a dict"),
        (lambda m: m.update(not_saved=["gamma"]), (), "'not_saved' is a list; allowed is a dict"),
        (lambda m: None, ("params.pt",), "lacks the member 'params.pt'"),
        (lambda m: None, ("arrays.pt",), "lacks the member 'arrays.pt'"),
    ],
)
def test_a_model_file_missing_a_part_or_of_a_wrong_type_is_one_archive_error(
    model_file, edit, drop, message
) -> None:
    rewrite(model_file, edit, drop=drop)
    with pytest.raises(ArchiveError, match=rf"m\.zip.*{message}"):
        GpuDQN.load(model_file, device="cpu")


def _edit_params(path: Path, edit) -> None:
    params = th.load(io.BytesIO(read_members(path)["params.pt"]), weights_only=True)
    edit(params["policy"])
    buf = io.BytesIO()
    th.save(params, buf)
    rewrite(path, lambda m: None, {"params.pt": buf.getvalue()})


def test_a_tensor_larger_than_its_stored_bytes_is_refused_before_a_network_is_built(
    model_file,
) -> None:
    """A weight of 4 * 10**8 elements over one stored float (strides of 0): it would make the
    file's weight count pass a network of gigabytes. Refused from the bytes the member holds,
    naming the tensor, before anything the size declares is allocated."""

    def expanded(policy):
        policy["q_net.shared.0.weight"] = th.zeros(1).expand(20000, 20000)

    _edit_params(model_file, expanded)
    rewrite(model_file, set_attribute("policy_kwargs", {"__dict__": {"net_arch": [10000] * 3}}))
    with pytest.raises(
        ArchiveError,
        match=r"m\.zip.*'params.pt'.*'policy/q_net.shared.0.weight' of shape \(20000, 20000\)"
        r".*needs 1600000000 bytes; its storage holds 4",
    ):
        GpuDQN.load(model_file, device="cpu")

    def views(policy):  # many views of one storage: each fits it, all together do not
        base = th.zeros(10**5)
        del policy["q_net.shared.0.weight"]  # the expanded one, refused above
        policy.update({f"extra.{i}": base[i:] for i in range(50)})

    _edit_params(model_file, views)
    with pytest.raises(ArchiveError, match=r"'params.pt': its tensors need \d+ bytes; the mem"):
        GpuDQN.load(model_file, device="cpu")

    def sparse(policy):  # two stored values, 10**12 elements
        for i in range(50):
            del policy[f"extra.{i}"]  # the views, refused above
        policy.update(extra=th.sparse_coo_tensor(th.tensor([[0, 1]]), th.ones(2), (10**12,)))

    _edit_params(model_file, sparse)
    with pytest.raises(ArchiveError, match=r"'policy/extra' has the layout torch.sparse_coo"):
        GpuDQN.load(model_file, device="cpu")


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_weights_are_refused_naming_the_tensor(model_file, value) -> None:
    def poison(policy):
        policy["q_net.advantage_head.2.bias"][-1] = value

    _edit_params(model_file, poison)
    with pytest.raises(
        ArchiveError, match=r"m\.zip.*'policy/q_net.advantage_head.2.bias' holds NaN or inf"
    ):
        GpuDQN.load(model_file, device="cpu")


# ----------------------------------------------------------------------------- buffer files
def _edit_buffer(path: Path, edit_state=None, edit_arrays=None) -> None:
    members = read_members(path)
    manifest = json.loads(members["manifest.json"])
    arrays = th.load(io.BytesIO(members["arrays.pt"]), weights_only=True)

    def ref(value):
        return value["__array__"]

    if edit_arrays is not None:
        edit_arrays(arrays, manifest, ref)
    buf = io.BytesIO()
    th.save(arrays, buf)
    rewrite(path, edit_state or (lambda m: None), {"arrays.pt": buf.getvalue()})


def _tree_leaves(arrays, manifest, ref):
    return arrays[ref(manifest["tree"]["__dict__"]["sum_tree"])]


def _negative_priority(arrays, manifest, ref):
    sums = _tree_leaves(arrays, manifest, ref)
    sums[len(sums) // 2] = -1.0


def _action_out_of_range(arrays, manifest, ref):
    arrays[ref(manifest["state"]["actions"])][0, 0, 0] = 10**6


def _nan_reward(arrays, manifest, ref):
    arrays[ref(manifest["state"]["rewards"])][0, 0] = float("nan")


@pytest.mark.parametrize(
    ("edit_state", "edit_arrays", "message"),
    [
        (None, _negative_priority, "priorities hold negative"),
        (lambda m: m["state"].update(full=True), None, "0 on written slots"),
        (lambda m: m["state"].update(pos=10**9), None, "pos = 1000000000 is invalid"),
        (lambda m: m["state"].update(pos=-1), None, "pos = -1 is invalid"),
        (None, _action_out_of_range, "actions hold values outside 0..2"),
        (None, _nan_reward, "rewards hold NaN"),
        (lambda m: m["state"].update(buffer_size=10**9), None, "observations has shape"),
        (lambda m: m["tree"]["__dict__"].update(capacity=10**12), None, "tree has capacity"),
    ],
)
def test_crafted_buffers_with_valid_checksums_are_refused(
    trained, buffer_file, edit_state, edit_arrays, message
) -> None:
    _edit_buffer(buffer_file, edit_state, edit_arrays)
    with pytest.raises(ArchiveError, match=rf"b\.rb\.zip.*{message}"):
        trained.load_replay_buffer(buffer_file)


@pytest.mark.parametrize(
    ("edit", "drop", "message"),
    [
        (lambda m: m.pop("state"), (), "manifest.json lacks the field 'state'"),
        (lambda m: m.update(state=[1]), (), "'state' is a list; allowed is a dict"),
        (lambda m: m.pop("class"), (), "manifest.json lacks the field 'class'"),
        (lambda m: None, ("arrays.pt",), "lacks the member 'arrays.pt'"),
        (lambda m: m["tree"]["__dict__"].pop("seed"), (), "tree.*'seed'"),
        (lambda m: m["state"].update(n_envs="x"), (), "n_envs = 'x' is invalid"),
        (lambda m: m["state"].update(n_envs=None), (), "n_envs = None is invalid"),
    ],
)
def test_a_buffer_file_missing_a_part_or_of_a_wrong_type_is_one_archive_error(
    trained, buffer_file, edit, drop, message
) -> None:
    rewrite(buffer_file, edit, drop=drop)
    with pytest.raises(ArchiveError, match=rf"b\.rb\.zip.*{message}"):
        trained.load_replay_buffer(buffer_file)


def test_a_buffer_of_expanded_storage_is_refused_before_it_is_checked(trained, buffer_file):
    """A few-KB buffer file whose observations are 10**6 rows over one stored float (strides
    of 0): refused from the bytes it holds, before the storage checks touch a row."""

    def expanded(arrays, manifest, ref):
        shape = (10**6, *arrays[ref(manifest["state"]["observations"])].shape[1:])
        for field in ("observations", "next_observations"):
            arrays[ref(manifest["state"][field])] = th.zeros(1).expand(shape)

    _edit_buffer(buffer_file, lambda m: m["state"].update(buffer_size=10**6), expanded)
    assert buffer_file.stat().st_size < 1 << 20
    with pytest.raises(ArchiveError, match=r"b\.rb\.zip.*'arrays.pt'.*tensor .* needs \d+ byt"):
        trained.load_replay_buffer(buffer_file)


def test_the_buffer_round_trips(trained, buffer_file) -> None:
    model = make_model(make_env())
    model.load_replay_buffer(buffer_file)
    assert model.replay_buffer.pos == trained.replay_buffer.pos
    assert th.equal(model.replay_buffer.observations, trained.replay_buffer.observations)


@pytest.mark.gpu
def test_a_cuda_buffer_round_trips_and_a_crafted_one_is_refused(tmp_path) -> None:
    """The storage checks run on the device: a CUDA buffer saved now loads, with its tree; a
    NaN reward in it is refused."""
    env = gym.make_vec("GpuTrading-v0", num_envs=4, device="cuda", episode_length=30)
    model = GpuDQN("DuelingPolicy", env, device="cuda", buffer_size=64, seed=0)
    buf = model.replay_buffer
    for _ in range(5):
        buf.add(
            np.zeros((4, *model.observation_space.shape), np.float32),
            np.ones((4, *model.observation_space.shape), np.float32),
            np.array([0, 1, 2, 3]),
            np.array([0.5, 0.0, -1.0, 2.0], np.float32),
            np.array([False, True, False, False]),
            [{}] * 4,
        )
    model.save_replay_buffer(tmp_path / "b.rb.zip")
    model.load_replay_buffer(tmp_path / "b.rb.zip")
    assert model.replay_buffer.pos == 5 and model.replay_buffer.observations.is_cuda
    _edit_buffer(tmp_path / "b.rb.zip", None, _nan_reward)
    with pytest.raises(ArchiveError, match="rewards hold NaN"):
        model.load_replay_buffer(tmp_path / "b.rb.zip")


def test_prioritized_dqn_files_are_checked_too(tmp_path) -> None:
    from agents import PrioritizedDQN

    model = PrioritizedDQN(
        "MlpPolicy", gym.make("CartPole-v1"), buffer_size=100, device="cpu", seed=0
    )
    model.save(tmp_path / "p.zip")
    assert PrioritizedDQN.load(tmp_path / "p.zip", device="cpu").gamma == model.gamma
    rewrite(tmp_path / "p.zip", set_attribute("gamma", 5.0))
    with pytest.raises(ArchiveError, match=r"p\.zip.*gamma = 5.0 is invalid"):
        PrioritizedDQN.load(tmp_path / "p.zip", device="cpu")
    rewrite(tmp_path / "p.zip", set_attribute("gamma", 0.9))
    rewrite(tmp_path / "p.zip", set_attribute("buffer_size", 10**11))
    with pytest.raises(ArchiveError, match="buffer_size = 100000000000"):
        PrioritizedDQN.load(tmp_path / "p.zip", device="cpu")


# ------------------------------------------------------------------------------- checkpoints
def _reindex(folder: Path) -> None:
    index = json.loads((folder / "checkpoint.json").read_text())
    for name in index["files"]:
        index["files"][name] = hashlib.sha256((folder / name).read_bytes()).hexdigest()
    (folder / "checkpoint.json").write_text(json.dumps(index))


def test_checkpoint_counters_are_checked_against_each_other_and_the_run(tmp_path) -> None:
    model = make_model(make_env())
    model.learn(80)
    folder = model.save_checkpoint(tmp_path / "ck")
    # The files written now load, and match the run's total.
    loaded = GpuDQN.load_checkpoint(folder, env=make_env(), total_timesteps=80)
    assert loaded.num_timesteps == model.num_timesteps
    rewrite(folder / "model.zip", set_attribute("_total_timesteps", 10**12))
    _reindex(folder)
    with pytest.raises(ArchiveError, match=r"ck'.*_total_timesteps = 1000000000000 is not"):
        GpuDQN.load_checkpoint(folder, env=make_env(), total_timesteps=80)
    rewrite(folder / "model.zip", set_attribute("_total_timesteps", 80))
    rewrite(folder / "model.zip", set_attribute("num_timesteps", 4))
    _reindex(folder)
    with pytest.raises(ArchiveError, match="num_timesteps differs between model.zip"):
        GpuDQN.load_checkpoint(folder, env=make_env())


def test_a_checkpoint_whose_buffer_has_another_size_is_refused(tmp_path) -> None:
    """A checkpoint's buffer replaced by one of another run's size (valid file, index
    rewritten): resuming it would continue another run; one error naming the field and both."""
    model = make_model(make_env())
    model.learn(80)
    folder = model.save_checkpoint(tmp_path / "ck")
    other = make_model(make_env(), buffer_size=200)
    other.learn(80)
    other.save_replay_buffer(folder / "replay_buffer.rb.zip")
    _reindex(folder)
    with pytest.raises(ArchiveError, match=r"replay_buffer.rb.zip'.*buffer_size = 50 differs"):
        GpuDQN.load_checkpoint(folder, env=make_env(), total_timesteps=80)


def test_a_garbage_run_state_is_one_error_naming_it(tmp_path) -> None:
    model = make_model(make_env())
    model.learn(40)
    folder = model.save_checkpoint(tmp_path / "ck")
    (folder / "run_state.zip").write_bytes(os.urandom(3000))
    _reindex(folder)
    with pytest.raises(ArchiveError, match="run_state.zip"):
        GpuDQN.load_checkpoint(folder, env=make_env())
    model.save_checkpoint(folder)
    rewrite(folder / "run_state.zip", lambda m: m["state"]["__dict__"].update(python_random=7))
    _reindex(folder)
    with pytest.raises(ArchiveError, match="run_state.zip' holds a run state that cannot"):
        GpuDQN.load_checkpoint(folder, env=make_env())

    def short_torch_state(arrays, manifest, ref):
        arrays[ref(manifest["state"]["__dict__"]["torch_cpu"])] = th.zeros(3, dtype=th.uint8)

    model.save_checkpoint(folder)
    _edit_buffer(folder / "run_state.zip", None, short_torch_state)  # torch raises RuntimeError
    _reindex(folder)
    with pytest.raises(ArchiveError, match="run_state.zip' holds a run state that cannot"):
        GpuDQN.load_checkpoint(folder, env=make_env())


def _many_envs(manifest) -> None:
    manifest["data"].update(n_envs=10**7, _last_obs=None, _last_original_obs=None)
    manifest["data"].update(_last_episode_starts=None)


def test_loading_for_inference_builds_nothing_the_file_sizes(trained, model_file) -> None:
    rewrite(model_file, _many_envs)
    model = GpuDQN.load(model_file, device="cpu", for_inference=True)
    assert model.n_envs == 1 and model.replay_buffer.buffer_size == 1
    for name, value in trained.policy.state_dict().items():
        assert th.equal(model.policy.state_dict()[name], value), name
    obs = np.zeros((3, *trained.observation_space.shape), np.float32)
    assert (
        model.predict(obs, deterministic=True)[0] == trained.predict(obs, deterministic=True)[0]
    ).all()


# ------------------------------------------------------------------------------ peak memory
PEAK = """
import os, resource, subprocess, sys
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
err = proc.stderr.read()
_, status, usage = os.wait4(proc.pid, 0)
print(os.waitstatus_to_exitcode(status), usage.ru_maxrss * 1024)
sys.stderr.write(err.decode())
"""


def test_eval_on_each_crafted_file_stays_under_2_gb(model_file, tmp_path) -> None:
    """``eval`` (a subprocess; its peak resident memory from wait4) on the files the review
    crafted: a 10**8-slot buffer_size, a 1 GiB deflated member, a 200-state regime model, a
    weight of 4 * 10**8 elements over one stored float; and 10**7 envs (a buffer row of 5 GB)."""
    expanded = tmp_path / "expanded.zip"
    shutil.copy(model_file, expanded)
    _edit_params(expanded, lambda p: p.update(w=th.zeros(1).expand(20000, 20000)))
    rewrite(expanded, set_attribute("policy_kwargs", {"__dict__": {"net_arch": [10000] * 3}}))
    crafted = {
        "expanded": expanded,
        "buffer_size": rewrite(model_file, set_attribute("buffer_size", 10**8), out=tmp_path / "bs.zip"),
        "n_envs": rewrite(model_file, _many_envs, out=tmp_path / "envs.zip"),
        "bomb": write_bomb(tmp_path / "bomb.zip", model_file, 1 << 30),
        "regime": rewrite(
            model_file,
            set_attribute(
                "input_selection",
                {"__dict__": {"regime": {"__dict__": REGIME_200}}},
            ),
            out=tmp_path / "regime.zip",
        ),
    }  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for what, path in crafted.items():
        cmd = [sys.executable, "-m", "agents.cli", "eval", "--model", str(path),
               "--out", str(tmp_path / f"out-{what}")]  # fmt: skip
        proc = subprocess.run(
            [sys.executable, "-c", PEAK, *cmd], cwd=ROOT, capture_output=True, text=True,
            timeout=300, env=env,
        )  # fmt: skip
        code, peak = (int(x) for x in proc.stdout.split())
        assert peak <= PEAK_LIMIT_BYTES, (what, peak)
        assert "Traceback" not in proc.stderr, (what, proc.stderr)
        if what in ("buffer_size", "n_envs"):  # loads for inference, runs in its saved env
            assert code == 0, (what, proc.stderr)
        else:  # refused: one line naming the file
            assert code == 2 and path.name in proc.stderr, (what, proc.stderr)
