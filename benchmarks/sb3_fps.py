"""Env steps per second of TPO, GRPO and DG against SB3's PPO, in one run, as SB3 users see it.

Each agent learns CartPole-v1 with default hyperparameters from ``make_vec_env`` with 1 and
with 8 envs, for the same number of env steps, in this process with one torch thread; the
figure is SB3's ``time/fps`` (``num_timesteps`` over the wall time of ``learn``), and each
agent's ratio is PPO's time per env step over its own (1.0: as fast as PPO; the issue's goal
is >= 1/1.5). Every env interaction counts: branch-group simulation steps, where a mode
makes them, are added to the agent's steps (``rollout/env_steps_total``).

    python -m benchmarks.sb3_fps [--steps 20000] [--envs 1 8] [--out results/sb3_fps.json]
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import torch
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env

from benchmarks.harness import env_interactions
from tpo_agents import DG, GRPO, TPO
from tpo_agents.atomic import write_json_atomic
from zoo.cli import positive_int

AGENTS = {"PPO": PPO, "TPO": TPO, "GRPO": GRPO, "DG": DG}


def measure(name: str, n_envs: int, steps: int, seed: int = 0) -> dict:
    env = make_vec_env("CartPole-v1", n_envs=n_envs, seed=seed)
    model = AGENTS[name]("MlpPolicy", env, seed=seed)
    start = time.perf_counter()
    model.learn(steps)
    seconds = time.perf_counter() - start
    env.close()
    total = env_interactions(model)
    return {"env_steps": total, "seconds": round(seconds, 3), "fps": round(total / seconds, 1)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sb3_fps", description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=positive_int, default=20_000, help="env steps per run")
    parser.add_argument("--envs", type=positive_int, nargs="+", default=[1, 8])
    parser.add_argument("--agents", nargs="+", default=list(AGENTS), choices=list(AGENTS))
    parser.add_argument("--out", type=Path, default=Path("results/sb3_fps.json"))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    rows: dict = {}
    for n_envs in args.envs:
        runs = {name: measure(name, n_envs, args.steps) for name in dict.fromkeys(["PPO", *args.agents])}
        base = runs["PPO"]["seconds"] / runs["PPO"]["env_steps"]
        for name, run in runs.items():
            run["speed_vs_ppo"] = round(base / (run["seconds"] / run["env_steps"]), 3)
            print(f"n_envs={n_envs:2d} {name:5s} {run['fps']:8.1f} env steps/s  x{run['speed_vs_ppo']:.3f} of PPO")
        rows[str(n_envs)] = runs
    result = {
        "benchmark": "sb3_fps",
        "env": "CartPole-v1",
        "steps": args.steps,
        "torch_threads": 1,
        "baseline": "stable_baselines3.PPO, default hyperparameters, same run",
        "machine": platform.processor() or platform.machine(),
        "runs": rows,
    }
    write_json_atomic(args.out, result)
    print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
