"""Small argparse helpers shared by the zoo and benchmark command lines."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator

from tpo_gym.extras import MissingExtraError


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

    if name == "__main__":
        sys.modules.pop(target, None)  # runpy warns when the target was imported already
        spec = getattr(sys.modules.get("__main__"), "__spec__", None)  # "zoo.train" under -m
        with exit_on_missing_extra(getattr(spec, "name", None) or target):
            runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        sys.modules[name] = importlib.import_module(target)


@contextlib.contextmanager
def exit_on_missing_extra(prog: str) -> Iterator[None]:
    """A command line's missing optional extra exits (status 1) with its one-line message
    (:class:`tpo_gym.extras.MissingExtraError`: what to install) instead of a traceback."""
    try:
        yield
    except MissingExtraError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        sys.exit(1)
