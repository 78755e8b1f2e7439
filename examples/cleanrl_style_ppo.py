"""A CleanRL-style PPO in one file, straight on the vector env's torch tensors.

The whole algorithm is below (CleanRL's ``ppo.py`` layout: rollout, GAE, clipped updates).
The env resets in the same step (``autoreset_mode="same_step"``) so each stored step is a
real transition and ``done`` masks the bootstrap, as in CleanRL; the outputs it returns are
the caller's (no later step overwrites them), so the rollout stores them without copying.

    python examples/cleanrl_style_ppo.py
    python examples/cleanrl_style_ppo.py --device cuda --num-envs 4096 --total-steps 50000000
"""

import argparse
import time

import torch
from torch import nn
from torch.distributions import Categorical

from gpu_trading_env import TradingVectorEnv

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cpu")
parser.add_argument("--num-envs", type=int, default=16)
parser.add_argument("--num-steps", type=int, default=128, help="steps per rollout")
parser.add_argument("--total-steps", type=int, default=200_000, help="env-steps over all envs")
parser.add_argument("--gamma", type=float, default=0.9)
parser.add_argument("--gae-lambda", type=float, default=0.95)
parser.add_argument("--epochs", type=int, default=4)
parser.add_argument("--minibatches", type=int, default=4)
parser.add_argument("--clip", type=float, default=0.2)
parser.add_argument("--lr", type=float, default=3e-4)
parser.add_argument("--seed", type=int, default=0)
args = parser.parse_args()
torch.manual_seed(args.seed)
dev = torch.device(args.device)

env = TradingVectorEnv(
    args.num_envs, args.device, array_type="torch", episode_length=200, autoreset_mode="same_step"
)
n, t_len = args.num_envs, args.num_steps
n_obs, n_act = env.single_observation_space.shape[0], int(env.single_action_space.n)


def mlp(out: int, scale: float) -> nn.Module:
    last = nn.Linear(64, out)
    nn.init.orthogonal_(last.weight, scale)
    return nn.Sequential(nn.Linear(n_obs, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), last)


actor, critic = mlp(n_act, 0.01).to(dev), mlp(1, 1.0).to(dev)
opt = torch.optim.Adam([*actor.parameters(), *critic.parameters()], lr=args.lr, eps=1e-5)

obs_buf = torch.zeros(t_len, n, n_obs, device=dev)
act_buf = torch.zeros(t_len, n, dtype=torch.int64, device=dev)
logp_buf, rew_buf, done_buf, val_buf = (torch.zeros(t_len, n, device=dev) for _ in range(4))

obs, _ = env.reset(seed=args.seed)
obs, done = obs.to(dev), torch.zeros(n, device=dev)
steps, start, returns = 0, time.time(), []
while steps < args.total_steps:
    for t in range(t_len):
        obs_buf[t], done_buf[t] = obs, done
        with torch.no_grad():
            dist = Categorical(logits=actor(obs))
            action = dist.sample()
            val_buf[t] = critic(obs).squeeze(1)
        act_buf[t], logp_buf[t] = action, dist.log_prob(action)
        obs, reward, terminated, truncated, info = env.step(action)
        obs, rew_buf[t] = obs.to(dev), reward.to(dev)
        done = (terminated | truncated).to(dev).float()
        ended = info["_episode_return"]
        if ended.any():
            returns.extend(info["episode_return"][ended].tolist())
    steps += t_len * n

    with torch.no_grad():  # generalised advantage estimation
        next_value = critic(obs).squeeze(1)
        adv = torch.zeros_like(rew_buf)
        last = torch.zeros(n, device=dev)
        for t in reversed(range(t_len)):
            nonterminal = 1.0 - (done if t == t_len - 1 else done_buf[t + 1])
            value_next = next_value if t == t_len - 1 else val_buf[t + 1]
            delta = rew_buf[t] + args.gamma * value_next * nonterminal - val_buf[t]
            last = delta + args.gamma * args.gae_lambda * nonterminal * last
            adv[t] = last
        ret = adv + val_buf

    b_obs, b_act, b_logp = obs_buf.reshape(-1, n_obs), act_buf.reshape(-1), logp_buf.reshape(-1)
    b_adv, b_ret = adv.reshape(-1), ret.reshape(-1)
    size = b_obs.shape[0] // args.minibatches
    for _ in range(args.epochs):
        for mb in torch.randperm(b_obs.shape[0], device=dev).split(size):
            dist = Categorical(logits=actor(b_obs[mb]))
            ratio = (dist.log_prob(b_act[mb]) - b_logp[mb]).exp()
            a = (b_adv[mb] - b_adv[mb].mean()) / (b_adv[mb].std() + 1e-8)
            pg = torch.max(-a * ratio, -a * ratio.clamp(1 - args.clip, 1 + args.clip)).mean()
            v_loss = 0.5 * (critic(b_obs[mb]).squeeze(1) - b_ret[mb]).pow(2).mean()
            loss = pg + 0.5 * v_loss - 0.01 * dist.entropy().mean()
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_([*actor.parameters(), *critic.parameters()], 0.5)
            opt.step()
    if returns:
        recent = returns[-100:]
        print(
            f"steps={steps:>9d}  ep_return_mean={sum(recent) / len(recent):+.4f}  "
            f"sps={steps / (time.time() - start):,.0f}"
        )
