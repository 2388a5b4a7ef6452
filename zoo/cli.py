"""Small argparse helpers shared by the zoo and benchmark command lines."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1, with an error naming the bad value."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}") from None
    if not (value > 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {value}")
    return value


def alias_module(name: str, target: str) -> None:
    """Make module ``name`` stand for ``target``: run it as ``__main__``, or import it.

    The short command paths of the zoo (``python -m zoo.reproduce``, ``zoo.train``, ...)
    are thin aliases of the modules in the subpackages; run as a script, the alias runs
    ``target`` as ``__main__``; imported, it is replaced by ``target`` in ``sys.modules``.
    """
    import importlib
    import runpy
    import sys

    if name == "__main__":
        sys.modules.pop(target, None)  # runpy warns when the target was imported already
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        sys.modules[name] = importlib.import_module(target)
