"""Backtest a fixed rule on your own OHLCV CSV (columns: timestamp, open, high, low, close, volume).

python examples/backtest_csv.py prices.csv
"""

import sys
from pathlib import Path

import numpy as np

from gpu_trading_env import EnvConfig, MarketData
from gpu_trading_env.reports.backtest import backtest, exposure_policy, plot_equity

data = MarketData.from_csv(sys.argv[1])
config = EnvConfig(episode_length=500, fill="next_open")
# Momentum: long when the 20-bar return (built-in feature logret_20) is positive, else flat.
momentum = data.features[:, data.feature_names.index("logret_20")]
result = backtest(exposure_policy(np.where(momentum > 0, 1.0, 0.0), config), data, config)
print(result.to_dict())
plot_equity(result, Path("equity_curve.png"))
