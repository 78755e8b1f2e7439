"""Market data: the OHLCV container, its loaders and validation, features, synthetic markets."""
