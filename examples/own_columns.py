"""Your own input columns on a real file: S&P 500 bars with the NASDAQ Composite's return beside.

python examples/own_columns.py [--timesteps N]     (needs the `arch` package: pip install arch)

Writes sp500_nasdaq.csv: the S&P 500's daily bars (1999-2018, shipped by `arch`) and a column
`nasdaq_return`, the NASDAQ Composite's log return of the same day. Both indices close at 16:00
New York, so the value on a row is known at that row's close, which is what a column must be:
the agent sees row t's value when it acts from close t to close t+1. Then it trains GpuDQN with
the column as an input, as `gpu-trading-env train --data sp500_nasdaq.csv --features
nasdaq_return` does, and rebuilds the model's env from the file with `make_env`, which reads the
column again because the model file names it.
"""

import argparse
import json
from pathlib import Path

import numpy as np

from agents import GpuDQN, cli
from gpu_trading_env.data.real_series import real_frame

parser = argparse.ArgumentParser()
parser.add_argument("--timesteps", type=int, default=50_000)
args = parser.parse_args()

bars = real_frame("sp500")
nasdaq = real_frame("nasdaq")["close"]
bars["nasdaq_return"] = np.log(nasdaq).diff()
bars = bars.dropna()  # the first day has no return; days only one index traded are left out
bars.to_csv("sp500_nasdaq.csv", index_label="timestamp")

out = Path("runs/sp500_nasdaq")
argv = ["train", "--data", "sp500_nasdaq.csv", "--features", "nasdaq_return", "--device", "cpu"]
cli.main([*argv, "--timesteps", str(args.timesteps), "--out", str(out), "--overwrite"])
inputs = json.loads((out / "metrics.json").read_text())["inputs"]
print("kept inputs:", inputs["kept"], "selection p-value:", inputs["p_value"])

model = GpuDQN.load(out / "model.zip", device="cpu")
p_value = model.input_selection["feature_p_values"]["nasdaq_return"]
print(f"nasdaq_return's p-value as a predictor of the next S&P 500 return: {p_value:.3g}")
env = model.make_env("sp500_nasdaq.csv")  # the file read with the model's extra column
print("model's extra columns:", model.extra_features, "observation:", env.single_observation_space)
env.close()
