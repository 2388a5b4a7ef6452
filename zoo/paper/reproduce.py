"""Reproduce the paper's experiments by name.

Usage::

    python -m zoo.reproduce tabular-single [--seeds 100] [--out results]
    python -m zoo.reproduce tabular-multi  [--seeds 100] [--out results]
    python -m zoo.reproduce mnist [--dataset {mnist,fashion-mnist,digits}] [--seeds 20]
        [--steps 10000] [--eval-every 200] [--workers 2] [--data-dir DIR] [--out results]

The MNIST study writes ``OUT/mnist-<dataset>.{json,png,md}``.

Token Reversal (Tables 1, 2, 3, 5 and the sparse-reward diagnostics; :mod:`zoo.paper.token.study`)::

    python -m zoo.reproduce {token-vocab,token-variations,terminal,eta-sweep,k-sweep,
        epoch-sweep,zero-variance-mask,ablations} [--seeds 10] [--episodes E] [--workers 2]
        [--match {prompts,interactions}] [--lengths 7 8 9 10] [--vocabs 2 4 8 16]
        [--length H] [--methods tpo grpo ...] [--settings TAG ...] [--out results]

Per-seed runs are cached in ``CACHE/<name>/`` (a rerun resumes; ``--cache CACHE``, default
``OUT/cache``; the committed records are in ``data/cache``, see data/README.md); ``--match
interactions`` writes ``OUT/<name>-interactions.*``. ``--methods`` takes the method keys of
:mod:`zoo.paper.token.methods` and their aliases (``ppo`` / ``cfppo`` = ``critic_free_ppo``,
``tpo_token`` = ``tpo``), which run the same jobs.

Where the MNIST and Token Reversal jobs run (:mod:`zoo.jobs.backends`, docs/sweeps.md)::

    --backend local [--workers N]     processes on this machine (default)
    --backend ray [--workers N] [--ray-address auto|HOST:PORT|ray://HOST:PORT]
                                      one Ray task per (method, setting, seed)

Both backends write the same per-job cache, so a sweep interrupted on one resumes on
either. Ctrl-C keeps every finished job cached and exits with status 130 and one line
saying so; SIGINT to the driver alone first lets the running jobs finish (docs/sweeps.md). The tabular studies are exact and batched over seeds in one process: the
backend does not apply to them (``--backend ray`` is refused).

Each run writes ``OUT/<name>.json``, ``OUT/<name>.png`` (mean +- s.e. bands) and
``OUT/<name>.md`` (our numbers beside the paper's); ``python -m zoo.report OUT`` collects
them into one page.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from tpo_gym.extras import MissingExtraError
from zoo.cli import positive_float, positive_int
from zoo.jobs.backends import BACKENDS, BackendError, check_backend_args
from zoo.jobs.results import summarize, write_outputs
from zoo.jobs.sweep import SweepInterrupted, cache_root
from zoo.paper import mnist as mnist_study
from zoo.paper import numbers as paper_numbers
from zoo.paper import tabular
from zoo.paper.token import experiments as token_experiments
from zoo.paper.token import grid as token_grid
from zoo.paper.token import jobs as token_jobs
from zoo.paper.token import methods as token_methods
from zoo.paper.token import study as token_study


@dataclass(frozen=True)
class Experiment:
    """A named experiment: how to run it and what the paper reports for it."""

    run: Callable[[argparse.Namespace], dict]
    paper: str
    default_steps: int
    log_x: bool = False
    default_seeds: int = 100
    write: Callable[..., dict] | None = None  # output writer (default: zoo.jobs.results.write_outputs)
    paper_values: Callable[[dict], dict | None] | None = None
    """The paper's numbers for a result, ``{method: {summary key: text}}`` (default writer)."""
    uses_backend: bool = True


def _run_tabular(name: str, runner, methods, config: dict, args: argparse.Namespace) -> dict:
    seeds = list(range(args.seeds))
    result = {"experiment": name, "config": {**config, "seeds": args.seeds}, "methods": {}}
    for method in tqdm(methods, desc=name, disable=args.quiet):
        t0 = time.perf_counter()
        curves = runner(method, seeds, **config)
        result["methods"][method] = summarize(
            curves.error, list(range(config["steps"] + 1)), misalignment=curves.misalignment
        )
        result["methods"][method]["seconds"] = round(time.perf_counter() - t0, 2)
    return result


def run_tabular_single(args: argparse.Namespace) -> dict:
    config = dict(n_actions=100, batch_size=100, steps=args.steps, alpha=0.1, eta=1.0)
    return _run_tabular("tabular-single", tabular.run_single_context, tabular.SINGLE_METHODS, config, args)


def run_tabular_multi(args: argparse.Namespace) -> dict:
    config = dict(n_contexts=100, n_actions=10, steps=args.steps, alpha=0.1, eta=1.0)
    return _run_tabular("tabular-multi", tabular.run_multi_context, tabular.MULTI_METHODS, config, args)


def run_mnist(args: argparse.Namespace) -> dict:
    cfg = mnist_study.MnistConfig(
        dataset=args.dataset,
        steps=args.steps,
        eval_every=args.eval_every,
        data_dir=None if args.data_dir is None else str(args.data_dir),
    )
    backend: dict = {}
    runs = mnist_study.run_study(
        cfg,
        range(args.seeds),
        workers=args.workers,
        progress=not args.quiet,
        cache=cache_root(args),
        backend=args.backend,
        ray_address=args.ray_address,
        info=backend,
    )
    train_x, _ = mnist_study.dataset_split(cfg, "train")
    test_x, _ = mnist_study.dataset_split(cfg, "test")
    config = {
        **cfg.as_dict(),
        "seeds": args.seeds,
        "input_dim": int(train_x.shape[1]),
        "n_train": len(train_x),
        "n_test": len(test_x),
        "group_modes": mnist_study.group_modes(cfg),
        **backend,
        "cache": str(cache_root(args) / f"mnist-{cfg.dataset}"),
    }
    result = {"experiment": f"mnist-{cfg.dataset}", "config": config, "methods": {}}
    for method, run in runs.items():
        summary = summarize(run["error"], cfg.eval_steps, thresholds=(0.01, 0.05))
        summary["curves"]["error_per_seed"] = run["error"].tolist()
        summary["seconds"] = round(run["seconds"], 2)
        result["methods"][method] = summary
    return result


def _mnist_paper(result: dict) -> dict | None:
    return paper_numbers.MNIST if result["config"].get("dataset") == "mnist" else None


EXPERIMENTS: dict[str, Experiment] = {
    "tabular-single": Experiment(
        run_tabular_single,
        paper=paper_numbers.TABULAR_SINGLE,
        default_steps=150,
        uses_backend=False,
    ),
    "tabular-multi": Experiment(
        run_tabular_multi,
        paper=paper_numbers.TABULAR_MULTI,
        default_steps=1000,
        log_x=True,
        uses_backend=False,
    ),
    "mnist": Experiment(
        run_mnist,
        paper=paper_numbers.MNIST_NOTE,
        default_steps=10_000,
        default_seeds=20,
        paper_values=_mnist_paper,
    ),
}


for _name, _spec in token_experiments.TOKEN_EXPERIMENTS.items():
    EXPERIMENTS[_name] = Experiment(
        functools.partial(token_study.run_experiment, _name),
        paper=_spec.notes,
        default_steps=_spec.default_episodes,
        default_seeds=_spec.default_seeds,
        write=token_study.write_outputs,
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m zoo.reproduce", description=__doc__.split("\n")[0])
    parser.add_argument("experiment", choices=sorted(EXPERIMENTS), help="which experiment to run")
    parser.add_argument(
        "--seeds", type=positive_int, default=None, help="number of seeds (0..N-1; default 100, mnist 20)"
    )
    parser.add_argument("--steps", type=positive_int, default=None, help="override the number of steps")
    parser.add_argument("--out", type=Path, default=Path("results"), help="output folder")
    parser.add_argument(
        "--cache", type=Path, default=None,
        help="per-job cache root (default: OUT/cache; the committed records: data/cache)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    sweep = parser.add_argument_group("where jobs run (mnist and token reversal; see docs/sweeps.md)")
    sweep.add_argument(
        "--backend",
        choices=BACKENDS,
        default="local",
        help="local: processes on this machine; ray: one Ray task per (method, setting, seed)",
    )
    sweep.add_argument(
        "--workers",
        type=positive_int,
        default=min(2, os.cpu_count() or 1),
        help="parallel jobs, one torch thread each: local processes, or the CPUs of a local "
        "Ray instance (results do not depend on it)",
    )
    sweep.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDR",
        help="Ray cluster to join (auto, HOST:PORT or ray://HOST:PORT; default: start a "
        "local Ray instance, or join $RAY_ADDRESS); --backend ray only",
    )
    mnist = parser.add_argument_group("mnist")
    mnist.add_argument(
        "--dataset", choices=mnist_study.DATASETS, default="mnist", help="image dataset (default mnist)"
    )
    mnist.add_argument(
        "--eval-every", type=positive_int, default=200, help="updates between test-error evaluations"
    )
    mnist.add_argument("--data-dir", type=Path, default=None, help="the folder holding the dataset files (the only place searched when given)")
    token = parser.add_argument_group("token reversal (token-vocab, token-variations, terminal, sweeps)")
    token.add_argument(
        "--episodes", dest="steps", type=positive_int, default=None,
        help="training iterations per run (same as --steps; default: the paper's)",
    )
    token.add_argument(
        "--match", choices=("prompts", "interactions"), default="prompts",
        help="interactions: single-sample methods (dg, pg, ppo) get batch B*K and lr x sqrt(K)",
    )
    token.add_argument("--lengths", type=positive_int, nargs="+", default=None, help="terminal: the H values")
    token.add_argument("--vocabs", type=positive_int, nargs="+", default=None, help="token-vocab: the V values")
    token.add_argument("--length", type=positive_int, default=None, help="H for the single-H experiments")
    token.add_argument(
        "--methods", nargs="+", default=None, choices=token_methods.METHOD_NAMES, metavar="METHOD",
        help="run only these methods (default: the experiment's): "
        + ", ".join(sorted(token_methods.METHODS))
        + "; aliases: "
        + ", ".join(f"{a} = {c}" for a, c in sorted(token_methods.ALIASES.items())),
    )
    token.add_argument(
        "--learning-rate", type=positive_float, default=None, metavar="LR",
        help="every agent's learning rate (default: the paper's 1e-3); results are named *-lrLR",
    )
    token.add_argument(
        "--substrate", choices=token_grid.SUBSTRATES, default=token_grid.DEFAULT_SUBSTRATE,
        help="paper (default): the paper's JAX artifact's parameter layout, initialization and "
        "optax Muon; ours: torch layout, haiku init, torch Muon (docs/substrates.md); "
        "results are named *-paper / *-ours",
    )
    token.add_argument(
        "--optimizer", choices=token_jobs.OPTIMIZERS, default="substrate",
        help="substrate (default): the substrate's Muon + AdamW; adamw: plain AdamW (weight decay 0) "
        "on every parameter at --learning-rate; results are named *-SUBSTRATE-adamw",
    )
    token.add_argument(
        "--init", choices=token_grid.POLICY_INITS, default=None,
        help="with --substrate ours: the transformer's initialization (default: haiku's); "
        "results are named *-ours-initINIT",
    )
    token.add_argument(
        "--cached-only", action="store_true",
        help="train nothing: summarize the jobs already cached (e.g. a sweep still running)",
    )
    token.add_argument(
        "--settings", nargs="+", default=None, metavar="TAG",
        help="run only these settings, by tag (e.g. sequential-reverse_copy, H8, V2, eta1)",
    )
    return parser


def main(argv: list[str] | None = None) -> dict:
    parser = build_parser()
    args = parser.parse_args(argv)
    exp = EXPERIMENTS[args.experiment]
    if args.steps is None:
        args.steps = exp.default_steps
    if args.seeds is None:
        args.seeds = exp.default_seeds
    if not exp.uses_backend:
        if args.backend != "local" or args.ray_address is not None:
            parser.error(
                f"{args.experiment} is exact and batched over seeds in this process: "
                "--backend ray and --ray-address do not apply to it"
            )
    else:
        try:
            check_backend_args(args.backend, args.ray_address)
        except (ValueError, BackendError, MissingExtraError) as exc:
            parser.error(str(exc))
    t0 = time.perf_counter()
    try:
        result = exp.run(args)
    except (BackendError, MissingExtraError) as exc:
        parser.error(str(exc))
    except SweepInterrupted as exc:  # Ctrl-C: finished jobs are cached (docs/sweeps.md)
        print(exc, file=sys.stderr)
        raise SystemExit(130) from None
    result["config"].setdefault("wall_seconds", round(time.perf_counter() - t0, 2))
    if exp.write is not None:
        paths = exp.write(result, args.out, paper_notes=exp.paper, log_x=exp.log_x)
    else:
        paper_values = exp.paper_values(result) if exp.paper_values else None
        paths = write_outputs(
            result, args.out, paper_notes=exp.paper, log_x=exp.log_x, paper_values=paper_values
        )
    if not args.quiet:
        print(paths["md"].read_text())
        print("wrote " + ", ".join(str(p) for p in paths.values()))
    return result


if __name__ == "__main__":
    from zoo.entry_points import reproduce

    reproduce()  # also the tpo-zoo-reproduce script: Ctrl-C outside a sweep exits 130
