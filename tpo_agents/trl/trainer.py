"""``TargetPOTrainer``: TRL's ``GRPOTrainer`` with TPO's target-matching loss.

Everything around the loss is TRL's own code (datasets, chat templates, generation with
``transformers``/vLLM, reward functions, PEFT, reference model, gradient accumulation,
logging, checkpoints); this class changes three things:

1. **Scores.** After TRL scores the completions, each prompt's ``num_generations`` rewards
   are standardized TPO's way (weighted sum of the reward functions, population std,
   zero-variance groups get ``u = 0``) and stored where GRPO keeps its advantages, so the
   completions table logs them.
2. **Batches keep whole groups.** TRL shuffles the rows of a generation batch before
   splitting it into ``steps_per_generation`` micro-batches; TPO shuffles whole groups, so
   each micro-batch holds whole prompt groups (with ``per_device_train_batch_size`` a
   multiple of ``num_generations``, checked by :class:`TargetPOConfig`).
3. **Loss.** :func:`tpo_agents.trl.loss.tpo_group_loss`: ``-sum_i q_i log softmax(l)_i``
   per group, ``l_i`` = completion log-prob (sum over the completion mask), ``q`` from the
   rollout-time log-probs (TRL's ``old_per_token_logps``, or the detached current ones when
   TRL skips them because nothing changed since the rollout) and held fixed for all
   ``num_iterations``. Its gradient w.r.t. ``l`` is ``(p - q) / n_groups`` per micro-batch,
   divided by the gradient-accumulation steps like GRPO's loss.
"""

from __future__ import annotations

import torch
from trl import GRPOTrainer
from trl.trainer.utils import (
    split_pixel_values_by_grid,
    split_tensor_dict,
    unsplit_pixel_values_by_grid,
)

from tpo_agents.trl.config import TargetPOConfig
from tpo_agents.trl.loss import standardize_group_rewards, tpo_group_loss

__all__ = ["TargetPOTrainer"]


def shuffle_groups(batch: dict, num_generations: int) -> dict:
    """Permute whole groups of ``num_generations`` consecutive rows, all fields in unison.

    Scalars (0-d tensors) and ``None`` pass through; tensors and lists are permuted.
    """
    n_rows = len(next(v for v in batch.values() if v is not None and not _is_scalar(v)))
    if n_rows % num_generations:
        raise ValueError(
            f"{n_rows} rows do not split into groups of num_generations = {num_generations}"
        )
    groups = torch.randperm(n_rows // num_generations)
    order = (groups[:, None] * num_generations + torch.arange(num_generations)).flatten()

    def permute(v):
        if v is None or _is_scalar(v):
            return v
        if isinstance(v, torch.Tensor):
            return v[order.to(v.device)]
        return [v[i] for i in order.tolist()]

    return {key: permute(value) for key, value in batch.items()}


def _is_scalar(v) -> bool:
    return isinstance(v, torch.Tensor) and v.ndim == 0


class TargetPOTrainer(GRPOTrainer):
    """Target Policy Optimization for TRL users: swap ``GRPOTrainer`` -> ``TargetPOTrainer`` and
    ``GRPOConfig`` -> :class:`~tpo_agents.trl.TargetPOConfig`; every other argument is the same.

    For each prompt, TRL samples ``num_generations`` (K) completions and scores them with the
    reward functions. TPO standardizes the K scores (``u``), forms the target
    ``q = softmax(log p_old + u / tpo_eta)`` over the K completions from their rollout-time
    sequence log-probs, and minimises the cross-entropy ``-sum_i q_i log softmax(l)_i`` with
    ``l_i`` the current sequence log-prob; ``q`` stays frozen for all ``num_iterations``.

    Honoured as in GRPO: reward functions (several, with ``reward_weights`` and both
    ``multi_objective_aggregation`` modes; a completion no function scored leaves its group),
    ``num_generations``, ``num_iterations``, ``steps_per_generation`` /
    ``generation_batch_size``, gradient accumulation, ``peft_config`` (LoRA), ``beta`` (KL to
    the reference model, TRL's per-token estimator averaged per completion, with
    ``use_bias_correction_kl``, ``sync_ref_model``), ``mask_truncated_completions`` (a masked
    completion leaves its group), a fixed ``entropy_coef``, the MoE router loss, generation
    options, tools / environments (the tool mask restricts ``l`` to the policy's tokens), and
    logging (``reward``, ``rewards/*``, ``entropy``, ``kl``, completions tables).

    Not applicable (ignored, with a warning when set): ``epsilon``, ``epsilon_high``, ``delta``,
    ``loss_type``, ``importance_sampling_level``, ``scale_rewards``, SAPO/VESPO parameters,
    ``off_policy_mask_threshold``, ``top_entropy_quantile``; with vLLM, the sampler/trainer
    importance-sampling ratio is not applied (the target uses the trainer's own rollout-time
    log-probs). Not supported: ``use_adaptive_entropy``.

    Extra logged metrics: ``tpo/target_entropy`` (mean entropy of q), ``tpo/kl_target_old``
    (KL(q || p_old)), ``tpo/kl_target_current`` (KL(q || p), 0 when fitted),
    ``tpo/zero_variance_frac`` (groups whose scores are all equal: no TPO signal).

    Constraint: ``per_device_train_batch_size`` must be a multiple of ``num_generations``
    (checked by :class:`TargetPOConfig`) so every loss computation holds whole prompt groups.

    Not exercised by this repository's tests: vLLM generation, tools / environments and
    multi-process runs (see ``docs/llm_trl.md``).
    """

    _tag_names = ["trl", "target-po"]

    def __init__(self, model, reward_funcs=None, args: TargetPOConfig | None = None, *pos, **kwargs):
        if args is None:
            name = (
                model if isinstance(model, str) else getattr(model.config, "_name_or_path", "model")
            )
            args = TargetPOConfig(output_dir=f"{str(name).rstrip('/').split('/')[-1]}-TargetPO")
        if not isinstance(args, TargetPOConfig):
            raise ValueError(
                f"TargetPOTrainer needs a TargetPOConfig (GRPOConfig plus tpo_eta / tpo_anchor); got "
                f"{type(args).__name__}. Replace GRPOConfig(...) with TargetPOConfig(...)."
            )
        self._tpo_rewards_per_func: torch.Tensor | None = None
        super().__init__(model, reward_funcs, args, *pos, **kwargs)

    # ------------------------------------------------------------------ generation side

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(
            inputs, prompts, completions, completion_ids_list
        )
        self._tpo_rewards_per_func = rewards_per_func  # gathered over processes, grouped rows
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        mode = "train" if self.model.training else "eval"
        k = self.num_generations if mode == "train" else self.num_generations_eval
        loss_mask = output["completion_mask"]
        if "tool_mask" in output:
            loss_mask = loss_mask * output["tool_mask"]
        has_tokens = self.accelerator.gather(
            loss_mask.sum(-1) > 0
        )  # mask_truncated_completions may empty rows
        all_u, all_scored = standardize_group_rewards(
            self._tpo_rewards_per_func,
            k,
            reward_weights=self.reward_weights,
            aggregation=self.multi_objective_aggregation,
            valid=has_tokens,
        )
        n_local = output["completion_ids"].shape[0]
        local = slice(
            self.accelerator.process_index * n_local, (self.accelerator.process_index + 1) * n_local
        )
        device = output["completion_ids"].device
        output["advantages"] = all_u[local].to(device)
        output["tpo_scored"] = all_scored[local].to(device)
        # The completions table shows TPO's standardized scores, not GRPO's advantages.
        logged = self._logs["advantages"]
        for _ in range(min(len(all_u), len(logged))):
            logged.pop()
        logged.extend(all_u.tolist())
        zero_var = (all_u.view(-1, k) == 0).all(-1).float().mean().item()
        self._metrics[mode]["tpo/zero_variance_frac"].append(zero_var)
        return output

    def _prepare_inputs(self, generation_batch):
        """GRPO's buffering of generation batches, but shuffling whole prompt groups."""
        if not self.model.training:
            return self._generate_and_score_completions(generation_batch)
        generate_every = self.args.steps_per_generation * self.num_iterations
        if self._step % generate_every == 0 or self._buffered_inputs is None:
            batch = self._generate_and_score_completions(generation_batch)
            batch = split_pixel_values_by_grid(batch)
            batch = shuffle_groups(batch, self.num_generations)
            chunks = split_tensor_dict(batch, self.args.steps_per_generation)
            self._buffered_inputs = [unsplit_pixel_values_by_grid(chunk) for chunk in chunks]
        return self._buffered_inputs[self._step % self.args.steps_per_generation]

    # ------------------------------------------------------------------------- loss

    def _compute_loss(self, model, inputs):
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
        mask = (
            completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]
        )
        per_token_logps, entropies, aux_loss = self._get_per_token_logps_and_entropies(
            model,
            input_ids,
            attention_mask,
            completion_ids.size(1),
            compute_entropy=True,
            compute_aux_loss=self.aux_loss_enabled,
            **{key: inputs.get(key) for key in _MULTIMODAL_KEYS},
        )
        mode = "train" if self.model.training else "eval"
        k = self.num_generations if mode == "train" else self.num_generations_eval
        out = tpo_group_loss(
            per_token_logps,
            mask,
            inputs["advantages"],
            k,
            old_per_token_logps=inputs.get("old_per_token_logps"),
            valid=inputs.get("tpo_scored"),
            eta=self.args.tpo_eta,
            anchor=self.args.tpo_anchor,
        )
        loss = out.loss
        mask_f = mask.to(per_token_logps.dtype)
        if self.beta != 0.0:
            ref = inputs["ref_per_token_logps"]
            per_token_kl = torch.exp(ref - per_token_logps) - (ref - per_token_logps) - 1
            if self.args.use_bias_correction_kl:
                old = inputs.get("old_per_token_logps")
                old = per_token_logps.detach() if old is None else old
                per_token_kl = per_token_kl * torch.exp(per_token_logps - old)
            per_seq_kl = (per_token_kl * mask_f).sum(-1) / mask_f.sum(-1).clamp(min=1.0)
            loss = loss + self.beta * per_seq_kl.mean()
        if self.entropy_coef != 0.0:
            loss = loss - self.entropy_coef * (entropies * mask_f).sum() / mask_f.sum().clamp(
                min=1.0
            )
        if self.aux_loss_enabled:
            loss = loss + self.router_aux_loss_coef * aux_loss
            self._metrics[mode]["aux_loss"].append(
                self.accelerator.gather_for_metrics(aux_loss).mean().item()
            )
        if mode == "train":
            loss = loss / self.current_gradient_accumulation_steps
        self._log_loss_metrics(
            mode, out, entropies, mask_f, per_token_kl if self.beta != 0.0 else None
        )
        return loss

    def _log_loss_metrics(self, mode, out, entropies, mask_f, per_token_kl) -> None:
        def global_mean(values: torch.Tensor) -> float | None:
            totals = torch.stack(
                [values.float().sum(), values.new_tensor(values.numel(), dtype=torch.float32)]
            )
            totals = self.accelerator.reduce(totals.to(self.accelerator.device), reduction="sum")
            return (totals[0] / totals[1]).item() if totals[1] > 0 else float("nan")

        def masked_mean(x: torch.Tensor) -> float:
            totals = torch.stack([(x.detach() * mask_f).sum().float(), mask_f.sum().float()])
            totals = self.accelerator.reduce(totals, reduction="sum")
            return (totals[0] / totals[1].clamp(min=1.0)).item()

        metrics = self._metrics[mode]
        metrics["entropy"].append(masked_mean(entropies))
        if per_token_kl is not None:
            metrics["kl"].append(masked_mean(per_token_kl))
        metrics["tpo/target_entropy"].append(global_mean(out.target_entropy))
        metrics["tpo/kl_target_old"].append(global_mean(out.kl_target_old))
        metrics["tpo/kl_target_current"].append(global_mean(out.kl_target_current))


_MULTIMODAL_KEYS = (
    "pixel_values",
    "image_grid_thw",
    "num_images",
    "pixel_attention_mask",
    "spatial_shapes",
    "num_tiles",
    "image_sizes",
    "token_type_ids",
    "mm_token_type_ids",
    "image_position_ids",
)


TPOTrainer = TargetPOTrainer
"""Alias of :class:`TargetPOTrainer` (Target Policy Optimization). Not TRL's own
``trl.experimental.tpo.TPOTrainer``, which is Triple Preference Optimization (arXiv
2405.16681); prefer the unambiguous name."""
