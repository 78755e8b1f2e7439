"""The dueling network's layout as the code that runs it reads it: the default architecture and
the chain of products (``(weight, bias)`` pairs and elementwise activations).

The network (:mod:`agents.algorithm.policies`) builds its layers from
:data:`DEFAULT_DUELING_ARCH` and runs its forward through :func:`run_chain`; the rollouts, a
room below it, read the same layout here: the greedy actor (:mod:`agents.rollouts.acting`) runs
the chain a network hands it through its ``greedy_chain()`` method, and the monolithic kernel
(:mod:`agents.rollouts.monolithic`) is compiled with the default architecture's sizes.
"""

from __future__ import annotations

import torch as th
from torch import nn

__all__ = ["DEFAULT_DUELING_ARCH", "PRODUCT_ALIGN", "Chain", "aligned_width", "run_chain"]

DEFAULT_DUELING_ARCH: dict[str, list[int]] = {
    "shared": [256, 256],
    "value": [128],
    "advantage": [128],
}

Chain = list[tuple[th.Tensor, th.Tensor] | nn.Module]
"""A network as a chain: ``(weight, bias)`` of each linear layer (torch's ``[out, in]`` layout)
and the elementwise activation modules, in order."""

PRODUCT_ALIGN = 8  # elements: 16 bytes of bfloat16, what cuBLAS's vectorised kernels load


def aligned_width(n: int) -> int:
    """``n`` rounded up to a multiple of :data:`PRODUCT_ALIGN`."""
    return -(-n // PRODUCT_ALIGN) * PRODUCT_ALIGN


def run_chain(
    ops: list[tuple[th.Tensor, th.Tensor] | nn.Module], x: th.Tensor, aligned: bool = False
) -> th.Tensor:
    """Apply a chain (``(weight, bias)`` pairs in torch's ``[out, in]`` layout, and elementwise
    activation modules) to ``x [B, in]``.

    With ``aligned``, every product runs on widths padded to multiples of
    :data:`PRODUCT_ALIGN`: zero columns after the input, zero rows and columns in the weights,
    zeros in the biases. The padded units are 0 before each activation and meet zero weights
    after it, so the result (sliced back to the true width) is the same up to the summation
    order of the products, and so are the gradients of the weights.

    :return: ``[B, out]`` of the last linear layer (its activations applied).
    """
    linear = [op for op in ops if not isinstance(op, nn.Module)]
    if not linear:
        return x
    width = linear[-1][0].shape[0]
    if aligned:
        pad = aligned_width(x.shape[1]) - x.shape[1]
        if pad:
            x = nn.functional.pad(x, (0, pad))
    for op in ops:
        if isinstance(op, nn.Module):
            x = op(x)
            continue
        weight, bias = op
        if aligned:
            out, inp = weight.shape
            pad_out, pad_in = aligned_width(out) - out, aligned_width(inp) - inp
            if pad_out or pad_in:
                weight = nn.functional.pad(weight, (0, pad_in, 0, pad_out))
            if pad_out:
                bias = nn.functional.pad(bias, (0, pad_out))
        x = nn.functional.linear(x, weight, bias)
    return x[:, :width] if aligned and x.shape[1] != width else x
