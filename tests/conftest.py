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


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory):
    """One folder of pretrained small models for the whole session (each built once)."""
    return tmp_path_factory.mktemp("pretrained")


@pytest.fixture(scope="session")
def arithmetic_lm(model_cache):
    """The default small pretrained model of the arithmetic task (~1 min to build on CI)."""
    import torch

    from zoo.paper.llm.pretrain import pretrained_lm

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the weights depend on the thread count through float rounding
    try:
        return pretrained_lm("arithmetic", cache_dir=model_cache, log=None)
    finally:
        torch.set_num_threads(threads)


@pytest.fixture
def one_thread():
    """One torch thread for the test (reproducible float rounding), restored afterwards."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    """A random tiny Llama + character tokenizer saved with save_pretrained, per test module."""
    from zoo.paper.llm.tiny import build_tiny_causal_lm

    path = tmp_path_factory.mktemp("tiny") / "model"
    build_tiny_causal_lm(path)
    return str(path)


def pytest_addoption(parser):
    parser.addoption(
        "--docs-slow",
        action="store_true",
        help="tests/test_docs.py: also run the doc examples marked slow (minutes each)",
    )
