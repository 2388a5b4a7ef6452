"""The objectives against the closed forms of docs/algorithms.md (sections 2-6)."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from tpo_agents import objectives as obj


@pytest.fixture(autouse=True)
def _float64():
    """Closed forms are checked in double precision; restore the default afterwards."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


finite = st.floats(-5, 5, allow_nan=False, allow_infinity=False)


def group_arrays(k_min=2, k_max=8):
    return st.integers(k_min, k_max).flatmap(
        lambda k: arrays(np.float64, (3, k), elements=finite)
    )


def grad_wrt(loss_fn, x):
    x = x.detach().clone().requires_grad_(True)
    (g,) = torch.autograd.grad(loss_fn(x), x)
    return g


# ------------------------------------------------------------------ standardization


def test_one_hot_scores_standardize_to_closed_form():
    A = 10
    u = obj.standardize_scores(torch.eye(A)[3:4])
    assert u[0, 3].item() == pytest.approx(3.0)  # sqrt(A - 1)
    others = torch.cat([u[0, :3], u[0, 4:]])
    assert torch.allclose(others, torch.full((A - 1,), -1 / 3))
    lam = math.exp(u[0, 3].item() - u[0, 0].item())
    assert lam == pytest.approx(math.exp(A / math.sqrt(A - 1)))
    assert lam == pytest.approx(28.03, abs=0.01)


def test_standardize_uses_population_std():
    s = torch.tensor([[0.0, 1.0, 2.0, 3.0]])
    u = obj.standardize_scores(s)
    pop_std = s.std(unbiased=False)
    assert torch.allclose(u, (s - 1.5) / pop_std)
    assert u.pow(2).mean().item() == pytest.approx(1.0)


@settings(max_examples=60, deadline=None)
@given(group_arrays(), st.floats(0.01, 100), st.floats(-50, 50))
def test_standardize_invariant_to_positive_affine_maps(scores, a, b):
    s = torch.as_tensor(scores)
    u1 = obj.standardize_scores(s)
    u2 = obj.standardize_scores(a * s + b)
    # Groups that are (numerically) flat in one form may cross the 1e-6 threshold in the
    # other; compare only groups clearly away from it.
    clear = s.std(-1, unbiased=False) > 1e-3
    assert torch.allclose(u1[clear], u2[clear], atol=1e-6)


def test_zero_variance_group_standardizes_to_zero_and_is_flagged():
    s = torch.tensor([[1.0, 1.0, 1.0], [0.0, 1.0, 0.0]])
    u = obj.standardize_scores(s)
    assert torch.equal(u[0], torch.zeros(3))
    assert torch.equal(obj.zero_variance_groups(s), torch.tensor([True, False]))


def test_mask_excludes_padded_candidates():
    s = torch.tensor([[1.0, 0.0, 99.0]])
    mask = torch.tensor([[True, True, False]])
    u = obj.standardize_scores(s, mask=mask)
    assert torch.allclose(u, torch.tensor([[1.0, -1.0, 0.0]]))
    q = obj.tpo_target(torch.zeros(1, 3), u, mask=mask)
    assert q[0, 2].item() == 0.0
    assert q.sum().item() == pytest.approx(1.0)


# ------------------------------------------------------------------------------ TPO


@settings(max_examples=40, deadline=None)
@given(group_arrays(), group_arrays(), st.floats(0.1, 4.0))
def test_tpo_loss_gradient_is_p_minus_q(logits, scores, eta):
    if logits.shape != scores.shape:
        scores = np.resize(scores, logits.shape)
    l_old = torch.as_tensor(logits)
    q = obj.tpo_target(l_old, obj.standardize_scores(torch.as_tensor(scores)), eta=eta)
    l_new = l_old + 0.3  # any current logits: the gradient is p(current) - q
    g = grad_wrt(lambda x: obj.tpo_loss(x, q), l_new)
    p = torch.softmax(l_new, -1)
    assert torch.allclose(g, (p - q) / l_new.shape[0], atol=1e-12)


def test_zero_variance_group_gives_q_equal_p_old_and_zero_first_epoch_gradient():
    l_old = torch.tensor([[0.3, -1.0, 2.0, 0.1]])
    u = obj.standardize_scores(torch.full((1, 4), 0.7))
    q = obj.tpo_target(l_old, u)
    assert torch.allclose(q, torch.softmax(l_old, -1))
    g = grad_wrt(lambda x: obj.tpo_loss(x, q), l_old)
    assert torch.allclose(g, torch.zeros_like(g), atol=1e-15)


def test_target_is_p_old_times_exp_u_over_eta():
    l_old = torch.tensor([[0.0, math.log(2.0), math.log(3.0)]])
    u = torch.tensor([[1.0, 0.0, -1.0]])
    eta = 0.5
    q = obj.tpo_target(l_old, u, eta=eta)
    unnorm = torch.tensor([1.0, 2.0, 3.0]) * torch.exp(u[0] / eta)
    assert torch.allclose(q[0], unnorm / unnorm.sum())
    q_free = obj.tpo_target(None, u, eta=eta, anchor=False)
    assert torch.allclose(q_free, torch.softmax(u / eta, -1))


def test_the_floored_target_mixes_in_the_uniform_over_valid_candidates():
    q = torch.tensor([[0.97, 0.02, 0.01, 0.0], [0.5, 0.5, 0.0, 0.0]])
    mask = torch.tensor([[True, True, True, True], [True, True, True, False]])
    floored = obj.floor_target(q, 0.1, mask=mask)
    expected = torch.tensor([[0.898, 0.043, 0.034, 0.025], [0.45 + 0.1 / 3, 0.45 + 0.1 / 3, 0.1 / 3, 0.0]])
    torch.testing.assert_close(floored, expected)
    torch.testing.assert_close(floored.sum(-1), torch.ones(2))
    assert (floored[mask] >= 0.1 / mask.sum(-1, keepdim=True).expand_as(q)[mask] - 1e-7).all()
    assert obj.floor_target(q, 0.0) is q  # no floor: the paper's target, untouched
    torch.testing.assert_close(obj.floor_target(q[:1], 1.0), torch.full((1, 4), 0.25))
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match=f"floor must be in \\[0, 1\\]; got {bad}"):
            obj.floor_target(q, bad)


def test_the_gradient_of_the_loss_on_a_floored_target_is_p_minus_the_floored_q():
    logits = torch.randn(3, 4, requires_grad=True)
    u = torch.randn(3, 4)
    q = obj.floor_target(obj.tpo_target(logits.detach().log_softmax(-1), u), 0.2)
    (grad,) = torch.autograd.grad(obj.tpo_loss(logits.log_softmax(-1), q), logits)
    torch.testing.assert_close(grad, (logits.detach().softmax(-1) - q) / 3)  # mean over 3 groups


def test_the_uniform_floor_term_has_gradient_floor_times_p_minus_uniform_and_is_tpo_floor_share():
    logits = torch.randn(3, 4, requires_grad=True)
    mask = torch.tensor([[True] * 4, [True] * 4, [True, True, True, False]])
    logp = logits.masked_fill(~mask, float("-inf")).log_softmax(-1)
    (grad,) = torch.autograd.grad(obj.uniform_floor_loss(logp, 0.3, mask=mask), logits)
    p = logp.detach().exp()
    uniform = mask.float() / mask.sum(-1, keepdim=True)
    torch.testing.assert_close(grad, 0.3 * (p - uniform) / 3)  # mean over 3 groups
    # TPO's loss on a floored target is (1 - f) of its loss on q plus this term.
    q = obj.tpo_target(logp.detach(), torch.randn(3, 4), mask=mask)
    floored = obj.tpo_loss(logp, obj.floor_target(q, 0.3, mask=mask), mask=mask)
    split = 0.7 * obj.tpo_loss(logp, q, mask=mask) + obj.uniform_floor_loss(logp, 0.3, mask=mask)
    torch.testing.assert_close(floored, split)
    assert obj.uniform_floor_loss(logp, 0.0).item() == 0.0
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match=f"floor must be in \\[0, 1\\]; got {bad}"):
            obj.uniform_floor_loss(logp, bad)


def _objective(r, u, p_old, eta):
    r = np.clip(r, 1e-300, None)
    return float((r * u).sum() - eta * (r * (np.log(r) - np.log(p_old))).sum())


@settings(max_examples=60, deadline=None)
@given(
    arrays(np.float64, 6, elements=finite),
    arrays(np.float64, 6, elements=st.floats(-3, 3)),
    st.floats(0.1, 5.0),
    st.integers(0, 2**31 - 1),
)
def test_q_maximises_linear_score_minus_kl(scores, logits, eta, seed):
    u = obj.standardize_scores(torch.as_tensor(scores)[None])
    l_old = torch.as_tensor(logits)[None]
    q = obj.tpo_target(l_old, u, eta=eta)[0].numpy()
    p_old = torch.softmax(l_old, -1)[0].numpy()
    u = u[0].numpy()
    best = _objective(q, u, p_old, eta)
    rng = np.random.default_rng(seed)
    for r in rng.dirichlet(np.ones(6), size=200):
        assert _objective(r, u, p_old, eta) <= best + 1e-9
    # Also no nearby perturbation of q on the simplex does better.
    for _ in range(50):
        r = np.clip(q + rng.normal(0, 1e-3, 6), 1e-12, None)
        assert _objective(r / r.sum(), u, p_old, eta) <= best + 1e-9


def test_group_pg_is_score_weighted_reinforce():
    logp = torch.log_softmax(torch.tensor([[0.1, 0.2, -0.3]]), -1)
    u = torch.tensor([[1.0, -0.5, -0.5]])
    g = grad_wrt(lambda x: obj.group_pg_loss(x, u), logp)
    assert torch.allclose(g, -u / 3)


# ----------------------------------------------------------------- single-sample


def test_reinforce_gradient_and_weights():
    logp = torch.tensor([-1.0, -2.0, -0.5])
    adv = torch.tensor([1.0, -1.0, 2.0])
    g = grad_wrt(lambda x: obj.reinforce_loss(x, adv), logp)
    assert torch.allclose(g, -adv / 3)
    w = torch.tensor([0.5, 0.25, 0.25])
    g = grad_wrt(lambda x: obj.reinforce_loss(x, adv, weights=w), logp)
    assert torch.allclose(g, -adv * w)


def test_ppo_clip_stops_gradient_outside_trust_region():
    old = torch.zeros(4)
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0])
    new = torch.tensor([math.log(1.5), math.log(1.1), math.log(0.5), math.log(0.9)])
    g = grad_wrt(lambda x: obj.ppo_clip_loss(x, old, adv, clip_range=0.2), new)
    ratio = torch.exp(new)
    # Clipped where the ratio left [0.8, 1.2] in the advantage's favoured direction.
    assert g[0].item() == 0.0 and g[2].item() == 0.0
    assert torch.allclose(g[[1, 3]], -(ratio * adv)[[1, 3]] / 4)


def test_dg_gate_is_held_fixed():
    logp = torch.tensor([-2.0, -0.1])
    adv = torch.tensor([0.5, -0.5])
    eta = 2.0
    g = grad_wrt(lambda x: obj.dg_loss(x, adv, eta=eta), logp)
    gate = torch.sigmoid(adv * (-logp) / eta)
    assert torch.allclose(g, -(gate * adv) / 2)


def test_cross_entropy_gradient_is_pi_minus_onehot():
    logits = torch.tensor([[0.2, -0.1, 0.5]])
    g = grad_wrt(lambda x: obj.cross_entropy_loss(x, torch.tensor([1])), logits)
    assert torch.allclose(g, torch.softmax(logits, -1) - torch.tensor([[0.0, 1.0, 0.0]]))


# ---------------------------------------------------------------------------- GRPO


def test_grpo_advantages_z_score_with_eps():
    s = torch.tensor([[1.0, 0.0, 0.0, 0.0], [2.0, 2.0, 2.0, 2.0]])
    a = obj.grpo_advantages(s)
    std = math.sqrt(0.75 * 0.25)
    assert a[0, 0].item() == pytest.approx(0.75 / (std + 1e-8))
    assert torch.equal(a[1], torch.zeros(4))


def test_grpo_kl_estimator_properties():
    old = torch.zeros(5)
    new = torch.tensor([-30.0, -1.0, 0.0, 1.0, 30.0])
    kl = obj.grpo_kl(new, old)
    assert (kl >= 0).all() and kl[2].item() == 0.0
    r = torch.tensor([-20.0, -1.0, 0.0, 1.0, 20.0])  # clamped at +-20
    assert torch.allclose(kl, torch.exp(-r) + r - 1)


def test_grpo_loss_is_surrogate_plus_beta_kl_and_variants():
    torch.manual_seed(0)
    scores = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    old = torch.log_softmax(torch.randn(2, 4), -1)
    new = old + 0.1 * torch.randn(2, 4)
    adv = obj.grpo_advantages(scores)
    surrogate = obj.ppo_clip_loss(new, old, adv, 0.2)
    kl = obj.grpo_kl(new, old).mean()
    full = obj.grpo_loss(new, old, scores, clip_range=0.2, beta=0.04)
    assert full.item() == pytest.approx((surrogate + 0.04 * kl).item())
    no_kl = obj.grpo_loss(new, old, scores, beta=0.0)
    assert no_kl.item() == pytest.approx(surrogate.item())
    # Masking the all-equal second group keeps only the first group's candidates.
    masked = obj.grpo_loss(new, old, scores, beta=0.04, mask_zero_variance=True)
    keep = torch.tensor([[True] * 4, [False] * 4])
    expect = obj.ppo_clip_loss(new, old, adv, 0.2, mask=keep) + 0.04 * obj.grpo_kl(new, old)[0].mean()
    assert masked.item() == pytest.approx(expect.item())
    assert masked.item() != pytest.approx(full.item())


def test_grpo_first_epoch_gradient_has_no_kl_term():
    scores = torch.tensor([[1.0, 0.0, 0.0]])
    old = torch.log_softmax(torch.tensor([[0.1, 0.2, 0.3]]), -1)
    g_kl = grad_wrt(lambda x: obj.grpo_loss(x, old, scores, beta=0.04), old)
    g_no = grad_wrt(lambda x: obj.grpo_loss(x, old, scores, beta=0.0), old)
    assert torch.allclose(g_kl, g_no)


# ------------------------------------------------------------------------ bad input


@pytest.mark.parametrize("eta", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_eta_raises(eta):
    with pytest.raises(ValueError, match="eta"):
        obj.tpo_target(torch.zeros(1, 3), torch.zeros(1, 3), eta=eta)
    with pytest.raises(ValueError, match="eta"):
        obj.dg_loss(torch.zeros(3), torch.zeros(3), eta=eta)


def test_k_below_two_raises():
    with pytest.raises(ValueError, match="K >= 2.*K = 1"):
        obj.standardize_scores(torch.zeros(4, 1))
    with pytest.raises(ValueError, match="K >= 2"):
        obj.tpo_target(torch.zeros(4, 1), torch.zeros(4, 1))
    with pytest.raises(ValueError, match="K >= 2"):
        obj.tpo_loss(torch.zeros(4, 1), torch.ones(4, 1))


def test_nan_scores_raise():
    with pytest.raises(ValueError, match="scores must be finite.*nan"):
        obj.standardize_scores(torch.tensor([[1.0, float("nan")]]))
    with pytest.raises(ValueError, match="scores must be finite"):
        obj.grpo_advantages(torch.tensor([[1.0, float("inf")]]))
    with pytest.raises(ValueError, match="advantages must be finite"):
        obj.reinforce_loss(torch.zeros(2), torch.tensor([0.0, float("nan")]))


def test_wrong_shapes_raise():
    with pytest.raises(ValueError, match=r"shape \[n_groups, K\].*\(5,\)"):
        obj.standardize_scores(torch.zeros(5))
    with pytest.raises(ValueError, match=r"q must have the same shape as logp \(2, 3\); got \(2, 4\)"):
        obj.tpo_loss(torch.zeros(2, 3), torch.zeros(2, 4))
    with pytest.raises(ValueError, match="mask must be a bool"):
        obj.standardize_scores(torch.zeros(2, 3), mask=torch.ones(2, 3))
    with pytest.raises(ValueError, match="beta"):
        obj.grpo_loss(torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(1, 2), beta=-1.0)
    with pytest.raises(ValueError, match="clip_range"):
        obj.ppo_clip_loss(torch.zeros(2), torch.zeros(2), torch.zeros(2), clip_range=0)


def test_grpo_per_token_form_shares_each_candidates_advantage_with_its_tokens():
    torch.manual_seed(1)
    scores = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    old = -torch.rand(2, 3, 4)
    new = old + 0.3 * torch.randn(2, 3, 4)
    adv = obj.grpo_advantages(scores).unsqueeze(-1).expand(2, 3, 4)
    expect = obj.ppo_clip_loss(new, old, adv, 0.2) + 0.04 * obj.grpo_kl(new, old).mean()
    assert obj.grpo_loss(new, old, scores).item() == pytest.approx(expect.item())
    keep = torch.tensor([[True] * 3, [False] * 3]).unsqueeze(-1).expand(2, 3, 4)
    masked = obj.ppo_clip_loss(new, old, adv, 0.2, mask=keep) + 0.04 * obj.grpo_kl(new, old)[0].mean()
    assert obj.grpo_loss(new, old, scores, mask_zero_variance=True).item() == pytest.approx(masked.item())
    with pytest.raises(ValueError, match=r"must have shape \(2, 3\) or \(2, 3\) \+ \(T,\)"):
        obj.grpo_loss(new[:, :2], old[:, :2], scores)
