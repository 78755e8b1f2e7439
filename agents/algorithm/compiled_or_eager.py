"""``torch.compile`` of a part of the train step, with the eager function where it cannot run.

Used by :class:`~agents.algorithm.captured_step.CapturedTrainStep` for its loss and for its
gradient clipping with the Adam step.
"""

from __future__ import annotations

import types
import warnings
from typing import Any

import torch as th

__all__ = ["CompiledOrEager", "with_own_code"]


def with_own_code(fn: Any) -> Any:
    """``fn`` (a function or a bound method) with a copy of its code object.

    Dynamo keys its cache of compiled code, and the limit of 8 recompilations, on the code
    object. Every train step compiles the same ``_loss`` method guarded on its own model, so
    the ninth model in a process (a sweep, a test session, a benchmark) hit the limit and ran
    its loss eagerly inside the graph, silently, and markedly slower.
    """
    func = getattr(fn, "__func__", fn)
    copy = types.FunctionType(
        func.__code__.replace(),
        func.__globals__,
        func.__name__,
        func.__defaults__,
        func.__closure__,
    )
    copy.__kwdefaults__ = func.__kwdefaults__
    copy.__qualname__ = func.__qualname__
    owner = getattr(fn, "__self__", None)
    return types.MethodType(copy, owner) if owner is not None else copy


class CompiledOrEager:
    """``fn`` through ``torch.compile``, compiled at its first call; when that call fails (no
    Triton, an unsupported torch), a warning and ``fn`` itself from then on: same math, eager.

    :param fn: the function.
    :param what: its name in the warning.
    """

    def __init__(self, fn: Any, what: str) -> None:
        self.fn = with_own_code(fn)
        self.what = what
        self.failed = False
        self._call: Any = None

    def __call__(self, *args: Any) -> Any:
        if self._call is None:
            self._call = th.compile(self.fn, dynamic=False)
            try:
                return self._call(*args)
            except Exception as err:
                warnings.warn(
                    f"torch.compile of the train step's {self.what} failed, running it eagerly: "
                    f"{err}",
                    stacklevel=5,
                )
                self._call = self.fn
                self.failed = True
        return self._call(*args)
