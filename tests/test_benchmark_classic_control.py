"""The classic-control benchmark script on a tiny budget: outputs and their structure."""

from __future__ import annotations

import json

from benchmarks import classic_control
from benchmarks.harness import run_all

METHODS = ("tpo", "grpo", "ppo")


def test_tiny_cartpole_run_writes_json_png_and_table(tmp_path):
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


def test_worker_processes_reproduce_the_in_process_run():
    """Seeds run in spawned worker processes give the same curves as in this process."""
    args = classic_control.build_parser().parse_args(
        [
            "--envs",
            "CartPole-v1",
            "--methods",
            "tpo",
            "--seeds",
            "2",
            "--timesteps",
            "1000",
            "--eval-every",
            "500",
            "--eval-episodes",
            "2",
        ]
    )
    runs = classic_control.plan_runs(args)
    inline = run_all(runs, classic_control.run_one, None, workers=0, quiet=True)
    pooled = run_all(runs, classic_control.run_one, None, workers=2, quiet=True)
    names = ["CartPole-v1__tpo__seed0", "CartPole-v1__tpo__seed1"]
    assert sorted(pooled) == sorted(inline) == names
    for name in names:
        assert pooled[name]["returns"] == inline[name]["returns"]
        assert len(inline[name]["returns"]) == 3
