"""The precision of matrix products on the GPU: one name for every place that chooses it.

``"fp32"``: exact float32 products (torch's default). ``"tf32"``: float32 data through tensor
cores (10-bit mantissa products, float32 accumulation). ``"bf16"``: bfloat16 products with
float32 accumulation (autocast, or bfloat16 copies of the weights). ``"auto"`` is a setting, not
a precision: :func:`resolve_precision` makes it ``"bf16"`` where the GPU computes bfloat16
natively and ``"tf32"`` elsewhere.

Torch is imported inside the functions that need it: the command line lists the choices in its
help without paying for torch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Literal, get_args

if TYPE_CHECKING:
    import torch as th

__all__ = [
    "PRECISIONS",
    "PRECISION_SETTINGS",
    "Precision",
    "PrecisionSetting",
    "check_precision",
    "resolve_precision",
    "tf32_matmuls",
]

Precision = Literal["tf32", "fp32", "bf16"]
PrecisionSetting = Literal["auto", "bf16", "tf32", "fp32"]
PRECISIONS: tuple[Precision, ...] = get_args(Precision)
PRECISION_SETTINGS: tuple[PrecisionSetting, ...] = get_args(PrecisionSetting)


def check_precision(field: str, value: object, allow_auto: bool = False) -> str:
    """``value`` when it names a precision (or ``"auto"`` with ``allow_auto``).

    :param field: The argument's name, for the error message.
    :raises ValueError: naming ``field``, ``value`` and the allowed names.
    """
    allowed: tuple[str, ...] = PRECISION_SETTINGS if allow_auto else PRECISIONS
    if not isinstance(value, str) or value not in allowed:
        names = ", ".join(repr(a) for a in allowed[:-1]) + f" or {allowed[-1]!r}"
        raise ValueError(f"{field} = {value!r} is invalid: allowed is {names}")
    return value


def resolve_precision(precision: str, device: th.device | str) -> Precision:
    """``precision``, with ``"auto"`` made ``"bf16"`` on a GPU that computes bfloat16 natively
    (compute capability 8.0 or later: A100, H100, H200, RTX 30xx and later) and ``"tf32"``
    elsewhere (before Ampere, tf32 products are plain float32 ones)."""
    import torch as th

    if precision != "auto":
        return check_precision("precision", precision)  # type: ignore[return-value]
    major, _ = th.cuda.get_device_capability(th.device(device))
    return "bf16" if major >= 8 else "tf32"


@contextlib.contextmanager
def tf32_matmuls(allow: bool) -> Iterator[None]:
    """``torch.backends.cuda.matmul.allow_tf32`` set for a block and restored after it: one
    part's precision (acting, a train step) must not leak into another's."""
    import torch as th

    previous = th.backends.cuda.matmul.allow_tf32
    th.backends.cuda.matmul.allow_tf32 = allow
    try:
        yield
    finally:
        th.backends.cuda.matmul.allow_tf32 = previous
