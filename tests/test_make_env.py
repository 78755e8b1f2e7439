"""A saved model carries the env it acts on: ``GpuDQN.load(path)`` then ``model.make_env(data)``
gives a TradingVectorEnv of the saved EnvConfig over the data with the saved input selection,
whose observations ``predict`` takes; an env of other shapes is one line pointing to
``make_env``; a crafted env configuration is refused on load; a deployed hold baseline carries
the configuration it was evaluated in, and ``eval`` reproduces its backtest (agents.algorithm.
saved_env; docs/RELIABILITY.md, "A saved model's env")."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from crafted_archives import rewrite

import agents.cli as cli
import gpu_trading_env  # noqa: F401  (registers GpuTrading-v0)
from agents import GpuDQN
from agents.files.safe_archive import ArchiveError
from agents.pipelines.baseline_policies import baseline_action, baseline_config
from agents.pipelines.input_selection import apply_inputs, select_inputs
from gpu_trading_env.core.config import EnvConfig
from gpu_trading_env.core.constants import N_PORTFOLIO_FEATURES
from gpu_trading_env.data.market_data import MarketData
from gpu_trading_env.vector_env import TradingVectorEnv

pytestmark = pytest.mark.usefixtures("one_torch_thread")
# train's three actions (short, flat, long at the market order's cost), episodes of 40 bars.
TRAINED = EnvConfig(
    exposure_levels=(-1.0, 0.0, 1.0),
    order_cost_bps=(1.0,),
    sub_actions=1,
    barriers=False,
    episode_length=40,
)
SOURCE = EnvConfig.source_design()
# What the model records: the adapter GpuDQN wraps a vector env in switches it to SAME_STEP.
AS_TRAINED = TRAINED.replace(autoreset_mode="same_step")


def planted(n: int = 800, seed: int = 0) -> MarketData:
    return MarketData.synthetic("planted", n, seed=seed, phi=0.3)


def train_tiny(device: str = "cpu") -> GpuDQN:
    """A model trained a few steps on the planted market's bars with the input selection's
    inputs (one more column than the data's features), as ``train`` builds one."""
    data = planted()
    selection = select_inputs(data)
    assert "logret_1" in selection.kept
    env = gym.make_vec(
        "GpuTrading-v0",
        num_envs=4,
        device=device,
        data=apply_inputs(data, selection),
        config=TRAINED,
    )
    model = GpuDQN(
        "DuelingPolicy",
        env,
        learning_starts=20,
        buffer_size=200,
        batch_size=16,
        train_freq=2,
        seed=0,
        device=device,
    )
    model.learn(80)
    model.input_selection = selection.to_dict()
    return model


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("model") / "m.zip"
    train_tiny().save(path)
    return path


def test_load_make_env_predict(saved, tmp_path) -> None:
    """Load, make_env on new bars (MarketData or a CSV file), predict: the shapes fit and the
    env is the one the model was trained in."""
    model = GpuDQN.load(saved, device="cpu")
    assert model.env_config == AS_TRAINED
    new_bars = planted(500, seed=1)
    env = model.make_env(new_bars, num_envs=3)
    assert isinstance(env, TradingVectorEnv) and env.num_envs == 3
    assert env.config == AS_TRAINED
    assert env.single_observation_space == model.observation_space
    assert env.single_action_space == model.action_space
    obs, _ = env.reset(seed=0)
    assert obs.shape == (3, new_bars.n_features + 1 + N_PORTFOLIO_FEATURES)
    actions, _ = model.predict(obs, deterministic=True)
    assert actions.shape == (3,) and set(actions.tolist()) <= {0, 1, 2}
    env.step(actions)
    # The data preparation is the input selection's: the unkept columns are zeros.
    kept = set(model.input_selection["kept"])
    names = list(new_bars.feature_names)
    zero = [j for j, n in enumerate(names) if n not in kept]
    assert np.all(obs[:, zero] == 0.0) and np.any(obs[:, names.index("logret_1")] != 0.0)
    new_bars.to_dataframe().to_csv(tmp_path / "bars.csv")
    from_file = model.make_env(tmp_path / "bars.csv", num_envs=2, autoreset_mode="disabled")
    assert from_file.config == TRAINED.replace(autoreset_mode="disabled")
    obs2, _ = from_file.reset(seed=0)
    assert model.predict(obs2, deterministic=True)[0].shape == (2,)


def test_a_mismatched_env_is_one_line_pointing_to_make_env(saved) -> None:
    """The source design's env (54 observation values, 45 actions) against the model (55 and 3):
    set_env, load(env=...), learn and predict each say so in one line that names both shapes
    and model.make_env, instead of SB3's shape errors."""
    model = GpuDQN.load(saved, device="cpu")
    default = gym.make_vec("GpuTrading-v0", num_envs=2, device="cpu", config=SOURCE)
    obs, _ = default.reset(seed=0)
    both = r"shape \(54,\) and 45 actions.*shape \(55,\) and 3 actions.*model\.make_env\("
    calls = {
        "set_env": lambda: model.set_env(default),
        "load": lambda: GpuDQN.load(saved, env=default, device="cpu"),
    }
    for what, call in calls.items():
        with pytest.raises(ValueError, match=both) as err:
            call()
        assert "\n" not in str(err.value), what
    with pytest.raises(
        ValueError, match=r"shape \(2, 54\).*shape \(55,\).*model\.make_env\("
    ) as err:
        model.predict(obs, deterministic=True)
    assert "\n" not in str(err.value)
    # The env make_env gives is accepted everywhere, and learning on it keeps its config.
    fitting = model.make_env(planted(300), num_envs=4)  # SB3: set_env keeps n_envs
    model.set_env(fitting)
    model.learn(8)
    assert model.env_config == AS_TRAINED
    with pytest.raises(ValueError, match=r"the env configuration gives 5 actions.*acts on 3"):
        model.make_env(planted(300), exposure_levels=(-1.0, -0.5, 0.0, 0.5, 1.0))


def test_a_model_without_input_selection_names_the_datas_width() -> None:
    """Bars of another width than the model's (no input selection to blame): one line naming
    both shapes."""
    env = gym.make_vec("GpuTrading-v0", num_envs=2, device="cpu", config=TRAINED)
    model = GpuDQN("DuelingPolicy", env, buffer_size=100, device="cpu")
    assert model.env_config == AS_TRAINED
    fewer = planted(300)
    fewer = MarketData(
        features=fewer.features[:, :10],
        open=fewer.open,
        high=fewer.high,
        low=fewer.low,
        close=fewer.close,
        volume=fewer.volume,
        timestamps=fewer.timestamps,
        instrument_offsets=fewer.instrument_offsets,
        instruments=fewer.instruments,
        feature_names=fewer.feature_names[:10],
    )
    with pytest.raises(
        ValueError, match=r"data gives observations of shape \(13,\).*shape \(54,\)"
    ):
        model.make_env(fewer)


def test_eval_applies_an_explicit_episode_length_even_the_options_default(
    saved, tmp_path, monkeypatch
) -> None:
    """``eval --episode-length N`` replaces the saved model's episode length, N = 200 (the
    option's default) included; without the option the saved 40 bars stand."""
    monkeypatch.chdir(tmp_path)
    planted(800, seed=1).to_dataframe().to_csv(tmp_path / "bars.csv")
    argv = ["eval", "--model", str(saved), "--data", "bars.csv", "--train-fraction", "0"]
    episodes = {}
    for name, extra in {"saved": [], "200": ["--episode-length", "200"]}.items():
        assert cli.main([*argv, *extra, "--out", name]) == 0
        episodes[name] = json.loads((tmp_path / name / "metrics.json").read_text())["episodes"]
    # 479 evaluated steps (the file's bars after the features' warm-up): 12 episodes of 40
    # bars, 3 of 200.
    assert episodes == {"saved": 12, "200": 3}


# ------------------------------------------------------------------------- the saved config
def _edit_env_config(change):
    def edit(manifest: dict) -> None:
        change(manifest["data"])

    return edit


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: d["_env_config"]["__dict__"].update(gamma=0.9), r"unknown \['gamma'\]"),
        (lambda d: d["_env_config"]["__dict__"].pop("fill"), r"missing \['fill'\]"),
        (
            lambda d: d["_env_config"]["__dict__"].update(sub_actions="3"),
            r"EnvConfig\.sub_actions = '3' is invalid: allowed is an integer",
        ),
        (
            lambda d: d["_env_config"]["__dict__"].update(initial_capital=-5.0),
            r"EnvConfig\.initial_capital = -5\.0 is invalid",
        ),
        (
            lambda d: d["_env_config"]["__dict__"].update(sub_actions=3),
            r"has 9 actions .*action space has 3",
        ),
        (lambda d: d.update(_env_config=[1, 2]), r"EnvConfig fields of type list"),
    ],
)
def test_a_crafted_env_config_is_refused_on_load(saved, tmp_path, change, message) -> None:
    """Valid checksums, a forged env configuration: one error naming the file and the field."""
    path = rewrite(saved, _edit_env_config(change), out=tmp_path / "forged.zip")
    with pytest.raises(
        ArchiveError, match=rf"forged\.zip.*'_env_config' \(the env configuration\).*{message}"
    ) as err:
        GpuDQN.load(path, device="cpu")
    assert "\n" not in str(err.value)


def test_a_crafted_input_selection_of_another_width_is_refused(saved, tmp_path) -> None:
    def edit(manifest: dict) -> None:
        sel = manifest["data"]["input_selection"]["__dict__"]
        sel["feature_names"] = sel["feature_names"][:-1]

    path = rewrite(saved, edit, out=tmp_path / "forged.zip")
    with pytest.raises(ArchiveError, match=r"forged\.zip.*'input_selection'.*\(54,\).*\(55,\)"):
        GpuDQN.load(path, device="cpu")


def test_a_file_without_env_config_says_how_to_build_the_env(saved, tmp_path) -> None:
    """A model saved before models carried their env configuration: it loads; make_env is one
    line saying so and how to build the env; given the config, make_env works."""
    path = rewrite(
        saved, _edit_env_config(lambda d: d.pop("_env_config")), out=tmp_path / "old.zip"
    )
    model = GpuDQN.load(path, device="cpu")
    assert model.env_config is None
    with pytest.raises(
        ValueError, match=r"carries no env configuration.*config=EnvConfig\("
    ) as err:
        model.make_env(planted(300))
    assert "\n" not in str(err.value)
    env = model.make_env(planted(300), num_envs=4, config=TRAINED)
    obs, _ = env.reset(seed=0)
    assert model.predict(obs, deterministic=True)[0].shape == (4,)
    # Saved again, it still carries none: a load's env is not taken for the training env.
    GpuDQN.load(path, env=env, device="cpu").save(tmp_path / "again.zip")
    assert GpuDQN.load(tmp_path / "again.zip", device="cpu").env_config is None


# ------------------------------------------------------------------------- the hold baseline
TINY = ["train", "--device", "cpu", "--timesteps", "400", "--num-envs", "4"]
TINY += ["--eval-every", "200", "--episode-length", "50", "--no-progress"]


def test_a_deployed_baseline_carries_the_config_it_was_evaluated_in(tmp_path, monkeypatch):
    """On random-walk bars no input is kept and train deploys a baseline: its model carries
    baseline_config(train's config), make_env gives that env, and eval (through make_env)
    reproduces the train report's out-of-sample backtest to the bit."""
    monkeypatch.chdir(tmp_path)
    MarketData.synthetic("gbm", 1_500, seed=3, mu=0.002).to_dataframe().to_csv(tmp_path / "g.csv")
    assert cli.main([*TINY, "--data", "g.csv", "--out", "b"]) == 0
    trained = json.loads((tmp_path / "b" / "metrics.json").read_text())
    model = GpuDQN.load(tmp_path / "b" / "model.zip", device="cpu", tensorboard_log=None)
    assert model.input_selection["kept"] == []
    train_config = EnvConfig(episode_length=50)  # train's env: EnvConfig's defaults
    assert model.env_config == baseline_config(train_config)
    bars = MarketData.from_csv(tmp_path / "g.csv")
    env = model.make_env(bars, num_envs=2)
    # "As long as the env allows": one episode over the bars.
    assert env.config == baseline_config(train_config).replace(episode_length=bars.n_bars - 1)
    obs, _ = env.reset(seed=0)
    action = baseline_action(trained["deployment"]["kept"], train_config)
    assert model.predict(obs, deterministic=True)[0].tolist() == [action, action]
    assert cli.main(["eval", "--model", "b/model.zip", "--data", "g.csv", "--out", "e"]) == 0
    evaluated = json.loads((tmp_path / "e" / "metrics.json").read_text())
    assert evaluated["strategy"] == trained["strategy"]
    assert evaluated["episodes"] == trained["episodes"] == 1  # a hold is one episode
    # The command line's --episode-length, when given, overrides the saved one.
    argv = ["eval", "--model", "b/model.zip", "--data", "g.csv", "--episode-length", "30"]
    assert cli.main([*argv, "--out", "e30"]) == 0
    assert json.loads((tmp_path / "e30" / "metrics.json").read_text())["episodes"] > 1


def test_a_trained_network_replaced_by_its_baseline_carries_the_baselines_config(
    tmp_path, monkeypatch
):
    """Where a network is trained but the fallback's test deploys the baseline (forced here),
    the saved model carries baseline_config as well, and eval reproduces train's backtest."""
    import dataclasses

    import agents.pipelines.model_selection as selection

    real = selection.network_beats_baseline

    def refuse(*args, **kwargs):
        return dataclasses.replace(real(*args, **kwargs), keep_network=False)

    monkeypatch.setattr(selection, "network_beats_baseline", refuse)
    monkeypatch.chdir(tmp_path)
    MarketData.synthetic("gbm", 1_500, seed=3, mu=0.002).to_dataframe().to_csv(tmp_path / "g.csv")
    assert cli.main([*TINY, "--data", "g.csv", "--all-inputs", "--out", "b"]) == 0
    trained = json.loads((tmp_path / "b" / "metrics.json").read_text())
    assert trained["kept_policy"] == "hold long" and trained["timesteps"] > 0
    model = GpuDQN.load(tmp_path / "b" / "model.zip", device="cpu", tensorboard_log=None)
    assert model.env_config == baseline_config(EnvConfig(episode_length=50))
    assert cli.main(["eval", "--model", "b/model.zip", "--data", "g.csv", "--out", "e"]) == 0
    evaluated = json.loads((tmp_path / "e" / "metrics.json").read_text())
    assert evaluated["strategy"] == trained["strategy"]


# ------------------------------------------------------------------------------------- CUDA
@pytest.mark.gpu
def test_load_make_env_predict_on_cuda(saved) -> None:
    """The same on a GPU: the model loaded onto CUDA, make_env(device="cuda") (the CUDA
    backend, torch observations on the device), predict, step, and a few steps of learning on
    the fused rollout."""
    import torch as th

    model = GpuDQN.load(saved, device="cuda")
    env = model.make_env(planted(500, seed=1), num_envs=4, device="cuda")
    assert env.config == AS_TRAINED and str(env.device).startswith("cuda")
    obs, _ = env.reset(seed=0)
    assert isinstance(obs, th.Tensor) and obs.is_cuda and tuple(obs.shape) == (4, 55)
    actions, _ = model.predict(obs.cpu().numpy(), deterministic=True)
    assert actions.shape == (4,) and set(actions.tolist()) <= {0, 1, 2}
    env.step(th.as_tensor(actions, device=obs.device))
    trained = GpuDQN.load(saved, env=model.make_env(planted(500), num_envs=4, device="cuda"))
    trained.learn(16)
    assert trained.env_config == AS_TRAINED
    with pytest.raises(ValueError, match=r"shape \(4, 54\).*model\.make_env\("):
        default = gym.make_vec("GpuTrading-v0", num_envs=4, device="cuda")
        o, _ = default.reset(seed=0)
        model.predict(o.cpu().numpy())


def _train_and_save(files: list[str], path: Path) -> None:
    """A GpuDQN trained a few steps on the env of ``files`` (one: GpuTrading-v0; several:
    GpuPortfolio-v0, one instrument each), saved to ``path``."""
    from gpu_trading_env.core.portfolio_config import PortfolioConfig
    from gpu_trading_env.data.loaders import load_bars
    from gpu_trading_env.data.portfolio_data import PortfolioData

    if len(files) == 1:
        env = gym.make_vec("GpuTrading-v0", num_envs=4, data=load_bars(files[0]), config=TRAINED)
    else:
        data = PortfolioData.from_files(files)
        config = PortfolioConfig(episode_length=40, cost_bps=2.0)
        env = gym.make_vec("GpuPortfolio-v0", num_envs=4, data=data, config=config)
    model = GpuDQN("DuelingPolicy", env, learning_starts=20, buffer_size=200, batch_size=16, seed=0)
    model.learn(60)
    model.save(path)


@pytest.mark.parametrize("k", [1, 3])
def test_load_make_env_of_files_and_predict_for_every_k(tmp_path, k) -> None:
    """``GpuDQN.load(path).make_env(files)`` then ``predict``, one call for any number of
    instruments: the K = 3 model gets its GpuPortfolio-v0 env of its saved config, not a
    GpuTrading-v0 env."""
    from random_bars import write_daily_bar_csv

    from gpu_trading_env.portfolio_env import PortfolioVectorEnv

    files = [
        str(write_daily_bar_csv(tmp_path / f"{s}.csv", 420, seed=i))
        for i, s in enumerate("ABC"[:k])
    ]
    _train_and_save(files, tmp_path / "m.zip")
    model = GpuDQN.load(tmp_path / "m.zip", device="cpu")
    env = model.make_env(files, num_envs=2)
    assert isinstance(env, PortfolioVectorEnv if k > 1 else TradingVectorEnv)
    if k > 1:
        assert model.portfolio_setup["instruments"] == ["A", "B", "C"]
        assert env.config.episode_length == 40 and env.config.cost_bps == 2.0
    obs, _ = env.reset(seed=0)
    actions, _ = model.predict(obs, deterministic=True)
    assert actions.shape == ((2, k) if k > 1 else (2,))
    env.step(actions)
    if k > 1:
        with pytest.raises(ValueError, match=r"this model trades \['A', 'B', 'C'\]"):
            model.make_env(files[:2])


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda s: s.update(instruments=["A", "B"]), r"has 2 instruments of 3 levels"),
        (lambda s: s.update(kept=["Z:logret_1"]), r"kept columns \['Z:logret_1'\] of no"),
        (lambda s: s["env"]["__dict__"].update(leverage=-1.0), r"PortfolioConfig\.leverage ="),
        (lambda s: s["env"]["__dict__"].update(gamma=0.9), r"unexpected keyword argument"),
    ],
)
def test_a_crafted_portfolio_setup_is_refused_on_load(tmp_path, change, message) -> None:
    """Valid checksums, a forged portfolio env: one error naming the file and the attribute."""
    from random_bars import write_daily_bar_csv

    files = [
        str(write_daily_bar_csv(tmp_path / f"{s}.csv", 420, seed=i))
        for i in range(3)
        for s in "ABC"[i]
    ]
    _train_and_save(files, tmp_path / "m.zip")

    def edit(manifest: dict) -> None:
        change(manifest["data"]["portfolio_setup"]["__dict__"])  # a dict is {"__dict__": ...}

    path = rewrite(tmp_path / "m.zip", edit, out=tmp_path / "forged.zip")
    with pytest.raises(ArchiveError, match=rf"forged\.zip.*'portfolio_setup'.*{message}") as err:
        GpuDQN.load(path, device="cpu")
    assert "\n" not in str(err.value)
