"""skrl: PPO with skrl's ``SequentialTrainer`` on the trading vector env.

skrl resets a vector env once and then relies on its autoreset; it stores each step's
``(obs, action, reward, terminated, truncated)``, so the env should reset in the same step
(``autoreset_mode="same_step"``): in NEXT_STEP mode skrl would store the reset step as a
transition from the last observation to the first one.

    python examples/skrl_ppo.py
    python examples/skrl_ppo.py --device cuda --num-envs 4096
"""

import argparse

import gymnasium as gym
from skrl.agents.torch.ppo import PPO, PPO_CFG
from skrl.envs.wrappers.torch import wrap_env
from skrl.memories.torch import RandomMemory
from skrl.trainers.torch import SequentialTrainer
from skrl.utils.model_instantiators.torch import categorical_model, deterministic_model

import gpu_trading_env  # noqa: F401  (registers GpuTrading-v0)

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cpu")
parser.add_argument("--num-envs", type=int, default=16)
parser.add_argument("--timesteps", type=int, default=2_000, help="vector steps")
parser.add_argument("--headless", action="store_true", help="skip the per-step render() call")
args = parser.parse_args()

envs = gym.make_vec(
    "GpuTrading-v0",
    num_envs=args.num_envs,
    device=args.device,
    episode_length=200,
    autoreset_mode="same_step",
)
env = wrap_env(envs, wrapper="gymnasium")
net = [{"name": "net", "input": "OBSERVATIONS", "layers": [128, 128], "activations": "relu"}]
spaces = {"observation_space": env.observation_space, "action_space": env.action_space}
models = {
    "policy": categorical_model(**spaces, device=env.device, network=net, output="ACTIONS"),
    "value": deterministic_model(**spaces, device=env.device, network=net, output="ONE"),
}
rollouts = 64
cfg = PPO_CFG(rollouts=rollouts, learning_epochs=4, mini_batches=4, discount_factor=0.9)
cfg.experiment.write_interval = 0
cfg.experiment.checkpoint_interval = 0
agent = PPO(
    models=models,
    memory=RandomMemory(memory_size=rollouts, num_envs=env.num_envs, device=env.device),
    **spaces,
    device=env.device,
    cfg=cfg,
)
trainer = SequentialTrainer(
    env=env, agents=agent, cfg={"timesteps": args.timesteps, "headless": args.headless}
)
trainer.train()
rewards = agent.memory.get_tensor_by_name("rewards")
print(f"mean reward of the last rollout: {rewards.mean().item():+.5f}")
