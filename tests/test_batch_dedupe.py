"""Token batches send each distinct prompt and each distinct (prompt, completion) pair
through the transformer once (tpo_agents.rollout.batches.DistinctRows), for every group
size: same log-probs and gradients as one pass per row, fewer rows through the network."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

import tpo_gym  # noqa: F401
from tpo_agents import CriticFreePPO
from tpo_agents.policies import TransformerPolicy
from tpo_agents.rollout.batches import SequenceGroupBatch, TokenGroupBatch, distinct_rows

pytestmark = pytest.mark.usefixtures("one_thread")

H, V = 4, 2


def make_policy(substrate: str) -> TransformerPolicy:
    env = gym.make("TokenReversal-terminal-v0", length=H, vocab_size=V)
    torch.manual_seed(0)
    return TransformerPolicy(env.observation_space, env.action_space, lambda _: 1e-3, substrate=substrate)


def sequence_batch(G: int, K: int, seed: int = 0) -> SequenceGroupBatch:
    """G groups of K completions with repeated prompts (within and across groups) and
    repeated completions (within a group, and the same (prompt, completion) across groups)."""
    g = torch.Generator().manual_seed(seed)
    prompts = torch.randint(0, V, (G, H), generator=g)
    prompts[G // 2 :] = prompts[: G - G // 2]  # every prompt at least twice
    completions = torch.randint(0, V, (G, K, H), generator=g)
    completions[:, K // 2 :] = completions[:, :1]  # a confident policy repeats its favourite
    completions[G // 2 :] = completions[: G - G // 2]  # the same pairs in another group
    completions = completions.view(G * K, H)
    return SequenceGroupBatch(
        prompts=prompts, completions=completions, scores=torch.zeros(G, K),
        mask=torch.ones(G, K, dtype=torch.bool), old_logp=torch.zeros(G, K),
        step_rewards=torch.zeros(G * K, H),
    )


def plain_token_log_probs(policy, batch: SequenceGroupBatch) -> torch.Tensor:
    """One full teacher-forced pass per row (no sharing at all)."""
    prompts = batch.prompts.repeat_interleave(batch.group_size, 0)
    table = policy.token_log_probs(prompts, batch.completions)
    return table.gather(-1, batch.completions.unsqueeze(-1)).squeeze(-1)


def count_rows(policy, monkeypatch) -> list[tuple[int, bool]]:
    """Record ``(rows, continues_a_cache)`` of every pass through the network."""
    calls: list[tuple[int, bool]] = []
    hidden = policy.net.hidden

    def counting(tokens, cache=None):
        calls.append((tokens.shape[0], cache is not None))
        return hidden(tokens, cache)

    monkeypatch.setattr(policy.net, "hidden", counting)
    return calls


@pytest.mark.parametrize("substrate", ["ours", "paper"])
@pytest.mark.parametrize("K", [1, 4])
def test_distinct_rows_reproduce_every_row(substrate, K):
    batch = sequence_batch(G=12 if K > 1 else 40, K=K)
    d = batch.distinct_completions
    assert torch.equal(d.rows[d.inverse], batch.completions)
    assert torch.equal(d.prompts[d.prompt_index[d.inverse]], batch.prompts.repeat_interleave(K, 0))
    assert len(d.prompts) < batch.n_groups and len(d.rows) < len(batch.completions)
    keyed = torch.cat([batch.prompts.repeat_interleave(K, 0), batch.completions], 1)
    assert len(d.rows) == len(torch.unique(keyed, dim=0))
    assert len(d.prompts) == len(torch.unique(batch.prompts, dim=0))


@pytest.mark.parametrize("substrate", ["ours", "paper"])
@pytest.mark.parametrize("K", [1, 4])
def test_deduped_log_probs_equal_the_per_row_pass(substrate, K):
    policy = make_policy(substrate)
    batch = sequence_batch(G=12 if K > 1 else 40, K=K)
    with torch.no_grad():
        got = batch.token_log_probs(policy)
        expected = plain_token_log_probs(policy, batch)
        seq = batch.log_probs(policy)
    assert got.shape == expected.shape == batch.completions.shape
    assert torch.allclose(got, expected, atol=1e-6)
    assert torch.allclose(seq, expected.sum(-1).view(batch.n_groups, K), atol=1e-6)


@pytest.mark.parametrize("substrate", ["ours", "paper"])
@pytest.mark.parametrize("K", [1, 4])
def test_deduped_gradient_equals_the_per_row_gradient(substrate, K):
    policy = make_policy(substrate).double()
    batch = sequence_batch(G=12 if K > 1 else 40, K=K, seed=1)
    params = list(policy.parameters())
    weights = torch.randn(batch.completions.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    seq_weights = torch.randn(batch.n_groups, K, dtype=torch.float64)

    def loss(token_logp, seq_logp):
        # a per-token objective (PPO / GRPO token level) and a sequence one (TPO, DG, PG)
        return (weights * token_logp).sum() + (seq_weights * seq_logp).sum() + (seq_logp**2).mean()

    got = torch.autograd.grad(loss(batch.token_log_probs(policy), batch.log_probs(policy)), params)
    plain = plain_token_log_probs(policy, batch)
    expected = torch.autograd.grad(loss(plain, plain.sum(-1).view(batch.n_groups, K)), params)
    for a, b in zip(got, expected, strict=True):
        assert torch.allclose(a, b, atol=1e-10, rtol=1e-8)


@pytest.mark.parametrize("K", [1, 4])
def test_each_distinct_prompt_and_pair_goes_through_the_network_once(K, monkeypatch):
    policy = make_policy("paper")
    batch = sequence_batch(G=12 if K > 1 else 40, K=K)
    d = batch.distinct_completions
    calls = count_rows(policy, monkeypatch)
    with torch.no_grad():
        batch.log_probs(policy)
    assert calls == [(len(d.prompts), False), (len(d.rows), True)]
    calls.clear()
    with torch.no_grad():
        plain_token_log_probs(policy, batch)
    assert calls == [(len(batch.completions), False)]


def test_all_distinct_rows_take_one_whole_pass_per_row(monkeypatch):
    # No prompt shared by two distinct rows: nothing to save by encoding prompts apart.
    policy = make_policy("paper")
    prompts = torch.tensor([[0, 0, 0, 1], [1, 0, 0, 1], [1, 1, 1, 1]])
    completions = torch.tensor([[1, 0, 0, 0], [1, 0, 0, 1], [0, 0, 0, 0]])
    batch = SequenceGroupBatch(
        prompts=prompts, completions=completions, scores=torch.zeros(3, 1),
        mask=torch.ones(3, 1, dtype=torch.bool), old_logp=torch.zeros(3, 1), step_rewards=torch.zeros(3, H),
    )
    calls = count_rows(policy, monkeypatch)
    with torch.no_grad():
        got = batch.token_log_probs(policy)
    assert calls == [(3, False)]
    with torch.no_grad():
        assert torch.allclose(got, plain_token_log_probs(policy, batch), atol=1e-6)


@pytest.mark.parametrize("substrate", ["ours", "paper"])
def test_token_level_batches_dedupe_their_behaviour_sequences(substrate, monkeypatch):
    policy = make_policy(substrate).double()
    g = torch.Generator().manual_seed(3)
    N, K = 16, 3
    prompts = torch.randint(0, V, (N, H), generator=g)
    completions = torch.randint(0, V, (N, H), generator=g)
    prompts[8:], completions[8:12] = prompts[:8], completions[:4]  # 4 repeated pairs, 8 repeated prompts
    candidates = torch.randint(0, V, (N, H, K), generator=g)
    candidates[..., 0] = completions
    batch = TokenGroupBatch(
        prompts=prompts, completions=completions, candidates=candidates, scores=torch.zeros(N * H, K),
        mask=torch.ones(N * H, K, dtype=torch.bool), old_logp=torch.zeros(N * H, K),
    )
    d = batch.distinct_rows
    assert len(d.rows) == len(torch.unique(torch.cat([prompts, completions], 1), dim=0)) <= N - 4
    params = list(policy.parameters())
    weights = torch.randn(N * H, K, dtype=torch.float64, generator=g)
    calls = count_rows(policy, monkeypatch)
    got = batch.log_probs(policy)
    assert calls == [(len(d.prompts), False), (len(d.rows), True)]
    g_got = torch.autograd.grad((weights * got).sum(), params)
    table = policy.token_log_probs(prompts, completions)
    expected = table.gather(-1, candidates).reshape(N * H, K)
    g_expected = torch.autograd.grad((weights * expected).sum(), params)
    assert torch.allclose(got, expected, atol=1e-12)
    for a, b in zip(g_got, g_expected, strict=True):
        assert torch.allclose(a, b, atol=1e-10, rtol=1e-8)


def test_distinct_rows_of_a_single_sample_agent_batch():
    # Interaction-matched critic-free PPO: one completion per prompt, 2^H possible prompts.
    env = gym.make("TokenReversal-terminal-v0", length=3, vocab_size=2)
    model = CriticFreePPO("TransformerPolicy", env, seed=0, batch_size=8, interaction_matched=True)
    model.learn(1)
    batch = model.last_batch
    assert batch.group_size == 1 and batch.n_groups == 64
    d = batch.distinct_completions
    assert len(d.prompts) <= 8 and len(d.rows) <= 64
    with torch.no_grad():
        got = batch.token_log_probs(model.policy)
        assert torch.allclose(got, plain_token_log_probs(model.policy, batch), atol=1e-6)


def test_distinct_rows_helper_maps_rows_to_their_prompts():
    prompts = torch.tensor([[1, 0], [0, 1], [1, 0]])  # group 2 repeats group 0's prompt
    completions = torch.tensor([[1, 1], [1, 1], [0, 0], [1, 1], [1, 1], [1, 1]])
    d = distinct_rows(prompts, completions, rows_per_prompt=2)
    # ([1, 0], [1, 1]) four times (groups 0 and 2), ([0, 1], [0, 0]) and ([0, 1], [1, 1]) once
    assert len(d.prompts) == 2 and len(d.rows) == 3
    assert torch.equal(d.rows[d.inverse], completions)
    assert torch.equal(d.prompts[d.prompt_index[d.inverse]], prompts.repeat_interleave(2, 0))
    assert len(set(d.inverse[[0, 1, 4, 5]].tolist())) == 1
