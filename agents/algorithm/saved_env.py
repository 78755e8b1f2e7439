"""The env a saved :class:`~agents.GpuDQN` acts on: its :class:`~gpu_trading_env.EnvConfig`
(saved with the model in JSON form) and its input selection applied to the data
(:func:`env_setup`), the vector env built from them, and the one-line refusal of an env or an
observation of other shapes than the model's (:func:`check_spaces`, :func:`check_observation`).

A model acts on observations of one width (the data's features, after its input selection, and
the portfolio features) and chooses among the actions of one layout (exposure levels x order
types x sub-actions); an env built with other data or other settings has other spaces, and
SB3's own shape errors do not say where the right env comes from. Both come from here.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces

from agents.files.saved_inputs import InputSelection, apply_inputs
from gpu_trading_env.core.config import EnvConfig
from gpu_trading_env.core.constants import N_PORTFOLIO_FEATURES
from gpu_trading_env.data.market_data import MarketData
from gpu_trading_env.env_setup import resolve_config, resolve_data

__all__ = [
    "LONGEST_EPISODE",
    "MAKE_ENV_HINT",
    "EnvSetup",
    "check_observation",
    "check_spaces",
    "env_setup",
    "portfolio_env_setup",
    "portfolio_setup_of",
    "space_text",
]

# EnvConfig's longest episode_length: an episode as long as the data allows.
LONGEST_EPISODE = 2**31 - 1
MAKE_ENV_HINT = (
    "build the env it acts on with model.make_env(data, num_envs=...) (its saved EnvConfig and "
    "input selection applied to the data)"
)


@dataclass(frozen=True)
class EnvSetup:
    """What a model's env is built from: the data with the model's inputs and its config."""

    data: MarketData
    """The bars with the model's input selection applied (features float32 [T, F])."""
    config: EnvConfig
    """The saved EnvConfig with the caller's overrides."""


def space_text(observation_space: Any, action_space: Any) -> str:
    """``"observations of shape (55,) and 3 actions"`` (or the spaces themselves where they
    are not a Box and a Discrete)."""
    obs = (
        f"observations of shape {tuple(observation_space.shape)}"
        if isinstance(observation_space, spaces.Box)
        else f"observation space {observation_space}"
    )
    acts = (
        f"{int(action_space.n)} actions"
        if isinstance(action_space, spaces.Discrete)
        else f"action space {action_space}"
    )
    return f"{obs} and {acts}"


def _shapes_differ(a: Any, b: Any) -> bool:
    """Whether two spaces differ in kind, shape or number of actions (the bounds and dtypes are
    left to SB3's own check)."""
    if type(a) is not type(b):
        return True
    if isinstance(a, spaces.Discrete):
        return int(a.n) != int(b.n) or int(a.start) != int(b.start)
    if isinstance(a, spaces.MultiDiscrete):
        return not (np.array_equal(a.nvec, b.nvec) and np.array_equal(a.start, b.start))
    return getattr(a, "shape", None) != getattr(b, "shape", None)


def check_spaces(
    observation_space: Any, action_space: Any, model_observation: Any, model_action: Any
) -> None:
    """Raise ValueError, one line naming both, where an env's spaces (one env's: a vector env's
    ``single_*`` spaces) differ in shape or number of actions from the model's."""
    if _shapes_differ(observation_space, model_observation) or _shapes_differ(
        action_space, model_action
    ):
        raise ValueError(
            f"the env has {space_text(observation_space, action_space)}; this model acts on "
            f"{space_text(model_observation, model_action)}: {MAKE_ENV_HINT}"
        )


def check_observation(observation: Any, model_observation: Any, model_action: Any) -> None:
    """Raise ValueError, one line, where ``observation`` (one observation or a batch
    ``[N, *shape]``) does not have the shape of the model's Box observation space."""
    if not isinstance(model_observation, spaces.Box) or isinstance(observation, dict):
        return
    shape = getattr(observation, "shape", None)
    if shape is None:
        shape = np.shape(observation)
    want = tuple(model_observation.shape)
    shape = tuple(shape)
    if shape == want or shape[1:] == want:
        return
    raise ValueError(
        f"an observation of shape {shape} does not fit this model, which acts on "
        f"{space_text(model_observation, model_action)} (shape {want} or (n_envs, "
        f"{', '.join(map(str, want))})): {MAKE_ENV_HINT}"
    )


def _check_extra_features(bars: MarketData, extra: list[str]) -> None:
    """ValueError, naming the columns, where ``bars`` lack the model's extra feature columns or
    hold others."""
    have = list(bars.metadata.get("extra_features", []))
    if extra and [c for c in bars.feature_names if c in extra] != extra:
        raise ValueError(
            f"this model reads the extra feature column(s) {extra} beside the built-in features; "
            f"the data has {have or 'none'}: read the bars with extra_features={extra} "
            "(load_bars, MarketData.from_csv), or pass the file's path"
        )
    if have and have != extra:
        raise ValueError(
            f"the data has the extra feature column(s) {have}; this model was trained on "
            f"{extra or 'none'}: read the bars with extra_features={extra or None}"
        )


def env_setup(
    data: MarketData | str | os.PathLike[str],
    config: EnvConfig,
    input_selection: dict[str, Any] | None,
    overrides: dict[str, Any],
    model_observation: Any,
    model_action: Any,
    extra_features: list[str] | None = None,
) -> EnvSetup:
    """The data and config of the env a model acts on.

    :param data: MarketData, or a CSV/Parquet file of bars (read as
        :func:`gpu_trading_env.env_setup.resolve_data` reads it).
    :param config: the model's EnvConfig; ``overrides`` replace its fields. An
        ``episode_length`` of :data:`LONGEST_EPISODE` (a deployed baseline's: as long as the
        env allows) becomes the shortest instrument's bars minus one.
    :param input_selection: the model's ``input_selection`` (JSON form) or None (every input).
    :param extra_features: the data's own columns the model was trained on (a file is read
        with them; MarketData must hold them).
    :raises ValueError: where the data, after the input selection, or the config gives other
        spaces than the model's (one line, naming both), or the selection does not fit the
        data's features.
    :raises TypeError: for an override that is not an EnvConfig field.
    """
    extra = list(extra_features or [])
    if extra and isinstance(data, str | os.PathLike):
        from gpu_trading_env.data.loaders import load_bars  # the one reader of bar files

        data = load_bars(data, extra_features=extra)
    bars = resolve_data(data)
    if isinstance(bars, MarketData):
        _check_extra_features(bars, extra)
    if not isinstance(bars, MarketData):
        raise TypeError(
            f"data of type {type(data).__name__} is invalid: allowed is MarketData or a path to a "
            "CSV/Parquet file of bars"
        )
    if input_selection is not None:
        bars = apply_inputs(bars, InputSelection.from_dict(input_selection))
    cfg = resolve_config(config, overrides, owner="GpuDQN.make_env")
    if cfg.episode_length == LONGEST_EPISODE:
        # "As long as the env allows" (a deployed baseline's config): one episode over the bars,
        # as the backtests that judged it ran.
        cfg = cfg.replace(episode_length=max(int(bars.bars_per_instrument.min()) - 1, 1))
    width = bars.n_features + N_PORTFOLIO_FEATURES
    want = tuple(getattr(model_observation, "shape", ()))
    if want != (width,):
        after = " after the model's input selection" if input_selection is not None else ""
        raise ValueError(
            f"the data gives observations of shape ({width},) ({bars.n_features} features{after} "
            f"and {N_PORTFOLIO_FEATURES} portfolio values); this model acts on shape {want}: "
            "pass bars with the features it was trained on"
        )
    n_actions = int(getattr(model_action, "n", -1))
    if cfg.n_actions != n_actions:
        layout = sorted({"exposure_levels", "order_cost_bps", "sub_actions"} & set(overrides))
        raise ValueError(
            f"the env configuration gives {cfg.n_actions} actions (exposure levels x order "
            f"types x sub-actions); this model acts on {n_actions}: "
            + (
                f"leave {layout} as the model has them"
                if layout
                else "pass the settings it was trained with"
            )
        )
    return EnvSetup(data=bars, config=cfg)


def portfolio_setup_of(env: Any, kept: list[str] | None = None) -> dict[str, Any]:
    """What a model trained on a portfolio env saves to rebuild it (JSON form): the env's
    ``PortfolioConfig`` fields (``env``), its K ``instruments`` in order and the
    ``instrument:feature`` columns the model sees (``kept``; None: every column)."""
    fields = dataclasses.asdict(env.config)
    fields = {k: getattr(v, "name", v) for k, v in fields.items()}
    fields = {k: list(v) if isinstance(v, tuple) else v for k, v in fields.items()}
    return {"env": fields, "instruments": list(env.data.instruments), "kept": kept}


def _portfolio_data(data: Any) -> Any:
    """PortfolioData of ``data``: PortfolioData, MarketData, one file or a list of files (one
    instrument each)."""
    from gpu_trading_env.data.portfolio_data import PortfolioData

    if isinstance(data, PortfolioData):
        return data
    if isinstance(data, MarketData):
        return PortfolioData.from_market_data(data)
    paths = [data] if isinstance(data, str | os.PathLike) else list(data)
    if not paths or not all(isinstance(p, str | os.PathLike) for p in paths):
        raise TypeError(
            f"data of type {type(data).__name__} is invalid: allowed is PortfolioData, "
            "MarketData or the CSV/Parquet files of the model's instruments, one each"
        )
    return PortfolioData.from_files(paths)


def portfolio_env_setup(
    data: Any, setup: dict[str, Any], overrides: dict[str, Any]
) -> tuple[Any, Any]:
    """``(PortfolioData, PortfolioConfig)`` of the portfolio env a model acts on: ``data``
    (see :func:`_portfolio_data`) with the columns the model does not see set to zero, in the
    saved config with ``overrides`` of its fields.

    :raises ValueError: one line naming the model's instruments where ``data`` holds others
        (or another order), or a column it sees that the data has no feature of.
    """
    from gpu_trading_env.core.portfolio_config import PortfolioConfig

    bars = _portfolio_data(data)
    want = list(setup["instruments"])
    if list(bars.instruments) != want:
        raise ValueError(
            f"the data holds the instruments {list(bars.instruments)}; this model trades {want}: "
            f"pass {len(want)} files of bars, one per instrument, in that order"
        )
    kept = setup.get("kept")
    if kept is not None:
        mask = np.zeros(bars.features.shape[1:], dtype=bool)
        for name in kept:
            instrument, _, feature = name.partition(":")
            if feature not in bars.feature_names:
                raise ValueError(
                    f"the model sees column {name!r}, which the data has no feature of: pass "
                    "bars with the features it was trained on"
                )
            mask[want.index(instrument), bars.feature_names.index(feature)] = True
        features = np.ascontiguousarray(np.where(mask[None], bars.features, 0), dtype=np.float32)
        features.flags.writeable = False
        bars = dataclasses.replace(bars, features=features)
    return bars, PortfolioConfig(**{**setup["env"], **overrides})
