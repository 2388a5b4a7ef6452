"""benchmarks.sb3_fps: every env of the gym_defaults table, PPO measured in the same run."""

from __future__ import annotations

import json

import pytest

from benchmarks import sb3_fps


def test_each_env_and_n_envs_gets_a_ratio_against_ppo_of_the_same_run(tmp_path):
    out = tmp_path / "fps.json"
    result = sb3_fps.main(["--steps", "300", "--envs", "1", "2", "--env-ids", "CartPole-v1", "IdentityEnv-10",
                           "--agents", "TPO", "--out", str(out)])
    assert json.loads(out.read_text()) == result
    assert set(result["runs"]) == {"CartPole-v1", "IdentityEnv-10"}
    for by_n in result["runs"].values():
        assert set(by_n) == {"1", "2"}
        for runs in by_n.values():
            assert set(runs) == {"PPO", "TPO"} and runs["PPO"]["speed_vs_ppo"] == 1.0
            assert runs["TPO"]["env_steps"] >= 300 and runs["TPO"]["speed_vs_ppo"] > 0
    worst = result["worst"]["TPO"]
    every = [runs["TPO"]["speed_vs_ppo"] for by_n in result["runs"].values() for runs in by_n.values()]
    assert worst["speed_vs_ppo"] == min(every)
    assert worst["meets_goal_everywhere"] == (min(every) >= 0.667)


def test_the_ratio_is_ppos_time_per_env_step_over_the_agents():
    runs = {"PPO": {"seconds": 2.0, "env_steps": 1000}, "TPO": {"seconds": 3.0, "env_steps": 1200}}
    sb3_fps.speed_ratios(runs)
    assert runs["TPO"]["speed_vs_ppo"] == round((2.0 / 1000) / (3.0 / 1200), 3) == 0.8
    rows = {"A": {"1": {**runs}}, "B": {"8": {"PPO": runs["PPO"], "TPO": {**runs["TPO"], "speed_vs_ppo": 0.5}}}}
    assert sb3_fps.worst_ratios(rows)["TPO"] == {"speed_vs_ppo": 0.5, "env": "B", "n_envs": 8, "meets_goal_everywhere": False}


def test_a_variant_is_timed_beside_the_defaults_with_its_keyword_arguments(tmp_path, monkeypatch):
    built = []
    real = sb3_fps.AGENTS["TPO"]

    def spy(*args, **kwargs):
        built.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setitem(sb3_fps.AGENTS, "TPO", spy)
    result = sb3_fps.main(["--steps", "200", "--envs", "1", "--env-ids", "IdentityEnv-10", "--agents", "TPO",
                           "--variant", "TPO-2critics", "TPO", '{"critic_kwargs": {"n_critics": 2}}',
                           "--out", str(tmp_path / "fps.json")])
    runs = result["runs"]["IdentityEnv-10"]["1"]
    assert set(runs) == {"PPO", "TPO", "TPO-2critics"} and runs["TPO-2critics"]["speed_vs_ppo"] > 0
    assert [k.get("critic_kwargs") for k in built] == [None, {"n_critics": 2}]
    assert result["variants"] == {"TPO-2critics": {"agent": "TPO", "kwargs": {"critic_kwargs": {"n_critics": 2}}}}
    assert result["worst"]["TPO-2critics"]["env"] == "IdentityEnv-10"
    for bad, message in ((["PPO", "TPO", "{}"], "is taken"), (["X", "SAC", "{}"], "is not one of"),
                         (["X", "TPO", "{"], "is not JSON"), (["X", "TPO", "[1]"], "JSON object")):
        with pytest.raises(SystemExit, match=message):
            sb3_fps.main(["--variant", *bad, "--out", str(tmp_path / "x.json")])
