// Device functions of the portfolio env's step (docs/ENV_SPEC.md, "Portfolio env").
//
// The arithmetic is the NumPy reference's (gpu_trading_env/backends/portfolio_numpy.py and the
// single env's trade in numpy_step_parts.py) operation for operation, in float64 for money, and
// the module is compiled with --fmad=false, so every result is the correctly rounded value NumPy
// computes. Sums over instruments run k = 0..K-1 from the first term named, as the reference's
// explicit loops do. The state is instrument-major ([K, N]: element k of env i at k * n + i).
//
// The parameter slots PPF_* / PPI_*, the state codes, the Philox stream ids and the structs'
// members and parameter lists are generated from Python (core/portfolio_kernel_interface.py) and
// prepended as #defines when the module is compiled.
#pragma once
#include "philox.cuh"

struct PortfolioStateView { PORTFOLIO_STATE_MEMBERS };    // [N] each; position, costs [K, N]
struct PortfolioMarketView { PORTFOLIO_MARKET_MEMBERS };  // features [T, K, F]; open, close [T, K]
struct PortfolioParamView { PORTFOLIO_PARAM_MEMBERS };    // PPF_* and PPI_* slots; exposure [L]; rate [K]

// A new episode for env i, flat with the initial capital, at bar `start_index` of the grid, or at
// a Philox-drawn bar when start_index < 0 (draw_start_bars in numpy_step_parts.py with lo = 0).
__device__ __forceinline__ void portfolio_reset_env(const PortfolioStateView& s, const PortfolioParamView& p,
                                                    int i, long long start_index, int n) {
    long long start;
    if (start_index < 0) {
        unsigned long long key = s.seed[i], ctr = s.episode_count[i];
        philox_out r = philox4x32_10((unsigned int)(ctr & 0xFFFFFFFFull), (unsigned int)(ctr >> 32),
                                     (unsigned int)i, PHILOX_STREAM_START_BAR,
                                     (unsigned int)(key & 0xFFFFFFFFull), (unsigned int)(key >> 32));
        long long n_starts = p.pi[PPI_N_BARS] - p.pi[PPI_EPISODE_LENGTH];
        start = philox_uniform_index(r.x0, (unsigned long long)n_starts);
        s.episode_count[i] = ctr + 1ull;
    } else {
        start = start_index;
    }
    int k_n = (int)p.pi[PPI_N_INSTRUMENTS];
    s.bar[i] = start;
    s.step_in_episode[i] = 0;
    s.cash[i] = p.pf[PPF_INITIAL_CAPITAL];
    for (int k = 0; k < k_n; ++k) {
        s.position[(long long)k * n + i] = 0.0;
        s.costs[(long long)k * n + i] = 0.0;
    }
    s.done_flag[i] = RUNNING;
    s.episode_return[i] = 0.0;
}

// V = cash + sum_k pos_k * close_k at `bar`, from env i's state.
__device__ __forceinline__ double marked_value(const PortfolioStateView& s, const PortfolioMarketView& m,
                                             int k_n, int i, long long bar, int n) {
    const double* px = m.close_px + bar * k_n;
    double value = s.cash[i];
    for (int k = 0; k < k_n; ++k) value += s.position[(long long)k * n + i] * px[k];
    return value;
}

// The observation's last 1 + K entries of env i at its state's bar: V / C0, then each
// pos_k / (C0 / close_k), each computed in float64 and rounded to float32.
__device__ __forceinline__ void portfolio_obs_tail(const PortfolioStateView& s, const PortfolioMarketView& m,
                                                   const PortfolioParamView& p, int i, int n, float* tail) {
    int k_n = (int)p.pi[PPI_N_INSTRUMENTS];
    long long bar = s.bar[i];
    double c0 = p.pf[PPF_INITIAL_CAPITAL];
    const double* px = m.close_px + bar * k_n;
    tail[0] = (float)(marked_value(s, m, k_n, i, bar, n) / c0);
    for (int k = 0; k < k_n; ++k) tail[1 + k] = (float)(s.position[(long long)k * n + i] / (c0 / px[k]));
}

// What one env's transition reports (the rest goes straight to the state and outputs).
struct PortfolioTransition {
    double reward, gross, cost, value1;
    bool terminated, truncated;
};

// Advance running env i by one bar with its valid actions a[0..K-1] (PortfolioNumpyBackend.
// _transition): writes its state, and its rows of `positions` and `costs` ([N, K]).
__device__ PortfolioTransition portfolio_transition(const PortfolioStateView& s, const PortfolioMarketView& m,
                                                    const PortfolioParamView& p, int i, const long long* a, int n,
                                                    double* positions, double* costs) {
    PortfolioTransition o;
    int k_n = (int)p.pi[PPI_N_INSTRUMENTS];
    long long t = s.bar[i];
    long long t1 = t + 1;
    const double* close_t = m.close_px + t * k_n;
    const double* close_1 = m.close_px + t1 * k_n;
    bool next_open = p.pi[PPI_FILL_NEXT_OPEN] != 0;
    const double* fill = next_open ? m.open_px + t1 * k_n : close_t;
    double cash0 = s.cash[i];
    double value0 = marked_value(s, m, k_n, i, t, n);
    double value_pre = value0;
    if (next_open) {
        value_pre = cash0;
        for (int k = 0; k < k_n; ++k) value_pre += s.position[(long long)k * n + i] * fill[k];
    }
    double reserve_frac = p.pf[PPF_RESERVE_FRAC];
    double reserve = reserve_frac > 0.0 ? reserve_frac * value_pre : 0.0;

    // --- gross cap: every exposure scaled by one factor where leverage x sum|e| is above it
    double leverage = p.pf[PPF_LEVERAGE], max_leverage = p.pf[PPF_MAX_LEVERAGE];
    double abs_sum = 0.0;
    for (int k = 0; k < k_n; ++k) abs_sum += fabs(p.exposure[a[k]]);
    double gross = leverage * abs_sum;
    bool capped = gross > max_leverage;
    double equity = leverage * fmax(value_pre, 0.0);

    // --- trades in instrument order, each with the cash the previous ones left
    double cash = cash0;
    double step_cost = 0.0;
    long long row = (long long)i * k_n;
    for (int k = 0; k < k_n; ++k) {
        double e = p.exposure[a[k]];
        if (capped) e = e * (max_leverage / gross);
        double px = fill[k];
        double rate = p.rate[k];
        long long at = (long long)k * n + i;
        double pos0 = s.position[at];
        double target = e * (equity / px);
        // numpy_step_parts.trade: the reserve's buy cap, then the reversal
        double delta = target - pos0;
        if (reserve_frac > 0.0) {
            bool cap = (delta > 0.0) && (cash - delta * px < reserve);
            double affordable = floor(fmax(cash - reserve, 0.0) / px);
            if (cap) delta = fmin(delta, affordable);
        }
        double flow = delta * px;
        double cost = fabs(flow) * rate;
        double cash1 = cash - flow - cost;
        double pos1 = pos0 + delta;
        bool reversal = (pos0 > 0.0 && target < 0.0) || (pos0 < 0.0 && target > 0.0);
        if (reversal) {
            // numpy_step_parts.reversal_trade: close, then open what cash_c - reserve pays for
            double close_cost = fabs(pos0) * px * rate;
            double cash_c = cash + pos0 * px - close_cost;
            double units = fmin(floor(fmax(cash_c - reserve, 0.0) / (px * (1.0 + rate))), fabs(target));
            double new_pos = copysign(units, target);
            double open_cost = units * px * rate;
            cash1 = cash_c - new_pos * px - open_cost;
            pos1 = new_pos;
            cost = close_cost + open_cost;
        }
        cash = cash1;
        step_cost += cost;
        s.position[at] = pos1;
        s.costs[at] = s.costs[at] + cost;
        positions[row + k] = pos1;
        costs[row + k] = cost;
    }

    // --- mark to market, reward
    double value1 = cash;
    for (int k = 0; k < k_n; ++k) value1 += s.position[(long long)k * n + i] * close_1[k];
    if (p.pi[PPI_REWARD_LOG]) {
        o.reward = value1 > 0.0 ? log(value1 / value0) : PORTFOLIO_RUIN_LOG_REWARD;
    } else {
        o.reward = (value1 - value0) / value0;
    }
    o.gross = (value1 + step_cost - value0) / value0;
    o.cost = step_cost / value0;
    o.value1 = value1;

    // --- commit
    int steps = s.step_in_episode[i] + 1;
    s.bar[i] = t1;
    s.cash[i] = cash;
    s.episode_return[i] = s.episode_return[i] + o.reward;
    s.step_in_episode[i] = steps;
    o.terminated = value1 <= 0.0;
    o.truncated = !o.terminated && (steps >= p.pi[PPI_EPISODE_LENGTH] || t1 + 1 >= p.pi[PPI_N_BARS]);
    return o;
}
