"""TPO for TRL users: a drop-in ``TPOTrainer`` / ``TPOConfig`` pair for TRL's GRPO trainer.

``from tpo_agents.trl import TPOTrainer, TPOConfig`` and use them exactly like
``GRPOTrainer`` / ``GRPOConfig``. Importing this package imports ``trl`` (the ``llm`` extra).
See ``docs/llm_trl.md``.
"""

from tpo_agents.trl.config import IGNORED_GRPO_OPTIONS, TPOConfig
from tpo_agents.trl.loss import standardize_group_rewards, tpo_group_loss
from tpo_agents.trl.trainer import TPOTrainer

__all__ = [
    "IGNORED_GRPO_OPTIONS",
    "TPOConfig",
    "TPOTrainer",
    "standardize_group_rewards",
    "tpo_group_loss",
]
