"""Target Policy Optimization for TRL users: ``TargetPOTrainer`` / ``TargetPOConfig``, drop-ins
for TRL's ``GRPOTrainer`` / ``GRPOConfig``.

``from tpo_agents.trl import TargetPOTrainer, TargetPOConfig`` and use them exactly like
``GRPOTrainer`` / ``GRPOConfig``. ``TPOTrainer`` / ``TPOConfig`` are aliases of the same
classes; the longer names exist because TRL ships ``trl.experimental.tpo.TPOTrainer``, which
is *Triple* Preference Optimization, an unrelated preference method. Importing this package
imports ``trl`` (the ``llm`` extra). See ``docs/llm_trl.md``.
"""

from tpo_gym.extras import needs_extra

# Every module of this package imports it first: a missing trl/transformers names the extra.
with needs_extra("llm", "tpo_agents.trl"):
    from tpo_agents.trl.config import (
        ANCHOR_LOGPS,
        IGNORED_GRPO_OPTIONS,
        TargetPOConfig,
        TPOConfig,
    )
    from tpo_agents.trl.loss import (
        standardize_group_rewards,
        tpo_group_loss,
        tpo_sequence_loss,
    )
    from tpo_agents.trl.trainer import TargetPOTrainer, TPOTrainer

__all__ = [
    "ANCHOR_LOGPS",
    "IGNORED_GRPO_OPTIONS",
    "TPOConfig",
    "TPOTrainer",
    "TargetPOConfig",
    "TargetPOTrainer",
    "standardize_group_rewards",
    "tpo_group_loss",
    "tpo_sequence_loss",
]
