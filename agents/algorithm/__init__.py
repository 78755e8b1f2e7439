"""The learning algorithm: GpuDQN, its dueling policy, the DQN loss, the captured gradient step,
curiosity, data-parallel training, and PrioritizedDQN for plain SB3."""
