"""Rollout paths that act, step and store on the GPU: fused (default) and monolithic."""
