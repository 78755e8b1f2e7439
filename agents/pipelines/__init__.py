"""Runs built on the algorithm: train-and-select (walk-forward), sweeps, the market zoo, the
baselines a trained model must beat, and the settings and progress lines of a train run."""
