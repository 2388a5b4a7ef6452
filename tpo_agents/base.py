"""The shared grouped-algorithm base: rollout of groups, then epochs of one objective.

Every agent (TPO, GRPO, DG, PG and the ablations) is this loop with a different
objective: collect ``batch_size`` groups (contexts) with a collector from
:mod:`tpo_agents.rollout`, freeze their rollout-time log-probs, then take ``n_epochs``
gradient steps on the whole batch. One iteration = one rollout + its epochs.
"""

from __future__ import annotations

import contextlib
import copy
import os
import pathlib
import sys
import time
import warnings
import weakref
from typing import Any, ClassVar, TypeVar

import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import VectorEnv
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import GymEnv, MaybeCallback, Schedule
from stable_baselines3.common.utils import check_for_correct_spaces, safe_mean
from stable_baselines3.common.vec_env import VecEnv, unwrap_vec_normalize

from tpo_agents.atomic import atomic_path
from tpo_agents.checks import (
    check_device,
    check_learning_rate,
    check_observation_space,
    int_at_least,
    real_number,
    timesteps,
    unexpected_keywords,
)
from tpo_agents.policies.causal_lm import CausalLMPolicy
from tpo_agents.policies.factorized import BernoulliPolicy, MultiCategoricalPolicy
from tpo_agents.policies.gaussian import GaussianMlpPolicy
from tpo_agents.policies.inputs import CnnPolicy, MultiInputPolicy, input_policy_kwargs
from tpo_agents.policies.mlp import MlpPolicy
from tpo_agents.policies.transformer import TransformerPolicy
from tpo_agents.rollout import (
    GROUP_MODES,
    LOGP_REDUCTIONS,
    EnvFacts,
    GroupBatch,
    Groups,
    OnStep,
    RolloutContext,
    build_training_env,
    check_can_score,
    collector_for,
    make_training_env,
)
from tpo_agents.rollout.envs import (
    dummy_vec_env_state,
    restore_dummy_vec_env_state,
    transpose_images,
)

SelfGrouped = TypeVar("SelfGrouped", bound="GroupedAlgorithm")

ACTION_SPACES = (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary, spaces.Box)
"""The action spaces of the step-level policies (docs/algorithms.md 4.5, 4.6)."""


def action_space_policy(action_space: spaces.Space) -> type[BasePolicy] | None:
    """The policy ``"MlpPolicy"`` stands for on an action space other than ``Discrete``, as
    in SB3: ``GaussianMlpPolicy`` (``Box``), ``MultiCategoricalPolicy`` (``MultiDiscrete``),
    ``BernoulliPolicy`` (``MultiBinary``); None for ``Discrete`` (``MlpPolicy`` itself)."""
    for space_type, policy in (
        (spaces.Box, GaussianMlpPolicy),
        (spaces.MultiDiscrete, MultiCategoricalPolicy),
        (spaces.MultiBinary, BernoulliPolicy),
    ):
        if isinstance(action_space, space_type):
            return policy
    return None


class GroupedAlgorithm(BaseAlgorithm):
    """Base class of the grouped agents (SB3 ``BaseAlgorithm`` API).

    :param policy: an alias from ``policy_aliases`` (``"MlpPolicy"``) or a policy class.
    :param env: an env id, a ``gym.Env``, a Gymnasium ``VectorEnv`` or an SB3 ``VecEnv``.
        Ids and registered envs with a native vector implementation (all ``tpo_gym``
        envs) are rebuilt as that vector env with ``n_envs`` sub-envs.
    :param learning_rate: float or schedule of the remaining progress (1 -> 0).
    :param n_candidates: K, candidates per group (``per_state`` and ``sequence`` modes).
    :param batch_size: contexts (groups) per iteration; every epoch is one gradient step
        on all of them.
    :param n_epochs: gradient steps per rollout batch (targets stay frozen); default the
        algorithm's (TPO 4), but :meth:`critic_n_epochs` on ``critic`` groups (1; TPO: 1 on
        a ``Discrete`` action space, 4 on others; GRPO: 2 on a ``Discrete`` one).
    :param n_envs: sub-envs when the env is built here (default: ``batch_size`` for
        native vector envs, ``n_candidates`` otherwise).
    :param group_mode: ``"auto"`` or one of ``all_actions``, ``branch``, ``critic``, ``per_state``,
        ``sequence``, ``single`` (see :mod:`tpo_agents.rollout` and docs/algorithms.md, 4).
    :param logp_reduction: ``"sum"`` (the paper) or ``"mean"`` of a sequence candidate's
        step log-probs.
    :param max_grad_norm: clip the gradient norm (None: no clipping; the norm is logged).
    :param optimizer_class: optimizer of the policy (default Adam), passed to the policy.
    :param optimizer_kwargs: its extra arguments.
    :param critic_kwargs: options of the learned critic of ``critic`` groups
        (:class:`~tpo_agents.rollout.critic.QCritic`).
    :param branch_kwargs: options of ``branch`` groups, ``horizon`` and ``gamma``
        (:class:`~tpo_agents.rollout.branching.BranchScorer`).
    :param ref_kl_coef: language-model policies: coefficient (>= 0) of the KL to the
        policy's frozen reference model added to the loss (TRL's per-token estimator,
        :mod:`tpo_agents.llm.reference`); > 0 gives the policy ``ref_model=True`` unless
        ``policy_kwargs`` names one. 0 (default): no penalty; the KL is still logged
        (``train/kl_ref``) when the policy has a reference model.
    :param log_completions_every: language-model policies: write the rollout's (prompt,
        completion, score) rows to tensorboard (text) and to ``completions.jsonl`` in the
        logger folder at the first rollout and every that many rollouts after it
        (:mod:`tpo_agents.llm.completions`); None (default): never.
    """

    policy_aliases: ClassVar[dict[str, type[BasePolicy]]] = {
        "MlpPolicy": MlpPolicy,
        "CnnPolicy": CnnPolicy,
        "MultiInputPolicy": MultiInputPolicy,
        "GaussianMlpPolicy": GaussianMlpPolicy,
        "MultiCategoricalPolicy": MultiCategoricalPolicy,
        "BernoulliPolicy": BernoulliPolicy,
        "TransformerPolicy": TransformerPolicy,
        "CausalLMPolicy": CausalLMPolicy,
    }
    default_n_epochs: ClassVar[int] = 4
    policy: MlpPolicy

    def __init__(
        self,
        policy: str | type[BasePolicy],
        env: GymEnv | str | None,
        learning_rate: float | Schedule = 1e-3,
        n_candidates: int = 8,
        batch_size: int = 100,
        n_epochs: int | None = None,
        n_envs: int | None = None,
        group_mode: str = "auto",
        logp_reduction: str = "sum",
        max_grad_norm: float | None = None,
        optimizer_class: type[torch.optim.Optimizer] | None = None,
        optimizer_kwargs: dict[str, Any] | None = None,
        policy_kwargs: dict[str, Any] | None = None,
        critic_kwargs: dict[str, Any] | None = None,
        branch_kwargs: dict[str, Any] | None = None,
        stats_window_size: int = 100,
        tensorboard_log: str | None = None,
        verbose: int = 0,
        seed: int | None = None,
        device: torch.device | str = "auto",
        _init_setup_model: bool = True,
        ref_kl_coef: float = 0.0,
        log_completions_every: int | None = None,
        **unknown: Any,
    ):
        if unknown:  # Python's own TypeError, with what plays the part of SB3's hyperparameters here
            raise unexpected_keywords(type(self).__name__, sorted(unknown))
        check_learning_rate(learning_rate)
        device = check_device(device)
        if n_envs is not None:
            n_envs = int_at_least("n_envs", n_envs, 1)
        stats_window_size = int_at_least("stats_window_size", stats_window_size, 1)
        if seed is not None:
            seed = int_at_least("seed", seed, 0)  # numpy integers are welcome
        self.n_candidates = int_at_least("n_candidates", n_candidates, 2)
        self.batch_size = int_at_least("batch_size", batch_size, 1)
        self.n_epochs = int_at_least("n_epochs", self.default_n_epochs if n_epochs is None else n_epochs, 1)
        self._n_epochs_given = n_epochs is not None
        if group_mode != "auto" and group_mode not in GROUP_MODES:
            raise ValueError(f"group_mode must be 'auto' or one of {GROUP_MODES}; got {group_mode!r}")
        if logp_reduction not in LOGP_REDUCTIONS:
            raise ValueError(f"logp_reduction must be one of {LOGP_REDUCTIONS}; got {logp_reduction!r}")
        if max_grad_norm is not None:
            max_grad_norm = real_number("max_grad_norm (or None)", max_grad_norm, above=0.0)
        self._saved_by = type(self).__name__  # load() refuses files of another algorithm
        # Set when the env is built (_build_env, also after a load) or on first use; SB3's
        # load() calls __init__ then restores the saved attributes over these.
        self._group_mode: str | None = None
        self._mode_reason: str | None = None
        self._branch_scorer = None
        self._branch_scorer_env: VecEnv | None = None
        self._given_env: weakref.ref | None = None  # what the training env was built from (set_env)
        self._budget_end: int | None = None  # learn()'s total_timesteps while it runs
        self.critic = None
        """The learned critic of ``critic`` groups (:class:`~tpo_agents.rollout.critic.QCritic`),
        built on the first rollout in that mode; None otherwise."""
        self.critic_kwargs = dict(critic_kwargs or {})
        self.branch_kwargs = dict(branch_kwargs or {})
        unknown = set(self.branch_kwargs) - {"horizon", "gamma"}
        if unknown:
            raise ValueError(f"branch_kwargs takes 'horizon' and 'gamma'; got {sorted(unknown)}")
        self.group_mode = group_mode
        self.logp_reduction = logp_reduction
        self.max_grad_norm = max_grad_norm
        policy_class = self._get_policy_from_name(policy) if isinstance(policy, str) else policy
        self.policy_class = policy_class  # (SB3 sets it too, after the env is built and checked)
        # Language-model policies act on text: prompt vector envs, Text spaces.
        self._language_model = bool(getattr(policy_class, "language_model", False))
        policy_kwargs = dict(policy_kwargs or {})
        self.ref_kl_coef = real_number("ref_kl_coef", ref_kl_coef, at_least=0.0)
        if log_completions_every is not None:
            log_completions_every = int_at_least(
                "log_completions_every (or None)", log_completions_every, 1
            )
        self.log_completions_every = log_completions_every
        self._n_rollouts = 0  # rollouts collected (log_completions_every counts them)
        if not self._language_model and (self.ref_kl_coef > 0 or log_completions_every is not None):
            raise ValueError(
                "ref_kl_coef and log_completions_every apply to language-model policies "
                f"(CausalLMPolicy); got ref_kl_coef={ref_kl_coef!r}, "
                f"log_completions_every={log_completions_every!r} with "
                f"{getattr(policy_class, '__name__', policy_class)}"
            )
        if self.ref_kl_coef > 0:
            ref = policy_kwargs.setdefault("ref_model", True)
            if ref is None or ref is False:
                raise ValueError(
                    f"ref_kl_coef={ref_kl_coef!r} needs a reference model; got policy_kwargs "
                    f"ref_model={ref!r} (leave it out, or pass True, a folder or a model)"
                )
        if optimizer_class is not None:
            policy_kwargs["optimizer_class"] = optimizer_class
        if optimizer_kwargs is not None:
            policy_kwargs["optimizer_kwargs"] = optimizer_kwargs
        if env is not None:
            env = self._build_env(env, n_envs, seed)
            if not self._language_model:  # a language model reads Text prompts
                check_observation_space(env.observation_space)
            stand_in = action_space_policy(env.action_space)
            if stand_in is not None and policy_class in (MlpPolicy, CnnPolicy, MultiInputPolicy):
                policy_kwargs = input_policy_kwargs(policy_class, policy_kwargs)  # CNN / Dict extractor kept
                # "MlpPolicy" on Box / MultiDiscrete / MultiBinary actions, as in SB3
                policy = policy_class = stand_in
                self.policy_class = policy_class
        super().__init__(
            policy=policy,
            env=env,
            learning_rate=learning_rate,
            policy_kwargs=policy_kwargs,
            stats_window_size=stats_window_size,
            tensorboard_log=tensorboard_log,
            verbose=verbose,
            device=device,
            support_multi_env=True,
            seed=seed,
            supported_action_spaces=(spaces.Text,) if self._language_model else ACTION_SPACES,
        )
        self._batch: Groups | None = None
        self.last_train_stats: dict[str, float] = {}
        self.branch_env_steps = 0
        """Env steps played from copies of the state by ``branch`` groups (not in
        ``num_timesteps``); :attr:`env_steps_total` counts both."""
        """Metrics of the latest ``train()`` call (loss, grad_norm, ...), also logged."""
        if _init_setup_model:
            self._setup_model()

    # ------------------------------------------------------------------ setup
    def _build_env(self, env: Any, n_envs: int | None, seed: int | None) -> VecEnv:
        """The training VecEnv, with the group mode chosen once from the env's facts
        (:func:`tpo_agents.rollout.build_training_env`)."""
        try:  # set_env(the same object) keeps the live env (see _is_training_env)
            self._given_env = None if isinstance(env, str) else weakref.ref(env)
        except TypeError:  # an object that takes no weak reference
            self._given_env = None
        vec, self._group_mode = build_training_env(
            env,
            algo=type(self).__name__,
            policy=self.policy_class,
            choose_mode=self._choose_group_mode,
            n_envs=n_envs,
            batch_size=self.batch_size,
            n_candidates=self.n_candidates,
            seed=seed,
        )
        if self._group_mode == "critic" and not self._n_epochs_given and not getattr(self, "_loaded", False):
            # A loaded agent keeps the count it was trained with (older defaults included).
            self.n_epochs = self.critic_n_epochs(vec.action_space)
        return vec

    def critic_n_epochs(self, action_space: spaces.Space) -> int:
        """``n_epochs`` on ``critic`` groups when none is given: 1. Critic scores move between
        iterations, and one step per batch keeps the policy from chasing the critic's noise
        (4 epochs oscillated on CartPole; GRPO on Pendulum's sampled actions, tuning seeds
        100-102: -764, -1294, -605 against -732, -747 with one)."""
        return 1

    @staticmethod
    def _wrap_env(env: GymEnv, verbose: int = 0, monitor_wrapper: bool = True) -> VecEnv:
        return transpose_images(make_training_env(env, None))  # channel-last images, as SB3

    def _setup_model(self) -> None:
        self._setup_lr_schedule()
        self.set_random_seed(self.seed)
        if issubclass(self.policy_class, GaussianMlpPolicy) and "squash_mean" not in self.policy_kwargs:
            # Written out, so that a save says which mean its policy acts through. A save made
            # before the bounded mean existed (it has a resume state, but no such key) keeps
            # the linear mean it was trained with.
            loading_legacy = "_resume_state" in self.__dict__
            self.policy_kwargs = {**self.policy_kwargs, "squash_mean": not loading_legacy}
        self.policy = self.policy_class(self.observation_space, self.action_space, self.lr_schedule, **self.policy_kwargs)
        self.policy = self.policy.to(self.device)
        self._np_rng = np.random.default_rng(self.seed)
        self._episode_in_progress = np.zeros(self.n_envs, dtype=bool)
        self._params_moved = False
        self._announce_group_mode()

    def _get_torch_save_params(self) -> tuple[list[str], list[str]]:
        if self._language_model:  # the weights are in the model folder (tpo_agents.llm.saving)
            return ["policy.optimizer"], []
        return ["policy", "policy.optimizer"], []

    def save(self, path, exclude=None, include=None) -> None:
        """SB3's ``save``, atomically, with everything needed to resume training exactly.

        The zip holds the weights, the optimizer state (moments, step counts), the torch
        and numpy random states and, for envs that can snapshot themselves (every tpo_gym
        env), the training env's state. It is written to a temporary file in the same
        folder and moved into place, so a crash mid-save leaves the previous checkpoint
        intact. A language-model policy also writes its model folder ``<path>_hf/``
        (``save_pretrained``, swapped in the same way; see :mod:`tpo_agents.llm.saving`).
        Resume with ``Algo.load(path, env, force_reset=False)`` then
        ``learn(n, reset_num_timesteps=False)``.
        """
        self._resume_state = self._capture_resume_state()
        try:
            if self._language_model:
                from tpo_agents.llm.saving import save_agent

                save_agent(self, path, lambda: self._save_zip(path, exclude, include))
            else:
                self._save_zip(path, exclude, include)
        finally:
            del self._resume_state

    def _save_zip(self, path, exclude, include) -> None:
        if isinstance(path, str | os.PathLike):
            final = pathlib.Path(path)
            if final.suffix == "":  # SB3's rule: a name without a suffix gets ".zip"
                final = final.with_name(final.name + ".zip")
            with atomic_path(final) as tmp:
                super().save(tmp, exclude, include)
        else:  # a file object: written in place, as SB3 does
            super().save(path, exclude, include)

    def _capture_resume_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {"torch": torch.get_rng_state(), "numpy": self._np_rng.bit_generator.state}
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state["cuda"] = torch.cuda.get_rng_state_all()
        state["env"] = _env_state(self.env) if self.env is not None else None
        return state

    def _excluded_save_params(self) -> list[str]:
        # The branch scorer holds the live env's sub-envs: rebuilt from the env after a load.
        return [*super()._excluded_save_params(), "_batch", "_group_mode", "_np_rng", "_branch_scorer", "_branch_scorer_env",
                "_given_env", "_budget_end"]

    @classmethod
    def load(
        cls,
        path,
        env: GymEnv | None = None,
        device: torch.device | str = "auto",
        force_reset: bool = True,
        **kwargs: Any,
    ):
        """Load a saved agent (SB3's ``load``); ``env`` is built as the constructor builds it.

        Weights, optimizer state and random states are restored. With
        ``force_reset=False`` the training env's saved state is restored into ``env`` too
        (tpo_gym envs), so ``learn(n, reset_num_timesteps=False)`` continues the run
        exactly where it was saved. A language-model policy is rebuilt from the model
        folder next to ``path``. Loading a file saved by another algorithm is refused.
        """
        from tpo_agents.llm.saving import load_kwargs

        device = check_device(device)
        model = super().load(path, env=None, device=device, **load_kwargs(path, kwargs))
        saved_by = model._saved_by  # a file saved before it was recorded keeps cls's (from __init__)
        if saved_by != cls.__name__:
            raise ValueError(
                f"{path!s} holds a {saved_by} agent, not a {cls.__name__}: load it with "
                f"{saved_by}.load(...)"
            )
        model._loaded = True
        resume = model.__dict__.pop("_resume_state", None) or {}
        if "numpy" in resume:
            model._np_rng.bit_generator.state = resume["numpy"]
        if "torch" in resume:
            torch.set_rng_state(resume["torch"])
        if "cuda" in resume and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(resume["cuda"])
        if env is not None:
            model._set_env(env, force_reset, resume.get("env"), from_checkpoint=True)
        return model

    def set_env(self, env: GymEnv, force_reset: bool = True, env_state: dict | None = None) -> None:
        """Use a new env with the same spaces (SB3's ``set_env``); unlike SB3, the number of
        envs may differ (the agents keep no per-env buffers). Envs are built as in the
        constructor.

        The env the agent already trains on (its ``get_env()``, or the object it was built
        from) is kept as it is: ``force_reset=False`` continues from its last observation,
        ``force_reset=True`` resets it before the next ``learn``. For another env,
        ``force_reset=True`` (SB3's default) starts from a reset; ``force_reset=False``
        keeps the last observation, as SB3 does, when the env is a vector env used as given
        (an SB3 ``VecEnv`` or Gymnasium ``VectorEnv``: its state is the caller's to vouch
        for), or restores ``env_state`` (a snapshot saved with the agent) into it; a vector
        env built here from an id or a ``gym.Env`` has no state to continue and starts from
        a reset, with a warning, as does an env with another number of sub-envs."""
        self._set_env(env, force_reset, env_state, from_checkpoint=env_state is not None)

    def _set_env(self, env: GymEnv, force_reset: bool, env_state: dict | None, from_checkpoint: bool) -> None:
        """:meth:`set_env`; ``from_checkpoint``: ``env_state`` is what ``load`` found in the
        file (None: nothing was saved), so an env that cannot take it starts from a reset."""
        if self._is_training_env(env):
            if force_reset:
                self._last_obs = None
                self._episode_in_progress = np.zeros(self.n_envs, dtype=bool)
            return
        given = env
        env = self._build_env(env, None, self.seed)
        check_for_correct_spaces(env, self.observation_space, self.action_space)
        self._announce_group_mode()
        keep = not force_reset and self._last_obs is not None
        if keep and env.num_envs != self.n_envs:
            warnings.warn(
                f"force_reset=False: the env has {env.num_envs} sub-envs, the saved run had "
                f"{self.n_envs}; training continues from a reset env, so it will not replay the "
                "original run exactly",
                stacklevel=3,
            )
            keep = False
        if keep and from_checkpoint:
            keep = _restore_env_state(env, env_state)
        elif keep and not isinstance(given, VecEnv | VectorEnv):
            warnings.warn(
                f"force_reset=False: the vector env built from {given!r} is new (only the agent's "
                "own env, or a VecEnv / VectorEnv you pass, continues from the last observation); "
                "training continues from a reset env",
                stacklevel=3,
            )
            keep = False
        self.n_envs = env.num_envs
        self.env = env
        self._vec_normalize_env = unwrap_vec_normalize(env)
        if not keep:
            self._last_obs = None
            self._episode_in_progress = np.zeros(self.n_envs, dtype=bool)

    def _is_training_env(self, env: Any) -> bool:
        """Whether ``env`` is the env the agent trains on now: its training ``VecEnv``
        (``get_env()``), or the object that ``VecEnv`` was built from (a ``gym.Env`` it
        wraps or was built like, a ``VectorEnv``, a ``VecEnv``); never an env id."""
        if self.env is None or isinstance(env, str):
            return False
        given = self._given_env() if self._given_env is not None else None
        return env is self.env or env is given

    # ----------------------------------------------------------- group modes
    def default_group_mode(self, hint: str | None, can_score: bool) -> str:
        """The collection mode for an env; subclasses choose (see :mod:`tpo_agents.rollout`)."""
        raise NotImplementedError

    def _choose_group_mode(self, facts: EnvFacts) -> str:
        if self.group_mode == "per_state":
            check_can_score(facts)
        if self.group_mode != "auto":
            self._mode_reason = f"group_mode={self.group_mode!r} as given, on {facts.name}"
            return self.group_mode
        mode = self.default_group_mode(facts.hint, facts.can_score)
        if not isinstance(facts.action_space, spaces.Discrete) and mode != "single":
            # Actions that cannot be enumerated (Box, MultiDiscrete, MultiBinary): K actions
            # sampled per state, scored by a learned Q(s, a) unless the env hints branch (and
            # its state can be copied) or sequence. Not branch by default: each of its K
            # lookaheads costs env transitions that a user who pays per interaction pays
            # for (125 per followed step on Pendulum), so at an equal count of every
            # interaction it learns from a hundredth of the states (docs/algorithms.md 4.6).
            if mode in ("all_actions", "per_state") or (mode == "branch" and not facts.branchable):
                mode = "critic"
        self._mode_reason = f"group_mode='auto' chose {mode!r} on {facts.name}: {_why(mode, facts)}"
        return mode

    def _announce_group_mode(self) -> None:
        """Say which group mode (scorer) the agent collects with and why (``verbose >= 1``)."""
        if self.verbose >= 1 and self._mode_reason:
            print(f"{type(self).__name__}: {self._mode_reason}")

    def resolve_group_mode(self) -> str:
        """The group mode this agent collects with on its env (``group_mode``, or the
        subclass default for the env when it is ``"auto"``), chosen when the env was set."""
        return self._group_mode

    @property
    def last_batch(self) -> Groups | None:
        """The batch of groups the last :meth:`collect_rollouts` collected (None before the
        first one; not saved with the agent): a :class:`~tpo_agents.rollout.GroupBatch`, or
        for sequence policies a :class:`~tpo_agents.rollout.TokenGroupBatch`,
        :class:`~tpo_agents.rollout.SequenceGroupBatch` or
        :class:`~tpo_agents.rollout.LMGroupBatch`. It holds the scores, the mask and the
        frozen rollout-time log-probs ``old_logp`` (all ``[G, K]``). Read-only: to update on
        another batch, pass it to :meth:`train`."""
        return self._batch

    @property
    def env_steps_total(self) -> int:
        """Every env transition this agent made: ``num_timesteps`` (steps of the env it
        trains on) plus :attr:`branch_env_steps` (steps of state copies in ``branch``
        groups). A fair comparison with an agent that makes no simulated steps equalizes
        this, not ``num_timesteps``; logged as ``rollout/env_steps_total``."""
        return int(self.num_timesteps) + int(self.branch_env_steps)

    @property
    def n_updates(self) -> int:
        """Gradient updates (optimizer steps) taken so far, over every :meth:`train` call
        (saved with the agent; epochs that take no step are not counted)."""
        return self._n_updates

    # ---------------------------------------------------------------- rollout
    def _check_finite_rewards(self, rewards: np.ndarray, where: str = "env.step") -> None:
        rewards = np.asarray(rewards)
        if not np.isfinite(rewards).all():
            bad = np.flatnonzero(~np.isfinite(rewards.reshape(len(rewards), -1)).all(-1))
            raise ValueError(
                f"{where} returned a non-finite reward {rewards[bad[0]].tolist()} at timestep "
                f"{self.num_timesteps + 1} (sub-env {int(bad[0])}); rewards must be finite numbers"
            )

    def _scorer_for_mode(self):
        """The scorer of ``critic`` groups (a learned critic) or ``branch`` groups (copies of
        the env's state), built on first use; None in other modes."""
        if self._group_mode == "branch":
            from tpo_agents.rollout.branching import BranchScorer

            if self._branch_scorer is None or self._branch_scorer_env is not self.env:
                self._branch_scorer = BranchScorer(self.env, **self.branch_kwargs)
                self._branch_scorer_env = self.env
            return self._branch_scorer
        if self._group_mode != "critic":
            return None
        if self.critic is None:
            from tpo_agents.rollout.critic import QCritic
            from tpo_agents.rollout.sampled_critic import SampledActionCritic

            kwargs = {"seed": self.seed, **self.critic_kwargs}
            if isinstance(self.action_space, spaces.Discrete):
                self.critic = QCritic(self.observation_space, int(self.action_space.n), self.device, **kwargs)
            else:  # K sampled actions per state, scored by Q(s, a) with the action as input
                self.critic = SampledActionCritic(self.observation_space, self.action_space, self.device, **kwargs)
        return self.critic

    def resolved_critic_settings(self) -> dict[str, Any]:
        """What the critic of ``critic`` groups is set to, defaults resolved on this agent's
        observation and action spaces without building it: ``bootstrap``, ``novelty`` (the
        bonus's weight, 0 where the critic encodes its observations), ``novelty_stop``,
        ``n_step``, ``n_critics`` (two for ``Discrete`` actions, four for sampled ones),
        ``batch_size`` (256 for ``Discrete`` actions, 128 for sampled ones),
        ``updates_per_step`` (0.25, 0.2), for sampled actions ``n_target_actions`` (2) and,
        where the bonus is on, ``novelty_training`` (``"per_update"``: the predictor trains and
        scores once per critic update, :data:`~tpo_agents.rollout.critic.NOVELTY_ROWS_PER_STEP`
        rows a step)."""
        from tpo_agents.rollout.critic import (
            DEFAULT_BATCH_SIZE,
            DEFAULT_BOOTSTRAP,
            DEFAULT_N_CRITICS,
            DEFAULT_N_STEP,
            DEFAULT_NOVELTY_STOP,
            DEFAULT_UPDATES_PER_STEP,
            SAMPLED_BATCH_SIZE,
            SAMPLED_N_CRITICS,
            SAMPLED_N_TARGET_ACTIONS,
            SAMPLED_UPDATES_PER_STEP,
            resolved_novelty,
        )

        kwargs = self.critic_kwargs
        novelty = resolved_novelty(kwargs.get("novelty"), self.observation_space, kwargs.get("features_extractor_class"))
        discrete = isinstance(self.action_space, spaces.Discrete)
        n_critics = DEFAULT_N_CRITICS if discrete else SAMPLED_N_CRITICS
        return {
            "bootstrap": kwargs.get("bootstrap", DEFAULT_BOOTSTRAP),
            "novelty": float(novelty),
            "novelty_stop": kwargs.get("novelty_stop", DEFAULT_NOVELTY_STOP),
            "n_step": int(kwargs.get("n_step", DEFAULT_N_STEP)),
            "n_critics": int(kwargs.get("n_critics", n_critics)),
            "batch_size": int(kwargs.get("batch_size", DEFAULT_BATCH_SIZE if discrete else SAMPLED_BATCH_SIZE)),
            "updates_per_step": float(kwargs.get("updates_per_step", DEFAULT_UPDATES_PER_STEP if discrete else SAMPLED_UPDATES_PER_STEP)),
            **({} if discrete else {"n_target_actions": int(kwargs.get("n_target_actions", SAMPLED_N_TARGET_ACTIONS))}),
            **({"novelty_training": "per_update"} if novelty > 0 else {}),
        }

    def _step_hook(self, callback: BaseCallback) -> OnStep:
        """The bookkeeping after each vector step of a rollout, as the collectors call it."""

        def on_step(new_obs, rewards, dones, infos, n_counted: int) -> bool:
            self.num_timesteps += n_counted
            self._last_obs = new_obs
            if dones is not None:
                self._episode_in_progress = ~np.asarray(dones, dtype=bool)
            self._update_info_buffer(infos, dones)
            callback.update_locals(locals())
            return bool(callback.on_step())

        return on_step

    def collect_rollouts(self, callback: BaseCallback) -> bool:
        """Collect one batch of groups (then :attr:`last_batch`); False if a callback stopped it."""
        collector = collector_for(self.policy, self._group_mode)
        ctx = RolloutContext(
            env=self.env,
            policy=self.policy,
            n_candidates=self.n_candidates,
            rng=self._np_rng,
            last_obs=self._last_obs,
            episode_in_progress=self._episode_in_progress,
            on_step=self._step_hook(callback),
            check_rewards=self._check_finite_rewards,
            logp_reduction=self.logp_reduction,
            start_time=self.start_time,
            scorer=self._scorer_for_mode(),
            steps_left=None if self._budget_end is None else self._budget_end - self.num_timesteps,
        )
        self.policy.set_training_mode(False)
        callback.on_rollout_start()
        steps_copies = hasattr(ctx.scorer, "env_steps")  # branch scorers step copies of the state
        simulated = ctx.scorer.env_steps if steps_copies else 0
        batch = collector.collect(ctx, self.batch_size)
        self._last_obs, self._episode_in_progress = ctx.last_obs, ctx.episode_in_progress
        if steps_copies:
            self.branch_env_steps += ctx.scorer.env_steps - simulated
            self.logger.record("rollout/branch_env_steps", self.branch_env_steps)
        self.logger.record("rollout/env_steps_total", self.env_steps_total)
        if getattr(self.critic, "novelty_model", None) is not None:  # on until a signal, back once forgotten
            self.logger.record("rollout/novelty_weight", self.critic.novelty_weight)
        if batch is None:
            return False
        self._batch = batch
        self._n_rollouts += 1
        every = self.log_completions_every
        if every is not None and (self._n_rollouts - 1) % every == 0:
            self._log_completions(batch)
        callback.update_locals(locals())
        callback.on_rollout_end()
        return True

    # ------------------------------------------------------------------ train
    def _update_learning_rate(self, optimizers) -> None:
        lr = self.lr_schedule(self._current_progress_remaining)
        real_number(f"the learning rate at progress {self._current_progress_remaining:.3g}", lr, at_least=0.0)
        super()._update_learning_rate(optimizers)

    def _where(self) -> str:
        return f"{type(self).__name__} at timestep {self.num_timesteps} (update {self._n_updates + 1})"

    def _log_completions(self, batch) -> None:
        from tpo_agents.llm.completions import completion_records, log_completions

        records = completion_records(self.policy, batch)
        log_completions(self.logger, records, self.num_timesteps, self._n_rollouts)

    def _reference_kl(self, batch):
        """The KL to the policy's reference model over this batch's epochs
        (:class:`tpo_agents.llm.reference.ReferenceKL`); None without a reference model."""
        if not getattr(self.policy, "has_reference", False):
            return None
        from tpo_agents.llm.reference import ReferenceKL

        return ReferenceKL(self.policy, batch)

    def prepare(self, batch: GroupBatch) -> dict[str, torch.Tensor]:
        """Quantities frozen for all epochs of a batch (targets, advantages)."""
        return {}

    def current_log_probs(self, batch: GroupBatch) -> torch.Tensor:
        """Log-probs the objective reads, under the current parameters (with gradient):
        ``[G, K]`` candidate log-probs by default."""
        return batch.log_probs(self.policy)

    def compute_loss(
        self, batch: GroupBatch, logp: torch.Tensor, frozen: dict[str, torch.Tensor]
    ) -> torch.Tensor | None:
        """The objective to minimise, from current candidate log-probs ``logp`` [G, K].

        ``None`` means the batch has nothing to teach at the current parameters (its exact
        gradient is zero, e.g. every group zero-variance): the epoch takes no optimizer
        step, so not even momentum moves the weights. ``self._params_moved`` tells whether
        an optimizer step was already taken on this batch."""
        raise NotImplementedError

    def diagnostics(self, batch: GroupBatch, frozen: dict[str, torch.Tensor]) -> dict[str, float]:
        """Extra per-batch metrics for the logger."""
        return {}

    def train(self, batch: Groups | None = None) -> None:
        """``n_epochs`` gradient steps on a batch: ``batch`` when given (e.g. a modified copy
        of :attr:`last_batch`, to time or study one update), else the batch the last
        :meth:`collect_rollouts` collected (SB3's ``train()``, as ``learn`` calls it). A given
        batch does not replace :attr:`last_batch`."""
        if batch is None:
            if self._batch is None:
                raise RuntimeError("train() needs a batch: call collect_rollouts first, or pass one")
            batch = self._batch
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        batch = batch.to(self.device)
        with torch.no_grad():
            frozen = self.prepare(batch)
        ref_kl = self._reference_kl(batch)  # None unless a language-model policy has a reference
        losses, grad_norms = [], []
        params = [p for p in self.policy.parameters() if p.requires_grad]
        backup = [torch.empty_like(p) for p in params]  # guarded_step's copy of the weights
        self._params_moved = False
        for _ in range(self.n_epochs):
            with ref_kl.tracking() if ref_kl is not None else contextlib.nullcontext():
                logp = self.current_log_probs(batch)
            loss = self.compute_loss(batch, logp, frozen)
            if ref_kl is not None:  # loss + ref_kl_coef * KL (recorded for train/kl_ref)
                loss = ref_kl.penalize(loss, self.ref_kl_coef)
            if loss is None:  # nothing to learn at these (unchanged) parameters: no step
                break
            if not torch.isfinite(loss):
                raise FloatingPointError(
                    f"{type(self).__name__} loss became {loss.item()} at timestep {self.num_timesteps}"
                )
            self.policy.optimizer.zero_grad()
            loss.backward()
            grad_norms.append(guarded_step(self.policy.optimizer, params, self.max_grad_norm, self._where(), backup))
            losses.append(loss.item())
            self._params_moved = True
        self._n_updates += len(losses)
        stats = {
            "loss": float(np.mean(losses)) if losses else 0.0,
            "grad_norm": float(np.mean(grad_norms)) if grad_norms else 0.0,
            "skipped_epochs": self.n_epochs - len(losses),
            "mean_score": float(batch.scores[batch.mask].mean()),
            **self.diagnostics(batch, frozen),
        }
        if ref_kl is not None:
            stats["kl_ref"] = ref_kl.mean()
        self.last_train_stats = stats
        for key, value in stats.items():
            self.logger.record(f"train/{key}", value)
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")

    # ------------------------------------------------------------------ learn
    def learn(
        self: SelfGrouped,
        total_timesteps: int,
        callback: MaybeCallback = None,
        log_interval: int = 1,
        tb_log_name: str | None = None,
        reset_num_timesteps: bool = True,
        progress_bar: bool = False,
    ) -> SelfGrouped:
        """Train for ``total_timesteps`` env steps (see :mod:`tpo_agents.rollout`), as SB3's
        ``learn``: one rollout (:meth:`collect_rollouts`) then its ``n_epochs`` of
        :meth:`train`, while ``num_timesteps < total_timesteps``, so the run stops within
        one rollout of the budget: ``N <= num_timesteps < N + (one rollout's env steps)``
        after ``learn(N)`` (unless a callback stops it). Every step of every sub-env counts.
        What a rollout is, by group mode:

        * ``critic``, ``per_state``, ``branch``, ``all_actions``: ``ceil(batch_size / n_envs)``
          vector steps, ``ceil(batch_size / n_envs) * n_envs`` env steps (SB3's
          ``n_steps * n_envs``; critic replay states and branch lookaheads are not env steps);
        * ``single``: ``batch_size`` whole episodes, one per sub-env at a time; once the
          budget is reached no episode starts and the rollout ends when the running ones
          end, so a run stops before ``N + n_envs * (longest episode)``;
        * ``sequence`` (MLP policies): ``batch_size`` contexts of K whole episodes each; once
          the budget is reached no context starts and the started ones finish their K
          episodes (before ``N + (n_envs + K - 1) * (longest episode)``);
        * token envs (``TransformerPolicy``, every mode): passes of T tokens (T vector
          steps) over all sub-envs until ``batch_size`` prompts are done,
          ``ceil(batch_size / prompts per pass) * T * n_envs`` env steps;
        * language-model prompt envs (``CausalLMPolicy``): one completion is one step,
          ``ceil(batch_size / n_envs) * n_envs * K`` of them (K = 1 in ``single``).
        """
        total_timesteps = timesteps(total_timesteps)
        if self.env is None:
            raise ValueError(
                f"this {type(self).__name__} has no env (it was loaded without one): pass env= "
                f"to {type(self).__name__}.load(...) or call model.set_env(env) before learn()"
            )
        iteration = 0
        total_timesteps, callback = self._setup_learn(
            total_timesteps, callback, reset_num_timesteps, tb_log_name or type(self).__name__, progress_bar
        )
        callback.on_training_start(locals(), globals())
        self._budget_end = total_timesteps  # whole-episode rollouts start no episode past it
        try:
            while self.num_timesteps < total_timesteps:
                if not self.collect_rollouts(callback):
                    break
                iteration += 1
                self._update_current_progress_remaining(self.num_timesteps, total_timesteps)
                self.train()
                if log_interval is not None and iteration % log_interval == 0:
                    self.dump_logs(iteration)
        finally:
            self._budget_end = None
        callback.on_training_end()
        return self

    def dump_logs(self, iteration: int = 0) -> None:
        """Write the logger's record (stdout / CSV / tensorboard as configured); SB3's
        signature, so callbacks such as ``LogEveryNTimesteps`` can call ``dump_logs()``
        (``time/iterations`` is recorded when ``iteration > 0``, as in SB3)."""
        elapsed = max((time.time_ns() - self.start_time) / 1e9, sys.float_info.epsilon)
        if iteration > 0:
            self.logger.record("time/iterations", iteration, exclude="tensorboard")
        if self.ep_info_buffer:
            self.logger.record("rollout/ep_rew_mean", safe_mean([e["r"] for e in self.ep_info_buffer]))
            self.logger.record("rollout/ep_len_mean", safe_mean([e["l"] for e in self.ep_info_buffer]))
        self.logger.record("time/fps", int((self.num_timesteps - self._num_timesteps_at_start) / elapsed))
        self.logger.record("time/time_elapsed", int(elapsed), exclude="tensorboard")
        self.logger.record("time/total_timesteps", self.num_timesteps, exclude="tensorboard")
        if self.ep_success_buffer:  # filled from info["is_success"] at episode ends (SB3)
            self.logger.record("rollout/success_rate", safe_mean(self.ep_success_buffer))
        self.logger.dump(step=self.num_timesteps)


# ---------------------------------------------------------------------- helpers


def _env_state(vec_env: VecEnv) -> dict | None:
    """The env's own snapshot (tpo_gym envs: :class:`tpo_gym.snapshot.StateSnapshot`), else
    copies of a ``DummyVecEnv``'s sub-envs (:func:`~tpo_agents.rollout.envs.dummy_vec_env_state`)."""
    try:
        return vec_env.get_state()
    except AttributeError:
        return dummy_vec_env_state(vec_env)


def _restore_env_state(vec_env: VecEnv, state: dict | None) -> bool:
    """Put a saved env snapshot back; False (with a warning) when this env cannot take it."""
    problem = "no env state was saved with the agent" if state is None else None
    if problem is None:
        try:
            if state.get("tpo_snapshot") == "DummyVecEnv":
                restore_dummy_vec_env_state(vec_env, state)
            else:
                vec_env.set_state(state)
            return True
        except (AttributeError, ValueError) as error:
            problem = str(error) or f"{type(vec_env).__name__} cannot restore a saved state"
    warnings.warn(
        f"force_reset=False: the env's saved state cannot be restored ({problem}); "
        "training continues from a reset env, so it will not replay the original run exactly",
        stacklevel=3,
    )
    return False


def _optimizer_state_copy(optimizer: torch.optim.Optimizer) -> dict:
    """The optimizer's per-parameter state (its moments, step counts), tensors cloned: what
    an undone step puts back. A tenth of the cost of deep-copying its ``state_dict()`` (which
    also copies the parameter groups, unchanged by a step), paid on every policy step."""
    return {
        param: {k: v.clone() if torch.is_tensor(v) else copy.deepcopy(v) for k, v in entry.items()}
        for param, entry in optimizer.state.items()
    }


def guarded_step(
    optimizer: torch.optim.Optimizer,
    params: list[torch.nn.Parameter],
    max_grad_norm: float | None,
    where: str,
    backup: list[torch.Tensor] | None = None,
) -> float:
    """Clip (when ``max_grad_norm``) and take one optimizer step; returns the gradient norm.

    A non-finite gradient norm raises before the step; a step that leaves a parameter
    non-finite is undone (parameters and optimizer state restored) and raises. Either way
    the model stays as it was before the step. ``backup`` (tensors shaped like ``params``)
    saves allocating the copy every step.
    """
    grads = [p.grad for p in params if p.grad is not None]
    norm = torch.nn.utils.get_total_norm(grads) if grads else torch.zeros(())
    if not torch.isfinite(norm):
        raise FloatingPointError(
            f"{where}: the gradient norm is {norm.item()} (the loss's gradient overflowed: "
            "rewards or scores too large, or a diverged model); no step was taken, the "
            "parameters are unchanged"
        )
    if max_grad_norm is not None:
        torch.nn.utils.clip_grads_with_norm_(params, max_grad_norm, norm)
    with torch.no_grad():
        before = backup if backup is not None else [torch.empty_like(p) for p in params]
        torch._foreach_copy_(before, [p.detach() for p in params])
    state = _optimizer_state_copy(optimizer)
    optimizer.step()
    # One fused norm per step; an inf norm of finite (huge) weights is confirmed exactly.
    with torch.no_grad():
        finite = bool(torch.isfinite(torch.stack(torch._foreach_norm(params))).all()) or all(
            bool(torch.isfinite(p).all()) for p in params
        )
    if not finite:
        with torch.no_grad():
            torch._foreach_copy_([p.detach() for p in params], before)
        optimizer.state.clear()  # parameters stepped for the first time had no state before
        optimizer.state.update(state)
        lrs = sorted({g.get("lr") for g in optimizer.param_groups}, key=str)
        raise FloatingPointError(
            f"{where}: the optimizer step made parameters non-finite (gradient norm "
            f"{norm.item():.3g}, learning rate(s) {lrs}); the step was undone, parameters and "
            "optimizer state are as before it"
        )
    return float(norm)


def _why(mode: str, facts: EnvFacts) -> str:
    """Why ``auto`` picked ``mode`` for an env with these facts."""
    if facts.hint == mode:
        return f"the env's metadata asks for it (tpo_group_mode={mode!r})"
    if mode == "per_state":
        return "the env scores K candidates itself (score_candidates)"
    if mode == "sequence" and facts.hidden_by:
        return f"your wrappers {list(facts.hidden_by)} hide the env's score_candidates, so K rollouts run through them"
    if mode == "critic" and not isinstance(facts.action_space, spaces.Discrete):
        no_copy = "the env hints branch but its state cannot be copied here, so " if facts.hint == "branch" else ""
        return f"{no_copy}K actions sampled per state are scored by a learned critic Q(s, a) of the action"
    if mode == "critic":
        return "the env neither scores candidates nor hints a group mode: every action is scored by a learned critic"
    if mode == "single":
        return "this agent learns from one sample per context"
    return f"the env's metadata hint {facts.hint!r}"

