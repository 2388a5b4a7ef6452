"""The JAX baseline of the speed benchmark computes what our torch code computes: the same
network, sampler log-probs, TPO loss, gradients and first optimizer step; it learns a tiny
task and its timing subprocess reports numbers."""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import tpo_gym  # noqa: F401
from benchmarks import jax_baseline as jb
from tpo_agents import objectives as obj
from tpo_agents.optim import MuonAdamW
from tpo_agents.policies import TransformerPolicy

H, V, G, K = 4, 2, 6, 4  # prompt length, vocabulary, prompts, completions per prompt


@pytest.fixture(scope="module", autouse=True)
def measured(request):
    """``measure(1, 2)``, started before the other tests when its test is selected: the
    timing subprocess (its compiles take most of this file's time) runs alongside them."""
    if not any(
        item.name == "test_measure_reports_timings_in_a_subprocess"
        for item in request.session.items
    ):
        yield None
        return
    with ThreadPoolExecutor(1) as pool:
        yield pool.submit(jb.measure, 1, 2)


@pytest.fixture(scope="module")
def policy() -> TransformerPolicy:
    env = gym.make("TokenReversal-terminal-v0", length=H)
    torch.manual_seed(0)
    return TransformerPolicy(env.observation_space, env.action_space, lambda _: 1e-3)


@pytest.fixture(scope="module")
def batch(policy):
    """Prompts, completions sampled by the JAX sampler, their recorded token log-probs and
    rewards with both mixed and zero-variance groups."""
    params = jb.params_from_torch(policy.net)
    rng = np.random.default_rng(0)
    prompts = jnp.asarray(rng.integers(0, V, (G, H)), jnp.int32)
    sample = jax.jit(jb.sample_completions, static_argnums=(3, 4, 5))
    completions, token_logp = sample(params, prompts, jax.random.key(0), K, H, 2)
    rewards = np.zeros((G, K), np.float32)
    rewards[:3] = rng.integers(0, 2, (3, K))
    rewards[0, :2] = [0, 1]
    return {
        "prompts": prompts,
        "completions": completions,
        "token_logp": token_logp,
        "rewards": jnp.asarray(rewards.ravel()),
    }


def _torch(x, dtype=torch.long) -> torch.Tensor:
    return torch.from_numpy(np.array(x)).to(dtype)


def _assert_trees_close(actual, expected, atol):
    for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(actual), jax.tree.leaves(expected)):
        np.testing.assert_allclose(a, b, atol=atol, rtol=0, err_msg=jax.tree_util.keystr(path))


@pytest.mark.parametrize("share_prompt", [False, True])
def test_teacher_forced_log_probs_match_torch(policy, share_prompt):
    params = jb.params_from_torch(policy.net)
    rng = np.random.default_rng(1)
    prompts, completions = rng.integers(0, V, (G, H)), rng.integers(0, V, (G * K, H))
    with torch.no_grad():
        expected = policy.token_log_probs(_torch(prompts), _torch(completions), n_samples=K)
    fn = jax.jit(jb.token_log_probs, static_argnums=(3, 4))
    actual = fn(params, jnp.asarray(prompts), jnp.asarray(completions), 2, share_prompt)
    assert actual.shape == (G * K, H, V)
    np.testing.assert_allclose(actual, expected.numpy(), atol=1e-5, rtol=0)


def test_cached_sampler_records_teacher_forced_log_probs(policy, batch):
    params = jb.params_from_torch(policy.net)
    completions, recorded = batch["completions"], batch["token_logp"]
    assert completions.shape == recorded.shape == (G * K, H)
    assert completions.min() >= 0 and completions.max() < V
    table = jax.jit(jb.token_log_probs, static_argnums=3)(params, batch["prompts"], completions, 2)
    teacher = jnp.take_along_axis(table, completions[..., None], axis=-1)[..., 0]
    np.testing.assert_allclose(recorded, teacher, atol=1e-5, rtol=0)
    assert np.all(np.asarray(recorded) < 0)


def test_tpo_loss_and_gradient_match_torch(policy, batch):
    fns = jb.build(jb.Config(horizon=H, vocab=V, batch=G, samples=K))
    params = jb.params_from_torch(policy.net)
    q = fns.target(batch)
    loss, grads = jax.jit(jax.value_and_grad(fns.loss))(params, batch, q)

    scores = _torch(batch["rewards"], torch.float32).view(G, K)
    old_logp = _torch(batch["token_logp"], torch.float32).sum(-1).view(G, K)
    u = obj.standardize_scores(scores)
    q_torch = obj.tpo_target(old_logp, u, eta=1.0)
    np.testing.assert_allclose(
        jb.standardize_scores(jnp.asarray(scores.numpy())), u.numpy(), atol=1e-6
    )
    np.testing.assert_allclose(q, q_torch.numpy(), atol=1e-6)
    assert np.allclose(
        q[3:], jax.nn.softmax(old_logp[3:].numpy(), axis=-1), atol=1e-6
    )  # zero-variance

    policy.zero_grad()
    completions = _torch(batch["completions"])
    table = policy.token_log_probs(_torch(batch["prompts"]), completions, n_samples=K)
    logp = table.gather(-1, completions.unsqueeze(-1)).squeeze(-1).sum(-1).view(G, K)
    loss_torch = obj.tpo_loss(logp, q_torch)
    loss_torch.backward()
    assert math.isclose(float(loss), loss_torch.item(), abs_tol=1e-5)
    expected = jb.params_from_torch({n: p.grad for n, p in policy.net.named_parameters()})
    scale = max(float(jnp.abs(g).max()) for g in jax.tree.leaves(grads))
    assert scale > 1e-3  # the mixed groups give a real gradient
    _assert_trees_close(grads, expected, atol=1e-5 * scale)


def test_first_optimizer_step_matches_muon_adamw():
    """One step from the same gradients: optax Muon + AdamW equals tpo_agents' MuonAdamW
    (later Muon steps differ slightly: optax bias-corrects its momentum, torch does not)."""
    env = gym.make("TokenReversal-terminal-v0", length=H)
    torch.manual_seed(1)
    net = TransformerPolicy(env.observation_space, env.action_space, lambda _: 1e-3, n_layers=1).net
    params = jb.params_from_torch(net)
    gen = torch.Generator().manual_seed(2)
    for p in net.parameters():
        p.grad = torch.randn(p.shape, generator=gen)
    grads = jb.params_from_torch({n: p.grad for n, p in net.named_parameters()})
    MuonAdamW(net.parameters(), lr=1e-3).step()
    tx = jb.make_optimizer(jb.Config(horizon=H, n_layers=1))
    updates, _ = jax.jit(tx.update)(grads, jax.jit(tx.init)(params), params)
    stepped = jax.tree.map(lambda p, u: p + u, params, updates)
    _assert_trees_close(stepped, jb.params_from_torch(net), atol=2e-6)
    # Shape scaling sqrt(max(1, fan_out / fan_in)): fc1 (64 -> 256) moves 2x fc2 (256 -> 64).
    moved = jax.tree.map(lambda u: float(jnp.sqrt((u**2).mean())), updates)
    assert moved["blocks"][0]["fc1"]["w"] == pytest.approx(
        2 * moved["blocks"][0]["fc2"]["w"], rel=0.1
    )


def test_jitted_iterations_learn_a_tiny_task():
    fns = jb.build(jb.Config(horizon=3, batch=16, samples=8, lr=3e-3, n_layers=1))
    params, opt_state = fns.init(0)
    keys = jax.random.split(jax.random.key(0), 25)
    rewards, first_losses, last_losses = [], [], []
    for key in keys:
        params, opt_state, stats = fns.iteration(params, opt_state, key)
        rewards.append(float(stats["reward"]))
        first_losses.append(float(stats["loss"][0]))
        last_losses.append(float(stats["loss"][-1]))
    assert all(np.isfinite(first_losses)) and all(np.isfinite(last_losses))
    assert np.mean(np.array(last_losses) < np.array(first_losses)) > 0.9  # epochs fit the target
    assert np.mean(rewards[-5:]) > np.mean(rewards[:5]) + 0.15, rewards


def test_measure_reports_timings_in_a_subprocess(measured):
    result = measured.result()
    for key in ("iteration_ms", "sampling_ms", "update_ms", "compile_s"):
        assert math.isfinite(result[key]) and result[key] > 0, (key, result)
    assert result["jax_version"] == jax.__version__ and result["threads"] == 1
    assert result["nproc"] == "1" and "--xla_cpu_multi_thread_eigen=false" in result["xla_flags"]
    assert result["busy_threads"] == 1 and result["config"]["batch"] == 100
