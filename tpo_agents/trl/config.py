"""``TargetPOConfig``: TRL's ``GRPOConfig`` plus TPO's two settings and its batch-layout rule."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field, fields

from trl import GRPOConfig

__all__ = ["IGNORED_GRPO_OPTIONS", "TPOConfig", "TargetPOConfig"]

IGNORED_GRPO_OPTIONS = (
    "epsilon",
    "epsilon_high",
    "delta",
    "loss_type",
    "importance_sampling_level",
    "scale_rewards",
    "sapo_temperature_neg",
    "sapo_temperature_pos",
    "vespo_k_pos",
    "vespo_lambda_pos",
    "vespo_k_neg",
    "vespo_lambda_neg",
    "off_policy_mask_threshold",
    "top_entropy_quantile",
)
"""GRPO options that have no meaning for TPO's loss; a non-default value draws a warning.

Clipping (``epsilon``, ``epsilon_high``, ``delta``), the token-loss aggregation
(``loss_type``), importance-ratio shaping (``importance_sampling_level``, SAPO / VESPO
parameters, ``off_policy_mask_threshold``), token selection (``top_entropy_quantile``) and
reward scaling (``scale_rewards``: TPO always standardizes within each group with the
population std) all act on GRPO's per-token surrogate, which TPO does not have.
"""


@dataclass
class TargetPOConfig(GRPOConfig):
    r"""Configuration for :class:`~tpo_agents.trl.TargetPOTrainer`: every ``GRPOConfig`` field plus

    Parameters:
        tpo_eta (`float`, defaults to `1.0`):
            Target temperature: ``q = softmax(log p_old + u / tpo_eta)`` over each prompt's
            ``num_generations`` completions. Smaller values move the target further from the
            rollout policy.
        tpo_anchor (`bool`, defaults to `True`):
            ``False`` drops ``p_old`` from the target (the TPO-no-anchor ablation,
            ``q = softmax(u / tpo_eta)``).

    Layout rule (checked here): ``per_device_train_batch_size`` (and, when evaluating,
    ``per_device_eval_batch_size``) must be a multiple of ``num_generations`` (of
    ``num_generations_eval``), so that every loss computation holds whole prompt groups: TPO's
    softmax normalises over a prompt's completions, which GRPO's per-token loss never needs.
    The options in :data:`IGNORED_GRPO_OPTIONS` do not apply to TPO (a warning names any set
    to a non-default value); ``use_adaptive_entropy`` is not supported.
    """

    tpo_eta: float = field(
        default=1.0,
        metadata={"help": "TPO target temperature eta > 0: q = softmax(log p_old + u / eta)."},
    )
    tpo_anchor: bool = field(
        default=True,
        metadata={"help": "False gives TPO-no-anchor: q = softmax(u / eta), without p_old."},
    )

    def __post_init__(self):
        super().__post_init__()
        try:
            eta = float(self.tpo_eta)
        except (TypeError, ValueError):
            raise ValueError(f"tpo_eta must be a number > 0; got {self.tpo_eta!r}") from None
        if not (math.isfinite(eta) and eta > 0):
            raise ValueError(f"tpo_eta must be a finite number > 0; got {self.tpo_eta!r}")
        self.tpo_eta = eta
        if self.per_device_train_batch_size % self.num_generations:
            raise ValueError(
                f"per_device_train_batch_size ({self.per_device_train_batch_size}) must be a multiple of "
                f"num_generations ({self.num_generations}): TPO's loss normalises over each prompt's "
                "completions, so a loss computation must hold whole prompt groups"
            )
        if self.do_eval and self.eval_strategy != "no":
            k_eval = self.num_generations_eval or self.num_generations
            if self.per_device_eval_batch_size % k_eval:
                raise ValueError(
                    f"per_device_eval_batch_size ({self.per_device_eval_batch_size}) must be a multiple of "
                    f"the evaluation group size ({k_eval})"
                )
        if self.use_adaptive_entropy:
            raise ValueError(
                "use_adaptive_entropy=True is not supported by TargetPOTrainer; use a fixed entropy_coef"
            )
        defaults = {f.name: f.default for f in fields(GRPOConfig) if f.name in IGNORED_GRPO_OPTIONS}
        changed = [name for name, default in defaults.items() if getattr(self, name) != default]
        if changed:
            warnings.warn(
                f"TargetPOConfig: {', '.join(changed)} do(es) not apply to TPO's loss and will be ignored",
                UserWarning,
                stacklevel=3,
            )


TPOConfig = TargetPOConfig
"""Alias of :class:`TargetPOConfig` (see :data:`tpo_agents.trl.trainer.TPOTrainer`)."""
