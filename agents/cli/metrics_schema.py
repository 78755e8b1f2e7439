"""The ``schema`` key of a report's metrics.json (``train``, ``eval``, ``backtest``: one
instrument; ``walkforward``): what each top-level key holds, and the unit of each field of a
figures block (``gpu_trading_env.reports.metrics.METRIC_UNITS``)."""

from __future__ import annotations

from typing import Any

from gpu_trading_env.reports.metrics import METRIC_UNITS

__all__ = ["METRICS_KEYS", "WALKFORWARD_KEYS", "metrics_schema"]

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


def metrics_schema(
    metrics: dict[str, Any], documented: dict[str, str] = METRICS_KEYS
) -> dict[str, Any]:
    """``{"keys": {key: meaning}, "units": {field: unit}}`` for the keys of ``metrics`` (their
    meanings from ``documented``; a key it lacks is said to be undocumented, not dropped)."""
    keys = {k: documented.get(k, "undocumented") for k in ("schema", *metrics)}
    return {"keys": keys, "units": dict(METRIC_UNITS)}
