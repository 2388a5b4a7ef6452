"""TRL bridge: TPO's loss on TRL's tensors and ``TPOTrainer`` runs on the tiny offline model."""

import importlib.util
import os
import re
import warnings
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tpo_agents import objectives as obj  # noqa: E402
from tpo_agents.trl import TPOConfig, TPOTrainer, standardize_group_rewards, tpo_group_loss  # noqa: E402
from tpo_agents.trl.trainer import shuffle_groups  # noqa: E402

K = 4


def _token_batch(n_groups=3, t=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    per_token = -torch.rand(n_groups * K, t, generator=g, dtype=torch.float64) * 2
    mask = torch.ones(n_groups * K, t)
    lengths = torch.randint(1, t + 1, (n_groups * K,), generator=g)
    mask = (torch.arange(t)[None, :] < lengths[:, None]).to(torch.float64)
    return per_token, mask


def _grad_wrt_sequence_logps(per_token, mask, **kwargs):
    """dL/dl_i read off the per-token gradient (every unmasked token of row i carries it)."""
    x = per_token.clone().requires_grad_(True)
    out = tpo_group_loss(x, mask, num_generations=K, **kwargs)
    (g,) = torch.autograd.grad(out.loss, x)
    first = g[:, 0]
    assert torch.allclose(
        g, first[:, None] * mask
    )  # same value on every unmasked token, 0 on padding
    return first, out


# ------------------------------------------------------------------------ the loss


def test_gradient_wrt_sequence_logps_is_p_minus_q_over_groups():
    per_token, mask = _token_batch()
    rewards = torch.tensor([[1.0, 0, 0, 0.5], [0, 1, 1, 0], [0.2, 0.9, 0.4, 0.1]]).reshape(-1, 1)
    u, _ = standardize_group_rewards(rewards, K)
    old = (
        per_token
        - 0.1 * torch.arange(per_token.numel(), dtype=torch.float64).reshape(per_token.shape).cos()
    )
    grad, out = _grad_wrt_sequence_logps(per_token, mask, u=u, old_per_token_logps=old, eta=0.5)
    seq = (per_token * mask).sum(-1).reshape(-1, K)
    l_old = (old * mask).sum(-1).reshape(-1, K)
    q = obj.tpo_target(l_old, obj.standardize_scores(rewards.reshape(-1, K)), eta=0.5)
    p = torch.softmax(seq, -1)
    assert torch.allclose(out.q.double(), q, atol=1e-6)
    assert torch.allclose(grad.reshape(-1, K), (p - q) / 3, atol=1e-6)


def test_first_iteration_target_uses_current_logps_and_zero_variance_group_has_zero_gradient():
    per_token, mask = _token_batch()
    rewards = torch.tensor([[1.0, 1, 1, 1], [0, 1, 0, 0], [0.3, 0.3, 0.3, 0.3]]).reshape(-1, 1)
    u, _ = standardize_group_rewards(rewards, K)
    grad, out = _grad_wrt_sequence_logps(per_token, mask, u=u)  # old = detached current
    grad = grad.reshape(-1, K)
    assert torch.equal(out.zero_variance, torch.tensor([True, False, True]))
    assert torch.equal(grad[0], torch.zeros(K, dtype=grad.dtype))  # exactly 0: Adam sees nothing
    assert torch.equal(grad[2], torch.zeros(K, dtype=grad.dtype))
    assert out.active.tolist() == [False, True, False]
    assert grad[1, 1] < 0 < grad[1, 0]  # the rewarded completion gains log-prob (loss is minimised)
    assert out.kl_target_old[0].item() == pytest.approx(0.0, abs=1e-7)
    # A later iteration (old log-probs given, policy moved): the zero-variance group pulls back
    # towards p_old, gradient (p - p_old) / G.
    old = (
        per_token
        + 0.2 * mask * torch.linspace(-1, 1, per_token.shape[0], dtype=per_token.dtype)[:, None]
    )
    grad, out = _grad_wrt_sequence_logps(per_token, mask, u=u, old_per_token_logps=old)
    seq, seq_old = ((x * mask).sum(-1).reshape(-1, K) for x in (per_token, old))
    expected = (torch.softmax(seq[0], -1) - torch.softmax(seq_old[0], -1)) / 3
    assert out.active.all() and torch.allclose(grad.reshape(-1, K)[0], expected, atol=1e-6)
    assert expected.abs().max() > 1e-3


def test_all_zero_variance_batch_gives_an_exactly_zero_gradient():
    per_token, mask = _token_batch()
    u, _ = standardize_group_rewards(torch.zeros(3 * K, 1), K)
    grad, out = _grad_wrt_sequence_logps(per_token, mask, u=u)
    assert not out.active.any() and torch.equal(grad, torch.zeros_like(grad))


def test_unscored_and_fully_masked_completions_leave_their_group():
    per_token, mask = _token_batch(n_groups=2)
    mask[1] = 0  # group 0, row 1: truncated completion masked by TRL
    rewards = torch.tensor([1.0, 5.0, 0.0, 0.5] + [float("nan")] * 4).reshape(-1, 1)
    u, scored = standardize_group_rewards(rewards, K, valid=mask.sum(-1) > 0)
    assert scored.tolist() == [True, False, True, True] + [False] * 4
    grad, out = _grad_wrt_sequence_logps(per_token, mask, u=u, valid=scored)
    assert out.kept.tolist() == [True, False]
    assert torch.equal(grad[4:], torch.zeros(4, dtype=grad.dtype))
    assert grad[1] == 0 and out.q[0, 1] == 0
    # The kept group's loss is its own cross-entropy over the 3 valid rows, divided by 2 groups.
    valid = torch.tensor([[True, False, True, True]])
    seq = (per_token * mask).sum(-1)[:4].reshape(1, K)
    q = obj.tpo_target(
        seq, obj.standardize_scores(rewards[:4].reshape(1, K), mask=valid), mask=valid
    )
    assert out.loss.item() == pytest.approx(obj.tpo_loss(seq, q, mask=valid).item() / 2, rel=1e-6)


def test_reward_weights_and_aggregation_modes():
    r = torch.tensor([[1.0, 0.0], [0.0, 2.0], [0.0, 0.0], [1.0, float("nan")]])
    u_sum, _ = standardize_group_rewards(r, K, reward_weights=torch.tensor([1.0, 0.5]))
    expected = obj.standardize_scores(torch.tensor([[1.0, 1.0, 0.0, 1.0]]))[0]
    assert torch.allclose(u_sum, expected)
    u_norm, _ = standardize_group_rewards(r, K, aggregation="normalize_then_sum")
    assert u_norm.pow(2).mean().item() == pytest.approx(1.0, abs=1e-5)
    with pytest.raises(ValueError, match="aggregation"):
        standardize_group_rewards(r, K, aggregation="mean")
    with pytest.raises(ValueError, match="multiple of num_generations"):
        standardize_group_rewards(r[:3], K)


def test_shuffle_groups_keeps_groups_whole():
    ids = torch.arange(12).repeat_interleave(K)
    batch = {
        "ids": ids,
        "names": [f"p{i}" for i in ids.tolist()],
        "n": torch.tensor(3),
        "none": None,
    }
    torch.manual_seed(0)
    out = shuffle_groups(batch, K)
    grouped = out["ids"].reshape(-1, K)
    assert (grouped == grouped[:, :1]).all() and not torch.equal(out["ids"], ids)
    assert (
        out["names"] == [f"p{i}" for i in out["ids"].tolist()]
        and out["n"] == 3
        and out["none"] is None
    )


# ---------------------------------------------------------------------- the trainer


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    from zoo.paper.llm.tiny import build_tiny_causal_lm

    path = tmp_path_factory.mktemp("tiny")
    build_tiny_causal_lm(path, seed=0)
    return str(path)


def _dataset(n=8):
    from datasets import Dataset

    return Dataset.from_dict(
        {"prompt": [[{"role": "user", "content": f"{i}+1="}] for i in range(n)]}
    )


def _text(completion):
    return completion[-1]["content"] if isinstance(completion, list) else completion


def has_digit(completions, **kwargs):
    return [float(any(ch.isdigit() for ch in _text(c))) for c in completions]


def is_short(completions, **kwargs):
    return [1.0 if len(_text(c)) < 4 else 0.0 for c in completions]


def _config(tmp_path, **overrides):
    kwargs = dict(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=8,
        num_generations=K,
        max_completion_length=6,
        max_steps=2,
        learning_rate=1e-2,
        logging_steps=1,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
        bf16=False,  # TRL's defaults (bf16 autocast, gradient checkpointing) are slow on CPU
        gradient_checkpointing=False,
    )
    kwargs.update(overrides)
    return TPOConfig(**kwargs)


def test_config_and_trainer_reject_bad_settings(tmp_path, tiny_path):
    from trl import GRPOConfig

    with pytest.raises(ValueError, match="tpo_eta"):
        _config(tmp_path, tpo_eta=0.0)
    with pytest.raises(ValueError, match="use_adaptive_entropy"):
        _config(tmp_path, use_adaptive_entropy=True)
    with pytest.raises(ValueError, match="tpo_anchor_logps must be one of"):
        _config(tmp_path, tpo_anchor_logps="vllm")
    with pytest.raises(ValueError, match="tpo_anchor=False drops the anchor"):
        _config(tmp_path, tpo_anchor_logps="sampler", tpo_anchor=False)
    with pytest.raises(ValueError, match="eval(uation)? (group|batch) size"):
        _config(tmp_path, do_eval=True, eval_strategy="steps", per_device_eval_batch_size=6)
    # Micro-batches need not hold whole groups any more.
    assert _config(tmp_path, per_device_train_batch_size=6, gradient_accumulation_steps=2)
    with pytest.raises(ValueError, match="needs a sampler that reports log-probs"):
        TPOTrainer(
            model=tiny_path,
            reward_funcs=has_digit,
            args=_config(tmp_path, tpo_anchor_logps="sampler"),
            train_dataset=_dataset(),
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        grpo_args = GRPOConfig(
            output_dir=str(tmp_path / "g"),
            per_device_train_batch_size=8,
            num_generations=K,
            report_to="none",
            use_cpu=True,
        )
    with pytest.raises(ValueError, match="TargetPOConfig"):
        TPOTrainer(
            model=tiny_path, reward_funcs=has_digit, args=grpo_args, train_dataset=_dataset()
        )


# A non-default value for every GRPO option TPO does not use.
NON_DEFAULT = {
    "epsilon": 0.3,
    "epsilon_high": 0.28,
    "delta": 1.5,
    "loss_type": "grpo",
    "importance_sampling_level": "sequence",
    "scale_rewards": "batch",
    "sapo_temperature_neg": 2.0,
    "sapo_temperature_pos": 2.0,
    "vespo_k_pos": 1.0,
    "vespo_lambda_pos": 1.0,
    "vespo_k_neg": 1.0,
    "vespo_lambda_neg": 1.0,
    "off_policy_mask_threshold": 0.5,
    "top_entropy_quantile": 0.2,
    "vllm_importance_sampling_mode": "token_truncate",
    "vllm_importance_sampling_clip_min": 0.5,
    "vllm_importance_sampling_clip_max": 2.0,
    "vllm_importance_sampling_cap": 2.0,
}


def test_grpo_only_options_raise_naming_option_and_value(tmp_path):
    from tpo_agents.trl import IGNORED_GRPO_OPTIONS

    assert set(NON_DEFAULT) == set(IGNORED_GRPO_OPTIONS)
    for name, value in NON_DEFAULT.items():
        with pytest.raises(ValueError, match=re.escape(f"{name}={value!r}")):
            _config(tmp_path, **{name: value})
    with pytest.raises(ValueError, match="epsilon=0.3, loss_type='grpo'"):
        _config(tmp_path, epsilon=0.3, loss_type="grpo")
    # TRL's defaults (and scale_rewards=True, TRL's alias of "group") are accepted.
    _config(tmp_path, epsilon=0.2, loss_type="dapo", scale_rewards=True, top_entropy_quantile=1.0)


def test_trainer_runs_with_two_weighted_reward_functions(tmp_path, tiny_path):
    from transformers import AutoTokenizer

    args = _config(tmp_path, reward_weights=[1.0, 0.5])
    trainer = TPOTrainer(
        model=tiny_path,
        reward_funcs=[has_digit, is_short],
        args=args,
        train_dataset=_dataset(),
        processing_class=AutoTokenizer.from_pretrained(tiny_path),
    )
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 2
    for h in logs:
        assert torch.isfinite(torch.tensor(h["loss"])) and h["loss"] > 0  # cross-entropy >= 0
        for key in (
            "reward",
            "rewards/has_digit/mean",
            "rewards/is_short/mean",
            "tpo/target_entropy",
            "tpo/kl_target_old",
            "tpo/zero_variance_frac",
            "entropy",
        ):
            assert key in h, key
    changed = [
        n for n, p in trainer.model.named_parameters() if not torch.equal(p.detach(), before[n])
    ]
    assert len(changed) > len(before) // 2


def test_trainer_with_lora_trains_only_the_adapter(tmp_path, tiny_path):
    from peft import LoraConfig

    args = _config(tmp_path, learning_rate=5e-2)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    trainer = TPOTrainer(
        model=tiny_path,
        reward_funcs=has_digit,
        args=args,
        train_dataset=_dataset(),
        peft_config=lora,
    )
    params = dict(trainer.model.named_parameters())
    before = {n: p.detach().clone() for n, p in params.items()}
    trainer.train()
    lora_names = [n for n in params if "lora_" in n]
    assert lora_names and all(params[n].requires_grad for n in lora_names)
    assert any(not torch.equal(params[n].detach(), before[n]) for n in lora_names if "lora_B" in n)
    assert all(torch.equal(p.detach(), before[n]) for n, p in params.items() if "lora_" not in n)
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert losses and all(torch.isfinite(torch.tensor(losses)))


class _RecordingTPOTrainer(TPOTrainer):
    """Records, per loss call, the prompt of every row and the target of every group."""

    def _compute_loss(self, model, inputs):
        self.seen.append(
            {
                "prompt_ids": inputs["prompt_ids"].clone(),
                "completion_ids": inputs["completion_ids"].clone(),
                "has_old": inputs.get("old_per_token_logps") is not None,
                "u": inputs["advantages"].clone(),
                "old": (inputs["old_per_token_logps"] * inputs["completion_mask"]).sum(-1),
            }
        )
        return super()._compute_loss(model, inputs)


def test_gradient_accumulation_and_iterations_keep_groups_whole_and_targets_frozen(
    tmp_path, tiny_path
):
    # 2 micro-batches of 1 group per optimizer step, a generation feeds 4 micro-batches, reused twice:
    # the policy changes between rollout and loss, so TRL supplies old_per_token_logps.
    args = _config(
        tmp_path,
        per_device_train_batch_size=K,
        gradient_accumulation_steps=2,
        steps_per_generation=4,
        num_iterations=2,
        max_steps=4,
    )
    trainer = _RecordingTPOTrainer(
        model=tiny_path, reward_funcs=has_digit, args=args, train_dataset=_dataset()
    )
    trainer.seen = []
    trainer.train()
    assert len(trainer.seen) == 8  # 4 optimizer steps x 2 micro-batches
    for rec in trainer.seen:
        assert rec["has_old"]
        prompts = rec["prompt_ids"].reshape(-1, K, rec["prompt_ids"].shape[-1])
        assert (prompts == prompts[:, :1]).all()  # every group is one prompt's K completions
    # Iteration 2 revisits the same 4 groups (in a new order) with the same scores u.
    # Iteration 2 revisits the same 4 groups (in a new order) with the same scores u and the same
    # rollout-time log-probs, so the same target q.
    first = {tuple(r["completion_ids"].flatten().tolist()): r for r in trainer.seen[:4]}
    second = {tuple(r["completion_ids"].flatten().tolist()): r for r in trainer.seen[4:]}
    assert first.keys() == second.keys()
    for key, rec in first.items():
        assert torch.equal(rec["u"], second[key]["u"]) and torch.equal(
            rec["old"], second[key]["old"]
        )


# ------------------------------------------------- micro-batches smaller than a group

RUN_SCRIPT = Path(__file__).parent / "data" / "trl_tpo_run.py"


@pytest.fixture(scope="module")
def fixed_runs():
    """tests/data/trl_tpo_run.py: SGD training on fixed completions (TRL's rollout_func)."""
    spec = importlib.util.spec_from_file_location("trl_tpo_run", RUN_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _trained_params(fixed_runs, tiny_path, out, per_device, accum, spg, **kwargs):
    out.mkdir()
    trainer = fixed_runs.train(
        tiny_path, out, per_device, accum, steps_per_generation=spg, **kwargs
    )
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return torch.load(out / "params_rank0.pt"), losses


# case: ((micro-batch, accumulation) split, the same with whole groups, common options);
# a rollout holds 2 prompts x K = 8 completions unless steps_per_generation says otherwise.
SPLIT_CASES = {
    "2 rows x 4, two iterations, KL and entropy terms": (
        (2, 4),
        (8, 1),
        dict(steps=2, iterations=2, beta=0.05, entropy_coef=0.01),
    ),
    "1 row x 8": ((1, 8), (8, 1), dict()),
    "sampler log-probs as anchor": ((2, 4), (8, 1), dict(steps=2, tpo_anchor_logps="sampler")),
    # one optimizer step uses half of the rollout (steps_per_generation > accumulation)
    "2 rows x 2, 4 micro-batches per rollout": ((2, 2), (4, 1), dict(steps=2, spg=(4, 2))),
    # two rollouts inside one optimizer step (accumulation > steps_per_generation)
    "2 rows x 4, 2 micro-batches per rollout": ((2, 4), (4, 2), dict(spg=(2, 1))),
}


@pytest.mark.parametrize("case", list(SPLIT_CASES))
def test_split_group_step_equals_whole_group_step(case, tmp_path, tiny_path, fixed_runs):
    """Micro-batches smaller than K: the parameters after each optimizer step (plain SGD, so
    they are the gradient itself) equal those of whole-group micro-batches on the same data."""
    from transformers import AutoModelForCausalLM

    split_layout, whole_layout, options = SPLIT_CASES[case]
    options = dict(options)
    spg = options.pop("spg", (None, None))
    split, split_losses = _trained_params(
        fixed_runs, tiny_path, tmp_path / "split", *split_layout, spg[0], **options
    )
    whole, whole_losses = _trained_params(
        fixed_runs, tiny_path, tmp_path / "whole", *whole_layout, spg[1], **options
    )
    start = dict(AutoModelForCausalLM.from_pretrained(tiny_path).named_parameters())
    diff = max((split[n] - whole[n]).abs().max().item() for n in whole)
    moved = max((whole[n] - start[n].detach()).abs().max().item() for n in whole)
    print(f"{case}: max |split - whole| = {diff:.2e}, max |update| = {moved:.2e}")
    assert diff < 1e-6 and moved > 1e-2, (diff, moved)
    assert split_losses == pytest.approx(whole_losses, rel=1e-5)  # the same cross-entropy


def test_groups_straddling_optimizer_steps_get_p_from_all_their_rows(
    tmp_path, tiny_path, fixed_runs
):
    """3 rows per optimizer step, groups of 4: a step sees part of a group (or of two); p of
    each touched group still comes from all 4 of its rows, at that step's parameters."""

    class Recording(TPOTrainer):
        seen = []

        def _group_terms(self, k):
            terms = super()._group_terms(k)
            self.seen.append(terms)
            return terms

    trainer = fixed_runs.train(
        tiny_path, tmp_path, 3, 1, steps=4, steps_per_generation=4, trainer_cls=Recording
    )
    assert trainer.state.global_step == 4
    # One rollout of 3 groups (shuffled as blocks), read 3 rows per step: 1, 2, 2, 1 groups.
    groups = [covered.reshape(-1, K) for _, covered, _, _ in Recording.seen]
    assert all(g.any(-1).equal(g.all(-1)) for g in groups)  # whole groups only
    assert [int(g.all(-1).sum()) for g in groups] == [1, 2, 2, 1]
    for _, covered, p_minus_q, _ in Recording.seen:  # p and q are distributions per group
        assert p_minus_q.reshape(-1, K).sum(-1).abs().max() < 1e-6
        assert p_minus_q[covered].abs().max() > 1e-3


class _AnchorRecordingTrainer(TPOTrainer):
    def _compute_loss(self, model, inputs):
        mask = inputs["completion_mask"].double()
        self.seen.append(
            {
                "anchor": inputs.get("tpo_old_logp"),
                "sampler": (inputs["sampling_per_token_logps"].double() * mask).sum(-1),
                "trainer": None
                if inputs.get("old_per_token_logps") is None
                else (inputs["old_per_token_logps"].double() * mask).sum(-1),
            }
        )
        return super()._compute_loss(model, inputs)


@pytest.mark.parametrize("anchor_logps", ["trainer", "sampler"])
def test_anchor_log_probs_come_from_the_chosen_policy(
    anchor_logps, tmp_path, tiny_path, fixed_runs
):
    """The rollout_func reports sampler log-probs that differ from the trainer's own:
    the target's p_old are the trainer's (default) or the sampler's, as asked."""
    _AnchorRecordingTrainer.seen = []
    options = dict(steps=2, iterations=2, tpo_anchor_logps=anchor_logps)
    fixed_runs.train(tiny_path, tmp_path, 8, 1, trainer_cls=_AnchorRecordingTrainer, **options)
    seen = _AnchorRecordingTrainer.seen
    assert len(seen) == 2
    for rec in seen:
        expected = rec[anchor_logps]  # num_iterations=2: TRL computes the trainer's old ones
        assert torch.allclose(rec["anchor"].double(), expected, atol=1e-5)
        assert not torch.allclose(rec["sampler"], rec["trainer"], atol=1e-2)


def test_names_are_unambiguous_and_aliases_are_the_same_classes():
    """Ours is Target PO; TRL's own experimental TPOTrainer is Triple Preference Optimization."""
    from tpo_agents import trl as ours

    assert ours.TPOTrainer is ours.TargetPOTrainer and ours.TPOConfig is ours.TargetPOConfig
    triple = pytest.importorskip("trl.experimental.tpo")
    assert triple.TPOTrainer is not ours.TargetPOTrainer
    assert not issubclass(ours.TargetPOTrainer, triple.TPOTrainer)
