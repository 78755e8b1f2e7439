"""Which inputs let a model find the regime market's edge? Plain regression, no agent.

On the zoo's regime market (seeds 0 to 4, 16,000 training bars, the last 4,000 out of sample)
the next bar's return is fitted on three sets of inputs:

- the 51 features;
- the 51 features and a fitted filter's forecast (a 3-state Gaussian HMM fitted by EM on the
  training bars, ``gpu_trading_env.data.regime_filter``, its filtered expected next return
  z-scored on the training bars);
- the forecast alone;

each by a network of the agent's trunk (two layers of 32, LeakyReLU) and by a linear model
(AdamW, batch 4,096, 3,000 steps, the snapshot best on the last 40% of the training bars kept).
The sign of each fit is traded out of sample with 1 bp costs; the table gives its Sharpe over
the true filter's sign rule's. It is what ``agents.pipelines.input_selection`` rests on: with
every feature beside it the forecast is lost. CPU, about 3 minutes.

    python3 -m experiments.regime_inputs_regression
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import torch as th

from agents.pipelines.zoo import MARKETS_BY_NAME, market_data
from gpu_trading_env.data.features import CLIP
from gpu_trading_env.data.regime_filter import expected_next_returns, fit_gaussian_hmm
from gpu_trading_env.data.synthetic import regime_filter_expected_return

TRAIN, FIT = 16_000, 9_600
COST = 1e-4  # 1 bp of traded notional
PER_YEAR = 8766.0  # hourly bars


def sharpe_after_costs(exposure: np.ndarray, returns: np.ndarray) -> float:
    pnl = exposure * returns - np.abs(np.diff(np.r_[0.0, exposure])) * COST
    return float(pnl.mean() / pnl.std(ddof=1) * math.sqrt(PER_YEAR))


def fitted_sign(x: np.ndarray, y: np.ndarray, hidden: list[int], seed: int) -> np.ndarray:
    """Exposure (sign of the fit) on every row of ``x``; fitted on rows < FIT, the snapshot
    best on rows FIT..TRAIN kept."""
    th.manual_seed(seed)
    layers: list[th.nn.Module] = []
    width = x.shape[1]
    for h in hidden:
        layers += [th.nn.Linear(width, h), th.nn.LeakyReLU()]
        width = h
    net = th.nn.Sequential(*layers, th.nn.Linear(width, 1))
    opt = th.optim.AdamW(net.parameters(), lr=3e-4 if hidden else 1e-3, weight_decay=0.1)
    xt = th.tensor(x, dtype=th.float32)
    yt = th.tensor(y[:FIT] * 100.0, dtype=th.float32)  # percent: O(1) targets
    gen = th.Generator().manual_seed(seed)
    best, state = -np.inf, None
    for k in range(3000):
        idx = th.randint(0, FIT, (4096,), generator=gen)
        loss = ((net(xt[idx]).squeeze(1) - yt[idx]) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if (k + 1) % 300 == 0:
            with th.no_grad():
                val = np.sign(net(xt[FIT:TRAIN]).squeeze(1).numpy())
            s = sharpe_after_costs(val, y[FIT:TRAIN])
            if s > best:
                best, state = s, {n: v.clone() for n, v in net.state_dict().items()}
    net.load_state_dict(state)
    with th.no_grad():
        return np.sign(net(xt).squeeze(1).numpy())


def one_seed(seed: int) -> dict[str, float]:
    market = MARKETS_BY_NAME["regime"]
    data = market_data(market, seed)
    close = np.asarray(data.close, dtype=np.float64)
    logr = np.r_[0.0, np.diff(np.log(close))]
    ret = close[1:] / close[:-1] - 1.0  # ret[t]: from bar t to t + 1, traded on row t
    model = fit_gaussian_hmm(logr[1:TRAIN])
    forecast = expected_next_returns(data, model)
    z = (forecast - forecast[:TRAIN].mean()) / forecast[:TRAIN].std()
    z = np.clip(z, -CLIP, CLIP)[:, None]
    features = np.asarray(data.features, dtype=np.float64)
    meta = data.metadata
    truth = regime_filter_expected_return(data, meta["mus"], meta["sigmas"], meta["persistence"])
    test = slice(TRAIN, len(ret))
    ref = sharpe_after_costs(np.sign(truth[:-1][test]), ret[test])
    out = {"EM filter's sign": sharpe_after_costs(np.sign(forecast[:-1][test]), ret[test]) / ref}
    inputs = {"51 features": features, "51 + forecast": np.c_[features, z], "forecast": z}
    for name, x in inputs.items():
        for label, hidden in (("32-32", [32, 32]), ("linear", [])):
            exposure = fitted_sign(x[:-1], ret, hidden, seed)
            out[f"{name}, {label}"] = sharpe_after_costs(exposure[test], ret[test]) / ref
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    args = p.parse_args()
    th.set_num_threads(2)
    rows = {}
    for seed in args.seeds:
        row = one_seed(seed)
        print(f"seed {seed}: " + "  ".join(f"{k} {v:+.2f}" for k, v in row.items()), flush=True)
        for k, v in row.items():
            rows.setdefault(k, []).append(v)
    print("out-of-sample Sharpe over the true filter's sign rule's:")
    for k, v in rows.items():
        print(f"  {k:26s} {np.mean(v):+.2f}  ({', '.join(f'{x:+.2f}' for x in v)})")


if __name__ == "__main__":
    main()
