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
    result = llm_recipe.main(
        [
            "--model",
            tiny_path,
            "--task",
            "tiny_arithmetic",
            "--k",
            "4",
            "--prompts",
            "2",
            "--micro-prompts",
            "1",
            "--steps",
            "2",
            "--max-new-tokens",
            "3",
            "--lora-rank",
            "4",
            "--lr",
            "1e-3",
            "--eval-size",
            "4",
            "--cpu",
            "--out",
            str(out),
        ]
    )
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


GSM8K_ROWS = [  # GSM8K's own format: the worked answer ends with "#### <number>"
    ("Tom has 3 apples and buys 4 more. How many apples does he have?", "3 + 4 = 7\n#### 7"),
    ("A box holds 6 pens. How many pens are in 2 boxes?", "6 * 2 = 12\n#### 12"),
    ("Sam had 10 cards and gave away 3. How many are left?", "10 - 3 = 7\n#### 7"),
    ("Each of 5 cats has 4 legs. How many legs in all?", "5 * 4 = 20\n#### 20"),
    ("Ann reads 9 pages a day for 2 days. How many pages?", "9 * 2 = 18\n#### 18"),
    ("A bus has 20 seats and 15 are taken. How many are free?", "20 - 15 = 5\n#### 5"),
]


def write_gsm8k_parquet(path, rows):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([{"question": q, "answer": a} for q, a in rows]), path)
    return str(path)


@pytest.mark.slow
def test_gpu_recipe_runs_gsm8k_from_parquet_on_cpu_and_reports_throughput(
    tmp_path, tiny_path, capsys
):
    """The paper's GSM8K command at toy size: the same code path as on a GPU but the device
    and the generation backend (vLLM there when installed; here no CUDA, so transformers)."""
    from zoo.paper.llm import recipe as llm_recipe

    train = write_gsm8k_parquet(tmp_path / "train.parquet", GSM8K_ROWS)
    test = write_gsm8k_parquet(tmp_path / "test.parquet", GSM8K_ROWS[:3])
    out = tmp_path / "gsm8k"
    result = llm_recipe.main(
        [
            "--model",
            tiny_path,
            "--task",
            "gsm8k",
            "--train-file",
            train,
            "--eval-file",
            test,
            "--k",
            "4",
            "--prompts",
            "2",
            "--micro-prompts",
            "1",
            "--steps",
            "3",
            "--max-new-tokens",
            "4",
            "--lora-rank",
            "4",
            "--lr",
            "1e-3",
            "--eval-size",
            "3",
            "--cpu",
            "--out",
            str(out),
        ]
    )
    printed = capsys.readouterr().out
    saved = json.loads((out / "llm_recipe.json").read_text())
    assert saved["config"]["vllm"] == "auto" and saved["config"]["use_vllm"] is False
    assert saved["config"]["generation"] == "transformers generate (no CUDA GPU)"
    for algo in ("tpo", "grpo"):
        res = saved["methods"][algo]
        assert [row["step"] for row in res["step_log"]] == [1, 2, 3]
        for row in res["step_log"]:
            # 2 prompts x K = 4 completions per step, each 1 to 4 generated tokens
            assert row["completions"] == 8 and 8 <= row["generated_tokens"] <= 32
            assert 0.0 <= row["reward"] <= 1.0 and row["seconds"] > 0
        speed = res["throughput"]
        assert speed["measured_steps"] == [2, 3] and speed["completions"] == 24
        assert speed["completions_per_s"] == pytest.approx(
            16 / sum(r["seconds"] for r in res["step_log"][1:])
        )
        assert speed["generated_tokens_per_s"] > 0 and speed["seconds_per_step"] > 0
        assert 0.0 <= res["eval_accuracy"] <= 1.0 and res["eval_size"] == 3
        assert f"[llm_recipe] {algo.upper()} step 3/3: reward" in printed
        assert f"[llm_recipe] {algo.upper()}: throughput" in printed
    assert result["methods"]["tpo"]["throughput"] == saved["methods"]["tpo"]["throughput"]
    table = (out / "llm_recipe.md").read_text()
    assert "generated tokens/s" in table and "| TPO |" in table and "| GRPO |" in table


def test_recipe_picks_vllm_when_it_can(monkeypatch):
    from zoo.paper.llm import recipe

    monkeypatch.setattr(recipe, "vllm_importable", lambda: (True, None))
    assert recipe.generation_backend("auto", cuda=True) == (True, "vLLM, colocate mode")
    assert recipe.generation_backend("on", cuda=True)[0] is True
    assert recipe.generation_backend("off", cuda=True)[0] is False
    assert recipe.generation_backend("auto", cuda=False)[0] is False  # vLLM needs the GPU
    with pytest.raises(ValueError, match="needs a CUDA GPU"):
        recipe.generation_backend("on", cuda=False)
    monkeypatch.setattr(recipe, "vllm_importable", lambda: (False, "ModuleNotFoundError: vllm"))
    use, why = recipe.generation_backend("auto", cuda=True)
    assert use is False and "vllm not importable" in why
    with pytest.raises(ValueError, match="import vllm failed"):
        recipe.generation_backend("on", cuda=True)


def test_recipe_trainer_config_turns_on_colocated_vllm(tiny_path, monkeypatch, tmp_path):
    """What the GPU run hands TRL when vLLM is there (checked without a GPU: only the config)."""
    from zoo.paper.llm import recipe

    args = recipe.parse_args(["--model", tiny_path, "--cpu"])
    args.use_vllm = True  # as generation_backend decides on a GPU with vllm installed
    config = recipe.trainer_config("tpo", args, tmp_path)
    assert (config.use_vllm, config.vllm_mode, config.vllm_gpu_memory_utilization) == (
        True,
        "colocate",
        0.3,
    )
    assert (
        config.num_generations,
        config.per_device_train_batch_size,
        config.gradient_accumulation_steps,
    ) == (16, 16, 16)


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
    assert (defaults.k, defaults.prompts, defaults.lr, defaults.lora_rank, defaults.beta) == (
        16,
        16,
        1e-5,
        32,
        1e-3,
    )
    assert defaults.vllm == "auto"
    for forced in (
        ["--vllm", "on"],
        ["--use-vllm"],
    ):  # forced vLLM on the CPU: an error, no fallback
        with pytest.raises(SystemExit):
            llm_recipe.parse_args(["--model", tiny_path, *forced, "--cpu"])
        assert "--vllm on needs a CUDA GPU" in capsys.readouterr().err
    args = llm_recipe.parse_args(
        ["--model", tiny_path, "--task", "gsm8k", "--train-file", str(tmp_path / "no.parquet")]
    )
    with pytest.raises(FileNotFoundError, match="no.parquet"):
        llm_recipe.make_envs(args)
