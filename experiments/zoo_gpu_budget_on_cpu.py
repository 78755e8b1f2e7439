"""Zoo runs with the GPU's training configuration, on the CPU.

``train`` on a GPU runs 6,000,000 env steps in 4,096 envs with batches of 4,096 and a buffer of
2,000,000: one gradient step per vector step is about 1,460 updates, where the CPU's defaults
(200,000 steps in 24 envs, batches of 128) make about 8,300. The NumPy backend is the CUDA
backend's executable spec, so the GPU's configuration can be run here, about a minute and a
half a run on 2 cores, to study what the number of updates does without a GPU. Figures are not
the H200's bit for bit (fp32 here, bf16 there; other random streams), only the same algorithm.

    python3 -m experiments.zoo_gpu_budget_on_cpu --gradient-steps 4 regime:0 phi_0.05:1
"""

from __future__ import annotations

import argparse

from agents.pipelines import train_config
from agents.pipelines.zoo import MARKETS_BY_NAME, run_one

GPU = train_config.TrainConfig.device_defaults("cuda")


class GpuBufferConfig(train_config.TrainConfig):
    """TrainConfig with the GPU's replay buffer on the CPU (the buffer size has no option)."""

    def __post_init__(self) -> None:
        if self.buffer_size is None:
            self.buffer_size = GPU["buffer_size"]
        super().__post_init__()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("runs", nargs="+", help="MARKET:SEED, e.g. regime:0")
    p.add_argument("--gradient-steps", type=int, default=1)
    args = p.parse_args()
    jobs = []
    for run in args.runs:
        market, _, seed = run.partition(":")
        if market not in MARKETS_BY_NAME or not seed.isdigit():
            p.error(
                f"{run!r} is invalid: allowed is MARKET:SEED with MARKET in {list(MARKETS_BY_NAME)}"
            )
        jobs.append((market, int(seed)))
    gpu = GPU
    # The zoo builds its runs' config from this module's TrainConfig, in this process.
    train_config.TrainConfig = GpuBufferConfig  # type: ignore[misc]
    extra = [
        "--num-envs", str(gpu["num_envs"]),
        "--batch-size", str(gpu["batch_size"]),
        "--timesteps", str(gpu["timesteps"]),
        "--gradient-steps", str(args.gradient_steps),
    ]  # fmt: skip
    for market, seed in jobs:
        r = run_one(market, seed, "cpu", extra_train_args=extra)
        ratio = r.sharpe_ratio
        network = "n/a" if r.network is None else f"{r.network.sharpe:+.2f}"
        print(
            f"{market} seed {seed}, gradient steps {args.gradient_steps}: kept {r.kept}, "
            f"agent / reference {'n/a' if ratio is None else f'{ratio:+.2f}'}, network alone "
            f"Sharpe {network} (reference {r.reference.sharpe:.2f}), "
            f"return {r.agent.total_return:+.1%}, {r.seconds:.0f} s",
            flush=True,
        )


if __name__ == "__main__":
    main()
