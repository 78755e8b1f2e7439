"""Prioritized experience replay: sum/min segment trees (NumPy and CUDA) and the buffer."""
