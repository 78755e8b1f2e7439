"""The neutral GPU layer: lazy CuPy, NVRTC compilation, torch stream sharing, kernel launches,
Philox. It imports nothing else from gpu_trading_env nor agents; both packages build on it."""
