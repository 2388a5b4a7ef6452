"""Whole-state snapshots of the tpo_gym vector envs, for exact resume of a training run.

An agent's checkpoint holds its env's state next to the weights, so that training that is
saved, loaded and continued steps through the same contexts, prompts and images as training
that never stopped. A snapshot is a deep copy of every attribute of the env except the
read-only data it was built from (``_shared_state``: e.g. MNIST's image arrays), so it is
small and pickles with the checkpoint.
"""

from __future__ import annotations

import copy
from typing import Any, ClassVar

__all__ = ["StateSnapshot"]


class StateSnapshot:
    """Mixin: ``get_state()`` / ``set_state(state)`` of an env's whole mutable state
    (observations, episode counters, random streams and generators)."""

    _shared_state: ClassVar[tuple[str, ...]] = ()
    """Attributes that are data, not state: neither copied nor restored."""

    def get_state(self) -> dict[str, Any]:
        """A deep copy of the env's state; :meth:`set_state` puts it back."""
        shared = set(self._shared_state)
        state = {k: v for k, v in vars(self).items() if k not in shared}
        return {"env_class": type(self).__name__, "attributes": copy.deepcopy(state)}

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`get_state` snapshot taken from an env of the same class and
        size (``num_envs``); raises ``ValueError`` naming the mismatch otherwise."""
        if not isinstance(state, dict) or "attributes" not in state:
            raise ValueError(f"set_state expects a dict from get_state(); got {type(state).__name__}")
        if state.get("env_class") != type(self).__name__:
            raise ValueError(
                f"the state was taken from a {state.get('env_class')}, not a {type(self).__name__}"
            )
        attributes = state["attributes"]
        n_saved, n_here = attributes.get("num_envs"), getattr(self, "num_envs", None)
        if n_saved != n_here:
            raise ValueError(f"the state has num_envs={n_saved}; this env has num_envs={n_here}")
        vars(self).update(copy.deepcopy(attributes))
