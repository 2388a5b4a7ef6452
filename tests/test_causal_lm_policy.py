"""CausalLMPolicy: sampling and log-probs of a Hugging Face causal LM, training it with
TPO / GRPO / PG through the SB3 API, LoRA, saving, and bad input. Offline, tiny model."""

from __future__ import annotations

import os
import shutil
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from gymnasium import spaces  # noqa: E402

import tpo_gym  # noqa: E402, F401  (registers the ids)
from tpo_agents import DG, GRPO, PG, TPO, CriticFreePPO, GroupPG  # noqa: E402
from tpo_agents.llm.batch import rowwise_with_recompute  # noqa: E402
from tpo_agents.llm.completions import markdown_table  # noqa: E402
from tpo_agents.llm.logprobs import completion_log_probs, completion_mask_after_eos  # noqa: E402
from tpo_agents.llm.vec_env import PromptVecEnv, make_prompt_vec_env  # noqa: E402
from tpo_agents.policies.causal_lm import CausalLMPolicy  # noqa: E402
from zoo.paper.llm.tiny import build_tiny_causal_lm  # noqa: E402

TEXT = spaces.Text(max_length=64)


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny_path: tests/conftest.py


def make_policy(model=None, tokenizer=None, **kwargs) -> CausalLMPolicy:
    if model is None:
        model, tokenizer = build_tiny_causal_lm()
    kwargs.setdefault("use_chat_template", False)
    return CausalLMPolicy(TEXT, TEXT, lambda _: 1e-3, model=model, tokenizer=tokenizer, **kwargs)


def arithmetic_env(**kwargs):
    return gym.make("TinyArithmetic-v0", **kwargs)


def coin_env():
    """Rewards about half of a random model's completions, so every batch has signal."""
    return gym.make(
        "PromptList-v0", pairs=[(p, lambda a: a[:1] < "P") for p in ("3+4=", "1+2=", "9-5=")]
    )


# --------------------------------------------------------------- log-probs


def test_log_probs_match_generate_scores():
    """The policy's log-probs of its samples equal log_softmax of generate's processed
    scores at the chosen tokens (temperature 0.7), over prompts of different lengths."""
    model, tok = build_tiny_causal_lm()
    # Make EOS likely so some completions stop early (their padding must not count).
    head = torch.nn.Linear(model.config.hidden_size, model.config.vocab_size, bias=True)
    head.weight.data.copy_(model.lm_head.weight.data)
    head.bias.data.zero_()
    head.bias.data[tok.eos_token_id] = 3.0
    model.lm_head = head
    # Sampling settings of the model's own generation_config must not leak in.
    model.generation_config.repetition_penalty = 1.3
    model.generation_config.top_k = 5
    policy = make_policy(model, tok, temperature=0.7, max_new_tokens=6)
    prompts = ["3+4=", "12+34=", "hello world"]
    torch.manual_seed(0)
    sampled = policy.sample_completions(prompts, 3)
    assert len(sampled.texts) == 9 and sampled.completion_ids.shape[0] == 9
    lengths = sampled.completion_mask.sum(-1)
    assert (lengths < 6).any() and (lengths == 6).any()  # some rows stopped at EOS

    ids, mask = policy.encode_prompts(prompts)
    torch.manual_seed(0)
    with policy._own_generation_config():
        out = model.generate(
            input_ids=ids,
            attention_mask=mask.long(),
            do_sample=True,
            temperature=0.7,
            top_p=1.0,
            top_k=0,
            num_return_sequences=3,
            max_new_tokens=6,
            output_scores=True,
            return_dict_in_generate=True,
        )
    generated = out.sequences[:, ids.shape[1] :]
    m = sampled.completion_mask
    assert torch.equal(generated.masked_fill(~m, tok.pad_token_id), sampled.completion_ids)
    scores = torch.stack(out.scores, 1)
    assert not torch.isinf(scores).any()  # no top-k truncation from the model's config
    expected = (
        scores.log_softmax(-1).gather(-1, generated.unsqueeze(-1)).squeeze(-1).masked_fill(~m, 0.0)
    )
    with torch.no_grad():
        ours = policy.completion_log_probs(
            sampled.prompt_ids, sampled.prompt_mask, sampled.completion_ids, sampled.completion_mask
        )
    assert torch.allclose(ours, expected, atol=1e-4)
    # The raw (temperature-1) log-probs differ: the temperature is really applied.
    with torch.no_grad():
        raw = completion_log_probs(
            model,
            sampled.prompt_ids,
            sampled.prompt_mask,
            sampled.completion_ids,
            sampled.completion_mask,
        )
    assert not torch.allclose(raw, expected, atol=1e-2)
    # Decoded texts drop EOS and padding.
    assert all(tok.eos_token not in t and tok.pad_token not in t for t in sampled.texts)


def test_padding_and_batch_composition_do_not_change_log_probs():
    model, tok = build_tiny_causal_lm()
    policy = make_policy(model, tok, temperature=0.9)
    eos = tok.eos_token_id

    def encode(prompt: str, completion: str, eos_end: bool):
        p = torch.tensor([tok(prompt, add_special_tokens=False)["input_ids"]])
        c = tok(completion, add_special_tokens=False)["input_ids"] + ([eos] if eos_end else [])
        return p, torch.tensor([c])

    pa, ca = encode("3+4=", "7", True)
    pb, cb = encode("a much longer prompt: 12+34=", "46 is the answer", False)
    ones = lambda x: torch.ones_like(x, dtype=torch.bool)  # noqa: E731
    with torch.no_grad():
        alone = completion_log_probs(model, pa, ones(pa), ca, ones(ca), temperature=0.9).sum()
        # Batched with a longer prompt (left padding) and a longer completion (right padding).
        pad = tok.pad_token_id
        P, T = pb.shape[1], cb.shape[1]
        prompt_ids = torch.cat([torch.nn.functional.pad(pa, (P - pa.shape[1], 0), value=pad), pb])
        prompt_mask = torch.cat([torch.arange(P).unsqueeze(0) >= P - pa.shape[1], ones(pb)])
        completion_ids = torch.cat(
            [torch.nn.functional.pad(ca, (0, T - ca.shape[1]), value=pad), cb]
        )
        completion_mask = torch.cat([torch.arange(T).unsqueeze(0) < ca.shape[1], ones(cb)])
        batched = completion_log_probs(
            model, prompt_ids, prompt_mask, completion_ids, completion_mask, 0.9
        )
        b_alone = completion_log_probs(model, pb, ones(pb), cb, ones(cb), temperature=0.9).sum()
    assert batched.shape == (2, T)
    assert batched[0, ca.shape[1] :].abs().max() == 0  # padding counts 0
    assert torch.allclose(batched[0].sum(), alone, atol=1e-4)
    assert torch.allclose(batched[1].sum(), b_alone, atol=1e-4)
    # The policy's micro-batched computation agrees too.
    policy.micro_batch_size = 1
    with torch.no_grad():
        micro = policy.completion_log_probs(
            prompt_ids, prompt_mask, completion_ids, completion_mask
        )
    assert torch.allclose(micro, batched, atol=1e-5)


def test_completion_mask_stops_after_first_eos():
    ids = torch.tensor([[5, 2, 0, 0], [5, 6, 7, 8], [2, 2, 9, 2]])
    mask = completion_mask_after_eos(ids, [2])
    assert mask.tolist() == [[True, True, False, False], [True] * 4, [True, False, False, False]]


def test_micro_batched_gradients_equal_full_batch():
    model, _ = build_tiny_causal_lm()
    params = [p for p in model.parameters()]
    weights = torch.linspace(-1, 1, 6)
    x = torch.randint(4, 90, (6, 5))

    def rows(start, stop):
        out = model(input_ids=x[start:stop], use_cache=False).logits[:, -1].log_softmax(-1)
        return out[:, 7]

    full = (rowwise_with_recompute(rows, 6, None) * weights).sum()
    full.backward()
    grads = [p.grad.clone() for p in params]
    model.zero_grad()
    chunked = (rowwise_with_recompute(rows, 6, 4) * weights).sum()
    chunked.backward()
    assert torch.allclose(full, chunked, atol=1e-5)
    for g, p in zip(grads, params):
        assert torch.allclose(g, p.grad, atol=1e-5)


# ----------------------------------------------------------- prompts, predict


def test_chat_template_and_system_prompt(tiny_path):
    env = arithmetic_env(system_prompt="Answer with one digit.")
    model = TPO(
        "CausalLMPolicy",
        env,
        batch_size=2,
        n_candidates=2,
        n_epochs=1,
        policy_kwargs={"model": tiny_path, "max_new_tokens": 2},
    )
    policy = model.policy
    assert policy.chat  # the tiny tokenizer has a chat template: "auto" uses it
    assert policy.format_prompts(["3+4="]) == ["user: 3+4=\nassistant: "]
    model.learn(4)  # the agent adopts the env's system prompt
    assert policy.system_prompt == "Answer with one digit."
    assert policy.format_prompts(["3+4="]) == [
        "system: Answer with one digit.\nuser: 3+4=\nassistant: "
    ]
    plain = make_policy(system_prompt="Be brief.")
    assert plain.format_prompts(["3+4="]) == ["Be brief.\n3+4="]


def test_predict_greedy_is_deterministic_and_batched(tiny_path):
    policy = make_policy(*build_tiny_causal_lm(), max_new_tokens=3)
    a, state = policy.predict("3+4=", deterministic=True)
    assert isinstance(a, str) and state is None
    assert policy.predict("3+4=", deterministic=True)[0] == a
    batch, _ = policy.predict(np.array(["3+4=", "1+1="]), deterministic=True)
    assert isinstance(batch, list) and batch[0] == a
    torch.manual_seed(0)
    s1 = policy.predict(["3+4="] * 4)[0]
    torch.manual_seed(0)
    assert policy.predict(["3+4="] * 4)[0] == s1


def test_prompt_vec_env_steps_scores_and_records_episodes():
    vec = make_prompt_vec_env(arithmetic_env(), 3, seed=0)
    assert isinstance(vec, PromptVecEnv) and vec.num_envs == 3
    obs = vec.reset()
    assert isinstance(obs, list) and all(isinstance(o, str) and o.endswith("=") for o in obs)
    answers = [info["answer"] for info in vec.reset_infos]
    scores = vec.score_candidates([[answers[i], "x"] for i in range(3)])
    assert (
        scores.shape == (3, 2)
        and scores[:, 0].tolist() == [1.0] * 3
        and scores[:, 1].tolist() == [0.0] * 3
    )
    new_obs, rewards, dones, infos = vec.step([answers[0], "x", answers[2]])
    assert rewards.tolist() == [1.0, 0.0, 1.0] and dones.all()
    assert infos[0]["terminal_observation"] == obs[0] and infos[1]["episode"]["r"] == 0.0
    assert len(new_obs) == 3
    with pytest.raises(ValueError, match="3 completion strings"):
        vec.step(["only one"])


def test_sb3_evaluate_policy_on_a_prompt_vec_env(tiny_path):
    from stable_baselines3.common.evaluation import evaluate_policy

    model = TPO("CausalLMPolicy", coin_env(), batch_size=2, policy_kwargs={"model": tiny_path})

    def env_fn(ok: bool):
        return lambda: gym.make("PromptList-v0", pairs=[("3+4=", lambda a: ok)])

    env = PromptVecEnv([env_fn(True), env_fn(False)])  # accepts every answer / none
    mean, std = evaluate_policy(model, env, n_eval_episodes=4, deterministic=True, warn=False)
    assert mean == pytest.approx(0.5) and std == pytest.approx(0.5)


# ------------------------------------------------------------------ training


@pytest.mark.parametrize("algo", [TPO, GRPO, PG, GroupPG, DG, CriticFreePPO])
def test_every_agent_trains_one_iteration(tiny_path, algo):
    model = algo(
        "CausalLMPolicy",
        coin_env(),
        batch_size=3,
        n_candidates=2,
        seed=0,
        policy_kwargs={"model": tiny_path, "max_new_tokens": 2},
    )
    before = [p.detach().clone() for p in model.policy.trainable_parameters()]
    model.learn(1)
    per_prompt = 1 if issubclass(algo, PG) else 2  # single-sample methods: one per prompt
    assert model.num_timesteps == 3 * per_prompt
    assert len(model.ep_info_buffer) == 3 * per_prompt
    assert model._batch.scores.shape == (3, per_prompt)
    stats = model.last_train_stats
    assert np.isfinite(stats["loss"]) and stats["grad_norm"] > 0
    after = model.policy.trainable_parameters()
    assert any(not torch.equal(b, a) for b, a in zip(before, after))


def test_micro_batch_size_gives_the_same_update(tiny_path):
    """Training on one batch in micro-batches of 2 sequences (gradient accumulation)
    moves the weights exactly as the full batch does."""
    from stable_baselines3.common.logger import configure

    env = coin_env()
    # SGD: the update is linear in the gradient (Adam's first step is sign-like and would
    # amplify rounding differences of near-zero gradients).
    kwargs = dict(batch_size=3, n_candidates=2, n_epochs=2, seed=0, optimizer_class=torch.optim.SGD)
    full = TPO(
        "CausalLMPolicy", env, policy_kwargs={"model": tiny_path, "max_new_tokens": 2}, **kwargs
    )
    full.learn(1)
    micro = TPO(
        "CausalLMPolicy",
        env,
        policy_kwargs={"model": tiny_path, "max_new_tokens": 2, "micro_batch_size": 2},
        **kwargs,
    )
    micro.set_logger(configure(None, []))
    micro._batch = full._batch
    micro.train()
    assert full.last_train_stats["grad_norm"] > 0
    assert micro.last_train_stats["loss"] == pytest.approx(full.last_train_stats["loss"], abs=1e-6)
    for a, b in zip(full.policy.trainable_parameters(), micro.policy.trainable_parameters()):
        assert torch.allclose(a, b, atol=1e-6)


def _sampled_reward(model, prompts, source, n=16) -> float:
    torch.manual_seed(123)
    c = model.policy.sample_completions(prompts, n)
    return float(
        np.mean(
            [source.score(i, t) for i in range(len(prompts)) for t in c.texts[i * n : (i + 1) * n]]
        )
    )


@pytest.mark.slow
@pytest.mark.parametrize("algo", [TPO, GRPO])
def test_learns_tiny_arithmetic_from_scratch(tiny_path, algo):
    """From a random tiny Llama, 20 iterations of 16 prompts x 8 completions (one token)
    on ten one-digit sums raise the mean sampled reward from ~1% to ~30%."""
    env = arithmetic_env(size=10, operations="+")
    source, prompts = env.unwrapped.source, env.unwrapped.prompts
    model = algo(
        "CausalLMPolicy",
        env,
        batch_size=16,
        n_candidates=8,
        seed=0,
        learning_rate=3e-3,
        policy_kwargs={"model": tiny_path, "max_new_tokens": 1},
    )
    before = _sampled_reward(model, prompts, source)
    start = time.time()
    model.learn(20 * 16 * 8)
    after = _sampled_reward(model, prompts, source)
    print(
        f"{algo.__name__}: mean reward {before:.3f} -> {after:.3f} in {time.time() - start:.1f} s"
    )
    assert before < 0.05
    assert after >= before + 0.15


# -------------------------------------------------------------------- saving


def _generations(model, seed=7):
    prompts = ["3+4=", "1+2=", "9-5="]
    torch.manual_seed(seed)
    sampled = model.predict(prompts)[0]
    return sampled, model.predict(prompts, deterministic=True)[0]


def test_save_load_round_trip_identical_generations(tiny_path, tmp_path):
    env = coin_env()
    model = TPO(
        "CausalLMPolicy",
        env,
        batch_size=3,
        n_candidates=2,
        seed=0,
        learning_rate=1e-2,
        policy_kwargs={"model": tiny_path, "max_new_tokens": 4, "temperature": 0.8},
    )
    model.learn(6)
    model.save(tmp_path / "run" / "agent")
    assert (tmp_path / "run" / "agent.zip").is_file()
    assert (tmp_path / "run" / "agent_hf" / "config.json").is_file()
    # The pair moves together.
    shutil.move(tmp_path / "run", tmp_path / "moved")
    loaded = TPO.load(tmp_path / "moved" / "agent", env=env)
    assert loaded.policy.temperature == 0.8 and loaded.policy.max_new_tokens == 4
    assert loaded.num_timesteps == model.num_timesteps
    assert _generations(loaded) == _generations(model)
    for a, b in zip(model.policy.state_dict().values(), loaded.policy.state_dict().values()):
        assert torch.equal(a, b)
    saved_opt = model.policy.optimizer.state_dict()["state"]
    loaded_opt = loaded.policy.optimizer.state_dict()["state"]
    assert saved_opt.keys() == loaded_opt.keys() and len(saved_opt) > 0
    assert all(torch.equal(saved_opt[k]["exp_avg"], loaded_opt[k]["exp_avg"]) for k in saved_opt)
    loaded.learn(6, reset_num_timesteps=False)  # training resumes
    assert loaded.num_timesteps == 2 * model.num_timesteps


@pytest.mark.parametrize("from_path", [True, False])
def test_lora_trains_only_adapters_and_saves_them(tiny_path, tmp_path, from_path):
    env = coin_env()
    source = tiny_path if from_path else build_tiny_causal_lm()
    kwargs = {"model": source} if from_path else {"model": source[0], "tokenizer": source[1]}
    lora = {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]}
    model = TPO(
        "CausalLMPolicy",
        env,
        batch_size=3,
        n_candidates=2,
        seed=0,
        learning_rate=1e-2,
        policy_kwargs={**kwargs, "max_new_tokens": 3, "lora": lora},
    )
    named = dict(model.policy.named_parameters())
    trainable = {n for n, p in named.items() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    frozen_before = {n: p.detach().clone() for n, p in named.items() if not p.requires_grad}
    adapters_before = {n: named[n].detach().clone() for n in trainable}
    model.learn(6)
    assert all(torch.equal(frozen_before[n], named[n]) for n in frozen_before)
    assert any(not torch.equal(adapters_before[n], named[n]) for n in trainable)
    model.save(tmp_path / "lora_agent")
    folder = tmp_path / "lora_agent_hf"
    assert (folder / "adapter_config.json").is_file() and (
        folder / "adapter_model.safetensors"
    ).is_file()
    assert not (folder / "model.safetensors").exists()  # the adapter, not a full copy
    assert (folder / "base_model").is_dir() != from_path  # base weights saved only when no folder
    loaded = TPO.load(tmp_path / "lora_agent")
    assert _generations(loaded) == _generations(model)


# ---------------------------------------------------------------- bad input


def test_missing_model_path_is_a_clear_error(tmp_path):
    missing = str(tmp_path / "no_such_model")
    with pytest.raises(ValueError, match="no_such_model.*does not exist"):
        TPO("CausalLMPolicy", arithmetic_env(), policy_kwargs={"model": missing})
    with pytest.raises(ValueError, match="needs policy_kwargs"):
        TPO("CausalLMPolicy", arithmetic_env(), policy_kwargs={})


def test_saving_to_a_file_object_is_an_error(tiny_path):
    import io

    model = TPO("CausalLMPolicy", coin_env(), batch_size=2, policy_kwargs={"model": tiny_path})
    with pytest.raises(ValueError, match="must be saved to a path"):
        model.save(io.BytesIO())


def test_fewer_than_two_candidates_is_an_error(tiny_path):
    with pytest.raises(ValueError, match="n_candidates must be an integer >= 2; got 1"):
        TPO("CausalLMPolicy", arithmetic_env(), n_candidates=1, policy_kwargs={"model": tiny_path})


def test_non_text_env_is_an_error(tiny_path):
    with pytest.raises(
        ValueError, match="CausalLMPolicy needs a prompt environment with gymnasium.spaces.Text"
    ):
        TPO("CausalLMPolicy", "CartPole-v1", policy_kwargs={"model": tiny_path})
    with pytest.raises(ValueError, match="Text observations"):
        make_policy_with_spaces(spaces.Discrete(3), TEXT, tiny_path)


def make_policy_with_spaces(obs_space, act_space, path):
    return CausalLMPolicy(obs_space, act_space, lambda _: 1e-3, model=path)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": 0.0}, "temperature must be a number in \\(0.0"),
        ({"top_p": 1.5}, "top_p must be a number"),
        ({"max_new_tokens": 0}, "max_new_tokens must be an integer >= 1"),
        ({"micro_batch_size": 0}, "micro_batch_size must be an integer >= 1 or None"),
        ({"use_chat_template": "yes"}, "use_chat_template must be one of"),
        ({"dtype": "int8"}, "dtype must be None, 'auto', or one of"),
        ({"lora": {"rank": 4}}, "is not a valid peft.LoraConfig"),
    ],
)
def test_bad_policy_options(tiny_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        CausalLMPolicy(TEXT, TEXT, lambda _: 1e-3, model=tiny_path, **kwargs)


def test_group_mode_not_available_for_language_models(tiny_path):
    model = TPO(
        "CausalLMPolicy",
        arithmetic_env(),
        batch_size=2,
        group_mode="per_state",
        policy_kwargs={"model": tiny_path, "max_new_tokens": 1},
    )
    with pytest.raises(
        ValueError, match="group_mode 'per_state' is not available for CausalLMPolicy"
    ):
        model.learn(4)


def test_gradient_checkpointing_with_micro_batches_keeps_gradients(tiny_path):
    sampler = make_policy(model=tiny_path, max_new_tokens=4)
    torch.manual_seed(0)
    c = sampler.sample_completions(["3+4=", "12+34=", "hi"], 2)
    weights = torch.linspace(-1, 1, 6)
    grads = []
    for kwargs in ({}, {"gradient_checkpointing": True, "micro_batch_size": 4}):
        policy = make_policy(model=tiny_path, max_new_tokens=4, **kwargs)
        policy.set_training_mode(True)
        logp = policy.completion_log_probs(
            c.prompt_ids, c.prompt_mask, c.completion_ids, c.completion_mask
        )
        (logp.sum(-1) * weights).sum().backward()
        grads.append([p.grad.clone() for p in policy.trainable_parameters()])
    assert any(getattr(m, "gradient_checkpointing", False) for m in policy.model.modules())
    for a, b in zip(*grads):
        assert torch.allclose(a, b, atol=1e-5)


@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_rollout_log_probs_are_frozen_with_the_reduction(tiny_path, reduction):
    model = TPO(
        "CausalLMPolicy",
        coin_env(),
        batch_size=3,
        n_candidates=2,
        n_epochs=1,
        seed=0,
        logp_reduction=reduction,
        policy_kwargs={"model": tiny_path, "max_new_tokens": 3},
    )
    model.learn(1)
    batch = model._batch
    tokens, lengths = batch.old_token_logp, batch.completion_mask.sum(-1)
    assert (tokens[~batch.completion_mask] == 0).all() and (tokens[batch.completion_mask] < 0).all()
    expected = tokens.sum(-1) / (lengths if reduction == "mean" else 1)
    assert torch.allclose(batch.old_logp.flatten(), expected)


def test_a_crash_while_saving_the_model_folder_keeps_the_previous_pair(
    tiny_path, tmp_path, monkeypatch
):
    model = TPO(
        "CausalLMPolicy",
        coin_env(),
        batch_size=3,
        n_candidates=2,
        seed=0,
        policy_kwargs={"model": tiny_path, "max_new_tokens": 4},
    )
    model.save(tmp_path / "agent")
    folder = tmp_path / "agent_hf"
    before = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    zip_before = (tmp_path / "agent.zip").read_bytes()
    real = type(model.policy.model).save_pretrained

    def dies_half_way(self, path, *args, **kwargs):
        real(self, path, *args, **kwargs)
        raise KeyboardInterrupt  # killed after part of the new folder was written

    model.learn(6)
    monkeypatch.setattr(type(model.policy.model), "save_pretrained", dies_half_way)
    with pytest.raises(KeyboardInterrupt):
        model.save(tmp_path / "agent")
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()} == before
    assert (tmp_path / "agent.zip").read_bytes() == zip_before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["agent.zip", "agent_hf"]
    monkeypatch.setattr(type(model.policy.model), "save_pretrained", real)
    TPO.load(tmp_path / "agent", env=coin_env())


# ------------------------------------------- reference model, KL, completions log


def _logged(model):
    """A silent logger, for calling train() outside learn()."""
    from stable_baselines3.common.logger import configure

    model.set_logger(configure(None, []))
    return model


def _kl_to_reference(policy, batch) -> float:
    from tpo_agents.llm.reference import reference_kl

    args = (batch.prompt_ids, batch.prompt_mask, batch.completion_ids, batch.completion_mask)
    with torch.no_grad():
        logp = policy.completion_log_probs(*args)
    return reference_kl(logp, policy.reference_log_probs(*args), batch.completion_mask).item()


def test_reference_kl_estimator_is_trls_per_token_mean():
    from tpo_agents.llm.reference import reference_kl

    logp = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, 0.0, 0.0]], requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0, -9.0], [-0.5, -9.0, -9.0]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    kl = reference_kl(logp, ref, mask)
    x = ref - logp.detach()
    per_token = torch.exp(x) - x - 1
    expected = ((per_token[0, 0] + per_token[0, 1]) / 2 + per_token[1, 0]) / 2  # padding ignored
    assert kl.item() == pytest.approx(expected.item())
    assert reference_kl(ref, ref, mask).item() == 0.0
    kl.backward()  # d/dlogp = (1 - exp(x)) / (tokens * completions), 0 on padding
    assert logp.grad[0, 2] == 0 and logp.grad[1, 1] == 0
    assert logp.grad[0, 0].item() == pytest.approx((1 - np.exp(-0.5)) / 4)
    with pytest.raises(ValueError, match="same shape"):
        reference_kl(logp, ref[:, :2], mask)
    # A log-ratio past 20 is clamped there (as GRPO's KL to the snapshot): finite, no gradient.
    far = torch.tensor([[-200.0]], requires_grad=True)
    clamped = reference_kl(far, torch.tensor([[0.0]]), torch.tensor([[True]]))
    assert clamped.item() == pytest.approx(np.exp(20.0) - 21.0)
    clamped.backward()
    assert far.grad.item() == 0.0


@pytest.mark.parametrize("algo", [TPO, GRPO])
def test_kl_to_reference_is_zero_at_the_start_and_grows_with_training(tiny_path, algo):
    """ref_model=True with ref_kl_coef=0 logs train/kl_ref without changing the update:
    exactly 0 on the first batch (the policy is the reference), > 0 once it has moved."""
    kwargs = dict(batch_size=3, n_candidates=2, n_epochs=1, seed=0, learning_rate=1e-2)
    model = algo(
        "CausalLMPolicy",
        coin_env(),
        policy_kwargs={"model": tiny_path, "max_new_tokens": 3, "ref_model": True},
        **kwargs,
    )
    assert model.policy.has_reference and model.policy.ref_model is not model.policy.model
    model.learn(6)  # one rollout, one epoch at the rollout parameters
    assert model.last_train_stats["kl_ref"] == 0.0
    plain = algo(  # built after model.learn: the same torch RNG state for its rollout
        "CausalLMPolicy",
        coin_env(),
        policy_kwargs={"model": tiny_path, "max_new_tokens": 3},
        **kwargs,
    )
    assert not plain.policy.has_reference
    plain.learn(6)
    assert "kl_ref" not in plain.last_train_stats
    for a, b in zip(model.policy.trainable_parameters(), plain.policy.trainable_parameters()):
        assert torch.equal(a, b)  # a reference without ref_kl_coef leaves the update as it was
    model.learn(5 * 6, reset_num_timesteps=False)
    assert model.last_train_stats["kl_ref"] > 0
    assert _kl_to_reference(model.policy, model._batch) > 0
    # The reference stayed the initial model.
    initial = make_policy(model=tiny_path)
    for a, b in zip(
        initial.model.state_dict().values(), model.policy.ref_model.state_dict().values()
    ):
        assert torch.equal(a, b)


def test_ref_kl_coef_enters_the_gradient_and_keeps_the_policy_closer(tiny_path):
    """On one fixed batch: the first epoch's update is the same with or without the
    penalty (its gradient is 0 while the policy is the reference); the second differs; after
    several updates a large ref_kl_coef leaves the policy much closer to the reference."""
    kwargs = dict(batch_size=3, n_candidates=2, n_epochs=1, seed=0, learning_rate=3e-2)
    policy_kwargs = {"model": tiny_path, "max_new_tokens": 3, "ref_model": True}
    models = {
        coef: _logged(
            TPO(
                "CausalLMPolicy",
                coin_env(),
                ref_kl_coef=coef,
                policy_kwargs=policy_kwargs,
                **kwargs,
            )
        )
        for coef in (0.0, 5.0)
    }
    source = TPO("CausalLMPolicy", coin_env(), policy_kwargs=policy_kwargs, **kwargs)
    source.learn(6)
    batch = source._batch
    assert float(batch.scores.std()) > 0  # the TPO loss has a gradient too
    for model in models.values():
        model.train(batch)
    free, held = (models[c].policy.trainable_parameters() for c in (0.0, 5.0))
    assert all(torch.equal(a, b) for a, b in zip(free, held))
    assert models[5.0].last_train_stats["kl_ref"] == 0.0
    for model in models.values():
        model.train(batch)
    assert any(not torch.equal(a, b) for a, b in zip(free, held))
    assert models[5.0].last_train_stats["kl_ref"] > 0
    for _ in range(6):
        for model in models.values():
            model.train(batch)
    kl_free, kl_held = (_kl_to_reference(models[c].policy, batch) for c in (0.0, 5.0))
    print(f"KL to the reference after 8 updates: coef 0: {kl_free:.4f}, coef 5: {kl_held:.4f}")
    assert 0 < kl_held < 0.5 * kl_free


def test_ref_kl_coef_alone_makes_a_reference_and_micro_batches_give_the_same_update(tiny_path):
    """ref_kl_coef > 0 without ref_model builds the frozen copy; the penalty's gradient
    through micro-batches (gradient accumulation) equals the full-batch one."""
    kwargs = dict(
        batch_size=3,
        n_candidates=2,
        n_epochs=3,
        seed=0,
        ref_kl_coef=1.0,
        learning_rate=1e-2,
        optimizer_class=torch.optim.SGD,
    )
    full = TPO(
        "CausalLMPolicy",
        coin_env(),
        policy_kwargs={"model": tiny_path, "max_new_tokens": 3},
        **kwargs,
    )
    assert full.policy.has_reference and full.policy_kwargs["ref_model"] is True
    full.learn(6)
    micro = _logged(
        TPO(
            "CausalLMPolicy",
            coin_env(),
            policy_kwargs={"model": tiny_path, "max_new_tokens": 3, "micro_batch_size": 2},
            **kwargs,
        )
    )
    micro.train(full._batch)
    assert full.last_train_stats["kl_ref"] > 0
    assert micro.last_train_stats["kl_ref"] == pytest.approx(
        full.last_train_stats["kl_ref"], rel=1e-4
    )
    assert micro.last_train_stats["loss"] == pytest.approx(full.last_train_stats["loss"], abs=1e-6)
    for a, b in zip(full.policy.trainable_parameters(), micro.policy.trainable_parameters()):
        assert torch.allclose(a, b, atol=1e-6)


def test_lora_reference_is_the_base_model_with_adapters_disabled(tiny_path, tmp_path):
    lora = {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]}
    model = TPO(
        "CausalLMPolicy",
        coin_env(),
        batch_size=3,
        n_candidates=2,
        n_epochs=2,
        seed=0,
        learning_rate=3e-2,
        ref_kl_coef=0.5,
        policy_kwargs={"model": tiny_path, "max_new_tokens": 3, "lora": lora},
    )
    policy = model.policy
    assert policy.has_reference and policy.ref_model is None  # no second model in memory
    without = TPO(
        "CausalLMPolicy",
        coin_env(),
        batch_size=3,
        n_candidates=2,
        policy_kwargs={"model": tiny_path, "max_new_tokens": 3, "lora": lora},
    )
    assert sum(p.numel() for p in policy.parameters()) == sum(
        p.numel() for p in without.policy.parameters()
    )
    model.learn(3 * 6)
    assert model.last_train_stats["kl_ref"] > 0
    batch = model._batch
    args = (batch.prompt_ids, batch.prompt_mask, batch.completion_ids, batch.completion_mask)
    base = make_policy(model=tiny_path, max_new_tokens=3)
    with torch.no_grad():
        expected = base.completion_log_probs(*args)
    assert torch.allclose(policy.reference_log_probs(*args), expected, atol=1e-6)
    assert policy.model.training  # reference_log_probs restored the training mode
    assert _kl_to_reference(policy, batch) > 0  # the adapters are enabled again
    model.save(tmp_path / "agent")
    assert not (tmp_path / "agent_hf" / "ref_model").exists()
    loaded = TPO.load(tmp_path / "agent", env=coin_env())
    assert loaded.ref_kl_coef == 0.5 and loaded.policy.has_reference
    assert torch.allclose(loaded.policy.reference_log_probs(*args), expected, atol=1e-6)


def test_reference_model_save_load_round_trip(tiny_path, tmp_path):
    """A separate reference is saved with the agent, moves with it, and loads as the
    initial model (not the trained one); ref_kl_coef and training resume."""
    env = coin_env()
    model = TPO(
        "CausalLMPolicy",
        env,
        batch_size=3,
        n_candidates=2,
        seed=0,
        learning_rate=1e-2,
        ref_kl_coef=0.2,
        policy_kwargs={"model": tiny_path, "max_new_tokens": 3},
    )
    model.learn(12)
    model.save(tmp_path / "run" / "agent")
    assert (tmp_path / "run" / "agent_hf" / "ref_model" / "config.json").is_file()
    shutil.move(tmp_path / "run", tmp_path / "moved")
    loaded = TPO.load(tmp_path / "moved" / "agent", env=env)
    assert loaded.ref_kl_coef == 0.2
    assert loaded.policy_kwargs["ref_model"] == str(tmp_path / "moved" / "agent_hf" / "ref_model")
    ref_before = model.policy.ref_model.state_dict()
    for key, value in loaded.policy.ref_model.state_dict().items():
        assert torch.equal(value, ref_before[key])
    assert not all(p.requires_grad for p in loaded.policy.ref_model.parameters())
    assert _generations(loaded) == _generations(model)
    assert _kl_to_reference(loaded.policy, model._batch) == pytest.approx(
        _kl_to_reference(model.policy, model._batch), rel=1e-5
    )
    assert _kl_to_reference(loaded.policy, model._batch) > 0
    loaded.learn(6, reset_num_timesteps=False)
    assert loaded.last_train_stats["kl_ref"] > 0
    loaded.save(tmp_path / "moved" / "agent")  # saving over itself keeps the reference
    again = TPO.load(tmp_path / "moved" / "agent", env=env)
    for key, value in again.policy.ref_model.state_dict().items():
        assert torch.equal(value, ref_before[key])


def test_explicit_reference_model_folder(tiny_path, tmp_path):
    other = tmp_path / "other"
    build_tiny_causal_lm(other, seed=1)
    model = TPO(
        "CausalLMPolicy",
        coin_env(),
        batch_size=3,
        n_candidates=2,
        n_epochs=1,
        seed=0,
        policy_kwargs={"model": tiny_path, "max_new_tokens": 3, "ref_model": str(other)},
    )
    model.learn(6)
    assert model.last_train_stats["kl_ref"] > 0  # another model: KL > 0 from the start


def _event_texts(folder) -> list[str]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    acc = EventAccumulator(str(folder), size_guidance={"tensors": 0, "scalars": 0})
    acc.Reload()
    events = acc.Tensors("completions/text_summary")
    return [
        (event.step, tensor_util.make_ndarray(event.tensor_proto).item().decode())
        for event in events
    ], acc


def test_completions_are_logged_to_tensorboard_and_jsonl(tiny_path, tmp_path):
    import json

    model = TPO(
        "CausalLMPolicy",
        coin_env(),
        batch_size=3,
        n_candidates=2,
        n_epochs=1,
        seed=0,
        log_completions_every=2,
        tensorboard_log=str(tmp_path / "tb"),
        policy_kwargs={"model": tiny_path, "max_new_tokens": 3, "ref_model": True},
    )
    model.learn(3 * 6)  # rollouts 1, 2, 3: tables at 1 and 3
    run = tmp_path / "tb" / "TPO_1"
    texts, acc = _event_texts(run)
    assert [step for step, _ in texts] == [6, 18]
    last = texts[-1][1]
    assert last.startswith("| group | prompt | completion | score |")
    batch = model._batch
    completions = model.policy.decode(batch.completion_ids, batch.completion_mask)
    # The KL is a tensorboard scalar like the other train/ metrics.
    kl = acc.Scalars("train/kl_ref")
    assert len(kl) == 3 and kl[0].value == 0.0 and kl[-1].value > 0
    rows = [json.loads(line) for line in (run / "completions.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * 6 and {r["rollout"] for r in rows} == {1, 3}
    final = [r for r in rows if r["rollout"] == 3]
    assert [r["completion"] for r in final] == completions
    assert [r["score"] for r in final] == batch.scores.flatten().tolist()
    assert [r["group"] for r in final] == [0, 0, 1, 1, 2, 2]
    assert all(r["timesteps"] == 18 and r["prompt"].startswith("user: ") for r in final)
    assert last == markdown_table(
        [{k: r[k] for k in ("group", "prompt", "completion", "score")} for r in final]
    )


def test_completions_table_escapes_markdown():
    table = markdown_table([{"group": 0, "prompt": "a|b\nc", "completion": "x\\y", "score": 0.5}])
    assert table.splitlines()[2] == "| 0 | a\\|b<br>c | x\\\\y | 0.5 |"


def test_a_zero_variance_batch_steps_on_the_kl_alone(tiny_path):
    """When the objective has nothing to learn (every group zero-variance) the KL penalty
    still pulls the policy back to the reference; without ref_kl_coef no step is taken."""
    import dataclasses

    # SGD: small steps down the KL's gradient (Adam's sign-like first steps overshoot it).
    kwargs = dict(
        batch_size=3,
        n_candidates=2,
        n_epochs=2,
        seed=0,
        learning_rate=0.03,
        optimizer_class=torch.optim.SGD,
    )
    policy_kwargs = {"model": tiny_path, "max_new_tokens": 3, "ref_model": True}
    for coef in (0.0, 1.0):
        model = TPO(
            "CausalLMPolicy", coin_env(), ref_kl_coef=coef, policy_kwargs=policy_kwargs, **kwargs
        )
        model.learn(2 * 6)
        flat = dataclasses.replace(model._batch, scores=torch.zeros_like(model._batch.scores))
        before = _kl_to_reference(model.policy, flat)
        params = [p.detach().clone() for p in model.policy.trainable_parameters()]
        model.train(flat)
        after = _kl_to_reference(model.policy, flat)
        moved = any(
            not torch.equal(a, b) for a, b in zip(params, model.policy.trainable_parameters())
        )
        assert before > 0 and model.last_train_stats["kl_ref"] > 0
        if coef == 0:
            assert not moved and model.last_train_stats["skipped_epochs"] == 2 and after == before
        else:
            assert moved and model.last_train_stats["skipped_epochs"] == 0 and after < before


def test_completions_log_without_tensorboard_goes_to_the_logger_folder(tiny_path, tmp_path):
    from stable_baselines3.common.logger import configure

    model = GRPO(
        "CausalLMPolicy",
        coin_env(),
        batch_size=3,
        n_candidates=2,
        seed=0,
        log_completions_every=1,
        policy_kwargs={"model": tiny_path, "max_new_tokens": 2},
    )
    model.set_logger(configure(str(tmp_path / "logs"), ["csv"]))
    model.learn(12)
    lines = (tmp_path / "logs" / "completions.jsonl").read_text().splitlines()
    assert len(lines) == 2 * 6


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"ref_kl_coef": -0.1}, "ref_kl_coef must be a finite number >= 0; got -0.1"),
        ({"ref_kl_coef": float("nan")}, "ref_kl_coef must be a finite number >= 0; got nan"),
        (
            {"log_completions_every": 0},
            "log_completions_every \\(or None\\) must be an integer >= 1; got 0",
        ),
        (
            {"ref_kl_coef": 0.1, "policy_kwargs": {"ref_model": False}},
            "ref_kl_coef=0.1 needs a reference model; got policy_kwargs ref_model=False",
        ),
        (
            {"policy_kwargs": {"ref_model": 3}},
            "ref_model must be None, True, a model object or a local folder; got int 3",
        ),
    ],
)
def test_bad_reference_and_logging_options(tiny_path, kwargs, message):
    policy_kwargs = {"model": tiny_path, **kwargs.pop("policy_kwargs", {})}
    with pytest.raises(ValueError, match=message):
        TPO("CausalLMPolicy", coin_env(), policy_kwargs=policy_kwargs, **kwargs)


def test_reference_options_need_a_language_model_and_a_matching_vocabulary(tiny_path, tmp_path):
    for kwargs in ({"ref_kl_coef": 0.1}, {"log_completions_every": 1}):
        with pytest.raises(ValueError, match="apply to language-model policies .*MlpPolicy"):
            TPO("MlpPolicy", "CartPole-v1", **kwargs)
    model, tok = build_tiny_causal_lm()
    with pytest.raises(ValueError, match="ref_model is the policy's own model object"):
        make_policy(model, tok, ref_model=model)
    with pytest.raises(ValueError, match="no reference model"):
        make_policy(model, tok).reference_log_probs(*[torch.ones(1, 2, dtype=torch.long)] * 4)
    from transformers import LlamaConfig, LlamaForCausalLM

    small = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=50,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
        )
    )
    with pytest.raises(ValueError, match="ref_model has a vocabulary of 50 tokens"):
        make_policy(model, tok, ref_model=small)
