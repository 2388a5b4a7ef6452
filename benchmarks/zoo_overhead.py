"""Overhead of training through rl-zoo3 (``zoo.rlzoo.train``) against calling the agent directly.

What is compared
    The same TPO run two ways, with the hyperparameters of ``zoo/rlzoo/hyperparams/tpo.yml``
    for the env (plus ``--length``), the same seed and the same budget (``--iterations``
    iterations, converted to env steps by a one-iteration warm-up run):

    * ``direct``: ``TPO(policy, gym.make(env, **env_kwargs), seed=s, **hyperparameters)``,
      ``learn(budget)``, ``save``;
    * ``zoo``: ``zoo.rlzoo.train.main([...])``, i.e. rl-zoo3's own ``train()``: reading the
      YAML, building the env with :class:`zoo.rlzoo.vec_env.NativeVecEnv`, constructing the
      agent, ``learn`` with rl-zoo3's callbacks and ``save`` into its log layout; run with
      ``--eval-freq -1`` (pure training path) and, separately, with rl-zoo3's default
      evaluation every 25,000 steps (``zoo_eval``).

How it is measured
    In one process with the imports done, torch limited to ``--threads`` threads, the
    variants run in turn ``--repeats`` times (interleaved, so a change in machine load
    hits all of them); each time is the wall clock of the whole call. Reported: the
    median seconds of each variant, and ``ratio = zoo / direct`` (the issue's target:
    at most 1.10). The final parameters of the direct and zoo runs are compared too
    (``identical_parameters``): the zoo must train the very same agent.

Run it from the repository root::

    python -m benchmarks.zoo_overhead                               # bag, H = 10, 5 iterations
    python -m benchmarks.zoo_overhead --env TokenReversal-terminal-v0 --length 8 --iterations 3
    python -m benchmarks.zoo_overhead --out results/zoo_overhead.json

It prints the JSON and writes it to ``--out`` (default ``results/zoo_overhead.json``).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from zoo.cli import positive_int


def section_hyperparams(env_id: str, length: int | None) -> tuple[dict[str, Any], dict[str, Any], str]:
    """(agent kwargs, env kwargs, policy) of tpo.yml's section for ``env_id``."""
    from zoo.rlzoo.hyperparams import HYPERPARAMS_DIR, evaluate_policy_kwargs, load_file

    path = HYPERPARAMS_DIR / "tpo.yml"
    section = dict(load_file(path)[env_id])
    env_kwargs = dict(section.pop("env_kwargs", {}) or {})
    if length is not None:
        env_kwargs["length"] = length
    policy = section.pop("policy")
    for key in ("n_timesteps", "n_envs"):
        section.pop(key, None)
    if "policy_kwargs" in section:
        section["policy_kwargs"] = evaluate_policy_kwargs(section["policy_kwargs"], str(path))
    return section, env_kwargs, policy


def run_direct(env_id: str, env_kwargs: dict, policy: str, hyper: dict, seed: int, budget: int, out: Path):
    import gymnasium as gym

    from tpo_agents import TPO

    model = TPO(policy, gym.make(env_id, **env_kwargs), seed=seed, verbose=0, **hyper)
    model.learn(budget)
    model.save(out / "direct")
    model.env.close()
    return model


def run_zoo(env_id: str, env_kwargs: dict, seed: int, budget: int, threads: int, out: Path, evaluate: bool):
    from zoo.rlzoo.train import main

    argv = ["--algo", "tpo", "--env", env_id, "-n", str(budget), "--seed", str(seed), "-f", str(out)]
    argv += ["--verbose", "0", "--num-threads", str(threads)]
    argv += ["--env-kwargs", *[f"{k}:{v!r}" for k, v in env_kwargs.items()]]
    if not evaluate:
        argv += ["--eval-freq", "-1"]
    with contextlib.redirect_stdout(io.StringIO()):
        manager = main(argv)
    return Path(manager.save_path) / f"{env_id}.zip"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.zoo_overhead", description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="TokenReversal-bag-v0")
    parser.add_argument("--length", type=positive_int, default=10, help="Token Reversal H (ignored elsewhere)")
    parser.add_argument("--iterations", type=positive_int, default=5)
    parser.add_argument("--repeats", type=positive_int, default=3)
    parser.add_argument("--threads", type=positive_int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="results/zoo_overhead.json")
    args = parser.parse_args(argv)

    import torch

    import tpo_gym  # noqa: F401
    from tpo_agents import TPO

    torch.set_num_threads(args.threads)
    length = args.length if args.env.startswith("TokenReversal") else None
    hyper, env_kwargs, policy = section_hyperparams(args.env, length)
    times: dict[str, list[float]] = {"direct": [], "zoo": [], "zoo_eval": []}
    cpu: dict[str, list[float]] = {"direct": [], "zoo": [], "zoo_eval": []}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        # Warm-up: one iteration (imports, allocator), which also gives its env steps.
        per_iteration = run_direct(args.env, env_kwargs, policy, hyper, args.seed, 1, tmp).num_timesteps
        budget = per_iteration * args.iterations
        run_zoo(args.env, env_kwargs, args.seed, per_iteration, args.threads, tmp / "warm", evaluate=False)
        for r in range(args.repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            direct = run_direct(args.env, env_kwargs, policy, hyper, args.seed, budget, tmp)
            times["direct"].append(time.perf_counter() - t0)
            cpu["direct"].append(time.process_time() - c0)
            for variant, evaluate in (("zoo", False), ("zoo_eval", True)):
                t0, c0 = time.perf_counter(), time.process_time()
                zoo_model = run_zoo(args.env, env_kwargs, args.seed, budget, args.threads, tmp / f"{variant}{r}", evaluate)
                times[variant].append(time.perf_counter() - t0)
                cpu[variant].append(time.process_time() - c0)
        zoo = TPO.load(zoo_model)
        identical = all(
            torch.equal(a, b) for a, b in zip(direct.policy.state_dict().values(), zoo.policy.state_dict().values())
        )
    median = {k: statistics.median(v) for k, v in times.items()}
    median_cpu = {k: statistics.median(v) for k, v in cpu.items()}
    result = {
        "env": args.env,
        "env_kwargs": env_kwargs,
        "hyperparameters": {k: (v if isinstance(v, int | float | str) else repr(v)) for k, v in hyper.items()},
        "policy": policy,
        "iterations": args.iterations,
        "timesteps": budget,
        "timesteps_per_iteration": per_iteration,
        "threads": args.threads,
        "repeats": args.repeats,
        "seconds": times,
        "median_seconds": median,
        "ratio": median["zoo"] / median["direct"],
        "ratio_with_eval": median["zoo_eval"] / median["direct"],
        "cpu_seconds": cpu,
        "median_cpu_seconds": median_cpu,
        "cpu_ratio": median_cpu["zoo"] / median_cpu["direct"],
        "cpu_ratio_with_eval": median_cpu["zoo_eval"] / median_cpu["direct"],
        "identical_parameters": identical,
    }
    text = json.dumps(result, indent=2)
    print(text)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")
    return result


if __name__ == "__main__":
    main()
