"""Prioritized replay: time of one ``sample`` + ``update`` round, side by side.

For batch B x capacity C x fill fraction f: the segment tree (``CudaSumMinTree`` on the GPU,
``NumpySumMinTree`` on the CPU), the seed's old path (torch: ``pow`` + ``cumsum`` over the
priority array + ``searchsorted``, scatter update) and, where ``import cpprb`` works (the
``bench`` extra), cpprb's ``PrioritizedReplayBuffer`` on the CPU. A round is: sample B indices
with IS weights, then write new priorities ``(|td| + eps)**alpha`` for those indices (random td).

Times are medians over ``--reps`` rounds after warm-up, wall clock per round. On the GPU,
"wall" ends when ``update`` returns: it waits for the kernel's verdict on the batch (NaN or
negative priorities raise), not for the tree writes, which finish in stream order; "done" also
waits for those writes (a stream sync); "gpu" is the CUDA-event time of the round, idle gaps
included. The process is pinned to one CPU core where the OS allows it, which takes most of
the scheduler noise out of host-bound rounds. Usage::

    python3 -m benchmarks.per_throughput --out per.json            # the full grid, on a GPU
    python3 -m benchmarks.per_throughput --quick --out per.json    # small grid, CPU only
    python3 -m benchmarks.per_throughput --cpu-vs-cpprb --out per_cpu.json   # CPU, interleaved

``--cpu-vs-cpprb``: the NumPy tree's round against cpprb's ``PrioritizedReplayBuffer`` at batch
256 and 4,096, capacity 2^20 (full), the two taking turns in blocks of rounds; the figure per
side is the median round, the ratio cpprb's time over the tree's (> 1: the tree is faster).
The tree runs numba's kernels where numba is installed (the ``cpu-replay`` extra), its NumPy
code otherwise; the first line says which. ``--tree-path numba numpy`` times both in the run::

    python3 -m benchmarks.per_throughput --cpu-vs-cpprb --tree-path numba numpy
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np

from agents.replay.segment_tree import CudaSumMinTree, NumpySumMinTree
from benchmarks.run_info import commit
from gpu_runtime.device import cupy_or_none

ALPHA, BETA, EPS = 0.6, 0.4, 1e-6


def _median_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


def _fill_tree(tree, n: int, rng: np.random.Generator, chunk: int = 1 << 16) -> None:
    for lo in range(0, n, chunk):
        hi = min(n, lo + chunk)
        tree.update(np.arange(lo, hi), rng.exponential(size=hi - lo), alpha=ALPHA, epsilon=EPS)


def _cuda_round(tree, batch, n, td):
    idx, _w = tree.sample(batch, beta=BETA, weights_dtype=np.float32)
    tree.update(idx, td, alpha=ALPHA, epsilon=EPS, n_valid=n, name="td_errors")


def cuda_walls_interleaved(trees, ns, batch, reps, rng, blocks=10):
    """Median wall time of a round on each tree (one per fill), in ``blocks`` turns.

    The fills take turns, so slow phases of the host hit each of them alike: the comparison
    across fill measures the tree, not the moment.
    """
    import torch

    cp = cupy_or_none()
    td = cp.asarray(rng.exponential(size=batch).astype(np.float32))
    walls = [[] for _ in trees]
    for _ in range(blocks):
        for tree, n, wall in zip(trees, ns, walls, strict=True):
            for _ in range(3):
                _cuda_round(tree, batch, n, td)
            torch.cuda.synchronize()
            for _ in range(max(1, reps // blocks)):
                t0 = time.perf_counter()
                _cuda_round(tree, batch, n, td)  # returns with the verdict on the batch
                wall.append(time.perf_counter() - t0)
                torch.cuda.synchronize()
    return [_median_us(w) for w in walls]


def bench_cuda_tree(tree, batch, n, reps, warmup, rng):
    """Round time to completion, CUDA-event time, and the queued (no sync) figures."""
    import torch

    cp = cupy_or_none()
    td = cp.asarray(rng.exponential(size=batch).astype(np.float32))

    def round_():
        _cuda_round(tree, batch, n, td)

    for _ in range(warmup):
        round_()
    torch.cuda.synchronize()
    done, gpu = [], []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(reps):
        t0 = time.perf_counter()
        start.record()
        round_()
        end.record()
        end.synchronize()  # the tree writes are done
        done.append(time.perf_counter() - t0)
        gpu.append(start.elapsed_time(end) * 1e-3)
    # Without the check: the rounds queue up, no sync until the end.
    t0 = time.perf_counter()
    for _ in range(reps):
        idx, _w = tree.sample(batch, beta=BETA, weights_dtype=np.float32)
        tree.update(idx, td, alpha=ALPHA, epsilon=EPS, n_valid=n, check=False)
    torch.cuda.synchronize()
    async_us = (time.perf_counter() - t0) / reps * 1e6
    # The two halves alone, queued without syncs (host launch cost or GPU time, whichever is more).
    idx, _w = tree.sample(batch, beta=BETA, weights_dtype=np.float32)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        tree.sample(batch, beta=BETA, weights_dtype=np.float32)
    torch.cuda.synchronize()
    sample_us = (time.perf_counter() - t0) / reps * 1e6
    t0 = time.perf_counter()
    for _ in range(reps):
        tree.update(idx, td, alpha=ALPHA, epsilon=EPS, n_valid=n, check=False)
    torch.cuda.synchronize()
    update_us = (time.perf_counter() - t0) / reps * 1e6
    # Sanity: the root still equals the sum of the leaves.
    leaves = tree.leaves()
    assert abs(tree.total() - leaves.sum()) <= 1e-9 * leaves.sum()
    return {
        "done_us": _median_us(done),
        "gpu_us": _median_us(gpu),
        "async_us": async_us,
        "sample_only_async_us": sample_us,
        "update_only_async_us": update_us,
    }


def bench_numpy_tree(batch, capacity, n, reps, warmup, rng):
    tree = NumpySumMinTree(capacity, seed=1)
    _fill_tree(tree, n, rng)
    td = rng.exponential(size=batch)
    times = []
    for r in range(warmup + reps):
        t0 = time.perf_counter()
        idx, _w = tree.sample(batch, beta=BETA, weights_dtype=np.float32)
        tree.update(idx, td, alpha=ALPHA, epsilon=EPS, n_valid=n, name="td_errors")
        if r >= warmup:
            times.append(time.perf_counter() - t0)
    return {"wall_us": _median_us(times)}


def bench_torch_cumsum(batch, capacity, n, reps, warmup, rng, device):
    """The seed's old path: pow + cumsum over the whole priority array + searchsorted."""
    import torch

    dev = torch.device(device)
    prio = torch.zeros(capacity, dtype=torch.float32, device=dev)
    prio[:n] = torch.as_tensor(rng.exponential(size=n).astype(np.float32) + EPS, device=dev)
    td = torch.as_tensor(rng.exponential(size=batch).astype(np.float32), device=dev)
    gen = torch.Generator(device=dev)
    gen.manual_seed(0)

    def round_():
        pa = prio.pow(ALPHA)
        cs = torch.cumsum(pa, 0)
        total = cs[-1]
        u = torch.rand(batch, device=dev, generator=gen) * total
        idx = torch.searchsorted(cs, u).clamp_(max=capacity - 1)
        pmin = pa[:n].min()
        _w = (pa[idx] / pmin).pow(-BETA)
        prio[idx] = td.abs() + EPS

    for _ in range(warmup):
        round_()
    times = []
    for _ in range(reps):
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        round_()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return {"wall_us": _median_us(times)}


def bench_cpprb(batch, capacity, n, reps, warmup, rng):
    import cpprb

    rb = cpprb.PrioritizedReplayBuffer(capacity, {"obs": {"shape": 1}}, alpha=ALPHA, eps=EPS)
    chunk = 1 << 16
    for lo in range(0, n, chunk):
        hi = min(n, lo + chunk)
        rb.add(obs=np.zeros((hi - lo, 1), np.float32), priorities=rng.exponential(size=hi - lo))
    td = rng.exponential(size=batch)
    times = []
    for r in range(warmup + reps):
        t0 = time.perf_counter()
        s = rb.sample(batch, beta=BETA)
        rb.update_priorities(s["indexes"], td)
        if r >= warmup:
            times.append(time.perf_counter() - t0)
    return {"wall_us": _median_us(times)}


# --tree-path: NumpySumMinTree's ``compiled`` argument (auto: numba's kernels where installed).
TREE_PATHS = {"auto": None, "numba": True, "numpy": False}


def cpu_vs_cpprb(batches, capacity, reps, blocks, rng, tree_paths=("auto",)) -> list[dict]:
    """Median round time of the NumPy tree (each of ``tree_paths``) and of cpprb, interleaved in
    ``blocks`` turns."""
    import cpprb

    trees = {}
    for path in tree_paths:
        tree = NumpySumMinTree(capacity, seed=1, compiled=TREE_PATHS[path])
        _fill_tree(tree, capacity, np.random.default_rng(1))
        trees["numba" if tree.compiled else "numpy"] = tree
    print(
        "NumPy tree path: "
        + ", ".join(
            "numba kernels (agents.replay.compiled_tree)" if k == "numba" else "NumPy code"
            for k in trees
        ),
        flush=True,
    )
    rb = cpprb.PrioritizedReplayBuffer(capacity, {"obs": {"shape": 1}}, alpha=ALPHA, eps=EPS)
    chunk = 1 << 16
    for lo in range(0, capacity, chunk):
        n = min(chunk, capacity - lo)
        rb.add(obs=np.zeros((n, 1), np.float32), priorities=rng.exponential(size=n))
    rows = []
    for batch in batches:
        td = rng.exponential(size=batch)

        def tree_round(tree, td=td, batch=batch):
            idx, _w = tree.sample(batch, beta=BETA, weights_dtype=np.float32)
            tree.update(idx, td, alpha=ALPHA, epsilon=EPS, n_valid=capacity, name="td_errors")

        def cpprb_round(_, td=td, batch=batch):
            s = rb.sample(batch, beta=BETA)
            rb.update_priorities(s["indexes"], td)

        sides = [(path, tree_round, tree) for path, tree in trees.items()]
        sides.append(("cpprb", cpprb_round, None))
        times = {name: [] for name, _, _ in sides}
        for b in range(blocks + 1):  # block 0 warms up
            for name, round_, arg in sides:
                for _ in range(reps):
                    t0 = time.perf_counter()
                    round_(arg)
                    if b:
                        times[name].append(time.perf_counter() - t0)
        cpprb_us = _median_us(times["cpprb"])
        for path in trees:
            tree_us = _median_us(times[path])
            rows.append(
                {
                    "batch": batch,
                    "capacity": capacity,
                    "tree_path": path,
                    "numpy_tree_us": tree_us,
                    "cpprb_us": cpprb_us,
                    "x_cpprb": cpprb_us / tree_us,
                }
            )
            print(
                f"batch {batch:>5} capacity {capacity}: numpy tree ({path}) {tree_us:8.1f} us, "
                f"cpprb {cpprb_us:8.1f} us, tree speed {cpprb_us / tree_us:5.2f}x cpprb",
                flush=True,
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small grid on the CPU (smoke test)")
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    ap.add_argument("--reps", type=int, default=None, help="timed rounds per cell")
    ap.add_argument("--no-numpy", action="store_true", help="skip the NumPy tree")
    ap.add_argument(
        "--cpu-vs-cpprb",
        action="store_true",
        help="only the NumPy tree against cpprb at batch 256 and 4096, capacity 2^20",
    )
    ap.add_argument("--blocks", type=int, default=10, help="turns of --cpu-vs-cpprb")
    ap.add_argument(
        "--tree-path",
        nargs="+",
        choices=sorted(TREE_PATHS),
        default=["auto"],
        help="NumPy tree code in --cpu-vs-cpprb: auto (numba's kernels where installed), "
        "numba, numpy; several take turns in the same run",
    )
    args = ap.parse_args(argv)
    if args.cpu_vs_cpprb:
        rng = np.random.default_rng(0)
        rows = cpu_vs_cpprb(
            [256, 4096], 2**20, args.reps or 20, args.blocks, rng, tuple(args.tree_path)
        )
        meta = {"commit": commit(), "python": platform.python_version(), "alpha": ALPHA}
        meta.update(beta=BETA, machine=platform.processor() or platform.machine())
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
        return 0

    pinned = None
    if hasattr(os, "sched_setaffinity"):
        pinned = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {pinned})
    cp = cupy_or_none()
    gpu = cp is not None and not args.quick
    if args.quick:
        batches, capacities, fills = [256, 4096], [2**10, 2**16], [0.001, 0.1, 1.0]
        reps, warmup = args.reps or 20, 3
    else:
        batches, capacities, fills = [256, 4096, 65536], [2**16, 2**20, 2**24], [0.001, 0.1, 1.0]
        reps, warmup = args.reps or 200, 20
    try:
        import cpprb  # noqa: F401

        have_cpprb, cpprb_note = True, "cpprb present"
    except Exception as exc:  # the `bench` extra is optional
        have_cpprb, cpprb_note = False, f"cpprb skipped ({type(exc).__name__}: {exc})"
    print(cpprb_note)
    meta = {
        "commit": commit(),
        "python": platform.python_version(),
        "machine": platform.processor() or platform.machine(),
        "gpu": None,
        "alpha": ALPHA,
        "beta": BETA,
        "reps": reps,
        "cpprb": cpprb_note,
        "pinned_cpu": pinned,
        "numpy_tree_path": "numba" if NumpySumMinTree(1).compiled else "numpy",
    }
    if gpu:
        import torch

        meta["gpu"] = torch.cuda.get_device_name()
        meta["cupy"] = cp.__version__
        meta["torch"] = torch.__version__
    rng = np.random.default_rng(0)
    rows = []
    header = (
        f"{'batch':>6} {'capacity':>9} {'fill':>6} {'stored':>9} | {'tree us':>9} {'done us':>9}"
        f" {'async us':>9}"
        f" {'gpu us':>8} | {'cumsum us':>9} | {'numpy us':>9} | {'cpprb us':>9} | {'x cpprb':>8}"
    )
    print(header)
    print("-" * len(header))
    for capacity in capacities:
        ns = [max(1, int(round(fill * capacity))) for fill in fills]
        trees = []
        if gpu:
            for n in ns:
                trees.append(CudaSumMinTree(capacity, seed=1))
                _fill_tree(trees[-1], n, rng)
        for batch in batches:
            walls = cuda_walls_interleaved(trees, ns, batch, reps, rng) if gpu else None
            for k, (fill, n) in enumerate(zip(fills, ns, strict=True)):
                row = {"batch": batch, "capacity": capacity, "fill": fill, "stored": n}
                if gpu:
                    row["cuda_tree"] = {
                        "wall_us": walls[k],
                        **bench_cuda_tree(trees[k], batch, n, reps, warmup, rng),
                    }
                    row["torch_cumsum_cuda"] = bench_torch_cumsum(
                        batch, capacity, n, reps, warmup, rng, "cuda"
                    )
                else:
                    row["torch_cumsum_cpu"] = bench_torch_cumsum(
                        batch, capacity, n, reps, warmup, rng, "cpu"
                    )
                small = capacity <= 2**20 and batch <= 4096
                if not args.no_numpy and (not gpu or small):
                    row["numpy_tree"] = bench_numpy_tree(
                        batch, capacity, n, max(5, reps // 10), 2, rng
                    )
                if have_cpprb:
                    row["cpprb"] = bench_cpprb(batch, capacity, n, max(10, reps // 5), 2, rng)
                rows.append(row)
                tree = row.get("cuda_tree", {})
                tree_us = tree.get("wall_us")
                base = row.get("torch_cumsum_cuda", row.get("torch_cumsum_cpu", {})).get("wall_us")
                np_us = row.get("numpy_tree", {}).get("wall_us")
                cpprb_us = row.get("cpprb", {}).get("wall_us")
                speedup = (cpprb_us / tree_us) if (cpprb_us and tree_us) else None
                if speedup is not None:
                    row["speedup_vs_cpprb"] = speedup

                def f(x, w=9):
                    return f"{x:{w}.1f}" if x is not None else f"{'-':>{w}}"

                print(
                    f"{batch:>6} {capacity:>9} {fill:>6.1%} {n:>9} | {f(tree_us)}"
                    f" {f(tree.get('done_us'))} {f(tree.get('async_us'))} {f(tree.get('gpu_us'), 8)} | {f(base)} |"
                    f" {f(np_us)} | {f(cpprb_us)} | {f(speedup, 8)}"
                    + (
                        f" | s {tree['sample_only_async_us']:.1f} u {tree['update_only_async_us']:.1f}"
                        if tree
                        else ""
                    ),
                    flush=True,
                )
        del trees
    # Flatness across fill: max/min of the tree time over the fills of each (batch, capacity).
    flat = {}
    key = "cuda_tree" if gpu else "numpy_tree"
    for capacity in capacities:
        for batch in batches:
            ts = [
                r[key]["wall_us"]
                for r in rows
                if r["capacity"] == capacity and r["batch"] == batch and key in r
            ]
            if ts:
                flat[f"{batch}x{capacity}"] = max(ts) / min(ts)
    print(f"{key} time max/min across fill per (batch x capacity):")
    print("  " + ", ".join(f"{k}: {v:.3f}" for k, v in flat.items()))
    result = {"meta": meta, "rows": rows, "flatness_max_over_min": flat}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
