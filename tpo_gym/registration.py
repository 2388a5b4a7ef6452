"""Registers every tpo_gym environment id with Gymnasium (idempotent)."""

import gymnasium as gym

REASONING_GYM_TASKS = (
    "graph_color",
    "knights_knaves",
    "basic_arithmetic",
    "chain_sum",
    "gsm_symbolic",
)
"""Reasoning Gym tasks with a ready-made id ``ReasoningGym-<task>-v0`` (any other name works
through ``gym.make("ReasoningGym-v0", task=name)``)."""

_IDS = {
    "SymmetricBandit-v0": dict(
        entry_point="tpo_gym.bandits:SymmetricBanditEnv",
        vector_entry_point="tpo_gym.bandits:SymmetricBanditVectorEnv",
    ),
    "MultiContextBandit-v0": dict(
        entry_point="tpo_gym.bandits:MultiContextBanditEnv",
        vector_entry_point="tpo_gym.bandits:MultiContextBanditVectorEnv",
    ),
    "MNISTBandit-v0": dict(
        entry_point="tpo_gym.mnist:MNISTBanditEnv",
        vector_entry_point="tpo_gym.mnist:MNISTBanditVectorEnv",
    ),
    # Token Reversal: episodes end by themselves after `length` steps (no max_episode_steps).
    "TokenReversal-v0": dict(
        entry_point="tpo_gym.token_reversal:TokenReversalEnv",
        vector_entry_point="tpo_gym.token_reversal:TokenReversalVectorEnv",
        kwargs={"reward": "bag"},
    ),
    **{
        f"TokenReversal-{reward}-v0": dict(
            entry_point="tpo_gym.token_reversal:TokenReversalEnv",
            vector_entry_point="tpo_gym.token_reversal:TokenReversalVectorEnv",
            kwargs={"reward": reward},
        )
        for reward in ("bag", "sequential", "terminal")
    },
    # LLM prompt environments (tpo_gym.prompts): one-step episodes, no vector entry point.
    "ReasoningGym-v0": dict(entry_point="tpo_gym.prompts.env:ReasoningGymEnv"),
    **{
        f"ReasoningGym-{task}-v0": dict(
            entry_point="tpo_gym.prompts.env:ReasoningGymEnv", kwargs={"task": task}
        )
        for task in REASONING_GYM_TASKS
    },
    "GSM8K-v0": dict(entry_point="tpo_gym.prompts.env:GSM8KEnv"),
    "PromptList-v0": dict(entry_point="tpo_gym.prompts.env:PromptListEnv"),
    "TinyArithmetic-v0": dict(entry_point="tpo_gym.prompts.env:TinyArithmeticEnv"),
    "Arithmetic-v0": dict(entry_point="tpo_gym.prompts.env:ArithmeticEnv"),
    "StringReversal-v0": dict(entry_point="tpo_gym.prompts.env:StringReversalEnv"),
}


def register_all() -> None:
    """Register the ids that are not registered yet."""
    for env_id, kwargs in _IDS.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, **kwargs)
