"""The input selection a model file carries (``model.input_selection``, the JSON form of
:class:`InputSelection`) and :func:`apply_inputs`, which gives new bars the inputs it chose.

The selection is made on the training bars by :func:`agents.pipelines.input_selection.select_inputs`
(the fitting); what it chose is needed wherever the saved model acts
(``GpuDQN.make_env``, ``gpu-trading-env eval``), so the chosen inputs and their application
live here, below the algorithm.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpu_trading_env.data.features import CLIP
from gpu_trading_env.data.market_data import MarketData
from gpu_trading_env.data.regime_filter import GaussianHMM, expected_next_returns

__all__ = ["REGIME_INPUT", "InputSelection", "apply_inputs"]

REGIME_INPUT = "regime_expected_return"


@dataclass(frozen=True)
class InputSelection:
    """What :func:`~agents.pipelines.input_selection.select_inputs` chose, and the evidence;
    JSON-ready through :meth:`to_dict`."""

    feature_names: tuple[str, ...]  # the data's own features, in order
    kept: tuple[str, ...]  # inputs given to the network (REGIME_INPUT among them if kept)
    regime: GaussianHMM | None  # fitted on every training bar; None: too few bars
    regime_mean: float  # z-score of the forecast over the training bars
    regime_std: float
    regime_p_value: float | None  # one-sided, cross-fitted; None: not tested
    feature_p_values: dict[str, float] = field(default_factory=dict)  # two-sided, unadjusted
    # One-sided p-values, in the recent bars, of the features Holm's step kept (same sign).
    recent_p_values: dict[str, float] = field(default_factory=dict)
    p_value: float = 1.0  # family-wise: below the level, some input is kept
    bars: int = 0

    @property
    def input_names(self) -> tuple[str, ...]:
        """The observation's feature columns: the data's, then the forecast."""
        return (*self.feature_names, REGIME_INPUT)

    def predictability(self) -> dict[str, float]:
        """The fallback's step 4 test (``features_predict_returns``' keys)."""
        return {
            "statistic": float(len(self.kept)),
            "df": float(len(self.feature_names) + 1),
            "p_value": float(self.p_value),
            "bars": float(self.bars),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "feature_names": list(self.feature_names),
            "kept": list(self.kept),
            "regime": None if self.regime is None else self.regime.to_dict(),
            "regime_mean": self.regime_mean,
            "regime_std": self.regime_std,
            "regime_p_value": self.regime_p_value,
            "feature_p_values": dict(self.feature_p_values),
            "recent_p_values": dict(self.recent_p_values),
            "p_value": self.p_value,
            "bars": self.bars,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> InputSelection:
        """The inverse of :meth:`to_dict` (a model file's ``input_selection``)."""
        try:
            regime = d["regime"]
            model = None if regime is None else GaussianHMM.from_dict(regime)
            sel = cls(
                feature_names=tuple(d["feature_names"]),
                kept=tuple(d["kept"]),
                regime=model,
                regime_mean=float(d["regime_mean"]),
                regime_std=float(d["regime_std"]),
                regime_p_value=None if d["regime_p_value"] is None else float(d["regime_p_value"]),
                feature_p_values={str(k): float(v) for k, v in d["feature_p_values"].items()},
                recent_p_values={str(k): float(v) for k, v in d.get("recent_p_values", {}).items()},
                p_value=float(d["p_value"]),
                bars=int(d["bars"]),
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"input_selection is malformed: {exc!r}") from exc
        unknown = sorted(set(sel.kept) - set(sel.input_names))
        if unknown:
            raise ValueError(f"input_selection keeps {unknown}, which are not among its inputs")
        return sel


def apply_inputs(data: MarketData, selection: InputSelection) -> MarketData:
    """``data`` with the selection's inputs: the forecast appended (z-scored as on the training
    bars, clipped as the features are), and every column not kept set to zero.

    :raises ValueError: where ``data``'s features are not those the selection was made on.
    """
    if tuple(data.feature_names) != selection.feature_names:
        raise ValueError(
            f"data has features {list(data.feature_names)[:5]}... ({data.n_features}); the "
            f"input selection was made on {list(selection.feature_names)[:5]}... "
            f"({len(selection.feature_names)}): allowed is data with the same features"
        )
    column = np.zeros(data.n_bars)
    if selection.regime is not None and REGIME_INPUT in selection.kept:
        forecast = expected_next_returns(data, selection.regime)
        column = np.clip((forecast - selection.regime_mean) / selection.regime_std, -CLIP, CLIP)
    mask = np.array([n in selection.kept for n in selection.feature_names], dtype=np.float32)
    return MarketData(
        features=np.c_[np.asarray(data.features, dtype=np.float32) * mask, column].astype(
            np.float32
        ),
        open=data.open,
        high=data.high,
        low=data.low,
        close=data.close,
        volume=data.volume,
        timestamps=data.timestamps,
        instrument_offsets=data.instrument_offsets,
        instruments=data.instruments,
        feature_names=selection.input_names,
        metadata={**data.metadata, "input_selection": list(selection.kept)},
    )
