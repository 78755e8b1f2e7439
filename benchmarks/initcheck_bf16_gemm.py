"""Whether compute-sanitizer's initcheck flags torch's own bf16 products on this GPU.

    compute-sanitizer --tool initcheck python3 -m benchmarks.initcheck_bf16_gemm

One bfloat16 linear layer and a leaky ReLU on its output, in plain torch, no kernel of this
project. On an H200 (torch 2.11, CUDA 13) initcheck reports "uninitialized __global__ memory
read" in the leaky ReLU, reading the product that cuBLASLt wrote: the same reports it gives on
``sanitize_rollout.py`` with bf16 products. The sanitizer gate therefore runs initcheck on that
script with ``--train-precision tf32`` (our kernels run the same either way); this script is
its record of why.
"""

import torch as th

x = th.randn(4096, 256, device="cuda", dtype=th.bfloat16)
layer = th.nn.Linear(256, 256, device="cuda", dtype=th.bfloat16)
y = th.nn.functional.leaky_relu(layer(x))
th.cuda.synchronize()
print(f"initcheck_bf16_gemm: done ({float(y.float().abs().mean()):.3f})")
