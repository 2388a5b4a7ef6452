"""Fixtures shared by the test modules."""

from __future__ import annotations

import pytest

from tpo_gym import datasets
from tpo_gym.datasets import clear_cache

DATASET_ENV_VARS = ("TPO_MNIST_DIR", "TPO_FASHION_MNIST_DIR")


@pytest.fixture
def isolated(monkeypatch, tmp_path):
    """No env vars, an empty HOME and no system folders: only what a test puts in place."""
    for var in DATASET_ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setattr(
        datasets,
        "_SYSTEM_DIRS",
        {k: (str(tmp_path / "system" / k),) for k in datasets._SYSTEM_DIRS},
    )
    clear_cache()
    yield home
    clear_cache()
