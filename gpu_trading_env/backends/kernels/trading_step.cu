// The trading env's kernels: one launch per vector step (trading_step), plus reset and observe.
// One thread per env for the scalar logic; the block then writes its envs' observation rows
// together, a warp per row, so the wide observation stores are coalesced instead of strided by D.
#include "trading_env.cuh"


struct ObsRow {
    long long bar;
    float value_feat;
    float position_feat;
};

// Block-cooperative store of observation rows into obs [*, D]: row r of `rows` goes to row
// dest[r] (dest == nullptr: row first + r). One warp writes one row at a time, lane j element j
// (then j + 32, ...), so the stores of a row are coalesced and no thread divides by D.
// Each lane reads its elements of OBS_ROWS rows before it writes any: the stores may alias the
// feature table as far as the compiler knows, so one read-then-write per element would
// serialise the global reads (at a few thousand envs that latency was most of the step).
// blockDim.x is a multiple of 32 (the host launches 64, 128 or 256 threads).
#define OBS_ROWS 8
__device__ __forceinline__ void store_obs_block(const MarketView& m, const ParamView& p, const ObsRow* rows,
                                                const int* dest, long long first, int count, float* obs) {
    int d = m.n_features + N_PORTFOLIO_FEATURES;
    int lane = threadIdx.x & 31;
    int n_warps = blockDim.x >> 5;
    for (int r0 = threadIdx.x >> 5; r0 < count; r0 += OBS_ROWS * n_warps) {
        long long bar[OBS_ROWS], out[OBS_ROWS];
        float value_feat[OBS_ROWS], position_feat[OBS_ROWS];
#pragma unroll
        for (int u = 0; u < OBS_ROWS; ++u) {
            int r = r0 + u * n_warps;
            if (r < count) {
                bar[u] = rows[r].bar;
                value_feat[u] = rows[r].value_feat;
                position_feat[u] = rows[r].position_feat;
                out[u] = (dest ? (long long)dest[r] : first + r) * d;
            }
        }
        for (int j = lane; j < d; j += 32) {
            float v[OBS_ROWS];
#pragma unroll
            for (int u = 0; u < OBS_ROWS; ++u) {
                if (r0 + u * n_warps < count) v[u] = obs_element(m, p, bar[u], value_feat[u], position_feat[u], j);
            }
#pragma unroll
            for (int u = 0; u < OBS_ROWS; ++u) {
                if (r0 + u * n_warps < count) obs[out[u] + j] = v[u];
            }
        }
    }
}

__device__ __forceinline__ void load_row(const EnvStateView& s, const MarketView& m, const ParamView& p, int i, ObsRow* row) {
    long long bar = s.bar[i];
    row->bar = bar;
    portfolio_features(p, s.cash[i], s.position[i], m.close_px[bar], &row->value_feat, &row->position_feat);
}

extern "C" __global__ void __launch_bounds__(BLOCK) trading_step(
    ENV_STATE_ARGS, MARKET_ARGS, PARAM_ARGS, CURIOSITY_ARGS,
    const long long* __restrict__ actions, STEP_OUTPUT_ARGS, long long* __restrict__ error, int n)
{
    ENV_STATE_VIEW(s);
    MARKET_VIEW(m);
    PARAM_VIEW(p);
    CURIOSITY_VIEW(cur);
    __shared__ ObsRow rows[BLOCK];
    // The final observations of the block's envs that finish this step (SAME_STEP mode), stored
    // together after the scalar work like the observations: one env's row written by its own
    // thread took D dependent reads, and nearly every block has such an env at every step.
    __shared__ ObsRow final_rows[BLOCK];
    __shared__ int final_env[BLOCK];
    __shared__ int n_final;
    if (threadIdx.x == 0) n_final = 0;
    __syncthreads();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    long long first = (long long)blockIdx.x * blockDim.x;
    int count = (int)min((long long)blockDim.x, (long long)n - first);
    int mode = (int)p.pi[PI_AUTORESET_MODE];

    if (i < n) {
        long long a = actions[i];
        int flag = s.done_flag[i];
        bool bad = a < 0 || a >= p.pi[PI_N_ACTIONS];
        if (bad && atomicCAS((unsigned long long*)error, 0ull, 1ull) == 0ull) {
            // First bad action wins: the host raises with env index and value at its next check.
            error[1] = i;
            error[2] = a;
        }
        if (flag != RUNNING || bad) {
            // Waiting for a reset (NEXT_STEP: reset now; DISABLED: stay frozen), or a bad action.
            if (flag != RUNNING && mode == MODE_NEXT_STEP) env_reset(s, p, i, -1, n);
            bool keep_flags = (mode == MODE_DISABLED) && flag != RUNNING;
            reward[i] = 0.0f;
            for (int c = 0; c < N_COMPONENTS; ++c) components[(long long)i * N_COMPONENTS + c] = 0.0f;
            terminated[i] = keep_flags && flag == WAIT_TERMINATED;
            truncated[i] = keep_flags && flag == WAIT_TRUNCATED;
            done[i] = keep_flags;
            portfolio_value[i] = s.cash[i] + s.position[i] * m.close_px[s.bar[i]];
            position[i] = s.position[i];
            barrier_label[i] = LABEL_NONE;
            episode_return[i] = 0.0f;
            episode_length[i] = 0;
        } else {
            Transition o = env_transition(s, m, p, cur, i, a, n);
            bool ended = o.terminated || o.truncated;
            reward[i] = (float)o.reward;
            float* comp = components + (long long)i * N_COMPONENTS;
            comp[COMPONENT_PNL] = (float)o.pnl;
            comp[COMPONENT_BARRIER] = (float)o.barrier;
            comp[COMPONENT_RISK] = (float)o.risk;
            comp[COMPONENT_DIVERSITY] = (float)o.diversity;
            comp[COMPONENT_CURIOSITY] = (float)o.curiosity;
            terminated[i] = o.terminated;
            truncated[i] = o.truncated;
            done[i] = ended;
            portfolio_value[i] = o.value1;
            position[i] = o.position1;
            barrier_label[i] = (signed char)o.label;
            episode_return[i] = ended ? (float)s.episode_return[i] : 0.0f;
            episode_length[i] = ended ? s.step_in_episode[i] : 0;
            if (ended) {
                if (mode == MODE_SAME_STEP) {
                    // Slot order varies between runs; each row's destination (env i) does not.
                    int slot = atomicAdd(&n_final, 1);
                    load_row(s, m, p, i, &final_rows[slot]);
                    final_env[slot] = i;
                    env_reset(s, p, i, -1, n);
                } else {
                    s.done_flag[i] = o.terminated ? WAIT_TERMINATED : WAIT_TRUNCATED;
                }
            }
        }
        load_row(s, m, p, i, &rows[threadIdx.x]);
    }
    __syncthreads();
    if (count > 0) store_obs_block(m, p, rows, nullptr, first, count, obs);
    if (n_final > 0) store_obs_block(m, p, final_rows, final_env, 0, n_final, final_obs);
}

// Reset envs where mask[i]; start_index[i] >= 0 pins the start bar, -1 draws it.
extern "C" __global__ void __launch_bounds__(BLOCK) trading_reset(
    ENV_STATE_ARGS, PARAM_ARGS, const bool* __restrict__ mask, const long long* __restrict__ start_index, int n)
{
    ENV_STATE_VIEW(s);
    PARAM_VIEW(p);
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && mask[i]) env_reset(s, p, i, start_index[i], n);
}

// Observation of every env at its current state.
extern "C" __global__ void __launch_bounds__(BLOCK) trading_observe(
    ENV_STATE_ARGS, MARKET_ARGS, PARAM_ARGS, float* __restrict__ obs, int n)
{
    ENV_STATE_VIEW(s);
    MARKET_VIEW(m);
    PARAM_VIEW(p);
    __shared__ ObsRow rows[BLOCK];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    long long first = (long long)blockIdx.x * blockDim.x;
    int count = (int)min((long long)blockDim.x, (long long)n - first);
    if (i < n) load_row(s, m, p, i, &rows[threadIdx.x]);
    __syncthreads();
    if (count > 0) store_obs_block(m, p, rows, nullptr, first, count, obs);
}
