// Sum tree and min tree for prioritized replay (agents/segment_tree.py, CudaSumMinTree).
//
// Layout: capacity C rounded up to a power of two P; two float64 arrays of 2P nodes each,
// node 1 is the root, node n has children 2n and 2n+1, leaf i is node P+i. `sum` holds sums
// (empty leaves 0), `mn` holds minima over the non-zero leaves (empty or zero leaves +inf).
//
// Update (seg_tree_check_*, seg_tree_levels_*, seg_tree_finish_*): validate the batch in one
// block (on a bad entry nothing is written and status[0] gets its position); keep the last
// occurrence of every index; write the leaves; recompute level by level the touched parents
// only, each exactly once, by the last batch entry under it (no atomics, no races). A batch in
// non-decreasing index order (what stratified sampling returns, and every range fill) is
// processed by many blocks, each owning a chunk of entries, with the few nodes whose entries
// cross chunk boundaries finished by one block; any other batch is sorted (bitonic, keys
// index << 32 | position) and processed by one block. Work O(B log C) (+ O(B log^2 B) to sort).
//
// seg_tree_sample_*: one thread per draw. Draw j takes u_j = (j + U_j) / B * total with U_j
// from Philox4x32-10 keyed by (seed, call counter, j, PHILOX_STREAM_PER_SAMPLE), descends from
// the root choosing a child with a non-zero sum, and returns the leaf index and its IS weight
// (leaf / min)^-beta. O(log C) per draw. The total and the minimum are read on the device.
//
// Every float64 operation that decides a sampled index (+, -, /, * and comparisons) is written
// with explicit round-to-nearest intrinsics so no fused multiply-add changes a result: the NumPy
// tree (NumpySumMinTree) returns the same indices for the same seed and tree.
#include "philox.cuh"

#define ST_SMEM_KEYS 4096
#define ST_MAX_THREADS 1024
#define ST_ILP 4
#define ST_KEY_PAD 0xFFFFFFFFFFFFFFFFull

// IS weight (leaf / min)^-beta, in log space when the ratio overflows (see _is_weights).
__device__ __forceinline__ double st_is_weight(double leaf, double minv, double beta) {
    const double ratio = leaf / minv;
    if (ratio <= 1.7976931348623157e308) return pow(ratio, -beta);
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

// Range mode (range_start >= 0): the batch is the n slots range_start, range_start+1, ...
// (modulo capacity) and every leaf gets max_value[0]; nothing is validated. Batch mode
// (range_start < 0): entries (idx[k], in[k]) for k < n, validated first; on a bad entry the
// tree is left untouched and status[0] gets the first bad position (else -1).
template <typename T>
__device__ void st_update(double* __restrict__ sum, double* __restrict__ mn,
                          const long long* __restrict__ idx, const T* __restrict__ in, long long n,
                          long long capacity, long long pow2, int levels, int transform,
                          double alpha, double eps, long long n_valid, long long range_start,
                          double* __restrict__ max_value, long long* __restrict__ status,
                          int* __restrict__ flags, unsigned long long* __restrict__ gkeys,
                          int validate_only, int force_sort) {
    __shared__ unsigned long long skeys[ST_SMEM_KEYS];
    __shared__ double red_d[32];
    __shared__ long long red_l[32];
    const long long tid = threadIdx.x, nt = blockDim.x;
    const bool range_mode = range_start >= 0;
    unsigned long long* keys = n <= ST_SMEM_KEYS ? skeys : gkeys;
    int need_sort = force_sort;

    if (!range_mode && !force_sort) {
        long long bad = 0x7FFFFFFFFFFFFFFFLL;
        int unsorted = 0;
        double vmax = 0.0;
        for (long long k = tid; k < n; k += nt) {
            const long long i = idx[k];
            const double x = (double)in[k];
            if (i < 0 || i >= n_valid || !(x >= 0.0 && x <= 1.7976931348623157e308)) {
                if (k < bad) bad = k;
            } else {
                const double v = st_leaf_value(x, transform, alpha, eps);
                if (!(v >= 0.0 && v <= 1.7976931348623157e308)) {
                    if (k < bad) bad = k;
                } else {
                    vmax = fmax(vmax, v);
                }
            }
            if (k + 1 < n && idx[k + 1] < i) unsorted = 1;
        }
        if (__syncthreads_or(bad != 0x7FFFFFFFFFFFFFFFLL)) {
            const long long first = st_block_min_ll(bad, red_l);
            if (tid == 0) status[0] = first;
            return;  // uniform across the block: the tree is not touched
        }
        vmax = st_block_max(vmax, red_d);
        if (tid == 0) {
            status[0] = -1;
            max_value[0] = fmax(max_value[0], vmax);
        }
        need_sort = __syncthreads_or(unsorted);
        if (validate_only) {
            if (tid == 0) flags[0] = need_sort;
            return;
        }
    }

    // Keys: leaf index in the high word, batch position in the low word.
    const long long wrap = range_mode ? (range_start + n > capacity ? range_start + n - capacity : 0) : 0;
    for (long long k = tid; k < n; k += nt) {
        long long i;
        if (range_mode) {
            i = k < wrap ? k : range_start + (k - wrap);  // ascending even when the range wraps
        } else {
            i = idx[k];
        }
        keys[k] = ((unsigned long long)i << 32) | (unsigned long long)k;
    }
    if (need_sort) {
        long long np2 = 1;
        while (np2 < n) np2 <<= 1;
        for (long long k = n + tid; k < np2; k += nt) keys[k] = ST_KEY_PAD;
        __syncthreads();
        for (long long size = 2; size <= np2; size <<= 1) {
            for (long long stride = size >> 1; stride > 0; stride >>= 1) {
                for (long long k = tid; k < np2; k += nt) {
                    const long long partner = k ^ stride;
                    if (partner > k) {  // each pair is handled by exactly one thread
                        const unsigned long long a = keys[k], b = keys[partner];
                        const bool ascending = (k & size) == 0;
                        if ((a > b) == ascending) {
                            keys[k] = b;
                            keys[partner] = a;
                        }
                    }
                }
                __syncthreads();
            }
        }
    }
    __syncthreads();

    const double fill_value = range_mode ? max_value[0] : 0.0;
    // Leaves: the last entry of each run of equal indices wins (largest batch position).
    for (long long k = tid; k < n; k += nt) {
        const unsigned long long key = keys[k];
        const long long i = (long long)(key >> 32);
        const bool last = (k == n - 1) || ((long long)(keys[k + 1] >> 32) != i);
        if (last) {
            double v;
            if (range_mode) {
                v = fill_value;
            } else {
                const long long pos = (long long)(key & 0xFFFFFFFFull);
                v = st_leaf_value((double)in[pos], transform, alpha, eps);
            }
            const long long node = pow2 + i;
            sum[node] = v;
            mn[node] = v > 0.0 ? v : st_inf();
        }
    }
    __syncthreads();

    // Parents, level by level: the last entry under each touched node recomputes it. Each thread
    // takes ST_ILP entries at a time and issues all their child loads before any store, so the
    // memory latency of a level is paid once, not once per entry.
    for (int level = 1; level <= levels; ++level) {
        for (long long base = tid; base < n; base += nt * ST_ILP) {
            long long node[ST_ILP];
            double ls[ST_ILP], rs[ST_ILP], lm[ST_ILP], rm[ST_ILP];
#pragma unroll
            for (int g = 0; g < ST_ILP; ++g) {
                const long long k = base + g * nt;
                node[g] = -1;
                if (k < n) {
                    const long long a = (pow2 + (long long)(keys[k] >> 32)) >> level;
                    const bool last =
                        (k == n - 1) || (((pow2 + (long long)(keys[k + 1] >> 32)) >> level) != a);
                    if (last) node[g] = a;
                }
            }
#pragma unroll
            for (int g = 0; g < ST_ILP; ++g) {
                if (node[g] >= 0) {
                    const long long c = node[g] << 1;
                    ls[g] = sum[c];
                    rs[g] = sum[c + 1];
                    lm[g] = mn[c];
                    rm[g] = mn[c + 1];
                }
            }
#pragma unroll
            for (int g = 0; g < ST_ILP; ++g) {
                if (node[g] >= 0) {
                    sum[node[g]] = __dadd_rn(ls[g], rs[g]);
                    mn[node[g]] = fmin(lm[g], rm[g]);
                }
            }
        }
        __syncthreads();
    }
}

// Leaf index of batch entry k: idx[k], or the k-th slot of a (possibly wrapping) range listed
// in ascending order.
__device__ __forceinline__ long long st_entry(const long long* idx, long long k, long long range_start,
                                              long long wrap) {
    if (range_start < 0) return idx[k];
    return k < wrap ? k : range_start + (k - wrap);
}

// Multi-block part of an update of a batch in non-decreasing index order (sampled batches and
// ranges; an unsorted batch is left to seg_tree_finish). Block b owns entries
// [b * blockDim, (b + 1) * blockDim). It writes the leaves whose last occurrence it holds and,
// level by level, every touched node whose run of entries lies inside its chunk (the last entry
// of the run computes it). A node whose run crosses a chunk boundary is left to seg_tree_finish;
// so are all its ancestors, whose runs contain it.
template <typename T>
__device__ void st_levels(double* __restrict__ sum, double* __restrict__ mn,
                          const long long* __restrict__ idx, const T* __restrict__ in, long long n,
                          long long capacity, long long pow2, int levels, int transform,
                          double alpha, double eps, long long range_start,
                          const double* __restrict__ max_value, const long long* __restrict__ status,
                          const int* __restrict__ flags) {
    if (range_start < 0 && (status[0] >= 0 || flags[0] != 0)) return;  // rejected, or unsorted
    const long long wrap =
        range_start >= 0 ? (range_start + n > capacity ? range_start + n - capacity : 0) : 0;
    const long long c0 = (long long)blockIdx.x * blockDim.x;
    const long long c1 = c0 + blockDim.x < n ? c0 + blockDim.x : n;  // chunk end (exclusive)
    const long long k = c0 + threadIdx.x;
    const long long ik = k < n ? st_entry(idx, k, range_start, wrap) : -1;
    const long long inext = k + 1 < n ? st_entry(idx, k + 1, range_start, wrap) : -1;
    const long long ifirst = st_entry(idx, c0, range_start, wrap);
    const long long ilast = st_entry(idx, c1 - 1, range_start, wrap);
    const long long iprev = c0 > 0 ? st_entry(idx, c0 - 1, range_start, wrap) : -1;
    const long long iafter = c1 < n ? st_entry(idx, c1, range_start, wrap) : -1;

    if (k < n && inext != ik) {  // last occurrence of leaf ik
        const double v = range_start >= 0 ? max_value[0]
                                          : st_leaf_value((double)in[k], transform, alpha, eps);
        sum[pow2 + ik] = v;
        mn[pow2 + ik] = v > 0.0 ? v : st_inf();
    }
    __syncthreads();
    for (int level = 1; level <= levels; ++level) {
        const long long afirst = (pow2 + ifirst) >> level, alast = (pow2 + ilast) >> level;
        const bool left_span = iprev >= 0 && ((pow2 + iprev) >> level) == afirst;
        const bool right_span = iafter >= 0 && ((pow2 + iafter) >> level) == alast;
        if (afirst == alast && (left_span || right_span)) break;  // block-uniform
        if (k < n) {
            const long long a = (pow2 + ik) >> level;
            const bool last = inext < 0 || ((pow2 + inext) >> level) != a;
            if (last && !(left_span && a == afirst)) {
                const long long c = a << 1;
                const double ls = sum[c], rs = sum[c + 1], lm = mn[c], rm = mn[c + 1];
                sum[a] = __dadd_rn(ls, rs);
                mn[a] = fmin(lm, rm);
            }
        }
        __syncthreads();
    }
}

// Single-block end of an update. Sorted batch or range: the nodes whose runs cross the chunk
// boundaries of st_levels (chunk = its blockDim), level by level; at each level the last
// boundary inside a node's run (the next boundary's right entry is outside it) computes it. Unsorted batch: the whole update (sort, leaves,
// levels) in this block.
template <typename T>
__device__ void st_finish(double* __restrict__ sum, double* __restrict__ mn,
                          const long long* __restrict__ idx, const T* __restrict__ in, long long n,
                          long long capacity, long long pow2, int levels, int transform,
                          double alpha, double eps, long long range_start, long long chunk,
                          double* __restrict__ max_value, long long* __restrict__ status,
                          int* __restrict__ flags, unsigned long long* __restrict__ gkeys) {
    if (range_start < 0) {
        if (status[0] >= 0) return;
        if (flags[0] != 0) {
            st_update<T>(sum, mn, idx, in, n, capacity, pow2, levels, transform, alpha, eps, n,
                         range_start, max_value, status, flags, gkeys, 0, 1);
            return;
        }
    }
    const long long wrap =
        range_start >= 0 ? (range_start + n > capacity ? range_start + n - capacity : 0) : 0;
    const long long nb = (n + chunk - 1) / chunk - 1;  // boundaries t = 1..nb
    for (int level = 1; level <= levels; ++level) {
        for (long long t = 1 + threadIdx.x; t <= nb; t += blockDim.x) {
            const long long a = (pow2 + st_entry(idx, t * chunk - 1, range_start, wrap)) >> level;
            const bool spans = ((pow2 + st_entry(idx, t * chunk, range_start, wrap)) >> level) == a;
            if (spans &&
                (t == nb ||
                 ((pow2 + st_entry(idx, (t + 1) * chunk, range_start, wrap)) >> level) != a)) {
                const long long c = a << 1;
                const double ls = sum[c], rs = sum[c + 1], lm = mn[c], rm = mn[c + 1];
                sum[a] = __dadd_rn(ls, rs);
                mn[a] = fmin(lm, rm);
            }
        }
        __syncthreads();
    }
}

// An update is three launches: seg_tree_check (one block: validation, running max, order),
// seg_tree_levels (many blocks), seg_tree_finish (one block). A range fill skips the check.
#define ST_KERNELS(SUFFIX, INPUT_T)                                                                 \
    extern "C" __global__ void __launch_bounds__(ST_MAX_THREADS) seg_tree_check_##SUFFIX(          \
        double* sum, double* mn, const long long* idx, const INPUT_T* in, long long n,             \
        long long capacity, long long pow2, int levels, int transform, double alpha, double eps,   \
        long long n_valid, double* max_value, long long* status, int* flags) {                     \
        st_update<INPUT_T>(sum, mn, idx, in, n, capacity, pow2, levels, transform, alpha, eps,     \
                           n_valid, -1, max_value, status, flags, 0, 1, 0);                        \
    }                                                                                               \
    extern "C" __global__ void __launch_bounds__(ST_MAX_THREADS) seg_tree_levels_##SUFFIX(         \
        double* sum, double* mn, const long long* idx, const INPUT_T* in, long long n,             \
        long long capacity, long long pow2, int levels, int transform, double alpha, double eps,   \
        long long range_start, const double* max_value, const long long* status,                   \
        const int* flags) {                                                                         \
        st_levels<INPUT_T>(sum, mn, idx, in, n, capacity, pow2, levels, transform, alpha, eps,     \
                           range_start, max_value, status, flags);                                 \
    }                                                                                               \
    extern "C" __global__ void __launch_bounds__(ST_MAX_THREADS) seg_tree_finish_##SUFFIX(         \
        double* sum, double* mn, const long long* idx, const INPUT_T* in, long long n,             \
        long long capacity, long long pow2, int levels, int transform, double alpha, double eps,   \
        long long range_start, long long chunk, double* max_value, long long* status, int* flags,  \
        unsigned long long* gkeys) {                                                                \
        st_finish<INPUT_T>(sum, mn, idx, in, n, capacity, pow2, levels, transform, alpha, eps,     \
                           range_start, chunk, max_value, status, flags, gkeys);                   \
    }

ST_KERNELS(f32, float)
ST_KERNELS(f64, double)

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
    for (int level = 0; level < levels; ++level) {
        long long c = node << 1;
        const double left = sum[c], right = sum[c + 1];
        // A node with a non-zero sum has a child with a non-zero sum: take it when the threshold
        // points past a zero subtree (rounding, u == total, or padding past the filled prefix).
        const bool go_left = left > 0.0 && (u < left || right == 0.0);
        if (!go_left) {
            u = __dsub_rn(u, left);
            c += 1;
        }
        node = c;
    }
    out_idx[j] = node - pow2;
    out_w[j] = (W)st_is_weight(sum[node], mn[1], beta);
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

// IS weights of given indices: (sum[P + i] / min)^-beta.
extern "C" __global__ void seg_tree_weights(const double* sum, const double* mn, long long pow2,
                                            const long long* idx, long long n, double beta,
                                            double* out_w) {
    const long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= n) return;
    out_w[k] = st_is_weight(sum[pow2 + idx[k]], mn[1], beta);
}
