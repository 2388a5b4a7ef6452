"""The classic-control benchmark script on a tiny budget: outputs and their structure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
METHODS = ("tpo", "grpo", "ppo")


@pytest.fixture()
def classic_control(monkeypatch):
    # Worker processes are spawned: they need the repository root on sys.path too.
    monkeypatch.syspath_prepend(str(ROOT))
    from benchmarks import classic_control

    return classic_control


def test_tiny_cartpole_run_writes_json_png_and_table(classic_control, tmp_path):
    out = tmp_path / "out"
    argv = [
        "--envs",
        "CartPole-v1",
        "--seeds",
        "1",
        "--timesteps",
        "2000",
        "--eval-every",
        "1000",
        "--eval-episodes",
        "2",
        "--workers",
        "0",
        "--out",
        str(out),
        "--quiet",
    ]
    result = classic_control.main(argv)

    data = json.loads((out / "classic_control.json").read_text())
    assert data == json.loads(json.dumps(result))
    assert data["benchmark"] == "classic_control"
    cfg = data["config"]
    assert cfg["n_seeds"] == 1 and cfg["timesteps"] == {"CartPole-v1": 2000}
    assert set(cfg["method_settings"]) == set(METHODS)
    assert cfg["method_settings"]["tpo"]["logp_reduction"] == "mean"
    assert cfg["method_settings"]["ppo"] == {}
    assert list(data["envs"]) == ["CartPole-v1"]
    env = data["envs"]["CartPole-v1"]
    assert env["threshold"] == 475
    assert set(env["methods"]) == set(METHODS)
    keys = {
        "settings",
        "seeds",
        "steps",
        "returns",
        "mean",
        "se",
        "final_mean_return",
        "final_se",
        "best_mean_return",
        "steps_to_threshold",
        "steps_to_threshold_per_seed",
        "seconds",
        "trained_timesteps",
    }
    for name, m in env["methods"].items():
        assert keys <= set(m), name
        assert m["steps"] == [0, 1000, 2000], name  # the same axis for every method
        assert m["seeds"] == [0]
        assert len(m["returns"]) == 1 and len(m["returns"][0]) == 3
        assert len(m["mean"]) == len(m["se"]) == 3
        assert m["final_mean_return"] == m["mean"][-1] == m["returns"][0][-1]
        assert all(1 <= r <= 500 for r in m["returns"][0])  # CartPole returns
        assert m["steps_to_threshold"] is None or m["steps_to_threshold"] in m["steps"]
        assert len(m["seconds"]) == 1 and m["seconds"][0] > 0
        # Training stops at the last evaluation point, within one vector step of it.
        assert 2000 <= m["trained_timesteps"][0] <= 2000 + 8

    png = (out / "classic_control.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000

    md = (out / "classic_control.md").read_text()
    rows = [line for line in md.splitlines() if line.startswith("| CartPole-v1 |")]
    assert len(rows) == 3
    for label in ("TPO", "GRPO", "PPO"):
        assert any(f"| {label}" in row for row in rows), label


def test_eval_grid_and_threshold(classic_control):
    assert classic_control.eval_grid(10_000, 5000) == [0, 5000, 10_000]
    assert classic_control.eval_grid(12_000, 5000) == [0, 5000, 10_000, 12_000]
    steps = [0, 10, 20, 30]
    assert classic_control.first_step_at_least([-500, -150, -90, -80], steps, -100) == 20
    assert classic_control.first_step_at_least([9, 100, 200, 300], steps, 475) is None


def test_worker_processes_reproduce_the_in_process_run(classic_control):
    """Seeds run in spawned worker processes give the same curves as in this process."""
    args = classic_control.build_parser().parse_args(
        [
            "--envs",
            "CartPole-v1",
            "--methods",
            "tpo",
            "--seeds",
            "1",
            "--timesteps",
            "1000",
            "--eval-every",
            "500",
            "--eval-episodes",
            "2",
        ]
    )
    jobs = classic_control._jobs(args)
    inline = classic_control._run_jobs(jobs, workers=0, quiet=True)
    pooled = classic_control._run_jobs(jobs, workers=1, quiet=True)
    job_id = "CartPole-v1/tpo/seed0"
    assert list(pooled) == [job_id]
    assert pooled[job_id]["returns"] == inline[job_id]["returns"]
    assert len(inline[job_id]["returns"]) == 3
