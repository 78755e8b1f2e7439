"""Which CUDA settings make checkpoint + resume equal one run (probe, not a test)."""
import sys, tempfile, pathlib, traceback
sys.path.insert(0, "tests")
import torch as th
import test_resume as tr
from agents import CheckpointEvery, GpuDQN

def run(kw):
    tmp = pathlib.Path(tempfile.mkdtemp())
    ref = tr.make_model(tr.make_env("cuda"), "cuda", **kw)
    ref.learn(400, callback=CheckpointEvery(200, tmp / "ck", keep=1))
    tr._scramble_process_generators()
    res = GpuDQN.load_checkpoint(tmp / "ck", env=tr.make_env("cuda"), device="cuda")
    res.learn(res.remaining_timesteps, reset_num_timesteps=False)
    try:
        tr._compare(ref, res, exact=False)
        return "EQUAL (tolerance)"
    except AssertionError as e:
        lines = str(e).splitlines()
        return f"{lines[0]} | " + " | ".join(l for l in lines[1:8])

for kw in ({}, {"captured_train": False}, {"train_precision": "fp32"}, {"captured_train": False, "train_precision": "fp32"}, {"curiosity": False}, {"fused_rollout": False}):
    try:
        print(kw, "->", run(kw), flush=True)
    except Exception:
        print(kw, "-> ERROR", traceback.format_exc()[-800:], flush=True)
