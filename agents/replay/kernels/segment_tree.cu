// Sum tree and min tree for prioritized replay (agents/replay/segment_tree.py, CudaSumMinTree).
//
// Layout: capacity C rounded up to a power of two P; two float64 arrays of 2P nodes each,
// node 1 is the root, node n has children 2n and 2n+1, leaf i is node P+i. `sum` holds sums
// (empty leaves 0), `mn` holds minima over the non-zero leaves (empty or zero leaves +inf).
// Only the stored levels are kept up to date: the leaves, every ST_GROUP-th level above them,
// and the root. A stored node equals the pairwise sum, in tree order, and the minimum of the
// 2^ST_GROUP (fewer below the root) stored nodes under it, which is exactly what a binary
// tree updated level by level holds there; the Python side rebuilds the levels in between
// for host views. Writing one node per group instead of 15 is what makes an update cheap: the
// levels in between live in other pages, and their stores cost more than the loads.
//
// An update of up to ST_SMEM_KEYS entries is one launch, seg_tree_update_*: every block
// validates the whole batch itself, so all blocks agree on the verdict without a second
// launch, then goes on as seg_tree_levels_* below. A larger batch is two launches:
// - seg_tree_check_* (many blocks, one entry per thread): validates the batch (on a bad entry
//   nothing is written and status gets its position), raises the running max, and notes
//   whether the indices are in non-decreasing order (what stratified sampling returns); the
//   last block publishes the result and sorts an unsorted batch (bitonic, keys
//   index << 32 | position) into `keys`.
// - seg_tree_levels_* (many blocks): the sorted entries are cut into chunks of blockDim
//   entries, one per block. The last entry of each run of equal indices writes the leaf (so
//   the last occurrence wins). Then, one stored level at a time, the last entry under each
//   touched node recomputes it from the 2^ST_GROUP nodes below it: one round of independent
//   loads per ST_GROUP levels, each node written by one thread only (no atomics on the tree).
//   A node whose entries cross a chunk boundary is left to the last block to finish
//   (threadfence + ticket), which recomputes those few nodes level by level.
// A range fill (new transitions get the running max) is the levels kernel alone.
// Work O(B log C) (+ O(B log^2 B) to sort an unsorted batch).
//
// seg_tree_sample_*: one thread per draw. Draw j takes u_j = (j + U_j) / B * total with U_j
// from Philox4x32-10 keyed by (seed, call counter, j, PHILOX_STREAM_PER_SAMPLE), descends from
// the root choosing a child with a non-zero sum, and returns the leaf index and its IS weight
// (leaf / min)^-beta. From each stored node it loads the 2^ST_GROUP stored nodes below it (one
// 128-byte line), rebuilds the binary levels in between by pairwise sums and takes their
// decisions in registers: the same decisions as a level-by-level walk of the binary tree,
// with ST_GROUP times fewer dependent trips to memory.
//
// Every float64 operation that decides a sampled index (+, -, /, * and comparisons) is written
// with explicit round-to-nearest intrinsics so no fused multiply-add changes a result: the NumPy
// tree (NumpySumMinTree) returns the same indices for the same seed and tree.
#include "philox.cuh"

// ST_SMEM_KEYS, ST_MAX_THREADS, ST_GROUP and ST_UPDATE_THREADS come from
// agents/replay/tree_kernels.py (tree_kernel_defines), prepended as #defines at compile time.
#define ST_KEY_PAD 0xFFFFFFFFFFFFFFFFull
#define ST_BIG 1.7976931348623157e308
#define ST_NONE 0x7FFFFFFFFFFFFFFFLL  // no bad position

// IS weight (leaf / min)^-beta, in log space when the ratio overflows (see _is_weights).
__device__ __forceinline__ double st_is_weight(double leaf, double minv, double beta) {
    const double ratio = leaf / minv;
    if (ratio <= ST_BIG) return pow(ratio, -beta);
    return exp(-beta * (log(leaf) - log(minv)));
}

__device__ __forceinline__ double st_inf() { return __longlong_as_double(0x7ff0000000000000LL); }
// Block-wide reductions; every thread of the block must call them, the result is broadcast.
__device__ double st_block_max(double v, double* red) {
    for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_down_sync(0xffffffffu, v, o));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        const int nw = (blockDim.x + 31) >> 5;
        v = lane < nw ? red[lane] : 0.0;
        for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_down_sync(0xffffffffu, v, o));
        if (lane == 0) red[0] = v;
    }
    __syncthreads();
    const double r = red[0];
    __syncthreads();
    return r;
}

__device__ long long st_block_min_ll(long long v, long long* red) {
    for (int o = 16; o > 0; o >>= 1) {
        const long long w = __shfl_down_sync(0xffffffffu, v, o);
        v = w < v ? w : v;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        const int nw = (blockDim.x + 31) >> 5;
        v = lane < nw ? red[lane] : 0x7FFFFFFFFFFFFFFFLL;
        for (int o = 16; o > 0; o >>= 1) {
            const long long w = __shfl_down_sync(0xffffffffu, v, o);
            v = w < v ? w : v;
        }
        if (lane == 0) red[0] = v;
    }
    __syncthreads();
    const long long r = red[0];
    __syncthreads();
    return r;
}

// Leaf value from an input priority: (x + eps)^alpha, or x itself when transform == 0.
__device__ __forceinline__ double st_leaf_value(double x, int transform, double alpha, double eps) {
    return transform ? pow(__dadd_rn(x, eps), alpha) : x;
}


// The entries of an update in non-decreasing leaf order: a sorted batch (idx), an unsorted
// batch sorted into keys by seg_tree_check, or the slots range_start, range_start + 1, ...
// (modulo capacity) of a range fill, listed in ascending order even when the range wraps.
struct StEntries {
    const long long* idx;
    const unsigned long long* keys;
    long long range_start;  // >= 0: range fill
    long long wrap;         // range fill: how many slots wrap around to 0, 1, ...
    int sorted_keys;        // batch: entries come from keys

    __device__ __forceinline__ long long leaf(long long k) const {
        if (range_start >= 0) return k < wrap ? k : range_start + (k - wrap);
        if (sorted_keys) return (long long)(keys[k] >> 32);
        return idx[k];
    }
    // Position of entry k in the caller's batch (where its value is).
    __device__ __forceinline__ long long position(long long k) const {
        return sorted_keys ? (long long)(keys[k] & 0xFFFFFFFFull) : k;
    }
};

// Pairwise sum of v[0, N) in tree order: by the invariant, the value of the node above them.
template <int N>
__device__ __forceinline__ double st_pairwise(const double* v) {
    if constexpr (N == 1) {
        return v[0];
    } else {
        return __dadd_rn(st_pairwise<N / 2>(v), st_pairwise<N / 2>(v + N / 2));
    }
}

// Recompute node a (D levels above the stored level below it) from its 2^D descendants
// (a << D) + t on that level, which must be final: one round of loads, one store per tree. The
// sum is the pairwise sum in tree order, so it equals what a binary tree updated level by
// level holds. Nodes written by this block are read through L1 (the barrier makes them
// visible to the block, and an L1-bypassing load would first wait for the stores to reach
// L2); nodes written by other blocks (FROM_L2, the finishing block) bypass L1, which is not
// coherent across blocks.
template <int D, bool FROM_L2>
__device__ __forceinline__ void st_recompute_d(double* __restrict__ sum, double* __restrict__ mn,
                                               long long a) {
    double s[1 << D], m[1 << D];
    const double2* ps = reinterpret_cast<const double2*>(sum + (a << D));  // 16-byte aligned
    const double2* pm = reinterpret_cast<const double2*>(mn + (a << D));
#pragma unroll
    for (int t = 0; t < (1 << D) / 2; ++t) {
        const double2 sv = FROM_L2 ? __ldcg(ps + t) : ps[t];
        const double2 mv = FROM_L2 ? __ldcg(pm + t) : pm[t];
        s[2 * t] = sv.x;
        s[2 * t + 1] = sv.y;
        m[2 * t] = mv.x;
        m[2 * t + 1] = mv.y;
    }
    double lowest = m[0];
#pragma unroll
    for (int t = 1; t < (1 << D); ++t) lowest = fmin(lowest, m[t]);
    sum[a] = st_pairwise<1 << D>(s);
    mn[a] = lowest;
}

template <bool FROM_L2>
__device__ __forceinline__ void st_recompute(double* __restrict__ sum, double* __restrict__ mn,
                                             long long a, int depth) {
    switch (depth) {
        case 4: st_recompute_d<4, FROM_L2>(sum, mn, a); break;
        case 3: st_recompute_d<3, FROM_L2>(sum, mn, a); break;
        case 2: st_recompute_d<2, FROM_L2>(sum, mn, a); break;
        default: st_recompute_d<1, FROM_L2>(sum, mn, a); break;
    }
}

// The verdict of update number seq for the host, in one 8-byte store to host-mapped memory:
// seq in the high word, 0 (accepted) or first bad position + 1 in the low word. It is written
// as soon as the batch is validated, before the tree is touched, so a host that only needs the
// verdict waits for the validation, not for the whole update.
__device__ __forceinline__ void st_publish_verdict(long long* status_host, unsigned int seq,
                                                   long long first_bad) {
    const unsigned long long low = first_bad == ST_NONE ? 0ull : (unsigned long long)first_bad + 1;
    *(volatile unsigned long long*)status_host = ((unsigned long long)seq << ST_VERDICT_SEQ_SHIFT) | low;
    __threadfence_system();
}

// Scratch words of the check kernel, reset by its last block for the next update: indices
// ST_SCRATCH_BAD / VMAX / UNSORTED / TICKET, generated from SCRATCH_INIT in tree_kernels.py.

// Entry k of a batch: false when it is refused (index outside [0, n_valid), input not finite
// and >= 0, or leaf value not finite); else its leaf value in v.
__device__ __forceinline__ bool st_entry_ok(long long i, double x, long long n_valid,
                                            int transform, double alpha, double eps, double& v) {
    if (i < 0 || i >= n_valid || !(x >= 0.0 && x <= ST_BIG)) return false;
    v = st_leaf_value(x, transform, alpha, eps);
    return v >= 0.0 && v <= ST_BIG;
}

// One block sorts the keys (index << 32 | position) of a batch into keys[0, n) (bitonic, padded
// to a power of two; keys must have room for it). Every thread of the block must call it.
__device__ void st_sort_keys(unsigned long long* keys, const long long* __restrict__ idx,
                             long long n) {
    const long long tid = threadIdx.x, nt = blockDim.x;
    long long np2 = 1;
    while (np2 < n) np2 <<= 1;
    for (long long j = tid; j < np2; j += nt) {
        keys[j] = j < n ? (((unsigned long long)idx[j] << 32) | (unsigned long long)j) : ST_KEY_PAD;
    }
    __syncthreads();
    for (long long size = 2; size <= np2; size <<= 1) {
        for (long long stride = size >> 1; stride > 0; stride >>= 1) {
            for (long long j = tid; j < np2; j += nt) {
                const long long partner = j ^ stride;
                if (partner > j) {  // each pair is handled by exactly one thread
                    const unsigned long long a = keys[j], b = keys[partner];
                    const bool ascending = (j & size) == 0;
                    if ((a > b) == ascending) {
                        keys[j] = b;
                        keys[partner] = a;
                    }
                }
            }
            __syncthreads();
        }
    }
}

// Validate a batch; one entry per thread, many blocks. Each block folds its bad positions,
// largest value and order into the scratch words; the last block to finish publishes the
// result: on a bad entry status[0] gets the first bad position (and the host its verdict, see
// st_publish_verdict) and nothing else changes; otherwise status gets -1, max_value rises to the largest
// leaf value of the batch, and flags[0] gets 1 when the indices are not in non-decreasing
// order, in which case that block also sorts the keys into keys[0, n) for seg_tree_levels.
template <typename T>
__device__ void st_check(const long long* __restrict__ idx, const T* __restrict__ in, long long n,
                         int transform, double alpha, double eps, long long n_valid,
                         double* __restrict__ max_value, long long* __restrict__ status,
                         long long* status_host, unsigned int seq, int* __restrict__ flags,
                         unsigned long long* __restrict__ gkeys, long long* __restrict__ scratch) {
    __shared__ unsigned long long skeys[ST_SMEM_KEYS];
    __shared__ double red_d[32];
    __shared__ long long red_l[32];
    __shared__ int is_last;
    const long long tid = threadIdx.x, k = (long long)blockIdx.x * blockDim.x + tid;

    long long bad = ST_NONE;
    int unsorted = 0;
    double vmax = 0.0;
    if (k < n) {
        const long long i = idx[k];
        double v;
        if (k + 1 < n && idx[k + 1] < i) unsorted = 1;
        if (st_entry_ok(i, (double)in[k], n_valid, transform, alpha, eps, v)) {
            vmax = v;
        } else {
            bad = k;
        }
    }
    const bool any_bad = __syncthreads_or(bad != ST_NONE);
    const bool any_unsorted = __syncthreads_or(unsorted);
    if (any_bad) bad = st_block_min_ll(bad, red_l);
    vmax = st_block_max(vmax, red_d);
    if (tid == 0) {
        unsigned long long* u = reinterpret_cast<unsigned long long*>(scratch);
        if (any_bad) atomicMin(u + ST_SCRATCH_BAD, (unsigned long long)bad);
        if (vmax > 0.0) atomicMax(u + ST_SCRATCH_VMAX, (unsigned long long)__double_as_longlong(vmax));
        if (any_unsorted) atomicOr(u + ST_SCRATCH_UNSORTED, 1ull);
        __threadfence();
        is_last = atomicAdd(u + ST_SCRATCH_TICKET, 1ull) == gridDim.x - 1;
    }
    __syncthreads();
    if (!is_last) return;  // block-uniform
    // Thread 0 alone reads the scratch words, publishes, resets them for the next update and
    // broadcasts the verdict through shared memory. Every thread reading them itself raced
    // with that reset: a warp scheduled after it (as compute-sanitizer's serialisation does)
    // read "no bad entry, sorted", skipped the sort, and left warp 0 to sort alone, a partial
    // sort that corrupted the tree (racecheck sees no hazard: the words are global memory).
    __shared__ long long s_first_bad;
    __shared__ int s_need_sort;
    if (tid == 0) {
        __threadfence();
        const long long first_bad = __ldcg(scratch + ST_SCRATCH_BAD);
        const int need_sort = first_bad == ST_NONE && __ldcg(scratch + ST_SCRATCH_UNSORTED) != 0;
        s_first_bad = first_bad;
        s_need_sort = need_sort;
        if (first_bad != ST_NONE) {
            status[0] = first_bad;  // the tree is not touched
            st_publish_verdict(status_host, seq, first_bad);
        } else {
            status[0] = -1;
            st_publish_verdict(status_host, seq, ST_NONE);
            max_value[0] = fmax(max_value[0], __longlong_as_double(__ldcg(scratch + ST_SCRATCH_VMAX)));
            flags[0] = need_sort;
        }
        scratch[ST_SCRATCH_BAD] = ST_NONE;
        scratch[ST_SCRATCH_VMAX] = 0;
        scratch[ST_SCRATCH_UNSORTED] = 0;
        scratch[ST_SCRATCH_TICKET] = 0;
    }
    __syncthreads();
    if (!s_need_sort) return;  // block-uniform
    unsigned long long* keys = n <= ST_SMEM_KEYS ? skeys : gkeys;
    st_sort_keys(keys, idx, n);
    if (keys == skeys) {
        for (long long j = tid; j < n; j += blockDim.x) gkeys[j] = skeys[j];
    }
}

// Write the entries into the tree. Block b owns entries [b * blockDim, (b + 1) * blockDim).
// It writes the leaves whose last occurrence it holds and, one stored level at a time, every
// touched node whose entries all lie in its chunk (the last entry under the node does it).
// Nodes whose entries cross a chunk boundary (and so all nodes above them) are left to the
// last block to finish, which recomputes them level by level, each by the last boundary
// inside its entries. Range fills write max_value[0] into every leaf.
template <typename T>
__device__ void st_apply(double* __restrict__ sum, double* __restrict__ mn, const StEntries& e,
                         const T* __restrict__ in, long long n, long long pow2, int levels,
                         int transform, double alpha, double eps, double* __restrict__ max_value,
                         int raise_max, unsigned int* __restrict__ ticket) {
    __shared__ int is_last;
    __shared__ double red_d[32];
    const long long chunk = blockDim.x;
    const long long c0 = (long long)blockIdx.x * chunk;
    const long long c1 = c0 + chunk < n ? c0 + chunk : n;  // chunk end (exclusive)
    const long long k = c0 + threadIdx.x;
    const long long ik = k < n ? e.leaf(k) : -1;
    const long long inext = k + 1 < n ? e.leaf(k + 1) : -1;
    const long long ifirst = e.leaf(c0), ilast = e.leaf(c1 - 1);
    const long long iprev = c0 > 0 ? e.leaf(c0 - 1) : -1;
    const long long iafter = c1 < n ? e.leaf(c1) : -1;

    double v = 0.0;
    if (k < n) {
        v = e.range_start >= 0 ? max_value[0]
                               : st_leaf_value((double)in[e.position(k)], transform, alpha, eps);
        if (inext != ik) {  // last occurrence of leaf ik
            sum[pow2 + ik] = v;
            mn[pow2 + ik] = v > 0.0 ? v : st_inf();
        }
    }
    if (raise_max) {  // the running max over every entry of a validated batch (values >= 0)
        v = st_block_max(v, red_d);
        if (threadIdx.x == 0 && v > max_value[0]) {
            atomicMax(reinterpret_cast<unsigned long long*>(max_value),
                      (unsigned long long)__double_as_longlong(v));
        }
    }
    __syncthreads();
    for (int bottom = 0; bottom < levels;) {
        const int depth = levels - bottom < ST_GROUP ? levels - bottom : ST_GROUP;
        const int top = bottom + depth;
        const long long afirst = (pow2 + ifirst) >> top, alast = (pow2 + ilast) >> top;
        const bool left_span = iprev >= 0 && ((pow2 + iprev) >> top) == afirst;
        const bool right_span = iafter >= 0 && ((pow2 + iafter) >> top) == alast;
        if (afirst == alast && (left_span || right_span)) break;  // block-uniform
        if (k < n) {
            const long long a = (pow2 + ik) >> top;
            const bool last = inext < 0 || ((pow2 + inext) >> top) != a;
            if (last && !(left_span && a == afirst)) st_recompute<false>(sum, mn, a, depth);
        }
        __syncthreads();
        bottom = top;
    }

    // The last block to get here finishes the nodes that cross chunk boundaries.
    __threadfence();  // every thread's stores are visible GPU-wide before the ticket is taken
    __syncthreads();
    if (threadIdx.x == 0) is_last = atomicAdd(ticket, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!is_last) return;
    __threadfence();
    const long long nb = (n + chunk - 1) / chunk - 1;  // boundaries t = 1..nb
    for (int bottom = 0; bottom < levels;) {
        const int depth = levels - bottom < ST_GROUP ? levels - bottom : ST_GROUP;
        const int top = bottom + depth;
        for (long long t = 1 + threadIdx.x; t <= nb; t += blockDim.x) {
            const long long a = (pow2 + e.leaf(t * chunk - 1)) >> top;
            const bool spans = ((pow2 + e.leaf(t * chunk)) >> top) == a;
            if (spans && (t == nb || ((pow2 + e.leaf((t + 1) * chunk)) >> top) != a)) {
                st_recompute<true>(sum, mn, a, depth);
            }
        }
        __syncthreads();
        bottom = top;
    }
    if (threadIdx.x == 0) *ticket = 0u;  // ready for the next launch on this stream
}

// Second launch of a large batch (after seg_tree_check), and range fills (range_start >= 0).
template <typename T>
__device__ void st_levels(double* __restrict__ sum, double* __restrict__ mn,
                          const long long* __restrict__ idx, const T* __restrict__ in, long long n,
                          long long capacity, long long pow2, int levels, int transform,
                          double alpha, double eps, long long range_start,
                          const long long* __restrict__ range_start_at,
                          double* __restrict__ max_value, const long long* __restrict__ status,
                          const int* __restrict__ flags, const unsigned long long* __restrict__ keys,
                          unsigned int* __restrict__ ticket) {
    // A range fill recorded in a CUDA graph reads its first slot from the device.
    if (range_start_at != nullptr) range_start = range_start_at[0];
    if (range_start < 0 && status[0] >= 0) return;  // rejected: no block does anything
    StEntries e;
    e.idx = idx;
    e.keys = keys;
    e.range_start = range_start;
    e.wrap = range_start >= 0 && range_start + n > capacity ? range_start + n - capacity : 0;
    e.sorted_keys = range_start < 0 && flags[0] != 0;
    st_apply<T>(sum, mn, e, in, n, pow2, levels, transform, alpha, eps, max_value, 0, ticket);
}

// A whole update of a batch of at most ST_SMEM_KEYS entries in one launch. Every block
// validates the whole batch itself (a microsecond or two of redundant work, cheaper than a
// second launch and the wait between the two), so all blocks reach the same verdict without
// talking to each other; block 0 publishes it (status, st_publish_verdict). The leaf values are
// computed by the block that owns each entry, which also raises max_value (atomicMax on the
// bits: values are >= 0). Only when the host cannot rule out an overflowing leaf value
// (may_overflow: alpha outside [0, 1], or a huge eps) does every block compute every value.
// An unsorted batch is sorted by every block into its own shared memory.
#define ST_VALIDATE_ILP 8
template <typename T>
__device__ void st_update_small(double* __restrict__ sum, double* __restrict__ mn,
                                const long long* __restrict__ idx, const T* __restrict__ in,
                                long long n, long long pow2, int levels, int transform,
                                double alpha, double eps, int may_overflow, long long n_valid,
                                double* __restrict__ max_value, long long* __restrict__ status,
                                long long* status_host, unsigned int seq,
                                unsigned int* __restrict__ ticket) {
    __shared__ unsigned long long skeys[ST_SMEM_KEYS];
    __shared__ long long red_l[32];
    const long long nt = blockDim.x;
    long long bad = ST_NONE;
    int unsorted = 0;
    for (long long base = threadIdx.x; base < n; base += ST_VALIDATE_ILP * nt) {
        long long i[ST_VALIDATE_ILP], inext[ST_VALIDATE_ILP];
        double x[ST_VALIDATE_ILP];
#pragma unroll
        for (int u = 0; u < ST_VALIDATE_ILP; ++u) {  // all loads first
            const long long k = base + u * nt;
            i[u] = k < n ? idx[k] : 0;
            inext[u] = k + 1 < n ? idx[k + 1] : ST_NONE;
            x[u] = k < n ? (double)in[k] : 0.0;
        }
#pragma unroll
        for (int u = 0; u < ST_VALIDATE_ILP; ++u) {
            const long long k = base + u * nt;
            if (k >= n) continue;
            if (inext[u] < i[u]) unsorted = 1;
            bool ok = i[u] >= 0 && i[u] < n_valid && x[u] >= 0.0 && x[u] <= ST_BIG;
            if (ok && may_overflow) {
                const double v = st_leaf_value(x[u], transform, alpha, eps);
                ok = v >= 0.0 && v <= ST_BIG;
            }
            if (!ok && k < bad) bad = k;
        }
    }
    const bool publish = blockIdx.x == 0 && threadIdx.x == 0;
    if (__syncthreads_or(bad != ST_NONE)) {
        bad = st_block_min_ll(bad, red_l);
        if (publish) {
            status[0] = bad;  // the tree is not touched
            st_publish_verdict(status_host, seq, bad);
        }
        return;  // block-uniform
    }
    const int need_sort = __syncthreads_or(unsorted);
    if (publish) {
        status[0] = -1;
        st_publish_verdict(status_host, seq, ST_NONE);
    }
    if (need_sort) st_sort_keys(skeys, idx, n);
    StEntries e;
    e.idx = idx;
    e.keys = skeys;
    e.range_start = -1;
    e.wrap = 0;
    e.sorted_keys = need_sort;
    st_apply<T>(sum, mn, e, in, n, pow2, levels, transform, alpha, eps, max_value, 1, ticket);
}

#define ST_KERNELS(SUFFIX, INPUT_T)                                                                 \
    extern "C" __global__ void __launch_bounds__(ST_MAX_THREADS) seg_tree_check_##SUFFIX(          \
        const long long* idx, const INPUT_T* in, long long n, int transform, double alpha,         \
        double eps, long long n_valid, double* max_value, long long* status,                       \
        long long* status_host, unsigned int seq, int* flags, unsigned long long* keys,            \
        long long* scratch) {                                                                       \
        st_check<INPUT_T>(idx, in, n, transform, alpha, eps, n_valid, max_value, status,           \
                          status_host, seq, flags, keys, scratch);                                 \
    }                                                                                               \
    extern "C" __global__ void __launch_bounds__(ST_MAX_THREADS) seg_tree_levels_##SUFFIX(         \
        double* sum, double* mn, const long long* idx, const INPUT_T* in, long long n,             \
        long long capacity, long long pow2, int levels, int transform, double alpha, double eps,   \
        long long range_start, const long long* range_start_at, double* max_value,                 \
        const long long* status, const int* flags, const unsigned long long* keys,                 \
        unsigned int* ticket) {                                                                     \
        st_levels<INPUT_T>(sum, mn, idx, in, n, capacity, pow2, levels, transform, alpha, eps,     \
                           range_start, range_start_at, max_value, status, flags, keys, ticket);   \
    }                                                                                               \
    extern "C" __global__ void __launch_bounds__(ST_UPDATE_THREADS) seg_tree_update_##SUFFIX(      \
        double* sum, double* mn, const long long* idx, const INPUT_T* in, long long n,             \
        long long pow2, int levels, int transform, double alpha, double eps, int may_overflow,     \
        long long n_valid, double* max_value, long long* status, long long* status_host,           \
        unsigned int seq, unsigned int* ticket) {                                                   \
        st_update_small<INPUT_T>(sum, mn, idx, in, n, pow2, levels, transform, alpha, eps,         \
                                 may_overflow, n_valid, max_value, status, status_host, seq,       \
                                 ticket);                                                          \
    }

ST_KERNELS(f32, float)
ST_KERNELS(f64, double)

// Take the binary decisions below a node whose N bottom nodes (N = 2^depth) are v[0, N): the
// children's sums are rebuilt from v exactly as the tree stores them; go left when the left
// sum is non-zero and u < left (or the right sum is zero), else subtract it and go right; keep
// the chosen half in v[0, N/2). c collects the choices, most significant first.
template <int N>
__device__ __forceinline__ void st_walk(double* v, double& u, long long& c) {
    if constexpr (N > 1) {
        const double left = st_pairwise<N / 2>(v), right = st_pairwise<N / 2>(v + N / 2);
        const bool go_left = left > 0.0 && (u < left || right == 0.0);
        if (!go_left) u = __dsub_rn(u, left);
        c = 2 * c + (go_left ? 0 : 1);
#pragma unroll
        for (int t = 0; t < N / 2; ++t) v[t] = go_left ? v[t] : v[t + N / 2];
        st_walk<N / 2>(v, u, c);
    }
}

// D levels of the descent from node in one memory trip: load the 2^D nodes D levels below it
// (one 128-byte line for D = 4), decide in registers; returns the node reached, its sum in leaf.
template <int D>
__device__ __forceinline__ long long st_descend(const double* __restrict__ sum, long long node,
                                                double& u, double& leaf) {
    double v[1 << D];
    const double2* p = reinterpret_cast<const double2*>(sum + (node << D));  // 16-byte aligned
#pragma unroll
    for (int t = 0; t < (1 << D) / 2; ++t) {
        const double2 q = p[t];
        v[2 * t] = q.x;
        v[2 * t + 1] = q.y;
    }
    long long c = 0;
    st_walk<1 << D>(v, u, c);
    leaf = v[0];
    return (node << D) + c;
}

// Stratified proportional sampling with IS weights. An empty tree (total 0) yields index -1 and
// weight 0 (the Python side never samples an empty buffer).
template <typename W>
__device__ void st_sample(const double* __restrict__ sum, const double* __restrict__ mn,
                          long long pow2, int levels, long long batch, unsigned int k0,
                          unsigned int k1, unsigned int c1, unsigned int c2, double beta,
                          long long* __restrict__ out_idx, W* __restrict__ out_w) {
    const long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= batch) return;
    const double total = sum[1];
    if (!(total > 0.0)) {
        out_idx[j] = -1;
        out_w[j] = (W)0.0;
        return;
    }
    const philox_out r = philox4x32_10((unsigned int)j, c1, c2, PHILOX_STREAM_PER_SAMPLE, k0, k1);
    const double uj = philox_uniform_double(r.x0, r.x1);
    double u = __dmul_rn(__ddiv_rn(__dadd_rn((double)j, uj), (double)batch), total);
    long long node = 1;
    double leaf = total;
    // Stored levels are multiples of ST_GROUP above the leaves (and the root): the first group
    // below the root takes the remainder.
    int depth = levels - ST_GROUP * ((levels - 1) / ST_GROUP);
    for (int level = 0; level < levels; depth = ST_GROUP) {
        switch (depth) {
            case 4: node = st_descend<4>(sum, node, u, leaf); break;
            case 3: node = st_descend<3>(sum, node, u, leaf); break;
            case 2: node = st_descend<2>(sum, node, u, leaf); break;
            default: node = st_descend<1>(sum, node, u, leaf); break;
        }
        level += depth;
    }
    out_idx[j] = node - pow2;
    out_w[j] = (W)st_is_weight(leaf, mn[1], beta);
}
extern "C" __global__ void seg_tree_sample_f32(const double* sum, const double* mn, long long pow2,
                                               int levels, long long batch, unsigned int k0,
                                               unsigned int k1, unsigned int c1, unsigned int c2,
                                               double beta, long long* out_idx, float* out_w) {
    st_sample<float>(sum, mn, pow2, levels, batch, k0, k1, c1, c2, beta, out_idx, out_w);
}

extern "C" __global__ void seg_tree_sample_f64(const double* sum, const double* mn, long long pow2,
                                               int levels, long long batch, unsigned int k0,
                                               unsigned int k1, unsigned int c1, unsigned int c2,
                                               double beta, long long* out_idx, double* out_w) {
    st_sample<double>(sum, mn, pow2, levels, batch, k0, k1, c1, c2, beta, out_idx, out_w);
}

// Sampling inside a captured CUDA graph, whose kernel arguments are fixed at capture: the call
// counter (Philox counter words 1-2, the host's sample_calls) and beta are read from device
// memory; the caller advances the counter after the launch, in stream order.
#define ST_SAMPLE_DEV(SUFFIX, W)                                                                   \
    extern "C" __global__ void seg_tree_sample_dev_##SUFFIX(                                      \
        const double* sum, const double* mn, long long pow2, int levels, long long batch,          \
        unsigned int k0, unsigned int k1, const unsigned long long* calls, const double* beta,     \
        long long* out_idx, W* out_w) {                                                            \
        const unsigned long long c = calls[0];                                                     \
        st_sample<W>(sum, mn, pow2, levels, batch, k0, k1, (unsigned int)(c & 0xFFFFFFFFull),     \
                     (unsigned int)(c >> 32), beta[0], out_idx, out_w);                            \
    }
ST_SAMPLE_DEV(f32, float)
ST_SAMPLE_DEV(f64, double)

// IS weights of given indices: (sum[P + i] / min)^-beta.
extern "C" __global__ void seg_tree_weights(const double* sum, const double* mn, long long pow2,
                                            const long long* idx, long long n, double beta,
                                            double* out_w) {
    const long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= n) return;
    out_w[k] = st_is_weight(sum[pow2 + idx[k]], mn[1], beta);
}
