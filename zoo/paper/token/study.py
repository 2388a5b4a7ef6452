"""Token Reversal studies: the paper's Tables 1, 2, 3, 5 and the sparse-reward diagnostics.

Every experiment is a grid of jobs, one per (method, setting, seed); a job trains one agent
for ``episodes`` iterations and records its training-batch error and gradient norm per
iteration. This module runs an experiment from its command line and writes its outputs;
the parts live in

* :mod:`zoo.paper.token.methods`: the method table (method key -> agent class and overrides)
  and the aliases ``--methods`` accepts (``ppo`` / ``cfppo`` -> ``critic_free_ppo``,
  ``tpo_token`` -> ``tpo``), with the names jobs and results are stored under;
* :mod:`zoo.paper.token.experiments`: each experiment's methods, settings and notes;
* :mod:`zoo.paper.numbers`: the paper's published values for the tables;
* :mod:`zoo.paper.token.grid`: the command line -> the methods, settings and jobs of a run;
* :mod:`zoo.paper.token.jobs`: a job's spec, agent and per-iteration record (:func:`run_job`),
  and the per-(method, setting) summaries;
* :mod:`zoo.paper.token.tables` and :mod:`zoo.paper.token.plots`: the markdown page and the figure.

Each finished job is cached as ``CACHE/<experiment>/<job>.json`` (written atomically;
``--cache``, default ``OUT/cache``),
so a rerun skips finished jobs and an interrupted sweep resumes. A cached job is reused
only if its stored spec (env, agent, episodes, seed) equals the requested one. Jobs run
on a :mod:`zoo.jobs.backends` backend: this machine's processes (``--backend local``) or one
Ray task per job (``--backend ray``); the cache is the same for both (:mod:`zoo.jobs.sweep`).
The sweep calls this module's ``run_job`` (looked up when it runs, so a test can replace it).

Summaries per (method, setting) use :func:`zoo.jobs.results.summarize` with ``final_error`` =
mean error over the last 50 iterations; the markdown puts the paper's number beside ours,
``ours (paper)``, in the paper's table layout (docs/algorithms.md, section 10).

Run through ``python -m zoo.reproduce NAME`` (see :mod:`zoo.paper.reproduce`). Import each
name from the module that defines it.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from tpo_agents.atomic import write_json_atomic
from zoo.jobs.sweep import cache_root, code_version, load_cached, run_sweep
from zoo.paper.token.experiments import TOKEN_EXPERIMENTS, Setting, base_experiment
from zoo.paper.token.grid import build_jobs, init_of, substrate_of, variant_suffix
from zoo.paper.token.jobs import FINAL_WINDOW, TAKEOFF_ERROR, Job, run_job, summarize_jobs
from zoo.paper.token.plots import plot
from zoo.paper.token.tables import markdown


def run_jobs(
    jobs: Sequence[Job],
    cache: Path,
    workers: int = 1,
    progress: bool = True,
    desc: str = "",
    backend: str = "local",
    ray_address: str | None = None,
    info: dict | None = None,
) -> dict:
    """Run (or load from the cache root ``cache``) every job; ``{job.name: record}``.

    ``backend="local"``: ``workers > 1`` is a process pool (spawn), ``workers == 1`` runs
    in this process; ``backend="ray"``: one Ray task per job (see :mod:`zoo.jobs.backends`).
    Every job runs with one torch thread, so results do not depend on the backend or the
    number of workers. Finished jobs are cached as they complete (:func:`zoo.jobs.sweep.run_sweep`).
    Each job runs through this module's ``run_job``, read from the module when the sweep
    starts.
    """
    return run_sweep(
        jobs,
        run_job,
        Path(cache),
        backend=backend,
        workers=workers,
        ray_address=ray_address,
        progress=progress,
        desc=desc,
        describe=lambda job: f"{job.method} {job.setting} seed {job.seed}",
        info=info,
    )


def _cached_subset(
    jobs: Sequence[Job], methods: Sequence[str], settings: Sequence[Setting], cache: Path
) -> tuple[list[Job], list[str], list[Setting]]:
    """The jobs already in the cache root ``cache``, and the methods and settings they cover (a
    report on a sweep that is still running; each summary says its number of seeds)."""
    cached = [j for j in jobs if load_cached(j, cache) is not None]
    if not cached:
        raise SystemExit(f"--cached-only: none of the {len(jobs)} jobs is cached under {cache}")
    have = {(j.method, j.setting) for j in cached}
    methods = [m for m in methods if any(m == hm for hm, _ in have)]
    settings = [s for s in settings if any(s.label == hs for _, hs in have)]
    return cached, methods, settings


def _provenance(args: argparse.Namespace, records: Mapping[str, dict], jobs: Sequence[Job]) -> dict:
    """What made a result: the substrate, initialization and optimizer (as the trained
    agents reported them, so a result file says it even for cached jobs)."""
    optimizers = sorted({records[j.name].get("agent", {}).get("optimizer", "?") for j in jobs})
    return {
        "substrate": substrate_of(args),
        "init": init_of(args),
        "optimizer": optimizers[0] if len(optimizers) == 1 else optimizers,
    }


def run_experiment(name: str, args: argparse.Namespace) -> dict:
    """Run (or resume) experiment ``name`` and return its result dict."""
    exp = TOKEN_EXPERIMENTS[name]
    match = getattr(args, "match", None) or "prompts"
    methods, settings, jobs = build_jobs(exp, args)
    cache = cache_root(args)
    if getattr(args, "cached_only", False):
        jobs, methods, settings = _cached_subset(jobs, methods, settings, cache)
    workers = int(getattr(args, "workers", None) or 1)
    out_name = name if match == "prompts" else f"{name}-interaction"
    out_name += variant_suffix(args)
    t0 = time.perf_counter()
    backend: dict = {}
    records = run_jobs(
        jobs,
        cache,
        workers=workers,
        progress=not getattr(args, "quiet", False),
        desc=out_name,
        backend=getattr(args, "backend", None) or "local",
        ray_address=getattr(args, "ray_address", None),
        info=backend,
    )
    summaries = summarize_jobs(jobs, records, args.steps)
    config = {
        "episodes": args.steps,
        "seeds": args.seeds,
        "match": match,
        "learning_rate": getattr(args, "learning_rate", None),
        **_provenance(args, records, jobs),
        "methods": methods,
        "settings": [{"label": s.label, "env": s.env, "agent": s.agent} for s in settings],
        "final_window": min(FINAL_WINDOW, args.steps),
        "takeoff_error": TAKEOFF_ERROR,
        **backend,
        "cache": str(cache / name),
        "code_version": code_version(),
        "stale_cached_jobs": sorted(
            j.name for j in jobs if records[j.name].get("code_version") != code_version()
        ),
        "wall_seconds": round(time.perf_counter() - t0, 2),
    }
    return {
        "experiment": out_name,
        "config": config,
        "methods": {m: {s.label: summaries[m][s.label] for s in settings if s.label in summaries[m]} for m in methods},
        "setting_order": [s.label for s in settings],
    }


def write_outputs(
    result: dict, out_dir: Path, paper_notes: str = "", log_x: bool = False
) -> dict[str, Path]:
    """``OUT/<experiment>.{json,png,md}`` (same signature as :func:`zoo.jobs.results.write_outputs`)."""
    out_dir = Path(out_dir)
    name = result["experiment"]
    exp = TOKEN_EXPERIMENTS[base_experiment(name)]
    paths = {ext: out_dir / f"{name}.{ext}" for ext in ("json", "png", "md")}
    write_json_atomic(paths["json"], result)
    plot(result, paths["png"])
    text = markdown(result, exp)
    if paper_notes and paper_notes != exp.notes:
        text += "\nPaper: " + paper_notes + "\n"
    paths["md"].write_text(text)
    return paths
