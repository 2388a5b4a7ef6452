"""Train or tune through rl-zoo3 with our algorithms: ``python -m zoo.train``.

This runs rl-zoo3's own ``rl_zoo3.train.train()`` (every rl-zoo3 option works) after
registering ``tpo``, ``grpo``, ``dg``, ``pg`` and ``cfppo`` and our env ids, with
``zoo/rlzoo/hyperparams/<algo>.yml`` as the default hyperparameter file and our native vector
envs (see :mod:`zoo.rlzoo`)::

    python -m zoo.train --algo tpo --env TokenReversal-terminal-v0 --env-kwargs length:4 \
        -n 200000 --seed 0 -tb runs -f logs
    python -m zoo.train --algo tpo --env SymmetricBandit-v0 -optimize --n-trials 20 -n 20000

Output: rl-zoo3's layout, ``logs/<algo>/<env>_<run>/`` with ``<env>.zip`` (load it with
``TPO.load``), ``<env>/config.yml`` and ``args.yml``, ``0.monitor.csv`` and
``evaluations.npz``; tensorboard events under ``-tb DIR/<env>/<ALGO>_1``.

Added options: ``--vec-env {auto,native,dummy,subproc}`` (default ``auto``: the env's
native vector env when it has one, else rl-zoo3's ``DummyVecEnv``) and, with ``-optimize``,
``--timeout SECONDS`` (no new trial starts after it; the report is written). SIGTERM stops a
run as Ctrl-C does: the model is saved, or the tuning report written.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import signal
import sys
import threading
import types
from collections.abc import Iterator, Sequence
from typing import Any

from zoo.cli import positive_float
from zoo.rlzoo import VEC_ENV_CHOICES, UsageError, check_algo, check_env_id, installed, register
from zoo.rlzoo.hyperparams import HyperparamsError

USAGE_NOTE = (
    "zoo.rlzoo.train: rl-zoo3's train with our algorithms (tpo, grpo, dg, pg, cfppo) and env ids.\n"
    "Default hyperparameters: zoo/rlzoo/hyperparams/<algo>.yml. rl-zoo3's options follow.\n"
)

VEC_ENV_HELP = (
    "VecEnv type: auto (default) is native for envs with a native vector env, else dummy "
    "(rl-zoo3's DummyVecEnv)"
)


TIMEOUT_HELP = (
    "with -optimize: start no new trial after this many seconds (the running one finishes), "
    "then print the best trial and write the report as after --n-trials"
)


class _TrainParser(argparse.ArgumentParser):
    """rl-zoo3's train parser with our ``--vec-env`` choices and ``--timeout``, so ``--help``
    lists the true options once (rl-zoo3 declares only dummy and subproc; :func:`main` reads
    both options itself)."""

    def add_argument(self, *names: Any, **kwargs: Any) -> argparse.Action:
        if "--vec-env" in names:
            kwargs.update(choices=VEC_ENV_CHOICES, default="auto", help=VEC_ENV_HELP)
            action = super().add_argument(*names, **kwargs)
            super().add_argument("--timeout", type=positive_float, metavar="SECONDS", help=TIMEOUT_HELP)
            return action
        return super().add_argument(*names, **kwargs)


def check_timeout(argv: list[str]) -> tuple[list[str], float | None]:
    """rl-zoo3's argv without ``--timeout SECONDS``, and its value (None when absent)."""
    argv, value = pop_option(argv, ["--timeout"])
    if value is None:
        return argv, None
    try:
        seconds = positive_float(value)
    except argparse.ArgumentTypeError as e:
        raise UsageError(f"--timeout: {e}") from None
    optimize = argparse.ArgumentParser(add_help=False)  # rl-zoo3's spelling, abbreviations too
    optimize.add_argument("-optimize", "--optimize-hyperparameters", action="store_true")
    if not optimize.parse_known_args(argv)[0].optimize_hyperparameters:
        raise UsageError("--timeout applies to tuning: add -optimize")
    return argv, seconds


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM (``timeout``, a batch scheduler's time limit) stops the run
    as Ctrl-C does: rl-zoo3 then saves the model, or writes the tuning report. A second
    SIGTERM acts as usual. Only in the main thread (where signal handlers live)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, previous)
        print("zoo.train: SIGTERM: stopping as Ctrl-C does", file=sys.stderr, flush=True)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _our_parser(module: Any) -> Iterator[None]:
    """Within the block, ``module`` (``rl_zoo3.train``) builds its parser as :class:`_TrainParser`."""
    shim = types.ModuleType("argparse")
    shim.__dict__.update(vars(argparse))
    shim.ArgumentParser = _TrainParser
    saved = module.argparse
    module.argparse = shim
    try:
        yield
    finally:
        module.argparse = saved


def pop_option(argv: list[str], names: Sequence[str]) -> tuple[list[str], str | None]:
    """``argv`` without the option ``names`` (``--opt v`` or ``--opt=v``), and its value."""
    out, value, i = [], None, 0
    while i < len(argv):
        arg = argv[i]
        name, eq, inline = arg.partition("=")
        if name in names:
            if eq:
                value = inline
            elif i + 1 < len(argv):
                value, i = argv[i + 1], i + 1
            else:
                raise UsageError(f"{name} needs a value")
        else:
            out.append(arg)
        i += 1
    return out, value


def preparse(argv: list[str], algo_default: str, env_default: str) -> argparse.Namespace:
    """The options zoo.rlzoo.train acts on before rl-zoo3 parses the rest."""
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--algo", default=algo_default)
    pre.add_argument("--env", default=env_default)
    pre.add_argument("--gym-packages", nargs="+", default=[])
    known, _ = pre.parse_known_args(argv)
    return known


def check_command_line(argv: list[str]) -> tuple[list[str], argparse.Namespace, str]:
    """Register everything, check algorithm and env id; return rl-zoo3's argv, the
    pre-parsed options and the ``--vec-env`` choice."""
    register()
    argv, vec_env = pop_option(argv, ["--vec-env"])
    vec_env = vec_env or "auto"
    if vec_env not in VEC_ENV_CHOICES:
        raise UsageError(f"--vec-env must be one of {VEC_ENV_CHOICES}; got {vec_env!r}")
    known = preparse(argv, algo_default="ppo", env_default="CartPole-v1")
    for module in known.gym_packages:
        importlib.import_module(module)
    check_algo(known.algo)
    check_env_id(known.env)
    return argv, known, vec_env


def main(argv: Sequence[str] | None = None) -> Any:
    """Run rl-zoo3's train with ``argv`` (default ``sys.argv[1:]``).

    :returns: the :class:`~zoo.rlzoo.ZooExperimentManager` of the run (its
        ``save_path`` is the run folder).
    :raises UsageError, HyperparamsError: unknown algorithm or env id, bad
        hyperparameter file or section (the message names the file and the key).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    vec_env, timeout = "auto", None
    if "-h" in argv or "--help" in argv:
        print(USAGE_NOTE)
    else:
        argv, timeout = check_timeout(argv)
        argv, _, vec_env = check_command_line(argv)
    import rl_zoo3.train

    saved_argv = sys.argv
    with (
        installed(vec_env=vec_env, time_limit=timeout) as manager,
        _our_parser(rl_zoo3.train),
        sigterm_as_interrupt(),
    ):
        manager.last = None
        sys.argv = ["zoo.train", *argv]
        try:
            rl_zoo3.train.train()
        finally:
            sys.argv = saved_argv
        return manager.last


def run_cli(entry, prog: str) -> None:
    """Run ``entry()``; a usage or hyperparameter error exits with its message (status 2)."""
    try:
        entry()
    except (UsageError, HyperparamsError) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    run_cli(main, "zoo.train")
