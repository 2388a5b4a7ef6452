"""Time the paper's own JAX sweep runner on this machine, in the same run as ours.

The paper's published code (github.com/JeanKaddour/tpo) trains every seed of a Token
Reversal setting at once: ``tpo.experiments._trial.run_trial`` jit-compiles one
training loop and vmaps it over the seeds. This module runs that function from a local
checkout (``--artifact-src``: the folder holding its ``tpo`` package, e.g. the checkout's
``src``; nothing of it is shipped here) for sequence-level TPO, terminal reward, reverse
copy, H = 8, V = 2, B = 100, K = 8, 20 seeds, and reports milliseconds per
seed-iteration, the unit of ``benchmarks.speed``'s sweep throughput.

``run_trial`` compiles anew on every call (the episode count is a static loop length), so
it is called twice, with ``a`` and ``b`` episodes, and the time per iteration is the
difference of the two wall times over ``b - a``: compilation and set-up cancel.

It runs in a child process so that JAX's thread pools and memory never share a process
with the torch measurements: ``python -m benchmarks.artifact_sweep --artifact-src DIR``
prints one JSON object; :func:`measure` does that and parses it. The artifact's ``tpo``
package is imported from DIR by its path (nothing is added to ``sys.path``).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.machinery
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

SETTING = {
    "num_seeds": 20,
    "sequence_length": 8,
    "vocab_size": 2,
    "batch_size": 100,
    "learning_rate": 1e-4,  # the artifact's config value (its Muon runs at 10x this)
    "eta": 1.0,
    "ppo_epsilon": 0.2,
    "ppo_epochs": 4,
    "k_candidates": 8,
    "target_type": "reverse_copy",
    "reward_type": "terminal",
    "algorithms": ("tpo",),
}
"""The artifact's sequence-level TPO at H = 8 (Table 3's setting at that length)."""


def per_iteration(seconds_a: float, seconds_b: float, episodes_a: int, episodes_b: int, num_seeds: int) -> dict:
    """Seconds per iteration of the whole vmapped sweep and milliseconds per seed-iteration,
    from two calls that differ only in their episode count."""
    if episodes_b <= episodes_a:
        raise ValueError(f"episodes must increase: got {episodes_a} then {episodes_b}")
    s = (seconds_b - seconds_a) / (episodes_b - episodes_a)
    if s <= 0:
        raise ValueError(
            f"the longer call ({seconds_b:.2f} s) was not slower than the shorter ({seconds_a:.2f} s): "
            "compile-time noise swamped the iterations; use a larger episode gap"
        )
    return {"s_per_sweep_iteration": s, "ms_per_seed_iteration": 1e3 * s / num_seeds}


def import_run_trial(artifact_src: Path):
    """The artifact's ``tpo.experiments._trial.run_trial``, its ``tpo`` package imported from
    the folder ``artifact_src`` (registered as ``tpo`` in ``sys.modules``, so that its own
    ``tpo.*`` imports resolve inside it); SystemExit naming the folder when it has none."""
    try:
        spec = importlib.machinery.PathFinder.find_spec("tpo", [str(artifact_src)])
        if spec is None or spec.loader is None or spec.submodule_search_locations is None:
            raise ImportError(f"no package 'tpo' in {artifact_src}")
        package = importlib.util.module_from_spec(spec)
        sys.modules["tpo"] = package
        spec.loader.exec_module(package)
        return importlib.import_module("tpo.experiments._trial").run_trial
    except ImportError as exc:
        raise SystemExit(
            f"--artifact-src {artifact_src}: no importable tpo.experiments._trial there ({exc}); "
            "expected the 'src' folder of a checkout of github.com/JeanKaddour/tpo"
        ) from None


def _time_in_this_process(artifact_src: Path, episodes: tuple[int, int]) -> dict:
    run_trial = import_run_trial(artifact_src)
    import jax

    seconds = []
    for n in episodes:
        t0 = time.perf_counter()
        out = run_trial(num_episodes=n, **SETTING)
        jax.block_until_ready(out["tpo"])
        seconds.append(time.perf_counter() - t0)
    return {
        "runner": "tpo.experiments._trial.run_trial (jit, vmapped over seeds)",
        "jax_version": jax.__version__,
        "setting": {k: list(v) if isinstance(v, tuple) else v for k, v in SETTING.items()},
        "episodes": list(episodes),
        "wall_seconds": seconds,
        **per_iteration(seconds[0], seconds[1], episodes[0], episodes[1], SETTING["num_seeds"]),
    }


def measure(artifact_src: Path, episodes: tuple[int, int] = (2, 6), timeout: float = 3600.0) -> dict:
    """Run the artifact's sweep in a child process; its JSON result."""
    cmd = [
        sys.executable, "-m", "benchmarks.artifact_sweep", "--artifact-src", str(artifact_src),
        "--episodes", str(episodes[0]), str(episodes[1]),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"the artifact's sweep failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.artifact_sweep", description=__doc__.split("\n")[0])
    parser.add_argument("--artifact-src", type=Path, required=True, help="folder holding the artifact's tpo package")
    parser.add_argument("--episodes", type=int, nargs=2, default=(2, 6), metavar=("A", "B"),
                        help="episode counts of the two timed calls (B > A)")
    args = parser.parse_args(argv)
    result = _time_in_this_process(args.artifact_src, tuple(args.episodes))
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
