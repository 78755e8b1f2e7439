"""CPU smoke test of ``benchmarks/portfolio_throughput.py``: it imports, parses its arguments
(refusing bad ones by name), counts a step's bytes as its docstring says, and halves N until
the arrays fit."""

from __future__ import annotations

import pytest

from benchmarks import portfolio_throughput as bench
from gpu_runtime.device import cuda_available


def test_arguments_and_their_refusals(capsys) -> None:
    args = bench.parse_args([])
    assert args.ks == [1, 4, 8, 32, 64] and args.envs == 2**20 and args.out is None
    args = bench.parse_args(["--ks", "8", "--envs", "4096", "--steps", "5", "--out", "x.json"])
    assert (args.ks, args.envs, args.steps, str(args.out)) == ([8], 4096, 5, "x.json")
    with pytest.raises(SystemExit):
        bench.parse_args(["--steps", "0"])
    assert "--steps = 0 is invalid" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.parse_args(["--ks", "8", "0"])
    assert "--ks = [8, 0] is invalid" in capsys.readouterr().err


def test_bytes_per_env_step_by_hand() -> None:
    # K = 1, F = 2, D = 4: state 29 + 28 + 32, actions 8, two closes 16, features 8,
    # obs 16, positions and costs 16, scalars 31, final obs 16 / 4.
    assert bench.bytes_per_env_step(1, 2, 4) == 29 + 28 + 32 + 8 + 16 + 8 + 16 + 16 + 31 + 4
    assert (
        bench.bytes_per_env_step(1, 2, 4, next_open=True) == bench.bytes_per_env_step(1, 2, 4) + 8
    )
    assert bench.obs_dim(8, 51) == 417


def test_envs_halved_until_they_fit() -> None:
    assert bench.fitting_envs(2**20, 1000, 2**40) == 2**20
    assert bench.fitting_envs(2**20, 1000, 10**8) == 2**16  # 65.5 MB <= 80 MB < 131 MB
    assert bench.fitting_envs(8, 10**9, 1) == 1


def test_table_rows_format() -> None:
    row = {
        "k": 8,
        "num_envs": 2**20,
        "obs_dim": 417,
        "ms_per_step": 1.5,
        "env_steps_per_s": 7e8,
        "instrument_steps_per_s": 5.6e9,
        "bytes_per_env_step": 3967.0,
        "gb_per_s": 2777.0,
        "fraction_of_peak": 0.58,
        "fraction_of_copy": None,
    }
    header, line = bench.format_rows([row])
    assert header.split()[:3] == ["K", "N", "D"]
    assert line.split() == [
        "8",
        "1048576",
        "417",
        "1.500",
        "7.000e+08",
        "5.600e+09",
        "3967",
        "2777",
        "58",
        "-",
    ]


@pytest.mark.skipif(cuda_available(), reason="checks the message without a GPU")
def test_main_without_a_gpu_says_so(capsys) -> None:
    assert bench.main(["--ks", "1"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err
