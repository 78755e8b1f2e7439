"""A CleanRL-style DQN in one file, straight on the vector env's torch tensors.

No SB3: the whole algorithm is below, and on ``--device cuda`` observations, actions, rewards
and the replay storage never leave the GPU (the env returns torch CUDA tensors).

    python examples/cleanrl_style_dqn.py --device cpu --total-steps 200000
    python examples/cleanrl_style_dqn.py --device cuda --num-envs 4096 --total-steps 20000000
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

from gpu_trading_env import MarketData, TradingVectorEnv

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cpu")
parser.add_argument("--num-envs", type=int, default=16)
parser.add_argument("--total-steps", type=int, default=100_000)
parser.add_argument("--buffer-size", type=int, default=200_000)
parser.add_argument("--batch-size", type=int, default=256)
parser.add_argument("--gamma", type=float, default=0.9)
parser.add_argument("--lr", type=float, default=5e-4)
parser.add_argument(
    "--target-every", type=int, default=2_000, help="env steps between target syncs"
)
parser.add_argument("--seed", type=int, default=0)
args = parser.parse_args()
torch.manual_seed(args.seed)
dev = torch.device(args.device)

train, _ = MarketData.default().split(0.8)
env = TradingVectorEnv(
    args.num_envs,
    device=args.device,
    data=train,
    array_type="torch",
    episode_length=200,
    autoreset_mode="same_step",  # final_obs in the step that ends an episode
)
n_obs, n_act, n = env.single_observation_space.shape[0], env.single_action_space.n, args.num_envs


def q_network() -> nn.Module:
    return nn.Sequential(
        nn.Linear(n_obs, 256),
        nn.LeakyReLU(0.01),
        nn.Linear(256, 256),
        nn.LeakyReLU(0.01),
        nn.Linear(256, n_act),
    )


q, q_target = q_network().to(dev), q_network().to(dev)
q_target.load_state_dict(q.state_dict())
opt = torch.optim.Adam(q.parameters(), lr=args.lr)

# Replay storage: a ring of transitions, on the same device as the env.
cap = args.buffer_size
rb_obs = torch.zeros(cap, n_obs, device=dev)
rb_next = torch.zeros(cap, n_obs, device=dev)
rb_act = torch.zeros(cap, dtype=torch.int64, device=dev)
rb_rew = torch.zeros(cap, device=dev)
rb_term = torch.zeros(cap, device=dev)
ptr, size = 0, 0

obs, _ = env.reset(seed=args.seed)
obs = obs.to(dev)
steps, start, returns = 0, time.time(), []
while steps < args.total_steps:
    eps = max(0.02, 1.0 - steps / (0.3 * args.total_steps))
    with torch.no_grad():
        greedy = q(obs).argmax(1)
    explore = torch.rand(n, device=dev) < eps
    action = torch.where(explore, torch.randint(0, n_act, (n,), device=dev), greedy)
    next_obs, reward, terminated, truncated, info = env.step(action)
    next_obs, reward = next_obs.to(dev), reward.to(dev)
    done = (terminated | truncated).to(dev)
    real_next = next_obs  # the bootstrap target: the ended episodes' final observations
    if "final_obs" in info:  # present on steps where an episode ended (on a GPU: every step)
        real_next = torch.where(done[:, None], info["final_obs"].to(dev), next_obs)
    idx = (ptr + torch.arange(n, device=dev)) % cap
    rb_obs[idx], rb_next[idx], rb_act[idx] = obs, real_next, action
    rb_rew[idx], rb_term[idx] = reward, terminated.to(dev).float()  # truncation still bootstraps
    ptr, size = (ptr + n) % cap, min(size + n, cap)
    obs = next_obs  # the env's outputs are ours: no later step writes to them
    steps += n
    if done.any():
        returns.extend(info["episode_return"][info["_episode_return"]].tolist())

    if size >= 10 * args.batch_size:
        b = torch.randint(0, size, (args.batch_size,), device=dev)
        with torch.no_grad():
            a_next = q(rb_next[b]).argmax(1, keepdim=True)  # double DQN
            target = rb_rew[b] + args.gamma * (1 - rb_term[b]) * q_target(rb_next[b]).gather(
                1, a_next
            ).squeeze(1)
        loss = F.smooth_l1_loss(q(rb_obs[b]).gather(1, rb_act[b, None]).squeeze(1), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
    if steps // args.target_every != (steps - n) // args.target_every:
        q_target.load_state_dict(q.state_dict())
    if steps // 20_000 != (steps - n) // 20_000 and returns:
        recent = returns[-100:]
        print(
            f"steps={steps:>9d}  ep_return_mean={sum(recent) / len(recent):+.4f}  sps={steps / (time.time() - start):,.0f}"
        )
