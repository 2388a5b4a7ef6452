"""The paper substrate against the paper's own stack: flax.linen modules and optax's Muon.

The reference network below is written here with flax.linen's stock modules in the
configuration the paper's artifact uses (SelfAttention with qkv_features = d_model, pre-LN,
LayerNorm defaults, tanh GELU, Dense head); our torch network must give the same log-probs
from the same parameters, and :class:`OptaxMuon` the same steps as ``optax.contrib.muon``.
"""

from __future__ import annotations

import flax.linen as nn
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch

import tpo_gym  # noqa: F401
from tpo_agents import GRPO, TPO
from tpo_agents.optim import OptaxMuon
from tpo_agents.policies.paper_transformer import PaperCausalTransformer

jax.config.update("jax_default_matmul_precision", "highest")

V, H = 2, 5


class FlaxReference(nn.Module):
    """flax.linen's stock modules in the artifact's configuration."""

    vocab: int
    positions: int
    d_model: int = 64
    heads: int = 2
    layers: int = 2

    @nn.compact
    def __call__(self, tokens):
        x = nn.Embed(self.vocab, self.d_model)(tokens)
        x = x + self.param("pos_emb", nn.initializers.normal(0.02), (self.positions, self.d_model))[: tokens.shape[1]]
        mask = nn.make_causal_mask(tokens)
        for _ in range(self.layers):
            x = x + nn.SelfAttention(num_heads=self.heads, qkv_features=self.d_model, deterministic=True)(
                nn.LayerNorm()(x), mask=mask
            )
            y = nn.gelu(nn.Dense(4 * self.d_model)(nn.LayerNorm()(x)))
            x = x + nn.Dense(self.d_model)(y)
        return nn.log_softmax(nn.Dense(self.vocab)(nn.LayerNorm()(x)))


def _net(seed=0, vocab=V, positions=2 * H):
    torch.manual_seed(seed)
    return PaperCausalTransformer(vocab, positions, pad_id=vocab)


def _tokens(seed=1, n=6, vocab=V, length=2 * H - 1):
    return np.random.default_rng(seed).integers(0, vocab, size=(n, length))


def _tree_close(a, b, atol):
    flat_a, _ = jax.tree_util.tree_flatten_with_path(a)
    flat_b = dict(jax.tree_util.tree_flatten_with_path(b)[0])
    assert len(flat_a) == len(flat_b)
    for path, x in flat_a:
        np.testing.assert_allclose(np.asarray(x), np.asarray(flat_b[path]), atol=atol, rtol=0,
                                   err_msg=jax.tree_util.keystr(path))


def test_parameter_tree_has_flax_names_and_shapes():
    net = _net()
    ours = net.flax_params()
    ref = FlaxReference(V, 2 * H).init(jax.random.PRNGKey(0), jnp.zeros((1, 2 * H), jnp.int32))
    shapes = lambda t: jax.tree.map(lambda x: tuple(np.shape(x)), t)  # noqa: E731
    assert shapes(ours) == shapes(jax.tree.map(np.asarray, ref))


def test_log_probs_match_flax_on_the_same_parameters():
    net = _net()
    with torch.no_grad():  # non-trivial LayerNorms and biases, so every parameter is exercised
        for p in net.parameters():
            p.add_(0.1 * torch.randn_like(p))
    tokens = _tokens()
    ours = torch.log_softmax(net(torch.as_tensor(tokens))[0], -1).detach().numpy()
    ref = FlaxReference(V, 2 * H).apply(net.flax_params(), jnp.asarray(tokens))
    np.testing.assert_allclose(ours, np.asarray(ref), atol=2e-5)


def test_padding_is_read_as_token_zero_and_never_reaches_earlier_positions():
    net = _net()
    tokens = torch.as_tensor(_tokens(length=2 * H))
    padded = tokens.clone()
    padded[:, H + 2 :] = V  # the pad id, after the position read
    zeros = tokens.clone()
    zeros[:, H + 2 :] = 0
    a, b = net(padded)[0], net(zeros)[0]
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(a[:, : H + 2], net(tokens)[0][:, : H + 2])


@pytest.mark.parametrize("vocab", [2, 8])
def test_initial_weights_have_flax_default_statistics(vocab):
    d = 64
    torch.manual_seed(0)
    net = PaperCausalTransformer(vocab, 20, pad_id=vocab, d_model=d)
    ours = jax.tree.map(np.asarray, net.flax_params())
    ref = jax.tree.map(np.asarray, FlaxReference(vocab, 20).init(jax.random.PRNGKey(0), jnp.zeros((1, 20), jnp.int32)))
    for (path, x), (_, y) in zip(jax.tree_util.tree_flatten_with_path(ours)[0], jax.tree_util.tree_flatten_with_path(ref)[0]):
        name = jax.tree_util.keystr(path)
        if np.all(y == y.flat[0]):  # constant initializers (zeros, ones) must match exactly
            np.testing.assert_array_equal(x, y, err_msg=name)
            continue
        # Random ones: the same scale (sampling error ~ 1/sqrt(n)) and the same support.
        tol = 4 / np.sqrt(x.size) + 0.02
        assert abs(x.std() / y.std() - 1) < tol, (name, x.std(), y.std())
        assert abs(x.mean()) < 4 * y.std() / np.sqrt(x.size), (name, x.mean())
        truncated = "kernel" in name
        if truncated:  # lecun normal: truncated at 2 std of the untruncated normal
            bound = 2 * np.sqrt(1 / (64 if "Dense_1" not in name and "Dense_3" not in name else 256)) / 0.8796
            assert np.abs(x).max() <= bound * 1.0001 and np.abs(y).max() <= bound * 1.0001, name
    assert abs(net.tok_emb.std().item() - d**-0.5) < 0.02
    assert abs(net.pos_emb.std().item() - 0.02) < 0.002


def test_optax_muon_partition_is_by_rank():
    net = _net()
    opt = OptaxMuon(net.parameters())
    kinds = {g["kind"]: {id(p) for p in g["params"]} for g in opt.param_groups}
    for name, p in net.named_parameters():
        assert (id(p) in kinds["muon"]) == (p.ndim == 2), name
    attn = net.blocks[0].attn
    assert id(attn.query_bias) in kinds["muon"] and id(attn.query_kernel) in kinds["adam"]
    assert id(net.tok_emb) in kinds["muon"] and id(net.pos_emb) in kinds["muon"]


def _loss(net, tokens, weights):
    logp = torch.log_softmax(net(tokens)[0], -1)
    return -(weights * logp).sum()


@pytest.mark.parametrize("vocab", [2, 8])
def test_optimizer_steps_equal_optax_contrib_muon(vocab):
    """Four steps on fresh gradients each: every parameter matches optax to ~1e-6."""
    net = _net(vocab=vocab)
    opt = OptaxMuon(net.parameters(), lr=1e-3)
    tx = optax.contrib.muon(learning_rate=1e-3)
    params = jax.tree.map(jnp.asarray, net.flax_params())
    state = tx.init(params)
    update = jax.jit(tx.update)
    rng = np.random.default_rng(0)
    for step in range(4):
        tokens = torch.as_tensor(_tokens(seed=step, vocab=vocab))
        weights = torch.as_tensor(rng.normal(size=(*tokens.shape, vocab)), dtype=torch.float32)
        opt.zero_grad()
        _loss(net, tokens, weights).backward()
        grads = jax.tree.map(jnp.asarray, net.flax_params(of=lambda p: p.grad))
        updates, state = update(grads, state, params)
        params = optax.apply_updates(params, updates)
        opt.step()
        _tree_close(net.flax_params(), params, atol=1e-6)
    # The steps were real: the parameters moved by far more than the tolerance.
    moved = np.abs(net.flax_params()["params"]["Dense_0"]["kernel"] - _net(vocab=vocab).flax_params()["params"]["Dense_0"]["kernel"])
    assert moved.max() > 1e-4


def test_optimizer_state_round_trips():
    net = _net()
    opt = OptaxMuon(net.parameters())
    _loss(net, torch.as_tensor(_tokens()), torch.ones(1)).backward()
    opt.step()
    fresh = OptaxMuon(net.parameters())
    fresh.load_state_dict(opt.state_dict())
    assert [g["step"] for g in fresh.param_groups] == [1, 1]
    for p in net.parameters():
        torch.testing.assert_close(fresh.state[p]["mu"], opt.state[p]["mu"])


@pytest.mark.parametrize(
    "bad", [dict(lr=-1.0), dict(beta=1.0), dict(betas=(0.9, 1.5)), dict(ns_steps=2.5)]
)
def test_optax_muon_rejects_bad_hyperparameters(bad):
    with pytest.raises(ValueError, match="invalid"):
        OptaxMuon(_net().parameters(), **bad)


def test_policy_substrate_paper_uses_the_paper_network_and_optimizer(tmp_path):
    env = gym.make("TokenReversal-terminal-v0", length=3)
    model = TPO("TransformerPolicy", env, policy_kwargs=dict(substrate="paper"), batch_size=8, seed=0)
    assert isinstance(model.policy.net, PaperCausalTransformer)
    assert isinstance(model.policy.optimizer, OptaxMuon)
    assert model.policy.net.tok_emb.shape == (2, 64)  # V rows: no padding row
    model.learn(8 * 8 * 4 * 2)
    model.save(tmp_path / "m")
    loaded = TPO.load(tmp_path / "m", env=env)
    assert loaded.policy.arch["substrate"] == "paper"
    for a, b in zip(model.policy.parameters(), loaded.policy.parameters()):
        torch.testing.assert_close(a, b)
    with pytest.raises(ValueError, match="init applies to substrate='ours'"):
        TPO("TransformerPolicy", env, policy_kwargs=dict(substrate="paper", init="haiku"))
    with pytest.raises(ValueError, match="substrate must be one of"):
        TPO("TransformerPolicy", env, policy_kwargs=dict(substrate="jax"))


def test_paper_substrate_learns_a_short_terminal_task():
    """H = 2, V = 2 (a quarter of random completions are right): TPO solves it."""
    env = gym.make("TokenReversal-terminal-v0", length=2)
    model = TPO("TransformerPolicy", env, policy_kwargs=dict(substrate="paper"), batch_size=32, seed=0)
    model.learn(32 * 8 * 2 * 40)
    vec = gym.make_vec("TokenReversal-terminal-v0", num_envs=256, length=2)
    obs, _ = vec.reset(seed=3)
    for _ in range(2):
        actions, _ = model.predict(obs, deterministic=True)
        obs, _, _, _, info = vec.step(actions)
    assert info["final_info"]["exact_match"].mean() > 0.95


def test_grpo_sequence_ratio_on_the_paper_substrate_runs():
    env = gym.make("TokenReversal-terminal-v0", length=3)
    model = GRPO("TransformerPolicy", env, policy_kwargs=dict(substrate="paper"), ratio_level="sequence",
                 batch_size=8, seed=0)
    model.learn(8 * 8 * 3 * 2)
    assert all(torch.isfinite(p).all() for p in model.policy.parameters())
