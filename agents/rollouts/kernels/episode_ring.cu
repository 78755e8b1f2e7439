// The fused rollout's episode ring (agents/rollouts/fused.py, EpisodeRing.append) in one launch.
// The torch path is a dozen launches (a cumulative sum over the done mask, slots, two scatters
// whose unfinished envs all write one sink slot, the counter), a visible part of a vector step's
// graph at a few thousand envs (figures in docs/PERFORMANCE.md).
//
// One block. Thread t counts the finished envs of its chunk of consecutive envs, a block-wide
// exclusive scan gives each thread the number finished before its chunk, and the thread writes
// its envs' entries in env order: the k-th finished env of the step (from 1) goes to slot
// (last + k) mod size, as in the torch path. Then the last thread adds the step's count to last.
// When more than `size` envs finish in one step, only the newest `size` are written: two
// threads writing one slot would leave either value.

extern "C" __global__ void __launch_bounds__(RING_THREADS) ring_append(
    const bool* __restrict__ done, const float* __restrict__ returns,
    const int* __restrict__ lengths, long long n, long long size,
    float* __restrict__ ring_returns, int* __restrict__ ring_lengths, long long* __restrict__ last) {
    __shared__ long long warp_offset[32];
    __shared__ long long step_total;
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5, n_warps = blockDim.x >> 5;
    const long long chunk = (n + blockDim.x - 1) / blockDim.x;
    const long long lo = min(n, (long long)t * chunk), hi = min(n, lo + chunk);
    long long count = 0;
    for (long long i = lo; i < hi; ++i) count += done[i] ? 1 : 0;
    long long inclusive = count;  // scan within the warp
    for (int o = 1; o < 32; o <<= 1) {
        long long v = __shfl_up_sync(0xffffffffu, inclusive, o);
        if (lane >= o) inclusive += v;
    }
    if (lane == 31) warp_offset[warp] = inclusive;
    __syncthreads();
    if (warp == 0) {  // scan of the warp totals
        long long total = lane < n_warps ? warp_offset[lane] : 0;
        long long before = total;
        for (int o = 1; o < 32; o <<= 1) {
            long long v = __shfl_up_sync(0xffffffffu, before, o);
            if (lane >= o) before += v;
        }
        if (lane < n_warps) warp_offset[lane] = before - total;
        if (lane == n_warps - 1) step_total = before;
    }
    __syncthreads();
    const long long first_kept = last[0] + step_total - size;  // entries <= this are overwritten
    long long k = last[0] + warp_offset[warp] + inclusive - count;
    for (long long i = lo; i < hi; ++i) {
        if (done[i] && ++k > first_kept) {
            long long slot = k % size;
            ring_returns[slot] = returns[i];
            ring_lengths[slot] = lengths[i];
        }
    }
    __syncthreads();  // every thread has read last[0]
    if (t == blockDim.x - 1) last[0] = k;
}
