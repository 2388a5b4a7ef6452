"""The gym-defaults benchmark on a tiny budget: outputs, the run cache, the rl-zoo3 conversion."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("yaml")
if importlib.util.find_spec("rl_zoo3") is None:
    pytest.skip("the ppo_zoo baseline reads rl-zoo3's ppo.yml (pip install -e '.[zoo]')", allow_module_level=True)

from benchmarks.gym_defaults import cli, config, report, runner  # noqa: E402
from benchmarks.harness import Run  # noqa: E402
from tpo_agents.rollout.critic import DEFAULT_N_STEP  # noqa: E402

METHODS = ("tpo", "grpo", "ppo_zoo")
ENVS = ("CartPole-v1", "IdentityEnv-10")
# 0.003 x the default budgets: CartPole 300 steps, IdentityEnv 30; evaluations at 0, N/2, N.
BUDGETS = {"CartPole-v1": 300, "IdentityEnv-10": 30}


def tiny_argv(out: Path, *extra: str) -> list[str]:
    return [
        "--envs", *ENVS, "LunarLander-v3",
        "--seeds", "1",
        "--workers", "1",  # in this process
        "--timesteps-scale", "0.003",
        "--eval-every-fraction", "0.5",
        "--n-eval-episodes", "2",
        "--out", str(out),
        "--quiet",
        *extra,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def gd():
    """The package's modules, with LunarLander skipped whether or not Box2D is installed
    here (its requirement is a module that does not exist)."""
    with pytest.MonkeyPatch.context() as mp:
        lunar = dataclasses.replace(config.ENVS["LunarLander-v3"], requires="_no_such_module_")
        mp.setitem(config.ENVS, "LunarLander-v3", lunar)
        yield SimpleNamespace(cli=cli, config=config, report=report, runner=runner, main=cli.main)


@pytest.fixture(scope="module")
def tiny(gd, tmp_path_factory):
    """One tiny benchmark run (2 envs x 3 methods x 1 seed), shared by the tests below."""
    out = tmp_path_factory.mktemp("gym_defaults")
    return out, gd.main(tiny_argv(out))


def test_tiny_run_writes_json_png_md_and_the_cache(gd, tiny):
    out, result = tiny
    data = json.loads((out / "gym_defaults.json").read_text())
    assert data == json.loads(json.dumps(result))
    assert data["benchmark"] == "gym_defaults"
    cfg = data["config"]
    assert cfg["envs"] == list(ENVS) and cfg["methods"] == list(METHODS)
    assert cfg["timesteps"] == BUDGETS and cfg["eval_every"] == {"CartPole-v1": 150, "IdentityEnv-10": 15}
    assert cfg["n_seeds"] == 1 and cfg["n_eval_episodes"] == 2

    # PPO-zoo's hyperparameters: rl-zoo3's CartPole entry, SB3 defaults on IdentityEnv.
    cart = cfg["hyperparameters"]["CartPole-v1"]["ppo_zoo"]
    assert cart["source"].startswith("rl-zoo3 ") and cart["zoo_key"] == "CartPole-v1"
    assert cart["n_envs"] == 8 and cart["normalize"] is False
    assert cart["ppo_kwargs"]["n_steps"] == 32 and cart["ppo_kwargs"]["learning_rate"] == "lin_0.001"
    assert {"n_timesteps", "policy"} <= set(cart["dropped"]) and "n_envs" not in cart["ppo_kwargs"]
    ident = cfg["hyperparameters"]["IdentityEnv-10"]["ppo_zoo"]
    assert ident["source"] == "no rl-zoo3 entry, SB3 defaults" and ident["ppo_kwargs"] == {}
    assert data["envs"]["IdentityEnv-10"]["ppo_zoo"] == "no rl-zoo3 entry, SB3 defaults"
    for env in ENVS:
        for method in ("tpo", "grpo"):
            assert cfg["hyperparameters"][env][method]["constructor_kwargs"] == {}

    assert list(data["envs"]) == list(ENVS)
    assert list(data["skipped"]) == ["LunarLander-v3"] and "_no_such_module_" in data["skipped"]["LunarLander-v3"]
    assert data["failures"] == [] and data["missing"] == []
    for env_name, env in data["envs"].items():
        budget = BUDGETS[env_name]
        assert env["timesteps"] == budget and set(env["methods"]) == set(METHODS)
        for method, m in env["methods"].items():
            assert m["steps"] == [0, budget // 2, budget], (env_name, method)  # one shared axis
            assert m["seeds"] == [0] and m["failures"] == []
            assert len(m["returns"]) == 1 and len(m["returns"][0]) == 3
            assert m["final_mean_return"] == m["mean"][-1] == m["returns"][0][-1]
            assert m["steps_to_threshold"] is None or m["steps_to_threshold"] in m["steps"]
            assert len(m["steps_to_threshold_per_seed"]) == 1 and len(m["seconds"]) == 1
            assert budget <= m["trained_timesteps"][0] <= budget + m["resolved"]["n_envs"]
            low, high = (1, 500) if env_name == "CartPole-v1" else (0, 100)
            assert all(low <= r <= high for r in m["returns"][0]), (env_name, method)
        assert env["methods"]["tpo"]["resolved"]["group_mode"] == "critic"  # TPO's own choice
        assert set(env["matches_ppo_zoo"]) == {"tpo", "grpo"}
        assert all(isinstance(v, bool) for v in env["matches_ppo_zoo"].values())
    assert data["envs"]["CartPole-v1"]["methods"]["ppo_zoo"]["resolved"]["n_envs"] == 8
    assert data["envs"]["IdentityEnv-10"]["methods"]["ppo_zoo"]["resolved"]["n_envs"] == 1
    tpo = data["summary"]["tpo"]
    assert tpo["compared"] == 2 and tpo["matches"] == sum(e["matches_ppo_zoo"]["tpo"] for e in data["envs"].values())

    png = (out / "gym_defaults.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000

    md = (out / "gym_defaults.md").read_text()
    for env_name in ENVS:
        rows = [line for line in md.splitlines() if line.startswith(f"| {env_name} |")]
        assert len(rows) == 3, env_name
        assert all(row.count("|") == 13 for row in rows)  # 12 columns
    assert "matches PPO-zoo |" in md
    assert re.search(rf"TPO with defaults matches PPO-zoo on {tpo['matches']} of 2 envs", md)
    assert "IdentityEnv-10: ppo_zoo: no rl-zoo3 entry, SB3 defaults" in md
    # CartPole's 300 steps are 0.003 x the 100,000 rl-zoo3 tuned PPO-zoo for: the page says so.
    assert "the budget here, 300 env steps, is 0.003 x the n_timesteps rl-zoo3 tuned this entry for (100,000)" in md
    assert "## Skipped envs" in md and "- LunarLander-v3: needs _no_such_module_" in md

    cache = out / "cache" / "gym_defaults"
    names = sorted(p.name for p in cache.glob("*.json"))
    assert names == sorted(f"{e}__{m}__seed0.json" for e in ENVS for m in METHODS)
    record = json.loads((cache / "CartPole-v1__ppo_zoo__seed0.json").read_text())
    assert record["spec"]["timesteps"] == 300 and record["spec"]["eval_every"] == 150
    assert record["spec"]["n_eval_episodes"] == 2
    assert record["spec"]["hyperparameters"] == cart
    assert record["returns"] == data["envs"]["CartPole-v1"]["methods"]["ppo_zoo"]["returns"][0]


def test_cached_runs_are_reused_without_training(gd, tiny, monkeypatch, tmp_path):
    out, first = tiny

    def no_training(*args, **kwargs):
        raise AssertionError("a cached run was trained again")

    monkeypatch.setattr(gd.runner, "run_job", no_training)
    monkeypatch.setattr(gd.runner, "run_one", no_training)
    for extra in (["--cached-only"], []):  # the report alone, and a rerun with everything cached
        again = gd.main(tiny_argv(out, *extra))
        assert again["envs"] == first["envs"] and again["summary"] == first["summary"]
        assert again["failures"] == [] and again["missing"] == []
        assert again["config"]["cached_only"] is bool(extra)
    # Another output folder reads the same records through --cache (how the committed page is
    # rebuilt: --out docs/results --cache data/cache --cached-only); nothing is cached there.
    page = tmp_path / "page"
    again = gd.main(tiny_argv(page, "--cache", str(out / "cache"), "--cached-only"))
    assert again["envs"] == first["envs"] and again["missing"] == []
    assert (page / "gym_defaults.md").is_file() and not (page / "cache").exists()


def test_a_cached_run_with_another_config_is_refused(gd, tiny, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(tiny[0], out)
    # Another eval setting than the cache's: every cached file differs.
    with pytest.raises(gd.runner.CacheConfigError, match=r"differs in n_eval_episodes.*another --cache"):
        gd.main(tiny_argv(out, "--n-eval-episodes", "3"))
    # A cache file edited to another budget is refused by name, also by --cached-only.
    path = out / "cache" / "gym_defaults" / "IdentityEnv-10__tpo__seed0.json"
    record = json.loads(path.read_text())
    record["spec"]["timesteps"] = 999
    path.write_text(json.dumps(record))
    for extra in ([], ["--cached-only"]):
        with pytest.raises(gd.runner.CacheConfigError, match=r"1 cache file.*IdentityEnv-10__tpo__seed0\.json \(differs in timesteps\)"):
            gd.main(tiny_argv(out, *extra))


def test_a_failing_run_is_recorded_and_retried(gd, tmp_path, monkeypatch):
    argv = ["--envs", "IdentityEnv-10", "--methods", "tpo", "--seeds", "1", "--workers", "1",
            "--timesteps-scale", "0.003", "--eval-every-fraction", "0.5", "--n-eval-episodes", "1",
            "--out", str(tmp_path), "--quiet"]  # fmt: skip

    def broken(run, progress=None):
        raise RuntimeError("simulated failure")

    with monkeypatch.context() as mp:
        mp.setattr(gd.runner, "run_one", broken)
        result = gd.main(argv)
    (failure,) = result["failures"]
    assert failure["id"] == "IdentityEnv-10__tpo__seed0" and failure["error"] == "RuntimeError: simulated failure"
    assert "simulated failure" in failure["traceback"]
    tpo = result["envs"]["IdentityEnv-10"]["methods"]["tpo"]
    assert tpo["seeds"] == [] and tpo["failures"] == [{"seed": 0, "error": "RuntimeError: simulated failure"}]
    md = (tmp_path / "gym_defaults.md").read_text()
    assert "all runs failed (seed 0: RuntimeError: simulated failure)" in md and "## Failed runs" in md
    assert gd.main([*argv, "--cached-only"])["failures"] == result["failures"]  # kept in the cache

    retried = gd.main(argv)  # a rerun tries the failed run again
    assert retried["failures"] == [] and retried["envs"]["IdentityEnv-10"]["methods"]["tpo"]["seeds"] == [0]


def test_ppo_zoo_eval_env_uses_the_training_normalization(gd):
    import numpy as np
    from stable_baselines3.common.vec_env import VecNormalize

    hyper = gd.config.method_hyperparameters("Acrobot-v1", "ppo_zoo")  # rl-zoo3: normalize, 16 envs
    assert hyper["normalize"] is True and hyper["n_envs"] == 16 and hyper["normalize_kwargs"] == {"gamma": 0.99}
    model, eval_env = gd.runner.build_agent(Run("gym_defaults", "Acrobot-v1", "ppo_zoo", 0, 100, 50, 1, hyper))
    train = model.get_env()
    try:
        assert isinstance(train, VecNormalize) and train.training and train.norm_reward
        assert train.num_envs == 16 and train.gamma == 0.99 and model.n_steps == 256
        train.reset()
        for _ in range(3):
            train.step(np.array([train.action_space.sample() for _ in range(train.num_envs)]))
        assert isinstance(eval_env, VecNormalize) and not eval_env.training and not eval_env.norm_reward
        eval_env.reset()  # each evaluation starts with one: it takes the training statistics
        np.testing.assert_array_equal(eval_env.obs_rms.mean, train.obs_rms.mean)
        assert eval_env.obs_rms is not train.obs_rms
        seen = eval_env.obs_rms.mean.copy()
        eval_env.step(np.array([0]))
        np.testing.assert_array_equal(eval_env.obs_rms.mean, seen)  # frozen while it evaluates
    finally:
        eval_env.close()
        train.close()


def test_budget_remark_says_when_ppo_zoo_is_cut_short(gd):
    lunar = {"dropped": {"n_timesteps": 1e6, "policy": "MlpPolicy"}}
    assert gd.report.budget_remark(300_000, lunar) == (
        "; the budget here, 300,000 env steps, is 0.3 x the n_timesteps rl-zoo3 tuned this entry for (1,000,000)"
    )
    assert gd.report.budget_remark(1_000_000, lunar) == "" and gd.report.budget_remark(2_000_000, lunar) == ""
    assert gd.report.budget_remark(10, {"dropped": {}}) == "" and gd.report.budget_remark(10, {}) == ""


def test_convert_zoo_entry(gd):
    import torch

    entry = {
        "n_envs": 8,
        "n_timesteps": 1e5,
        "policy": "MlpPolicy",
        "normalize": True,
        "frame_stack": 4,
        "not_a_ppo_argument": 1,
        "learning_rate": "lin_0.001",
        "clip_range": 0.2,
        "gamma": 0.98,
        "policy_kwargs": "dict(log_std_init=-2, ortho_init=False, activation_fn=nn.ReLU, net_arch=dict(pi=[64], vf=[64]))",
    }
    zoo = gd.config.convert_zoo_entry(entry)
    lr = zoo["ppo_kwargs"]["learning_rate"]
    assert callable(lr) and lr(1.0) == pytest.approx(0.001) and lr(0.5) == pytest.approx(0.0005)
    assert zoo["ppo_kwargs"]["clip_range"] == 0.2 and zoo["ppo_kwargs"]["gamma"] == 0.98
    assert zoo["ppo_kwargs"]["policy_kwargs"] == {
        "log_std_init": -2, "ortho_init": False, "activation_fn": torch.nn.ReLU, "net_arch": {"pi": [64], "vf": [64]},
    }  # fmt: skip
    assert zoo["n_envs"] == 8
    assert zoo["normalize"] is True and zoo["normalize_kwargs"] == {"gamma": 0.98}  # as rl-zoo3 does
    assert zoo["dropped"] == {"n_timesteps": 1e5, "policy": "MlpPolicy", "frame_stack": 4, "not_a_ppo_argument": 1}
    assert set(zoo["ppo_kwargs"]).isdisjoint({"n_envs", "normalize", *zoo["dropped"]})
    plain = gd.config.convert_zoo_entry({})
    assert plain == {"ppo_kwargs": {}, "n_envs": 1, "normalize": False, "normalize_kwargs": {}, "dropped": {}}
    with pytest.raises(ValueError, match="only 'lin_<value>'"):
        gd.config.convert_zoo_entry({"learning_rate": "exp_0.1"})


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--envs", "NoSuchEnv-v0"], "invalid choice: 'NoSuchEnv-v0'"),
        (["--methods", "ppo"], "invalid choice: 'ppo'"),
        (["--timesteps-scale", "0"], "expected a number > 0, got 0.0"),
        (["--eval-every-fraction", "1.5"], "expected a fraction in (0, 1], got 1.5"),
        (["--workers", "0"], "expected a positive integer, got 0"),
        (["--seeds", "two"], "expected a positive integer, got 'two'"),
    ],
)
def test_bad_arguments_are_parser_errors(gd, capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        gd.cli.build_parser().parse_args(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_runs_as_a_module_from_any_folder(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.gym_defaults", "--help"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert "python -m benchmarks.gym_defaults" in text and "--cache DIR" in text
    assert "(default: results)" in text and "(default: OUT/cache;" in text


def test_a_branch_run_cached_before_interactions_were_counted_is_run_again(gd, tiny, tmp_path, monkeypatch):
    out = tmp_path / "out"
    shutil.copytree(tiny[0], out)
    path = out / "cache" / "gym_defaults" / "IdentityEnv-10__tpo__seed0.json"
    record = json.loads(path.read_text())
    record.pop("env_steps_total")
    record["resolved"]["group_mode"] = "branch"  # as a Pendulum run made before the count
    path.write_text(json.dumps(record))
    assert not gd.runner.counts_every_interaction(record)
    reported = gd.main(tiny_argv(out, "--cached-only"))
    assert "IdentityEnv-10__tpo__seed0" in reported["missing"]  # not reported as comparable
    trained = []
    real_run_one = gd.runner.run_one
    monkeypatch.setattr(gd.runner, "run_one", lambda run, progress=None: trained.append(run.name) or real_run_one(run, progress))
    again = gd.main(tiny_argv(out))
    assert trained == ["IdentityEnv-10__tpo__seed0"] and again["missing"] == []
    assert "env_steps_total" in json.loads(path.read_text())


def test_a_tpo_run_made_under_other_defaults_is_run_again(gd, tiny, tmp_path, monkeypatch):
    out = tmp_path / "out"
    shutil.copytree(tiny[0], out)
    path = out / "cache" / "gym_defaults" / "IdentityEnv-10__tpo__seed0.json"
    record = json.loads(path.read_text())
    run = next(r for r in gd.runner.plan_runs(["IdentityEnv-10"], ["tpo"], 1, 0.001, 0.5, 1) if r.seed == 0)
    assert record["resolved"]["target_floor"] == 0.1 and gd.runner.made_with_current_defaults(run, record)
    # The critics' bootstrap and novelty bonus are recorded; a record from before they were
    # means "own" and no bonus, the rules then: the same run as today's bonus stopped at the
    # env's first signal where that comes before the critic's first step (IdentityEnv's
    # rewards differ at once), not where the bonus would be scored (MountainCar's -1s).
    critic_keys = {"critic_bootstrap": "own", "critic_novelty": 1.0, "critic_novelty_stop": "signal"}
    assert {k: record["resolved"][k] for k in critic_keys} == critic_keys
    for key in critic_keys:
        record["resolved"].pop(key)
    assert gd.runner.stopped_bonus_never_scored(run) and gd.runner.made_with_current_defaults(run, record)
    # n-step targets too: a record without them was made with one-step TD, no longer the default.
    n_step = record["resolved"].pop("critic_n_step")
    assert n_step == DEFAULT_N_STEP > 1 and not gd.runner.made_with_current_defaults(run, record)
    assert not gd.runner.made_with_current_defaults(run, {**record, "resolved": {**record["resolved"], "critic_n_step": 1}})
    record["resolved"]["critic_n_step"] = n_step
    # The ensemble's size too: a record without it was made with four critics, since two
    # became the Discrete critic's default.
    n_critics = record["resolved"].pop("critic_n_critics")
    assert n_critics == 2 and not gd.runner.made_with_current_defaults(run, record)
    assert gd.runner.made_with_current_defaults(run, {**record, "resolved": {**record["resolved"], "critic_n_critics": 2}})
    record["resolved"]["critic_n_critics"] = n_critics
    car = next(r for r in gd.runner.plan_runs(["MountainCar-v0"], ["tpo"], 1, 0.01, 0.5, 1) if r.seed == 0)
    legacy_car = {k: v for k, v in gd.runner.current_defaults(car).items() if k not in critic_keys}
    assert not gd.runner.stopped_bonus_never_scored(car)
    assert not gd.runner.made_with_current_defaults(car, {"resolved": legacy_car})
    assert gd.runner.made_with_current_defaults(car, {"resolved": {**legacy_car, **critic_keys}})
    # The bonus's predictor trains once per critic update since 2026-12-08: a record without
    # that key trained it at every critic step, which changed the run only where it scored.
    assert legacy_car["critic_novelty_training"] == "per_update"
    per_step_car = {k: v for k, v in {**legacy_car, **critic_keys}.items() if k != "critic_novelty_training"}
    assert not gd.runner.made_with_current_defaults(car, {"resolved": per_step_car})
    per_step = {k: v for k, v in record["resolved"].items() if k != "critic_novelty_training"}
    assert gd.runner.made_with_current_defaults(run, {**record, "resolved": {**per_step, **critic_keys}})
    assert not gd.runner.made_with_current_defaults(run, {**record, "resolved": {**record["resolved"], "critic_bootstrap": "min"}})
    record["resolved"].pop("target_floor")  # as a run made before TPO floored its critic targets
    path.write_text(json.dumps(record))
    assert not gd.runner.made_with_current_defaults(run, record)
    reported = gd.main(tiny_argv(out, "--cached-only"))
    assert "IdentityEnv-10__tpo__seed0" in reported["missing"]
    trained = []
    real_run_one = gd.runner.run_one
    monkeypatch.setattr(gd.runner, "run_one", lambda run, progress=None: trained.append(run.name) or real_run_one(run, progress))
    again = gd.main(tiny_argv(out))
    assert trained == ["IdentityEnv-10__tpo__seed0"] and again["missing"] == []
    assert json.loads(path.read_text())["resolved"]["target_floor"] == 0.1


def test_zoo_budget_gives_rl_zoo3_n_timesteps_where_it_tuned_ppo_for_longer(gd, tmp_path):
    assert {e: gd.runner.env_budget(e, "zoo") for e in gd.config.ENVS} == {
        **{e: b.timesteps for e, b in gd.config.ENVS.items()},
        "Acrobot-v1": 1_000_000, "MountainCar-v0": 1_000_000, "LunarLander-v3": 1_000_000,
    }  # fmt: skip
    assert gd.runner.env_budget("Acrobot-v1") == 200_000
    runs = gd.runner.plan_runs(["Acrobot-v1", "CartPole-v1"], ["tpo"], 1, 0.001, 0.5, 1, budget="zoo")
    assert [(r.env, r.timesteps, r.eval_every) for r in runs] == [
        ("Acrobot-v1", 1000, 500), ("CartPole-v1", 100, 50)]
    with pytest.raises(ValueError, match="budget must be one of"):
        gd.runner.env_budget("Acrobot-v1", "long")
    # The page of a zoo-budget run has its own name and says which budget it used.
    result = gd.main([*tiny_argv(tmp_path), "--envs", "IdentityEnv-10", "--methods", "tpo",
                      "--budget", "zoo"])
    assert result["config"]["budget"] == "zoo"
    assert (tmp_path / "gym_defaults-zoo-budget.md").exists() and not (tmp_path / "gym_defaults.md").exists()
    assert "rl-zoo3's own `n_timesteps`" in (tmp_path / "gym_defaults-zoo-budget.md").read_text()


def test_an_env_with_noisy_evaluations_is_evaluated_on_more_episodes(gd, tmp_path):
    # Slippery FrozenLake's best policy succeeds about 3 times in 4: 10 episodes would leave a
    # seed's mean of 5 evaluations about +-0.065 of noise.
    assert gd.config.ENVS["FrozenLake-v1-slippery"].min_eval_episodes == 100
    runs = gd.runner.plan_runs(["FrozenLake-v1-slippery", "CartPole-v1"], ["tpo", "ppo_zoo"], 1, 0.001, 0.5, 10)
    assert [(r.env, r.method, r.n_eval_episodes) for r in runs] == [
        ("FrozenLake-v1-slippery", "tpo", 100), ("FrozenLake-v1-slippery", "ppo_zoo", 100),
        ("CartPole-v1", "tpo", 10), ("CartPole-v1", "ppo_zoo", 10)]  # fmt: skip
    assert gd.runner.plan_runs(["FrozenLake-v1-slippery"], ["tpo"], 1, 0.001, 0.5, 200)[0].n_eval_episodes == 200
    cfg = {"timesteps_scale": 1, "n_seeds": 5, "n_eval_episodes": 10, "eval_every_fraction": 0.05,
           "rl_zoo3_version": "2.9.2", "n_eval_episodes_per_env": {"CartPole-v1": 10, "FrozenLake-v1-slippery": 100}}
    assert "evaluated on 10 episodes (100 on FrozenLake-v1-slippery) of a separately" in gd.report.protocol(cfg)
    del cfg["n_eval_episodes_per_env"]  # a page written before the option
    assert "evaluated on 10 episodes of a separately" in gd.report.protocol(cfg)


def test_the_table_names_the_worst_seed_by_the_mean_of_its_last_evaluations(gd):
    from benchmarks.harness import summarize_method

    steps = [10 * i for i in range(1, 8)]
    runs = [{"returns": [0, 0, 500, 500, 500, 500, 500], "seconds": 1.0, "num_timesteps": 70},
            {"returns": [0, 500, 500, 500, 140, 150, 160], "seconds": 1.0, "num_timesteps": 70}]  # a relapse
    m = summarize_method(steps, runs, [3, 4], 475.0, {})
    assert m["last_evals_per_seed"] == [500.0, 290.0] and m["worst_seed_last_evals"] == 290.0
    assert gd.report._worst_seed(m) == "290.00 (seed 4)"
    legacy = {k: v for k, v in m.items() if k != "last_evals_per_seed"}  # a record from before
    assert gd.report._worst_seed(legacy) == "290.00 (seed 4)"


def test_an_env_whose_gymnasium_module_says_a_dependency_is_missing_is_skipped_with_why(monkeypatch):
    # gymnasium.envs.box2d without Box2D raises DependencyNotInstalled, not ImportError.
    from gymnasium.error import DependencyNotInstalled

    def import_module(name):
        raise DependencyNotInstalled("Box2D is not installed, you can install it by run `pip install swig`")

    monkeypatch.setattr(config.importlib, "import_module", import_module)
    why = config.missing_requirement("LunarLander-v3")
    module = config.ENVS["LunarLander-v3"].requires  # the module-scoped gd fixture may have swapped it
    assert why.startswith(f"needs {module} (pip install -e '.[box2d]'") and "Box2D is not installed" in why
    assert config.missing_requirement("CartPole-v1") is None  # no requirement: nothing imported


def test_tune_runs_given_arguments_on_tuning_seeds_and_refuses_the_reported_ones(tmp_path, capsys):
    from benchmarks.gym_defaults import tune

    out = tmp_path / "t.json"
    kwargs = {"critic_kwargs": {"novelty": 1.0, "novelty_stop": "signal"}}
    result = tune.main(["--env", "IdentityEnv-10", "--method", "tpo", "--seeds", "100", "101",
                        "--kwargs", json.dumps(kwargs), "--timesteps-scale", "0.02", "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    assert result["constructor_kwargs"] == kwargs and [r["seed"] for r in result["runs"]] == [100, 101]
    for run in result["runs"]:
        assert len(run["returns"]) == 21 and run["last_evals_mean"] == pytest.approx(np.mean(run["returns"][-5:]))
        assert run["num_timesteps"] >= result["timesteps"] == 200
    assert result["summary"]["worst"] == min(r["last_evals_mean"] for r in result["runs"])
    # The arguments reach the agent: a critic kwarg the critic refuses fails the run.
    with pytest.raises(ValueError, match="novelty_stop must be one of"):
        tune.tune("IdentityEnv-10", "tpo", [100], {"critic_kwargs": {"novelty_stop": "goal"}}, 0.02)
    for argv, why in ((["--seeds", "3", "100"], "seeds \\[3\\] are the table's reported seeds"),
                      (["--kwargs", "[1]"], "--kwargs must be a JSON object"),
                      (["--kwargs", "{bad"], "--kwargs is not JSON")):
        with pytest.raises(SystemExit):
            tune.main(["--env", "IdentityEnv-10", "--method", "tpo", "--out", str(out), *argv])
        assert re.search(why, capsys.readouterr().err)


def test_a_row_still_running_names_its_seed_count(gd, tiny, tmp_path):
    # The cache holds seed 0 only; a page asked for 2 seeds says so on each row it reports.
    result = gd.main(tiny_argv(tmp_path, "--cache", str(tiny[0] / "cache"), "--cached-only", "--seeds", "2"))
    assert result["config"]["n_seeds"] == 2
    md = (tmp_path / "gym_defaults.md").read_text()
    assert "| CartPole-v1 | TPO (defaults) (1 of 2 seeds) |" in md
    assert "| IdentityEnv-10 | PPO-zoo (1 of 2 seeds) |" in md
    full = (tiny[0] / "gym_defaults.md").read_text()
    assert "| CartPole-v1 | TPO (defaults) |" in full and "of 1 seeds" not in full


def test_a_grpo_record_from_before_the_policy_floor_counts_as_made_without_it(gd):
    run = next(r for r in gd.runner.plan_runs(["IdentityEnv-10"], ["grpo"], 1, 0.001, 0.5, 1) if r.seed == 0)
    current = gd.runner.current_defaults(run)
    assert current["policy_floor"] == 0.1  # the default on every action of a Discrete state
    legacy = {k: v for k, v in current.items() if k != "policy_floor"}
    assert not gd.runner.made_with_current_defaults(run, {"resolved": legacy})  # made without it: rerun
    assert not gd.runner.made_with_current_defaults(run, {"resolved": {**current, "policy_floor": 0.0}})
    assert gd.runner.made_with_current_defaults(run, {"resolved": current})
