"""The optional parts of ``tpo`` (pyproject.toml's extras) and the error for a missing one.

Code that needs an extra imports its modules inside :func:`needs_extra` (a context manager
and a decorator) or calls :func:`require`; a missing module of that extra then raises
:class:`MissingExtraError` naming the module, the extra and the command that installs it::

    with needs_extra("zoo", "zoo.train"):
        import yaml
    # MissingExtraError: zoo.train needs the "zoo" extra (rl-zoo3, optuna and pyyaml);
    # module 'yaml' is not installed: pip install "tpo[zoo]" (in a clone of the repository:
    # pip install -e ".[zoo]")

It lives in ``tpo_gym`` because every package of the distribution can import it from here
(``tpo_gym`` never imports torch).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["EXTRAS", "MissingExtraError", "install_command", "needs_extra", "require"]

EXTRAS: dict[str, dict[str, str]] = {
    "zoo": {"rl_zoo3": "rl-zoo3", "optuna": "optuna", "yaml": "pyyaml"},
    "llm": {
        "transformers": "transformers",
        "tokenizers": "tokenizers",
        "accelerate": "accelerate",
        "peft": "peft",
        "trl": "trl",
        "reasoning_gym": "reasoning-gym",
        "datasets": "datasets",
        "pyarrow": "pyarrow",
        "huggingface_hub": "transformers",  # installed with transformers
    },
    "ray": {"ray": "ray"},
    "bench": {"jax": "jax", "jaxlib": "jax", "optax": "optax", "flax": "flax"},
    "box2d": {"Box2D": "Box2D", "pygame": "pygame"},
}
"""Extra -> {top-level import name: the distribution of pyproject.toml's extra that provides
it}. tests/test_newcomer.py checks the distributions against pyproject.toml."""


class MissingExtraError(ModuleNotFoundError):
    """A module of an optional extra is not installed; the message says how to install it."""


def install_command(extra: str) -> str:
    """The command that installs ``extra``, from the index and in a clone."""
    return f'pip install "tpo[{extra}]" (in a clone of the repository: pip install -e ".[{extra}]")'


def _message(extra: str, what: str, module: str) -> str:
    names = list(dict.fromkeys(EXTRAS[extra].values()))
    listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    return (
        f'{what} needs the "{extra}" extra ({listed}); module {module!r} is not installed: '
        f"{install_command(extra)}"
    )


@contextmanager
def needs_extra(extra: str, what: str) -> Iterator[None]:
    """Turn a ``ModuleNotFoundError`` for a module of ``extra`` raised in the block (or the
    decorated function) into a :class:`MissingExtraError` saying what needs it (``what``,
    e.g. ``"zoo.train"``) and how to install it. Other errors pass through unchanged."""
    if extra not in EXTRAS:
        raise ValueError(f"unknown extra {extra!r}; expected one of {sorted(EXTRAS)}")
    try:
        yield
    except ModuleNotFoundError as err:
        top = (err.name or "").partition(".")[0]
        if top not in EXTRAS[extra]:
            raise
        # Nested blocks: the outermost ``what`` is the one closest to what the user called.
        cause = err.__cause__ if isinstance(err, MissingExtraError) else err
        raise MissingExtraError(_message(extra, what, top), name=err.name) from cause


def require(extra: str, what: str, *modules: str) -> None:
    """Import ``modules`` (default: every module of ``extra``) now, under :func:`needs_extra`:
    for a check before work that would fail later (or in another process)."""
    with needs_extra(extra, what):
        for module in modules or EXTRAS[extra]:
            importlib.import_module(module)
