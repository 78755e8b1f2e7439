"""The portfolio network's inputs, chosen on the training bars: the columns (instrument,
feature) of the observation that predict some instrument's next return.

A portfolio observation holds ``K · F`` feature columns (1,632 at K = 32 with the built-in
features), and a Q-network fed all of them fits their noise before it finds the few that carry
an edge. So, as the single env's ``train`` does
(:mod:`agents.pipelines.input_selection`), the network sees only what the training bars show to
predict. A column may predict another instrument's return (a lead-lag pair: A's last return
predicts B's next one), so every column is tested against every instrument's next log return:
the slope of one on the other, its z-statistic with White's heteroskedasticity-robust (HC0)
standard error, two-sided, with Holm's step-down correction over all ``K · F · K`` tests at the
family-wise :data:`~agents.pipelines.input_selection.SELECTION_LEVEL`. A column is kept where
one of its tests is; the others stay in the observation as zeros.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from agents.pipelines.input_selection import SELECTION_LEVEL
from gpu_trading_env.data.portfolio_data import PortfolioData

__all__ = ["PortfolioInputs", "select_portfolio_inputs", "zero_columns"]

# Columns of the design matrix per block of the products (bounds the memory at T x 256).
_BLOCK = 256


@dataclass(frozen=True, eq=False)
class PortfolioInputs:
    """The kept columns and the evidence.

    Attributes:
        kept: bool [K, F], the (instrument, feature) columns the network sees.
        z: float64 [K, F, K], the slope's robust z of column (k, f) on instrument j's next
            return at ``[k, f, j]``.
        adjusted_p: float64 [K, F, K], the Holm-adjusted two-sided p-values.
        level: the family-wise level.
        bars: the bars with a next return the tests used.
        instruments, feature_names: the names of the axes.
    """

    kept: np.ndarray
    z: np.ndarray
    adjusted_p: np.ndarray
    level: float
    bars: int
    instruments: tuple[str, ...]
    feature_names: tuple[str, ...]

    @property
    def n_kept(self) -> int:
        return int(self.kept.sum())

    @property
    def predicted(self) -> np.ndarray:
        """bool [K]: the instruments whose next return some column predicts (a kept test)."""
        return (self.adjusted_p <= self.level).any(axis=(0, 1))

    def branch_columns(self) -> list[list[int]] | None:
        """For each instrument j, the other instruments' feature columns ``k·F + f`` (k != j)
        whose test on j's next return passed: the evidence head's inputs (``branch_inputs``).
        An instrument's own columns are left to the encoder the instruments share, which learns
        from all K of them. None where no instrument has such a column (no head is built)."""
        k, f, _ = self.adjusted_p.shape
        passed = (self.adjusted_p <= self.level) & self.kept[:, :, None]
        passed[np.arange(k), :, np.arange(k)] = False
        columns = [np.flatnonzero(passed[:, :, j].reshape(k * f)).tolist() for j in range(k)]
        return columns if any(columns) else None

    def kept_names(self) -> list[str]:
        """``"instrument:feature"`` of each kept column, instrument by instrument."""
        return [f"{self.instruments[k]}:{self.feature_names[f]}" for k, f in np.argwhere(self.kept)]

    @property
    def family_p_value(self) -> float:
        """The smallest Holm-adjusted p-value: below ``level`` where anything is kept."""
        return float(self.adjusted_p.min()) if self.adjusted_p.size else 1.0

    def apply(self, data: PortfolioData) -> PortfolioData:
        """``data`` with the columns not kept set to zero (the same grid and prices)."""
        return zero_columns(data, self.kept)

    def to_dict(self) -> dict[str, Any]:
        """metrics.json's ``inputs``: the kept columns, the tests' size and level."""
        return {
            "kept": self.kept_names(),
            "columns": int(self.kept.size),
            "tests": int(self.z.size),
            "bars": self.bars,
            "level": self.level,
            "family_p_value": self.family_p_value,
        }


def zero_columns(data: PortfolioData, kept: np.ndarray) -> PortfolioData:
    """``data`` with the feature columns outside ``kept`` (bool [K, F]) set to zero.

    :raises ValueError: where ``kept`` is not of the data's (instruments, features) shape.
    """
    if data.features.shape[1:] != kept.shape:
        raise ValueError(
            f"data of features {data.features.shape[1:]} (instruments, features) is invalid "
            f"for inputs chosen on {kept.shape}: allowed is the same instruments and features"
        )
    features = np.where(kept[None, :, :], data.features, np.float32(0.0))
    features = np.ascontiguousarray(features, dtype=np.float32)
    features.flags.writeable = False
    return dataclasses.replace(data, features=features)


def _robust_z(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """float64 [C, J]: the z of the slope of each ``y[:, j]`` on each ``x[:, c]`` (both
    centred here), White's HC0 standard error; 0 where a column or a target is constant."""
    x = x - x.mean(axis=0)
    y = y - y.mean(axis=0)
    sxx = np.einsum("tc,tc->c", x, x)
    sxy = x.T @ y
    x2 = x * x
    with np.errstate(divide="ignore", invalid="ignore"):
        b = sxy / sxx[:, None]
        # sum_t x^2 (y - b x)^2, expanded into products of the columns.
        s = (
            x2.T @ (y * y)
            - 2.0 * b * ((x2 * x).T @ y)
            + b * b * np.einsum("tc,tc->c", x2, x2)[:, None]
        )
        z = b * sxx[:, None] / np.sqrt(np.maximum(s, 0.0))
    return np.where(np.isfinite(z), z, 0.0)


def _holm(p: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values of ``p`` (any shape), capped at 1."""
    flat = p.ravel()
    m = flat.size
    order = np.argsort(flat, kind="stable")
    adjusted = np.maximum.accumulate(flat[order] * (m - np.arange(m)))
    out = np.empty(m)
    out[order] = np.minimum(adjusted, 1.0)
    return out.reshape(p.shape)


def select_portfolio_inputs(
    data: PortfolioData, stop: int, level: float = SELECTION_LEVEL
) -> PortfolioInputs:
    """The columns of ``data`` that predict an instrument's next log return on bars
    ``0 .. stop - 1`` (the module doc's tests).

    :param stop: the first bar not used (the training bars' end).
    :raises ValueError: where ``stop`` leaves fewer than 10 bars with a next return, or
        ``level`` is not in (0, 1).
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level = {level!r} is invalid: allowed is a number in (0, 1)")
    if not 11 <= stop <= data.n_bars:
        raise ValueError(
            f"stop = {stop} is invalid: allowed is 11..{data.n_bars} (at least 10 bars with a "
            "next return)"
        )
    close = np.asarray(data.close[:stop], dtype=np.float64)
    y = np.log(close[1:] / close[:-1])  # [T-1, K]
    k, f = data.n_instruments, data.n_features
    x = np.asarray(data.features[: stop - 1], dtype=np.float64).reshape(stop - 1, k * f)
    z = np.empty((k * f, k))
    for lo in range(0, k * f, _BLOCK):
        z[lo : lo + _BLOCK] = _robust_z(x[:, lo : lo + _BLOCK], y)
    p = np.vectorize(lambda v: math.erfc(abs(v) / math.sqrt(2.0)))(z) if z.size else z
    adjusted = _holm(p)
    kept = (adjusted <= level).any(axis=1).reshape(k, f)
    return PortfolioInputs(
        kept=kept,
        z=z.reshape(k, f, k),
        adjusted_p=adjusted.reshape(k, f, k),
        level=float(level),
        bars=int(stop - 1),
        instruments=data.instruments,
        feature_names=data.feature_names,
    )
