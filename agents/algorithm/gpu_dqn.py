"""``GpuDQN``: Stable-Baselines3 ``DQN`` with prioritized replay, a dueling network, double-DQN
targets, per-env epsilon-greedy exploration, curiosity training and a fused GPU rollout path.

It takes a :class:`~gpu_trading_env.TradingVectorEnv` (``gym.make_vec("GpuTrading-v0", ...)``)
as its env and wraps it in :class:`~gpu_trading_env.integrations.sb3_vec_env.SB3VecEnv`; any SB3
``VecEnv`` or Gymnasium env works too. On a CUDA trading env ``collect_rollouts`` hands the step
loop to ``agents.rollouts.fused.FusedRollout`` (acting, stepping and storing on the device);
elsewhere SB3's own loop runs through the adapter.

This module holds the algorithm: its options, acting, the rollout and train-step dispatch, and
the eager gradient step. The rest lives beside it: the target and loss in ``agents.algorithm.dqn_loss``,
the captured gradient step in ``agents.algorithm.captured_step``, curiosity rounds in
``agents.algorithm.curiosity_training``, env wrapping and atomic saves in ``agents.algorithm.sb3_integration``.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar, TypeVar

import numpy as np
import torch as th
from gymnasium import spaces
from gymnasium.vector import VectorEnv as GymVectorEnv
from stable_baselines3 import DQN
from stable_baselines3.common.buffers import ReplayBuffer
from stable_baselines3.common.callbacks import BaseCallback, ConvertCallback
from stable_baselines3.common.noise import ActionNoise
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import (
    GymEnv,
    MaybeCallback,
    RolloutReturn,
    Schedule,
    TrainFreq,
    TrainFrequencyUnit,
)
from stable_baselines3.common.vec_env import VecEnv
from stable_baselines3.dqn.policies import DQNPolicy

from agents.algorithm.branch_reward_steps import BranchRewardSteps, check_branch_rewards
from agents.algorithm.curiosity import CuriosityModel, check_positive_ints
from agents.algorithm.curiosity_training import CuriosityTraining, curiosity_layout
from agents.algorithm.distributed import DataParallel, DataParallelMixin
from agents.algorithm.dqn_loss import taken_q, td_target, weighted_td_loss
from agents.algorithm.exploration import PerEnvEpsilonGreedy
from agents.algorithm.gpu_dqn_files import GpuDQNFiles
from agents.algorithm.hyperparameters import (
    ROLLOUT_KERNELS,
    check_choice,
    check_dqn_hyperparameters,
    check_flag,
    replay_buffer_arguments,
)
from agents.algorithm.policies import DuelingDQNPolicy
from agents.algorithm.saved_env import check_observation, portfolio_setup_of
from agents.algorithm.sb3_integration import (
    find_portfolio_env,
    find_trading_env,
    make_eval_env,
    wrap_env,
)
from agents.algorithm.target_update import TargetNetworkUpdate
from agents.replay.device_buffer import DeviceReplayBuffer
from agents.rollouts.selection import build_rollout
from gpu_runtime.precision import PrecisionSetting, check_precision, resolve_precision
from gpu_trading_env.integrations.sb3_vec_env import SB3VecEnv
from gpu_trading_env.portfolio_env import PortfolioVectorEnv
from gpu_trading_env.vector_env import TradingVectorEnv

__all__ = ["GpuDQN"]

SelfGpuDQN = TypeVar("SelfGpuDQN", bound="GpuDQN")

# Modules whose forward depends on training mode.
# torch names no public base class of the dropout and normalisation layers.
MODE_DEPENDENT = (th.nn.modules.dropout._DropoutNd, th.nn.modules.batchnorm._NormBase)  # noqa: SLF001


class LogEveryPercent(BaseCallback):
    """Dumps the model's logs at the end of a rollout once at least 1% of ``total_timesteps``
    env steps and one second have passed since the last dump, and at the end of training
    (GpuDQN.learn's default)."""

    def __init__(self, total_timesteps: int) -> None:
        super().__init__()
        self.every_steps = max(1, int(total_timesteps) // 100)
        self.last_steps = 0
        self.last_time = 0.0

    def _on_training_start(self) -> None:
        self.last_steps = self.model.num_timesteps
        self.last_time = time.monotonic()

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        now = time.monotonic()
        steps = self.model.num_timesteps
        if steps - self.last_steps >= self.every_steps and now - self.last_time >= 1.0:
            self.model.dump_logs()
            self.last_steps, self.last_time = steps, now

    def _on_training_end(self) -> None:
        if self.model.num_timesteps > self.last_steps:  # the run's last steps, or a short run's
            self.model.dump_logs()


class DiscreteAndMultiDiscrete(OffPolicyAlgorithm):
    """Between SB3's ``DQN`` and ``OffPolicyAlgorithm`` in :class:`GpuDQN`'s MRO: the action
    spaces GpuDQN supports, ``Discrete`` and ``MultiDiscrete`` (the branching head), in place
    of the ``Discrete`` alone that ``DQN.__init__`` passes on."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["supported_action_spaces"] = (spaces.Discrete, spaces.MultiDiscrete)
        super().__init__(*args, **kwargs)


class GpuDQN(
    GpuDQNFiles,
    DataParallelMixin,
    BranchRewardSteps,
    PerEnvEpsilonGreedy,
    DQN,
    DiscreteAndMultiDiscrete,
):
    """Deep Q-Network with prioritized replay, double-DQN targets and a dueling policy.

    Differences from SB3's ``DQN`` (all other arguments and behaviour are SB3's):

    - ``env`` may be a Gymnasium ``VectorEnv`` such as
      ``gym.make_vec("GpuTrading-v0", num_envs=N, device=...)``; it is wrapped in
      :class:`~gpu_trading_env.integrations.sb3_vec_env.SB3VecEnv` and the raw trading env is
      kept as ``self.trading_env`` (``None`` for other envs). SB3's ``evaluate_policy`` and
      ``EvalCallback`` take such an env through :meth:`make_eval_env`.
    - ``replay_buffer_class`` defaults to :class:`~agents.PrioritizedReplayBuffer` with
      ``alpha=0.6, beta=0.4, epsilon=1e-6`` (override through ``replay_buffer_kwargs``); beta is
      annealed to 1 with the training progress. A plain SB3 ``ReplayBuffer`` also works (uniform
      sampling, unweighted loss).
    - Loss: ``mean(w_i * smooth_l1(Q(s_i, a_i), y_i))`` with the buffer's importance weights
      ``w_i``; target ``y = r + gamma * (1 - done) * Q_target(s', argmax_a Q(s', a))`` with
      ``double_q=True`` (default) or ``max_a Q_target(s', a)`` otherwise. ``done`` is the
      termination only: time-limit truncations bootstrap (``handle_timeout_termination``).
      After each gradient step the sampled priorities become ``|y - Q|``.
    - Exploration: every env draws its own epsilon coin in each step (SB3 draws one for the
      whole batch).
    - Action spaces: ``Discrete``, and ``MultiDiscrete([L] * K)`` with ``"DuelingPolicy"``,
      which then builds a Branching Dueling Q-Network
      (:class:`~agents.algorithm.policies.BranchingDuelingQNetwork`, Tavakoli et al. 2018):
      ``Q_d(s, a_d) = V(s) + A_d(s, a_d) - mean_a A_d(s, a)`` per branch ``d``; the target
      ``y = r + gamma * (1 - done) * mean_d Q_target_d(s', argmax_a Q_d(s', a))`` (the paper's
      "mean" variant, one target for all branches), the loss the mean over branches of each
      branch's weighted Huber loss, the priority the mean over branches of ``|y - Q_d|``
      (:mod:`agents.algorithm.dqn_loss`). Its replay buffer stores ``[K]`` int64 actions. With
      ``branch_rewards=True`` on the portfolio env each branch learns from its own
      instrument's share of the reward instead (``y_d = r_d + gamma * (1 - done) *
      Q_target_d(s', argmax_a Q_d(s', a))``; :mod:`agents.rollouts.branch_rewards`), the buffer
      storing ``[K]`` rewards a transition. On a
      CUDA :class:`~gpu_trading_env.portfolio_env.PortfolioVectorEnv` the fused rollout acts,
      steps and stores (:class:`~agents.rollouts.portfolio_fused.PortfolioRollout`).
    - ``curiosity=True`` trains :class:`~agents.CuriosityModel` on replayed transitions every
      ``curiosity_train_freq`` calls of :meth:`train` and installs its weights in the env, whose
      reward then carries the curiosity bonus.
    - On a CUDA :class:`~gpu_trading_env.TradingVectorEnv` (wrapped by nothing but the adapter)
      with ``fused_rollout=True``, ``collect_rollouts`` runs ``agents.rollouts.fused.FusedRollout``.
    - On a CUDA device with the prioritized buffer and Adam (``captured_train=True``), each
      gradient step of :meth:`train` is one CUDA graph replay
      (:class:`~agents.algorithm.captured_step.CapturedTrainStep`); elsewhere the eager loop runs.
    - ``distributed=True``: data-parallel over the ranks of a ``torch.distributed`` process
      group (initialised by the caller, as for DDP; ``torchrun`` sets it up), one rank per
      GPU, each with its own env shard and replay buffer; gradients are averaged every step,
      counters count the env-steps of all ranks, only rank 0 logs and saves
      (:mod:`agents.algorithm.distributed`, docs/SCALING.md).

    - Files: :meth:`save` / :meth:`load` and the replay-buffer pair write and read a
      weights-only format (tensors and JSON with checksums, :mod:`agents.files.model_files`); SB3's
      pickle-based files load only with ``allow_pickle=True``. :meth:`save_checkpoint` /
      :meth:`load_checkpoint` resume a run exactly (:mod:`agents.files.checkpoint`).

    Policies: ``"MlpPolicy"`` (SB3's), ``"CnnPolicy"``, ``"MultiInputPolicy"`` and
    ``"DuelingPolicy"`` (:class:`~agents.DuelingDQNPolicy`, the recommended one).

    :param policy: Policy name or class.
    :param env: Environment: a Gymnasium ``VectorEnv`` (same-step autoreset), an SB3
        ``VecEnv``, a Gymnasium env or a registered env id.
    :param double_q: Use the double-DQN target (online network picks, target network rates).
    :param reward_scale: Factor applied to the rewards in the TD target (the buffer keeps them
        as the env gave them), so the Q-values are learned in units where a bar's reward is of
        order 1. The greedy policy does not depend on it; what it changes is learning: Adam moves
        each weight by about the learning rate per step whatever the gradient's scale, and with
        a trading env's per-bar returns of 1e-3 to 1e-2 the Q-value differences that decide a
        trade (a fraction of that) drown in that jitter. ``train`` sets it to one over the
        standard deviation of the training bars' returns (``--reward-scale``).
    :param curiosity: Train the curiosity forward model and push it to the env.
    :param curiosity_train_freq: Train the curiosity model every this many :meth:`train` calls.
    :param curiosity_batch_size: Replayed transitions per curiosity gradient step.
    :param curiosity_gradient_steps: Curiosity gradient steps per curiosity round.
    :param curiosity_learning_rate: Adam learning rate of the curiosity model.
    :param fused_rollout: Use the fused GPU rollout when the env allows it.
    :param captured_train: Run the gradient steps as CUDA graph replays where that applies
        (see :func:`~agents.algorithm.captured_step.captured_train_unsupported`); ``False``: always eager.
    :param train_precision: Matrix products of the captured step: ``"bf16"`` (bfloat16
        autocast of the forwards; target and loss in float32), ``"tf32"`` (tensor cores),
        ``"fp32"`` (exact float32, as the eager path under torch's defaults) or ``"auto"`` (the
        default: bf16 on GPUs that compute it natively, compute capability 8.0 or later; tf32
        before). Where it resolves to bf16 the fused rollout acts in bf16 too (bfloat16 copies
        of the weights and observations made by one cast kernel, see
        :mod:`agents.rollouts.acting`; faster per vector step, docs/PERFORMANCE.md); otherwise
        it acts in tf32.
    :param rollout_kernel: On that path, ``"fused"`` (:class:`~agents.rollouts.fused.FusedRollout`,
        the default) or ``"monolithic"`` (:class:`~agents.rollouts.monolithic.MonolithicRollout`, the
        source design's one-thread-per-env kernel; dueling policy with the default layers only).
    :param compile_train: Run the captured step's loss (and its backward) through
        ``torch.compile`` (falls back to eager with a warning where it cannot).
    :param branch_rewards: On a ``MultiDiscrete([L] * K)`` portfolio env, store each
        instrument's share of the reward (``[K]`` a transition) and give each branch its own
        TD target; ``False``: one reward, one target shared by the branches.
    :param distributed: Train data-parallel over ``process_group``; needs
        ``torch.distributed.init_process_group`` first (``ValueError`` otherwise). Rank ``r``
        seeds with ``seed + r``; rank 0's initial parameters are broadcast.
    :param process_group: The group to train over with ``distributed=True`` (``None``: the
        default group).
    :param kwargs: The remaining arguments are those of SB3's ``DQN`` (``learning_rate``,
        ``buffer_size``, ``learning_starts``, ``batch_size``, ``tau``, ``gamma``, ``train_freq``,
        ``gradient_steps``, ``replay_buffer_class``, ``replay_buffer_kwargs``,
        ``target_update_interval``, ``exploration_*``, ``max_grad_norm``, ``tensorboard_log``,
        ``policy_kwargs``, ``verbose``, ``seed``, ``device``, ...).
    """

    policy_aliases: ClassVar[dict[str, type[BasePolicy]]] = {
        **DQN.policy_aliases,
        "DuelingPolicy": DuelingDQNPolicy,
    }

    def __init__(
        self,
        policy: str | type[DQNPolicy],
        env: GymEnv | GymVectorEnv | str | None,
        learning_rate: float | Schedule = 1e-4,
        buffer_size: int = 1_000_000,
        learning_starts: int = 100,
        batch_size: int = 32,
        tau: float = 1.0,
        gamma: float = 0.99,
        train_freq: int | tuple[int, str] = 4,
        gradient_steps: int = 1,
        replay_buffer_class: type[ReplayBuffer] | None = None,
        replay_buffer_kwargs: dict[str, Any] | None = None,
        optimize_memory_usage: bool = False,
        n_steps: int = 1,
        target_update_interval: int = 10000,
        exploration_fraction: float = 0.1,
        exploration_initial_eps: float = 1.0,
        exploration_final_eps: float = 0.05,
        max_grad_norm: float = 10,
        stats_window_size: int = 100,
        tensorboard_log: str | None = None,
        policy_kwargs: dict[str, Any] | None = None,
        verbose: int = 0,
        seed: int | None = None,
        device: th.device | str = "auto",
        double_q: bool = True,
        reward_scale: float = 1.0,
        curiosity: bool = False,
        curiosity_train_freq: int = 100,
        curiosity_batch_size: int = 1024,
        curiosity_gradient_steps: int = 1,
        curiosity_learning_rate: float = 1e-3,
        fused_rollout: bool = True,
        rollout_kernel: str = "fused",
        captured_train: bool = True,
        train_precision: PrecisionSetting = "auto",
        compile_train: bool = True,
        branch_rewards: bool = False,
        distributed: bool = False,
        process_group: Any = None,
        _init_setup_model: bool = True,
    ) -> None:
        replay_buffer_class, replay_buffer_kwargs = replay_buffer_arguments(
            replay_buffer_class, replay_buffer_kwargs, n_steps
        )
        check_dqn_hyperparameters(
            learning_rate=learning_rate,
            gamma=gamma,
            tau=tau,
            exploration_fraction=exploration_fraction,
            exploration_initial_eps=exploration_initial_eps,
            exploration_final_eps=exploration_final_eps,
            max_grad_norm=max_grad_norm,
            train_freq=train_freq,
            gradient_steps=gradient_steps,
            batch_size=batch_size,
            buffer_size=buffer_size,
            learning_starts=learning_starts,
            target_update_interval=target_update_interval,
            reward_scale=reward_scale,
        )
        check_positive_ints(
            curiosity_train_freq=curiosity_train_freq,
            curiosity_batch_size=curiosity_batch_size,
            curiosity_gradient_steps=curiosity_gradient_steps,
        )

        super().__init__(
            policy,
            env,  # type: ignore[arg-type]
            learning_rate=learning_rate,
            buffer_size=buffer_size,
            learning_starts=learning_starts,
            batch_size=batch_size,
            tau=tau,
            gamma=gamma,
            train_freq=train_freq,
            gradient_steps=gradient_steps,
            replay_buffer_class=replay_buffer_class,
            replay_buffer_kwargs=replay_buffer_kwargs,
            optimize_memory_usage=optimize_memory_usage,
            n_steps=n_steps,
            target_update_interval=target_update_interval,
            exploration_fraction=exploration_fraction,
            exploration_initial_eps=exploration_initial_eps,
            exploration_final_eps=exploration_final_eps,
            max_grad_norm=max_grad_norm,
            stats_window_size=stats_window_size,
            tensorboard_log=tensorboard_log,
            policy_kwargs=policy_kwargs,
            verbose=verbose,
            seed=seed,
            device=device,
            _init_setup_model=False,
        )
        self.double_q = bool(double_q)
        self.reward_scale = float(reward_scale)
        self.curiosity = bool(curiosity)
        self.curiosity_train_freq = curiosity_train_freq
        self.curiosity_batch_size = curiosity_batch_size
        self.curiosity_gradient_steps = curiosity_gradient_steps
        self.curiosity_learning_rate = curiosity_learning_rate
        self.fused_rollout = bool(fused_rollout)
        self.rollout_kernel = check_choice("rollout_kernel", rollout_kernel, ROLLOUT_KERNELS)
        self.captured_train = bool(captured_train)
        self.train_precision = check_precision("train_precision", train_precision, allow_auto=True)
        self.compile_train = check_flag("compile_train", compile_train)
        self.branch_rewards = check_flag("branch_rewards", branch_rewards)
        self._mode_free: tuple[Any, bool] = (None, False)  # (policy, no mode-dependent module)
        self._target_update = TargetNetworkUpdate()
        self._captured_step: Any = None
        self._captured_unsupported: tuple | None = None
        self._fused_rollout: Any = None
        self._train_calls = 0
        self._pending_rollout_generator: th.Tensor | None = None
        self._pending_rollout_round: int | None = None
        self.trading_env: TradingVectorEnv | None = find_trading_env(self.env)
        self.portfolio_env: PortfolioVectorEnv | None = find_portfolio_env(self.env)
        # Saved with the model (env_config): a load builds the model without it, then sets the
        # file's, so a file saved without one is not given the load's env's.
        self._env_config: dict[str, Any] | None = None
        # Saved with the model: the data's own columns beside the built-in features, which
        # make_env and eval read from a file again.
        self.extra_features: list[str] = []
        if _init_setup_model and self.trading_env is not None:
            self.env_config = self.trading_env.config
            self.extra_features = list(self.trading_env.data.metadata.get("extra_features", []))
        # Saved with the model: the portfolio env it acts on (GpuDQN.make_env rebuilds it).
        self.portfolio_setup: dict[str, Any] | None = None
        if _init_setup_model and self.portfolio_env is not None:
            self.portfolio_setup = portfolio_setup_of(self.portfolio_env)
        self.curiosity_model: CuriosityModel | None = None
        self._curiosity: CuriosityTraining | None = None
        # Saved with the model: the layout (a model loaded without env rebuilds its curiosity
        # model), and whether the env reward carries this model's curiosity bonus, so that
        # load / set_env put the same weights back (the reward must not change on resume).
        self._curiosity_dims: dict[str, int] | None = None
        self._curiosity_categories: np.ndarray | None = None
        self._curiosity_installed = False
        # Before the curiosity layout reads the env (a load sets the spaces later).
        if isinstance(getattr(self, "action_space", None), spaces.MultiDiscrete):
            self._check_branching_setup()
        if self.curiosity:
            self._curiosity_dims, self._curiosity_categories = curiosity_layout(
                self.env, self.trading_env
            )
        self.data_parallel = DataParallel.from_arguments(distributed, process_group)
        if _init_setup_model:
            self._setup_model()

    # ------------------------------------------------------------------ env handling
    _wrap_env = staticmethod(wrap_env)  # Gymnasium vector envs go into SB3VecEnv first
    make_eval_env = staticmethod(make_eval_env)  # the env of evaluate_policy and EvalCallback

    def set_env(self, env: GymEnv | GymVectorEnv, force_reset: bool = True) -> None:
        """SB3's ``set_env``; also re-reads ``trading_env`` and drops the fused rollout state.

        :raises ValueError: one line naming both, where ``env``'s observation shape or number
            of actions is not the model's (:meth:`make_env` builds the env it acts on).
        """
        env = self._wrap_env(env, self.verbose)  # a vector env's spaces as SB3 sees them
        self.check_env_spaces(env, self.observation_space, self.action_space)
        super().set_env(env, force_reset=force_reset)  # type: ignore[arg-type]
        self.trading_env = find_trading_env(self.env)
        self.portfolio_env = find_portfolio_env(self.env)
        self._fused_rollout = None
        self._restore_curiosity_weights()

    def uses_fused_rollout(self, env: VecEnv) -> bool:
        """Whether :meth:`collect_rollouts` on ``env`` runs the device rollout (:attr:`rollout`)
        rather than SB3's loop: a CUDA trading env (``Discrete`` actions) or portfolio env
        (``MultiDiscrete``) under nothing but the adapter, with ``fused_rollout=True`` and a
        buffer that takes device tensors."""
        te = self.trading_env
        space: type[spaces.Space] = spaces.Discrete
        if te is None:
            te, space = self.portfolio_env, spaces.MultiDiscrete
        return (
            self.fused_rollout
            and te is not None
            and str(te.device).startswith("cuda")
            # A wrapper between SB3 and the adapter (VecNormalize, ...) would be bypassed.
            and isinstance(env, SB3VecEnv)
            and env.venv is te
            # The rollouts store device tensors: the buffer must take them (add_tensors).
            and isinstance(self.replay_buffer, DeviceReplayBuffer)
            # The rollouts act with one argmax per env (per branch on the portfolio env).
            and isinstance(self.action_space, space)
        )

    # ------------------------------------------------------------------ setup
    def _setup_model(self) -> None:
        if isinstance(self.action_space, spaces.MultiDiscrete):
            self._check_branching_setup()
        reward_dim = check_branch_rewards(self)
        if reward_dim > 1:  # one reward a branch in the buffer (its [B, K] batches)
            self.replay_buffer_kwargs = {**self.replay_buffer_kwargs, "reward_dim": reward_dim}
        super()._setup_model()
        self.curiosity_model = None
        self._curiosity = None
        if self.curiosity:
            if self._curiosity_dims is None or self._curiosity_categories is None:
                self._curiosity_dims, self._curiosity_categories = curiosity_layout(
                    self.env, self.trading_env
                )
            self.curiosity_model = CuriosityModel(
                **self._curiosity_dims,
                learning_rate=self.curiosity_learning_rate,
                device=self.device,
            )
            self._curiosity = CuriosityTraining(self, self._curiosity_categories)

    def _check_branching_setup(self) -> None:
        """Raise ValueError, naming the setting, where a ``MultiDiscrete`` action space meets a
        policy or option that has no branching form."""
        if not (
            isinstance(self.policy_class, type) and issubclass(self.policy_class, DuelingDQNPolicy)
        ):
            raise ValueError(
                f"policy = {getattr(self.policy_class, '__name__', self.policy_class)!r} is "
                f"invalid with the action space {self.action_space}: allowed is 'DuelingPolicy' "
                "(its branching dueling head acts on MultiDiscrete spaces)"
            )
        if self.curiosity:
            raise ValueError(
                f"curiosity = True is invalid with the action space {self.action_space}: "
                "allowed is False (the curiosity model reads one action per env)"
            )

    def collect_rollouts(
        self,
        env: VecEnv,
        callback: BaseCallback,
        train_freq: TrainFreq,
        replay_buffer: ReplayBuffer,
        action_noise: ActionNoise | None = None,
        learning_starts: int = 0,
        log_interval: int | None = None,
    ) -> RolloutReturn:
        """SB3's rollout loop, or the fused GPU rollout on a CUDA trading env.

        The fused path steps ``train_freq.frequency`` vector steps through
        ``agents.rollouts.fused.FusedRollout(self).collect(n_steps, callback, learning_starts)``,
        between the callback's ``on_rollout_start`` and ``on_rollout_end`` as SB3's loop does;
        episodes it reports are added to ``_episode_num`` unless it counted them itself.
        """
        if not self.uses_fused_rollout(env):
            return super().collect_rollouts(
                env,
                callback,
                train_freq,
                replay_buffer,
                action_noise,
                learning_starts,
                log_interval,
            )
        if train_freq.unit != TrainFrequencyUnit.STEP:
            raise ValueError(
                f"train_freq unit {train_freq.unit.value!r} is invalid with the fused rollout: "
                "allowed is 'step'"
            )
        if self._fused_rollout is None:
            pending = self._pending_rollout_generator  # a resumed checkpoint's exploration stream
            # Resuming, the checkpoint's generator state replaces any seed: without one given,
            # FusedRollout would draw its seed from NumPy's global generator, which the
            # uninterrupted run drew from at its first rollout, not here.
            self._fused_rollout = build_rollout(
                self,
                self.rollout_kernel,
                self.train_precision,
                seed=0 if pending is not None else None,
            )
            generator = getattr(self._fused_rollout, "generator", None)
            if pending is not None and isinstance(generator, th.Generator):
                generator.set_state(pending)
            # The monolithic kernel keys its exploration draws by launch: a resumed one that
            # started from round 0 again would repeat the run's first coins.
            if self._pending_rollout_round is not None and hasattr(self._fused_rollout, "round"):
                self._fused_rollout.round = int(self._pending_rollout_round)
            self._pending_rollout_generator = self._pending_rollout_round = None
        episodes_before = self._episode_num
        callback.on_rollout_start()
        steps, n_episodes, continue_training = self._fused_rollout.collect(
            int(train_freq.frequency), callback, learning_starts
        )
        callback.on_rollout_end()
        if self._episode_num == episodes_before:
            self._episode_num += int(n_episodes)
        if (
            log_interval is not None
            and log_interval > 0
            and self._episode_num // log_interval > episodes_before // log_interval
        ):
            self.dump_logs()
        # SB3 counts env-steps here (num_collected_steps * num_envs): gradient_steps=-1 uses it.
        return RolloutReturn(int(steps) * env.num_envs, int(n_episodes), bool(continue_training))

    # ------------------------------------------------------------------ learning
    def compute_td_target(
        self,
        rewards: th.Tensor,
        next_observations: th.Tensor,
        dones: th.Tensor,
        discounts: th.Tensor | float | None = None,
    ) -> th.Tensor:
        """One-step TD target, without gradient.

        ``y = r + discount * (1 - done) * q_next`` with ``q_next`` the target network's value
        of the online network's greedy action (``double_q``) or the target network's max; on
        a ``MultiDiscrete`` space, those of every branch averaged
        (:func:`~agents.algorithm.dqn_loss.td_target`).

        :param rewards: ``[B, 1]`` float32.
        :param next_observations: ``[B, *obs_shape]``.
        :param dones: ``[B, 1]`` float32, 1 for terminations only (0 for time-limit truncations).
        :param discounts: ``[B, 1]`` or a float; ``None`` means ``gamma``.
        :return: ``[B, 1]`` float32.
        """
        gamma = self.gamma if discounts is None else discounts
        with th.no_grad():
            q_next_target = self.q_net_target(next_observations)
            q_next_online = self.q_net(next_observations) if self.double_q else None
        return td_target(
            rewards.reshape(rewards.shape[0], -1) * self.reward_scale,
            dones.reshape(-1, 1),
            gamma,
            q_next_target,
            q_next_online,
        )

    def train(self, gradient_steps: int, batch_size: int = 100) -> None:
        """``gradient_steps`` prioritized double-DQN updates, then priorities and curiosity.

        Logs ``train/loss``, ``train/mean_td_error``, ``train/per_beta`` (prioritized buffer)
        and ``train/curiosity_loss`` (curiosity rounds). The statistics reach the host once per
        call, not once per gradient step; on the captured path
        (:class:`~agents.algorithm.captured_step.CapturedTrainStep`) once every 64 calls.
        """
        self.set_training_mode(True)
        step = self._captured_train_step()
        if step is not None:
            step.train(gradient_steps, batch_size)
        else:
            self._train_eager(gradient_steps, batch_size)
        self._n_updates += gradient_steps
        self._train_calls += 1
        if self.curiosity_model is not None and self._train_calls % self.curiosity_train_freq == 0:
            self.train_curiosity()
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")

    def set_training_mode(self, mode: bool) -> None:
        """The policy's ``set_training_mode(mode)``, or only its ``training`` flag when no module
        of the policy behaves differently in training (no dropout, no batch norm: the default
        policies). Switching walks every submodule, tens of microseconds, and the fused path
        switches twice per vector step (collect, then train)."""
        policy = self.policy
        if policy.training == mode:
            return
        if self._mode_free[0] is not policy:
            free = not any(isinstance(m, MODE_DEPENDENT) for m in policy.modules())
            self._mode_free = (policy, free)
        if self._mode_free[1]:
            policy.training = mode
        else:
            policy.set_training_mode(mode)

    def _on_step(self) -> None:
        """DQN's ``_on_step``: the target network every ``target_update_interval`` env-steps
        (of all ranks when data-parallel), then the exploration schedule.

        The target update computes SB3's ``polyak_update`` (``target * (1 - tau) + tau *
        online``, then the batch-norm statistics with tau 1) with one multi-tensor kernel per
        operation instead of two launches per tensor.
        """
        self._n_calls += 1
        env_steps = self.n_envs
        if self.data_parallel is not None:
            env_steps *= self.data_parallel.world_size
        if self._n_calls % max(self.target_update_interval // env_steps, 1) == 0:
            self._target_update(
                self.q_net,
                self.q_net_target,
                self.tau,
                self.batch_norm_stats,
                self.batch_norm_stats_target,
            )
        self.exploration_rate = self.exploration_schedule(self._current_progress_remaining)
        self.logger.record("rollout/exploration_rate", self.exploration_rate)

    def after_rollout_step(self) -> None:
        """SB3's bookkeeping after one vector step of ``collect_rollouts``, once the callback
        has run: the progress remaining (from ``num_timesteps``), then :meth:`_on_step` (target
        network, exploration rate). The rollouts of :mod:`agents.rollouts` step outside SB3's
        loop and call it."""
        self._update_current_progress_remaining(self.num_timesteps, self._total_timesteps)
        self._on_step()

    @property
    def progress_remaining(self) -> float:
        """SB3's training progress remaining: 1 at the start of ``learn``, 0 at its end (the
        schedules of the learning rate, exploration and beta read it)."""
        return float(self._current_progress_remaining)

    def queue_rollout_generator_state(
        self, state: th.Tensor | None, launch_round: int | None = None
    ) -> None:
        """The state the device rollout's exploration generator starts from when it is next
        built (a resumed checkpoint's stream); ``None``: a fresh seed, as usual.
        ``launch_round``: the monolithic rollout's launch count, which keys its draws."""
        self._pending_rollout_generator = state
        self._pending_rollout_round = launch_round

    @property
    def captured_train_step(self) -> Any:
        """The :class:`~agents.algorithm.captured_step.CapturedTrainStep` that ran the last
        :meth:`train` call (its ``graph``, ``graph_failed``, ``precision``, ``read_stats()``),
        or ``None`` while training runs eagerly."""
        return self._captured_step

    @property
    def rollout(self) -> Any:
        """The device rollout that collects on a CUDA trading env
        (:class:`~agents.rollouts.fused.FusedRollout` or
        :class:`~agents.rollouts.monolithic.MonolithicRollout`), or ``None`` before the first
        such collection and on SB3's own loop."""
        return self._fused_rollout

    @rollout.setter
    def rollout(self, rollout: Any) -> None:
        """Collect through ``rollout`` (one built with other settings, say) from the next
        :meth:`collect_rollouts` on; ``None``: build the default one again."""
        self._fused_rollout = rollout

    def _captured_train_step(self) -> Any:
        """The :class:`~agents.algorithm.captured_step.CapturedTrainStep` when it applies, else None."""
        if not self.captured_train:
            return None
        step = self._captured_step
        if step is not None and step.is_current():
            return step
        from agents.algorithm.captured_step import CapturedTrainStep, captured_train_unsupported

        # A step replaced while its Adam is in use (a new buffer) saves as the same plain Adam.
        reuse = step is not None and step.optimizer is self.policy.optimizer
        flags = step.plain_flags if reuse else None
        self._captured_step = None
        key = (id(self.replay_buffer), id(self.policy.optimizer), self.device)
        if self._captured_unsupported == key:  # checked already for this setup
            return None
        if captured_train_unsupported(self) is None:
            self._captured_step = CapturedTrainStep(
                self,
                precision=resolve_precision(self.train_precision, self.device),
                plain_flags=flags,
                compile=getattr(self, "compile_train", True),  # models saved before it existed
            )
        else:
            self._captured_unsupported = key
        return self._captured_step

    def _train_eager(self, gradient_steps: int, batch_size: int) -> None:
        self._update_learning_rate(self.policy.optimizer)
        buffer = self.replay_buffer
        assert buffer is not None
        device_buffer = isinstance(buffer, DeviceReplayBuffer)
        if device_buffer:
            buffer.set_progress(min(1.0, max(0.0, float(self._current_progress_remaining))))

        losses: list[th.Tensor] = []
        td_means: list[th.Tensor] = []
        for _ in range(gradient_steps):
            data = buffer.sample(batch_size, env=self._vec_normalize_env)
            target = self.compute_td_target(
                data.rewards, data.next_observations, data.dones, data.discounts
            )
            q = taken_q(self.q_net(data.observations), data.actions.long())
            loss, td = weighted_td_loss(q, target, getattr(data, "weights", None))

            self.policy.optimizer.zero_grad()
            loss.backward()
            if self.data_parallel is not None:
                self.data_parallel.all_reduce_gradients(self.policy.optimizer)
            th.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
            self.policy.optimizer.step()

            indices = getattr(data, "indices", None)
            if indices is not None and device_buffer:
                buffer.update_priorities(indices, td)
            losses.append(loss.detach())
            td_means.append(td.mean())

        if losses:
            stats = th.stack([th.stack(losses).mean(), th.stack(td_means).mean()]).cpu()
            self.logger.record("train/loss", float(stats[0]))
            self.logger.record("train/mean_td_error", float(stats[1]))
        beta = getattr(buffer, "beta", None)
        if beta is not None:
            self.logger.record("train/per_beta", float(beta))

    def train_curiosity(self) -> float:
        """One curiosity round: train on replayed transitions, then install the weights in the env.

        :return: The last batch's mean squared prediction error (before its step).
        """
        assert self._curiosity is not None
        loss = self._curiosity.train()
        self.push_curiosity_weights()
        return loss

    def push_curiosity_weights(self) -> None:
        """Install the curiosity model's weights in the env (trading env or via ``env_method``)."""
        assert self._curiosity is not None
        self._curiosity.install()
        self._curiosity_installed = True

    def _restore_curiosity_weights(self) -> None:
        """Reinstall the curiosity weights in the env if they were installed when saved."""
        if self._curiosity_installed and self._curiosity is not None and self.env is not None:
            self.push_curiosity_weights()

    def predict(
        self,
        observation: np.ndarray | dict[str, np.ndarray],
        state: tuple[np.ndarray, ...] | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...] | None]:
        """Epsilon-greedy actions with a coin per env
        (:meth:`~agents.algorithm.exploration.PerEnvEpsilonGreedy.predict`).

        :param observation: float32 ``[N, *obs_shape]`` or one observation ``obs_shape``.
        :raises ValueError: one line, for an observation of another shape than the model's
            (:meth:`make_env` builds the env it acts on).
        """
        check_observation(observation, self.observation_space, self.action_space)
        return super().predict(observation, state, episode_start, deterministic)

    def learn(
        self: SelfGpuDQN,
        total_timesteps: int,
        callback: MaybeCallback = None,
        log_interval: int | None = None,
        tb_log_name: str = "GpuDQN",
        reset_num_timesteps: bool = True,
        progress_bar: bool = False,
    ) -> SelfGpuDQN:
        """SB3's ``learn``; the log table (``verbose=1``) and TensorBoard's scalars are written
        at a readable rate by default.

        :param log_interval: with ``None`` (the default) the logs are dumped at the end of a
            rollout once at least 1% of ``total_timesteps`` and one second have passed since
            the last dump, and once at the end: at most about 100 tables a run and one a
            second. An integer keeps SB3's rule, a dump every ``log_interval`` episodes; with
            thousands of envs ending short episodes, SB3's default 4 dumps every vector step.
        """
        if self.env is not None:
            self.check_env_spaces(self.env, self.observation_space, self.action_space)
            # What the model learns on from here is the env its file describes.
            te = self.trading_env
            self.env_config = None if te is None else te.config
            self.extra_features = [] if te is None else te.data.metadata.get("extra_features", [])
            if self.portfolio_env is not None:  # the columns it sees are the pipeline's to say
                kept = (self.portfolio_setup or {}).get("kept")
                self.portfolio_setup = portfolio_setup_of(self.portfolio_env, kept)
        if log_interval is None:
            every = LogEveryPercent(total_timesteps)
            if callback is None:
                callback = every
            elif isinstance(callback, list):
                callback = [*callback, every]
            elif isinstance(callback, BaseCallback):
                callback = [callback, every]
            else:
                callback = [ConvertCallback(callback), every]
        super().learn(
            total_timesteps=total_timesteps,
            callback=callback,
            log_interval=log_interval,  # type: ignore[arg-type]  # SB3 reads None as never
            tb_log_name=tb_log_name,
            reset_num_timesteps=reset_num_timesteps,
            progress_bar=progress_bar,
        )
        if self._captured_step is not None:
            self._captured_step.read_stats()  # raises on a rejected priority update
        return self

    def release_cuda_graphs(self) -> None:
        """Drop the captured CUDA graphs (train step, fused rollout); the next call captures anew.

        Call it before ``torch.distributed.destroy_process_group()`` in a data-parallel run: a
        live graph holding an NCCL all-reduce keeps its communicator in use and NCCL's
        communicator teardown waits for it, so the destroy never returns
        (pytorch/pytorch#115388).
        """
        step = self._captured_step
        if step is not None:
            step.release_graph()
        release = getattr(self._fused_rollout, "release_graph", None)  # the monolithic has none
        if release is not None:
            release()
        if self.device.type == "cuda":
            th.cuda.synchronize(self.device)
