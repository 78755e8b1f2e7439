// The source design's monolithic experience kernel, kept as a selectable rollout path and as the
// baseline the fused rollout is measured against: one thread runs one env for L steps, doing a
// scalar dueling Q forward pass of the online net (to act) per step in per-thread local arrays. The env step is the shared env_transition (trading_env.cuh), so its
// transitions follow the same semantics as every other path; the seed's bugs (LCG "random",
// long-only barrier, restarting at the same bar) are not reproduced.
#include "trading_env.cuh"

// The layer sizes MONO_H1, MONO_H2 (trunk), MONO_VH, MONO_AH (value and advantage hidden) and the
// local array bounds MONO_MAX_OBS, MONO_MAX_ACTIONS come from agents/rollouts/monolithic.py
// (monolithic_kernel_defines), PHILOX_STREAM_EXPLORE from gpu_trading_env/gpu/philox.py.

// Flat weight layout ([out, in] row-major, as torch nn.Linear), in this order:
// shared1 W[H1,D] b[H1], shared2 W[H2,H1] b[H2], value1 W[VH,H2] b[VH], value2 W[1,VH] b[1],
// adv1 W[AH,H2] b[AH], adv2 W[A,AH] b[A].
__device__ __forceinline__ float mono_leaky(float x) { return x > 0.0f ? x : LEAKY_RELU_SLOPE * x; }

__device__ void mono_dense(const float* w, const float* b, const float* in, float* out, int n_in, int n_out, bool act) {
    for (int j = 0; j < n_out; ++j) {
        float acc = b[j];
        const float* row = w + (long long)j * n_in;
        for (int i = 0; i < n_in; ++i) acc += row[i] * in[i];
        out[j] = act ? mono_leaky(acc) : acc;
    }
}

__device__ void mono_dueling(const float* wts, const float* x, int d, int a, float* q) {
    float h1[MONO_H1], h2[MONO_H2], vh[MONO_VH], ah[MONO_AH];
    const float* p = wts;
    const float* w1 = p; p += MONO_H1 * d; const float* b1 = p; p += MONO_H1;
    const float* w2 = p; p += MONO_H2 * MONO_H1; const float* b2 = p; p += MONO_H2;
    const float* vw1 = p; p += MONO_VH * MONO_H2; const float* vb1 = p; p += MONO_VH;
    const float* vw2 = p; p += MONO_VH; const float* vb2 = p; p += 1;
    const float* aw1 = p; p += MONO_AH * MONO_H2; const float* ab1 = p; p += MONO_AH;
    const float* aw2 = p; p += a * MONO_AH; const float* ab2 = p;
    mono_dense(w1, b1, x, h1, d, MONO_H1, true);
    mono_dense(w2, b2, h1, h2, MONO_H1, MONO_H2, true);
    mono_dense(vw1, vb1, h2, vh, MONO_H2, MONO_VH, true);
    float v;
    mono_dense(vw2, vb2, vh, &v, MONO_VH, 1, false);
    mono_dense(aw1, ab1, h2, ah, MONO_H2, MONO_AH, true);
    mono_dense(aw2, ab2, ah, q, MONO_AH, a, false);
    float mean = 0.0f;
    for (int k = 0; k < a; ++k) mean += q[k];
    mean /= (float)a;
    for (int k = 0; k < a; ++k) q[k] = v + q[k] - mean;
}

__device__ void mono_observe(const EnvStateView& s, const MarketView& m, const ParamView& p, int i, float* x) {
    long long bar = s.bar[i];
    float vf, qf;
    portfolio_features(p, s.cash[i], s.position[i], m.close_px[bar], &vf, &qf);
    int d = m.n_features + N_PORTFOLIO_FEATURES;
    for (int j = 0; j < d; ++j) x[j] = obs_element(m, p, bar, vf, qf, j);
}

// Runs L steps of every env. Outputs are [N, L, ...] thread-major (as the seed wrote them).
extern "C" __global__ void monolithic_rollout(
    ENV_STATE_ARGS, MARKET_ARGS, PARAM_ARGS, CURIOSITY_ARGS,
    const float* __restrict__ online,
    float epsilon, int steps, unsigned long long seed, unsigned long long round,
    float* __restrict__ obs_out, long long* __restrict__ action_out, float* __restrict__ reward_out,
    bool* __restrict__ terminated_out, bool* __restrict__ truncated_out,
    float* __restrict__ next_obs_out, float* __restrict__ episode_return_out,
    int* __restrict__ episode_length_out, int n)
{
    ENV_STATE_VIEW(s);
    MARKET_VIEW(m);
    PARAM_VIEW(p);
    CURIOSITY_VIEW(cur);
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int d = m.n_features + N_PORTFOLIO_FEATURES;
    int a_n = (int)p.pi[PI_N_ACTIONS];
    float x[MONO_MAX_OBS], q[MONO_MAX_ACTIONS];
    for (int t = 0; t < steps; ++t) {
        long long out = (long long)i * steps + t;
        mono_observe(s, m, p, i, x);
        for (int j = 0; j < d; ++j) obs_out[out * d + j] = x[j];
        mono_dueling(online, x, d, a_n, q);
        philox_out r = philox4x32_10((unsigned int)t, (unsigned int)round, (unsigned int)i, PHILOX_STREAM_EXPLORE,
                                     (unsigned int)(seed & 0xFFFFFFFFull), (unsigned int)(seed >> 32));
        long long act;
        float coin = (float)(r.x0 >> 8) * (1.0f / 16777216.0f);  // [0, 1), never 1
        if (coin < epsilon) {
            act = philox_uniform_index(r.x1, (unsigned long long)a_n);
        } else {
            act = 0;
            for (int k = 1; k < a_n; ++k) if (q[k] > q[act]) act = k;
        }
        Transition o = env_transition(s, m, p, cur, i, act, n);
        mono_observe(s, m, p, i, x);  // true next observation, before any reset
        for (int j = 0; j < d; ++j) next_obs_out[out * d + j] = x[j];
        action_out[out] = act;
        reward_out[out] = (float)o.reward;
        terminated_out[out] = o.terminated;
        truncated_out[out] = o.truncated;
        // The ended episode's return and length (0 elsewhere), as trading_step reports them.
        bool ended = o.terminated || o.truncated;
        episode_return_out[out] = ended ? (float)s.episode_return[i] : 0.0f;
        episode_length_out[out] = ended ? s.step_in_episode[i] : 0;
        if (ended) env_reset(s, p, i, -1, n);
    }
}
