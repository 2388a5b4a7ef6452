"""The transformer policy, its cache, Muon, and TPO on Token Reversal end to end."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3 import PPO

import tpo_gym  # noqa: F401
from tpo_agents import DG, GRPO, PG, TPO, CriticFreePPO
from tpo_agents.optim import MuonAdamW
from tpo_agents.policies import TransformerActorCriticPolicy, TransformerPolicy
from tpo_agents.rollout import SequenceGroupBatch

pytestmark = pytest.mark.usefixtures("one_thread")  # one torch thread (conftest), restored after


def make_policy(H=5, V=3, **kwargs) -> TransformerPolicy:
    env = gym.make("TokenReversal-bag-v0", length=H, vocab_size=V)
    torch.manual_seed(0)
    return TransformerPolicy(env.observation_space, env.action_space, lambda _: 1e-3, **kwargs)


def test_default_architecture_is_the_papers():
    policy = make_policy(H=10, V=2)
    net = policy.net
    assert net.tok_emb.embedding_dim == 64 and len(net.blocks) == 2
    assert net.blocks[0].attn.n_heads == 2 and net.pos_emb.num_embeddings == 20
    assert net.blocks[0].ffn[0].out_features == 256 and isinstance(net.blocks[0].ffn[1], torch.nn.GELU)
    assert net.head.out_features == 2 and isinstance(policy.optimizer, MuonAdamW)
    custom = make_policy(d_model=32, n_layers=3, n_heads=4)
    assert custom.net.tok_emb.embedding_dim == 32 and len(custom.net.blocks) == 3


def test_kv_cache_matches_full_forward_and_obs_path():
    policy = make_policy()
    H, V, K = 5, 3, 4
    prompts = torch.randint(0, V, (3, H))
    completions = policy.generate(prompts, H, n_samples=K)
    assert completions.shape == (3 * K, H)
    full = policy.token_log_probs(prompts.repeat_interleave(K, 0), completions)
    log_probs, cache = policy.start(prompts, K)
    cached = [log_probs]
    for t in range(H - 1):
        log_probs, cache = policy.advance(completions[:, t], cache)
        cached.append(log_probs)
    assert torch.allclose(torch.stack(cached, 1), full, atol=1e-5)
    # The per-step observation path (SB3 predict) reads the same distribution.
    for t in range(H):
        obs = torch.full((3 * K, 2 * H), V)
        obs[:, :H] = prompts.repeat_interleave(K, 0)
        obs[:, H : H + t] = completions[:, :t]
        step = torch.log_softmax(policy.action_logits(obs), -1)
        assert torch.allclose(step, full[:, t], atol=1e-5)


def test_shared_prompt_candidates_equal_independent_evaluation_and_sum_of_tokens():
    policy = make_policy()
    prompts = torch.randint(0, 3, (2, 5))
    completions = torch.randint(0, 3, (6, 5))
    batch = SequenceGroupBatch(
        prompts=prompts, completions=completions, scores=torch.zeros(2, 3),
        mask=torch.ones(2, 3, dtype=torch.bool), old_logp=torch.zeros(2, 3), step_rewards=torch.zeros(6, 5),
    )
    grouped = batch.log_probs(policy)
    for g in range(2):
        for k in range(3):
            row = completions[g * 3 + k : g * 3 + k + 1]
            table = policy.token_log_probs(prompts[g : g + 1], row)[0]
            assert grouped[g, k].item() == pytest.approx(table[torch.arange(5), row[0]].sum().item(), abs=1e-5)


def test_muon_adamw_splits_parameters_and_round_trips_state():
    policy = make_policy()
    muon, adamw = policy.optimizer.parts
    assert all(p.ndim == 2 for g in muon.param_groups for p in g["params"])
    assert all(p.ndim != 2 for g in adamw.param_groups for p in g["params"])
    loss = -policy.token_log_probs(torch.zeros(2, 5, dtype=torch.long), torch.ones(2, 5, dtype=torch.long)).mean()
    loss.backward()
    before = [p.detach().clone() for p in policy.parameters()]
    policy.optimizer.step()
    assert all(not torch.equal(b, p) for b, p in zip(before, policy.parameters()))
    state = policy.optimizer.state_dict()
    other = make_policy()
    other.optimizer.load_state_dict(state)
    assert other.optimizer.state_dict()["parts"][1]["state"].keys() == state["parts"][1]["state"].keys()
    with pytest.raises(ValueError, match="must hold 2 optimizer states"):
        other.optimizer.load_state_dict({"parts": []})


# ----------------------------------------------------------------- learning


def exact_match_error(model, env_id, H, n=200, seed=123) -> float:
    env = gym.make_vec(env_id, num_envs=n, length=H)
    obs, _ = env.reset(seed=seed)
    exact = None
    for _ in range(H):
        actions, _ = model.predict(obs, deterministic=True)
        obs, _, _, _, info = env.step(actions)
    exact = info["final_info"]["exact_match"]
    return 1.0 - float(np.mean(exact))


@pytest.mark.slow
def test_tpo_sequence_level_solves_terminal_reward():
    env = gym.make("TokenReversal-terminal-v0", length=5)
    # Plain Adam: at this small scale it is stable at a larger step than Muon, whose
    # scale-free updates keep full size even when TPO's gradient has nearly vanished.
    # Its step size was tuned for torch's initialization scales, hence init="torch".
    model = TPO(
        "TransformerPolicy", env, seed=0, batch_size=32, learning_rate=3e-3, optimizer_class=torch.optim.Adam,
        policy_kwargs=dict(init="torch"),
    )
    assert model.resolve_group_mode() == "sequence" and model.n_envs == 32 * 8
    model.learn(30 * 32 * 8 * 5)  # 30 iterations
    assert exact_match_error(model, "TokenReversal-terminal-v0", 5) < 0.05


@pytest.mark.slow
def test_tpo_token_level_solves_bag_reward():
    env = gym.make("TokenReversal-bag-v0", length=6)
    model = TPO(
        "TransformerPolicy", env, seed=0, batch_size=50, learning_rate=3e-3, optimizer_class=torch.optim.Adam
    )
    assert model.resolve_group_mode() == "per_state"
    model.learn(30 * 50 * 6)
    assert model._batch.n_groups == 50 * 6 and model._batch.group_size == 8
    assert exact_match_error(model, "TokenReversal-bag-v0", 6) < 0.05


def test_user_workflow_terminal_env_train_save_load_predict(tmp_path):
    env = gym.make("TokenReversal-terminal-v0", length=3)
    model = TPO("TransformerPolicy", env, batch_size=10, seed=1)
    model.learn(3 * 10 * 8 * 3)
    model.save(tmp_path / "tpo_reversal")
    loaded = TPO.load(tmp_path / "tpo_reversal", env=env)
    obs, _ = env.reset(seed=0)
    a1, _ = model.predict(obs, deterministic=True)
    a2, _ = loaded.predict(obs, deterministic=True)
    assert a1 == a2 and env.action_space.contains(int(a1))
    assert isinstance(loaded.policy.optimizer, MuonAdamW)
    loaded.learn(100, reset_num_timesteps=False)


@pytest.mark.parametrize("cls", [GRPO, DG, PG])
def test_comparators_train_on_token_reversal(cls):
    model = cls("TransformerPolicy", gym.make("TokenReversal-terminal-v0", length=3), batch_size=8, seed=0)
    model.learn(2 * 8 * 8 * 3)
    assert model.num_timesteps > 0 and model._n_updates >= 1


def test_sb3_ppo_trains_the_transformer_actor_critic():
    env = gym.make("TokenReversal-bag-v0", length=3)
    model = PPO(TransformerActorCriticPolicy, env, n_steps=48, batch_size=16, n_epochs=1, seed=0)
    model.learn(96)
    assert model.policy.features_extractor.net.tok_emb.embedding_dim == 64
    action, _ = model.predict(env.reset(seed=0)[0])
    assert env.action_space.contains(int(action))


def test_token_level_groups_refuse_terminal_reward():
    model = TPO("TransformerPolicy", gym.make("TokenReversal-terminal-v0", length=3), group_mode="per_state", batch_size=4)
    with pytest.raises(ValueError, match="terminal"):
        model.learn(10)


def test_single_sample_token_advantages_are_per_position():
    # Terminal reward: no per-state score, so every token is credited with its reward-to-go.
    model = PG("TransformerPolicy", gym.make("TokenReversal-terminal-v0", length=3), batch_size=16, seed=0)
    model.learn(16 * 3)
    batch = model._batch
    frozen = model.prepare(batch)
    rewards = batch.step_rewards
    rtg = torch.stack([rewards[:, t:].sum(1) for t in range(3)], 1)
    assert torch.allclose(frozen["advantages"], rtg - rtg.mean(0, keepdim=True))
    assert frozen["old_logp"] is batch.old_token_logp  # frozen at rollout, not recomputed
    assert torch.allclose(batch.old_token_logp.sum(-1).view(-1, 1), batch.old_logp)
    # Dense rewards: each token's own reward, in per-token units (c_t, not c_t / H).
    model = DG("TransformerPolicy", gym.make("TokenReversal-sequential-v0", length=3), batch_size=16, seed=0)
    model.learn(16 * 3)
    credit = model._batch.step_rewards * 3
    assert torch.allclose(model.prepare(model._batch)["advantages"], credit - credit.mean(0, keepdim=True))
    with pytest.raises(ValueError, match="token_credit must be one of"):
        DG("TransformerPolicy", gym.make("TokenReversal-bag-v0", length=3), token_credit="future")


def test_critic_free_ppo_learns_bag_reversal():
    model = CriticFreePPO(
        "TransformerPolicy", gym.make("TokenReversal-bag-v0", length=4), seed=0, learning_rate=3e-3,
        optimizer_class=torch.optim.Adam, policy_kwargs=dict(init="torch"),  # step tuned for torch's scales
    )
    assert model.n_epochs == 4 and model.clip_range == 0.2
    model.learn(15 * 100 * 4)
    assert exact_match_error(model, "TokenReversal-bag-v0", 4) < 0.05


def test_interaction_matched_scales_batch_and_learning_rate():
    model = DG(
        "TransformerPolicy", gym.make("TokenReversal-terminal-v0", length=3), interaction_matched=True,
        n_candidates=4, batch_size=10, learning_rate=1e-3,
    )
    assert model.batch_size == 40 and model.n_envs == 40
    assert model.lr_schedule(1.0) == pytest.approx(2e-3)
    assert model.n_epochs == 1


def test_shared_prompt_forward_has_the_same_gradient_as_repeated_prompts():
    policy = make_policy()
    prompts = torch.randint(0, 3, (2, 5))
    completions = torch.randint(0, 3, (6, 5))
    shared = policy.token_log_probs(prompts, completions, n_samples=3)
    (g_shared,) = torch.autograd.grad(shared.sum(), policy.net.tok_emb.weight)
    repeated = policy.token_log_probs(prompts.repeat_interleave(3, 0), completions)
    (g_repeated,) = torch.autograd.grad(repeated.sum(), policy.net.tok_emb.weight)
    assert torch.allclose(shared, repeated, atol=1e-5)
    assert torch.allclose(g_shared, g_repeated, atol=1e-4)
    with pytest.raises(ValueError, match="3 rows per prompt: expected 6, got 5"):
        policy.token_log_probs(prompts, completions[:5], n_samples=3)


def test_attention_matches_torch_sdpa_with_and_without_a_cache():
    from tpo_agents.policies.decoder import attend

    q, k, v = torch.randn(3, 4, 2, 6, 8, dtype=torch.float64).unbind(0)
    causal = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.allclose(attend(q, k, v), causal, atol=1e-12)
    # The last 2 queries after 4 cached positions: row i sees keys 0 .. 4 + i.
    allowed = torch.ones(2, 6, dtype=torch.bool).tril(4)
    expected = torch.nn.functional.scaled_dot_product_attention(q[..., 4:, :], k, v, attn_mask=allowed)
    assert torch.allclose(attend(q[..., 4:, :], k, v), expected, atol=1e-12)


@pytest.mark.parametrize("cached", [0, 4])
def test_attention_gradients_match_torch_sdpa(cached):
    from tpo_agents.policies.decoder import attend

    q, k, v = (t.requires_grad_() for t in torch.randn(3, 4, 2, 6, 8, dtype=torch.float64).unbind(0))
    allowed = torch.ones(6 - cached, 6, dtype=torch.bool).tril(cached)
    expected = torch.nn.functional.scaled_dot_product_attention(q[..., cached:, :], k, v, attn_mask=allowed)
    weights = torch.randn_like(expected)
    ours = torch.autograd.grad((attend(q[..., cached:, :], k, v) * weights).sum(), (q, k, v))
    theirs = torch.autograd.grad((expected * weights).sum(), (q, k, v))
    for a, b in zip(ours, theirs, strict=True):
        assert torch.allclose(a, b, atol=1e-10)
    assert torch.autograd.gradcheck(lambda q, k, v: attend(q[..., cached:, :], k, v), (q, k, v))


def test_prompt_index_rows_equal_repeated_prompts_in_value_and_gradient():
    policy = make_policy().double()
    prompts = torch.randint(0, 3, (3, 5))
    prompt_index = torch.tensor([2, 0, 0, 1, 2])
    completions = torch.randint(0, 3, (5, 5))
    indexed = policy.token_log_probs(prompts, completions, prompt_index=prompt_index)
    grads = torch.autograd.grad((indexed**2).sum(), list(policy.parameters()))
    repeated = policy.token_log_probs(prompts[prompt_index], completions)
    expected = torch.autograd.grad((repeated**2).sum(), list(policy.parameters()))
    assert torch.allclose(indexed, repeated, atol=1e-12)
    assert all(torch.allclose(a, b, atol=1e-9) for a, b in zip(grads, expected))
    with pytest.raises(ValueError, match="one entry per completion row"):
        policy.token_log_probs(prompts, completions, prompt_index=prompt_index[:4])


def test_identical_completions_are_evaluated_once_with_unchanged_log_probs_and_gradients():
    policy = make_policy().double()
    G, K, T = 4, 6, 5
    prompts = torch.randint(0, 3, (G, T))
    completions = torch.randint(0, 3, (G, K, T))
    completions[:, 3:] = completions[:, :1]  # a confident policy repeats its favourite
    completions[0] = completions[0, 0]  # group 0: all K identical
    completions = completions.view(G * K, T)
    batch = SequenceGroupBatch(
        prompts=prompts, completions=completions, scores=torch.zeros(G, K),
        mask=torch.ones(G, K, dtype=torch.bool), old_logp=torch.zeros(G, K), step_rewards=torch.zeros(G * K, T),
    )
    distinct = batch.distinct_completions
    assert len(distinct.rows) <= 1 + 3 * (K - 2)  # group 0 has one distinct row, the others at most 4
    assert torch.equal(distinct.rows[distinct.inverse], completions)
    row_prompts = distinct.prompts[distinct.prompt_index[distinct.inverse]]
    assert torch.equal(row_prompts, prompts.repeat_interleave(K, 0))
    got = batch.token_log_probs(policy)
    table = policy.token_log_probs(prompts, completions, n_samples=K)
    expected = table.gather(-1, completions.unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(got, expected, atol=1e-12)
    weights = torch.randn(G * K, T, dtype=torch.float64)
    g_got = torch.autograd.grad((weights * got).sum(), list(policy.parameters()))
    g_expected = torch.autograd.grad((weights * expected).sum(), list(policy.parameters()))
    assert all(torch.allclose(a, b, atol=1e-9) for a, b in zip(g_got, g_expected))


def test_float32_muon_follows_torch_muon():
    from tpo_agents.optim import Float32Muon

    torch.manual_seed(0)
    ours = [torch.nn.Parameter(torch.randn(*shape)) for shape in ((48, 16), (3, 16), (16, 8), (8, 16), (5, 5))]
    ref = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    opt_ours, opt_ref = Float32Muon(ours, lr=1e-2, weight_decay=0.1), torch.optim.Muon(ref, lr=1e-2, weight_decay=0.1)
    start = [p.detach().clone() for p in ours]
    for _ in range(3):
        for a, b in zip(ours, ref):
            g = torch.randn_like(a)
            a.grad, b.grad = g.clone(), g.clone()
        opt_ours.step()
        opt_ref.step()
    for a, b, s in zip(ours, ref, start):
        # torch runs Newton-Schulz in bfloat16: agree to its precision, relative to the move.
        assert (a - b).norm() < 0.02 * (b - s).norm()
    assert set(opt_ours.state_dict()["state"][0]) == set(opt_ref.state_dict()["state"][0])


def test_batched_newton_schulz_equals_one_matrix_at_a_time():
    from tpo_agents.optim import _orthogonalize_all, newton_schulz_orthogonalize

    torch.manual_seed(0)
    shapes = [(192, 64), (64, 256), (256, 64), (64, 64), (3, 64), (16, 64), (2, 64), (5, 7)]
    updates = [torch.randn(*s, dtype=torch.float64) for s in shapes]
    coefficients = (3.4445, -4.7750, 2.0315)
    together = _orthogonalize_all(updates, coefficients, 5, 1e-7)
    for u, x in zip(updates, together):
        alone = newton_schulz_orthogonalize(u.float(), coefficients, 5, 1e-7)
        assert x.shape == u.shape
        assert torch.allclose(x, alone, atol=2e-5)


def test_sequence_groups_replay_one_prompt_per_group_and_score_it():
    from tpo_gym.token_reversal import sequence_rewards

    model = TPO(
        "TransformerPolicy", gym.make("TokenReversal-bag-v0", length=4), batch_size=3, n_candidates=4,
        seed=0, group_mode="sequence",
    )
    for _ in range(2):
        model.learn(1, reset_num_timesteps=False)
        batch = model._batch
        prompts = batch.prompts.numpy().repeat(4, 0)  # the K sub-envs of a group saw this prompt
        returns = sequence_rewards(prompts, batch.completions.numpy(), "reverse_copy", 2, "bag").sum(-1)
        assert np.allclose(returns, batch.scores.numpy().ravel())


@pytest.mark.parametrize("cls", [TPO, PG])
def test_rollout_log_probs_recorded_while_sampling_equal_a_teacher_forced_pass(cls):
    # The sequence collectors keep the sampler's own token log-probs instead of re-running
    # the network: they must be what a teacher-forced pass over the same tokens gives.
    model = cls("TransformerPolicy", gym.make("TokenReversal-terminal-v0", length=4), batch_size=6, seed=3)
    model.learn(1)  # sets up the env and logger (and updates once)
    assert model.collect_rollouts(model._init_callback(None))
    batch = model._batch
    with torch.no_grad():
        forced = batch.token_log_probs(model.policy)
    assert batch.old_token_logp.shape == forced.shape
    assert torch.allclose(batch.old_token_logp, forced, atol=1e-5)
    assert torch.allclose(batch.old_logp.flatten(), forced.sum(-1), atol=1e-5)


def test_jax_library_inits_have_their_default_scales():
    from tpo_agents.policies.transformer import CausalTransformer

    torch.manual_seed(0)
    net = CausalTransformer(n_tokens=3, n_outputs=2, n_positions=20, d_model=256, init="flax")
    assert net.tok_emb.weight.std().item() == pytest.approx(256**-0.5, rel=0.1)
    assert net.pos_emb.weight.std().item() == pytest.approx(256**-0.5, rel=0.05)
    for linear, fan_in in ((net.blocks[0].attn.qkv, 256), (net.blocks[1].ffn[2], 1024)):
        w = linear.weight
        assert w.std().item() == pytest.approx(fan_in**-0.5, rel=0.03)  # LeCun normal, truncated
        assert w.abs().max().item() <= 2 * fan_in**-0.5 / 0.8796 + 1e-6
        assert (linear.bias == 0).all()
    torch.manual_seed(0)
    haiku = CausalTransformer(n_tokens=3, n_outputs=2, n_positions=20, d_model=256, init="haiku")
    # haiku: N(0, 1) and N(0, 1/fan_in) truncated at 2 std, without rescaling (std x 0.88).
    assert haiku.pos_emb.weight.std().item() == pytest.approx(0.8796, rel=0.05)
    assert haiku.pos_emb.weight.abs().max().item() <= 2.0
    assert haiku.blocks[0].ffn[0].weight.std().item() == pytest.approx(0.8796 / 16, rel=0.03)
    assert (haiku.blocks[0].ffn[0].bias == 0).all()
    torch.manual_seed(0)
    default = CausalTransformer(n_tokens=3, n_outputs=2, n_positions=20, d_model=256)
    assert default.pos_emb.weight.abs().max().item() <= 2.0  # haiku's, the default
    torch.manual_seed(0)
    plain = CausalTransformer(n_tokens=3, n_outputs=2, n_positions=20, d_model=256, init="torch")
    assert plain.pos_emb.weight.std().item() == pytest.approx(1.0, rel=0.05)  # torch: N(0, 1)
    assert plain.pos_emb.weight.abs().max().item() > 2.0
    with pytest.raises(ValueError, match="init must be one of .*'keras'"):
        CausalTransformer(n_tokens=3, n_outputs=2, n_positions=20, init="keras")


def test_init_is_a_policy_kwarg_that_survives_save_and_load(tmp_path):
    model = TPO("TransformerPolicy", gym.make("TokenReversal-terminal-v0", length=3),
                policy_kwargs=dict(init="flax"), batch_size=8, seed=0)
    assert model.policy.arch["init"] == "flax"
    model.save(tmp_path / "m.zip")
    loaded = TPO.load(tmp_path / "m.zip")
    assert loaded.policy.arch["init"] == "flax"
    for a, b in zip(model.policy.parameters(), loaded.policy.parameters(), strict=True):
        assert torch.equal(a, b)
