"""TorchRL: a DQN loss trained on batches from a ``Collector`` over the trading vector env.

``make_torchrl_env`` wraps ``TradingVectorEnv`` in TorchRL's ``GymWrapper`` in the autoreset
mode TorchRL wants (DISABLED: the collector resets ended envs itself).

    python examples/torchrl_dqn.py                       # NumPy backend
    python examples/torchrl_dqn.py --device cuda --num-envs 4096
"""

import argparse

import torch
from tensordict.nn import TensorDictSequential
from torchrl.collectors import Collector
from torchrl.data import LazyTensorStorage, ReplayBuffer
from torchrl.modules import MLP, EGreedyModule, QValueActor
from torchrl.objectives import DQNLoss, SoftUpdate

from gpu_trading_env.integrations.torchrl_env import make_torchrl_env

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cpu")
parser.add_argument("--num-envs", type=int, default=8)
parser.add_argument("--total-steps", type=int, default=40_000, help="env-steps over all envs")
parser.add_argument("--batch-size", type=int, default=128)
args = parser.parse_args()
torch.manual_seed(0)

env = make_torchrl_env(num_envs=args.num_envs, device=args.device, episode_length=200)
n_obs = env.observation_spec["observation"].shape[-1]
n_act = env.action_spec.space.n
actor = QValueActor(
    MLP(in_features=n_obs, out_features=n_act, num_cells=[128, 128], device=args.device),
    in_keys=["observation"],
    spec=env.action_spec,
)
explore = TensorDictSequential(
    actor,
    EGreedyModule(
        env.action_spec, eps_init=1.0, eps_end=0.05, annealing_num_steps=args.total_steps
    ),
)
loss = DQNLoss(actor, action_space=env.action_spec, delay_value=True)
loss.make_value_estimator(gamma=0.9)
target_updater = SoftUpdate(loss, eps=0.995)
optim = torch.optim.Adam(loss.parameters(), lr=5e-4)
buffer = ReplayBuffer(storage=LazyTensorStorage(100_000, device=args.device))

frames = args.num_envs * 50
collector = Collector(env, explore, frames_per_batch=frames, total_frames=args.total_steps)
for i, batch in enumerate(collector):
    buffer.extend(batch.reshape(-1))
    explore[1].step(batch.numel())
    for _ in range(8):
        sample = buffer.sample(args.batch_size)
        loss_value = loss(sample)["loss"]
        optim.zero_grad()
        loss_value.backward()
        optim.step()
        target_updater.step()
    reward, done = batch["next", "reward"], batch["next", "done"]
    print(
        f"batch {i}: mean reward {reward.mean():+.5f}, {int(done.sum())} episodes ended, "
        f"loss {loss_value.item():.5f}"
    )
collector.shutdown()
