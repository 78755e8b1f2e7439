"""Train GpuDQN data-parallel on the GPUs of one host (or several): one process per GPU.

torchrun --nproc_per_node=2 examples/train_multi_gpu.py              # 2 GPUs of this host
torchrun --nproc_per_node=2 examples/train_multi_gpu.py --device cpu # 2 CPU processes (gloo)
python examples/train_multi_gpu.py --device cpu --total-steps 4000   # one process, no torchrun

Several hosts (run on each; HOST0 is reachable from the others):
torchrun --nnodes=2 --nproc_per_node=8 --rdzv-backend=c10d --rdzv-endpoint=HOST0:29500 \
    --rdzv-id=job1 examples/train_multi_gpu.py

Each rank steps its own --num-envs envs (seeded seed + rank) into its own replay buffer and
samples its own --batch-size; gradients are averaged every step. --total-steps counts the
env-steps of all ranks together. Rank 0 logs and saves. See docs/SCALING.md.
"""

import argparse
import os

import gymnasium as gym
import torch
import torch.distributed as dist

import gpu_trading_env  # noqa: F401
from agents import GpuDQN
from gpu_runtime.device import cuda_available
from gpu_trading_env import MarketData

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--device", default="auto", help="auto, cuda or cpu")
parser.add_argument("--num-envs", type=int, default=None, help="envs per rank (4096 GPU, 16 CPU)")
parser.add_argument("--batch-size", type=int, default=None, help="batch per rank (4096 / 128)")
parser.add_argument("--total-steps", type=int, default=None, help="env-steps of all ranks")
parser.add_argument("--out", default="runs/multi_gpu", help="folder of model.zip (rank 0)")
args = parser.parse_args()

gpu = cuda_available() if args.device == "auto" else args.device == "cuda"
local_rank = int(os.environ.get("LOCAL_RANK", "0"))
if gpu:
    torch.cuda.set_device(local_rank)
    device = f"cuda:{local_rank}"
else:
    torch.set_num_threads(1)
    device = "cpu"
backend = "nccl" if gpu else "gloo"
if "RANK" in os.environ:  # torchrun sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    dist.init_process_group(backend)
else:  # plain python: a world of one process
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
rank, world = dist.get_rank(), dist.get_world_size()

train, test = MarketData.default().split(0.8)
num_envs = args.num_envs or (4096 if gpu else 16)
envs = gym.make_vec(
    "GpuTrading-v0",
    num_envs=num_envs,
    device=device,
    data=train,
    episode_length=200,
)
total = args.total_steps or (24_000_000 if gpu else 100_000)
model = GpuDQN(
    "DuelingPolicy",
    envs,
    learning_rate=3e-4,
    buffer_size=2_000_000 if gpu else 200_000,  # per rank
    batch_size=args.batch_size or (4096 if gpu else 128),
    learning_starts=max(10 * num_envs * world, 1000),  # env-steps of all ranks
    gamma=0.9,
    train_freq=1,
    gradient_steps=1,
    target_update_interval=max(total // 50, num_envs * world),
    exploration_fraction=0.3,
    exploration_final_eps=0.02,
    verbose=1 if rank == 0 else 0,
    seed=0,
    device=device,
    distributed=True,
)
model.learn(total_timesteps=total, log_interval=1000, progress_bar=True)  # bar on rank 0
model.save(os.path.join(args.out, "model.zip"))  # writes on rank 0 only
if rank == 0:
    print(f"{world} rank(s), {model.num_timesteps} env-steps; saved {args.out}/model.zip")
envs.close()
model.release_cuda_graphs()  # a live graph holding an all-reduce hangs the destroy
dist.destroy_process_group()
