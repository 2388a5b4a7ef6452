"""Milliseconds per training iteration on Token Reversal, split into sampling and update.

What is measured (paper sizes, TransformerPolicy defaults: d_model 64, 2 layers, 2 heads),
on each training substrate named by ``--substrate`` (``paper``: the JAX artifact's layout,
initialization and optax Muon; ``ours``: torch layout and Muon; see ``docs/substrates.md``):

* ``tpo`` / ``grpo``: sequence level, terminal reward, H = 8, V = 2, B = 100, K = 8, 4 epochs;
* ``tpo_token`` / ``grpo_token``: token level, bag reward, H = 10, V = 2, B = 100, K = 8, 4 epochs;
* ``dg`` (1 epoch) and ``ppo`` (critic-free, 4 epochs): one completion per prompt, terminal H = 8.

Baselines, named in the output:

* ``artifact_ms``: the published JAX artifact, jit-compiled, on this 2-core CPU (numbers
  quoted in the project's issue; not re-measured here);
* ``jax_baseline`` (tpo): our own jit-compiled JAX implementation of the same iteration
  (:mod:`benchmarks.jax_baseline`), measured in the same run at the same thread count, and
  ``speedup_vs_jax``, its time over ours;
* ``update_ms_identical_candidates`` (tpo, grpo): the update on the same batch with each
  group's K completions made identical, as once a policy is solved (identical completions
  of a prompt are evaluated once), reported as ``identical_candidates_speedup``;
* ``no_cache_sampling_ms``: our sampler *without* the key/value cache (a full forward
  pass over the prefix for every token), measured in the same run, so the cache's gain
  is a ratio of two numbers from the same machine state;
* ``matmul_peak_gflops``: a large float32 matmul with the same thread setting, the
  ceiling against which the achieved GFLOP/s of each iteration are reported;
* ``sweep``: throughput of a seed sweep as ``zoo.paper.reproduce`` runs one (one process per
  core, one thread each, all running at once), in milliseconds per seed-iteration, against
  the artifact's own sweep runner (jit, vmapped over 20 seeds: about 1000 ms per
  seed-iteration of sequence-level TPO at H = 8 on this 2-core CPU, quoted), and, with
  ``--artifact-src DIR`` (the ``src`` folder of a checkout of the paper's code), that
  runner itself timed in the same run (:mod:`benchmarks.artifact_sweep`):
  ``artifact_sweep_measured`` and ``speedup_vs_artifact_sweep_measured``;
* ``sweep_whole_run`` (``--sweep-run-iterations N``): the same sweep, each seed trained for
  ``N`` iterations from a fresh policy (2000: a whole run of the paper's sweeps), against the
  same measured artifact runner, whose cost per iteration does not change over a run (jit,
  static shapes) while ours falls as a seed's K completions of a prompt come to agree.

Usage: ``python -m benchmarks.speed [--threads 1 2] [--iterations 5] [--substrate paper ours]
[--sweep-workers 2] [--sweep-run-iterations N] [--artifact-src DIR] [--malloc keep|default] [--no-jax-baseline] [--out results/speed.json]`` (``keep``, the default, keeps freed activation memory in the
heap: see :mod:`zoo.jobs.runtime`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3.common.callbacks import BaseCallback

import tpo_gym  # noqa: F401
from benchmarks import artifact_sweep, jax_baseline
from tpo_agents import DG, GRPO, TPO, CriticFreePPO
from zoo.jobs.runtime import keep_freed_memory

ARTIFACT_MS = {
    "tpo": (820, 910),
    "tpo_token": (740, 780),
    "grpo": (810, 1020),
    "dg": (55, 55),
    "ppo": (115, 115),
}

ARTIFACT_SWEEP_MS_PER_SEED_ITERATION = {"tpo": 1000.0}
"""The artifact's vmapped 20-seed runner on this 2-core CPU (sequence TPO, H = 8)."""

JAX_FIELDS = ("iteration_ms", "sampling_ms", "update_ms", "compile_s", "busy_threads", "jax_version")

SETUPS = {
    "tpo": (TPO, "TokenReversal-terminal-v0", 8),
    "grpo": (GRPO, "TokenReversal-terminal-v0", 8),
    "tpo_token": (TPO, "TokenReversal-bag-v0", 10),
    "grpo_token": (GRPO, "TokenReversal-bag-v0", 10),
    "dg": (DG, "TokenReversal-terminal-v0", 8),
    "ppo": (CriticFreePPO, "TokenReversal-terminal-v0", 8),
}


class PhaseTimer(BaseCallback):
    """Wall time of each rollout (sampling) and of the update that follows it."""

    def __init__(self, iterations: int):
        super().__init__()
        self.iterations = iterations
        self.sampling: list[float] = []
        self.update: list[float] = []
        self._t = 0.0
        self._end = None

    def _on_rollout_start(self) -> None:
        now = time.perf_counter()
        if self._end is not None:
            self.update.append(now - self._end)
        self._t = now

    def _on_rollout_end(self) -> None:
        self._end = time.perf_counter()
        self.sampling.append(self._end - self._t)

    def _on_step(self) -> bool:
        return len(self.update) < self.iterations


def transformer_flops_per_token(d: int, layers: int, vocab: int, context: float) -> float:
    """Forward FLOPs of one token: 2 * (12 d^2 per layer + d V) + attention 4 * ctx * d per layer."""
    return 2 * (layers * 12 * d * d + d * vocab) + layers * 4 * context * d


def iteration_flops(name: str, model) -> float:
    """FLOPs of one iteration: sampling forwards + epochs x 3 training passes (a backward
    pass costs about two forwards)."""
    arch = model.policy.arch
    d, L, V = arch["d_model"], arch["n_layers"], int(model.action_space.n)
    H = model.env.get_attr("prompt_length", indices=[0])[0]
    K = model.n_candidates if name in ("tpo", "grpo") else 1
    rows = model.batch_size * K
    sample = (model.batch_size * H + rows * H) * transformer_flops_per_token(d, L, V, 1.5 * H)
    # Sequence groups encode each prompt once for its K completions (see token_log_probs).
    train_tokens = model.batch_size * H + rows * (H - 1) if K > 1 else rows * (2 * H - 1)
    # Old log-probs come from the sampler, so training is epochs x (forward + backward).
    return sample + 3 * model.n_epochs * train_tokens * transformer_flops_per_token(d, L, V, H)


def matmul_peak_gflops(n: int = 1024, repeats: int = 10) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    t = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * n**3 * repeats / (time.perf_counter() - t) / 1e9


def no_cache_sampling_ms(model, repeats: int = 3) -> float:
    """Sampling the same rollout shape by re-reading the whole prefix for every token."""
    policy = model.policy
    H = model.env.get_attr("prompt_length", indices=[0])[0]
    rows = model.n_envs
    prompts = torch.randint(0, 2, (rows, H))
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        with torch.no_grad():
            obs = torch.full((rows, 2 * H), policy.pad_id)
            obs[:, :H] = prompts
            for step in range(H):
                token = policy.sample(torch.log_softmax(policy.action_logits(obs), -1)).squeeze(-1)
                obs[:, H + step] = token
        times.append(time.perf_counter() - t)
    return 1e3 * float(np.median(times))


def cached_sampling_only_ms(model, repeats: int = 3) -> float:
    policy = model.policy
    H = model.env.get_attr("prompt_length", indices=[0])[0]
    K = model.n_envs // model.batch_size if model.n_envs > model.batch_size else 1
    prompts = torch.randint(0, 2, (model.n_envs // K, H))
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        policy.generate(prompts, H, n_samples=K)
        times.append(time.perf_counter() - t)
    return 1e3 * float(np.median(times))


def identical_candidates_update_ms(model, repeats: int = 3) -> float:
    """The update on the last batch with every group's K completions set to its first one,
    as once a policy is solved: identical completions go through the network once."""
    batch = model.last_batch
    K = batch.group_size
    same = batch.completions.view(batch.n_groups, K, -1)[:, :1].expand(-1, K, -1).reshape_as(batch.completions)
    solved = dataclasses.replace(batch, completions=same)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        model.train(solved)
        times.append(time.perf_counter() - t)
    return 1e3 * float(np.median(times))


def make_model(name: str, substrate: str, seed: int = 0):
    cls, env_id, H = SETUPS[name]
    return cls("TransformerPolicy", gym.make(env_id, length=H), seed=seed, policy_kwargs=dict(substrate=substrate))


def timed_iterations(model, iterations: int) -> tuple[np.ndarray, np.ndarray]:
    """Sampling and update seconds of ``iterations`` iterations after one warm-up."""
    timer = PhaseTimer(iterations + 1)
    model.learn(10**9, callback=timer, log_interval=None)
    return np.asarray(timer.sampling[1 : iterations + 1]), np.asarray(timer.update[1 : iterations + 1])


def _sweep_worker(name: str, substrate: str, seed: int, iterations: int, start, queue) -> None:
    torch.set_num_threads(1)
    model = make_model(name, substrate, seed)
    start.wait()  # every worker times the same stretch of wall clock
    t0 = time.perf_counter()
    timed_iterations(model, iterations)
    seconds = time.perf_counter() - t0
    # The last episodes' success rate: the timed stretch trained a policy, not just spent time.
    success = float(np.mean([info["r"] for info in model.ep_info_buffer])) if model.ep_info_buffer else float("nan")
    queue.put((seed, seconds, iterations + 1, success))


def sweep_throughput(name: str, substrate: str, iterations: int, workers: int) -> dict:
    """Milliseconds per seed-iteration with ``workers`` single-thread processes at once, each
    training seed ``0 .. workers - 1`` for ``iterations + 1`` iterations from a fresh policy
    (``final_success``: each seed's success rate over its last 100 episodes)."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    start, queue = ctx.Barrier(workers), ctx.Queue()
    procs = [ctx.Process(target=_sweep_worker, args=(name, substrate, s, iterations, start, queue)) for s in range(workers)]
    for p in procs:
        p.start()
    results = sorted(queue.get(timeout=6 * 3600) for _ in procs)
    for p in procs:
        p.join()
    wall = max(seconds for _, seconds, _, _ in results)
    seed_iterations = sum(n for _, _, n, _ in results)
    out = {
        "workers": workers,
        "iterations_per_seed": iterations + 1,
        "ms_per_seed_iteration": 1e3 * wall / seed_iterations,
        "final_success": [success for _, _, _, success in results],
    }
    if name in ARTIFACT_SWEEP_MS_PER_SEED_ITERATION:
        ref = ARTIFACT_SWEEP_MS_PER_SEED_ITERATION[name]
        out["artifact_ms_per_seed_iteration"] = ref
        out["speedup_vs_artifact_sweep"] = ref / out["ms_per_seed_iteration"]
    return out


def measure(name: str, iterations: int, threads: int, jax: bool = True, substrate: str = "paper") -> dict:
    torch.set_num_threads(threads)
    model = make_model(name, substrate)
    sampling, update = (1e3 * t for t in timed_iterations(model, iterations))
    total = sampling + update
    flops = iteration_flops(name, model)
    out = {
        "iteration_ms": float(np.median(total)),
        "sampling_ms": float(np.median(sampling)),
        "update_ms": float(np.median(update)),
        "gflop_per_iteration": flops / 1e9,
        "achieved_gflops": flops / 1e9 / (np.median(total) / 1e3),
        "policy_sampling_only_ms": cached_sampling_only_ms(model),
        "no_cache_sampling_ms": no_cache_sampling_ms(model),
    }
    out["kv_cache_speedup"] = out["no_cache_sampling_ms"] / out["policy_sampling_only_ms"]
    if name in ("tpo", "grpo"):
        out["update_ms_identical_candidates"] = identical_candidates_update_ms(model)
        out["identical_candidates_speedup"] = out["update_ms"] / out["update_ms_identical_candidates"]
    if name == "tpo" and jax:
        ref = jax_baseline.measure(threads, iterations)
        out["jax_baseline"] = {k: ref[k] for k in JAX_FIELDS}
        out["speedup_vs_jax"] = ref["iteration_ms"] / out["iteration_ms"]
    if name in ARTIFACT_MS:
        lo, hi = ARTIFACT_MS[name]
        out["artifact_ms"] = [lo, hi]
        out["speedup_vs_artifact"] = (lo + hi) / 2 / out["iteration_ms"]
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.speed", description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--methods", nargs="+", default=list(SETUPS), choices=list(SETUPS))
    parser.add_argument("--out", type=Path, default=Path("results/speed.json"))
    parser.add_argument("--substrate", nargs="+", default=["paper", "ours"], choices=["paper", "ours"])
    parser.add_argument(
        "--sweep-workers", type=int, default=2,
        help="processes of the seed-sweep throughput measurement of sequence TPO (0: skip it)",
    )
    parser.add_argument(
        "--sweep-run-iterations", type=int, default=0, metavar="N",
        help="also time whole sweep runs: each worker trains its seed for N iterations from a fresh "
        "policy (2000: the paper's run), as the seed sweeps of zoo.paper do (0: skip)",
    )
    parser.add_argument(
        "--artifact-src", type=Path, default=None, metavar="DIR",
        help="the src folder of a checkout of the paper's code (github.com/JeanKaddour/tpo): "
        "time its vmapped 20-seed runner in this run, beside our sweep throughput",
    )
    parser.add_argument(
        "--malloc",
        choices=("keep", "default"),
        default="keep",
        help="keep: raise glibc's mmap/trim thresholds (zoo.jobs.runtime.keep_freed_memory)",
    )
    parser.add_argument(
        "--no-jax-baseline", dest="jax_baseline", action="store_false",
        help="skip the same-run JAX baseline of sequence-level TPO (needs jax and optax)",
    )
    args = parser.parse_args(argv)
    if args.sweep_run_iterations < 0:
        parser.error(f"--sweep-run-iterations must be 0 (skip) or a number of iterations; got {args.sweep_run_iterations}")
    if args.malloc == "keep":
        keep_freed_memory()
    config = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    result: dict = {"config": config, "threads": {}}
    for threads in args.threads:
        torch.set_num_threads(threads)
        row = {"matmul_peak_gflops": matmul_peak_gflops(), "substrates": {}}
        for substrate, name in ((s, n) for s in args.substrate for n in args.methods):
            methods = row["substrates"].setdefault(substrate, {"methods": {}})["methods"]
            # The JAX baseline is the paper's network and optimizer: time it once per thread count.
            jax = args.jax_baseline and substrate == args.substrate[0]
            methods[name] = m = measure(name, args.iterations, threads, jax, substrate)
            m["fraction_of_peak"] = m["achieved_gflops"] / row["matmul_peak_gflops"]
            print(
                f"threads={threads} {substrate:5s} {name:10s} {m['iteration_ms']:7.1f} ms/iter "
                f"(sampling {m['sampling_ms']:6.1f}, update {m['update_ms']:6.1f}) "
                f"{m['achieved_gflops']:5.2f} GFLOP/s = {100 * m['fraction_of_peak']:4.1f}% of peak; "
                f"KV cache x{m['kv_cache_speedup']:.1f}"
                + (f"; artifact {m['artifact_ms']} ms" if "artifact_ms" in m else "")
                + (f"; JAX {m['jax_baseline']['iteration_ms']:.1f} ms" if "jax_baseline" in m else ""),
                flush=True,
            )
        result["threads"][str(threads)] = row
    if args.sweep_workers > 0 and "tpo" in args.methods:
        measured = None
        if args.artifact_src is not None:
            measured = artifact_sweep.measure(args.artifact_src)
            result["artifact_sweep_measured"] = measured
            print(f"artifact's sweep, measured: {measured['ms_per_seed_iteration']:.1f} ms per seed-iteration", flush=True)
        # "sweep": a fresh policy's first iterations, our slowest phase; "sweep_whole_run": each
        # seed trained for N iterations. The artifact's runner does the same work every iteration
        # (jit, static shapes), so its measured rate holds for both; ours gets cheaper as a
        # seed's K completions of a prompt come to agree, which only a whole run shows.
        spans = [("sweep", args.iterations)]
        if args.sweep_run_iterations > 0:
            spans.append(("sweep_whole_run", args.sweep_run_iterations - 1))
        for key, iterations in spans:
            result[key] = {}
            for substrate in args.substrate:
                result[key][substrate] = m = sweep_throughput("tpo", substrate, iterations, args.sweep_workers)
                if measured is not None:
                    m["speedup_vs_artifact_sweep_measured"] = measured["ms_per_seed_iteration"] / m["ms_per_seed_iteration"]
                print(
                    f"{key} {substrate:5s} tpo: {m['ms_per_seed_iteration']:.1f} ms per seed-iteration over "
                    f"{m['iterations_per_seed']} iterations per seed with {m['workers']} workers (success at "
                    f"the end {m['final_success']}); artifact's sweep {m['artifact_ms_per_seed_iteration']:.0f} "
                    f"(x{m['speedup_vs_artifact_sweep']:.2f})"
                    + (f"; measured x{m['speedup_vs_artifact_sweep_measured']:.2f}" if measured else ""),
                    flush=True,
                )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
