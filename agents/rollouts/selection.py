"""Which device rollout a :class:`~agents.GpuDQN` collects with, built on first use.

Imported by ``collect_rollouts`` only on a CUDA trading env, so the CPU path never loads CuPy
nor compiles a kernel.
"""

from __future__ import annotations

from typing import Any

from gpu_runtime.precision import PrecisionSetting, resolve_precision

__all__ = ["build_rollout"]


def build_rollout(
    model: Any, kernel: str, train_precision: PrecisionSetting, seed: int | None = None
) -> Any:
    """The rollout for ``model``'s CUDA trading env or portfolio env.

    :param kernel: ``"fused"`` (:class:`~agents.rollouts.fused.FusedRollout`; on a portfolio
        env :class:`~agents.rollouts.portfolio_fused.PortfolioRollout`) or
        ``"monolithic"`` (:class:`~agents.rollouts.monolithic.MonolithicRollout`, seeded with the
        model's seed; a trading env only, ValueError on a portfolio env).
    :param train_precision: the model's ``train_precision``: where it resolves to bf16 the fused
        rollout acts in bf16 too, otherwise in tf32.
    :param seed: the fused rollout's exploration seed; ``None`` draws one from NumPy's global
        generator (pass one when a checkpoint's generator state replaces it anyway).
    """
    portfolio = model.trading_env is None and getattr(model, "portfolio_env", None) is not None
    if kernel == "monolithic":
        if portfolio:
            raise ValueError(
                "rollout_kernel = 'monolithic' is invalid with the portfolio env (MultiDiscrete "
                "actions): allowed is 'fused' (the monolithic kernel acts with one Discrete "
                "argmax per env)"
            )
        from agents.rollouts.monolithic import MonolithicRollout

        return MonolithicRollout(model, seed=model.seed or 0)
    cuda = model.device.type == "cuda"
    act_precision = (
        "bf16" if cuda and resolve_precision(train_precision, model.device) == "bf16" else "tf32"
    )
    if portfolio:
        from agents.rollouts.portfolio_fused import PortfolioRollout

        return PortfolioRollout(model, seed=seed, act_precision=act_precision)
    # Each rollout module is imported only when it is used.
    from agents.rollouts.fused import FusedRollout

    return FusedRollout(model, seed=seed, act_precision=act_precision)
