"""Soak: a long run of the env with random actions, then the PER tree under many updates.

Defaults are the release soak on a GPU: 1e11 env-steps through the CUDA env at 2^20 envs
(split over the SAME_STEP, NEXT_STEP and DISABLED autoreset modes, curiosity on, random
actions), then 1e9 priority updates of a 2^20-leaf tree. Checks, on the device where possible
and read at every check interval:

- env: no NaN or inf in observations, rewards or reward components; counters sane (every
  ended episode has a length in [1, episode_length], step counters within the episode
  length, bars inside the instrument's range, episodes ended > 0 in every mode);
- tree: no NaN; the root equals the float64 pairwise sum of the leaves (what the tree stores,
  bit for bit) and agrees with an exactly rounded sum (math.fsum) to 1e-12; the min root is
  the smallest non-zero leaf.

Smaller sizes by flags, e.g. the CPU smoke run of the test suite::

    python3 -m benchmarks.soak --device cpu --num-envs 64 --env-steps 20000 \\
        --tree-capacity 1000 --tree-updates 50000 --tree-batch 256

Prints the figures (env-steps/s, episodes, updates/s) and writes them as JSON with --out.
Exits 1 on any failed check.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Any

import numpy as np

from agents.replay.segment_tree import make_tree
from gpu_trading_env import MarketData, TradingVectorEnv
from gpu_trading_env.core.config import EnvConfig

# The source design's env (45 actions, barriers, penalties), that of docs/PERFORMANCE.md.
SOURCE = EnvConfig.source_design()

MODES = ("same_step", "next_step", "disabled")


class SoakFailure(AssertionError):
    pass


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise SoakFailure(what)


def soak_env(args: argparse.Namespace, mode: str) -> dict[str, Any]:
    """Random actions through one autoreset mode; returns its figures."""
    cuda = args.device.startswith("cuda")
    data = MarketData.synthetic(kind="regime", n_bars=args.bars, n_instruments=3, seed=7)
    env = TradingVectorEnv(
        num_envs=args.num_envs,
        device=args.device,
        data=data,
        episode_length=args.episode_length,
        autoreset_mode=mode,
        copy_outputs=args.owned,
        config=SOURCE,
    )
    n = env.num_envs
    d, h = env.config.curiosity_state_dims, env.config.curiosity_hidden
    rng = np.random.default_rng(args.seed)
    env.set_curiosity_weights(
        *(rng.normal(0, 0.2, s).astype(np.float32) for s in ((h, d + 3), (h,), (d, h), (d,)))
    )
    env.reset(seed=args.seed)
    modes = [part for part in args.parts if part in MODES]
    steps = max(1, int(args.env_steps) // len(modes) // n)
    if cuda:
        import torch as th

        dev = th.device(env.device)
        gen = th.Generator(device=dev)
        gen.manual_seed(args.seed)
        bad = th.zeros((), dtype=th.int64, device=dev)
        episodes = th.zeros((), dtype=th.int64, device=dev)
        bad_lengths = th.zeros((), dtype=th.int64, device=dev)

        def draw() -> Any:
            return th.randint(0, env.single_action_space.n, (n,), device=dev, generator=gen)
    else:
        bad = episodes = bad_lengths = 0

        def draw() -> Any:
            return rng.integers(0, env.single_action_space.n, n)

    lib = th if cuda else np
    start = time.perf_counter()
    for t in range(steps):
        obs, reward, term, trunc, info = env.step(draw())
        # A NaN or inf anywhere makes the array's sum non-finite: one reduction per array and
        # no array-sized temporaries (a per-element isfinite cost more than the step itself).
        f64 = lib.float64
        total = (
            obs.sum(dtype=f64) + reward.sum(dtype=f64) + info["reward_components"].sum(dtype=f64)
        )
        bad += ~lib.isfinite(total)
        ended = info["_episode_length"]
        length = info["episode_length"]
        episodes += ended.sum()
        bad_lengths += (ended & ((length < 1) | (length > args.episode_length))).sum()
        if mode == "disabled":
            done = term | trunc
            if bool(done.any()):
                env.reset(options={"reset_mask": done})
        if (t + 1) % args.check_every == 0 or t + 1 == steps:  # one host read per interval
            s = env.backend.state
            host = (lambda x: x.get()) if cuda else np.asarray
            _check(int(bad) == 0, f"{mode}: {int(bad)} non-finite values by step {t + 1}")
            _check(
                int(bad_lengths) == 0, f"{mode}: {int(bad_lengths)} episode lengths out of range"
            )
            steps_in = host(s.step_in_episode)
            _check(
                bool(((steps_in >= 0) & (steps_in <= args.episode_length)).all()),
                f"{mode}: step counter outside [0, episode_length]",
            )
            bar, lo, hi = host(s.bar), host(s.lo), host(s.hi)
            _check(bool(((bar >= lo) & (bar < hi)).all()), f"{mode}: bar outside its instrument")
            cash, pos = host(s.cash), host(s.position)
            _check(bool(np.isfinite(cash).all() and np.isfinite(pos).all()), f"{mode}: money")
            if args.verbose:
                done_steps = (t + 1) * n
                rate = done_steps / (time.perf_counter() - start)
                print(f"  {mode}: {done_steps:.3e} env-steps checked ({rate:.3e}/s)", flush=True)
    if cuda:
        th.cuda.synchronize()
    seconds = time.perf_counter() - start
    n_episodes = int(episodes)
    _check(n_episodes > 0, f"{mode}: no episode ended in {steps} steps")
    return {
        "mode": mode,
        "env_steps": steps * n,
        "seconds": seconds,
        "env_steps_per_s": steps * n / seconds,
        "episodes": n_episodes,
    }


def pairwise_root(leaves: np.ndarray, pow2: int) -> float:
    x = np.zeros(pow2, dtype=np.float64)
    x[: leaves.size] = leaves
    while x.size > 1:
        x = x[0::2] + x[1::2]
    return float(x[0])


def soak_tree(args: argparse.Namespace) -> dict[str, Any]:
    cuda = args.device.startswith("cuda")
    index = None
    if cuda:
        import torch as th

        dev = th.device(args.device)
        index = dev.index if dev.index is not None else th.cuda.current_device()
    tree = make_tree("cuda" if cuda else "numpy", args.tree_capacity, seed=args.seed, device=index)
    tree.fill_range(0, args.tree_capacity)
    batch = int(args.tree_batch)
    rounds = max(1, int(args.tree_updates) // batch)
    rng = np.random.default_rng(args.seed + 1)
    if cuda:
        gen = th.Generator(device=dev)
        gen.manual_seed(args.seed)
    start = time.perf_counter()
    for r in range(rounds):
        if cuda:
            idx = th.randint(0, args.tree_capacity, (batch,), device=dev, generator=gen)
            val = th.empty(batch, device=dev, dtype=th.float32).exponential_(generator=gen)
        else:
            idx = rng.integers(0, args.tree_capacity, batch)
            val = rng.exponential(size=batch)
        tree.update(idx, val, alpha=0.6, epsilon=1e-6)
        if (r + 1) % args.sample_every == 0:
            tree.sample(batch, beta=0.4)
        if (r + 1) % args.tree_check_every == 0 or r + 1 == rounds:
            check_tree(tree, r + 1)
    if cuda:
        th.cuda.synchronize()
    seconds = time.perf_counter() - start
    return {
        "updates": rounds * batch,
        "batch": batch,
        "capacity": args.tree_capacity,
        "seconds": seconds,
        "updates_per_s": rounds * batch / seconds,
        "root": tree.total(),
    }


def check_tree(tree: Any, rounds: int) -> None:
    s, m = tree.to_numpy()
    _check(not np.isnan(s).any() and not np.isnan(m).any(), f"tree: NaN after {rounds} updates")
    leaves = np.asarray(s[tree.pow2 : tree.pow2 + tree.capacity])
    root = float(s[1])
    _check(root == pairwise_root(leaves, tree.pow2), f"tree: root {root!r} != pairwise leaf sum")
    exact = math.fsum(leaves.tolist())
    _check(abs(root - exact) <= 1e-12 * exact, f"tree: root {root!r} vs exact sum {exact!r}")
    nonzero = leaves[leaves > 0]
    _check(float(m[1]) == float(nonzero.min()), "tree: min root is not the smallest leaf")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (NumPy backend)")
    p.add_argument("--num-envs", type=int, default=2**20)
    p.add_argument(
        "--parts",
        nargs="+",
        choices=[*MODES, "tree"],
        default=[*MODES, "tree"],
        help="what to soak, in this order (default: the three autoreset modes, then the tree)",
    )
    p.add_argument(
        "--env-steps", type=float, default=1e11, help="total, over the autoreset modes run"
    )
    p.add_argument("--episode-length", type=int, default=500)
    p.add_argument("--bars", type=int, default=20_000, help="bars per instrument")
    p.add_argument("--check-every", type=int, default=1000, help="vector steps between checks")
    p.add_argument("--tree-capacity", type=int, default=2**20)
    p.add_argument("--tree-updates", type=float, default=1e9)
    p.add_argument("--tree-batch", type=int, default=4096)
    p.add_argument("--tree-check-every", type=int, default=20_000, help="updates between checks")
    p.add_argument("--sample-every", type=int, default=4, help="updates between sample calls")
    p.add_argument(
        "--owned",
        action="store_true",
        help="owned outputs (a copy per step); default: zero-copy, as the fused rollout steps",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--verbose", action="store_true", help="a progress line at every check")
    p.add_argument("--out", default=None, help="write the figures here as JSON")
    args = p.parse_args(argv)
    figures: dict[str, Any] = {"args": vars(args), "env": [], "tree": None}
    try:
        for part in args.parts:
            if part == "tree":
                f = figures["tree"] = soak_tree(args)
                print(
                    f"tree: {f['updates']:.3e} updates (batch {f['batch']}, capacity "
                    f"{f['capacity']}) in {f['seconds']:.1f} s ({f['updates_per_s']:.3e}/s), "
                    f"root {f['root']:.6g} = pairwise sum of leaves, all checks passed",
                    flush=True,
                )
                continue
            f = soak_env(args, part)
            figures["env"].append(f)
            print(
                f"env {part:9s}: {f['env_steps']:.3e} env-steps in {f['seconds']:.1f} s "
                f"({f['env_steps_per_s']:.3e}/s), {f['episodes']} episodes, all checks passed",
                flush=True,
            )
        figures["passed"] = True
    except SoakFailure as err:
        figures["passed"] = False
        figures["failure"] = str(err)
        print(f"SOAK FAILED: {err}", file=sys.stderr, flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(figures, fh, indent=2)
    return 0 if figures["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
