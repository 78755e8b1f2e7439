"""TrainConfig is the one source of the training settings: the command line's training options,
their defaults and help are its fields', its checks are the command line's, and the zoo reads
it without the command line."""

from __future__ import annotations

import argparse
import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agents import cli
from agents.cli.options import UsageError, validate
from agents.pipelines.train_config import (
    CPU_TORCH_THREADS,
    EPISODE_LENGTH,
    WALKFORWARD_CPU_TIMESTEPS,
    TrainConfig,
    TrainConfigError,
    option_fields,
    option_help,
    option_name,
    parse_int,
    setting,
    train_env_config,
    train_options_parser,
)
from gpu_trading_env import EnvConfig

ROOT = Path(__file__).resolve().parents[1]


def _subparser(command: str) -> argparse.ArgumentParser:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[command]


def _training_actions(command: str) -> dict[str, argparse.Action]:
    p = _subparser(command)
    group = next(g for g in p._action_groups if g.title == "training")
    return {a.option_strings[0]: a for a in group._group_actions}


@pytest.mark.parametrize("command", ["train", "walkforward"])
def test_every_training_option_is_a_field_with_its_default_and_help(command: str) -> None:
    actions = _training_actions(command)
    fields = option_fields()
    # The same options in the same order: one per field, none written apart.
    assert list(actions) == [option_name(f) for f in fields]
    cpu = WALKFORWARD_CPU_TIMESTEPS if command == "walkforward" else None
    for f in fields:
        s, action = setting(f), actions[option_name(f)]
        words = "env steps per fold and seed" if command == "walkforward" else None
        text = option_help(f, cpu)
        if f.name == "timesteps" and words:
            text = text.replace(s.help, words, 1)
        assert action.help == text.replace("%", "%%"), f.name
        if s.negated:
            assert isinstance(action, argparse._StoreTrueAction) and f.default is True, f.name
        elif f.type == "bool":
            assert isinstance(action, argparse._StoreTrueAction) and f.default is False, f.name
        else:
            want = s.option_default if s.option_default is not None else f.default
            assert action.default == want, f.name
            assert action.type in (parse_int, int, float, None), f.name
        if s.choices:
            assert list(action.choices) == list(s.choices), f.name


def test_the_parsed_defaults_are_the_fields_defaults_on_each_device() -> None:
    args = cli.build_parser().parse_args(["train"])
    assert TrainConfig.from_options(argparse.Namespace(**{**vars(args), "device": "cpu"})) == (
        TrainConfig()
    )
    on_gpu = TrainConfig.from_options(argparse.Namespace(**{**vars(args), "device": "cuda"}))
    assert on_gpu == TrainConfig(device="cuda")
    assert (on_gpu.num_envs, on_gpu.timesteps, on_gpu.batch_size) == (4096, 6_000_000, 4096)
    assert (on_gpu.gradient_steps, on_gpu.torch_threads) == (2, None)
    cpu = TrainConfig()
    assert (cpu.num_envs, cpu.timesteps, cpu.batch_size, cpu.buffer_size) == (
        24,
        200_000,
        128,
        200_000,
    )
    assert cpu.torch_threads == CPU_TORCH_THREADS == 1
    # walkforward's own CPU budget; a GPU's is the field's.
    wf = cli.build_parser().parse_args(["walkforward"])
    wf_cpu = TrainConfig.from_options(
        argparse.Namespace(**{**vars(wf), "device": "cpu"}), WALKFORWARD_CPU_TIMESTEPS
    )
    assert wf_cpu.timesteps == WALKFORWARD_CPU_TIMESTEPS == 50_000


def test_no_training_default_is_written_in_the_parser_or_the_training_code() -> None:
    parser_source = (ROOT / "agents/cli/parser.py").read_text()
    # The zoo's and the sweep's own --device and --no-progress are of their runs, not a setting.
    own = {"--device", "--no-progress"}
    for f in option_fields():
        if option_name(f) not in own:
            assert f'"{option_name(f)}"' not in parser_source, option_name(f)
    # The model's settings are the config's fields and properties, not literals.
    selection = "".join(
        (ROOT / "agents/pipelines" / name).read_text()
        for name in ("model_selection.py", "model_builder.py", "snapshot_training.py")
    )
    for literal in (
        "exploration_fraction=0.",
        "exploration_final_eps=0.",
        "learning_starts=max(",
        "target_update_interval=max(",
        "settings.eval_every or",
        "steps // 100",
    ):
        assert literal not in selection, literal
    for path in sorted((ROOT / "agents/cli").glob("*.py")):
        text = path.read_text()
        assert "CPU_DEFAULTS = {" not in text and "GPU_DEFAULTS = {" not in text, path.name
        assert "TRAIN_ENV_DEFAULTS = {" not in text, path.name
        assert not re.search(r"default=3e-4|default=0\.5\b|default=0\.4\b", text), path.name


def test_train_trains_in_envconfigs_defaults() -> None:
    """One source of env defaults: the commands' env (train, walkforward, the zoo) is
    EnvConfig's defaults with the episode length and --env overrides, and those defaults are
    the recommended env: short, flat, long at 1 bp, the return after costs as the reward."""
    args = _subparser("train").parse_args([])
    assert args.env is None and args.episode_length is None
    assert cli.env_config(args) == EnvConfig(episode_length=EPISODE_LENGTH)
    zoo = train_options_parser().parse_args([])
    assert train_env_config(zoo.episode_length, zoo.env) == EnvConfig(episode_length=EPISODE_LENGTH)
    default = EnvConfig()
    assert (default.exposure_levels, default.order_cost_bps, default.n_actions) == (
        (-1.0, 0.0, 1.0),
        (1.0,),
        3,
    )
    assert not default.barriers and default.diversity_penalty == default.risk_penalty_scale == 0
    import agents.pipelines.train_config as module

    assert not hasattr(module, "TRAIN_ENV_DEFAULTS")  # no second set of env defaults
    # --env overrides reach the source design's fields one by one.
    pairs = ["barriers=True", "sub_actions=3"]
    assert train_env_config(50, pairs) == EnvConfig(episode_length=50, barriers=True, sub_actions=3)


def test_the_derived_settings_of_the_model() -> None:
    c = TrainConfig(timesteps=20_000, num_envs=8)
    assert c.learning_starts == 1000 and c.target_update_interval == 400
    assert (c.snapshot_every, c.curve_every) == (2_000, 200)
    big = TrainConfig(timesteps=100, num_envs=4096, device="cuda", eval_every=7)
    assert big.learning_starts == 40_960 and big.target_update_interval == 4096
    assert (big.snapshot_every, big.curve_every) == (7, 4096)
    assert (c.exploration_fraction, c.exploration_final_eps) == (0.3, 0.02)


@pytest.mark.parametrize(
    ("name", "value", "allowed"),
    [
        ("gamma", 0.0, "a number in (0, 1]"),
        ("timesteps", 0, "1 to 10,000,000,000 (default 200,000 on the CPU, 6,000,000 on a GPU)"),
        ("net_width", 1, "0 (no hidden layers) or an integer in [2, 4096]"),
        ("val_fraction", 0.6, "(0, 0.5]"),
        ("learning_rate", float("nan"), "a finite number > 0"),
        ("device", "auto", "cpu, cuda or cuda:N"),
        (
            "buffer_size",
            0,
            "1 to 17,179,869,184 (default: the run's transitions, at most 200,000 on the CPU, "
            "2,000,000 on a GPU)",
        ),
        ("exploration_fraction", 0.0, "a number in (0, 1]"),
        ("num_envs", 2.5, "1 to 16,777,216 (default 24 on the CPU, 4,096 on a GPU)"),
    ],
)
def test_a_bad_setting_is_one_error_naming_field_value_and_range(name, value, allowed) -> None:
    with pytest.raises(TrainConfigError) as err:
        TrainConfig(**{name: value})
    assert str(err.value) == f"TrainConfig.{name} = {value!r} is invalid: allowed is {allowed}"
    assert (err.value.field, err.value.allowed) == (name, allowed)


def test_the_command_line_checks_are_the_configs() -> None:
    parser = cli.build_parser()
    for argv, message in [
        (["--gamma", "0"], "--gamma 0.0 is invalid: allowed is a number in (0, 1]"),
        (["--timesteps", "0"], "--timesteps 0 is invalid: allowed is 1 to 10,000,000,000"),
        (["--torch-threads", "0"], "--torch-threads 0 is invalid: allowed is 1 to 1,024"),
        (["--weight-decay", "1"], "--weight-decay 1.0 is invalid: allowed is a number in [0, 1)"),
    ]:
        with pytest.raises(UsageError, match=re.escape(message)):
            validate(parser.parse_args(["train", "--device", "cpu", *argv]))


def test_the_zoo_reads_the_config_without_the_command_line() -> None:
    from agents.pipelines.zoo import MARKETS_BY_NAME, SMALL, train_args

    args = train_args(MARKETS_BY_NAME["builtin"], 0, "cpu", SMALL, ("--gamma", "0.9"))
    config = TrainConfig.from_options(args)
    assert (config.gamma, config.timesteps, config.num_envs, config.progress_bar) == (
        0.9,
        2000,
        4,
        False,
    )
    assert args.config.episode_length == 100 and args.train_fraction == 0.8
    with pytest.raises(TrainConfigError, match=r"^--net-width 1 is invalid"):
        train_args(MARKETS_BY_NAME["builtin"], 0, "cpu", SMALL, ("--net-width", "1"))
    # A fresh process: the zoo's options come without the command line.
    code = (
        "import sys; from agents.pipelines.zoo import MARKETS_BY_NAME, SMALL, train_args; "
        "train_args(MARKETS_BY_NAME['builtin'], 0, 'cpu', SMALL, ()); "
        "print(sorted(m for m in sys.modules if m.startswith('agents.cli')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_no_import_chain_from_the_zoo_to_the_command_line_or_from_options_to_train() -> None:
    grimp = pytest.importorskip("grimp")
    graph = grimp.build_graph("agents", "gpu_trading_env", "gpu_runtime")
    assert not graph.chain_exists("agents.pipelines", "agents.cli", as_packages=True)
    assert not graph.chain_exists("agents.cli.options", "agents.cli.train")
    assert not graph.chain_exists("agents.cli.options", "agents.cli.parser")


def test_pyproject_lists_no_import_of_the_command_line_from_below() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    assert "agents.pipelines.zoo -> agents.cli" not in text


def test_fields_without_an_option_have_no_option_and_a_help() -> None:
    no_option = {f.name for f in dataclasses.fields(TrainConfig) if setting(f).option is None}
    assert no_option == {
        "exploration_fraction",
        "exploration_final_eps",
        "tensorboard_log",
    }
    assert all(setting(f).help for f in dataclasses.fields(TrainConfig))


def test_the_buffer_is_sized_from_the_run() -> None:
    # A run stores timesteps rounded up to whole vector steps: 1,000 on 24 envs is 42 steps.
    assert TrainConfig(timesteps=1000).buffer_size == 1008
    assert TrainConfig(timesteps=1000, num_envs=8).buffer_size == 1000
    # The quickstart's and a GPU's defaults are the caps they were (the same learning).
    assert TrainConfig().buffer_size == 200_000
    assert TrainConfig(device="cuda").buffer_size == 2_000_000
    assert TrainConfig(timesteps=10**9).buffer_size == 200_000
    assert TrainConfig(timesteps=1000, buffer_size=300_000).buffer_size == 300_000


def test_the_buffer_size_is_an_option_of_both_train_paths() -> None:
    from agents.pipelines.portfolio_train_config import PortfolioTrainConfig

    parser = cli.build_parser()
    args = parser.parse_args(["train", "--device", "cpu", "--buffer-size", "5_000"])
    assert TrainConfig.from_options(args).buffer_size == 5000
    args = parser.parse_args(["train", "--portfolio", "--device", "cpu", "--buffer-size", "700"])
    assert PortfolioTrainConfig.from_options(args).resolved("cpu").buffer_size == 700
    message = "--buffer-size 0 is invalid: allowed is 1 to 17,179,869,184"
    with pytest.raises(UsageError, match=re.escape(message)):
        validate(parser.parse_args(["train", "--device", "cpu", "--buffer-size", "0"]))
    with pytest.raises(ValueError, match=re.escape(message)):
        PortfolioTrainConfig.from_options(parser.parse_args(["train", "--buffer-size", "0"]))


def test_the_portfolio_buffer_is_sized_from_the_run() -> None:
    # It was 100,000 transitions whatever --timesteps (4.8 GB at 100 instruments).
    from agents.pipelines.portfolio_train_config import PortfolioTrainConfig

    assert PortfolioTrainConfig(timesteps=2000).resolved("cpu").buffer_size == 2000
    assert PortfolioTrainConfig(timesteps=2001).resolved("cpu").buffer_size == 2016  # 16 envs
    assert PortfolioTrainConfig().resolved("cpu").buffer_size == 30_000  # the CPU's run
    assert PortfolioTrainConfig().resolved("cuda").buffer_size == 1_000_000  # the GPU's cap
    assert PortfolioTrainConfig(timesteps=10**8).resolved("cpu").buffer_size == 100_000
