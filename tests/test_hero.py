"""The hero comparison puts ours beside the artifact's per-seed statistics."""

from __future__ import annotations

import json

import numpy as np

from zoo.paper import hero
from zoo.paper.reproduce import main as reproduce


def test_artifact_numbers_are_the_papers_table_3():
    # Table 3, prompt-matched, H = 10: TPO 7.4 %, GRPO 50.4 %, DG '-' (> 95 %).
    assert round(100 * np.mean(hero.ARTIFACT_H10["tpo"]["last"]), 1) == 7.4
    assert round(100 * np.mean(hero.ARTIFACT_H10["grpo"]["last"]), 1) == 50.4
    assert np.mean(hero.ARTIFACT_H10["dg"]["last"]) > 0.95
    assert all(len(v["last"]) == 20 for v in hero.ARTIFACT_H10.values())


def test_z_difference_and_counts():
    assert hero.z_difference([0.0, 0.0], [0.0, 0.0]) is None
    z = hero.z_difference([0.1, 0.3], [0.1, 0.3])
    assert z == 0.0
    assert hero.count_reached([None, 10, 30]) == "2/3 (median 20)" and hero.count_reached([None]) == "0/1"


def test_hero_writes_json_png_markdown_from_a_terminal_result(tmp_path):
    reproduce(["terminal", "--lengths", "3", "--methods", "tpo", "dg", "--seeds", "2", "--episodes", "3",
               "--workers", "1", "--out", str(tmp_path), "--quiet"])
    npz = tmp_path / "artifact.npz"
    np.savez(npz, tpo_errors=np.ones((3, 3)), dg_errors=np.ones((3, 3)))
    data = hero.main([str(tmp_path / "terminal-paper.json"), "--setting", "H=3", "--artifact-npz", str(npz)])
    stem = tmp_path / "hero-H3-paper"
    assert json.loads(stem.with_suffix(".json").read_text()) == data
    assert data["config"]["substrate"] == "paper"
    tpo = data["methods"]["tpo"]
    assert tpo["n_seeds"] == 2 and len(tpo["takeoff_per_seed"]) == 2 and "artifact" not in tpo  # H=10 only
    assert stem.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"
    md = stem.with_suffix(".md").read_text()
    assert "| TPO | 2 |" in md and "paper substrate" in md
    assert tpo["gradient"] == hero.gradient_fade(json.loads((tmp_path / "terminal-paper.json").read_text())["methods"]["tpo"]["H=3"])
    assert tpo["gradient"]["n_seeds"] == 2 and "| TPO | " in md.split("Gradient norm")[1]


def test_versus_length_plots_every_method_under_each_substrate(tmp_path):
    common = ["terminal", "--lengths", "2", "3", "--methods", "tpo", "dg", "--seeds", "1", "--episodes", "2",
              "--workers", "1", "--out", str(tmp_path), "--quiet"]
    reproduce(common)
    reproduce([*common, "--substrate", "ours", "--optimizer", "adamw", "--learning-rate", "3e-4"])
    ours = tmp_path / "terminal-ours-adamw-lr0.0003.json"
    assert json.loads(ours.read_text())["config"]["optimizer"] == "AdamW"
    data = hero.main([str(tmp_path / "terminal-paper.json"), "--setting", "H=3", "--versus-length", str(ours)])
    curves = data["versus_length"]
    assert set(curves) == {"tpo", "dg"}
    assert set(curves["tpo"]) == {"terminal-paper", "terminal-ours-adamw-lr0.0003"}
    assert curves["dg"]["terminal-paper"]["H"] == [2, 3] and len(curves["dg"]["terminal-paper"]["se_pct"]) == 2
    assert (tmp_path / "terminal-versus-H.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((tmp_path / "terminal-versus-H.json").read_text())["methods"] == curves
    md = (tmp_path / "terminal-versus-H.md").read_text()
    assert "substrate ours" in md and "optimizer AdamW" in md and "substrate paper" in md
    row = next(line for line in md.splitlines() if line.startswith("| DG | terminal-paper |"))
    e2, e3 = (100 * curves["dg"]["terminal-paper"]["error_pct"][i] / 100 for i in (0, 1))
    assert row.startswith(f"| DG | terminal-paper | {e2:.1f} +- ") and f"| {e3:.1f} +- " in row and row.endswith("(1) |")
    gradient = md.split("## Gradient at H=3")[1]
    fade = hero.gradient_fade(json.loads(ours.read_text())["methods"]["tpo"]["H=3"])
    assert f"| TPO | terminal-ours-adamw-lr0.0003 | {fade['n_solved']}/1 | {fade['first']:.3g} |" in gradient
    hero.main([str(ours), "--setting", "H=3"])  # named after the result, beside the paper substrate's
    assert (tmp_path / "hero-H3-ours-adamw-lr0.0003.md").exists() and (tmp_path / "hero-H3-paper.md").exists()


def test_gradient_fade_averages_solved_seeds_only():
    summary = {
        "final_error_per_seed": [0.0, 0.5, 0.005],
        "grad_norm_first_per_seed": [1.0, 2.0, 3.0],
        "grad_norm_last_per_seed": [0.1, 9.0, 0.3],
        "grad_norm_last_mean_per_seed": [0.5, 9.0, 1.5],
    }
    fade = hero.gradient_fade(summary)
    assert fade["n_solved"] == 2 and fade["n_seeds"] == 3
    assert np.isclose(fade["first"], 2.0) and np.isclose(fade["last_solved"], 0.2)
    assert np.isclose(fade["last_over_first"], 0.1) and np.isclose(fade["last_mean_solved"], 1.0)
    unsolved = dict(summary, final_error_per_seed=[1.0, 1.0, 1.0])
    assert hero.gradient_fade(unsolved)["last_solved"] is None
    assert hero.gradient_fade({"final_error_per_seed": [0.0]}) is None  # made before the fields existed


def test_summaries_record_each_seeds_gradient_median_over_the_first_and_last_window():
    from zoo.paper.token.jobs import GRAD_WINDOW, Job, summarize_jobs

    episodes = 2 * GRAD_WINDOW
    grad = np.concatenate([np.full(GRAD_WINDOW, 4.0), np.full(GRAD_WINDOW, 0.5)])
    grad[0] = 1e6  # one spiking early iteration leaves the median alone
    grad[-1] = 0.5 + GRAD_WINDOW  # a late one moves the mean by 1
    jobs = [Job("terminal", "tpo", "H=3", "H3", seed, episodes, {}, {}) for seed in (0, 1)]
    records = {
        job.name: {"error": [0.0] * episodes, "grad_norm": (grad * (1 + job.seed)).tolist(), "takeoff_iteration": 1,
                   "steps_to_1pct": 1, "seconds": 1.0, "seconds_per_iteration": 0.01, "agent": {}}
        for job in jobs
    }
    s = summarize_jobs(jobs, records, episodes)["tpo"]["H=3"]
    assert s["grad_norm_first_per_seed"] == [4.0, 8.0] and s["grad_norm_last_per_seed"] == [0.5, 1.0]
    assert np.allclose(s["grad_norm_last_mean_per_seed"], [1.5, 3.0])
    assert hero.gradient_fade(s)["last_over_first"] == 0.125
