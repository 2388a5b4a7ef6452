"""The GPU recipe (zoo/llm_recipe.py) runs end to end on CPU at toy size on the tiny model."""

import json
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    from zoo.paper.llm.tiny import build_tiny_causal_lm

    path = tmp_path_factory.mktemp("tiny-recipe")
    build_tiny_causal_lm(path, seed=0)
    return str(path)


@pytest.mark.slow
def test_recipe_trains_tpo_and_grpo_with_lora_at_toy_size(tmp_path, tiny_path):
    from zoo.paper.llm import recipe as llm_recipe

    out = tmp_path / "recipe"
    # 2 prompts per step in micro-batches of 1 prompt (gradient accumulation 2), LoRA, KL to the
    # reference: the paper's structure at toy size.
    result = llm_recipe.main([
        "--model", tiny_path, "--task", "tiny_arithmetic", "--k", "4", "--prompts", "2",
        "--micro-prompts", "1", "--steps", "2", "--max-new-tokens", "3", "--lora-rank", "4",
        "--lr", "1e-3", "--eval-size", "4", "--cpu", "--out", str(out),
    ])
    saved = json.loads((out / "llm_recipe.json").read_text())
    assert saved["config"]["k"] == 4 and saved["config"]["beta"] == pytest.approx(1e-3)
    for algo in ("tpo", "grpo"):
        res = result["methods"][algo]
        assert res["steps"] == [1, 2]
        assert all(0.0 <= r <= 1.0 for r in res["logs"]["reward"])
        assert 0.0 <= res["eval_accuracy"] <= 1.0 and res["eval_size"] == 4
        assert (out / algo / "adapter_config.json").exists()  # a LoRA adapter was trained and saved
    assert all(h is not None for h in result["methods"]["tpo"]["logs"]["tpo/target_entropy"])
    assert "| TPO |" in (out / "llm_recipe.md").read_text()


def test_recipe_rejects_bad_arguments(tmp_path, tiny_path, capsys):
    from zoo.paper.llm import recipe as llm_recipe

    with pytest.raises(SystemExit):
        llm_recipe.parse_args(["--model", str(tmp_path / "missing")])
    # The error says how to get a model folder offline, not only that it is missing.
    assert "hf download" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        llm_recipe.parse_args(["--model", tiny_path, "--k", "1"])
    with pytest.raises(SystemExit):
        llm_recipe.parse_args(["--model", tiny_path, "--prompts", "16", "--micro-prompts", "3"])
    args = llm_recipe.parse_args(["--model", tiny_path, "--task", "gsm8k"])
    with pytest.raises(ValueError, match="--train-file"):
        llm_recipe.make_envs(args)
    defaults = llm_recipe.parse_args(["--model", tiny_path])
    assert (defaults.k, defaults.prompts, defaults.lr, defaults.lora_rank, defaults.beta) == (16, 16, 1e-5, 32, 1e-3)
