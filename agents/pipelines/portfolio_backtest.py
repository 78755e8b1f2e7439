"""Backtests of a portfolio policy (``backtest_portfolio``): the portfolio env stepped over a
window of bars from a pinned start, so the accounting is the env's own; and the
equal-weight buy-and-hold of the same bars (``buy_and_hold_portfolio``).

A policy is an int array of exposure levels ``[T, K]`` or a callable
``policy(obs, bar) -> levels``; :func:`backtest_portfolios` runs several side by side in one
env batch (row ``i`` of the batch is policy ``i``, and equals its single backtest bit for bit).
With ``device="cuda"`` the batch is the CUDA portfolio env (the NumPy one's accounting, by the
parity tests) and a callable receives its observation row as a torch tensor on that device.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode

from gpu_trading_env.core.portfolio_config import PortfolioConfig
from gpu_trading_env.data.portfolio_data import PortfolioData
from gpu_trading_env.portfolio_env import PortfolioVectorEnv
from gpu_trading_env.reports.metrics import bars_per_year, sharpe

__all__ = [
    "GreedyDevicePolicy",
    "LevelPolicy",
    "PortfolioBacktest",
    "backtest_portfolio",
    "backtest_portfolios",
    "buy_and_hold_portfolio",
    "flat_level",
]

# policy(obs float32 [D], bar) -> int levels [K]
LevelPolicy = Callable[[np.ndarray, int], Any]


class GreedyDevicePolicy:
    """The per-branch argmax of a branching Q-network on a CUDA device: ``policy(obs, bar)``
    takes an observation row (torch float32 ``[D]`` on the net's device) and returns int64
    ``[K]`` there. :func:`backtest_portfolios` on a CUDA device acts all such policies of a
    call in one CUDA graph replay a bar.

    :param net: ``net(obs [B, D]) -> Q [B, K, L]``, on the device, in eval mode.
    """

    def __init__(self, net: Any) -> None:
        self.net = net

    def __call__(self, obs: Any, bar: int) -> Any:
        import torch as th

        with th.inference_mode():
            return self.net(obs.reshape(1, -1)).argmax(dim=-1)[0]


@dataclass(frozen=True, eq=False)
class _LevelRows:
    """A level-array policy: ``rows`` int64 [stop - start - 1, K], row i the levels of bar
    ``start + i`` (a CUDA backtest uploads them once)."""

    rows: np.ndarray
    start: int

    def __call__(self, obs: Any, bar: int) -> np.ndarray:
        return self.rows[bar - self.start]


@dataclass(frozen=True, eq=False)
class PortfolioBacktest:
    """A policy's path over bars ``start .. stop - 1`` of a portfolio: ``T = stop - start - 1``
    steps, step ``i`` trading at bar ``start + i`` and marking at bar ``start + i + 1``.

    Attributes:
        equity: float64 [T+1], portfolio value / initial capital (1.0 first), costs in.
        levels: int64 [T, K], the level each instrument's action took.
        positions: float64 [T, K], units held after each step's trade.
        weights: float64 [T, K], ``position · close / value`` at each step's mark.
        costs: float64 [T, K], each instrument's trading cost of each step (currency).
        timestamps: datetime64[ns] [T+1], the bars of ``equity``.
        instruments: the K names.
        start, stop: the window, bars of the data.
        per_year: bars per year of the annualised figures.
        ruined: whether the value fell to zero or below (the equity stays at its last value
            after the ruin, positions and costs at zero).
    """

    equity: np.ndarray
    levels: np.ndarray
    positions: np.ndarray
    weights: np.ndarray
    costs: np.ndarray
    timestamps: np.ndarray
    instruments: tuple[str, ...]
    start: int
    stop: int
    per_year: float
    ruined: bool = False

    @property
    def returns(self) -> np.ndarray:
        """float64 [T], the per-step simple returns after costs."""
        return self.equity[1:] / self.equity[:-1] - 1.0

    @property
    def n_bars(self) -> int:
        """T: the steps (per-bar returns) of the backtest."""
        return int(self.levels.shape[0])

    @property
    def total_return(self) -> float:
        """Final equity - 1."""
        return float(self.equity[-1] - 1.0)

    @property
    def sharpe(self) -> float:
        """Annualised Sharpe ratio of :attr:`returns` (``reports.metrics.sharpe``, zero
        risk-free rate, ``per_year`` bars a year), as the single env's backtests report it."""
        return sharpe(self.returns, self.per_year)

    @property
    def costs_by_instrument(self) -> np.ndarray:
        """float64 [K], each instrument's costs over the window (currency)."""
        return self.costs.sum(axis=0)

    @property
    def max_drawdown(self) -> float:
        """The largest fall of the equity from its running peak, a fraction (>= 0)."""
        peak = np.maximum.accumulate(self.equity)
        return float(np.max(1.0 - self.equity / peak))

    def to_dict(self) -> dict[str, Any]:
        """The figures (no per-bar arrays): JSON-ready."""
        return {
            "start": self.start,
            "stop": self.stop,
            "n_bars": self.n_bars,
            "total_return": self.total_return,
            "sharpe": self.sharpe,
            "max_drawdown": self.max_drawdown,
            "bars_per_year": self.per_year,
            "ruined": self.ruined,
            "costs_by_instrument": dict(
                zip(self.instruments, self.costs_by_instrument.tolist(), strict=True)
            ),
        }


def flat_level(config: PortfolioConfig) -> int:
    """The level whose exposure is 0.0 (the first such).

    :raises ValueError: where ``exposure_levels`` has no 0.0.
    """
    levels = list(config.exposure_levels)
    if 0.0 not in levels:
        raise ValueError(
            f"PortfolioConfig.exposure_levels = {config.exposure_levels!r} is invalid for a "
            "backtest against flat: allowed are levels with a 0.0 among them"
        )
    return levels.index(0.0)


def _check_window(data: PortfolioData, start: int, stop: int) -> None:
    for name, v in (("start", start), ("stop", stop)):
        if isinstance(v, bool) or not isinstance(v, int | np.integer):
            raise TypeError(f"{name} = {v!r} is invalid: allowed is an integer bar index")
    if not (0 <= start and start + 2 <= stop <= data.n_bars):
        raise ValueError(
            f"window start = {start}, stop = {stop} is invalid: allowed is 0 <= start and "
            f"start + 2 <= stop <= {data.n_bars} (the data's bars; a step needs two bars)"
        )


def _level_array_policy(
    levels: np.ndarray, data: PortfolioData, config: PortfolioConfig, start: int, stop: int
) -> LevelPolicy:
    """A policy reading ``levels``: [n_bars, K] by bar of the data, or [stop - start, K] from
    bar ``start`` (its last row unused), checked for shape and range."""
    a = np.asarray(levels)
    k, n_levels = data.n_instruments, config.n_levels
    if a.ndim != 2 or a.shape[1] != k or a.shape[0] not in (data.n_bars, stop - start):
        raise ValueError(
            f"levels of shape {a.shape} are invalid: allowed is [{data.n_bars}, {k}] (one row "
            f"per bar of the data) or [{stop - start}, {k}] (one row per bar of the window)"
        )
    if not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"levels of dtype {a.dtype} are invalid: allowed is an integer dtype")
    offset = 0 if a.shape[0] == data.n_bars else start
    window = a[start - offset : stop - 1 - offset]
    bad = (window < 0) | (window >= n_levels)
    if bad.any():
        i, j = np.argwhere(bad)[0]
        raise ValueError(
            f"levels[{int(i) + start - offset}, {int(j)}] = {int(window[i, j])} is invalid: "
            f"allowed is 0..{n_levels - 1} (the config's exposure levels)"
        )
    return _LevelRows(np.ascontiguousarray(window, dtype=np.int64), int(start))


def backtest_portfolios(
    policies: Sequence[np.ndarray | LevelPolicy],
    data: PortfolioData,
    env_config: PortfolioConfig,
    start: int,
    stop: int,
    per_year: float | None = None,
    device: str = "cpu",
) -> list[PortfolioBacktest]:
    """Backtests of several policies over bars ``start .. stop - 1``, side by side in one
    portfolio env of ``len(policies)`` envs (one per policy) started flat at ``start``.

    :param policies: each an int array of levels (``[data.n_bars, K]`` indexed by bar, or
        ``[stop - start, K]`` from bar ``start``), or ``policy(obs float32 [D], bar) -> int
        [K]``.
    :param env_config: the env's settings; its ``episode_length`` and ``autoreset_mode`` are
        replaced by the window's (one episode of ``stop - start - 1`` steps).
    :param per_year: bars per year; None: ``bars_per_year`` of the window's timestamps.
    :param device: ``"cpu"`` (the NumPy env) or ``"cuda"`` / ``"cuda:N"`` (the CUDA env: the
        steps and the records stay on the GPU, and a callable gets its observation row as a
        torch float32 ``[D]`` tensor there and may return levels on the device).
    :raises ValueError: on a window outside the data, or levels of another shape or range.
    """
    _check_window(data, start, stop)
    if not policies:
        raise ValueError("policies is empty: allowed is at least one policy")
    steps = stop - start - 1
    config = env_config.replace(episode_length=steps, autoreset_mode=AutoresetMode.NEXT_STEP)
    acts = [
        p if callable(p) else _level_array_policy(p, data, config, start, stop) for p in policies
    ]
    n = len(acts)
    c0 = float(config.initial_capital)
    if str(device) == "cpu":
        value, levels, positions, costs, alive = _run_on_host(acts, data, config, start, steps)
    else:
        value, levels, positions, costs, alive = _run_on_device(
            acts, data, config, start, steps, str(device)
        )
    stamps = np.asarray(data.timestamps[start:stop], dtype="datetime64[ns]")
    rate = bars_per_year(stamps) if per_year is None else float(per_year)
    marks = np.asarray(data.close, dtype=np.float64)[start + 1 : stop]  # [T, K]
    out = []
    for j in range(n):
        equity = value[:, j] / c0
        weights = positions[:, j] * marks / np.where(value[1:, j] > 0, value[1:, j], 1.0)[:, None]
        out.append(
            PortfolioBacktest(
                equity=equity,
                levels=levels[:, j],
                positions=positions[:, j],
                weights=weights,
                costs=costs[:, j],
                timestamps=stamps,
                instruments=data.instruments,
                start=int(start),
                stop=int(stop),
                per_year=rate,
                ruined=bool(not alive[j]),
            )
        )
    return out


_Paths = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _run_on_host(
    acts: list[LevelPolicy], data: PortfolioData, config: PortfolioConfig, start: int, steps: int
) -> _Paths:
    """The NumPy env's paths: value [T+1, n], levels, positions, costs [T, n, K], alive [n]."""
    n, k = len(acts), data.n_instruments
    env = PortfolioVectorEnv(num_envs=n, device="cpu", data=data, config=config)
    obs, _ = env.reset(seed=0, options={"start_index": np.full(n, start, dtype=np.int64)})
    c0 = float(config.initial_capital)
    value = np.full((steps + 1, n), c0)
    levels = np.zeros((steps, n, k), dtype=np.int64)
    positions = np.zeros((steps, n, k))
    costs = np.zeros((steps, n, k))
    alive = np.ones(n, dtype=bool)
    for i in range(steps):
        bar = start + i
        for j, act in enumerate(acts):
            levels[i, j] = np.asarray(act(obs[j], bar), dtype=np.int64).reshape(k)
        obs, _, terminated, truncated, info = env.step(levels[i])
        v1 = np.asarray(info["portfolio_value"], dtype=np.float64)
        value[i + 1] = np.where(alive, v1, value[i])
        positions[i] = np.where(alive[:, None], info["positions"], 0.0)
        costs[i] = np.where(alive[:, None], info["costs"], 0.0)
        alive &= ~np.asarray(terminated, dtype=bool)
        if i < steps - 1 and np.asarray(truncated, dtype=bool)[alive].any():
            raise AssertionError("the env truncated inside the backtest's window")
    env.close()
    return value, levels, positions, costs, alive


def _run_on_device(
    acts: list[LevelPolicy],
    data: PortfolioData,
    config: PortfolioConfig,
    start: int,
    steps: int,
    device: str,
) -> _Paths:
    """The CUDA env's paths (as :func:`_run_on_host`), recorded on the GPU and copied to the
    host once: level arrays are uploaded once, the greedy networks act in one CUDA graph replay
    a bar (:class:`_GreedyGraph`), other callables one by one; no host round trip a step."""
    import torch as th

    n, k = len(acts), data.n_instruments
    env = PortfolioVectorEnv(num_envs=n, device=device, data=data, config=config)
    dev = th.device(env.device)
    obs, _ = env.reset(seed=0, options={"start_index": np.full(n, start, dtype=np.int64)})
    c0 = float(config.initial_capital)
    value = th.full((steps + 1, n), c0, dtype=th.float64, device=dev)
    levels = th.zeros((steps, n, k), dtype=th.int64, device=dev)
    positions = th.zeros((steps, n, k), dtype=th.float64, device=dev)
    costs = th.zeros((steps, n, k), dtype=th.float64, device=dev)
    alive = th.ones(n, dtype=th.bool, device=dev)
    truncated_early = th.zeros(n, dtype=th.bool, device=dev)
    arrays = [j for j, a in enumerate(acts) if isinstance(a, _LevelRows)]
    if arrays:
        rows = np.stack([acts[j].rows for j in arrays], axis=1)  # [T, len(arrays), K]
        levels[:, arrays] = th.as_tensor(rows, device=dev)
    greedy = [j for j, a in enumerate(acts) if isinstance(a, GreedyDevicePolicy)]
    graph = _GreedyGraph([acts[j].net for j in greedy], greedy, obs) if greedy else None
    others = [j for j in range(n) if j not in arrays and j not in greedy]
    for i in range(steps):
        if graph is not None:
            levels[i, graph.rows] = graph(obs)
        for j in others:
            a = acts[j](obs[j], start + i)
            if not isinstance(a, th.Tensor):
                a = th.from_numpy(np.asarray(a, dtype=np.int64))
            levels[i, j] = a.reshape(k)
        obs, _, terminated, truncated, info = env.step(levels[i])
        value[i + 1] = th.where(alive, info["portfolio_value"], value[i])
        positions[i] = th.where(alive[:, None], info["positions"], 0.0)
        costs[i] = th.where(alive[:, None], info["costs"], 0.0)
        alive &= ~terminated
        if i < steps - 1:
            truncated_early |= truncated & alive
    env.close()
    if bool(truncated_early.any()):
        raise AssertionError("the env truncated inside the backtest's window")
    return tuple(t.cpu().numpy() for t in (value, levels, positions, costs, alive))


class _GreedyGraph:
    """Greedy networks acting on their env rows in one CUDA graph: each net reads its own row of
    a static observation buffer, and a bar costs a gather, a replay and a copy instead of each
    net's launches one by one.

    :param nets: the networks (``GreedyDevicePolicy.net``), on the observations' device.
    :param rows: each net's env row of the batch.
    :param obs: the batch's observations (torch float32 [n, D]), for the buffer's shape.
    """

    def __init__(self, nets: list[Any], rows: list[int], obs: Any) -> None:
        import torch as th

        from gpu_runtime.cuda_graph import warm_up_on_side_stream

        self.nets = nets
        self.rows = th.as_tensor(rows, dtype=th.int64, device=obs.device)
        self.obs = obs.index_select(0, self.rows)
        warm_up_on_side_stream(self._levels, obs.device, times=2)
        self.graph = th.cuda.CUDAGraph()
        with th.cuda.graph(self.graph), th.no_grad():
            self.out = self._levels()

    def _levels(self) -> Any:
        import torch as th

        q = [net(self.obs[j : j + 1]) for j, net in enumerate(self.nets)]
        return th.cat(q, dim=0).argmax(dim=-1)  # [len(nets), K]

    def __call__(self, obs: Any) -> Any:
        """int64 [len(nets), K]: the nets' levels on ``obs`` [n, D] (a view replaced next bar)."""
        import torch as th

        th.index_select(obs, 0, self.rows, out=self.obs)
        self.graph.replay()
        return self.out


def backtest_portfolio(
    levels: np.ndarray | LevelPolicy,
    data: PortfolioData,
    env_config: PortfolioConfig,
    start: int,
    stop: int,
    per_year: float | None = None,
    device: str = "cpu",
) -> PortfolioBacktest:
    """One policy's backtest over bars ``start .. stop - 1`` (:func:`backtest_portfolios` of
    one): the portfolio env (NumPy on ``"cpu"``, CUDA on a GPU) with one env, started flat at
    ``start``, stepped ``stop - start - 1`` times.

    :param levels: int levels ``[data.n_bars, K]`` (by bar) or ``[stop - start, K]`` (from bar
        ``start``), or a callable ``policy(obs float32 [D], bar) -> int [K]``.
    """
    return backtest_portfolios([levels], data, env_config, start, stop, per_year, device)[0]


def buy_and_hold_portfolio(
    data: PortfolioData,
    env_config: PortfolioConfig,
    start: int,
    stop: int,
    per_year: float | None = None,
) -> PortfolioBacktest:
    """Equal-weight buy-and-hold over bars ``start .. stop - 1``: at bar ``start``'s closes each
    instrument is bought with ``initial_capital / K`` (its cost at the instrument's rate paid
    out of that share), and the units are held to the end; ``levels`` are the top level.

    :raises ValueError: on a window outside the data.
    """
    _check_window(data, start, stop)
    k = data.n_instruments
    close = np.asarray(data.close[start:stop], dtype=np.float64)  # [T+1, K]
    rate = env_config.cost_rates(k)
    c0 = float(env_config.initial_capital)
    units = (c0 / k) / (close[0] * (1.0 + rate))
    entry = units * close[0] * rate
    value = close @ units + (c0 - float(np.sum(units * close[0] + entry)))
    value[0] = c0  # the entry costs fall in the first step, as a trade's do in the env
    steps = stop - start - 1
    costs = np.zeros((steps, k))
    costs[0] = entry
    positions = np.broadcast_to(units, (steps, k)).copy()
    stamps = np.asarray(data.timestamps[start:stop], dtype="datetime64[ns]")
    return PortfolioBacktest(
        equity=value / c0,
        levels=np.full((steps, k), int(np.argmax(env_config.exposure_levels)), dtype=np.int64),
        positions=positions,
        weights=positions * close[1:] / value[1:, None],
        costs=costs,
        timestamps=stamps,
        instruments=data.instruments,
        start=int(start),
        stop=int(stop),
        per_year=bars_per_year(stamps) if per_year is None else float(per_year),
    )
