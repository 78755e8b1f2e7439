"""Two NCCL ranks of ``GpuDQN`` through each path in turn, each pair with a deadline: which one
finishes, which one hangs (a 2-GPU host)::

    python3 -m experiments.distributed_probe [allreduce sb3loop fused_eager nofused_captured full]

Per variant and rank, ``$OUT/probe_<variant>_r<rank>.log`` has timestamped progress lines and
``.stacks`` the Python stacks of every thread a few seconds before the deadline (faulthandler),
empty when the rank finished. Variants: ``allreduce`` (NCCL alone, eager and in a CUDA graph),
``sb3loop`` (SB3's loop, eager train step), ``fused_eager`` (fused rollout, eager train step),
``nofused_captured`` (SB3's loop, captured train step), ``captured_nocompile``, ``full``.
"""

import faulthandler
import multiprocessing as mp
import os
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from gpu_trading_env.core.config import EnvConfig

# The source design's env (45 actions, barriers, penalties).
SOURCE = EnvConfig.source_design()

OUT = Path(os.environ.get("OUT", "."))


def log(rank, variant, msg):
    with open(OUT / f"probe_{variant}_r{rank}.log", "a") as f:
        f.write(f"{time.strftime('%H:%M:%S')} {msg}\n")


def worker(rank, variant, init, deadline):
    fh = open(OUT / f"probe_{variant}_r{rank}.stacks", "w")
    faulthandler.dump_traceback_later(deadline - 3, exit=False, file=fh)
    import torch as th
    import torch.distributed as dist

    th.cuda.set_device(rank)
    dist.init_process_group(
        "nccl", init_method=init, rank=rank, world_size=2, timeout=timedelta(seconds=deadline * 2)
    )
    log(rank, variant, "init done")
    dev = f"cuda:{rank}"
    if variant == "allreduce":
        t = th.ones(1000, device=dev)
        for _ in range(10):
            dist.all_reduce(t)
        log(rank, variant, f"allreduce ok {float(t[0])}")
        g = th.cuda.CUDAGraph()
        s = th.cuda.Stream()
        s.wait_stream(th.cuda.current_stream())
        with th.cuda.stream(s):
            dist.all_reduce(t)
        th.cuda.current_stream().wait_stream(s)
        with th.cuda.graph(g):
            dist.all_reduce(t)
        for _ in range(10):
            g.replay()
        th.cuda.synchronize()
        log(rank, variant, f"graph allreduce ok {float(t[0])}")
        del g  # before the destroy (pytorch/pytorch#115388)
    else:
        import gymnasium as gym
        from stable_baselines3.common.callbacks import BaseCallback

        import gpu_trading_env  # noqa: F401
        from agents import GpuDQN

        kw = dict(fused_rollout=True, captured_train=True, compile_train=True)
        if variant == "sb3loop":
            kw.update(fused_rollout=False, captured_train=False)
        elif variant == "fused_eager":
            kw.update(captured_train=False)
        elif variant == "captured_nocompile":
            kw.update(compile_train=False)
        elif variant == "nofused_captured":
            kw.update(fused_rollout=False)
        env = gym.make_vec(
            "GpuTrading-v0", num_envs=512, device=dev, episode_length=100, config=SOURCE
        )
        model = GpuDQN(
            "DuelingPolicy",
            env,
            learning_starts=5_120,
            train_freq=1,
            batch_size=512,
            buffer_size=200_000,
            target_update_interval=51_200,
            seed=0,
            device=dev,
            distributed=True,
            **kw,
        )
        log(rank, variant, "model built")

        class Cb(BaseCallback):
            def _on_step(self):
                n = self.model.num_timesteps // 1024
                if n % 10 == 0:
                    log(rank, variant, f"step {n} updates {self.model._n_updates}")
                return True

        model.learn(120 * 512 * 2, callback=Cb())
        th.cuda.synchronize()
        s = model.captured_train_step
        log(
            rank,
            variant,
            f"learn done graph={getattr(s, 'graph', None) is not None} "
            f"rollout_graph={getattr(model.rollout, 'captured', False)} "
            f"spread={model.data_parallel.parameter_spread(model)}",
        )
        model.release_cuda_graphs()  # a graph holding an all-reduce hangs the destroy
    dist.barrier()
    log(rank, variant, "destroying the group")
    dist.destroy_process_group()
    log(rank, variant, "exit")


def main():
    variants = sys.argv[1:] or ["allreduce", "sb3loop", "fused_eager", "captured_nocompile", "full"]
    ctx = mp.get_context("spawn")
    for v in variants:
        deadline = {"allreduce": 30, "full": 100, "captured_nocompile": 70}.get(v, 60)
        with tempfile.TemporaryDirectory() as tmp:
            init = f"file://{tmp}/rdv"
            t0 = time.time()
            ps = [ctx.Process(target=worker, args=(r, v, init, deadline)) for r in range(2)]
            for p in ps:
                p.start()
            for p in ps:
                p.join(max(1, deadline - (time.time() - t0)))
            alive = [p.is_alive() for p in ps]
            for p in ps:
                if p.is_alive():
                    p.kill()
            print(
                f"{v}: {time.time() - t0:.1f} s exitcodes={[p.exitcode for p in ps]} hung={alive}",
                flush=True,
            )


if __name__ == "__main__":
    main()
