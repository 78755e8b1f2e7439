// The fused rollout's acting forward in bfloat16 (agents/rollouts/acting.py, GreedyActor): the
// layers' weights and biases and the step's observations cast to bfloat16 in one launch. Under
// autocast every product cast its weight, its bias and its input separately, nine launches per
// vector step, and the unaligned widths (54 features, 3 actions) took cuBLAS's slower align2
// kernels (figures in docs/PERFORMANCE.md).
//
// Each job copies a float32 row-major matrix [rows, cols] into a bfloat16 one whose rows are
// `stride` elements apart (stride >= cols). The columns and rows beyond the source are never
// written: they were zeroed once, so the padded products add exact zeros. Jobs 0 to n_jobs - 1
// come from `table` (5 int64 each: source address, destination address, rows, cols, stride),
// weight_blocks blocks each; the last job is the input x, in the blocks that follow.
//
// The rounding is torch's float -> bfloat16 conversion: to nearest, ties to even. From compute
// capability 8.0 it is the same instruction torch's cast kernel uses (so NaNs come out alike
// too); before, the same rounding in integer arithmetic, a NaN staying a quiet NaN.

__device__ __forceinline__ unsigned short bf16_bits(float f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    unsigned short r;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(f));
    return r;
#else
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
#endif
}

extern "C" __global__ void cast_bf16(const long long* __restrict__ table, long long n_jobs,
                                     long long weight_blocks, const float* __restrict__ x,
                                     long long x_rows, long long x_cols,
                                     unsigned short* __restrict__ x_out, long long x_stride) {
    const long long weight_part = n_jobs * weight_blocks;
    const float* src;
    unsigned short* dst;
    long long rows, cols, stride, part, parts;
    if ((long long)blockIdx.x < weight_part) {
        const long long* job = table + 5 * ((long long)blockIdx.x / weight_blocks);
        src = reinterpret_cast<const float*>(job[0]);
        dst = reinterpret_cast<unsigned short*>(job[1]);
        rows = job[2];
        cols = job[3];
        stride = job[4];
        part = (long long)blockIdx.x % weight_blocks;
        parts = weight_blocks;
    } else {
        src = x;
        dst = x_out;
        rows = x_rows;
        cols = x_cols;
        stride = x_stride;
        part = (long long)blockIdx.x - weight_part;
        parts = (long long)gridDim.x - weight_part;
    }
    // 32-bit indices (the launcher checks every job has fewer than 2^31 elements): the
    // division by cols is the loop's cost.
    const unsigned int n = (unsigned int)(rows * cols), c_n = (unsigned int)cols;
    const unsigned int step = (unsigned int)(parts * blockDim.x);
    for (unsigned int i = (unsigned int)(part * blockDim.x) + threadIdx.x; i < n; i += step) {
        const unsigned int r = i / c_n, c = i - r * c_n;
        dst[(long long)r * stride + c] = bf16_bits(src[i]);
    }
}
