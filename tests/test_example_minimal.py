"""The single-file reference examples/tpo_minimal.py learns Token Reversal (H = 4, terminal)."""

import importlib.util
from pathlib import Path

import pytest
import torch

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "tpo_minimal.py"


def _load_example():
    spec = importlib.util.spec_from_file_location("tpo_minimal_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_minimal_example_learns_token_reversal(capsys):
    torch.set_num_threads(1)
    example = _load_example()
    argv = ["--seed", "1", "--length", "4", "--vocab-size", "2", "--iterations", "50"]
    metrics = example.main(argv)
    out = capsys.readouterr().out
    assert "final exact-match" in out
    assert "iter   50" in out and "mean reward" in out
    assert metrics["iterations"] == 50
    assert metrics["exact_match"] >= 0.9  # greedy, fresh prompts
    assert metrics["train_exact_match"] >= 0.9  # the last sampled training batch
