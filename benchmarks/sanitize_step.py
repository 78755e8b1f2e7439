"""A few CUDA env steps for compute-sanitizer (memcheck, racecheck), every autoreset mode,
curiosity on, a partial last block (N not a multiple of 256)::

    compute-sanitizer --tool memcheck python benchmarks/sanitize_step.py
    compute-sanitizer --tool racecheck python benchmarks/sanitize_step.py
"""

import numpy as np
import torch

from gpu_trading_env import MarketData, TradingVectorEnv

data = MarketData.synthetic(kind="gbm", n_bars=800, n_instruments=2, seed=1)
rng = np.random.default_rng(0)
for mode in ("same_step", "next_step", "disabled"):
    env = TradingVectorEnv(
        num_envs=1000, device="cuda", data=data, episode_length=20, autoreset_mode=mode
    )
    env.reset(seed=0)
    d, h = env.config.curiosity_state_dims, env.config.curiosity_hidden
    env.set_curiosity_weights(
        *(rng.normal(0, 0.1, s).astype(np.float32) for s in ((h, d + 3), (h,), (d, h), (d,)))
    )
    for _ in range(40):
        env.step(torch.randint(0, 45, (1000,), device="cuda"))
    env.reset(options={"reset_mask": np.ones(1000, dtype=bool)})
    env.observe()
torch.cuda.synchronize()
print("sanitize_step: done")
