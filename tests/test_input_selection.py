"""``agents.pipelines.input_selection``: what the network is given, on markets whose answer is
known, and the selection's round trip through a model file and ``eval``."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from agents import cli
from agents.pipelines.input_selection import (
    MIN_REGIME_BARS,
    REGIME_INPUT,
    InputSelection,
    apply_inputs,
    select_inputs,
)
from gpu_trading_env.data.features import CLIP
from gpu_trading_env.data.market_data import MarketData


@pytest.fixture(scope="module")
def planted():
    return MarketData.synthetic("planted", 6_000, seed=11, phi=0.3)


@pytest.fixture(scope="module")
def walk():
    return MarketData.synthetic("gbm", 6_000, seed=12, mu=0.0, sigma=0.01)


def test_a_planted_edge_keeps_the_last_return_and_passes_the_test(planted):
    sel = select_inputs(planted)
    assert "logret_1" in sel.kept
    assert sel.p_value < 1e-10
    assert sel.predictability()["p_value"] == sel.p_value
    assert sel.regime is not None and sel.regime_p_value is not None  # 3,000-bar halves


def test_a_random_walk_keeps_nothing(walk):
    sel = select_inputs(walk)
    assert sel.kept == ()
    assert sel.p_value > 0.01
    assert min(sel.feature_p_values.values()) * walk.n_features > 0.005
    out = apply_inputs(walk, sel)
    assert out.n_features == walk.n_features + 1
    assert not out.features.any()  # the network sees zeros, whatever it is


def test_the_regime_market_keeps_the_filters_forecast():
    data = MarketData.synthetic("regime", 20_000, seed=1)
    train, test = data.split(0.8)
    sel = select_inputs(train)
    assert sel.kept == (REGIME_INPUT,)
    assert sel.regime_p_value < 0.005
    out = apply_inputs(test, sel)
    column = out.features[:, -1]
    assert out.feature_names[-1] == REGIME_INPUT
    assert not out.features[:, :-1].any()
    assert np.abs(column).max() <= CLIP and column.std() > 0.1
    # The forecast is the filter's expected return, z-scored on the training bars.
    back = column * sel.regime_std + sel.regime_mean
    assert np.all(np.abs(back) <= np.abs(sel.regime.mus).max() + 1e-12)


def test_apply_inputs_zeroes_what_is_not_kept_and_keeps_the_rest(planted):
    sel = select_inputs(planted)
    out = apply_inputs(planted, sel)
    for j, name in enumerate(planted.feature_names):
        if name in sel.kept:
            np.testing.assert_array_equal(out.features[:, j], planted.features[:, j])
        else:
            assert not out.features[:, j].any()
    assert out.metadata["input_selection"] == list(sel.kept)
    assert out.n_bars == planted.n_bars


def test_the_selection_round_trips_through_json(planted):
    sel = select_inputs(planted)
    again = InputSelection.from_dict(json.loads(json.dumps(sel.to_dict())))
    np.testing.assert_array_equal(
        apply_inputs(planted, again).features, apply_inputs(planted, sel).features
    )
    assert again.kept == sel.kept and again.p_value == sel.p_value


def test_a_malformed_selection_is_refused(planted):
    d = select_inputs(planted).to_dict()
    with pytest.raises(ValueError, match="malformed"):
        InputSelection.from_dict({k: v for k, v in d.items() if k != "kept"})
    with pytest.raises(ValueError, match="not among its inputs"):
        InputSelection.from_dict({**d, "kept": ["no_such_feature"]})


def test_other_features_are_refused_by_name(planted):
    sel = select_inputs(planted)
    other = MarketData(
        features=planted.features[:, :3],
        open=planted.open,
        high=planted.high,
        low=planted.low,
        close=planted.close,
        volume=planted.volume,
        timestamps=planted.timestamps,
        instrument_offsets=planted.instrument_offsets,
        instruments=planted.instruments,
        feature_names=planted.feature_names[:3],
    )
    with pytest.raises(ValueError, match="allowed is data with the same features"):
        apply_inputs(other, sel)


def test_short_windows_skip_the_filter_and_tiny_ones_are_refused(planted):
    short = planted.slice_bars(0, 2 * MIN_REGIME_BARS - 10)
    sel = select_inputs(short)
    assert sel.regime is None and sel.regime_p_value is None
    assert REGIME_INPUT not in sel.kept
    assert not apply_inputs(short, sel).features[:, -1].any()
    with pytest.raises(ValueError, match="at least 10"):
        select_inputs(planted.slice_bars(0, 5))
    with pytest.raises(ValueError, match="level"):
        select_inputs(planted, level=0.0)


def test_several_instruments_are_tested_and_filtered_each_on_its_own():
    a = MarketData.synthetic("planted", 5_000, seed=3, phi=0.3)
    b = MarketData.synthetic("planted", 5_000, seed=4, phi=0.3)
    both = MarketData(
        features=np.r_[a.features, b.features],
        open=np.r_[a.open, b.open],
        high=np.r_[a.high, b.high],
        low=np.r_[a.low, b.low],
        close=np.r_[a.close, b.close],
        volume=np.r_[a.volume, b.volume],
        timestamps=np.r_[a.timestamps, b.timestamps],
        instrument_offsets=[0, a.n_bars, a.n_bars + b.n_bars],
        instruments=["A", "B"],
        feature_names=a.feature_names,
    )
    sel = select_inputs(both)
    # One bar fewer per instrument: no return across the boundary is tested.
    assert sel.bars == a.n_bars + b.n_bars - 2
    assert "logret_1" in sel.kept
    out = apply_inputs(both, sel)
    np.testing.assert_array_equal(out.instrument(1).features, apply_inputs(b, sel).features)


def _csv(path, n, seed=0):
    MarketData.synthetic("planted", n, seed=seed, phi=0.3).to_dataframe().to_csv(path)


TINY = ["train", "--device", "cpu", "--timesteps", "600", "--num-envs", "4"]
TINY += ["--eval-every", "300", "--episode-length", "50", "--no-progress"]


def test_eval_gives_a_model_the_inputs_it_was_trained_with(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _csv(tmp_path / "t.csv", 1_500)
    assert cli.main([*TINY, "--data", "t.csv", "--no-fallback", "--out", "m"]) == 0
    assert cli.main([*TINY, "--data", "t.csv", "--no-fallback", "--all-inputs", "--out", "a"]) == 0
    assert cli.main(["eval", "--model", "m/model.zip", "--data", "t.csv", "--out", "e"]) == 0
    trained = json.loads((tmp_path / "m" / "metrics.json").read_text())
    evaluated = json.loads((tmp_path / "e" / "metrics.json").read_text())
    # Without the selection eval would refuse the model (52 inputs against the data's 51).
    # eval's own backtest of the same policy on the same bars lands within a few percent of the
    # train report's, as it does with --all-inputs.
    assert evaluated["strategy"]["sharpe"] == pytest.approx(trained["strategy"]["sharpe"], rel=0.1)
    from agents import GpuDQN

    model = GpuDQN.load(tmp_path / "m" / "model.zip", device="cpu")
    every = GpuDQN.load(tmp_path / "a" / "model.zip", device="cpu")
    assert "logret_1" in model.input_selection["kept"]
    assert every.input_selection is None
    assert model.observation_space.shape[0] == every.observation_space.shape[0] + 1
    capsys.readouterr()


def test_train_says_what_the_network_was_given():
    from agents.cli.train import describe_inputs

    assert describe_inputs([], 51, REGIME_INPUT).startswith(
        "0 of 51 features: nothing predicted the next return"
    )
    line = describe_inputs(["a", "b", "c", "d", "e", REGIME_INPUT], 51, REGIME_INPUT)
    assert line.startswith("5 of 51 features (a, b, c, d, ...) and the fitted regime filter's")
    assert describe_inputs([REGIME_INPUT], 51, REGIME_INPUT).startswith(
        "0 of 51 features and the fitted regime filter's forecast (--all-inputs"
    )


@pytest.mark.parametrize("selected", [True, False])
def test_the_report_names_the_test_that_was_run(selected):
    from agents.cli.report import kept_policy_note
    from agents.pipelines.deployment import describe_deployment

    gate = {
        "network_minus_flat_validation_sharpe": {
            "difference": 1.2, "low": -0.1, "high": 2.5, "level": 0.9, "candidates": 10,
            "adjusted": 0.4, "p_value": 0.3,
        },
        "level": 0.9,
        "baseline": "flat",
        "features_predict_next_return": {"statistic": 1.0, "df": 52.0, "p_value": 3e-5, "bars": 9.0},
        "beat_flat_by": "predictable",
    }  # fmt: skip
    selection = (
        {"feature_names": [f"f{i}" for i in range(51)], "kept": [REGIME_INPUT], "p_value": 3e-5}
        if selected
        else None
    )
    flat_ci = {"difference": 0.1, "low": -0.5, "high": 0.6, "level": 0.9}
    baseline = {"name": "flat", "hold_vs_flat": flat_ci, "parts": []}
    deployment = describe_deployment("network", baseline, gate=gate, selection=selection)
    # kept_policy_note reads the run's deployment alone (a TrainResult in the command).
    note = kept_policy_note(SimpleNamespace(deployment=deployment))
    assert note.startswith("Verdict: a network")
    if selected:
        assert "0 of 51 features and the fitted regime filter's forecast kept" in note
        assert "p = 3e-05" in note and "Wald" not in note
    else:
        assert "(robust Wald test, 52 slopes)" in note


def test_gradient_steps_reach_the_model(tmp_path, monkeypatch):
    """--gradient-steps sets SB3's gradient_steps of the trained model (default: per device)."""
    from agents.cli.parser import build_parser
    from agents.cli.train import CPU_DEFAULTS, GPU_DEFAULTS, train_settings

    args = build_parser().parse_args(["train", "--gradient-steps", "3"])
    assert train_settings(args, "cpu", 1000).gradient_steps == 3
    args = build_parser().parse_args(["train"])
    assert train_settings(args, "cpu", 1000).gradient_steps == CPU_DEFAULTS["gradient_steps"]
    assert train_settings(args, "cuda", 1000).gradient_steps == GPU_DEFAULTS["gradient_steps"] == 2
    monkeypatch.chdir(tmp_path)
    _csv(tmp_path / "t.csv", 1_200)
    assert cli.main([*TINY, "--data", "t.csv", "--gradient-steps", "2", "--out", "g"]) == 0
    from agents import GpuDQN

    assert GpuDQN.load(tmp_path / "g" / "model.zip", device="cpu").gradient_steps == 2
