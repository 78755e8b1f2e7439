"""The files of :class:`~agents.GpuDQN`: what it saves beyond SB3's attributes, and checkpoints.

:class:`~agents.files.model_files.WeightsOnlyFiles` writes and reads the weights-only format;
this mixin adds what belongs to GpuDQN: the captured step's Adam saved as the plain Adam it
replaced, the curiosity model and its optimizer among the state dicts, the curiosity weights put
back into the env on load, the attributes that are rebuilt rather than saved, and
:meth:`~GpuDQNFiles.save_checkpoint` / :meth:`~GpuDQNFiles.load_checkpoint`
(:mod:`agents.files.checkpoint`).
"""

from __future__ import annotations

import io
import pathlib
from typing import Any, TypeVar

import torch as th
from gymnasium.vector import VectorEnv as GymVectorEnv
from stable_baselines3.common.type_aliases import GymEnv

from agents.files.model_files import WeightsOnlyFiles

__all__ = ["GpuDQNFiles"]

SelfGpuDQN = TypeVar("SelfGpuDQN", bound="GpuDQNFiles")


class GpuDQNFiles(WeightsOnlyFiles):
    """Mixin of :class:`~agents.GpuDQN` (before SB3's ``DQN`` in its bases): its saves and loads.

    Calls the host's ``_restore_curiosity_weights`` after a load.
    """

    _captured_step: Any
    curiosity_model: Any
    _total_timesteps: int
    num_timesteps: int

    def get_parameters(self) -> dict[str, dict]:
        """SB3's parameters; the captured step's Adam is saved as the plain Adam it replaced."""
        params = super().get_parameters()
        step = self._captured_step
        if step is not None and self.policy.optimizer is step.optimizer:
            from agents.algorithm.capturable_adam import plain_optimizer_state

            params["policy.optimizer"] = plain_optimizer_state(
                params["policy.optimizer"], step.plain_flags
            )
        return params

    def load_replay_buffer(
        self,
        path: str | pathlib.Path | io.BufferedIOBase,
        truncate_last_traj: bool = True,
        allow_pickle: bool = False,
    ) -> None:
        """:meth:`WeightsOnlyFiles.load_replay_buffer`; then the saved curiosity weights go back
        into the env."""
        super().load_replay_buffer(path, truncate_last_traj, allow_pickle=allow_pickle)
        self._restore_curiosity_weights()

    @classmethod
    def load(  # type: ignore[override]
        cls: type[SelfGpuDQN],
        path: str | pathlib.Path | io.BufferedIOBase,
        env: GymEnv | GymVectorEnv | None = None,
        device: th.device | str = "auto",
        custom_objects: dict[str, Any] | None = None,
        print_system_info: bool = False,
        force_reset: bool = True,
        allow_pickle: bool = False,
        **kwargs: Any,
    ) -> SelfGpuDQN:
        """:meth:`WeightsOnlyFiles.load`; with ``env`` given, the saved curiosity weights go back
        into it."""
        model = super().load(
            path,
            env=env,
            device=device,
            custom_objects=custom_objects,
            print_system_info=print_system_info,
            force_reset=force_reset,
            allow_pickle=allow_pickle,
            **kwargs,
        )
        model._restore_curiosity_weights()  # noqa: SLF001 (GpuDQN's own step, split out here)
        return model

    def save_checkpoint(self, path: str | pathlib.Path) -> pathlib.Path:
        """Write a checkpoint into the folder ``path`` (:mod:`agents.files.checkpoint`): model, replay
        buffer, env state and every random generator, from which :meth:`load_checkpoint` and
        ``learn(model.remaining_timesteps, reset_num_timesteps=False)`` continue this run as if
        it had not stopped. Call it between ``learn`` calls, or use
        :class:`~agents.files.checkpoint.CheckpointEvery` during one.

        :return: The folder.
        """
        from agents.files.checkpoint import save_checkpoint

        return save_checkpoint(self, path)

    @classmethod
    def load_checkpoint(
        cls: type[SelfGpuDQN],
        path: str | pathlib.Path,
        env: GymEnv | GymVectorEnv | None = None,
        device: th.device | str = "auto",
        **kwargs: Any,
    ) -> SelfGpuDQN:
        """The model of a checkpoint written by :meth:`save_checkpoint` or
        :class:`~agents.files.checkpoint.CheckpointEvery` (``path``: its folder, or the folder of a
        run's checkpoints: the newest complete one), with its replay buffer; the env's state goes
        into ``env`` (same settings and number of envs) and the process's random generators
        are set as they were (:func:`agents.files.checkpoint.load_checkpoint`)."""
        from agents.files.checkpoint import load_checkpoint

        return load_checkpoint(cls, path, env=env, device=device, **kwargs)

    @property
    def remaining_timesteps(self) -> int:
        """Env steps left of the last ``learn``'s ``total_timesteps`` (0 when it finished):
        ``learn(model.remaining_timesteps, reset_num_timesteps=False)`` finishes a resumed run."""
        return max(int(self._total_timesteps) - int(self.num_timesteps), 0)

    def _excluded_save_params(self) -> list[str]:
        return [
            *super()._excluded_save_params(),
            "trading_env",
            "curiosity_model",
            "_curiosity",
            "_fused_rollout",
            "_captured_step",
            "_captured_unsupported",
            "_mode_free",
            "_target_update",
            "_pending_rollout_generator",
            "_pending_rollout_round",
        ]

    def _get_torch_save_params(self) -> tuple[list[str], list[str]]:
        state_dicts, variables = super()._get_torch_save_params()
        if self.curiosity_model is not None:
            state_dicts = [*state_dicts, "curiosity_model", "curiosity_model.optimizer"]
        return state_dicts, variables
