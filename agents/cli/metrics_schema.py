"""The ``schema`` key of a report's metrics.json (``train``, ``eval``, ``backtest``: one
instrument; ``walkforward``; ``train`` of several instruments) and of sweep.json: what each
top-level key holds, and the unit of each field of a figures block
(``gpu_trading_env.reports.metrics.METRIC_UNITS``, a portfolio backtest's
:data:`PORTFOLIO_UNITS`)."""

from __future__ import annotations

from typing import Any

from gpu_trading_env.reports.metrics import METRIC_UNITS

__all__ = [
    "METRICS_KEYS",
    "PORTFOLIO_BACKTEST_KEYS",
    "PORTFOLIO_TRAIN_KEYS",
    "PORTFOLIO_WALKFORWARD_KEYS",
    "PORTFOLIO_UNITS",
    "SWEEP_KEYS",
    "WALKFORWARD_KEYS",
    "metrics_schema",
]

_FIGURES = "figures block (fields and units: schema.units)"

# Every top-level key a one-instrument report's metrics.json may hold, in words.
METRICS_KEYS: dict[str, str] = {
    "schema": "this description",
    "instrument": "the evaluated instrument's name",
    "episodes": "env episodes the backtest ran over the evaluated bars (count)",
    "ruined_at_bar": "the evaluated bar at which the value fell to 0 or below, after which the "
    "equity is held at 0 (index; null without a ruin)",
    "ruin_value": "the value at the ruin over the initial capital, before the floor (fraction; "
    "null without a ruin)",
    "max_position": "the position at full exposure with sizing='units' (units of the "
    "instrument; null with sizing='equity')",
    "strategy": f"the deployed policy on the evaluated bars, costs in: {_FIGURES}",
    "buy_and_hold": f"holding the instrument long over the same bars, costs in: {_FIGURES}",
    "buy_and_hold_frictionless": f"the same without costs: {_FIGURES}",
    "synthetic_data": "whether the data is the built-in synthetic market (bool)",
    "bars_per_year": "bars a year used to annualise (count)",
    "data": "the data: source ('synthetic', 'file' or 'dataframe'), files (paths), "
    "synthetic_kind and synthetic_seed (null on other data), warmup_bars (bars of each "
    "instrument used for the features' warm-up, before the dates given), instruments (name, "
    "bars, start and end: ISO 8601 timestamps of the first and last bar), price_basis (which "
    "close a bar file's prices are: adjusted or raw; null on other data), description (words)",
    "device": "the device trained on",
    "num_envs": "parallel envs trained in (count)",
    "timesteps": "env steps trained (count)",
    "train_seconds": "wall-clock seconds of training",
    "env_steps_per_second": "timesteps / train_seconds; null where nothing was trained",
    "seed": "the run's random seed",
    "instruments": "trained: the instruments trained on; evaluated: the one evaluated",
    "model_selection": "how the kept snapshot was chosen, in words",
    "cross_fit": "the second network of a cross-fitted run (bars, seconds), or null",
    "kept_policy": "the deployed policy: 'network', 'flat', 'hold long' or 'hold short'",
    "deployment": "what was deployed and why: kept, outcome, headline, details, trained",
    "baseline": "the parameter-free policy chosen on the training bars and its test; Sharpe "
    "differences with their interval (level: one-sided confidence, block: bars)",
    "deflated_sharpe": "deflated Sharpe ratio of the network's validation returns "
    "(dsr: a probability; sr, sr0: per-bar Sharpe ratios), or null",
    "detectable_edge": "the smallest annualised Sharpe edge over the baseline the gate "
    "detects with the given power at its level in the validation bars (sharpe, bars, level, "
    "power, trials, per_year; null where the bars are too few)",
    "overfitting_probability": "the probability of backtest overfitting (CSCV) of the choice "
    "among snapshots and baselines (pbo: fraction, or null with the reason it is not computable)",
    "fallback_test": "the validation test that chose network or baseline (Sharpe differences, "
    "annualised, with their intervals and p-values)",
    "network_strategy": f"the selected snapshot out of sample: {_FIGURES}; null where no "
    "network was trained or where it is the deployed policy (its figures are strategy's)",
    "last_model_strategy": f"the last snapshot out of sample: {_FIGURES}; null where none was "
    "trained or where it is the selected snapshot (its figures are network_strategy's, or "
    "strategy's)",
    "validation": "the deployed policy's backtest on the validation window (strategy, "
    "buy_and_hold, ...: figures blocks), its bars and first and last date",
    "order_cost_bps": "cost of each order type, basis points of the traded notional",
    "inputs": "the input selection: kept inputs, p_value, regime_p_value, bars",
    "agent_return_vs_known_rule": "strategy's total_return / the known rule's (ratio)",
    "agent_sharpe_vs_known_rule": "strategy's Sharpe / the known rule's (ratio)",
    "known_rule": f"the planted market's known rule: strategy ({_FIGURES}) and exposure",
    "learning_curve": "timesteps (env steps), mean_episode_return (reward units, last 100 "
    "episodes), evaluations (each snapshot's validation and test Sharpe) and selected_step",
    "model": "the saved model evaluated (path)",
    "rule": "the fixed rule backtested",
    "exposure": "the rule's exposure (notional / value, in [-1, 1])",
}


# Every top-level key of walkforward's metrics.json, in words.
WALKFORWARD_KEYS: dict[str, str] = {
    "schema": "this description",
    "instrument": "the instrument walked forward",
    "synthetic_data": "whether the data is the built-in synthetic market (bool)",
    "bars_per_year": "bars a year used to annualise (count)",
    "costs_included": "whether the trading costs are in every figure (bool)",
    "aggregate": f"the test windows stitched: ensemble (the seeds' mean return per bar), seeds, "
    f"buy_and_hold, random and rule (the known rule, synthetic data only): each a {_FIGURES}",
    "sharpe_vs_buy_and_hold": "the ensemble's Sharpe minus buy-and-hold's with its "
    "block-bootstrap interval (level: confidence, block: bars)",
    "beats_buy_and_hold_every_fold": "per seed, whether its total return beat buy-and-hold's "
    "in every fold (bool)",
    "folds": "each fold, numbered from 1: its train and test windows (start, end, bars), each "
    f"seed's deployed policy and why, its and its baseline's {_FIGURES}s",
    "settings": "the training settings, the folds' sizes and the env configuration",
    "detectable_edge": "the smallest annualised Sharpe edge over flat detected with the given "
    "power at the level of the buy-and-hold interval in the stitched test bars (null where "
    "too few)",
}


# The fields of a portfolio backtest's block (``PortfolioBacktest.to_dict``) that are not
# METRIC_UNITS' names; its total_return, sharpe, max_drawdown and bars_per_year are.
PORTFOLIO_UNITS: dict[str, str] = {
    "start": "the window's first bar (index into the data's bars)",
    "stop": "the bar after the window's last (index into the data's bars)",
    "ruined": "whether the value fell to 0 or below (bool)",
    "costs_by_instrument": "each instrument's trading costs over the window (currency, the "
    "initial capital's)",
}

_BACKTESTS = "portfolio backtest blocks (fields and units: schema.units)"

# Every top-level key of the metrics.json of ``train`` on several instruments
# (``PortfolioTrainResult.to_dict`` and the report's figures), in words.
PORTFOLIO_TRAIN_KEYS: dict[str, str] = {
    "schema": "this description",
    "kind": "'portfolio': a run of several instruments",
    "kept": "the deployed policy: 'network', 'flat' or 'baseline'",
    "reason": "why it was deployed, in words",
    "instruments": "the instruments traded, in the policy's order",
    "seed": "the run's random seed",
    "device": "the device trained on",
    "splits": "the fit, validation and test windows ([start, stop): indices into the bars)",
    "validation": f"kept, flat, network and buy_and_hold (equal weight) on the validation "
    f"window: {_BACKTESTS}",
    "test": f"the same on the test window (out of sample): {_BACKTESTS}",
    "gate": "the validation test that chose network or baseline (Sharpe differences, "
    "annualised, with their intervals), or null",
    "baseline": "per instrument, the parameter-free policy chosen on its training bars and "
    f"why; the baseline portfolio's validation and test {_BACKTESTS}; or null",
    "deployment": "what was deployed and why: kept, outcome, headline, details, trained",
    "deflated": "deflated Sharpe ratio of the network's validation returns (dsr: a "
    "probability; sr, sr0: per-bar Sharpe ratios), or null",
    "resolution": "the smallest annualised Sharpe edge the gate detects with the given power "
    "at its level in the validation bars (sharpe, bars, level, power, ...), or null",
    "overfitting": "the probability of backtest overfitting (CSCV) of the choice among "
    "snapshots and baselines (pbo: fraction, or null with the reason it is not computable)",
    "inputs": "the input selection: kept inputs, p-values, bars; null where all were kept",
    "snapshots": "each snapshot's env step and validation Sharpe (annualised)",
    "chosen_snapshot": "the selected snapshot's index into snapshots, or null",
    "reward_scale": "the factor the rewards were multiplied by in training",
    "seconds": "wall-clock seconds of the whole run",
    "train_seconds": "wall-clock seconds of training",
    "config": "every training setting and the env configuration",
    "figures": "the report table's test-window curves by legend, costs in: figures blocks "
    "(fields and units: schema.units)",
    "notes": "the report's lines on the deployment and the data, in words",
}

# Every top-level key of sweep.json (``SweepSummary.to_dict``), in words.
SWEEP_KEYS: dict[str, str] = {
    "schema": "this description",
    "settings": "each setting of the grid, best rank first: setting (train options), label, "
    "runs (each run's exit code, device, folders and figures), finished, failed (counts), "
    "rank, and per figure its mean, std, min and max over the seeds: validation_sharpe "
    "(annualised), validation_return, validation_buy_and_hold, total_return (out of sample), "
    "test_buy_and_hold, test_costs_paid (fractions of the initial capital), vs_known_rule "
    "(ratio), train_seconds (seconds)",
    "runs": "runs in all (count)",
    "failed": "runs that gave no metrics.json (count)",
    "ranked_by": "what ranks the settings, in words",
    "data": "the first finished run's data fields (see its metrics.json's schema), or null",
    "order_cost_bps": "that run's cost of each order type, basis points of the traded notional",
    "devices": "the device slots the runs ran on",
    "runs_per_device": "runs at a time on each device (count)",
    "seeds": "every setting's seeds",
    "train_options": "the train options every run got",
    "wall_seconds": "the sweep's wall-clock seconds",
}


# Every top-level key of eval's and backtest's metrics.json on several instruments, in words.
PORTFOLIO_BACKTEST_KEYS: dict[str, str] = {
    "schema": "this description",
    "kind": "'portfolio': a backtest of several instruments",
    "model": "eval: the saved model backtested (path)",
    "rule": "backtest: the rule held ('buy_and_hold')",
    "exposure": "backtest: the rule's exposure in each instrument (fraction of the capital)",
    "instruments": "the instruments traded, in the policy's order",
    "window": "the evaluated bars ([start, stop): indices into the aligned bars)",
    "model_backtest": f"eval: the saved model on the evaluated bars: {_BACKTESTS}",
    "rule_backtest": f"backtest: the rule on the evaluated bars: {_BACKTESTS}",
    "flat": f"flat on the same bars: {_BACKTESTS}",
    "buy_and_hold": f"equal-weight buy and hold on the same bars: {_BACKTESTS}",
    "figures": "the report table's rows by legend: each a figures block (schema.units)",
    "notes": "the report's notes, in words",
}

# Every top-level key of walkforward's metrics.json on several instruments, in words.
PORTFOLIO_WALKFORWARD_KEYS: dict[str, str] = {
    "schema": "this description",
    "kind": "'portfolio_walkforward': a walk-forward of several instruments",
    "instruments": "the instruments traded, in the policy's order",
    "seeds": "the seeds trained on every fold",
    "folds": "each fold, numbered from 1: its train and test windows (indices and dates) and "
    f"per seed the kept policy, its reason, gate and test {_BACKTESTS}",
    "stitched": f"per seed, the kept policies' test windows as one path: {_BACKTESTS}",
    "flat": f"flat over the stitched test windows: {_BACKTESTS}",
    "buy_and_hold": f"equal-weight buy and hold over the same bars: {_BACKTESTS}",
    "config": "the training settings and the env configuration",
    "figures": "the report table's rows by legend: each a figures block (schema.units)",
    "notes": "the report's notes, in words",
}


def metrics_schema(
    metrics: dict[str, Any],
    documented: dict[str, str] = METRICS_KEYS,
    units: dict[str, str] | None = None,
) -> dict[str, Any]:
    """``{"keys": {key: meaning}, "units": {field: unit}}`` for the keys of ``metrics`` (their
    meanings from ``documented``; a key it lacks is said to be undocumented, not dropped), the
    units METRIC_UNITS' and ``units``' (a report's other figure fields)."""
    keys = {k: documented.get(k, "undocumented") for k in ("schema", *metrics)}
    return {"keys": keys, "units": {**METRIC_UNITS, **(units or {})}}
