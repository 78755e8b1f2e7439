"""SB3's Adam as a capturable Adam for the captured train step, and back for saving.

A CUDA graph replays the optimizer step too, so the step may not read host values that change:
``torch.optim.Adam(capturable=True)`` keeps its step counts on the device, and its learning
rate is a device scalar the train step fills when the schedule moves. Saved files keep the
plain Adam's state dict (:func:`plain_optimizer_state`), so a model loads the same whichever
path trained it.
"""

from __future__ import annotations

from typing import Any

import torch as th

from agents.algorithm.compiled_or_eager import with_own_code

__all__ = ["ADAM_KEYS", "adam_update", "capturable_adam", "plain_optimizer_state"]

# Adam hyperparameters carried over to the capturable optimizer (where the torch version has them).
ADAM_KEYS = ("betas", "eps", "weight_decay", "amsgrad", "maximize", "decoupled_weight_decay")


def capturable_adam(optimizer: th.optim.Adam, lr: th.Tensor, fused: bool = True) -> th.optim.Adam:
    """An Adam with ``optimizer``'s parameters, hyperparameters and state; capturable, fused
    (or foreach, which ``torch.compile`` can turn into generated kernels), its learning rate
    read from the device scalar ``lr``.

    :param optimizer: SB3's Adam, one parameter group.
    :param lr: float32 [] on the parameters' device.
    """
    (group,) = optimizer.param_groups
    kwargs = {k: group[k] for k in ADAM_KEYS if k in group}
    if fused:
        kwargs["fused"] = True
    else:
        kwargs["foreach"] = True
    new = th.optim.Adam(group["params"], lr=lr, capturable=True, **kwargs)
    for p in group["params"]:
        state = optimizer.state.get(p)
        if state:
            new.state[p] = {
                k: (v.to(device=p.device, dtype=th.float32) if k == "step" else v)
                for k, v in state.items()
            }
    return new


def adam_update(optimizer: th.optim.Adam) -> Any:
    """``optimizer.step`` without torch's wrappers, with its own code object: call it under
    ``torch.no_grad()``.

    Why: ``Optimizer.step`` is wrapped by the profiler/hook wrapper and ``_use_grad``, which breaks
    the compiled graph on purpose, so Dynamo compiles those frames of torch's by themselves, keyed
    on torch's code objects and guarded on the optimizer object. Every model's train step then
    adds one entry to the same frames, and the ninth model in a process (a zoo worker, a
    walk-forward, a test session) hit Dynamo's recompile limit and printed a page of warnings for
    each model after it. Unwrapped and copied, the step is traced inside the caller's own frame.
    What is skipped: optimizer step hooks (the train step registers none) and the profiler's
    label.

    :param optimizer: a ``torch.optim.Adam``.
    :return: a callable with no arguments doing the Adam step, bit for bit ``optimizer.step()``.
    """
    step = type(optimizer).step
    while hasattr(step, "__wrapped__"):  # the hook wrapper, then _use_grad, then Adam.step
        step = step.__wrapped__
    return with_own_code(step.__get__(optimizer))


def plain_optimizer_state(state_dict: dict[str, Any], flags: dict[str, Any]) -> dict[str, Any]:
    """The state dict of the capturable Adam as the plain Adam it replaced would give it.

    ``lr`` becomes a float, ``fused``/``capturable``/``foreach`` take the values in ``flags``
    (the replaced optimizer's), and when that one kept ``step`` on the host (not capturable, not
    fused), each ``step`` becomes a CPU float32 scalar. The live optimizer is not modified.

    :param state_dict: ``optimizer.state_dict()`` of the capturable Adam.
    :param flags: ``{"fused": ..., "capturable": ..., "foreach": ...}`` of the plain Adam.
    :return: A new state dict (tensors not converted are shared with the input).
    """
    groups = []
    for group in state_dict["param_groups"]:
        group = dict(group)
        lr = group["lr"]
        group["lr"] = float(lr.item()) if isinstance(lr, th.Tensor) else float(lr)
        group.update(flags)
        groups.append(group)
    host_step = not (flags.get("capturable") or flags.get("fused"))
    state = {}
    for key, entry in state_dict["state"].items():
        entry = dict(entry)
        step = entry.get("step")
        if host_step and isinstance(step, th.Tensor):
            entry["step"] = th.tensor(float(step.item()), dtype=th.float32)
        state[key] = entry
    return {"state": state, "param_groups": groups}
