"""Each formula of docs/ENV_SPEC.md pinned on tiny hand-made markets.

Every expected number is computed by hand in the test (the arithmetic is in the comments);
nothing here calls the backend's helpers. Every env is the source design's
(EnvConfig.source_design(): 45 actions, barriers, penalties), and unless a test says otherwise
with initial_capital 1000, max_position 10, barriers off, diversity and risk penalties off, and
autoreset disabled, so that one formula is visible at a time.

Actions: a = e*9 + o*3 + k with exposure index e (0: -1, 1: -0.5, 2: 0, 3: +0.5, 4: +1),
order type o (costs 1.0, 0.5, 1.5 bps) and sub-action k.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hand_market import hand_feature, hand_market

from gpu_trading_env import EnvConfig, TradingEnv, TradingVectorEnv
from gpu_trading_env.data.market_data import MarketData

SHORT, HALF_SHORT, FLAT, HALF_LONG, LONG = range(5)
C0 = 1000.0

QUIET = {
    "initial_capital": C0,
    "max_position": 10.0,
    "barriers": False,
    "diversity_penalty": 0.0,
    "risk_penalty_scale": 0.0,
    "autoreset_mode": "disabled",
}


def act(e: int, o: int = 0, k: int = 0) -> int:
    return e * 9 + o * 3 + k


def make_env(close, open=None, start=0, n_features=4, **overrides) -> TradingVectorEnv:
    cfg = {
        **QUIET,
        "episode_length": len(close) - 1 - start,
        # the default curiosity model reads 32 dims; a 4-feature market has 7
        "curiosity_state_dims": min(32, n_features + 3),
        **overrides,
    }
    data = hand_market(close, open, n_features=n_features)
    env = TradingVectorEnv(1, "cpu", data=data, config=EnvConfig.source_design(**cfg))
    env.reset(seed=0, options={"start_index": start})
    return env


def step(env: TradingVectorEnv, a: int) -> SimpleNamespace:
    obs, reward, term, trunc, info = env.step(np.array([a], dtype=np.int64))
    return SimpleNamespace(
        obs=obs[0].copy(),
        reward=float(reward[0]),
        terminated=bool(term[0]),
        truncated=bool(trunc[0]),
        comp=info["reward_components"][0].astype(np.float64),
        value=float(info["portfolio_value"][0]),
        position=float(info["position"][0]),
        label=int(info["barrier_label"][0]),
    )


def f32(x: float) -> pytest.approx:
    """Expected value of a float32 output."""
    return pytest.approx(x, rel=2e-6, abs=1e-7)


def f64(x: float) -> pytest.approx:
    """Expected value of a float64 output (money)."""
    return pytest.approx(x, rel=1e-12, abs=1e-9)


# ------------------------------------------------------------------------------- costs


@pytest.mark.parametrize("k", [0, 1, 2])
@pytest.mark.parametrize(("o", "bps"), [(0, 1.0), (1, 0.5), (2, 1.5)])
def test_cost_per_order_type_and_k_has_no_effect(o, bps, k):
    env = make_env([100.0, 110.0, 110.0], max_position=5.0)
    r = step(env, act(LONG, o, k))
    # buy 5 at close 100: cost = 5*100*bps/1e4; cash = 1000 - 500 - cost
    cost = 5 * 100 * bps / 1e4
    v1 = 1000 - 500 - cost + 5 * 110  # marked at close[1] = 110
    assert r.position == 5.0
    assert r.value == f64(v1)
    assert r.comp[0] == f32((v1 - 1000) / 1000)
    assert r.reward == f32((v1 - 1000) / 1000)
    # sell the 5 at close 110: cost = 5*110*bps/1e4
    r = step(env, act(FLAT, o, k))
    v2 = v1 - 5 * 110 * bps / 1e4
    assert r.position == 0.0
    assert r.value == f64(v2)
    assert r.comp[0] == f32((v2 - v1) / v1)


def test_sub_action_changes_nothing_over_a_trajectory():
    close = [100.0, 103.0, 99.0, 104.0, 101.0, 98.0, 102.0]
    plan = [(LONG, 2), (HALF_SHORT, 1), (SHORT, 0), (HALF_LONG, 2), (FLAT, 1), (LONG, 0)]
    runs = []
    for k in range(3):
        env = make_env(close, barriers=True, diversity_penalty=0.1, risk_penalty_scale=0.5)
        runs.append([step(env, act(e, o, k)) for e, o in plan])
    for other in runs[1:]:
        for a, b in zip(runs[0], other, strict=True):
            assert a.value == b.value and a.position == b.position and a.label == b.label
            np.testing.assert_array_equal(a.comp, b.comp)
            np.testing.assert_array_equal(a.obs, b.obs)


# ------------------------------------------------------------------------------ reserve cap


def test_reserve_cap_buys_floor_of_affordable_units_and_charges_executed_delta():
    env = make_env([100.0, 100.0, 100.0], reserve_pct=10.0)
    r = step(env, act(LONG))
    # value_pre = 1000, reserve = 10% * 1000 = 100; target 10 would leave 1000 - 10*100 = 0 < 100
    # executed = min(10, floor((1000 - 100)/100)) = 9; cost = 9*100*1e-4 = 0.09 (not 0.10)
    v1 = 1000 - 9 * 100 - 0.09 + 9 * 100  # = 999.91
    assert r.position == 9.0
    assert r.value == f64(v1)
    assert r.comp[0] == f32((999.91 - 1000) / 1000)


def test_reserve_cap_with_non_integer_ratio():
    env = make_env([70.0, 70.0, 70.0], reserve_pct=10.0, max_position=20.0)
    r = step(env, act(LONG))
    # reserve = 100; 1000 - 20*70 = -400 < 100 -> min(20, floor(900/70) = floor(12.857) = 12)
    # cost = 12*70*1e-4 = 0.084
    assert r.position == 12.0
    assert r.value == f64(1000 - 0.084)


def test_reserve_cap_not_applied_when_cash_stays_above_reserve_or_for_sells():
    env = make_env([100.0, 100.0, 100.0], reserve_pct=10.0)
    r = step(env, act(HALF_LONG))
    # target 5: 1000 - 5*100 = 500 >= reserve 100 -> all 5 bought, cost 5*100*1e-4 = 0.05
    assert r.position == 5.0
    assert r.value == f64(1000 - 0.05)
    env = make_env([100.0, 100.0, 100.0], reserve_pct=10.0)
    r = step(env, act(SHORT))
    # a sell (delta = -10) is never capped; cost 10*100*1e-4 = 0.1
    assert r.position == -10.0
    assert r.value == f64(1000 - 0.1)


def test_no_reserve_lets_cash_go_negative():
    env = make_env([100.0, 100.0, 100.0])
    r = step(env, act(LONG))
    # cash = 1000 - 10*100 - 0.1 = -0.1; value = -0.1 + 10*100
    assert r.position == 10.0
    assert r.value == f64(999.9)


# ------------------------------------------------------------------------------ reversals


def test_reversal_long_to_short_opens_affordable_floor():
    env = make_env([100.0, 80.0, 90.0, 90.0])
    step(env, act(LONG))  # cash = 1000 - 1000 - 0.1 = -0.1, position 10
    r = step(env, act(SHORT))
    # close 10 at 80: cash_c = -0.1 + 10*80 - 10*80*1e-4 = -0.1 + 800 - 0.08 = 799.82
    # n = floor(799.82 / (80*1.0001)) = floor(799.82/80.008) = floor(9.99675) = 9 (not 10)
    # open -9: cash = 799.82 + 9*80 - 9*80*1e-4 = 799.82 + 720 - 0.072 = 1519.748
    cash = 799.82 + 720 - 0.072
    v_t = -0.1 + 10 * 80  # V(1) = 799.9 (before the trade, at close 80)
    v1 = cash - 9 * 90  # marked at close[2] = 90 -> 709.748
    assert r.position == -9.0
    assert r.value == f64(v1)
    assert r.comp[0] == f32((v1 - v_t) / v_t)


def test_reversal_short_to_long_opens_affordable_floor():
    env = make_env([100.0, 120.0, 120.0, 120.0])
    step(env, act(SHORT))  # cash = 1000 + 1000 - 0.1 = 1999.9, position -10
    r = step(env, act(LONG, 2))  # aggressive: 1.5 bps
    # close: cash_c = 1999.9 - 10*120 - 10*120*1.5e-4 = 1999.9 - 1200 - 0.18 = 799.72
    # n = floor(799.72 / (120*1.00015)) = floor(799.72/120.018) = floor(6.6634) = 6
    # open 6: cash = 799.72 - 720 - 6*120*1.5e-4 = 799.72 - 720 - 0.108 = 79.612
    assert r.position == 6.0
    assert r.value == f64(79.612 + 6 * 120)


def test_reversal_affordability_includes_the_cost_rate():
    env = make_env([100.0, 133.315, 133.315, 133.315])
    step(env, act(SHORT))  # cash = 1000 + 1000 - 0.1 = 1999.9, position -10
    r = step(env, act(LONG))
    # cash_c = 1999.9 - 10*133.315 - 10*133.315*1e-4 = 1999.9 - 1333.15 - 0.133315 = 666.616685
    # cash_c/fill = 5.00031 but n = floor(666.616685 / (133.315*1.0001)) = floor(4.99981) = 4
    # cash = 666.616685 - 4*133.315 - 4*133.315*1e-4 = 666.616685 - 533.26 - 0.053326
    assert r.position == 4.0
    assert r.value == f64(666.616685 - 533.26 - 0.053326 + 4 * 133.315)


def test_reversal_caps_at_target_size():
    env = make_env([100.0, 100.0, 100.0, 100.0])
    step(env, act(LONG))  # cash -0.1, position 10
    r = step(env, act(HALF_SHORT))
    # cash_c = -0.1 + 1000 - 0.1 = 999.8; n = floor(999.8/100.01) = 9; min(9, |-5|) = 5
    # cash = 999.8 + 500 - 0.05 = 1499.75
    assert r.position == -5.0
    assert r.value == f64(1499.75 - 500)


def test_reversal_that_cannot_afford_one_unit_ends_flat():
    env = make_env([100.0, 0.016, 0.016, 0.016], barriers=True)
    step(env, act(LONG, 2))  # cash = 1000 - 1000 - 10*100*1.5e-4 = -0.15
    r = step(env, act(SHORT, 2))
    # close 10 at 0.016: cash_c = -0.15 + 0.16 - 0.16*1.5e-4 = 0.009976
    # n = floor(0.009976 / (0.016*1.00015)) = floor(0.6234) = 0 -> nothing opened: flat
    assert r.position == 0.0
    assert r.value == f64(-0.15 + 0.16 - 0.000024)
    assert r.label == 0 and not r.terminated


def test_reversal_with_reserve_uses_pre_trade_value():
    env = make_env([100.0, 100.0, 100.0, 100.0], reserve_pct=50.0)
    r = step(env, act(HALF_LONG))
    # reserve = 500; 1000 - 5*100 = 500, not < 500 -> 5 bought, cost 0.05; cash 499.95
    assert r.position == 5.0
    r = step(env, act(SHORT))
    # value_pre = 499.95 + 500 = 999.95; reserve = 499.975
    # cash_c = 499.95 + 500 - 0.05 = 999.9; n = floor((999.9 - 499.975)/100.01) = floor(4.9987) = 4
    # cash = 999.9 + 400 - 0.04 = 1399.86
    assert r.position == -4.0
    assert r.value == f64(1399.86 - 400)


# ------------------------------------------------------------------------------ barriers


def barrier_env(close, **kw):
    # profit 100 bps (1%), stop 50 bps (0.5%), reward scale 1 -> barrier_scale +-0.5
    return make_env(close, barriers=True, profit_target_bps=100.0, stop_loss_bps=50.0, **kw)


@pytest.mark.parametrize(
    ("side", "px", "label"),
    [
        (LONG, 101.5, 1),  # 101.5 >= 100*1.01 = 101 -> profit
        (LONG, 101.0, 1),  # exactly on the barrier counts
        (LONG, 99.4, -1),  # 99.4 <= 100*0.995 = 99.5 -> stop
        (LONG, 99.5, -1),
        (LONG, 100.9, 0),  # between the barriers
        (SHORT, 98.5, 1),  # short profit is BELOW entry: 98.5 <= 100*0.99 = 99
        (SHORT, 99.0, 1),
        (SHORT, 100.6, -1),  # short stop above entry: 100.6 >= 100*1.005 = 100.5
        (SHORT, 99.2, 0),
        (SHORT, 101.5, -1),  # a long's profit price is a short's stop
    ],
)
def test_profit_and_stop_barriers(side, px, label):
    env = barrier_env([100.0, px, 97.0, 97.0])
    r0 = step(env, act(side))
    assert r0.label == 0 and not r0.terminated  # entry = fill price: nothing hit on opening
    r = step(env, act(side))  # hold; checked at fill = close[1] = px
    assert r.label == label
    assert r.terminated == (label != 0)
    assert not r.truncated
    # pnl of the holding step: V(1) at px, V(2) at 97 (cash is unchanged by holding)
    units = 10.0 if side == LONG else -10.0
    cash = 1000 - units * 100 - 0.1
    v_t, v1 = cash + units * px, cash + units * 97.0
    pnl = (v1 - v_t) / v_t
    scale = {1: 0.5, -1: -0.5, 0: 0.0}[label]
    assert r.comp[0] == f32(pnl)
    assert r.comp[1] == f32(pnl * scale)
    assert r.reward == f32(pnl * (1 + scale))


def test_barrier_reward_scale():
    env = barrier_env([100.0, 102.0, 104.0, 104.0], barrier_reward_scale=3.0)
    step(env, act(LONG))
    r = step(env, act(LONG))
    # cash = -0.1; V(1) = -0.1 + 1020 = 1019.9; V(2) = -0.1 + 1040 = 1039.9
    pnl = 20 / 1019.9
    assert r.label == 1
    assert r.comp[1] == f32(pnl * 0.5 * 3.0)  # profit: +0.5*scale
    assert r.reward == f32(pnl * 2.5)


@pytest.mark.parametrize("side", [LONG, SHORT])
def test_time_barrier_fires_once_and_episode_goes_on(side):
    env = barrier_env([100.0] * 8, max_holding_bars=2)
    labels = [step(env, act(side)) for _ in range(5)]
    # entry bar 0; time barrier at t >= 0 + 2, i.e. on the third step (t = 2), once
    assert [r.label for r in labels] == [0, 0, 2, 0, 0]
    assert not any(r.terminated or r.truncated for r in labels)
    assert labels[2].comp[1] == 0.0  # time barrier: barrier_scale 0


def test_no_recheck_after_firing_until_next_opening():
    close = [100.0, 100.0, 100.0, 102.0, 102.0, 102.0, 102.0, 104.0, 104.0]
    env = barrier_env(close, max_holding_bars=2)
    got = [step(env, act(LONG)).label for _ in range(4)]
    # time barrier at t=2; at t=3 the price 102 is past the profit barrier 101 but not checked
    assert got == [0, 0, 2, 0]
    assert step(env, act(FLAT)).label == 0  # t=4: flat clears the barrier
    assert step(env, act(LONG)).label == 0  # t=5: opens again, entry 102
    assert step(env, act(LONG)).label == 0  # t=6: 102 < 102*1.01 = 103.02
    r = step(env, act(LONG))  # t=7: 104 >= 103.02 -> profit on the new barrier
    assert r.label == 1 and r.terminated


def test_barrier_kept_while_adding():
    env = barrier_env([100.0, 100.5, 101.2, 101.2])
    step(env, act(HALF_LONG))  # open 5 at 100: entry 100
    assert step(env, act(LONG)).label == 0  # add 5 at 100.5: entry stays 100
    # 101.2 >= 100*1.01 = 101 -> profit (an entry reset to 100.5 would need 101.505)
    r = step(env, act(LONG))
    assert r.label == 1 and r.terminated


def test_barrier_kept_while_reducing():
    env = barrier_env([100.0, 100.5, 101.2, 101.2])
    step(env, act(LONG))  # entry 100
    assert step(env, act(HALF_LONG)).label == 0  # reduce to 5 at 100.5
    assert step(env, act(HALF_LONG)).label == 1  # 101.2 >= 101


def test_short_barrier_kept_while_reducing():
    env = barrier_env([100.0, 99.8, 100.6, 100.6])
    step(env, act(SHORT))  # entry 100
    assert step(env, act(HALF_SHORT)).label == 0  # 99.8: inside (99, 100.5)
    # stop at 100*1.005 = 100.5 (entry kept); an entry of 99.8 would need 100.299
    r = step(env, act(HALF_SHORT))
    assert r.label == -1 and r.terminated


def test_barrier_cleared_when_flat_and_set_at_new_entry():
    env = barrier_env([100.0, 100.0, 101.5, 101.5, 102.0, 102.0])
    step(env, act(LONG))  # entry 100
    assert step(env, act(FLAT)).label == 0  # flat at t=1: cleared
    assert step(env, act(FLAT)).label == 0  # t=2 at 101.5: flat, nothing armed
    assert step(env, act(LONG)).label == 0  # t=3: open at 101.5, entry 101.5
    # t=4: 102 < 101.5*1.01 = 102.515 -> no profit (the old entry 100 would have fired)
    assert step(env, act(LONG)).label == 0


def test_reversal_rearms_barrier_at_new_side():
    env = barrier_env([100.0, 100.2, 99.1, 99.1])
    step(env, act(LONG))  # long, entry 100
    assert step(env, act(SHORT)).label == 0  # reversal at 100.2: short, entry 100.2
    # short profit: 99.1 <= 100.2*0.99 = 99.198 (the long's stop would have been 99.5: label -1)
    assert step(env, act(SHORT)).label == 1


def test_short_opened_from_flat_gets_a_barrier():
    env = barrier_env([100.0, 98.0, 98.0])
    step(env, act(HALF_SHORT))
    r = step(env, act(HALF_SHORT))
    assert r.label == 1 and r.terminated


def test_barriers_off_never_label():
    env = make_env([100.0, 150.0, 50.0, 50.0], max_holding_bars=1)
    assert [step(env, act(LONG)).label for _ in range(3)] == [0, 0, 0]


def test_barrier_with_next_open_fill_is_checked_at_the_open():
    # closes stay at 100 but the fill of the second step is open[2] = 103.1
    close = [100.0, 100.0, 101.0, 100.0]
    opens = [100.0, 102.0, 103.1, 100.0]
    env = barrier_env(close, open=opens, fill="next_open")
    r = step(env, act(LONG))  # entry = open[1] = 102
    assert r.label == 0
    r = step(env, act(LONG))  # 103.1 >= 102*1.01 = 103.02 -> profit
    assert r.label == 1 and r.terminated
    # cash = 1000 - 1020 - 0.102 = -20.102; V(1) = -20.102 + 1000; V(2) = -20.102 + 1010
    pnl = 10 / 979.898
    assert r.comp[0] == f32(pnl)
    assert r.comp[1] == f32(0.5 * pnl)


# ------------------------------------------------------------------------------ fills


def test_next_open_fill_trades_at_next_open():
    close = [100.0, 100.0, 100.0, 100.0]
    opens = [100.0, 102.0, 99.0, 100.0]
    env = make_env(close, open=opens, fill="next_open")
    r = step(env, act(LONG))
    # buy 10 at open[1] = 102: cost 10*102*1e-4 = 0.102; cash = 1000 - 1020 - 0.102 = -20.102
    # V(1) = -20.102 + 10*close[1] = 979.898
    assert r.value == f64(979.898)
    assert r.comp[0] == f32(-20.102 / 1000)
    r = step(env, act(FLAT))
    # sell 10 at open[2] = 99: cash = -20.102 + 990 - 0.099 = 969.799
    assert r.position == 0.0
    assert r.value == f64(969.799)


def test_close_fill_trades_at_this_close():
    close = [100.0, 100.0, 100.0, 100.0]
    opens = [100.0, 102.0, 99.0, 100.0]
    env = make_env(close, open=opens)
    assert step(env, act(LONG)).value == f64(999.9)  # 10 at 100, cost 0.1
    assert step(env, act(FLAT)).value == f64(999.8)  # 10 at 100, cost 0.1


def test_next_open_reversal_uses_open():
    close = [100.0, 100.0, 100.0, 100.0]
    opens = [100.0, 100.0, 80.0, 100.0]
    env = make_env(close, open=opens, fill="next_open")
    step(env, act(LONG))  # 10 at open[1] = 100, cash -0.1
    r = step(env, act(SHORT))
    # at open[2] = 80: cash_c = -0.1 + 800 - 0.08 = 799.82; n = floor(799.82/80.008) = 9
    # cash = 799.82 + 720 - 0.072 = 1519.748; V = 1519.748 - 9*close[2]
    assert r.position == -9.0
    assert r.value == f64(1519.748 - 900)


# ------------------------------------------------------------------------------ diversity


def diversity_env(n_steps, **kw):
    cfg = {"diversity_penalty": 0.1, "diversity_window": 4, **kw}
    return make_env([100.0] * (n_steps + 1), **cfg)


def test_diversity_penalty_threshold_min_entries_and_ring():
    env = diversity_env(10)
    seq = [FLAT, FLAT, FLAT, FLAT, SHORT, LONG, SHORT, LONG, SHORT, SHORT]
    got = [step(env, act(e)).comp[3] for e in seq]
    expected = [
        0.0,  # ring f: 1 entry < 3
        0.0,  # ff: 2 entries < 3 (entropy 0)
        -0.1,  # fff: H = 0 < 1
        -0.1,  # ffff
        -0.1,  # fffs: H = -(.75 log2 .75 + .25 log2 .25) = 0.811 < 1
        0.0,  # ffsl: H = 1.5
        0.0,  # fsls: H = 1.5
        0.0,  # slsl: H = 1.0 exactly -> not below the threshold
        0.0,  # lsls: H = 1.0
        -0.1,  # slss (window 4 drops the oldest): H = 0.811
    ]
    assert got == [f32(x) for x in expected]


def test_diversity_exactly_at_threshold_and_just_below():
    env = diversity_env(4, diversity_window=100)
    got = [step(env, act(e)).comp[3] for e in (SHORT, LONG, SHORT, LONG)]
    # s: <3; sl: <3; sls: H(2/3, 1/3) = 0.918 < 1 -> penalty; slsl: H = 1.0 -> none
    assert got == [0.0, 0.0, f32(-0.1), 0.0]


def test_diversity_custom_threshold_and_min_entries():
    env = diversity_env(4, diversity_threshold_bits=0.0)
    assert [step(env, act(FLAT)).comp[3] for _ in range(4)] == [0.0] * 4  # H = 0 is not < 0
    env = diversity_env(6, diversity_window=10, diversity_min_entries=5, diversity_penalty=0.25)
    got = [step(env, act(LONG)).comp[3] for _ in range(6)]
    assert got == [0.0, 0.0, 0.0, 0.0, -0.25, -0.25]


def test_diversity_ring_empties_on_reset():
    env = diversity_env(6)
    for _ in range(3):
        step(env, act(FLAT))
    env.reset(options={"start_index": 0})
    got = [step(env, act(FLAT)).comp[3] for _ in range(3)]
    assert got == [0.0, 0.0, f32(-0.1)]


def test_half_exposures_map_to_short_and_long_categories():
    env = diversity_env(4, diversity_window=100)
    got = [step(env, act(e)).comp[3] for e in (HALF_SHORT, HALF_LONG, SHORT, LONG)]
    assert got == [0.0, 0.0, f32(-0.1), 0.0]  # same as s, l, s, l


# ------------------------------------------------------------------------------ risk


def test_risk_penalty_uses_pre_trade_position_feature():
    env = make_env([100.0, 120.0, 120.0, 120.0, 120.0], risk_penalty_scale=0.5)
    r = step(env, act(LONG))
    assert r.comp[2] == 0.0  # position 0 before the trade
    r = step(env, act(LONG))
    # pos_feat = 10 / (1000/120) = 1.2 -> -0.5*(1.2 - 0.8) = -0.2
    assert r.comp[2] == f32(-0.2)
    r = step(env, act(SHORT))  # still 10 long before this trade: -0.2
    assert r.comp[2] == f32(-0.2)
    # the reversal opened floor((-0.1 + 1200 - 0.12)/120.012) = floor(9.997) = 9 short
    r = step(env, act(FLAT))
    # pos_feat = -9/(1000/120) = -1.08 -> -0.5*(1.08 - 0.8) = -0.14
    assert r.comp[2] == f32(-0.14)


def test_risk_penalty_below_threshold_and_custom_parameters():
    env = make_env([100.0, 100.0, 100.0], risk_penalty_scale=0.5, max_position=8.0)
    step(env, act(LONG))
    assert step(env, act(LONG)).comp[2] == 0.0  # pos_feat 8/(1000/100) = 0.8, not > 0.8
    env = make_env([100.0, 100.0, 100.0], risk_penalty_scale=2.0, risk_threshold=0.25)
    step(env, act(HALF_SHORT))
    # pos_feat = -5/10 = -0.5 -> -2*(0.5 - 0.25) = -0.5
    assert step(env, act(HALF_SHORT)).comp[2] == f32(-0.5)


# ------------------------------------------------------------------------------ curiosity


def hand_obs(t, value, position, close_t, spread=0.0, n_features=29):
    """features[t] + [V/C0, position/(C0/close), spread], by the ENV_SPEC formula."""
    feats = [hand_feature(t, j) for j in range(n_features)]
    return np.array(feats + [value / C0, position / (C0 / close_t), spread], dtype=np.float64)


def forward_model_mse(w1, b1, w2, b2, s, category, s_next):
    x = np.concatenate([s[:32], np.eye(3)[category]]).astype(np.float64)
    h = w1.astype(np.float64) @ x + b1
    h = np.where(h > 0, h, 0.01 * h)
    pred = w2.astype(np.float64) @ h + b2
    return float(np.mean((pred - s_next[:32]) ** 2))


def curiosity_weights(scale):
    rng = np.random.default_rng(7)
    w1 = (rng.normal(0, 0.1, (64, 35)) * scale).astype(np.float32)
    b1 = (rng.normal(0, 0.1, 64) * scale).astype(np.float32)
    w2 = (rng.normal(0, 0.1, (32, 64)) * scale).astype(np.float32)
    b2 = (rng.normal(0, 0.1, 32) * scale).astype(np.float32)
    return w1, b1, w2, b2


def test_curiosity_bonus_from_given_weights():
    close = [100.0, 101.0, 102.0, 103.0]
    env = make_env(close, n_features=29, max_position=5.0, curiosity_scale=0.5)
    w = curiosity_weights(1.0)
    env.set_curiosity_weights(*w)
    r = step(env, act(LONG))
    # buy 5 at 100: cash = 1000 - 500 - 0.05 = 499.95; V(1) = 499.95 + 5*101 = 1004.95
    s0 = hand_obs(0, 1000.0, 0.0, 100.0)
    s1 = hand_obs(1, 1004.95, 5.0, 101.0)
    np.testing.assert_allclose(r.obs, s1, rtol=1e-6)
    mse = forward_model_mse(*w, s0, 2, s1)  # category long = 2
    assert mse < 0.1  # below the cap
    assert r.comp[4] == pytest.approx(0.5 * mse, rel=1e-4)
    r = step(env, act(SHORT))
    # reversal at 101: cash_c = 499.95 + 505 - 0.0505 = 1004.8995; n = floor(1004.8995/101.0101)
    # = 9 -> min(9, 5) = 5 short; cash = 1004.8995 + 505 - 0.0505 = 1509.849; V(2) at 102
    s2 = hand_obs(2, 1509.849 - 5 * 102, -5.0, 102.0)
    np.testing.assert_allclose(r.obs, s2, rtol=1e-6)
    mse = forward_model_mse(*w, s1, 0, s2)  # category short = 0
    assert r.comp[4] == pytest.approx(0.5 * mse, rel=1e-4)
    assert r.reward == pytest.approx(float(np.sum(r.comp)), abs=1e-6)


def test_curiosity_bonus_is_capped_and_off_until_set():
    close = [100.0, 101.0, 102.0, 103.0]
    env = make_env(close, n_features=29, curiosity_scale=0.5)
    assert step(env, act(FLAT)).comp[4] == 0.0  # no weights yet
    w = curiosity_weights(30.0)
    env.set_curiosity_weights(*w)
    s1, s2 = hand_obs(1, 1000.0, 0.0, 101.0), hand_obs(2, 1000.0, 0.0, 102.0)
    assert forward_model_mse(*w, s1, 1, s2) > 0.1
    assert step(env, act(FLAT)).comp[4] == f32(0.1 * 0.5)  # min(mse, 0.1) * 0.5
    env.clear_curiosity_weights()
    assert step(env, act(FLAT)).comp[4] == 0.0


def test_curiosity_weights_torch_layout_checked():
    env = make_env([100.0] * 4, n_features=29)
    w1, b1, w2, b2 = curiosity_weights(1.0)
    with pytest.raises(ValueError, match="w1"):
        env.set_curiosity_weights(w1.T, b1, w2, b2)


# ------------------------------------------------------------------------------ sums


def test_components_sum_to_reward_on_a_random_trajectory():
    data = MarketData.synthetic("gbm", n_bars=400, seed=3)
    config = EnvConfig.source_design(
        episode_length=40,
        max_holding_bars=5,
        profit_target_bps=30.0,
        stop_loss_bps=20.0,
        diversity_window=6,
    )
    env = TradingVectorEnv(8, "cpu", data=data, config=config)
    rng = np.random.default_rng(0)
    w1, b1, w2, b2 = (
        rng.normal(0, 0.05, s).astype(np.float32) for s in ((64, 35), (64,), (32, 64), (32,))
    )
    env.set_curiosity_weights(w1, b1, w2, b2)
    env.reset(seed=1)
    seen = np.zeros(5, dtype=bool)
    for _ in range(120):
        _, reward, _, _, info = env.step(rng.integers(0, 45, 8))
        comp = info["reward_components"]
        assert comp.shape == (8, 5) and comp.dtype == np.float32
        np.testing.assert_allclose(comp.sum(axis=1), reward, rtol=1e-5, atol=1e-6)
        seen |= (comp != 0).any(axis=0)
    assert seen.all()  # every component was exercised


def test_reward_is_pnl_times_one_plus_barrier_scale_minus_risk_plus_diversity():
    # every component but curiosity active in one step: a stop hit while over-exposed
    env = make_env(
        [100.0, 99.0, 98.0, 98.0, 98.0],
        barriers=True,
        risk_penalty_scale=0.5,
        diversity_penalty=0.1,
        diversity_min_entries=2,
    )
    step(env, act(LONG))
    r = step(env, act(LONG))
    # cash -0.1; V(1) = -0.1 + 990 = 989.9; V(2) = -0.1 + 980 = 979.9; pnl = -10/989.9
    pnl = -10 / 989.9
    risk = -0.5 * (10 / (1000 / 99) - 0.8)  # pos_feat 0.99 -> -0.095
    assert r.label == -1
    assert r.comp == pytest.approx([pnl, -0.5 * pnl, risk, -0.1, 0.0], rel=2e-6, abs=1e-7)
    assert r.reward == f32(pnl * (1 - 0.5) + risk - 0.1)


# ------------------------------------------------------------------------------ episode end


def test_barrier_terminates_not_truncates_even_on_last_step():
    env = barrier_env([100.0, 102.0, 102.0], episode_length=2)
    step(env, act(LONG))
    r = step(env, act(LONG))  # profit and the episode_length in the same step
    assert r.terminated and not r.truncated


def test_truncated_after_episode_length():
    env = make_env([100.0] * 10, episode_length=3)
    got = [step(env, act(FLAT)) for _ in range(3)]
    assert [(r.terminated, r.truncated) for r in got] == [(False, False)] * 2 + [(False, True)]


@pytest.mark.parametrize(("start", "n_steps"), [(3, 2), (4, 1)])
def test_truncated_at_end_of_data(start, n_steps):
    # 6 bars (0..5); a step at t needs t+1; truncated when the next step would need bar 6
    env = make_env([100.0] * 6, start=start, episode_length=5)
    got = [step(env, act(LONG)) for _ in range(n_steps)]
    assert [r.truncated for r in got] == [False] * (n_steps - 1) + [True]
    assert not any(r.terminated for r in got)


def test_ruin_terminates():
    env = make_env([100.0, 250.0, 250.0])
    r = step(env, act(SHORT))
    # short 10 at 100: cash = 1000 + 1000 - 0.1 = 1999.9; V(1) = 1999.9 - 2500 = -500.1 <= 0
    assert r.value == f64(-500.1)
    assert r.terminated and not r.truncated
    assert r.comp[0] == f32(-1.5001)


def test_time_barrier_does_not_end_a_single_env_episode():
    env = TradingEnv(
        data=hand_market([100.0, 100.0, 100.0, 102.0, 102.0]),
        config=EnvConfig.source_design(
            initial_capital=C0,
            max_position=10.0,
            max_holding_bars=1,
            episode_length=4,
            curiosity_state_dims=7,
        ),
    )
    env.reset(seed=0, options={"start_index": 0})
    labels = []
    for _ in range(3):
        _, _, te, tr, info = env.step(act(LONG))
        labels.append(info["barrier_label"])
        assert not te and not tr
    assert labels == [0, 2, 0]


# ------------------------------------------------------------------------------ observation


def test_observation_formula():
    close = [100.0, 100.0, 100.0, 125.0, 130.0]
    env = make_env(close, start=2, spread=0.0003)
    obs = env.observe()
    # bar 2: features[2] + [1000/1000, 0/(1000/100), spread]
    np.testing.assert_allclose(obs[0], hand_obs(2, 1000.0, 0.0, 100.0, 0.0003, 4), rtol=1e-7)
    r = step(env, act(HALF_LONG))
    # buy 5 at 100: cash = 499.95; bar 3: V = 499.95 + 5*125 = 1124.95; pos feature 5/(1000/125)
    np.testing.assert_allclose(r.obs, hand_obs(3, 1124.95, 5.0, 125.0, 0.0003, 4), rtol=1e-7)
    assert r.obs[-2] == f32(0.625)
    assert r.obs.dtype == np.float32


def test_observation_of_a_short():
    env = make_env([100.0, 80.0, 80.0])
    r = step(env, act(SHORT))
    # cash 1999.9; V = 1999.9 - 800 = 1199.9; position feature = -10/(1000/80) = -0.8
    np.testing.assert_allclose(r.obs, hand_obs(1, 1199.9, -10.0, 80.0, 0.0, 4), rtol=1e-7)


# ------------------------------------------------------------------------------ max_position


@pytest.mark.parametrize(
    ("close", "capital", "expected"),
    [
        ([100.0, 200.0, 300.0, 400.0, 50.0], 1000.0, 5.0),  # median 200 -> floor(5) = 5
        ([100.0, 200.0, 300.0, 400.0], 1000.0, 4.0),  # median 250 -> floor(4) = 4
        ([300.0, 300.0, 300.0], 1000.0, 3.0),  # floor(3.33) = 3
        ([100.0, 200.0, 300.0, 400.0, 50.0], 100.0, 1.0),  # floor(0.5) = 0 -> at least 1
    ],
)
def test_max_position_default(close, capital, expected):
    config = EnvConfig.source_design(
        initial_capital=capital, episode_length=1, curiosity_state_dims=7, autoreset_mode="disabled"
    )
    env = TradingVectorEnv(1, "cpu", data=hand_market(close), config=config)
    assert env.max_position == expected
    env.reset(seed=0, options={"start_index": 0})
    r = step(env, act(HALF_LONG))
    assert r.position == expected * 0.5  # fractional units allowed


def test_max_position_explicit():
    env = make_env([100.0, 100.0, 100.0], max_position=2.5)
    assert env.max_position == 2.5
    assert step(env, act(LONG)).position == 2.5


def test_source_design_layout():
    """The source design's preset: 45 actions, the triple barrier and both penalties on; the
    defaults (the env train recommends) hold three exposures at one order type."""
    cfg = EnvConfig.source_design()
    assert cfg.n_actions == 45 and cfg.barriers
    assert (cfg.diversity_penalty, cfg.risk_penalty_scale, cfg.sub_actions) == (0.1, 0.5, 3)
    assert cfg.order_cost_bps == (1.0, 0.5, 1.5)
    assert cfg.exposure_levels == (-1.0, -0.5, 0.0, 0.5, 1.0)
    assert EnvConfig.source_design(barriers=False, episode_length=7) == cfg.replace(
        barriers=False, episode_length=7
    )
    with pytest.raises(TypeError, match=r"no field\(s\) \['barrier'\]"):
        EnvConfig.source_design(barrier=False)
    assert EnvConfig().n_actions == 3 and not EnvConfig().barriers
    assert cfg.decode_action(act(HALF_LONG, 2, 1)) == (HALF_LONG, 2, 1)
    assert cfg.encode_action(SHORT, 1, 2) == act(SHORT, 1, 2)


def test_state_codes_that_the_reference_step_computes_with():
    # numpy_backend builds labels as profit - stop + 2 * time and fires barriers by += 1.
    from gpu_trading_env.core import constants as state

    assert (state.BARRIER_NONE, state.BARRIER_ARMED, state.BARRIER_FIRED) == (0, 1, 2)
    assert (state.LABEL_NONE, state.LABEL_PROFIT, state.LABEL_STOP, state.LABEL_TIME) == (
        0,
        1,
        -1,
        2,
    )
    assert state.RUNNING == 0


# ------------------------------------------------------------------ the worked example

# docs/ENV_SPEC.md, "Worked example": C0 10000, 10 units, barriers 100/50 bps, the default
# diversity and risk settings, curiosity off, closes 100, 101, 100, 99.4.
WORKED = {
    "initial_capital": 10_000.0,
    "diversity_penalty": 0.1,
    "risk_penalty_scale": 0.5,
    "profit_target_bps": 100.0,
    "stop_loss_bps": 50.0,
}
WORKED_CLOSE = [100.0, 101.0, 100.0, 99.4, 99.0]


def test_the_worked_example_with_barriers() -> None:
    env = make_env(WORKED_CLOSE, barriers=True, **WORKED)
    one = step(env, act(LONG))  # 36: buy 10 at 100, cost 0.1; V 10000 -> 10009.9
    assert one.value == f64(10_009.9) and one.reward == f32(9.9 / 10_000)
    assert one.label == 0 and not one.terminated
    two = step(env, act(HALF_LONG))  # 27: sell 5 at 101, the profit barrier fires at 101
    pnl = (9_504.8495 + 5 * 100 - 10_009.9) / 10_009.9
    assert two.label == 1 and two.terminated
    assert list(two.comp[:2]) == [f32(pnl), f32(0.5 * pnl)] and two.reward == f32(1.5 * pnl)


def test_the_worked_example_reversal_without_barriers() -> None:
    env = make_env(WORKED_CLOSE, **WORKED)
    step(env, act(LONG))
    step(env, act(HALF_LONG))  # pos 5, cash 9504.8495, V(2) 10004.8495
    three = step(env, act(SHORT))  # 0: a reversal to -10 units at 100
    pnl = (11_004.6995 - 10 * 99.4 - 10_004.8495) / 10_004.8495
    assert three.position == -10.0 and three.value == f64(10_010.6995)
    # ring [long, long, short]: H = 0.918 bits < 1 with 3 entries; |pos_feat| 0.05: no risk
    assert list(three.comp) == [f32(pnl), 0.0, 0.0, f32(-0.1), 0.0]
    assert three.reward == f32(pnl - 0.1)
