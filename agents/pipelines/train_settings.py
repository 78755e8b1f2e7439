"""The budget and hyper-parameters of one ``train`` run (``TrainSettings``).

Kept apart from the training code so that the command line can show these defaults in its help
without importing torch.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TrainSettings"]


@dataclass
class TrainSettings:
    """Budget and hyper-parameters of one training run (see the CLI's ``--help``)."""

    timesteps: int
    num_envs: int
    batch_size: int
    buffer_size: int
    learning_rate: float = 3e-4
    # Gradient steps per vector step of the envs (SB3's gradient_steps with train_freq=1).
    gradient_steps: int = 1
    # Adam's step size at the end of training, reached linearly from learning_rate (SB3's
    # LinearSchedule); None keeps it constant.
    final_learning_rate: float | None = None
    gamma: float = 0.5
    eval_every: int | None = None  # env steps between validation backtests; None: timesteps / 10
    # 40% of the training bars: at an edge of a Sharpe of about 2.7 (the zoo's phi 0.05) even the
    # best rule is only about 1.6 standard errors over 20% of them, so the fallback's test kept
    # flat where the network had found the edge (docs/ZOO.md, "Validation window and actions").
    val_fraction: float = 0.4
    device: str = "cpu"
    curiosity: bool = False
    train_precision: str = "auto"  # the captured GPU train step's matrix products
    # Keep the network only where it beats the best parameter-free policy on validation
    # (agents.pipelines.baseline_policies); False keeps the best snapshot whatever it earned.
    fallback: bool = True
    # Where the inputs predict the next bar's return on the training bars at this level, the
    # fallback needs less validation evidence of the network (agents.pipelines.baseline_policies,
    # step 4); 0: off.
    predictability_level: float = 0.01
    # Give the network only the inputs that predict the next return on the training bars, and a
    # fitted regime filter's forecast among them (agents.pipelines.input_selection); False: every
    # feature, no forecast (the releases before).
    select_inputs: bool = True
    # Dueling network: trunk [w, w], value and advantage heads [w / 2]; 0: no hidden layers. 32
    # fitted the zoo's weak edges out of sample where 64 and 256 fitted more of the training
    # bars' noise (docs/ZOO.md, "Reward scale, width and budget", "Validation window and actions").
    net_width: int = 32
    # Decoupled (AdamW-style) weight decay of the Q-network: 0.1 raised the out-of-sample
    # Sharpe on the market zoo's built-in, 5x-cost and mean-reverting markets (figures in
    # docs/PERFORMANCE.md, "Figures behind choices in the code").
    weight_decay: float = 0.1
    # Factor on the rewards in the TD target (GpuDQN's reward_scale); None: one over the standard
    # deviation of the training bars' returns (agents.pipelines.model_selection.auto_reward_scale), so that a
    # bar's reward at full exposure is of order 1 whatever the market's volatility.
    reward_scale: float | None = None
    # A second network trained on the last part of the training bars and judged on the first,
    # so that the fallback's test sees twice the validation bars (one more training; the
    # deployed network is the first). Off: not yet measured on the market zoo.
    cross_fit: bool = False
    verbose: int = 0
    progress_bar: bool = False  # a bar on a terminal, else a plain line every 10 s
    tensorboard_log: str | None = None
