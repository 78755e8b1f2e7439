"""Warm up, capture once, replay; run eagerly for good where the capture fails.

Both CUDA graphs of the agents (the captured train step and the fused rollout's step) follow the
same life: a few steps run eagerly first (capture needs cuBLAS workspaces, optimizer state,
compiled kernels and every buffer view to exist already), then one step is recorded in a
``torch.cuda.CUDAGraph`` and every later step replays it. A capture that fails (a torch/CuPy
combination that cannot capture, a host sync inside the step) warns once and leaves the work
eager from then on: the same computation, without the graph. :class:`GraphRunner` holds that
life; what is recorded, and the host work around a replay, stay with the caller::

    runner = GraphRunner("the train step", "running it without a graph", warmup_steps=2)
    for _ in range(steps):
        if runner.ready(record):      # record() -> CUDAGraph, once the warm-up is done
            runner.replay()
        else:
            runner.run_eager(step)    # a warm-up step, or every step after a failed capture
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable
from typing import Any

import torch as th

__all__ = ["GraphRunner", "is_recompile_error", "no_recompile", "warm_up_on_side_stream"]


def no_recompile() -> Any:
    """``torch.compiler.set_stance("fail_on_recompile")`` where the torch version has it.

    A compiled function whose guards fail inside a capture would recompile there, and building
    guards may read a device scalar (an optimizer's repr formats its ``lr`` tensor):
    ``cudaErrorStreamCaptureUnsupported``. Under this stance it raises first, before any CUDA
    call, and the caller can warm up once more instead.
    """
    set_stance = getattr(th.compiler, "set_stance", None)
    if set_stance is None:
        return contextlib.nullcontext()
    return set_stance("fail_on_recompile")


def warm_up_on_side_stream(step: Callable[[], Any], device: th.device, times: int = 1) -> None:
    """Run ``step`` ``times`` on a fresh side stream of ``device``, joined to the current stream
    before and after: the eager runs a capture needs first (cuBLAS handles, the allocator's first
    blocks), kept off the stream the capture records. For forward-only work; a training step
    warms up through :meth:`GraphRunner.run_eager_on_side_stream` (one stream for autograd)."""
    side = th.cuda.Stream(device=device)
    side.wait_stream(th.cuda.current_stream(device))
    with th.cuda.stream(side), th.no_grad():
        for _ in range(int(times)):
            step()
    th.cuda.current_stream(device).wait_stream(side)


def is_recompile_error(err: BaseException) -> bool:
    """Whether ``err`` is the refusal of a recompile under :func:`no_recompile`."""
    return "fail_on_recompile" in str(err) or "Detected recompile" in str(err)


class GraphRunner:
    """The warm-up, capture and fallback of one CUDA graph (see the module doc).

    :param what: the work, for the warning (``"the train step"``).
    :param fallback: what happens after a failed capture, for the warning.
    :param warmup_steps: eager steps (:meth:`run_eager`) before the capture.
    :param recompile_retries: captures abandoned for a recompile of a compiled part (the
        capture then runs under :func:`no_recompile`), each followed by one more warm-up step
        before the next attempt; 0: no stance, every failed capture falls back.
    :param device: the CUDA device of :meth:`run_eager_on_side_stream`.
    """

    def __init__(
        self,
        what: str,
        fallback: str,
        warmup_steps: int,
        recompile_retries: int = 0,
        device: th.device | str | None = None,
    ) -> None:
        self.what = what
        self.fallback = fallback
        self.warmup_steps = int(warmup_steps)
        self.recompile_retries = int(recompile_retries)
        self.device = None if device is None else th.device(device)
        self.graph: th.cuda.CUDAGraph | None = None
        self.failed = False
        self.warm = 0
        self._retries = 0
        self._side_stream: th.cuda.Stream | None = None

    def ready(self, record: Callable[[], th.cuda.CUDAGraph]) -> bool:
        """Whether this step replays the graph. Once the warm-up is done and no capture has
        failed, captures first: ``record()`` makes a ``torch.cuda.CUDAGraph`` (with the device
        the work runs on current: the graph takes that device's current stream), runs the step
        inside ``torch.cuda.graph`` of it and returns it.

        :return: ``True``: call :meth:`replay`; ``False``: run the step through :meth:`run_eager`.
        """
        if self.graph is None and not self.failed and self.warm >= self.warmup_steps:
            self._capture(record)
        return self.graph is not None

    def _capture(self, record: Callable[[], th.cuda.CUDAGraph]) -> None:
        try:
            with no_recompile() if self.recompile_retries else contextlib.nullcontext():
                graph = record()
        except RuntimeError as err:  # a torch/CuPy combination that cannot capture
            if is_recompile_error(err) and self._retries < self.recompile_retries:
                self._retries += 1
                # This step runs eagerly (it counts), then one more warm-up step.
                self.warm = self.warmup_steps - 2
                return
            warnings.warn(
                f"CUDA graph capture of {self.what} failed, {self.fallback}: {err}", stacklevel=4
            )
            self.failed = True
            return
        self.graph = graph

    def replay(self) -> None:
        """Replay the captured step (on the current stream)."""
        assert self.graph is not None, "replay() before a capture: ask ready() first"
        self.graph.replay()

    def run_eager(self, step: Callable[[], Any]) -> Any:
        """Run one step without the graph, counted towards the warm-up; returns what it returns."""
        self.warm += 1
        return step()

    def run_eager_on_side_stream(self, step: Callable[[], Any]) -> Any:
        """:meth:`run_eager` on a side stream of ``device``, joined to the current stream before
        and after, as warm-up before a capture needs.

        One side stream serves every call: the autograd engine keeps each parameter's gradient
        accumulator on the stream it first ran on, and a new stream per step made it warn of a
        mismatch that can break the capture.
        """
        device = self.device
        side = self._side_stream
        if side is None:
            side = self._side_stream = th.cuda.Stream(device=device)
        side.wait_stream(th.cuda.current_stream(device))
        with th.cuda.stream(side):
            out = self.run_eager(step)
        th.cuda.current_stream(device).wait_stream(side)
        return out

    def release(self, warm_up_again: bool = True) -> None:
        """Drop the graph (and its memory pool); the next step captures anew, after the warm-up
        steps again unless ``warm_up_again`` is False (what the warm-up made still exists). A
        failed capture stays failed."""
        self.graph = None
        if warm_up_again:
            self.warm = 0
