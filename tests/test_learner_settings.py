"""The learner settings the market zoo chose: the reward scale of the TD target (its automatic
value and its checks) and the linearly decayed learning rate (saved with the model)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch as th

import gpu_trading_env  # noqa: F401  (registers GpuTrading-v0)
from agents import GpuDQN
from agents.cli import main
from agents.pipelines.model_selection import auto_reward_scale, learning_rate_schedule
from agents.pipelines.train_settings import TrainSettings
from gpu_trading_env import MarketData

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _model(**kwargs) -> GpuDQN:
    env = gym.make_vec("GpuTrading-v0", num_envs=2, device="cpu", episode_length=20)
    return GpuDQN("DuelingPolicy", env, learning_starts=10, buffer_size=200, seed=0, **kwargs)


def test_the_td_target_scales_the_rewards_only() -> None:
    plain, scaled = _model(), _model(reward_scale=50.0)
    scaled.policy.load_state_dict(plain.policy.state_dict())
    obs = th.randn(8, plain.observation_space.shape[0])
    rewards = th.linspace(-0.01, 0.01, 8).reshape(-1, 1)
    dones = th.zeros(8, 1)
    y_plain = plain.compute_td_target(rewards, obs, dones)
    y_scaled = scaled.compute_td_target(rewards, obs, dones)
    # The bootstrapped part is the same network's: the targets differ by 49 r exactly.
    th.testing.assert_close(y_scaled - y_plain, 49.0 * rewards, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("value", [0, -1.0, float("nan"), float("inf"), "2", True])
def test_gpudqn_refuses_a_reward_scale_out_of_range(value) -> None:
    with pytest.raises(ValueError, match=r"reward_scale = .* is invalid: allowed is a finite"):
        _model(reward_scale=value)


def test_the_automatic_scale_is_one_over_the_return_deviation() -> None:
    data = MarketData.synthetic("gbm", 3_000, seed=0, sigma=0.004)
    close = np.asarray(data.close, dtype=np.float64)
    expected = 1.0 / np.std(close[1:] / close[:-1] - 1.0)
    assert auto_reward_scale(data) == pytest.approx(expected, rel=1e-12)
    assert 150 < auto_reward_scale(data) < 350  # about 1 / 0.004
    # No return across an instrument boundary: two instruments give the pooled within-series sd.
    two = MarketData.synthetic("gbm", 3_000, n_instruments=2, seed=1, sigma=0.004)
    parts = []
    for k in range(2):
        lo, hi = two.instrument_offsets[k], two.instrument_offsets[k + 1]
        c = np.asarray(two.close[lo:hi], dtype=np.float64)
        parts.append(c[1:] / c[:-1] - 1.0)
    assert auto_reward_scale(two) == pytest.approx(1.0 / np.std(np.concatenate(parts)))


def test_the_decayed_learning_rate_is_saved_with_the_model(tmp_path) -> None:
    settings = TrainSettings(timesteps=1, num_envs=2, batch_size=8, buffer_size=64)
    assert learning_rate_schedule(settings) == settings.learning_rate  # constant by default
    settings.final_learning_rate = 1e-5
    schedule = learning_rate_schedule(settings)
    assert schedule(1.0) == pytest.approx(3e-4) and schedule(0.0) == pytest.approx(1e-5)
    model = _model(learning_rate=schedule)
    model.save(tmp_path / "m")
    loaded = GpuDQN.load(tmp_path / "m", device="cpu")
    assert loaded.lr_schedule(0.5) == pytest.approx(schedule(0.5))


@pytest.mark.parametrize(
    ("option", "value"),
    [("--reward-scale", "0"), ("--reward-scale", "inf"), ("--final-learning-rate", "-1")],
)
def test_train_refuses_bad_learner_options(option, value, capsys) -> None:
    assert main(["train", "--device", "cpu", option, value, "--out", "never"]) == 2
    err = capsys.readouterr().err
    assert f"{option} {float(value)} is invalid: allowed is a finite number" in err


def test_cross_fit_judges_the_network_on_both_validation_windows() -> None:
    from agents.pipelines.model_selection import train_selected
    from gpu_trading_env.core.config import EnvConfig

    data = MarketData.synthetic("planted", 1_500, seed=1)
    train, test = data.split(0.8)
    config = EnvConfig(episode_length=50, barriers=False, exposure_levels=(-1.0, 0.0, 1.0))
    runs = {}
    for cross in (False, True):
        settings = TrainSettings(
            timesteps=300, num_envs=4, batch_size=16, buffer_size=300, cross_fit=cross
        )
        runs[cross] = train_selected(train, test, config, settings, seed=0, per_year=8766.0)
    plain = runs[False].gate["network_minus_flat_validation_sharpe"]
    pooled = runs[True].gate["network_minus_flat_validation_sharpe"]
    n = int(train.bars_per_instrument.min())
    n_val = round(0.4 * n)
    assert runs[False].cross_fit is None
    assert runs[True].cross_fit.fit_bars == n - n_val
    assert runs[True].cross_fit.validation_bars == n_val
    # The test saw the second network's window too: about twice the bars, same candidates.
    assert plain["bars"] + runs[True].cross_fit.validation_bars - 2 <= pooled["bars"]
    assert pooled["bars"] <= plain["bars"] + runs[True].cross_fit.validation_bars
    assert pooled["candidates"] == plain["candidates"]
    evals = runs[True].evals
    assert len(evals.pooled_validation) == len(evals.validation)
    # The first network is the same run with or without the second (same seed, same bars).
    assert evals.validation == runs[False].evals.validation


def test_cross_fit_refuses_checkpoints(tmp_path, capsys) -> None:
    from agents.pipelines.model_selection import train_selected

    data = MarketData.synthetic("planted", 1_500, seed=1)
    train, test = data.split(0.8)
    settings = TrainSettings(
        timesteps=100, num_envs=2, batch_size=8, buffer_size=64, cross_fit=True
    )
    with pytest.raises(ValueError, match="cannot be combined with checkpoint_every"):
        train_selected(
            train,
            test,
            _config(),
            settings,
            seed=0,
            per_year=8766.0,
            checkpoint_every=50,
            checkpoint_dir=tmp_path,
        )
    code = main(
        ["train", "--device", "cpu", "--cross-fit", "--checkpoint-every", "10", "--out", "x"]
    )
    assert code == 2
    assert "--cross-fit trains a second network" in capsys.readouterr().err


def _config():
    from gpu_trading_env.core.config import EnvConfig

    return EnvConfig(episode_length=50)
