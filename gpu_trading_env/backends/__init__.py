"""Backends that run the step: the declared contract, NumPy and CUDA implementations."""
