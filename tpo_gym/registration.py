"""Registers every tpo_gym environment id with Gymnasium (idempotent)."""

import gymnasium as gym

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
}


def register_all() -> None:
    """Register the ids that are not registered yet."""
    for env_id, kwargs in _IDS.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, **kwargs)
