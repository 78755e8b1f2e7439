// The portfolio env's kernels: one launch per vector step (portfolio_step), plus reset and observe.
// One thread per env runs its scalar logic, looping over the env's K instruments (the trades are
// sequential: each spends the cash the previous left), and writes its observation's last 1 + K
// entries; the block then copies its envs' K*F feature entries, a warp per row, so the wide
// observation stores are coalesced instead of strided by D.
#include "portfolio_env.cuh"

// Elements each lane loads before it stores them (the stores may alias the feature table as
// far as the compiler knows, so one load-store pair at a time would serialise the loads).
#define PORTFOLIO_COPY_UNROLL 8

// Block-cooperative copy of feature rows: row r of the block's list gets features[bar[r]] (K*F
// floats, contiguous in the [T, K, F] table) at the start of row dest[r] of out [*, D].
__device__ __forceinline__ void copy_feature_rows(const PortfolioMarketView& m, const PortfolioParamView& p,
                                                  const long long* bar, const int* dest, int count, float* out) {
    long long kf = p.pi[PPI_N_INSTRUMENTS] * p.pi[PPI_N_FEATURES];
    long long d = kf + 1 + p.pi[PPI_N_INSTRUMENTS];
    int lane = threadIdx.x & 31;
    int n_warps = blockDim.x >> 5;
    for (int r = threadIdx.x >> 5; r < count; r += n_warps) {
        const float* src = m.features + bar[r] * kf;
        float* dst = out + (long long)dest[r] * d;
        for (long long j0 = lane; j0 < kf; j0 += 32 * PORTFOLIO_COPY_UNROLL) {
            float v[PORTFOLIO_COPY_UNROLL];
#pragma unroll
            for (int u = 0; u < PORTFOLIO_COPY_UNROLL; ++u) {
                long long j = j0 + 32 * u;
                if (j < kf) v[u] = src[j];
            }
#pragma unroll
            for (int u = 0; u < PORTFOLIO_COPY_UNROLL; ++u) {
                long long j = j0 + 32 * u;
                if (j < kf) dst[j] = v[u];
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(BLOCK) portfolio_step(
    PORTFOLIO_STATE_ARGS, PORTFOLIO_MARKET_ARGS, PORTFOLIO_PARAM_ARGS,
    const long long* __restrict__ actions, PORTFOLIO_OUTPUT_ARGS, long long* __restrict__ error, int n)
{
    PORTFOLIO_STATE_VIEW(s);
    PORTFOLIO_MARKET_VIEW(m);
    PORTFOLIO_PARAM_VIEW(p);
    __shared__ long long obs_bar[BLOCK];
    __shared__ int obs_env[BLOCK];
    // The envs of the block whose episode ended this step (SAME_STEP mode) and the bar of their
    // final observation; slot order varies between runs, each row's destination does not.
    __shared__ long long final_bar[BLOCK];
    __shared__ int final_env[BLOCK];
    __shared__ int n_final;
    if (threadIdx.x == 0) n_final = 0;
    __syncthreads();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    long long first = (long long)blockIdx.x * blockDim.x;
    int count = (int)min((long long)blockDim.x, (long long)n - first);
    int mode = (int)p.pi[PPI_AUTORESET_MODE];
    int k_n = (int)p.pi[PPI_N_INSTRUMENTS];
    long long kf = (long long)k_n * p.pi[PPI_N_FEATURES];
    long long d = kf + 1 + k_n;

    if (i < n) {
        const long long* a = actions + (long long)i * k_n;
        bool bad = false;
        for (int k = 0; k < k_n; ++k) {
            long long ak = a[k];
            if (ak < 0 || ak >= p.pi[PPI_N_LEVELS]) {
                // First bad action wins: the host raises with env, instrument and value at its check.
                if (!bad && atomicCAS((unsigned long long*)error, 0ull, 1ull) == 0ull) {
                    error[1] = i;
                    error[2] = k;
                    error[3] = ak;
                }
                bad = true;
            }
        }
        int flag = s.done_flag[i];
        long long row = (long long)i * k_n;
        if (flag != RUNNING || bad) {
            // Waiting for a reset (NEXT_STEP: reset now; DISABLED: stay frozen), or a bad action.
            if (flag != RUNNING && mode == MODE_NEXT_STEP) portfolio_reset_env(s, p, i, -1, n);
            bool keep_flags = (mode == MODE_DISABLED) && flag != RUNNING;
            reward[i] = 0.0f;
            components[2LL * i] = 0.0f;
            components[2LL * i + 1] = 0.0f;
            terminated[i] = keep_flags && flag == WAIT_TERMINATED;
            truncated[i] = keep_flags && flag == WAIT_TRUNCATED;
            done[i] = keep_flags;
            portfolio_value[i] = marked_value(s, m, k_n, i, s.bar[i], n);
            for (int k = 0; k < k_n; ++k) {
                positions[row + k] = s.position[(long long)k * n + i];
                costs[row + k] = 0.0;
            }
            episode_return[i] = 0.0f;
            episode_length[i] = 0;
        } else {
            PortfolioTransition o = portfolio_transition(s, m, p, i, a, n, positions, costs);
            bool ended = o.terminated || o.truncated;
            reward[i] = (float)o.reward;
            components[2LL * i] = (float)o.gross;
            components[2LL * i + 1] = (float)o.cost;
            terminated[i] = o.terminated;
            truncated[i] = o.truncated;
            done[i] = ended;
            portfolio_value[i] = o.value1;
            // The reference multiplies by the flag: -0.0 where a negative return did not end.
            episode_return[i] = (float)(s.episode_return[i] * (ended ? 1.0 : 0.0));
            episode_length[i] = ended ? s.step_in_episode[i] : 0;
            if (ended) {
                if (mode == MODE_SAME_STEP) {
                    int slot = atomicAdd(&n_final, 1);
                    final_bar[slot] = s.bar[i];
                    final_env[slot] = i;
                    portfolio_obs_tail(s, m, p, i, n, final_obs + (long long)i * d + kf);
                    portfolio_reset_env(s, p, i, -1, n);
                } else {
                    s.done_flag[i] = o.terminated ? WAIT_TERMINATED : WAIT_TRUNCATED;
                }
            }
        }
        obs_bar[threadIdx.x] = s.bar[i];
        obs_env[threadIdx.x] = i;
        portfolio_obs_tail(s, m, p, i, n, obs + (long long)i * d + kf);
    }
    __syncthreads();
    if (count > 0) copy_feature_rows(m, p, obs_bar, obs_env, count, obs);
    if (n_final > 0) copy_feature_rows(m, p, final_bar, final_env, n_final, final_obs);
}

// Reset envs where mask[i]; start_index[i] >= 0 pins the start bar, -1 draws it.
extern "C" __global__ void __launch_bounds__(BLOCK) portfolio_reset(
    PORTFOLIO_STATE_ARGS, PORTFOLIO_PARAM_ARGS, const bool* __restrict__ mask,
    const long long* __restrict__ start_index, int n)
{
    PORTFOLIO_STATE_VIEW(s);
    PORTFOLIO_PARAM_VIEW(p);
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && mask[i]) portfolio_reset_env(s, p, i, start_index[i], n);
}

// Observation of every env at its current state.
extern "C" __global__ void __launch_bounds__(BLOCK) portfolio_observe(
    PORTFOLIO_STATE_ARGS, PORTFOLIO_MARKET_ARGS, PORTFOLIO_PARAM_ARGS, float* __restrict__ obs, int n)
{
    PORTFOLIO_STATE_VIEW(s);
    PORTFOLIO_MARKET_VIEW(m);
    PORTFOLIO_PARAM_VIEW(p);
    __shared__ long long obs_bar[BLOCK];
    __shared__ int obs_env[BLOCK];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    long long first = (long long)blockIdx.x * blockDim.x;
    int count = (int)min((long long)blockDim.x, (long long)n - first);
    if (i < n) {
        int k_n = (int)p.pi[PPI_N_INSTRUMENTS];
        long long kf = (long long)k_n * p.pi[PPI_N_FEATURES];
        obs_bar[threadIdx.x] = s.bar[i];
        obs_env[threadIdx.x] = i;
        portfolio_obs_tail(s, m, p, i, n, obs + (long long)i * (kf + 1 + k_n) + kf);
    }
    __syncthreads();
    if (count > 0) copy_feature_rows(m, p, obs_bar, obs_env, count, obs);
}
