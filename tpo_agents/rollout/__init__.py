"""Rollouts: from the user's env to a batch of scored candidate groups.

One seam, one direction. An algorithm (:class:`tpo_agents.base.GroupedAlgorithm`)

1. builds its training env once with :func:`build_training_env`, which reads the env's
   :class:`EnvFacts`, lets the algorithm choose the group mode, and sizes the vector env;
2. each iteration, hands a :class:`RolloutContext` (env, policy, K, rng, last observation,
   step hook) to the collector :func:`collector_for` picks for its policy and mode;
3. gets back a batch (:mod:`~tpo_agents.rollout.batches`) with frozen rollout-time
   log-probs, on which its objective trains.

Modules: :mod:`~.context` (the context and the collector base), :mod:`~.modes` (group
modes, collector tables), :mod:`~.step` / :mod:`~.token` / :mod:`~.lm` (collectors of
step-level, token-level and language-model policies), :mod:`~.scoring` (candidate
scores), :mod:`~.batches` (every batch, the language-model one included),
:mod:`~.branching` and :mod:`~.critic` (the scorers of ``branch`` and ``critic`` groups),
:mod:`~.observations` (how batches of observations, arrays or ``Dict`` spaces' dicts of
arrays, are stacked, copied, indexed and stored).
The training env: :mod:`~.facts` (what the user's env is and offers, read only),
:mod:`~.envs` (the SB3 ``VecEnv`` adapters and wrappers the agents add, env snapshots) and
:mod:`~.training_env` (the builder: ``build_training_env``, ``make_training_env``), which
calls the other two and is called by neither. The group modes are described in
``docs/algorithms.md`` (section 4).
"""

from tpo_agents.rollout.batches import (
    LOGP_REDUCTIONS,
    GroupBatch,
    Groups,
    LMGroupBatch,
    SequenceGroupBatch,
    TensorGroups,
    TokenGroupBatch,
)
from tpo_agents.rollout.context import Collector, OnStep, RolloutContext
from tpo_agents.rollout.envs import GymnasiumVecEnv
from tpo_agents.rollout.facts import EnvFacts, check_can_score, env_facts, native_vector_entry
from tpo_agents.rollout.modes import GROUP_MODES, collector_for, policy_kind
from tpo_agents.rollout.scoring import score_candidates
from tpo_agents.rollout.training_env import build_training_env, make_training_env

__all__ = [
    "GROUP_MODES",
    "LOGP_REDUCTIONS",
    "Collector",
    "EnvFacts",
    "GroupBatch",
    "Groups",
    "GymnasiumVecEnv",
    "LMGroupBatch",
    "OnStep",
    "RolloutContext",
    "SequenceGroupBatch",
    "TensorGroups",
    "TokenGroupBatch",
    "build_training_env",
    "check_can_score",
    "collector_for",
    "env_facts",
    "make_training_env",
    "native_vector_entry",
    "policy_kind",
    "score_candidates",
]
