"""Small pretrained LMs (zoo.paper.llm.pretrain), the sparse tasks, and the LLM RLVR study."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

import tpo_gym  # noqa: F401
from tpo_gym.prompts import ArithmeticTask, ReasoningGymTask

pytest.importorskip("transformers")


# ----------------------------------------------------------------------------- tasks


def test_arithmetic_splits_are_disjoint_and_exact_match():
    train = ArithmeticTask(split="train", test_size=300)
    test = ArithmeticTask(split="test", test_size=300)
    every = ArithmeticTask(split="all", test_size=300)
    assert len(test) == 300 and len(train) + len(test) == len(every) == 90 * 90
    assert not {train.prompt(i) for i in range(len(train))} & {test.prompt(i) for i in range(300)}
    i = next(i for i in range(len(test)) if test.metadata(i)["a"] + test.metadata(i)["b"] >= 100)
    a, b = test.metadata(i)["a"], test.metadata(i)["b"]
    assert test.prompt(i) == f"{a}+{b}=" and test.answer(i) == str(a + b)
    assert test.score(i, f" {a + b} ") == 1.0
    assert test.score(i, f"0{a + b}") == 0.0 and test.score(i, f"{a + b}!") == 0.0
    assert test.score(i, str(a + b + 1)) == 0.0


def test_arithmetic_operations_and_sizes():
    task = ArithmeticTask(digits=1, operations="-*", split="all", test_size=10)
    ops = {task.metadata(i)["op"] for i in range(len(task))}
    assert ops == {"-", "*"} and len(task) == 2 * 100
    m = task.metadata(0)
    assert task.answer(0) == str(m["a"] - m["b"] if m["op"] == "-" else m["a"] * m["b"])
    assert len(ArithmeticTask(size=7)) == 7
    assert ArithmeticTask(seed=3).prompt(0) == ArithmeticTask(seed=3).prompt(0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(digits=4), "digits must be an int in 1..3, got 4"),
        (dict(operations="+/"), "operations must be a non-empty string"),
        (dict(split="val"), "split must be one of"),
        (dict(digits=1, test_size=100), "test_size must be less than the 100 unique problems"),
        (dict(size=10**6), "size must be at most 7600"),
    ],
)
def test_arithmetic_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ArithmeticTask(**kwargs)


def test_arithmetic_env_registered():
    from gymnasium.utils.env_checker import check_env

    env = gym.make("Arithmetic-v0", split="test", test_size=50)
    assert len(env.unwrapped.prompts) == 50
    check_env(env.unwrapped, skip_render_check=True)
    obs, _ = env.reset(seed=0)
    _, reward, terminated, _, _ = env.step(env.unwrapped.answer)
    assert reward == 1.0 and terminated


def test_reasoning_gym_split_by_question():
    pytest.importorskip("reasoning_gym")
    cfg = {"min_word_len": 3, "max_word_len": 4}
    every = ReasoningGymTask("spell_backward", size=400, config=cfg)
    train = ReasoningGymTask("spell_backward", size=400, config=cfg, split="train", test_size=50)
    test = ReasoningGymTask("spell_backward", size=400, config=cfg, split="test", test_size=50)
    questions = [every.prompt(i) for i in range(len(every))]
    assert len(set(questions)) < len(questions)  # the dataset repeats words: the case to handle
    test_q = {test.prompt(i) for i in range(len(test))}
    train_q = {train.prompt(i) for i in range(len(train))}
    assert len(test_q) == 50 and not test_q & train_q
    assert len(train) + len(test) == len(every)
    with pytest.raises(ValueError, match="split must be one of"):
        ReasoningGymTask("spell_backward", size=10, split="dev")
    with pytest.raises(ValueError, match="test_size must be less than"):
        ReasoningGymTask("spell_backward", size=10, split="test", test_size=10)


# ----------------------------------------------------------------------------- pretraining

TINY = dict(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_steps=20,
            eval_every=10, target_accuracy=1.0, val_size=20, batch_size=16)


def test_pretrain_trains_saves_and_caches(tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from zoo.paper.llm import pretrain

    calls = []
    real = pretrain.pretrain_causal_lm
    monkeypatch.setattr(pretrain, "pretrain_causal_lm",
                        lambda *a, **kw: calls.append(a) or real(*a, **kw))
    path = pretrain.pretrained_lm("arithmetic", cache_dir=tmp_path, log=None, **TINY)
    report = json.loads((path / "sft_report.json").read_text())
    assert report["steps"] == 20 and [c["step"] for c in report["curve"]] == [10, 20]
    assert report["curve"][-1]["loss"] < 4.5 and not report["reached_target"]  # < log(V)
    assert report["config"]["hidden_size"] == 32
    AutoModelForCausalLM.from_pretrained(path)
    assert AutoTokenizer.from_pretrained(path).chat_template
    # Cached: the same config returns the same folder without training again.
    assert pretrain.pretrained_lm("arithmetic", cache_dir=tmp_path, log=None, **TINY) == path
    assert len(calls) == 1
    other = pretrain.pretrained_lm("arithmetic", cache_dir=tmp_path, log=None, **{**TINY, "seed": 1})
    assert other != path and len(calls) == 2
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".arith") and p.is_dir()]


def test_pretrain_crash_leaves_no_folder(tmp_path, monkeypatch):
    from zoo.paper.llm import pretrain

    def crash(config, out, log=None):
        (out / "config.json").write_text("{}")
        raise KeyboardInterrupt

    monkeypatch.setattr(pretrain, "pretrain_causal_lm", crash)
    with pytest.raises(KeyboardInterrupt):
        pretrain.pretrained_lm("arithmetic", cache_dir=tmp_path, log=None, **TINY)
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == []


def test_sft_prompt_format_is_the_policys(arithmetic_lm):
    from tpo_agents import TPO
    from zoo.paper.llm.pretrain import _format

    env = gym.make("Arithmetic-v0")
    agent = TPO("CausalLMPolicy", env, batch_size=2, n_candidates=2,
                policy_kwargs={"model": str(arithmetic_lm)})
    prompt = env.unwrapped.prompts[0]
    tokenizer = agent.policy.tokenizer
    assert agent.policy.format_prompts([prompt]) == [_format(tokenizer, prompt)]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(task="sudoku"), "task must be one of"),
        (dict(hidden_size=0), "hidden_size must be an int >= 1"),
        (dict(target_accuracy=1.5), r"target_accuracy must be in \[0, 1\]"),
        (dict(learning_rate=0.0), "learning_rate must be > 0"),
    ],
)
def test_sft_config_errors(kwargs, message):
    from zoo.paper.llm.pretrain import SFTConfig

    with pytest.raises(ValueError, match=message):
        SFTConfig(**kwargs)


def test_default_model_has_partial_competence(arithmetic_lm):
    """The shipped recipe stops in the 5-40 % band the RL study needs."""
    report = json.loads((arithmetic_lm / "sft_report.json").read_text())
    assert report["reached_target"]
    assert 0.10 <= report["val_accuracy"] <= 0.40
    assert report["parameters"] > 500_000


def test_tpo_raises_held_out_accuracy_from_the_sft_start(arithmetic_lm, tmp_path):
    """RL does what SFT left: TPO on the sparse exact-match reward lifts held-out accuracy."""
    import torch

    from zoo.paper.llm.study import run_ours

    cfg = dict(task="arithmetic", steps=150, prompts=8, k=8, eval_every=50, n_eval=200,
               threads=1, lr=3e-5)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run = run_ours("tpo", cfg, str(arithmetic_lm), seed=0)
    finally:
        torch.set_num_threads(threads)
    accuracy = [c["accuracy"] for c in run["curve"]]
    assert [c["step"] for c in run["curve"]] == [0, 50, 100, 150]
    assert len(run["step_seconds"]) == len(run["rewards"]) == 150
    assert accuracy[-1] >= accuracy[0] + 0.05, accuracy


# ----------------------------------------------------------------------------- the study


def test_llm_study_end_to_end_and_resume(arithmetic_lm, model_cache, tmp_path, monkeypatch):
    from zoo.paper.llm import study as llm_study

    monkeypatch.setenv("TPO_CACHE_DIR", str(model_cache))
    argv = ["--task", "arithmetic", "--methods", "tpo", "grpo", "trl_targetpo", "trl_dr_grpo",
            "--lrs", "1e-5", "3e-5", "--lr", "grpo=1e-5", "--seeds", "2", "--steps", "2",
            "--eval-every", "1", "--n-eval", "8", "--prompts", "2", "--k", "2",
            "--out", str(tmp_path)]
    result = llm_study.main(argv)
    assert set(result["methods"]) == {"tpo", "grpo", "trl_targetpo", "trl_dr_grpo"}
    assert set(result["grid"]) == {"tpo", "trl_targetpo", "trl_dr_grpo"}  # grpo's lr was given
    tpo = result["methods"]["tpo"]
    assert tpo["seeds"] == [0, 1] and tpo["steps"] == [0, 1, 2]
    assert tpo["lr"] in (1e-5, 3e-5) and len(tpo["final_accuracy"]) == 2
    for suffix in (".json", ".md", ".png"):
        assert (tmp_path / f"llm-rlvr-arithmetic-steps2_b2_k2{suffix}").stat().st_size > 0
    assert "Verdict" in (tmp_path / "llm-rlvr-arithmetic-steps2_b2_k2.md").read_text()
    shape_dir = tmp_path / "cache" / "llm" / "arithmetic" / "steps2_b2_k2"
    every_run = sum(json.loads(p.read_text())["seconds"] for p in shape_dir.glob("*.json"))
    assert result["compute_seconds"] == pytest.approx(every_run, abs=0.1)  # each run counted once
    shape = tmp_path / "cache" / "llm" / "arithmetic" / "steps2_b2_k2"
    cached = sorted(p.name for p in shape.glob("*.json"))
    assert "tpo__lr1e-05__seed0.json" in cached and "grpo__lr1e-05__seed1.json" in cached
    again = llm_study.main([*argv, "--cached-only"])
    assert again["methods"] == result["methods"]
    # A cached run made with other settings is refused, not silently reused.
    with pytest.raises(ValueError, match="n_eval: cached 8, asked 4"):
        llm_study.main([*argv[:-2], "--n-eval", "4", "--out", str(tmp_path)])


def test_gpu_script_refuses_without_cuda_and_dry_runs_on_cpu(arithmetic_lm, model_cache,
                                                            tmp_path, monkeypatch, capsys):
    import torch

    from benchmarks import llm_gpu

    monkeypatch.setenv("TPO_CACHE_DIR", str(model_cache))
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit):
            llm_gpu.main(["--out", str(tmp_path / "gpu.json")])
        assert "no CUDA device is available" in capsys.readouterr().err
    result = llm_gpu.main(["--device", "cpu", "--steps", "1", "--eval-every", "1", "--n-eval",
                           "4", "--prompts", "2", "--k", "2", "--methods", "tpo", "trl_dapo",
                           "--out", str(tmp_path / "gpu.json")])
    assert set(result["methods"]) == {"tpo", "trl_dapo"}
    assert (tmp_path / "gpu.md").read_text().startswith("# LLM RLVR on CPU (dry run)")


@pytest.mark.parametrize("item", ["tpo", "tpo=fast", "tpo=-1", "sgd=1e-3"])
def test_llm_study_rejects_a_bad_lr_choice(item, tmp_path, capsys):
    from zoo.paper.llm import study as llm_study

    with pytest.raises(SystemExit):
        llm_study.main(["--lr", item, "--out", str(tmp_path)])
    assert f"got {item!r}" in capsys.readouterr().err


def test_the_verdict_compares_final_accuracy_and_speed_with_two_standard_errors():
    from zoo.paper.llm.study import verdict

    def method(finals, steps):
        import statistics

        return {"final_mean": statistics.fmean(finals), "final_se": statistics.stdev(finals) / len(finals) ** 0.5,
                "seeds": list(range(len(finals))), "steps_to_threshold": steps}

    tpo = method([0.41, 0.38, 0.40, 0.38, 0.47], [150, 300, 300, 250, 250])
    grpo = method([0.35, 0.39, 0.40, 0.40, 0.33], [450, 400, 400, 250, 400])
    text = verdict({"tpo": tpo, "grpo": grpo})
    assert "TPO and GRPO are not distinguishable here" in text  # +0.032 at s.e. 0.022
    assert "Steps to start + 0.10: TPO 250 +- 27, GRPO 380 +- 34" in text and "TPO gets there sooner" in text
    grpo["steps_to_threshold"] = [None, 400, 400, 250, 400]
    assert "Seeds reaching start + 0.10: TPO and GRPO 5/5 and 4/5." in verdict({"tpo": tpo, "grpo": grpo})
    assert verdict({"tpo": tpo}) == ""
    both = verdict({"tpo": tpo, "grpo": grpo, "trl_targetpo": grpo, "trl_dapo": tpo})
    assert "Through TRL: TargetPOTrainer and TRL's GRPOTrainer (dapo) are not distinguishable" in both
