// Philox4x32-10 (Salmon et al., SC'11): the counter-based RNG shared with gpu_trading_env/gpu/philox.py.
// A draw is a pure function of (counter, key): no generator state lives in device memory.
#pragma once

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

// The stream ids (counter word 3) PHILOX_STREAM_* are generated from STREAM_* in philox.py
// (philox_stream_defines) and prepended as #defines by every module that includes this file.

struct philox_out { unsigned int x0, x1, x2, x3; };

__device__ __forceinline__ philox_out philox4x32_10(unsigned int c0, unsigned int c1, unsigned int c2,
                                                    unsigned int c3, unsigned int k0, unsigned int k1) {
#pragma unroll
    for (int r = 0; r < 10; ++r) {
        unsigned int hi0 = __umulhi(PHILOX_M0, c0), lo0 = PHILOX_M0 * c0;
        unsigned int hi1 = __umulhi(PHILOX_M1, c2), lo1 = PHILOX_M1 * c2;
        unsigned int n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0; c1 = lo1; c2 = n2; c3 = lo0;
        if (r < 9) { k0 += PHILOX_W0; k1 += PHILOX_W1; }
    }
    philox_out o = {c0, c1, c2, c3};
    return o;
}

// Integer in [0, n) by multiply-high; never n, bias <= n / 2^32 (see uniform_index in philox.py).
__device__ __forceinline__ long long philox_uniform_index(unsigned int word, unsigned long long n) {
    return (long long)(((unsigned long long)word * n) >> 32);
}

// float64 in [0, 1) from two words, 53 random bits (see uniform_float64 in philox.py).
__device__ __forceinline__ double philox_uniform_double(unsigned int hi_word, unsigned int lo_word) {
    unsigned long long hi = (unsigned long long)(hi_word >> 5);
    unsigned long long lo = (unsigned long long)(lo_word >> 6);
    return (double)((hi << 26) | lo) * (1.0 / 9007199254740992.0);
}
