"""The exact tabular updates reproduce the closed-form beta coefficients (docs/algorithms.md, section 7.1)."""

import json
import math

import numpy as np
import pytest
import torch

from zoo.paper import tabular
from zoo.paper.reproduce import main as reproduce_main

A = 10
LAM = math.exp(A / math.sqrt(A - 1))

BETAS = {
    "ce": lambda p: 1.0,
    "pg": lambda p: p,
    "dg": lambda p: p / (1 + p),
    "grpo": lambda p: math.sqrt(p / (1 - p)),
    "tpo": lambda p: p * (LAM - 1) / (1 - p + LAM * p),
}


def context_with_p(p: float, correct: int = 2, seed: int = 0):
    """Logits of one context whose correct action has probability p (others random)."""
    rng = np.random.default_rng(seed)
    other = rng.normal(size=A - 1)
    other_probs = np.exp(other) / np.exp(other).sum() * (1 - p)
    probs = np.insert(other_probs, correct, p)
    logits = torch.as_tensor(np.log(probs))[None]
    rewards = torch.zeros(1, A, dtype=torch.float64)
    rewards[0, correct] = 1.0
    return logits, rewards, torch.softmax(logits, -1)[0]


@pytest.mark.parametrize("method", sorted(BETAS))
@pytest.mark.parametrize("p", [0.02, 0.1, 0.5, 0.9])
def test_exact_update_is_beta_times_e_y_minus_pi(method, p):
    logits, rewards, pi = context_with_p(p, seed=int(p * 100))
    g = tabular.exact_direction(method, logits, rewards)[0]
    e_y = rewards[0]
    expected = BETAS[method](p) * (e_y - pi)
    assert torch.allclose(g, expected, atol=1e-10), (g, expected)


def test_paper_values_at_p_point_one():
    logits, rewards, pi = context_with_p(0.1)
    e_y = rewards[0]
    direction = (e_y - pi) / (e_y - pi).norm()
    betas = {
        m: (tabular.exact_direction(m, logits, rewards)[0] @ direction).item() / (e_y - pi).norm().item()
        for m in ("tpo", "dg", "grpo")
    }
    assert LAM == pytest.approx(28.03, abs=0.01)
    assert betas["tpo"] == pytest.approx(0.73, abs=0.005)
    assert betas["dg"] == pytest.approx(0.09, abs=0.005)
    assert betas["grpo"] == pytest.approx(0.33, abs=0.005)


def test_normalized_step_has_length_alpha_per_seed_and_zero_stays():
    g = torch.tensor([[[3.0, 4.0]], [[0.0, 0.0]]])
    out = tabular.normalized_step(torch.zeros_like(g), g, 0.1)
    assert out[0].norm().item() == pytest.approx(0.1)
    assert torch.equal(out[1], torch.zeros(1, 2))


def test_multi_context_study_orders_methods_like_the_paper():
    curves = {m: tabular.run_multi_context(m, seeds=[0, 1], steps=300) for m in tabular.MULTI_METHODS}
    final = {m: c.error[:, -1].mean() for m, c in curves.items()}
    assert final["ce"] < final["tpo"] < min(final["dg"], final["grpo"], final["pg"])
    mis = {m: c.misalignment.mean() for m, c in curves.items()}
    assert mis["ce"] == pytest.approx(0.0, abs=1e-12)
    assert mis["tpo"] < min(mis["dg"], mis["grpo"], mis["pg"])


def test_single_context_study_tpo_learns(tmp_path):
    tpo = tabular.run_single_context("tpo", seeds=[0, 1, 2], steps=150)
    pg = tabular.run_single_context("pg", seeds=[0, 1, 2], steps=150)
    assert tpo.error[:, 0] == pytest.approx(0.99)
    assert tpo.error[:, -1].mean() < 0.01
    assert tpo.error[:, -1].mean() < pg.error[:, -1].mean()


def test_reproduce_cli_writes_json_png_markdown(tmp_path):
    result = reproduce_main(["tabular-multi", "--seeds", "2", "--steps", "20", "--out", str(tmp_path), "--quiet"])
    data = json.loads((tmp_path / "tabular-multi.json").read_text())
    assert data["experiment"] == "tabular-multi"
    assert set(data["methods"]) == {"ce", "pg", "dg", "grpo", "tpo"}
    for m in data["methods"].values():
        assert {"final_error", "final_error_se", "steps_to_1pct", "mean_misalignment", "curves"} <= set(m)
        assert len(m["curves"]["error_mean"]) == 21
    assert data["methods"]["tpo"]["final_error"] == pytest.approx(result["methods"]["tpo"]["final_error"])
    png = (tmp_path / "tabular-multi.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    md = (tmp_path / "tabular-multi.md").read_text()
    assert "| TPO |" in md and "Paper:" in md


def test_reproduce_cli_rejects_bad_seeds(capsys):
    with pytest.raises(SystemExit):
        reproduce_main(["tabular-single", "--seeds", "0"])
    assert "expected a positive integer, got 0" in capsys.readouterr().err
