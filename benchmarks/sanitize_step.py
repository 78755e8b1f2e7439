"""The CUDA env kernels (step, reset, observe) for compute-sanitizer, with a parity check.

Every autoreset mode, curiosity on, both sizing modes, three instruments, a partial last block
(N not a multiple of 256). Every step's observations, rewards, flags and portfolio values are
compared with the NumPy reference (bit for bit); any difference raises, so the sanitizer gate
fails on a wrong result as well as on an error or a hazard::

    compute-sanitizer --tool memcheck python3 -m benchmarks.sanitize_step
    compute-sanitizer --tool racecheck python3 -m benchmarks.sanitize_step
"""

import numpy as np
import torch

from gpu_trading_env import MarketData, TradingVectorEnv
from gpu_trading_env.core.config import EnvConfig

# The source design's env (45 actions, barriers, penalties), that of docs/PERFORMANCE.md.
SOURCE = EnvConfig.source_design()

N = 1000
data = MarketData.synthetic(kind="gbm", n_bars=800, n_instruments=3, seed=1)
rng = np.random.default_rng(0)
for mode in ("same_step", "next_step", "disabled"):
    for sizing in ("units", "equity"):
        kw = dict(data=data, episode_length=20, autoreset_mode=mode, sizing=sizing, leverage=2.0)
        kw["config"] = SOURCE
        env = TradingVectorEnv(num_envs=N, device="cuda", **kw)
        ref = TradingVectorEnv(num_envs=N, device="cpu", **kw)
        d, h = env.config.curiosity_state_dims, env.config.curiosity_hidden
        weights = [
            rng.normal(0, 0.1, s).astype(np.float32) for s in ((h, d + 3), (h,), (d, h), (d,))
        ]
        for e in (env, ref):
            e.reset(seed=0)
            e.set_curiosity_weights(*weights)
        for t in range(40):
            a = torch.randint(0, 45, (N,), device="cuda")
            got = env.step(a)
            want = ref.step(a.cpu().numpy())
            names = ("obs", "reward", "terminated", "truncated")
            for name, x, y in zip(names, got[:4], want[:4], strict=True):
                if not np.array_equal(x.cpu().numpy(), y):
                    raise AssertionError(f"{mode}/{sizing} step {t}: {name} differs from NumPy")
            pv = got[4]["portfolio_value"].cpu().numpy()
            if not np.array_equal(pv, want[4]["portfolio_value"]):
                raise AssertionError(f"{mode}/{sizing} step {t}: portfolio_value differs")
        mask = np.ones(N, dtype=bool)
        if not np.array_equal(
            env.reset(options={"reset_mask": mask})[0].cpu().numpy(),
            ref.reset(options={"reset_mask": mask})[0],
        ):
            raise AssertionError(f"{mode}/{sizing}: reset observation differs")
        if not np.array_equal(env.observe().cpu().numpy(), ref.observe()):
            raise AssertionError(f"{mode}/{sizing}: observe differs")
torch.cuda.synchronize()
print("sanitize_step: done")
