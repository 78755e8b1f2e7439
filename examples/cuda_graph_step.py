"""Capture the env step in a CUDA graph and replay it (docs/PERFORMANCE.md, "Capturing the step
in a CUDA graph").

python examples/cuda_graph_step.py              # needs a CUDA GPU, CuPy and torch
"""

import sys

import gymnasium as gym
import torch

import gpu_trading_env  # noqa: F401  (registers GpuTrading-v0)

if not torch.cuda.is_available():
    sys.exit("this example needs a CUDA GPU")

env = gym.make_vec("GpuTrading-v0", num_envs=4096, device="cuda")
env.reset(seed=0)
actions = torch.zeros(4096, dtype=torch.int64, device="cuda")  # int64, contiguous: no copy
out = env.make_outputs()  # obs, reward, terminated, truncated, done, components, ...

side = torch.cuda.Stream()  # warm up on a side stream, as torch.cuda.graph asks
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    env.step_into(actions, out)
torch.cuda.current_stream().wait_stream(side)

graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    env.step_into(actions, out)

n = env.single_action_space.n  # 3 by default: short, flat, long
for _ in range(1000):
    actions.copy_(torch.randint(0, n, (4096,), device="cuda"))  # or your policy, captured too
    graph.replay()  # one env step: out["obs"], out["reward"], out["done"], ... updated
env.check_errors()  # invalid actions are recorded on the GPU; this raises them (one sync)
print("mean reward of the last step:", float(out["reward"].mean()))
env.close()
