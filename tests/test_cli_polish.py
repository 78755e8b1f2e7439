"""Command-line polish: a mistyped option or subcommand names the nearest one; the report's
plots stay readable (positions, learning-curve legend) and the kept-features count reads the
same in the terminal and on the page."""

from __future__ import annotations

import pytest

from agents import cli


def _usage_error(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    return err[0]


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["train", "--timestep", "5"], "(did you mean --timesteps?)"),
        (["train", "--timestep=5"], "(did you mean --timesteps?)"),
        (["backtest", "--exposre", "1"], "(did you mean --exposure?)"),
        (
            ["train", "--seeed", "3", "--devce", "cpu"],
            "(did you mean --seed for --seeed, --device for --devce?)",
        ),
    ],
)
def test_a_mistyped_option_names_the_nearest_option_of_its_subcommand(argv, hint, capsys):
    line = _usage_error(argv, capsys)
    assert line.startswith(f"gpu-trading-env {argv[0]}: error: unrecognized arguments: ")
    assert hint in line


def test_an_option_far_from_any_gets_no_guess(capsys):
    line = _usage_error(["train", "--zzzz"], capsys)
    assert "unrecognized arguments: --zzzz" in line and "did you mean" not in line


def test_a_mistyped_subcommand_names_the_nearest(capsys):
    assert "(did you mean 'train'?)" in _usage_error(["trian"], capsys)
