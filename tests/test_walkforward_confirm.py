"""walkforward's out-of-sample check: a fold deploys a network only where the same seed's
network of the fold before beat its baseline on that fold's test bars, in return and in Sharpe
(one-sided 20%)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from agents.pipelines.baseline_policies import baseline_action, baseline_backtest
from agents.pipelines.deployment import OUTCOMES, Deployment, describe_unconfirmed
from agents.pipelines.walkforward import OutOfSampleRecord, confirm_deployment
from gpu_trading_env.core.config import EnvConfig
from gpu_trading_env.data.market_data import MarketData

TRAIN_VERDICT = Deployment(
    "network", "network", "a network: validation edge over flat ...", ("d",), True
)


ABOVE = {"difference": 0.9, "low": 0.1, "high": 1.6, "level": 0.6}
SPANS = {"difference": 0.2, "low": -0.4, "high": 0.8, "level": 0.6}


@pytest.mark.parametrize(
    ("network", "baseline", "edge", "confirmed"),
    [
        (0.05, 0.0, ABOVE, True),
        (0.0, 0.0, ABOVE, True),
        (0.05, 0.0, SPANS, False),  # more than the baseline's return, but within luck's reach
        (0.05, 0.0, None, False),
        (-0.01, 0.0, ABOVE, False),
        (0.10, 0.12, ABOVE, False),
        (None, 0.0, None, False),
    ],
)
def test_a_record_confirms_only_a_network_that_beat_its_baseline(
    network, baseline, edge, confirmed
):
    record = OutOfSampleRecord(network, baseline, edge)
    assert record.confirmed is confirmed
    assert record.returned_baseline is (network is not None and network >= baseline)


def test_the_record_tests_the_networks_sharpe_edge_on_its_test_bars(tiny_run):
    from agents.pipelines.walkforward import CONFIRM_LEVEL, _record
    from gpu_trading_env.reports.significance import sharpe_difference_interval

    run, test, config = tiny_run
    base = baseline_backtest(run.baseline.name, test, config, 8766.0)
    record = _record(run, base, 8766.0)
    net, flat = run.network_test.equity, base.equity
    want = sharpe_difference_interval(
        net[1:] / net[:-1] - 1.0, flat[1:] / flat[:-1] - 1.0, 8766.0, level=CONFIRM_LEVEL
    )
    assert CONFIRM_LEVEL == pytest.approx(0.6) and record.edge == want
    assert record.network_return == run.network_test.strategy.total_return
    assert record.confirmed is (record.network_return >= record.baseline_return and want["low"] > 0)
    assert _record(dataclasses.replace(run, network_test=None), base, 8766.0).edge is None


@pytest.mark.parametrize(
    ("baseline", "previous", "first", "words"),
    [
        ("flat", (None, None), True, "no earlier fold has tested a network out of sample yet"),
        ("flat", (None, 0.0), False, "the previous fold trained no network"),
        (
            "hold long",
            (-0.031, 0.02),
            False,
            "the previous fold's network returned -3.1% on its test bars against its "
            "baseline's +2.0%",
        ),
        (
            "flat",
            (0.036, 0.0, SPANS),
            False,
            "the previous fold's network returned +3.6% on its test bars against its "
            "baseline's +0.0%, a Sharpe edge of +0.20 whose 60% interval [-0.40, +0.80] is not "
            "above zero",
        ),
    ],
)
def test_the_unconfirmed_verdict_says_why_and_keeps_trains(baseline, previous, first, words):
    edge = previous[2] if len(previous) > 2 else None
    d = describe_unconfirmed(
        TRAIN_VERDICT, baseline, *previous[:2], first_fold=first, previous_edge=edge
    )
    assert d.outcome == "not_confirmed" and d.kept == baseline and d.trained
    what = "the model stays flat" if baseline == "flat" else "the model holds long"
    assert d.headline.startswith(f"{OUTCOMES['not_confirmed']}: {what} (the network passed")
    assert words in d.headline
    assert d.details == ("d", f"train's verdict on this fold: {TRAIN_VERDICT.headline}")


@pytest.fixture(scope="module")
def tiny_run():
    """A CPU train run on planted bars (seconds), its test window and env."""
    from agents.pipelines.model_selection import train_selected
    from agents.pipelines.train_settings import TrainSettings

    data = MarketData.synthetic("planted", 1_500, seed=1)
    train, test = data.split(0.8)
    config = EnvConfig(episode_length=50, barriers=False, exposure_levels=(-1.0, 0.0, 1.0))
    settings = TrainSettings(timesteps=300, num_envs=4, batch_size=16, buffer_size=300)
    run = train_selected(train, test, config, settings, seed=0, per_year=8766.0)
    return run, test, config


def test_an_unconfirmed_network_deploys_its_baseline(tiny_run):
    run, test, config = tiny_run
    run = dataclasses.replace(run, kept="network", deployment=TRAIN_VERDICT)
    name = run.baseline.name
    want = baseline_backtest(name, test, config, 8766.0)
    out = confirm_deployment(run, OutOfSampleRecord(-0.02, 0.0), want, config)
    assert out.kept == name and out.deployment.outcome == "not_confirmed"
    np.testing.assert_array_equal(out.test.equity, want.equity)
    assert out.network_test is run.network_test  # the evidence stays
    obs = np.zeros((3, out.model.observation_space.shape[0]), dtype=np.float32)
    actions, _ = out.model.predict(obs, deterministic=True)
    assert (actions == baseline_action(name, config)).all()


def test_a_confirmed_network_and_a_baseline_stay_as_they_are(tiny_run):
    run, test, config = tiny_run
    network = dataclasses.replace(run, kept="network", deployment=TRAIN_VERDICT)
    want = baseline_backtest(run.baseline.name, test, config, 8766.0)
    record = OutOfSampleRecord(0.01, 0.0, ABOVE)
    assert confirm_deployment(network, record, want, config) is network
    base = dataclasses.replace(run, kept=run.baseline.name)
    assert confirm_deployment(base, None, want, config) is base
