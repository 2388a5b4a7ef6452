"""``TargetPOTrainer``: TRL's ``GRPOTrainer`` with TPO's target-matching loss.

Everything around the loss is TRL's own code (datasets, chat templates, generation with
``transformers``/vLLM, reward functions, PEFT, reference model, gradient accumulation,
logging, checkpoints); this class changes four things:

1. **Scores.** After TRL scores the completions, each prompt's ``num_generations`` rewards
   are standardized TPO's way (weighted sum of the reward functions, population std,
   zero-variance groups get ``u = 0``) and stored where GRPO keeps its advantages, so the
   completions table logs them.
2. **Batches keep groups together.** TRL shuffles the rows of a generation batch before
   splitting it into ``steps_per_generation`` micro-batches; TPO shuffles whole groups (a group
   split across processes keeps its rows on each process together).
3. **Loss.** :func:`tpo_agents.trl.loss.tpo_sequence_loss`: ``-sum_i q_i log softmax(l)_i`` per
   group, ``l_i`` = completion log-prob (sum over the completion mask), ``q`` from the anchor's
   rollout-time log-probs and held fixed for all ``num_iterations``. Its gradient w.r.t. ``l``
   is ``(p - q)`` per group, divided by the groups per micro-batch and by the
   gradient-accumulation steps like GRPO's loss.
4. **Micro-batches smaller than a group.** When ``per_device_train_batch_size`` is not a
   multiple of ``num_generations``, ``p`` of every group an optimizer step touches is computed
   first (a no-grad forward at the step's parameters, gathered across processes), then each
   micro-batch backpropagates ``sum_i (p_i - q_i) l_i`` over its rows: the same gradient as one
   pass over whole groups.
"""

from __future__ import annotations

import torch
from trl import GRPOTrainer
from trl.models.utils import disable_gradient_checkpointing
from trl.trainer.utils import (
    split_pixel_values_by_grid,
    split_tensor_dict,
    unsplit_pixel_values_by_grid,
)

from tpo_agents.trl.config import TargetPOConfig
from tpo_agents.trl.loss import sequence_logps, standardize_group_rewards, tpo_sequence_loss

__all__ = ["TargetPOTrainer"]


def shuffle_groups(
    batch: dict, num_generations: int, group_ids: torch.Tensor | None = None
) -> dict:
    """Permute runs of rows of the same group as blocks, all fields in unison.

    Without ``group_ids`` the groups are ``num_generations`` consecutive rows; with them (one id
    per row, each group's rows consecutive) a run may be part of a group whose other rows live
    on another process. Scalars (0-d tensors) and ``None`` pass through; tensors and lists are
    permuted.
    """
    n_rows = len(next(v for v in batch.values() if v is not None and not _is_scalar(v)))
    if group_ids is None:
        if n_rows % num_generations:
            raise ValueError(
                f"{n_rows} rows do not split into groups of num_generations = {num_generations}"
            )
        group_ids = torch.arange(n_rows) // num_generations
    group_ids = group_ids.cpu()
    starts = [0] + ((group_ids[1:] != group_ids[:-1]).nonzero().flatten() + 1).tolist()
    bounds = list(zip(starts, starts[1:] + [n_rows]))
    order = torch.cat([torch.arange(*bounds[i]) for i in torch.randperm(len(bounds)).tolist()])

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
    ``l_i`` the current sequence log-prob; ``q`` stays frozen for all ``num_iterations``, ``p``
    is recomputed at every optimizer step.

    Honoured as in GRPO: reward functions (several, with ``reward_weights`` and both
    ``multi_objective_aggregation`` modes; a completion no function scored leaves its group),
    ``num_generations``, ``num_iterations``, ``steps_per_generation`` /
    ``generation_batch_size``, gradient accumulation, multi-process (DDP) runs,
    ``peft_config`` (LoRA), ``beta`` (KL to the reference model, TRL's per-token estimator
    averaged per completion, with ``use_bias_correction_kl``, ``sync_ref_model``),
    ``mask_truncated_completions`` (a masked completion leaves its group), a fixed
    ``entropy_coef`` (mean token entropy per completion, averaged over completions), the MoE
    router loss, generation options, ``rollout_func``, tools / environments (the tool mask
    restricts ``l`` to the policy's tokens), and logging (``reward``, ``rewards/*``,
    ``entropy``, ``kl``, completions tables).

    ``per_device_train_batch_size`` may be smaller than K or any non-multiple of it: a group's
    completions may then sit in several micro-batches and on several processes. ``p`` of every
    group an optimizer step touches is then computed before its first backward (one extra
    no-grad forward of those completions, at the step's parameters, all-reduced across
    processes) and each micro-batch backpropagates ``sum_i (p_i - q_i) l_i``: the update equals
    the one of whole-group micro-batches (``tests/test_trl_tpo.py``,
    ``tests/test_trl_multiprocess.py``).

    Sampler and trainer differ (``tpo_anchor_logps``): with ``num_iterations > 1`` the sampler
    is the rollout-time trainer, whose log-probs (TRL's ``old_per_token_logps``) anchor ``q``
    while ``p`` follows the current parameters. With vLLM (or a ``rollout_func`` returning
    ``logprobs``) the default anchor is still the trainer's own rollout-time log-probs, i.e. the
    sampler's ``q`` corrected by the full sequence ratio trainer / sampler, so numerical or
    top-p/top-k mismatch between the engines does not enter the target; ``"sampler"`` anchors on
    the sampler's reported log-probs instead. GRPO's options without meaning for TPO
    (:data:`~tpo_agents.trl.IGNORED_GRPO_OPTIONS`) raise ``ValueError`` when set;
    ``use_adaptive_entropy`` is not supported.

    Extra logged metrics: ``tpo/target_entropy`` (mean entropy of q), ``tpo/kl_target_old``
    (KL(q || p_old)), ``tpo/kl_target_current`` (KL(q || p), 0 when fitted),
    ``tpo/zero_variance_frac`` (groups whose scores are all equal: no TPO signal).

    Not exercised by this repository's tests: vLLM generation and tools / environments (see
    ``docs/llm_trl.md``).
    """

    _tag_names = ["trl", "target-po"]

    def __init__(
        self, model, reward_funcs=None, args: TargetPOConfig | None = None, *pos, **kwargs
    ):
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
        self._tpo_rollout: dict | None = None  # global u / valid / anchor of the current rollout
        self._tpo_rollout_id = 0
        self._tpo_step_start = (-1, 0)  # (global_step, first micro-batch index) of the step
        self._tpo_terms: tuple | None = None  # ((global_step, rollout id), per-row p - q, ...)
        super().__init__(model, reward_funcs, args, *pos, **kwargs)
        if args.tpo_anchor_logps == "sampler" and not args.use_vllm and self.rollout_func is None:
            raise ValueError(
                "tpo_anchor_logps='sampler' needs a sampler that reports log-probs (use_vllm=True, "
                "or a rollout_func returning logprobs); transformers generation reports none"
            )

    @property
    def _split_groups(self) -> bool:
        """Training micro-batches hold partial groups: p comes from a separate pass."""
        return self.args.per_device_train_batch_size % self.num_generations != 0

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
        first = self.accelerator.process_index * n_local
        device = output["completion_ids"].device
        output["advantages"] = all_u[first : first + n_local].to(device)
        output["tpo_scored"] = all_scored[first : first + n_local].to(device)
        # Global row index: the gathered order, where a group is K consecutive rows.
        output["tpo_row"] = torch.arange(first, first + n_local, device=device)
        anchor = self._anchor_sequence_logps(output, loss_mask)
        if anchor is not None:
            output["tpo_old_logp"] = anchor
        if mode == "train" and self._split_groups:
            self._tpo_rollout = {
                "u": all_u.to(device),
                "valid": all_scored.to(device),
                "old": None if anchor is None else self.accelerator.gather(anchor),
            }
        # The completions table shows TPO's standardized scores, not GRPO's advantages.
        logged = self._logs["advantages"]
        for _ in range(min(len(all_u), len(logged))):
            logged.pop()
        logged.extend(all_u.tolist())
        zero_var = (all_u.view(-1, k) == 0).all(-1).float().mean().item()
        self._metrics[mode]["tpo/zero_variance_frac"].append(zero_var)
        return output

    def _anchor_sequence_logps(self, output, mask) -> torch.Tensor | None:
        """Rollout-time sequence log-probs of the target's anchor, ``None``: the current ones."""
        old = output.get("old_per_token_logps")
        if self.args.tpo_anchor_logps == "trainer":
            # None when TRL skipped them: the parameters do not change before the last use.
            return None if old is None else sequence_logps(old, mask)
        sampled = output.get("sampling_per_token_logps")
        if sampled is None:
            raise ValueError(
                "tpo_anchor_logps='sampler': the sampler reported no log-probs for this batch "
                "(a rollout_func must return 'logprobs' per completion token)"
            )
        nan = torch.isnan(sampled) & mask.bool()
        if nan.any():  # vLLM could not score some tokens: the trainer's own value stands in
            if old is None:
                raise ValueError(
                    "tpo_anchor_logps='sampler': the sampler returned NaN log-probs and the trainer's "
                    "own are not computed; set vllm_importance_sampling_correction=True"
                )
            sampled = torch.where(nan, old, sampled)
        return sequence_logps(sampled, mask)

    def _prepare_inputs(self, generation_batch):
        """GRPO's buffering of generation batches, but shuffling whole prompt groups."""
        if not self.model.training:
            return self._generate_and_score_completions(generation_batch)
        generate_every = self.args.steps_per_generation * self.num_iterations
        if self._step % generate_every == 0 or self._buffered_inputs is None:
            batch = self._generate_and_score_completions(generation_batch)
            self._tpo_rollout_id += 1
            batch = split_pixel_values_by_grid(batch)
            batch = shuffle_groups(
                batch, self.num_generations, batch["tpo_row"] // self.num_generations
            )
            chunks = split_tensor_dict(batch, self.args.steps_per_generation)
            self._buffered_inputs = [unsplit_pixel_values_by_grid(chunk) for chunk in chunks]
        return self._buffered_inputs[self._step % self.args.steps_per_generation]

    # ------------------------------------------------------------------------- loss

    def _forward(self, model, inputs, for_loss: bool):
        """Per-token log-probs; with ``for_loss`` also the entropies and the MoE router loss."""
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        return self._get_per_token_logps_and_entropies(
            model,
            torch.cat([prompt_ids, completion_ids], dim=1),
            torch.cat([prompt_mask, completion_mask], dim=1),
            completion_ids.size(1),
            compute_entropy=for_loss,
            compute_aux_loss=for_loss and self.aux_loss_enabled,
            **{key: inputs.get(key) for key in _MULTIMODAL_KEYS},
        )

    @staticmethod
    def _loss_mask(inputs) -> torch.Tensor:
        mask = inputs["completion_mask"]
        return mask if "tool_mask" not in inputs else mask * inputs["tool_mask"]

    def _compute_loss(self, model, inputs):
        mask = self._loss_mask(inputs)
        per_token_logps, entropies, aux_loss = self._forward(model, inputs, for_loss=True)
        logp = sequence_logps(per_token_logps, mask)
        mode = "train" if self.model.training else "eval"
        k = self.num_generations if mode == "train" else self.num_generations_eval
        out = None
        if mode == "train" and self._split_groups:
            loss = self._split_group_surrogate(logp, inputs["tpo_row"], k)
        else:
            out = tpo_sequence_loss(
                logp,
                inputs["advantages"],
                k,
                old_logp=inputs.get("tpo_old_logp"),
                valid=inputs["tpo_scored"] & (mask.sum(-1) > 0),
                eta=self.args.tpo_eta,
                anchor=self.args.tpo_anchor,
            )
            loss = out.loss
        mask_f = mask.to(per_token_logps.dtype)
        n_tokens = mask_f.sum(-1).clamp(min=1.0)
        per_token_kl = None
        if self.beta != 0.0:
            ref = inputs["ref_per_token_logps"]
            per_token_kl = torch.exp(ref - per_token_logps) - (ref - per_token_logps) - 1
            if self.args.use_bias_correction_kl:
                old = inputs.get("old_per_token_logps")
                old = per_token_logps.detach() if old is None else old
                per_token_kl = per_token_kl * torch.exp(per_token_logps - old)
            loss = loss + self.beta * ((per_token_kl * mask_f).sum(-1) / n_tokens).mean()
        if self.entropy_coef != 0.0:
            # Per completion, like the KL term, so the bonus does not depend on the micro-batch size.
            loss = loss - self.entropy_coef * ((entropies * mask_f).sum(-1) / n_tokens).mean()
        if self.aux_loss_enabled:
            loss = loss + self.router_aux_loss_coef * aux_loss
            self._metrics[mode]["aux_loss"].append(
                self.accelerator.gather_for_metrics(aux_loss).mean().item()
            )
        if mode == "train":
            loss = loss / self.current_gradient_accumulation_steps
        self._log_loss_metrics(mode, out, entropies, mask_f, per_token_kl)
        return loss

    def _split_group_surrogate(self, logp, rows, k) -> torch.Tensor:
        """``sum_i [-q_i log p_i + (p_i - q_i) (l_i - sg(l_i))] / groups per micro-batch``.

        Value: this micro-batch's share of the groups' cross-entropy; gradient:
        ``(p_i - q_i) grad l_i`` with ``p`` of the whole group at this step's parameters.
        """
        key, covered, p_minus_q, row_loss = self._group_terms(k)
        rows = rows.to(covered.device)
        if not covered[rows].all():
            raise RuntimeError(f"TargetPOTrainer: rows {rows.tolist()} have no p for step {key}")
        coef, share = p_minus_q[rows].to(logp), row_loss[rows].to(logp)
        return (share + coef * (logp - logp.detach())).sum() * (k / logp.shape[0])

    def _group_terms(self, k):
        """Per global row: p - q and -q log p of each group this optimizer step touches.

        Computed once per (optimizer step, rollout) before its first backward: parameters do not
        change across the step's micro-batches, so ``p`` is the one of the whole step.
        """
        step = self.state.global_step
        if self._tpo_step_start[0] != step:
            self._tpo_step_start = (step, self._step)
        key = (step, self._tpo_rollout_id)
        if self._tpo_terms is not None and self._tpo_terms[0] == key:
            return self._tpo_terms
        # The buffered micro-batches the rest of this step uses (up to the next rollout).
        spg = self.args.steps_per_generation
        generate_every = spg * self.num_iterations
        end = self._tpo_step_start[1] + self.current_gradient_accumulation_steps
        used = set()
        for s in range(self._step, end):
            if s > self._step and s % generate_every == 0:
                break  # a new rollout replaces the buffer; its groups get their own pass
            used.add(s % spg)
        rollout, chunks = self._tpo_rollout, self._buffered_inputs
        device = rollout["u"].device
        n_rows = rollout["u"].numel()
        touched = torch.zeros(n_rows // k, device=device)
        for j in used:
            touched[chunks[j]["tpo_row"].to(device) // k] = 1
        # A group may have rows on other processes, or in micro-batches of a later step.
        touched = self.accelerator.reduce(touched, reduction="sum") > 0
        values = torch.zeros(2, n_rows, device=device)  # sequence log-prob, filled
        with (
            torch.no_grad(),
            disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs),
        ):
            for chunk in chunks:
                rows = chunk["tpo_row"].to(device)
                if touched[rows // k].any():
                    logps, _, _ = self._forward(self.model, chunk, for_loss=False)
                    values[0, rows] = sequence_logps(logps, self._loss_mask(chunk)).to(values)
                    values[1, rows] = 1.0
        values = self.accelerator.reduce(values, reduction="sum")
        covered = touched.repeat_interleave(k)
        if not (values[1, covered] == 1).all():
            raise RuntimeError("TargetPOTrainer: a touched group's rows were not all scored once")
        idx = covered.nonzero().flatten()
        old = rollout["old"]
        out = tpo_sequence_loss(
            values[0, idx],
            rollout["u"][idx],
            k,
            old_logp=None if old is None else old[idx],
            valid=rollout["valid"][idx],
            eta=self.args.tpo_eta,
            anchor=self.args.tpo_anchor,
        )
        p_minus_q, row_loss = torch.zeros(n_rows, device=device), torch.zeros(n_rows, device=device)
        p_minus_q[idx], row_loss[idx] = out.p_minus_q.to(p_minus_q), out.row_loss.to(row_loss)
        metrics = self._metrics["train"]
        for name in ("target_entropy", "kl_target_old", "kl_target_current"):
            per_group = getattr(out, name)  # already global: every process holds every group
            metrics[f"tpo/{name}"].append(
                per_group.mean().item() if per_group.numel() else float("nan")
            )
        self._tpo_terms = (key, covered, p_minus_q, row_loss)
        return self._tpo_terms

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
        if out is not None:  # with split groups: logged once per step by _group_terms
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
