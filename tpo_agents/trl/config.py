"""``TargetPOConfig``: TRL's ``GRPOConfig`` plus TPO's settings and checks."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

from trl import GRPOConfig

__all__ = ["ANCHOR_LOGPS", "IGNORED_GRPO_OPTIONS", "TPOConfig", "TargetPOConfig"]

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
    "vllm_importance_sampling_mode",
    "vllm_importance_sampling_clip_min",
    "vllm_importance_sampling_clip_max",
    "vllm_importance_sampling_cap",
)
"""GRPO options that have no meaning for TPO's loss: ``TargetPOConfig`` raises ``ValueError``
when one is set to anything but TRL's default.

Clipping (``epsilon``, ``epsilon_high``, ``delta``), the token-loss aggregation
(``loss_type``), importance-ratio shaping (``importance_sampling_level``, SAPO / VESPO
parameters, ``off_policy_mask_threshold``, the ``vllm_importance_sampling_*`` mode and clip
bounds), token selection (``top_entropy_quantile``) and reward scaling (``scale_rewards``: TPO
always standardizes within each group with the population std) all act on GRPO's per-token
surrogate, which TPO does not have. See the table in ``docs/llm_trl.md``.
"""

ANCHOR_LOGPS = ("trainer", "sampler")
"""Values of ``TargetPOConfig.tpo_anchor_logps``: whose log-probs ``p_old`` anchors the target."""


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
        tpo_anchor_logps (`str`, defaults to `"trainer"`):
            Whose sequence log-probs are ``p_old`` when the sampler is not the trainer (vLLM, or a
            ``rollout_func`` that returns ``logprobs``). ``"trainer"``: the trainer's own log-probs
            of the completions at rollout time (the sampler's target corrected by the full
            sequence ratio trainer / sampler). ``"sampler"``: the log-probs the sampler reported.

    ``per_device_train_batch_size`` may be any size, also smaller than ``num_generations`` (the
    trainer then backpropagates a group in several micro-batches, exactly); when evaluating,
    ``per_device_eval_batch_size`` must be a multiple of ``num_generations_eval``. The options in
    :data:`IGNORED_GRPO_OPTIONS` do not apply to TPO: setting one to a non-default value raises
    ``ValueError``; ``use_adaptive_entropy`` is not supported.
    """

    tpo_eta: float = field(
        default=1.0,
        metadata={"help": "TPO target temperature eta > 0: q = softmax(log p_old + u / eta)."},
    )
    tpo_anchor: bool = field(
        default=True,
        metadata={"help": "False gives TPO-no-anchor: q = softmax(u / eta), without p_old."},
    )
    tpo_anchor_logps: str = field(
        default="trainer",
        metadata={
            "help": "Whose log-probs are p_old in the target when sampler and trainer differ (vLLM, "
            "a rollout_func with logprobs): 'trainer' (its rollout-time log-probs) or 'sampler'.",
            "choices": list(ANCHOR_LOGPS),
        },
    )

    def __post_init__(self):
        # Read before GRPOConfig normalises them (scale_rewards True -> "group", cap -> clip_max).
        defaults = {f.name: f.default for f in fields(GRPOConfig) if f.name in IGNORED_GRPO_OPTIONS}
        changed = {name: getattr(self, name) for name in IGNORED_GRPO_OPTIONS}
        changed["scale_rewards"] = {True: "group"}.get(
            changed["scale_rewards"], changed["scale_rewards"]
        )
        changed = {name: v for name, v in changed.items() if v != defaults[name]}
        if changed:
            listed = ", ".join(f"{name}={value!r}" for name, value in changed.items())
            raise ValueError(
                f"TargetPOConfig: {listed}: GRPO-only option(s) that TPO's loss does not use (TPO has "
                "no clipped ratio and standardizes rewards per group); leave them at TRL's defaults "
                "(the table in docs/llm_trl.md says what each one does in GRPO and in TPO)"
            )
        super().__post_init__()
        try:
            eta = float(self.tpo_eta)
        except (TypeError, ValueError):
            raise ValueError(f"tpo_eta must be a number > 0; got {self.tpo_eta!r}") from None
        if not (math.isfinite(eta) and eta > 0):
            raise ValueError(f"tpo_eta must be a finite number > 0; got {self.tpo_eta!r}")
        self.tpo_eta = eta
        if self.tpo_anchor_logps not in ANCHOR_LOGPS:
            raise ValueError(
                f"tpo_anchor_logps must be one of {ANCHOR_LOGPS}; got {self.tpo_anchor_logps!r}"
            )
        if self.tpo_anchor_logps == "sampler" and not self.tpo_anchor:
            raise ValueError(
                "tpo_anchor_logps='sampler' chooses the anchor's log-probs, but tpo_anchor=False "
                "drops the anchor: set one or the other"
            )
        if self.do_eval and self.eval_strategy != "no":
            k_eval = self.num_generations_eval or self.num_generations
            if self.per_device_eval_batch_size % k_eval:
                raise ValueError(
                    f"per_device_eval_batch_size ({self.per_device_eval_batch_size}) must be a multiple of "
                    f"the evaluation group size ({k_eval}): evaluation computes each group's loss in one pass"
                )
        if self.use_adaptive_entropy:
            raise ValueError(
                "use_adaptive_entropy=True is not supported by TargetPOTrainer; use a fixed entropy_coef"
            )


TPOConfig = TargetPOConfig
"""Alias of :class:`TargetPOConfig` (see :data:`tpo_agents.trl.trainer.TPOTrainer`)."""
