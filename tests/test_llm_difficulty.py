"""The LLM difficulty dial: string reversal (task, env, held-out split), the dial's levels, the
start's reward spread, and the study end to end at toy size."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import tpo_gym  # noqa: F401  (registers the ids)
from tpo_gym.prompts import StringReversalTask


def test_reversal_prompts_answers_and_exact_match():
    task = StringReversalTask(length=6, size=50, seed=3)
    assert len(task) == 50
    for i in range(50):
        text = task.prompt(i)
        assert text.startswith("rev ") and text.endswith("=") and len(text) == 4 + 6 + 1
        assert task.answer(i) == text[4:-1][::-1]
        assert task.score(i, task.answer(i) + " ") == 1.0
        assert task.score(i, task.answer(i)[:-1]) == 0.0
        assert task.metadata(i) == {"length": 6, "split": "train"}


def test_held_out_strings_never_appear_in_train_for_any_length_range():
    test7 = set(StringReversalTask(length=7, split="test")._strings)
    assert len(test7) == 200
    # The mixture's test split holds each length's own test strings, whatever the range.
    assert test7 <= set(StringReversalTask(length=(3, 10), split="test")._strings)
    for train in (StringReversalTask(length=7), StringReversalTask(length=(2, 12))):
        assert not test7 & set(train._strings)
    # A short length has few strings: the train split still avoids every test string.
    short_test = set(StringReversalTask(length=2, test_size=300, split="test")._strings)
    short_train = StringReversalTask(length=2, test_size=300, size=2000)._strings
    assert not short_test & set(short_train) and len(short_test) == 300
    mixed = StringReversalTask(length=(2, 12), size=5000)
    lengths = np.array([mixed.metadata(i)["length"] for i in range(len(mixed))])
    assert lengths.min() == 2 and lengths.max() == 12
    assert all(200 < (lengths == n).sum() < 700 for n in range(2, 13))  # about uniform
    both = StringReversalTask(length=4, split="all", size=100)
    assert len(both) == 200 + 100


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(length=0), "length"),
        (dict(length=(5, 3)), "min <= max"),
        (dict(length=(1, 2, 3)), r"\(min, max\) pair"),
        (dict(alphabet="a"), "alphabet"),
        (dict(alphabet="a b"), "alphabet"),
        (dict(split="val"), "split"),
        (dict(length=2, test_size=400), "at most half the 676 strings"),
    ],
)
def test_bad_reversal_settings_name_the_value(kwargs, match):
    with pytest.raises(ValueError, match=match):
        StringReversalTask(**kwargs)


def test_registered_env_passes_the_checker_and_scores_candidates():
    env = gym.make("StringReversal-v0", length=5)
    check_env(env.unwrapped)
    obs, info = env.reset(seed=0)
    assert env.unwrapped.action_space.max_length == 9  # the answer plus 4 characters
    scores = env.unwrapped.score_candidates([info["answer"], "zzzzz", info["answer"][::-1]])
    assert scores[0] == 1.0 and scores[1] == 0.0
    _, reward, terminated, _, step_info = env.step(info["answer"])
    assert reward == 1.0 and terminated and step_info["correct"]


def test_dial_levels_resolve_to_one_length_and_share_the_model_task():
    from zoo.paper.llm.pretrain import SPARSE_TASKS, model_task, sparse_task

    level = sparse_task("reversal@9")
    assert level.train_kwargs == {"length": 9} and level.max_new_tokens == 13
    assert level.make("test").unwrapped.source.split == "test"
    assert model_task("reversal@9") == "reversal" and model_task("arithmetic") == "arithmetic"
    assert sparse_task("arithmetic") is SPARSE_TASKS["arithmetic"]
    for bad in ("reversal@x", "arithmetic@3", "nonesuch"):
        with pytest.raises(ValueError, match="BASE@LEVEL"):
            sparse_task(bad)


def test_start_spread_counts_groups_without_reward_spread(tiny_path):
    from zoo.paper.llm.difficulty import start_spread

    # An untrained model never reverses 9 letters: every group is all zero.
    got = start_spread(tiny_path, 9, k=4, n_prompts=6, seed=0)
    assert got == {"seed": 0, "zero_spread": 1.0, "all_zero": 1.0, "sampled_reward": 0.0}


def test_study_cli_refuses_reported_seeds_among_tuning_seeds_and_lengths_off_the_model():
    from zoo.paper.llm import difficulty

    with pytest.raises(SystemExit):
        difficulty.main(["--seeds", "0", "100", "--tune-seeds", "100"])
    with pytest.raises(SystemExit):
        difficulty.main(["--levels", "5", "14"])


def test_study_end_to_end_tunes_on_other_seeds_and_reports_every_level(tmp_path, tiny_path, monkeypatch):
    """Two levels, two methods, toy size, with a random tiny model as the start (the real
    start model is pre-trained by zoo.paper.llm.pretrain)."""
    from pathlib import Path

    from zoo.paper.llm import difficulty, pretrain, study

    monkeypatch.setattr(pretrain, "pretrained_lm", lambda task, **kw: Path(tiny_path))
    (Path(tiny_path) / "sft_report.json").write_text(json.dumps(
        {"parameters": 1, "steps": 0, "val_accuracy": 0.0, "config": {}}))
    calls = []
    real_run_one = study.run_one
    monkeypatch.setattr(study, "run_one", lambda m, cfg, s, c, w: calls.append((m, cfg["task"], cfg["lr"], s))
                        or real_run_one(m, cfg, s, c, w))
    argv = ["--levels", "3", "6", "--methods", "tpo", "trl_targetpo", "--lrs", "1e-4", "1e-3",
            "--tune-seeds", "100", "--seeds", "0", "1", "--steps", "2", "--eval-every", "1",
            "--n-eval", "4", "--spread-prompts", "4", "--out", str(tmp_path / "out"),
            "--cache", str(tmp_path / "cache")]
    result = difficulty.main(argv)
    tuned = [c for c in calls if c[3] == 100]
    assert {c[1] for c in tuned} == {"reversal@6"}  # the middle level of (3, 6) by default
    assert len(tuned) == 4 and {c[2] for c in tuned} == {1e-4, 1e-3}
    reported = [c for c in calls if c[3] != 100]
    assert {(c[0], c[1], c[3]) for c in reported} == {
        (m, f"reversal@{lv}", s) for m in ("tpo", "trl_targetpo") for lv in (3, 6) for s in (0, 1)}
    assert all(c[2] == result["lrs"][c[0]] for c in reported)  # frozen after tuning
    for level in ("3", "6"):
        row = result["levels"][level]
        assert len(row["start_spread"]) == 2 and row["start_spread"][0]["seed"] == 0
        for m in ("tpo", "trl_targetpo"):
            s = row["methods"][m]
            assert set(s["start_by_seed"]) == set(s["final_by_seed"]) == {0, 1}
            assert s["steps"] == [0, 1, 2]
    out = tmp_path / "out"
    assert json.loads((out / "llm-difficulty.json").read_text())["runs"] == 4 + 8
    md = (out / "llm-difficulty.md").read_text()
    assert "| 3 |" in md and "| 6 |" in md and "length 6" in md
    assert (out / "llm-difficulty.png").stat().st_size > 10_000
    # A second call reads every run and the start's spread from the cache: the same report.
    again = difficulty.main(argv)
    assert again["levels"] == result["levels"] and again["lrs"] == result["lrs"]


def test_cached_only_reports_a_study_under_way(tmp_path, tiny_path, monkeypatch):
    """A study whose tuning is partly cached: a method with its whole grid gets its levels,
    one with part of it only its tuning row; nothing is trained or sampled."""
    from pathlib import Path

    from zoo.paper.llm import difficulty, pretrain, study

    monkeypatch.setattr(pretrain, "pretrained_lm", lambda task, **kw: Path(tiny_path))
    (Path(tiny_path) / "sft_report.json").write_text(json.dumps(
        {"parameters": 1, "steps": 0, "val_accuracy": 0.0, "config": {}}))
    common = ["--levels", "3", "6", "--lrs", "1e-4", "3e-4", "--tune-seeds", "100", "--seeds", "0",
              "--steps", "1", "--eval-every", "1", "--n-eval", "2", "--spread-prompts", "2",
              "--out", str(tmp_path / "out"), "--cache", str(tmp_path / "cache")]
    difficulty.main([*common, "--methods", "tpo"])  # tpo: tuned and run at both levels
    # grpo: one of its two grid points cached (a study stopped during grpo's tuning).
    shape = tmp_path / "cache" / "llm" / "reversal@6" / "steps1_b8_k8"
    run = json.loads((shape / "tpo__lr0.0001__seed100.json").read_text())
    (shape / "grpo__lr0.0001__seed100.json").write_text(json.dumps({**run, "method": "grpo"}))
    for name in ("run_ours", "run_trl"):
        monkeypatch.setattr(study, name, lambda *a: pytest.fail("trained"))
    monkeypatch.setattr(difficulty, "start_spread", lambda *a: pytest.fail("sampled"))
    result = difficulty.main([*common, "--methods", "tpo", "grpo", "--cached-only"])
    assert set(result["lrs"]) == {"tpo"} and set(result["tuning"]) == {"tpo", "grpo"}
    assert all(set(row["methods"]) == {"tpo"} for row in result["levels"].values())
    md = (tmp_path / "out" / "llm-difficulty.md").read_text()
    assert "| 6 |" in md and "- (grid not complete) |" in md
