"""The console scripts of pyproject.toml's ``[project.scripts]``.

``tpo-zoo-train``, ``tpo-zoo-enjoy``, ``tpo-zoo-reproduce`` and ``tpo-zoo-report`` do what
``python -m zoo.train`` (``zoo.enjoy``, ``zoo.reproduce``, ``zoo.report``) does; ``reproduce``
below is also the ``__main__`` block of its module, the others repeat a one-line block. They are not the ``main``
functions themselves because a console script runs ``sys.exit(main())`` and those return their
result (the run's experiment manager, the result dict, the report's path), which ``sys.exit``
would print and turn into exit status 1. The imports are inside the functions so that
``tpo-zoo-reproduce`` and ``tpo-zoo-report`` work on a core install, without rl-zoo3.
"""

from __future__ import annotations

import sys

from zoo.cli import exit_on_missing_extra


def train() -> None:
    """``tpo-zoo-train``: usage and hyperparameter errors exit 2 with their message; without
    the ``zoo`` extra it exits 1 saying how to install it."""
    with exit_on_missing_extra("tpo-zoo-train"):
        from zoo.rlzoo import train as module

        module.run_cli(module.main, "zoo.train")


def enjoy() -> None:
    """``tpo-zoo-enjoy``: usage errors exit 2 with their message; without the ``zoo`` extra
    it exits 1 saying how to install it."""
    with exit_on_missing_extra("tpo-zoo-enjoy"):
        from zoo.rlzoo import enjoy as module
        from zoo.rlzoo.train import run_cli

        run_cli(module.main, "zoo.enjoy")


def reproduce() -> None:
    """``tpo-zoo-reproduce``: Ctrl-C outside a sweep exits 130 with one line."""
    from zoo.paper import reproduce as module

    try:
        module.main(sys.argv[1:])
    except KeyboardInterrupt:  # outside a sweep (e.g. while writing the figures)
        print("interrupted", file=sys.stderr)
        sys.exit(130)


def report() -> None:
    """``tpo-zoo-report``: every result of a folder on one page."""
    from zoo.paper import report as module

    module.main(sys.argv[1:])
