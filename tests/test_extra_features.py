"""The trader's own input columns (``extra_features``, ``--features``): validation naming column
and line, causal normalisation, the observation's timing (a column about bar t+1 never reaches
the decision at bar t), the model file carrying them, and learning an exogenous edge on the CPU."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from gpu_trading_env.core.config import EnvConfig
from gpu_trading_env.data.features import FEATURE_NAMES, WARMUP_BARS, normalised
from gpu_trading_env.data.loaders import load_bars
from gpu_trading_env.data.market_data import MarketData
from gpu_trading_env.data.synthetic import exogenous_rule_exposure, exogenous_signal, gbm
from gpu_trading_env.reports.backtest import backtest, exposure_policy

BARS = WARMUP_BARS + 400


def _frame(n: int = BARS, seed: int = 0) -> pd.DataFrame:
    df = gbm(n, seed)
    df["sig"] = np.random.default_rng(seed).standard_normal(n)
    return df


def test_extra_columns_follow_the_builtin_features_z_scored_causally():
    df = _frame()
    md = MarketData.from_dataframe(df, extra_features=["sig"])
    assert md.feature_names == (*FEATURE_NAMES, "sig")
    assert md.metadata["extra_features"] == ["sig"]
    want = normalised(df["sig"].to_numpy())[WARMUP_BARS:]
    np.testing.assert_array_equal(md.features[:, -1], want.astype(np.float32))
    plain = MarketData.from_dataframe(df.drop(columns=["sig"]))
    np.testing.assert_array_equal(md.features[:, :-1], plain.features)
    # Changing the column after row t leaves rows <= t bit-identical.
    t = 150
    later = df.copy()
    later.iloc[WARMUP_BARS + t + 1 :, later.columns.get_loc("sig")] *= 50.0
    moved = MarketData.from_dataframe(later, extra_features=["sig"])
    np.testing.assert_array_equal(moved.features[: t + 1], md.features[: t + 1])
    assert not np.array_equal(moved.features[t + 1 :, -1], md.features[t + 1 :, -1])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda df: df.drop(columns=["sig"]), "missing extra feature column(s) ['sig']"),
        (lambda df: df.assign(sig=3.0), "extra feature column 'sig' is constant (3.0) from row 0"),
        (lambda df: df.assign(sig=df["sig"].where(df.index != df.index[7])), "NaN at row 7"),
        (
            lambda df: df.assign(sig=df["sig"].where(df.index != df.index[9], np.inf)),
            "extra feature column 'sig' has an infinite value at row 9",
        ),
        (
            lambda df: df.assign(sig=df["sig"].astype(object).where(df.index != df.index[4], "x")),
            "column 'sig' is not numeric at row 4",
        ),
    ],
)
def test_bad_extra_column_names_column_and_row(change, message):
    with pytest.raises(ValueError) as err:
        MarketData.from_dataframe(change(_frame()), extra_features=["sig"])
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("cell", "message"),
    [
        ("", "line 12, column 'sig': no value"),
        ("abc", "line 12, column 'sig': 'abc' is not a number"),
        ("inf", "extra feature column 'sig' has an infinite value at line 12"),
    ],
)
def test_bad_extra_column_in_a_file_names_its_line(tmp_path, cell, message):
    df = _frame()
    path = tmp_path / "bars.csv"
    df.to_csv(path)
    lines = path.read_text().splitlines()
    head = lines[11].rsplit(",", 1)[0]
    lines[11] = f"{head},{cell}"  # line 12 of the file: its 11th bar
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError) as err:
        load_bars(path, extra_features=["sig"])
    assert message in str(err.value)


def test_extra_columns_refused_where_they_cannot_be_inputs():
    df = _frame()
    with pytest.raises(ValueError, match="'logret_1' is invalid: it is a built-in feature"):
        MarketData.from_dataframe(df.assign(logret_1=1.0), extra_features=["logret_1"])
    with pytest.raises(ValueError, match="added to the built-in features"):
        MarketData.from_dataframe(df, features=["sig"], extra_features=["sig"])


def test_a_column_about_the_next_bar_does_not_reach_the_bar_before_it():
    """Each row's value describes its own bar (here the bar's own return, known at its close).
    The decision at bar t (held from close t to close t+1) sees row t's value only, so a rule on
    the column earns what the causal rule sign(r_t) earns, not the perfect foresight that
    row t+1's value (the return being traded) would give."""
    df = gbm(WARMUP_BARS + 2000, 3, sigma=0.01)
    df["own_return"] = np.log(df["close"]).diff().fillna(0.0)
    md = MarketData.from_dataframe(df, extra_features=["own_return"])
    j = md.feature_names.index("own_return")
    cfg = EnvConfig(
        episode_length=md.n_bars - 1, order_cost_bps=(0.0,), exposure_levels=(-1.0, 0.0, 1.0)
    )
    seen = []

    def on_column(obs: np.ndarray, bar: int) -> np.ndarray:
        np.testing.assert_array_equal(obs[0, : md.n_features], md.features[bar])
        seen.append(bar)
        level = 2 if obs[0, j] > 0 else 0  # exposure +1 or -1
        return np.array([cfg.encode_action(level)])

    column_rule = backtest(on_column, md, cfg, per_year=8760)
    assert seen == list(range(md.n_bars - 1))
    _, _, r = md.instrument_log_returns()[0]
    causal = backtest(exposure_policy(np.sign(r), cfg), md, cfg, per_year=8760)
    foresight = backtest(exposure_policy(np.r_[np.sign(r[1:]), 0.0], cfg), md, cfg, per_year=8760)
    assert foresight.strategy.sharpe > 50.0
    assert abs(column_rule.strategy.sharpe - causal.strategy.sharpe) < 0.5
    assert column_rule.strategy.sharpe < 0.1 * foresight.strategy.sharpe


def _train(csv, out, *extra):
    from agents import cli

    code = cli.main(
        ["train", "--data", str(csv), "--device", "cpu", "--timesteps", "20000", "--out", str(out)]
        + list(extra)
    )
    assert code == 0
    return json.loads((out / "metrics.json").read_text())


@pytest.mark.slow
def test_train_with_the_column_learns_the_exogenous_edge_and_stays_flat_without(tmp_path):
    """train --features signal reaches >= 0.7 of the rule sign(signal)'s out-of-sample Sharpe on
    the market whose only edge is that column; without the column it stays flat. The model file
    carries the column: make_env reads it from the file and refuses bars without it."""
    from agents import GpuDQN

    csv = tmp_path / "exo.csv"
    exogenous_signal(3000, seed=1).to_csv(csv)
    with_col = _train(csv, tmp_path / "with", "--features", "signal")
    without = _train(csv, tmp_path / "without")

    model = GpuDQN.load(tmp_path / "with" / "model.zip", device="cpu")
    assert model.extra_features == ["signal"]
    test = load_bars(csv, extra_features=["signal"]).split(0.8)[1]
    cfg = model.env_config
    rule = backtest(exposure_policy(exogenous_rule_exposure(test), cfg), test, cfg)
    assert with_col["inputs"]["kept"] == ["signal"]
    assert with_col["strategy"]["sharpe"] >= 0.7 * rule.strategy.sharpe > 0
    assert without["strategy"]["sharpe"] == 0.0 and without["kept_policy"] == "flat"

    env = model.make_env(csv)
    assert env.data.feature_names[-2] == "signal"
    env.close()
    with pytest.raises(ValueError, match=r"extra feature column\(s\) \['signal'\]"):
        model.make_env(load_bars(csv))
    flat = GpuDQN.load(tmp_path / "without" / "model.zip", device="cpu")
    with pytest.raises(ValueError, match=r"has the extra feature column\(s\) \['signal'\]"):
        flat.make_env(load_bars(csv, extra_features=["signal"]))

    # eval reads the model's columns from --data; another --features is refused.
    from agents import cli

    evaluated = tmp_path / "eval"
    argv = ["eval", "--model", str(tmp_path / "with"), "--data", str(csv), "--out", str(evaluated)]
    assert cli.main(argv) == 0
    assert (
        json.loads((evaluated / "metrics.json").read_text())["strategy"]["sharpe"]
        == (with_col["strategy"]["sharpe"])
    )
    assert cli.main([*argv[:-1], str(tmp_path / "e2"), "--features", "other"]) == 2


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["train", "--features", "signal", "--portfolio", "--data", "{csv}"],
            "--features is invalid with --portfolio",
        ),
        (["train", "--features", "signal"], "--features: these options apply to --data files"),
        (
            ["walkforward", "--features", "nope", "--data", "{csv}"],
            "exo.csv: no feature column 'nope'; the file has",
        ),
    ],
)
def test_features_option_refused_where_it_does_not_apply(tmp_path, capsys, argv, message):
    from agents import cli

    csv = tmp_path / "exo.csv"
    exogenous_signal(WARMUP_BARS + 50, seed=1).to_csv(csv)
    given = [a.format(csv=csv) for a in argv]
    assert cli.main([*given, "--device", "cpu", "--out", str(tmp_path / "o")]) == 2
    assert message in capsys.readouterr().err


def test_exogenous_market_rule_earns_its_stated_return():
    """MarketData.synthetic("exogenous") reads its column; sign(signal) earns the stated
    expectation per bar (within 4 standard errors), and the column is the only edge: the
    column's z-score predicts the next return far better than any built-in feature."""
    md = MarketData.synthetic("exogenous", n_bars=20_000, seed=2)
    assert md.feature_names[-1] == "signal" and md.metadata["extra_features"] == ["signal"]
    exposure = exogenous_rule_exposure(md)
    close = np.asarray(md.close)
    pnl = exposure[:-1] * (close[1:] / close[:-1] - 1.0)
    expected = md.metadata["rule_expected_return"]
    assert abs(pnl.mean() - expected) < 4.0 * pnl.std() / np.sqrt(len(pnl))
    x, y = md.features_and_next_returns()
    corr = np.array([abs(np.corrcoef(x[:, j], y)[0, 1]) for j in range(md.n_features)])
    assert corr[-1] > 0.25 and corr[:-1].max() < 0.05
    with pytest.raises(ValueError, match="read the column with extra_features=\\['signal'\\]"):
        exogenous_rule_exposure(MarketData.synthetic("gbm", n_bars=500))


def test_each_instrument_normalises_its_own_column():
    a, b = _frame(seed=0), _frame(seed=1)
    b["sig"] = 100.0 + 50.0 * b["sig"]
    both = pd.concat([a.assign(instrument="a"), b.assign(instrument="b")])
    md = MarketData.from_dataframe(both, extra_features=["sig"])
    alone = MarketData.from_dataframe(a, extra_features=["sig"])
    np.testing.assert_array_equal(md.instrument("a").features, alone.features)
    with pytest.raises(ValueError, match="constant \\(2.0\\) from row 720 .*instrument 'b'"):
        MarketData.from_dataframe(
            both.assign(sig=np.r_[a["sig"], np.full(len(b), 2.0)]), extra_features=["sig"]
        )


def test_the_model_file_names_its_columns_and_refuses_a_forged_list(tmp_path):
    import gymnasium as gym
    from crafted_archives import rewrite, set_attribute

    from agents import GpuDQN
    from agents.files.safe_archive import ArchiveError

    md = MarketData.from_dataframe(_frame(), extra_features=["sig"])
    env = gym.make_vec("GpuTrading-v0", num_envs=2, device="cpu", data=md, episode_length=30)
    model = GpuDQN("DuelingPolicy", env, learning_starts=40, buffer_size=400, batch_size=16)
    assert model.extra_features == ["sig"]
    model.save(tmp_path / "m.zip")
    assert GpuDQN.load(tmp_path / "m.zip").extra_features == ["sig"]
    rewrite(tmp_path / "m.zip", set_attribute("extra_features", "sig"))
    with pytest.raises(ArchiveError, match="attribute 'extra_features' = 'sig' is invalid"):
        GpuDQN.load(tmp_path / "m.zip")
