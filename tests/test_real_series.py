"""Real bar series from pip packages: the registry, the bars each loads, close-only bars and
the error where a package is missing."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pandas as pd
import pytest

from gpu_trading_env.data.real_series import (
    REAL_SERIES,
    close_only_bars,
    load_real_series,
    real_frame,
)

_IMPORT = {"arch": "arch", "gym-anytrading": "gym_anytrading", "backtesting": "backtesting",
           "pmdarima": "pmdarima"}  # fmt: skip


def _installed(package: str) -> bool:
    return importlib.util.find_spec(_IMPORT[package]) is not None


def test_registry_names_eight_series_with_package_and_licence() -> None:
    assert len(REAL_SERIES) >= 8
    for name, s in REAL_SERIES.items():
        assert s.name == name and s.package in _IMPORT and s.licence
        assert s.frequency in ("daily", "hourly")


@pytest.mark.parametrize("name", sorted(REAL_SERIES))
def test_each_series_loads_as_checked_bars(name: str) -> None:
    s = REAL_SERIES[name]
    if not _installed(s.package):
        pytest.skip(f"{s.package} is not installed")
    data = load_real_series(name)
    assert data.n_bars > 1000 and data.metadata["package"] == s.package
    assert data.metadata["licence"] == s.licence
    ts = np.asarray(data.timestamps)
    assert (np.diff(ts) > np.timedelta64(0)).all()
    gaps = np.diff(ts).astype("timedelta64[h]").astype(int)
    if s.frequency == "hourly":
        # Hourly FX keeps its weekend gaps as they are: the median step is an hour, some are days.
        assert np.median(gaps) == 1 and gaps.max() >= 48
    else:
        assert np.median(gaps) == 24


def test_close_only_bars_open_at_the_previous_close() -> None:
    close = pd.Series([10.0, 11.0, 9.0], index=pd.date_range("2020-01-01", periods=3))
    bars = close_only_bars(close)
    assert bars["open"].tolist() == [10.0, 10.0, 11.0]
    assert bars["high"].tolist() == [10.0, 11.0, 11.0]
    assert bars["low"].tolist() == [10.0, 10.0, 9.0]
    assert bars["volume"].tolist() == [0.0, 0.0, 0.0]


def test_wti_leaves_out_the_dates_without_a_price() -> None:
    if not _installed("arch"):
        pytest.skip("arch is not installed")
    import arch.data.wti

    raw = arch.data.wti.load()["DCOILWTICO"]
    bars = real_frame("wti")
    assert len(bars) == int(raw.notna().sum()) and bars["close"].notna().all()


def test_a_missing_package_is_one_error_naming_it_and_the_extra(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "arch.data.sp500", None)  # import raises ImportError
    with pytest.raises(ImportError, match=r"'arch' package.*pip install -e \"\.\[real\]\""):
        load_real_series("sp500")


def test_an_unknown_name_lists_the_allowed() -> None:
    with pytest.raises(ValueError, match="real series 'nope' is invalid: allowed are sp500"):
        load_real_series("nope")
