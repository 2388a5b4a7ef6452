"""The Token Reversal studies (zoo.paper.token.study) through ``python -m zoo.reproduce``, tiny."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from zoo.jobs.results import summarize
from zoo.paper.reproduce import EXPERIMENTS, build_parser
from zoo.paper.reproduce import main as reproduce_main
from zoo.paper.token import experiments as token_experiments
from zoo.paper.token import grid as token_grid
from zoo.paper.token import jobs as token_jobs
from zoo.paper.token import methods as token_methods
from zoo.paper.token import study as token_study

SUMMARY_KEYS = {
    "final_error",
    "final_error_se",
    "steps_to_1pct",
    "curves",
    "takeoff_iteration_per_seed",
}


def run(out, *argv: str) -> dict:
    return reproduce_main([*argv, "--out", str(out), "--quiet"])


def cached_jobs(out, experiment: str) -> dict[str, float]:
    """Cache file name -> mtime (ns)."""
    folder = out / "cache" / experiment
    return {p.name: p.stat().st_mtime_ns for p in folder.glob("*.json")}


@pytest.fixture(scope="module")
def terminal_run(tmp_path_factory):
    """terminal, H = 3, 1 seed, 3 iterations, all five Table 3 methods (a few seconds)."""
    out = tmp_path_factory.mktemp("terminal")
    result = run(
        out, "terminal", "--lengths", "3", "--seeds", "1", "--episodes", "3", "--workers", "1"
    )
    return out, result


def test_every_token_experiment_is_registered():
    names = {
        "token-vocab",
        "token-variations",
        "terminal",
        "eta-sweep",
        "k-sweep",
        "epoch-sweep",
        "zero-variance-mask",
        "ablations",
    }
    assert names <= set(EXPERIMENTS)
    assert EXPERIMENTS["terminal"].default_steps == 2000
    args = build_parser().parse_args(["terminal", "--episodes", "7"])
    assert args.steps == 7 and args.match == "prompts"


def test_terminal_tiny_run_writes_json_png_markdown(terminal_run):
    out, result = terminal_run
    data = json.loads((out / "terminal-paper.json").read_text())
    assert data["experiment"] == "terminal-paper" and {"experiment", "config", "methods"} <= set(data)
    assert data["config"]["episodes"] == 3 and data["config"]["match"] == "prompts"
    assert set(data["methods"]) == {"tpo", "grpo", "grpo_no_kl", "ppo", "dg"}
    for method, per_setting in data["methods"].items():
        s = per_setting["H=3"]
        assert SUMMARY_KEYS <= set(s), method
        assert 0.0 <= s["final_error"] <= 1.0
        curves = s["curves"]
        assert curves["steps"] == [1, 2, 3]
        assert len(curves["error_mean"]) == len(curves["grad_norm_mean"]) == 3
        assert all(math.isfinite(g) and g >= 0 for g in curves["grad_norm_mean"])
        assert s["agent"]["batch_size"] == 100
    assert data["methods"]["tpo"]["H=3"]["agent"]["group_mode"] == "sequence"
    assert data["methods"]["dg"]["H=3"]["agent"]["n_epochs"] == 1
    assert (out / "terminal-paper.png").stat().st_size > 0
    md = (out / "terminal-paper.md").read_text()
    assert "| method | H=3 |" in md and "| TPO |" in md and "seconds per iteration" in md
    assert len(cached_jobs(out, "terminal")) == 5


def test_final_error_is_the_mean_of_the_last_iterations(terminal_run):
    out, _ = terminal_run
    record = json.loads((out / "cache" / "terminal" / "tpo__H3-paper__seed0.json").read_text())
    assert len(record["error"]) == len(record["grad_norm"]) == 3
    data = json.loads((out / "terminal-paper.json").read_text())
    assert data["methods"]["tpo"]["H=3"]["final_error"] == pytest.approx(np.mean(record["error"]))
    # Initial exact-match error at H = 3, V = 2 is about 1 - 1/8.
    assert record["error"][0] == pytest.approx(7 / 8, abs=0.08)


def test_summarize_final_window_is_backwards_compatible():
    error = np.array([[0.9, 0.5, 0.1, 0.3], [0.7, 0.5, 0.3, 0.1]])
    plain = summarize(error, [1, 2, 3, 4])
    assert plain["final_error"] == pytest.approx(0.2)
    windowed = summarize(error, [1, 2, 3, 4], final_window=2)
    assert windowed["final_error"] == pytest.approx(0.2)
    assert windowed["final_error_se"] == pytest.approx(0.0)
    assert summarize(error, [1, 2, 3, 4], final_window=3)["final_error"] == pytest.approx(
        (0.3 + 0.3) / 2
    )
    assert summarize(error, [1, 2, 3, 4], final_window=99)["final_error"] == pytest.approx(
        error.mean()
    )


def test_resume_skips_finished_jobs_and_reruns_a_deleted_one(tmp_path, monkeypatch):
    calls: list[str] = []
    real = token_study.run_job

    def counting(job, progress=None):
        calls.append(job.name)
        return real(job, progress)

    monkeypatch.setattr(token_study, "run_job", counting)
    argv = [
        "token-vocab",
        "--vocabs",
        "2",
        "--length",
        "3",
        "--seeds",
        "2",
        "--episodes",
        "2",
        "--methods",
        "dg",
        "tpo_token",
        "--workers",
        "1",
    ]
    first = run(tmp_path, *argv)
    assert sorted(calls) == sorted(f"{m}__V2-paper__seed{s}" for m in ("dg", "tpo_token") for s in (0, 1))
    before = cached_jobs(tmp_path, "token-vocab")
    assert len(before) == 4
    calls.clear()
    second = run(tmp_path, *argv)
    assert calls == [] and cached_jobs(tmp_path, "token-vocab") == before
    assert second["methods"] == first["methods"]
    (tmp_path / "cache" / "token-vocab" / "dg__V2-paper__seed1.json").unlink()
    third = run(tmp_path, *argv)
    assert calls == ["dg__V2-paper__seed1"]
    # Same seed, same result: the rerun reproduces the deleted job exactly.
    assert (
        third["methods"]["dg"]["V=2"]["curves"]["error_mean"]
        == first["methods"]["dg"]["V=2"]["curves"]["error_mean"]
    )
    md = (tmp_path / "token-vocab-paper.md").read_text()
    assert "(58)" in md and "(199)" in md  # Table 1's V=2 column beside ours
    assert third["config"]["stale_cached_jobs"] == []
    # A job cached by other agent/env sources is reused, but reported as stale.
    path = tmp_path / "cache" / "token-vocab" / "tpo_token__V2-paper__seed0.json"
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "code_version": "other"}))
    calls.clear()
    with pytest.warns(UserWarning, match="other tpo_agents/tpo_gym sources"):
        fourth = run(tmp_path, *argv)
    assert calls == [] and fourth["config"]["stale_cached_jobs"] == ["tpo_token__V2-paper__seed0"]
    # A different episode count does not reuse the cache.
    calls.clear()
    run(
        tmp_path,
        "token-vocab",
        "--vocabs",
        "2",
        "--length",
        "3",
        "--seeds",
        "2",
        "--episodes",
        "1",
        "--methods",
        "dg",
        "--workers",
        "1",
    )
    assert sorted(calls) == ["dg__V2-paper__seed0", "dg__V2-paper__seed1"]


def test_interaction_matching_gives_single_sample_methods_batch_bk(tmp_path, monkeypatch):
    args = build_parser().parse_args(
        ["terminal", "--lengths", "3", "--seeds", "1", "--episodes", "2", "--match", "interactions"]
    )
    exp = token_experiments.TOKEN_EXPERIMENTS["terminal"]
    _, _, jobs = token_grid.build_jobs(exp, args)
    by_method = {j.method: j for j in jobs}
    for method in ("dg", "ppo"):
        assert by_method[method].agent == {"interaction_matched": True, "policy_kwargs": {"substrate": "paper"}}
        model = token_jobs.make_agent(by_method[method])
        assert model.batch_size == 800 and model.lr_schedule(1.0) == pytest.approx(
            1e-3 * math.sqrt(8)
        )
    for method in ("tpo", "grpo", "grpo_no_kl"):
        assert by_method[method].agent == {"policy_kwargs": {"substrate": "paper"}}
        model = token_jobs.make_agent(by_method[method])
        assert model.batch_size == 100 and model.n_candidates == 8
        assert model.lr_schedule(1.0) == pytest.approx(1e-3)
    # End to end: TPO's prompt-matched run is reused (same cache), DG's is not.
    run(
        tmp_path,
        "terminal",
        "--lengths",
        "3",
        "--seeds",
        "1",
        "--episodes",
        "2",
        "--methods",
        "tpo",
        "dg",
        "--workers",
        "1",
    )
    calls: list[str] = []
    real = token_study.run_job
    monkeypatch.setattr(
        token_study,
        "run_job",
        lambda job, progress=None: calls.append(job.name) or real(job, progress),
    )
    result = run(
        tmp_path,
        "terminal",
        "--lengths",
        "3",
        "--seeds",
        "1",
        "--episodes",
        "2",
        "--methods",
        "tpo",
        "dg",
        "--match",
        "interactions",
        "--workers",
        "1",
    )
    assert calls == ["dg__H3-paper-im__seed0"]
    assert result["experiment"] == "terminal-interaction-paper"
    assert result["methods"]["dg"]["H=3"]["agent"]["batch_size"] == 800
    assert result["methods"]["tpo"]["H=3"]["agent"]["batch_size"] == 100
    assert (tmp_path / "terminal-interaction-paper.md").exists()
    # results written before the rename (terminal-interactions-*) still belong to terminal
    assert token_experiments.base_experiment("terminal-interactions-ours-lr0.002") == "terminal"
    assert token_experiments.base_experiment("terminal-interaction-paper") == "terminal"


def test_worker_processes_give_the_same_results(tmp_path):
    argv = ["terminal", "--lengths", "3", "--seeds", "2", "--episodes", "2", "--methods", "dg"]
    serial = run(tmp_path / "serial", *argv, "--workers", "1")
    parallel = run(tmp_path / "parallel", *argv, "--workers", "2")
    assert (
        parallel["methods"]["dg"]["H=3"]["curves"]["error_mean"]
        == serial["methods"]["dg"]["H=3"]["curves"]["error_mean"]
    )
    assert len(cached_jobs(tmp_path / "parallel", "terminal")) == 2


def test_options_that_do_not_apply_are_refused(tmp_path):
    with pytest.raises(SystemExit):
        run(tmp_path, "token-vocab", "--lengths", "3", "--episodes", "1")
    with pytest.raises(SystemExit):
        run(tmp_path, "terminal", "--vocabs", "2", "--episodes", "1")


def test_settings_filter_keeps_only_the_named_rows_and_rejects_unknown_tags():
    exp = token_experiments.TOKEN_EXPERIMENTS["token-variations"]
    args = build_parser().parse_args(
        ["token-variations", "--seeds", "2", "--settings", "sequential-reverse_copy", "bag-copy"]
    )
    args.steps = 3
    _, settings, jobs = token_grid.build_jobs(exp, args)
    assert [s.tag for s in settings] == ["bag-copy", "sequential-reverse_copy"]  # table order
    assert {j.env["reward"] for j in jobs} == {"bag", "sequential"}
    assert len(jobs) == len(exp.methods) * 2 * 2
    args = build_parser().parse_args(["token-variations", "--settings", "sequential-nope"])
    args.steps = 3
    with pytest.raises(SystemExit, match="unknown setting.*sequential-nope.*known tags"):
        token_grid.build_jobs(exp, args)


def test_learning_rate_override_reaches_every_agent_and_names_the_results(tmp_path):
    exp = token_experiments.TOKEN_EXPERIMENTS["token-vocab"]
    args = build_parser().parse_args(
        ["token-vocab", "--vocabs", "2", "--seeds", "1", "--methods", "tpo_token", "dg",
         "--learning-rate", "1.5e-3", "--match", "interactions"]
    )
    args.steps = 2
    _, _, jobs = token_grid.build_jobs(exp, args)
    assert {j.tag for j in jobs} == {"V2-paper-lr0.0015", "V2-paper-lr0.0015-im"}
    by_method = {j.method: token_jobs.make_agent(j) for j in jobs}
    assert by_method["tpo_token"].lr_schedule(1.0) == pytest.approx(1.5e-3)
    assert by_method["dg"].lr_schedule(1.0) == pytest.approx(1.5e-3 * math.sqrt(8))  # then matched
    result = run(tmp_path, "token-vocab", "--vocabs", "2", "--seeds", "1", "--episodes", "2",
                 "--methods", "dg", "--learning-rate", "1.5e-3", "--workers", "1")
    assert result["experiment"] == "token-vocab-paper-lr0.0015" and result["config"]["learning_rate"] == 1.5e-3
    assert (tmp_path / "token-vocab-paper-lr0.0015.json").exists()
    with pytest.raises(SystemExit):
        build_parser().parse_args(["token-vocab", "--learning-rate", "0"])


def test_init_override_reaches_every_policy_and_names_the_results(tmp_path):
    from tpo_agents.policies.transformer import DEFAULT_INIT, INITS

    assert (token_grid.POLICY_INITS, token_grid.DEFAULT_POLICY_INIT) == (INITS, DEFAULT_INIT)
    exp = token_experiments.TOKEN_EXPERIMENTS["token-vocab"]
    args = build_parser().parse_args(
        ["token-vocab", "--vocabs", "2", "--seeds", "1", "--methods", "tpo_token",
         "--learning-rate", "1.5e-3", "--substrate", "ours", "--init", "flax"]
    )
    args.steps = 2
    _, _, jobs = token_grid.build_jobs(exp, args)
    assert [j.tag for j in jobs] == ["V2-ours-lr0.0015-initflax"]
    net = token_jobs.make_agent(jobs[0]).policy.net
    assert net.tok_emb.weight.std() < 0.3 and (net.head.bias == 0).all()  # flax: N(0, 1/64), zero bias
    result = run(tmp_path, "token-vocab", "--vocabs", "2", "--seeds", "1", "--episodes", "2",
                 "--methods", "dg", "--substrate", "ours", "--init", "flax", "--workers", "1")
    assert result["experiment"] == "token-vocab-ours-initflax" and result["config"]["init"] == "flax"
    assert result["config"]["substrate"] == "ours" and result["config"]["optimizer"] == "MuonAdamW"
    with pytest.raises(SystemExit, match="--init applies to --substrate ours"):
        token_grid.build_jobs(exp, build_parser().parse_args(["token-vocab", "--init", "flax"]))
    with pytest.raises(SystemExit):
        build_parser().parse_args(["token-vocab", "--init", "keras"])


def test_reproduce_trains_on_the_paper_substrate_by_default_and_says_so(tmp_path):
    from tpo_agents.optim import OptaxMuon
    from tpo_agents.policies.paper_transformer import PaperCausalTransformer

    exp = token_experiments.TOKEN_EXPERIMENTS["terminal"]
    args = build_parser().parse_args(["terminal", "--lengths", "3", "--seeds", "1", "--methods", "tpo", "grpo"])
    args.steps = 2
    _, _, jobs = token_grid.build_jobs(exp, args)
    models = {j.method: token_jobs.make_agent(j) for j in jobs}
    for model in models.values():
        assert isinstance(model.policy.net, PaperCausalTransformer)
        assert isinstance(model.policy.optimizer, OptaxMuon)
    assert models["grpo"].ratio_level == "sequence"  # the paper's Table 3 GRPO
    result = run(tmp_path, "terminal", "--lengths", "3", "--seeds", "1", "--episodes", "2",
                 "--methods", "dg", "--workers", "1")
    cfg = result["config"]
    assert (cfg["substrate"], cfg["optimizer"]) == ("paper", "OptaxMuon") and "flax" in cfg["init"]
    assert result["methods"]["dg"]["H=3"]["agent"]["substrate"] == "paper"


def test_cached_only_summarizes_finished_jobs_without_training(tmp_path, monkeypatch):
    run(tmp_path, "terminal", "--lengths", "3", "--seeds", "2", "--episodes", "2", "--methods", "dg",
        "--workers", "1")
    monkeypatch.setattr(token_study, "run_job", lambda job, progress=None: pytest.fail(f"trained {job.name}"))
    result = run(tmp_path, "terminal", "--lengths", "3", "--seeds", "5", "--episodes", "2",
                 "--methods", "dg", "tpo", "--workers", "1", "--cached-only")
    assert list(result["methods"]) == ["dg"] and result["methods"]["dg"]["H=3"]["n_seeds"] == 2
    with pytest.raises(SystemExit, match="none of the"):
        run(tmp_path, "terminal", "--lengths", "4", "--seeds", "1", "--episodes", "2", "--cached-only")


def test_cached_only_report_of_a_partial_sweep_marks_missing_settings(tmp_path):
    # DG at H = 2 and 3, TPO at H = 3 only: the report, tables, plot and hero must not crash.
    run(tmp_path, "terminal", "--lengths", "2", "3", "--seeds", "1", "--episodes", "2", "--methods", "dg",
        "--workers", "1")
    run(tmp_path, "terminal", "--lengths", "3", "--seeds", "1", "--episodes", "2", "--methods", "tpo",
        "--workers", "1")
    result = run(tmp_path, "terminal", "--lengths", "2", "3", "--seeds", "1", "--episodes", "2",
                 "--methods", "tpo", "dg", "--workers", "1", "--cached-only")
    assert set(result["methods"]["tpo"]) == {"H=3"} and set(result["methods"]["dg"]) == {"H=2", "H=3"}
    md = (tmp_path / "terminal-paper.md").read_text()
    assert "not run" in md
    assert "Substrate: paper (init flax (the artifact's), optimizer OptaxMuon)." in md
    assert (tmp_path / "terminal-paper.png").read_bytes()[:4] == b"\x89PNG"
    from zoo.paper import hero

    data = hero.main([str(tmp_path / "terminal-paper.json"), "--setting", "H=2"])
    assert set(data["methods"]) == {"dg"}


def test_a_cell_with_fewer_seeds_than_asked_is_named_in_the_heading(tmp_path):
    run(tmp_path, "terminal", "--lengths", "2", "--seeds", "2", "--episodes", "2", "--methods", "dg", "--workers", "1")
    run(tmp_path, "terminal", "--lengths", "2", "--seeds", "1", "--episodes", "2", "--methods", "tpo", "--workers", "1")
    run(tmp_path, "terminal", "--lengths", "2", "--seeds", "2", "--episodes", "2", "--methods", "tpo", "dg",
        "--workers", "1", "--cached-only")
    md = (tmp_path / "terminal-paper.md").read_text()
    assert "Ours: 2 seeds (fewer so far: TPO at H=2 1), 2 iterations" in md


# ------------------------------------------------------------------ method names and aliases


def test_the_method_table_has_one_key_per_agent_configuration_and_aliases_name_keys():

    configs = {(cls, tuple(sorted(kw.items()))) for cls, kw in token_methods.METHODS.values()}
    assert len(configs) == len(token_methods.METHODS)  # no two keys train the same agent
    assert not set(token_methods.ALIASES) & set(token_methods.METHODS)
    assert set(token_methods.ALIASES.values()) <= set(token_methods.METHODS)
    assert token_methods.METHODS["critic_free_ppo"][0] == "CriticFreePPO"
    assert {a: token_methods.canonical(a) for a in ("ppo", "cfppo", "tpo_token", "grpo_token")} == {
        "ppo": "critic_free_ppo", "cfppo": "critic_free_ppo", "tpo_token": "tpo", "grpo_token": "grpo_token"
    }
    # grpo_token is not grpo: standard per-token ratios against the paper's sequence-level ones.
    (_, grpo), (_, grpo_token) = token_methods.METHODS["grpo"], token_methods.METHODS["grpo_token"]
    assert {**grpo_token, "ratio_level": "sequence"} == grpo and "ratio_level" not in grpo_token
    assert set(token_methods.METHOD_NAMES) == set(token_methods.METHODS) | set(token_methods.ALIASES)
    # Every experiment's own names are method keys or aliases (what the results store).
    for exp in token_experiments.TOKEN_EXPERIMENTS.values():
        assert all(token_methods.canonical(m) in token_methods.METHODS for m in exp.methods)


def _job_names(experiment: str, *argv: str) -> list[str]:
    args = build_parser().parse_args([experiment, "--seeds", "1", *argv])
    args.steps = 2
    return [j.name for j in token_grid.build_jobs(token_experiments.TOKEN_EXPERIMENTS[experiment], args)[2]]


def test_aliases_and_canonical_names_build_the_jobs_the_results_already_name():
    terminal = ("terminal", "--lengths", "3")
    ppo = ["ppo__H3-paper__seed0"]
    for name in ("critic_free_ppo", "ppo", "cfppo"):
        assert _job_names(*terminal, "--methods", name) == ppo
    assert _job_names(*terminal, "--methods", "ppo", "critic_free_ppo", "dg") == ppo + ["dg__H3-paper__seed0"]
    assert _job_names(*terminal, "--methods", "critic_free_ppo", "--match", "interactions") == [
        "ppo__H3-paper-im__seed0"  # still single-sample: interaction-matched
    ]
    assert _job_names(*terminal, "--methods", "tpo_token") == ["tpo__H3-paper__seed0"]
    vocab = ("token-vocab", "--vocabs", "2", "--length", "3")
    for name in ("tpo", "tpo_token"):  # Table 1 stores TPO as tpo_token
        assert _job_names(*vocab, "--methods", name) == ["tpo_token__V2-paper__seed0"]
    assert _job_names(*vocab, "--methods", "critic_free_ppo") == ["ppo__V2-paper__seed0"]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["terminal", "--methods", "ppo2"])


def test_critic_free_ppo_and_its_aliases_run_and_find_the_same_cached_jobs(tmp_path, monkeypatch):
    tiny = ["terminal", "--lengths", "3", "--seeds", "1", "--episodes", "2", "--workers", "1"]
    first = run(tmp_path, *tiny, "--methods", "critic_free_ppo")
    assert list(first["methods"]) == ["ppo"] and first["config"]["methods"] == ["ppo"]
    assert first["methods"]["ppo"]["H=3"]["agent"]["class"] == "CriticFreePPO"
    assert set(cached_jobs(tmp_path, "terminal")) == {"ppo__H3-paper__seed0.json"}
    monkeypatch.setattr(token_study, "run_job", lambda job, progress=None: pytest.fail(f"trained {job.name}"))
    for name in ("ppo", "cfppo", "critic_free_ppo"):
        again = run(tmp_path, *tiny, "--methods", name)
        assert again["config"]["jobs_cached"] == 1 and again["config"]["jobs_run"] == 0
        assert again["methods"] == first["methods"]


def test_the_committed_per_seed_cache_is_found_without_training(tmp_path, monkeypatch):
    import warnings
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    results = repo / "docs" / "results"
    monkeypatch.setattr(token_study, "run_job", lambda job, progress=None: pytest.fail(f"trained {job.name}"))
    # The committed per-job records live in data/cache (read, never written: nothing trains).
    h10 = ["terminal", "--lengths", "10", "--workers", "1", "--cache", str(repo / "data" / "cache")]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the records are older sources' (stale, still reused)
        found = run(tmp_path, *h10, "--seeds", "8", "--methods", "tpo", "grpo", "dg")
        assert (found["config"]["jobs_cached"], found["config"]["jobs_run"]) == (24, 0)
        # The committed result is these records' summary (python -m zoo.reproduce ... --cached-only).
        cached = run(tmp_path, *h10, "--seeds", "20", "--methods", "tpo", "grpo", "dg", "--cached-only")
    committed = json.loads((results / "terminal-paper.json").read_text())  # may hold more lengths and methods
    assert list(cached["methods"]) == ["tpo", "grpo", "dg"]
    for method, by_length in cached["methods"].items():
        assert list(by_length) == ["H=10"]
        ours, theirs = (json.dumps(m[method]["H=10"], sort_keys=True) for m in (cached["methods"], committed["methods"]))
        assert ours == theirs, method
