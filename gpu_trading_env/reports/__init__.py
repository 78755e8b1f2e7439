"""Reports on top of the env: backtests, metrics, plots and rendered frames."""
