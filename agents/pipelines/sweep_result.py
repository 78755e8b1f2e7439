"""What a sweep reports (:class:`SweepSummary`): each setting over its seeds
(:class:`SettingSummary`), each run (:class:`SweepRunRow`) and the spread of a figure over
seeds (:class:`SeedSpread`); ``SweepSummary.to_dict`` is sweep.json."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "SETTING_FIGURES",
    "SeedSpread",
    "SettingSummary",
    "SweepLaunch",
    "SweepRunRow",
    "SweepSummary",
]

RANKED_BY = (
    "mean validation Sharpe of the kept models (validation window: the last "
    "--val-fraction of each run's training bars); the test return is shown, not used"
)


@dataclass(frozen=True)
class SeedSpread:
    """One figure over the seeds that finished: mean, sample standard deviation (ddof 1; 0.0
    for one seed), min and max; all None where no seed gave the figure."""

    mean: float | None
    std: float | None
    min: float | None
    max: float | None

    @classmethod
    def of(cls, values: Sequence[float]) -> SeedSpread:
        """The spread of ``values`` (in the figure's own unit)."""
        if not values:
            return cls(None, None, None, None)
        mean = sum(values) / len(values)
        # The sample standard deviation: the spread a further seed would be drawn from.
        std = (
            math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
            if len(values) > 1
            else 0.0
        )
        return cls(mean, std, min(values), max(values))

    def to_dict(self) -> dict[str, float | None]:
        return {"mean": self.mean, "std": self.std, "min": self.min, "max": self.max}


@dataclass(frozen=True)
class SweepRunRow:
    """One run of a sweep in its report: where and how it ran, and its figures from its
    metrics.json (None where it failed, or where the data has no known rule).

    :param seed: the run's ``--seed``.
    :param returncode: the ``train`` process's exit code.
    :param device: the device slot it ran on (``cpu``, ``cuda:N``).
    :param wall_seconds: the process's wall-clock seconds.
    :param out: its report folder; ``log``: its stdout and stderr.
    :param validation_sharpe: the kept model's Sharpe on the validation window (annualised,
        costs in); ``validation_return``, ``validation_buy_and_hold``: total returns there
        (fractions).
    :param total_return: the out-of-sample total return (fraction); ``test_buy_and_hold``:
        buy-and-hold's; ``test_costs_paid``: costs over the initial capital.
    :param vs_known_rule: the out-of-sample return as a multiple of the known rule's.
    :param train_seconds: the training's wall-clock seconds.
    """

    seed: int
    returncode: int
    device: str
    wall_seconds: float
    out: str
    log: str
    validation_sharpe: float | None
    validation_return: float | None
    validation_buy_and_hold: float | None
    total_return: float | None
    test_buy_and_hold: float | None
    test_costs_paid: float | None
    vs_known_rule: float | None
    train_seconds: float | None

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


# The run figures summarised per setting, in sweep.json's order.
SETTING_FIGURES = (
    "validation_sharpe",
    "validation_return",
    "validation_buy_and_hold",
    "total_return",
    "test_buy_and_hold",
    "test_costs_paid",
    "vs_known_rule",
    "train_seconds",
)


@dataclass(frozen=True)
class SettingSummary:
    """One setting of the grid: its runs and, over the seeds that finished, the spread of each
    of :data:`SETTING_FIGURES` (same names and units as :class:`SweepRunRow`'s).

    :param setting: ``train`` option name (without ``--``) -> value as typed.
    :param label: ``learning-rate=1e-4 gamma=0.5`` (``defaults`` for none).
    :param rank: 1 for the best mean validation Sharpe; settings with no finished run last.
    """

    setting: dict[str, str]
    label: str
    runs: list[SweepRunRow]
    finished: int
    failed: int
    validation_sharpe: SeedSpread
    validation_return: SeedSpread
    validation_buy_and_hold: SeedSpread
    total_return: SeedSpread
    test_buy_and_hold: SeedSpread
    test_costs_paid: SeedSpread
    vs_known_rule: SeedSpread
    train_seconds: SeedSpread
    rank: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "setting": dict(self.setting),
            "label": self.label,
            "runs": [r.to_dict() for r in self.runs],
            "finished": self.finished,
            "failed": self.failed,
            **{key: getattr(self, key).to_dict() for key in SETTING_FIGURES},
            "rank": self.rank,
        }


@dataclass(frozen=True)
class SweepLaunch:
    """How the sweep command ran: its device slots, runs at a time on each, the seeds, the
    ``train`` options every run got, and the sweep's wall-clock seconds."""

    devices: list[str]
    runs_per_device: int
    seeds: list[int]
    train_options: list[str]
    wall_seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "devices": list(self.devices),
            "runs_per_device": self.runs_per_device,
            "seeds": list(self.seeds),
            "train_options": list(self.train_options),
            "wall_seconds": self.wall_seconds,
        }


@dataclass(frozen=True)
class SweepSummary:
    """A sweep's result (:func:`~agents.pipelines.sweep.aggregate`).

    :param settings: every setting, best rank first.
    :param runs: runs in all; ``failed``: those that gave no metrics.json.
    :param data: the first finished run's data: its metrics.json ``data`` fields (source,
        files, instruments with bars and dates; see that file's ``schema``), None where none
        finished.
    :param order_cost_bps: that run's order costs, bps per order type.
    :param ranked_by: what ranks the settings, in words.
    :param launch: how the command ran, or None for a summary built outside the command.
    """

    settings: list[SettingSummary]
    runs: int
    failed: int
    data: dict[str, Any] | str | None
    order_cost_bps: list[float] | None
    ranked_by: str = RANKED_BY
    launch: SweepLaunch | None = field(default=None)

    def to_dict(self) -> dict[str, Any]:
        """sweep.json: the settings and counts, then how the command ran (where known)."""
        d: dict[str, Any] = {
            "settings": [s.to_dict() for s in self.settings],
            "runs": self.runs,
            "failed": self.failed,
            "ranked_by": self.ranked_by,
            "data": self.data,
            "order_cost_bps": self.order_cost_bps,
        }
        if self.launch is not None:
            d |= self.launch.to_dict()
        return d
