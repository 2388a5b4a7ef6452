"""Run a trained agent through rl-zoo3's ``enjoy``: ``python -m zoo.enjoy``.

This runs ``rl_zoo3.enjoy.enjoy()`` with our algorithms and env ids registered::

    python -m zoo.enjoy --algo tpo --env TokenReversal-terminal-v0 -f logs -n 100

Differences from rl-zoo3's defaults: the log folder defaults to ``logs`` (zoo.rlzoo.train's
default; rl-zoo3's ``rl-trained-agents`` would try a download), ``--no-render`` is added
for envs that cannot render to a window (ours render ``ansi`` text), and the env is
built with ``--vec-env`` as in zoo.rlzoo.train (default: the native vector env).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import gymnasium as gym
from gymnasium.envs.registration import load_env_creator

from zoo.rlzoo import VEC_ENV_CHOICES, UsageError, check_algo, check_env_id, installed, register
from zoo.rlzoo.train import pop_option, preparse, run_cli


def renders_to_window(env_id: str) -> bool:
    """Whether ``env_id`` declares the ``human`` render mode."""
    spec = gym.spec(env_id)
    creator = load_env_creator(spec.entry_point) if isinstance(spec.entry_point, str) else spec.entry_point
    return "human" in (getattr(creator, "metadata", {}) or {}).get("render_modes", [])


def main(argv: Sequence[str] | None = None) -> None:
    """Run rl-zoo3's enjoy with ``argv`` (default ``sys.argv[1:]``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    register()
    argv, vec_env = pop_option(argv, ["--vec-env"])
    vec_env = vec_env or "auto"
    if vec_env not in VEC_ENV_CHOICES:
        raise UsageError(f"--vec-env must be one of {VEC_ENV_CHOICES}; got {vec_env!r}")
    help_only = "-h" in argv or "--help" in argv
    known = preparse(argv, algo_default="ppo", env_default="CartPole-v1")
    if not help_only:
        import importlib

        for module in known.gym_packages:
            importlib.import_module(module)
        check_algo(known.algo)
        check_env_id(known.env)
        if not any(a in ("-f", "--folder") or a.startswith("--folder=") for a in argv):
            argv += ["-f", "logs"]
        if "--no-render" not in argv and not renders_to_window(known.env):
            print(f"zoo.rlzoo.enjoy: {known.env} has no 'human' render mode; adding --no-render")
            argv.append("--no-render")
    import rl_zoo3.enjoy

    saved_argv = sys.argv
    with installed(vec_env=vec_env, enjoy_env_id=None if help_only else known.env):
        sys.argv = ["zoo.enjoy", *argv]
        try:
            rl_zoo3.enjoy.enjoy()
        finally:
            sys.argv = saved_argv


if __name__ == "__main__":
    run_cli(main, "zoo.enjoy")
