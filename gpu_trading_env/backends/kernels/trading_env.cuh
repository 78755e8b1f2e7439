// Device functions of the trading env step, shared by trading_step.cu and the fused rollout.
//
// The arithmetic mirrors the NumPy backend (gpu_trading_env/backends/numpy_backend.py, its
// numpy_step_parts.py and the reward's parts in gpu_trading_env/core/reward.py) operation for
// operation, in float64 for money, and the module is compiled with --fmad=false: without fused multiply-add every float64
// result is the correctly rounded IEEE value, as NumPy computes it, so positions and cash agree
// bit for bit between the backends (a floor() at a boundary would otherwise flip).
//
// Parameter slots PF_* / PI_* are generated from gpu_trading_env/core/config.py (FLOAT_PARAMS,
// INT_PARAMS) and prepended as #defines when the module is compiled.
#pragma once
#include "philox.cuh"

// State codes, category and component counts, BLOCK and LEAKY_RELU_SLOPE come from
// gpu_trading_env/core/constants.py, the Philox stream ids from gpu_trading_env/gpu/philox.py,
// prepended as #defines like the parameter slots.

// The env state, market, parameter and curiosity structs, and the kernel parameter lists that
// gather them (CuPy passes pointers and scalars, not structs): *_MEMBERS, *_ARGS and *_VIEW are
// generated from the Python description (gpu_trading_env/core/kernel_interface.py: EnvState's
// fields and dtypes, MARKET_PARAMS, PARAM_PARAMS, CURIOSITY_PARAMS) and prepended as #defines.
struct EnvStateView { ENV_STATE_MEMBERS };  // [N] each; div_ring [window, N], div_hist [N_CATEGORIES, N]
struct MarketView { MARKET_MEMBERS };       // features [T, F], open_px and close_px [T]
struct ParamView { PARAM_MEMBERS };         // PF_* slots, PI_* slots, per-action tables [A]
struct CuriosityView { CURIOSITY_MEMBERS };

// Start a new episode for env i at `start_index` bars past the instrument's first bar, or at a
// Philox-drawn bar when start_index < 0 (see draw_start_bars in backends/numpy_step_parts.py).
__device__ __forceinline__ void env_reset(const EnvStateView& s, const ParamView& p, int i, long long start_index, int n) {
    long long lo = s.lo[i], hi = s.hi[i];
    long long start;
    if (start_index < 0) {
        unsigned long long key = s.seed[i], ctr = s.episode_count[i];
        philox_out r = philox4x32_10((unsigned int)(ctr & 0xFFFFFFFFull), (unsigned int)(ctr >> 32),
                                     (unsigned int)i, PHILOX_STREAM_START_BAR,
                                     (unsigned int)(key & 0xFFFFFFFFull), (unsigned int)(key >> 32));
        long long n_starts = hi - lo - p.pi[PI_EPISODE_LENGTH];
        start = lo + philox_uniform_index(r.x0, (unsigned long long)n_starts);
        s.episode_count[i] = ctr + 1ull;
    } else {
        start = lo + start_index;
    }
    s.bar[i] = start;
    s.step_in_episode[i] = 0;
    s.cash[i] = p.pf[PF_INITIAL_CAPITAL];
    s.position[i] = 0.0;
    s.costs[i] = 0.0;
    s.entry_price[i] = 0.0;
    s.entry_bar[i] = 0;
    s.barrier_status[i] = BARRIER_NONE;
    s.div_cursor[i] = 0;
    s.div_count[i] = 0;
    for (int c = 0; c < N_CATEGORIES; ++c) s.div_hist[(long long)c * n + i] = 0;
    s.done_flag[i] = RUNNING;
    s.episode_return[i] = 0.0;
}

// The two portfolio features of the observation (float32 as returned), value and position.
__device__ __forceinline__ void portfolio_features(const ParamView& p, double cash, double position, double px,
                                                   float* value_feat, float* position_feat) {
    double c0 = p.pf[PF_INITIAL_CAPITAL];
    *value_feat = (float)((cash + position * px) / c0);
    *position_feat = (float)(position / (c0 / px));
}

// Observation element j of an env at `bar` (j < F: market feature; then value, position, spread).
__device__ __forceinline__ float obs_element(const MarketView& m, const ParamView& p, long long bar,
                                             float value_feat, float position_feat, int j) {
    int f = m.n_features;
    if (j < f) return m.features[bar * (long long)f + j];
    if (j == f) return value_feat;
    if (j == f + 1) return position_feat;
    return (float)p.pf[PF_SPREAD];
}

// ICM forward-model bonus (float32): see curiosity in core/reward.py.
__device__ float curiosity_bonus(const CuriosityView& c, const MarketView& m, const ParamView& p,
                                 long long bar0, float v0, float q0, long long bar1, float v1, float q1, int cat) {
    int d = (int)p.pi[PI_CURIOSITY_STATE_DIMS];
    int hdim = (int)p.pi[PI_CURIOSITY_HIDDEN];
    int in_dim = d + N_CATEGORIES;
    float h[CURIOSITY_MAX_HIDDEN];
    for (int k = 0; k < hdim; ++k) {
        const float* row = c.w1 + (long long)k * in_dim;
        float acc = 0.0f;
        for (int j = 0; j < d; ++j) acc += obs_element(m, p, bar0, v0, q0, j) * row[j];
        acc += row[d + cat];
        acc += c.b1[k];
        h[k] = acc > 0.0f ? acc : LEAKY_RELU_SLOPE * acc;
    }
    float sq = 0.0f;
    for (int j = 0; j < d; ++j) {
        const float* row = c.w2 + (long long)j * hdim;
        float acc = 0.0f;
        for (int k = 0; k < hdim; ++k) acc += h[k] * row[k];
        acc += c.b2[j];
        float err = acc - obs_element(m, p, bar1, v1, q1, j);
        sq += err * err;
    }
    float mse = sq / (float)d;
    return fminf(mse, (float)p.pf[PF_CURIOSITY_MAX_REWARD]) * (float)p.pf[PF_CURIOSITY_SCALE];
}

// Outputs of one env's transition.
struct Transition {
    double reward, pnl, barrier, risk, diversity, curiosity;
    double value1, position1;
    int label;
    bool terminated, truncated;
};

// Advance env i by one bar with action a (valid). Mirrors NumpyBackend._transition.
__device__ Transition env_transition(const EnvStateView& s, const MarketView& m, const ParamView& p,
                                     const CuriosityView& cur, int i, long long a, int n) {
    Transition o;
    long long t = s.bar[i];
    long long t1 = t + 1;
    double close_t = m.close_px[t];
    double close_1 = m.close_px[t1];
    double fill = p.pi[PI_FILL_NEXT_OPEN] ? m.open_px[t1] : close_t;
    double exposure = p.act_exposure[a];
    double rate = p.act_rate[a];
    int cat = (int)p.act_cat[a];
    double c0 = p.pf[PF_INITIAL_CAPITAL];

    double pos0 = s.position[i];
    double cash0 = s.cash[i];
    double value0 = cash0 + pos0 * close_t;
    double pos_feat = pos0 / (c0 / close_t);

    // --- trade
    double value_pre = cash0 + pos0 * fill;
    double reserve_frac = p.pf[PF_RESERVE_FRAC];
    double reserve = reserve_frac * value_pre;
    // Position sizing: "equity" sizes the notional as leverage x equity at the fill price (none
    // when the equity is <= 0); "units" holds max_position of env i's instrument (i mod I).
    double target = p.pi[PI_SIZING_EQUITY]
                        ? exposure * (p.pf[PF_LEVERAGE] * fmax(value_pre, 0.0) / fill)
                        : exposure * p.pf[PF_MAX_POSITION_BASE + i % (int)p.pi[PI_N_INSTRUMENTS]];
    double delta = target - pos0;
    if (reserve_frac > 0.0) {
        bool capped = (delta > 0.0) && (cash0 - delta * fill < reserve);
        double affordable = floor(fmax(cash0 - reserve, 0.0) / fill);
        if (capped) delta = fmin(delta, affordable);
    }
    double cost = fabs(delta) * fill * rate;
    double cash1 = cash0 - delta * fill - cost;
    double pos1 = pos0 + delta;
    bool reversal = (pos0 > 0.0 && target < 0.0) || (pos0 < 0.0 && target > 0.0);
    if (reversal) {
        double close_cost = fabs(pos0) * fill * rate;
        double cash_c = cash0 + pos0 * fill - close_cost;
        double units = fmin(floor(fmax(cash_c - reserve, 0.0) / (fill * (1.0 + rate))), fabs(target));
        double new_pos = target > 0.0 ? units : -units;
        double open_cost = units * fill * rate;
        cash1 = cash_c - new_pos * fill - open_cost;
        pos1 = new_pos;
        cost = close_cost + open_cost;
    }

    // --- triple barrier
    bool opened = (reversal || pos0 == 0.0) && pos1 != 0.0;
    bool flat = pos1 == 0.0;
    int status = opened ? BARRIER_ARMED : (flat ? BARRIER_NONE : (int)s.barrier_status[i]);
    double entry = opened ? fill : (flat ? 0.0 : s.entry_price[i]);
    long long entry_bar = opened ? t : s.entry_bar[i];
    int label = LABEL_NONE;
    if (p.pi[PI_BARRIERS] && status == BARRIER_ARMED) {
        bool is_long = pos1 > 0.0;
        double pf_ = p.pf[PF_PROFIT_FRAC], sf = p.pf[PF_STOP_FRAC];
        bool profit_hit = is_long ? (fill >= entry * (1.0 + pf_)) : (fill <= entry * (1.0 - pf_));
        bool stop_hit = !profit_hit && (is_long ? (fill <= entry * (1.0 - sf)) : (fill >= entry * (1.0 + sf)));
        bool time_hit = !profit_hit && !stop_hit && (t >= entry_bar + p.pi[PI_MAX_HOLDING_BARS]);
        if (profit_hit) label = LABEL_PROFIT;
        else if (stop_hit) label = LABEL_STOP;
        else if (time_hit) label = LABEL_TIME;
        if (label != LABEL_NONE) status = BARRIER_FIRED;
    }

    // --- diversity ring
    int window = (int)p.pi[PI_DIVERSITY_WINDOW];
    int cursor = s.div_cursor[i];
    int count = s.div_count[i];
    long long slot = (long long)cursor * n + i;
    if (count >= window) s.div_hist[(long long)s.div_ring[slot] * n + i] -= 1;
    s.div_ring[slot] = (unsigned char)cat;
    s.div_hist[(long long)cat * n + i] += 1;
    count = min(count + 1, window);
    double nf = (double)count;
    double entropy = 0.0;
    for (int c = 0; c < N_CATEGORIES; ++c) {
        int h = s.div_hist[(long long)c * n + i];
        if (h > 0) {
            double pr = (double)h / nf;
            entropy -= pr * log2(pr);
        }
    }
    o.diversity = (count >= p.pi[PI_DIVERSITY_MIN_ENTRIES] && entropy < p.pf[PF_DIVERSITY_THRESHOLD_BITS])
                      ? -p.pf[PF_DIVERSITY_PENALTY] : 0.0;

    // --- mark to market, reward: the parts of core/reward.py, summed in COMPONENT_NAMES' order
    double value1 = cash1 + pos1 * close_1;
    o.pnl = (value1 - value0) / value0;
    double half = p.pf[PF_BARRIER_HALF_SCALE];
    double barrier_scale = label == LABEL_PROFIT ? half : (label == LABEL_STOP ? -half : 0.0);
    o.barrier = o.pnl * barrier_scale;
    double excess = fabs(pos_feat) - p.pf[PF_RISK_THRESHOLD];
    o.risk = excess > 0.0 ? -(p.pf[PF_RISK_PENALTY_SCALE] * excess) : 0.0;

    o.curiosity = 0.0;
    if (cur.on) {
        float v0, q0, v1, q1;
        portfolio_features(p, cash0, pos0, close_t, &v0, &q0);
        portfolio_features(p, cash1, pos1, close_1, &v1, &q1);
        o.curiosity = (double)curiosity_bonus(cur, m, p, t, v0, q0, t1, v1, q1, cat);
    }
    o.reward = o.pnl + o.barrier + o.risk + o.diversity + o.curiosity;

    // --- commit
    int steps = s.step_in_episode[i] + 1;
    s.bar[i] = t1;
    s.step_in_episode[i] = steps;
    s.cash[i] = cash1;
    s.position[i] = pos1;
    s.costs[i] = s.costs[i] + cost;
    s.entry_price[i] = entry;
    s.entry_bar[i] = entry_bar;
    s.barrier_status[i] = (signed char)status;
    s.div_cursor[i] = (cursor + 1 == window) ? 0 : cursor + 1;
    s.div_count[i] = count;
    s.episode_return[i] = s.episode_return[i] + o.reward;

    o.terminated = label == LABEL_PROFIT || label == LABEL_STOP || value1 <= 0.0;
    o.truncated = !o.terminated && (steps >= p.pi[PI_EPISODE_LENGTH] || t1 + 1 >= s.hi[i]);
    o.value1 = value1;
    o.position1 = pos1;
    o.label = label;
    return o;
}
