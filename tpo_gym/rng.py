"""Counter-based random draws shared by the tpo_gym environments (numpy only, never torch).

A stream is a 64-bit key and a draw counter. Value ``p`` of draw ``c`` of a stream with key
``k`` is ``splitmix64(k + (c * width + p + 1) * golden_gamma) % high``: a pure function of
``(key, counter)``, so a vector env draws every sub-environment's next values in one numpy
expression and still reproduces, draw for draw, the single environments seeded ``s + i``.
The key of a stream is taken from an ``np.random.Generator`` (the env's ``np_random``, or
a generator seeded like Gymnasium seeds a sub-env).

Used by :mod:`tpo_gym.mnist` (one image index per draw) and :mod:`tpo_gym.token_reversal`
(one prompt of ``length`` tokens per draw).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.utils import seeding

__all__ = ["CounterStreams", "counter_draws", "key_from"]

_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_U64_MAX = np.iinfo(np.uint64).max


def key_from(rng: np.random.Generator, size: int | None = None) -> np.ndarray:
    """Stream key(s) drawn from ``rng``: a uint64 scalar (``size=None``) or array ``[size]``."""
    return rng.integers(0, _U64_MAX, size=size, dtype=np.uint64, endpoint=True)


def counter_draws(keys: np.ndarray, counters: np.ndarray, high: int, width: int = 1) -> np.ndarray:
    """Draw ``counters`` of the streams ``keys``: int64 ``[m, width]`` uniform in ``[0, high)``.

    ``keys`` and ``counters`` are uint64 arrays ``[m]``; changes neither. Draw ``c`` of a
    stream uses counter values ``c * width .. c * width + width - 1``.
    """
    pos = np.arange(width, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = keys[:, None] + (counters[:, None] * np.uint64(width) + pos + np.uint64(1)) * _GAMMA
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        z = z ^ (z >> np.uint64(31))
    return (z % np.uint64(high)).astype(np.int64)


class CounterStreams:
    """``n`` counter-based streams (one per (sub-)environment): uint64 ``keys`` and ``counters``.

    ``keys`` is ``None`` until the first :meth:`seed_single` / :meth:`seed_each`.
    """

    def __init__(self, n: int) -> None:
        self.n = n
        self.keys: np.ndarray | None = None  # uint64 [n]
        self.counters = np.zeros(n, dtype=np.uint64)
        self._key_rng: np.random.Generator | None = None

    def seed_single(self, np_random: np.random.Generator, seeded: bool) -> None:
        """A single env's ``reset``, after ``gym.Env.reset(seed=...)``.

        Takes new keys from ``np_random`` (and restarts the counters) on the first reset, on a
        seeded reset (``seeded``), or when ``np_random`` was replaced since; otherwise the
        streams go on.
        """
        if self.keys is None or seeded or self._key_rng is not np_random:
            self.keys = key_from(np_random, size=self.n)
            self._key_rng = np_random
            self.counters[:] = 0

    def seed_each(self, seeds: list[Any], np_random: np.random.Generator) -> None:
        """A vector env's ``reset``: stream ``i`` gets the key a single env seeded ``seeds[i]`` takes.

        ``None`` entries keep their stream, except on the first reset, where every stream
        takes a fresh key from ``np_random`` (the vector env's own generator).
        """
        if self.keys is None:
            self.keys = key_from(np_random, size=self.n)
            self.counters[:] = 0
        for i, s in enumerate(seeds):
            if s is not None:
                self.keys[i] = key_from(seeding.np_random(int(s))[0])
                self.counters[i] = 0

    def draw(self, high: int, width: int = 1, every: int = 1) -> np.ndarray:
        """Next draw of streams ``0, every, 2*every, ...``: int64 ``[ceil(n / every), width]``.

        Advances every stream's counter by one (also the streams not drawn from).
        """
        lead = slice(None, None, every)
        values = counter_draws(self.keys[lead], self.counters[lead], high, width)
        self.counters += np.uint64(1)
        return values
