"""The gym-defaults benchmark's command line: ``python -m benchmarks.gym_defaults``."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.gym_defaults.config import (
    ENVS,
    MATCH_RULE,
    METHODS,
    NAME,
    eval_episodes,
    method_hyperparameters,
    missing_requirement,
    zoo_ppo_file,
    zoo_version,
)
from benchmarks.gym_defaults.report import match_lines, summarize_env, write_outputs
from benchmarks.gym_defaults.runner import (
    BUDGETS,
    CacheConfigError,
    plan_runs,
    read_cache,
    run_missing,
)
from benchmarks.harness import EVAL_SEED_OFFSET
from zoo.cli import positive_float, positive_int
from zoo.jobs.sweep import cache_root

DESCRIPTION = "Gym defaults benchmark: TPO and GRPO with default hyperparameters against tuned PPO."


def fraction(text: str) -> float:
    """argparse type: a number in (0, 1], with an error naming the bad value."""
    value = positive_float(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"expected a fraction in (0, 1], got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gym_defaults", description=DESCRIPTION)
    parser.add_argument("--envs", nargs="+", default=list(ENVS), choices=list(ENVS), metavar="ENV",
                        help="environments (default: all): " + ", ".join(ENVS))
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS), metavar="METHOD",
                        help="methods (default: all): " + ", ".join(METHODS))
    parser.add_argument("--seeds", type=positive_int, default=5, help="seeds 0..N-1 per env and method")
    parser.add_argument("--workers", type=positive_int, default=2, help="parallel processes (1: in this process)")
    parser.add_argument("--budget", choices=BUDGETS, default="table",
                        help="table: each env's budget in the table; zoo: rl-zoo3's own n_timesteps "
                             "where it tuned PPO for longer (Acrobot, MountainCar, LunarLander: 1M)")
    parser.add_argument("--timesteps-scale", type=positive_float, default=1.0,
                        help="multiplies every env's default budget (e.g. 0.1 for a quick look)")
    parser.add_argument("--eval-every-fraction", type=fraction, default=0.05,
                        help="evaluate every this fraction of the budget (0.05: 20 evaluations)")
    parser.add_argument("--n-eval-episodes", type=positive_int, default=10, help="episodes per evaluation")
    parser.add_argument("--out", type=Path, default=Path("results"),
                        help="output folder of gym_defaults.json/.png/.md (default: results)")
    parser.add_argument("--cache", type=Path, default=None, metavar="DIR",
                        help="cache root of the per-run records, kept in DIR/gym_defaults (default: OUT/cache; "
                             "the committed records: data/cache)")
    parser.add_argument("--cached-only", action="store_true",
                        help="train nothing: report on the runs cached under CACHE/gym_defaults")
    parser.add_argument("--quiet", action="store_true", help="no progress output")
    return parser


def main(argv: list[str] | None = None) -> dict:
    """Run (or resume, or with ``--cached-only`` only report on) the benchmark; write and
    return the result."""
    parser = build_parser()
    args = parser.parse_args(argv)
    args.envs, args.methods = list(dict.fromkeys(args.envs)), list(dict.fromkeys(args.methods))
    if "ppo_zoo" in args.methods and zoo_ppo_file() is None:
        parser.error("--methods ppo_zoo reads rl-zoo3's hyperparams/ppo.yml: install rl-zoo3 (pip install -e '.[zoo]')")
    skipped = {e: why for e in args.envs if (why := missing_requirement(e)) is not None}
    env_names = [e for e in args.envs if e not in skipped]
    if not env_names:
        parser.error("no env can run here: " + "; ".join(f"{e} {why}" for e, why in skipped.items()))
    out, cache = Path(args.out), cache_root(args)
    runs = plan_runs(env_names, args.methods, args.seeds, args.timesteps_scale, args.eval_every_fraction,
                     args.n_eval_episodes, budget=args.budget)
    cached = read_cache(runs, cache)
    t0 = time.perf_counter()
    backend: dict = {}
    if args.cached_only:
        if not cached:
            raise SystemExit(f"--cached-only: none of the {len(runs)} runs is cached under {cache / NAME}")
        records = cached
    else:
        records = run_missing(runs, cached, cache, args.workers, args.quiet, info=backend)
    total = time.perf_counter() - t0
    envs = {e: summarize_env(e, [r for r in runs if r.env == e], records, args.methods) for e in env_names}
    result: dict[str, Any] = {
        "benchmark": NAME,
        "config": {
            "envs": env_names,
            "methods": args.methods,
            "n_seeds": args.seeds,
            "budget": args.budget,
            "timesteps_scale": args.timesteps_scale,
            "timesteps": {e: envs[e]["timesteps"] for e in env_names},
            "eval_every_fraction": args.eval_every_fraction,
            "eval_every": {e: envs[e]["eval_every"] for e in env_names},
            "n_eval_episodes": args.n_eval_episodes,
            "n_eval_episodes_per_env": {e: eval_episodes(e, args.n_eval_episodes) for e in env_names},
            "eval_deterministic": True,
            "eval_seed_offset": EVAL_SEED_OFFSET,
            "workers": args.workers,
            "torch_threads_per_run": 1,
            "cached_only": args.cached_only,
            "backend": backend,
            "rl_zoo3_version": zoo_version(),
            "hyperparameters": {e: {m: method_hyperparameters(e, m) for m in args.methods} for e in env_names},
            "match_rule": MATCH_RULE,
        },
        "envs": envs,
        "summary": match_lines(envs),
        "skipped": skipped,
        "failures": [{"id": r.name, "env": r.env, "method": r.method, "seed": r.seed,
                      "error": records[r.name]["failed"], "traceback": records[r.name].get("traceback", "")}
                     for r in runs if "failed" in records.get(r.name, {})],
        "missing": [r.name for r in runs if r.name not in records],
        "total_seconds": round(total, 1),  # this call's (near 0 for a --cached-only report)
        "compute_seconds": round(sum(r.get("seconds", 0.0) for r in records.values()), 1),
    }
    paths = write_outputs(result, out)
    if not args.quiet:
        print(paths["md"].read_text() + "\nwrote " + ", ".join(map(str, paths.values())))
    return result


def run(argv: list[str] | None = None) -> None:
    """The command: :func:`main`, with a cache config mismatch as a one-line error."""
    try:
        main(sys.argv[1:] if argv is None else argv)
    except CacheConfigError as exc:
        sys.exit(f"error: {exc}")
