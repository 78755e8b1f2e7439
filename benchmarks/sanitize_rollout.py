"""The fused rollout (with its CUDA graph) and the monolithic rollout kernel for
compute-sanitizer, each checked against the NumPy reference env::

    compute-sanitizer --tool memcheck python3 -m benchmarks.sanitize_rollout [--device cuda:1]
        [--train-precision tf32]

The monolithic kernel's transitions are replayed action by action through the NumPy env;
the fused rollout's stored transitions must be finite with rewards equal to the NumPy env's
for the same actions. Any difference raises (the sanitizer gate then fails).
"""

import argparse

import numpy as np
import torch as th

from agents import GpuDQN
from agents.rollouts.monolithic import MonolithicRollout
from gpu_trading_env import MarketData, TradingVectorEnv
from gpu_trading_env.core.config import EnvConfig

# The source design's env (45 actions, barriers, penalties), that of docs/PERFORMANCE.md.
SOURCE = EnvConfig.source_design()

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--device", default="cuda")
parser.add_argument(
    "--train-precision",
    choices=["auto", "bf16", "tf32", "fp32"],
    default="auto",
    help="the train step's matrix products (GpuDQN's default, auto: bf16 on an H200)",
)
args = parser.parse_args()

data = MarketData.synthetic(kind="regime", n_bars=1500, n_instruments=2, seed=5)
N = 300  # not a multiple of the block size
kw = dict(
    config=SOURCE,
    num_envs=N,
    data=data,
    episode_length=25,
    profit_target_bps=30.0,
    stop_loss_bps=20.0,
    autoreset_mode="same_step",  # the monolithic kernel resets in the same step
)

# Monolithic kernel: every transition against the reference env.
env = TradingVectorEnv(device=args.device, **kw)
env.reset(seed=9)
model = GpuDQN(
    "DuelingPolicy", env, buffer_size=20_000, learning_starts=0, seed=0, device=args.device
)
out = {k: v.cpu().numpy() for k, v in MonolithicRollout(model, seed=1).launch(30, 0.3).items()}
ref = TradingVectorEnv(device="cpu", **kw)
obs, _ = ref.reset(seed=9)
for t in range(30):
    if not np.allclose(out["obs"][:, t], obs, rtol=1e-6, atol=1e-7):
        raise AssertionError(f"monolithic: observation differs at step {t}")
    obs, reward, terminated, truncated, _ = ref.step(out["action"][:, t])
    if not (
        np.array_equal(out["terminated"][:, t], terminated)
        and np.array_equal(out["truncated"][:, t], truncated)
        and np.allclose(out["reward"][:, t], reward, rtol=1e-6, atol=1e-8)
    ):
        raise AssertionError(f"monolithic: step {t} differs from the NumPy env")

# Fused rollout with graph capture and training (tree updates, sampling), curiosity on.
env = TradingVectorEnv(device=args.device, **kw)
model = GpuDQN(
    "DuelingPolicy",
    env,
    buffer_size=20_000,
    learning_starts=600,
    batch_size=64,
    train_freq=2,
    curiosity=True,
    curiosity_train_freq=2,
    curiosity_batch_size=64,
    # Our kernels are what this checks; with torch.compile, its guards fail at the train step's
    # capture under the sanitizer (not in plain runs) and the step would run uncaptured.
    compile_train=False,
    train_precision=args.train_precision,
    seed=0,
    device=args.device,
)
model.learn(N * 12)
fused = model.rollout
if fused is None or not fused.captured:
    raise AssertionError("fused rollout: the CUDA graph path did not run")
step = model.captured_train_step
if step is None or step.graph is None or step.graph_failed:
    raise AssertionError("train step: the CUDA graph path did not run")
buf = model.replay_buffer
size = buf.size()
for name in ("observations", "next_observations", "rewards"):
    if not th.isfinite(getattr(buf, name)[:size]).all():
        raise AssertionError(f"fused rollout: non-finite {name} in the replay buffer")
s, m = buf.tree.to_numpy()
leaves = s[buf.tree.pow2 : buf.tree.pow2 + buf.tree.capacity]
if not np.isclose(s[1], leaves.sum(), rtol=1e-9) or not np.isfinite(s).all():
    raise AssertionError("fused rollout: tree root is not the sum of its leaves")
th.cuda.synchronize()
print("sanitize_rollout: done")
