"""MNIST contextual bandit: IDX reading, dataset lookup, the env and its native vector env."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from gymnasium.utils.env_checker import data_equivalence
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import tpo_gym  # noqa: F401  (registers the ids)
from tpo_gym import datasets
from tpo_gym.datasets import (
    clear_cache,
    find_image_classification_files,
    load_image_classification,
    read_idx,
)
from tpo_gym.mnist import MNISTBanditEnv, MNISTBanditVectorEnv, MNISTResetNeeded

FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")
FASHION_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", 60000),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", 10000),
}
ENV_VARS = ("TPO_MNIST_DIR", "TPO_FASHION_MNIST_DIR")


def _require_fashion() -> None:
    """Real Fashion-MNIST files from Debian's dataset-fashion-mnist: fail on CI, else skip."""
    missing = [
        FASHION_DIR / name for imgs, lbls, _ in FASHION_FILES.values() for name in (imgs, lbls)
    ]
    missing = [p for p in missing if not p.is_file()]
    if missing:
        msg = (
            f"real Fashion-MNIST IDX files missing: {[str(p) for p in missing]} "
            "(apt-get install dataset-fashion-mnist)"
        )
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)


def _idx_bytes(arr: np.ndarray) -> bytes:
    codes = {"u1": 0x08, "i1": 0x09, "i2": 0x0B, "i4": 0x0C, "f4": 0x0D, "f8": 0x0E}
    code = codes[f"{arr.dtype.kind}{arr.dtype.itemsize}"]
    header = bytes([0, 0, code, arr.ndim]) + np.asarray(arr.shape, dtype=">u4").tobytes()
    return header + arr.astype(arr.dtype.newbyteorder(">")).tobytes()


def _write_idx(path: Path, arr: np.ndarray, gz: bool | None = None) -> Path:
    data = _idx_bytes(arr)
    if gz if gz is not None else path.suffix == ".gz":
        data = gzip.compress(data)
    path.write_bytes(data)
    return path


def _fake_split(folder: Path, split: str, n: int, seed: int, gz: bool = True) -> tuple:
    """Write a small MNIST-format split; returns the uint8 images and labels written."""
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, size=n, dtype=np.uint8)
    prefix = "train" if split == "train" else "t10k"
    suffix = ".gz" if gz else ""
    folder.mkdir(parents=True, exist_ok=True)
    _write_idx(folder / f"{prefix}-images-idx3-ubyte{suffix}", images)
    _write_idx(folder / f"{prefix}-labels-idx1-ubyte{suffix}", labels)
    return images, labels


# ----------------------------------------------------------------------------- IDX reader


def test_read_idx_real_fashion_mnist_files():
    _require_fashion()
    for split, (imgs, lbls, n) in FASHION_FILES.items():
        images = read_idx(FASHION_DIR / imgs)
        labels = read_idx(FASHION_DIR / lbls)
        assert images.shape == (n, 28, 28) and images.dtype == np.uint8, split
        assert labels.shape == (n,) and labels.dtype == np.uint8, split
        assert np.array_equal(np.bincount(labels, minlength=10), np.full(10, n // 10))
        assert images.max() == 255 and images.min() == 0
    # The first Fashion-MNIST training labels: ankle boot, T-shirt, T-shirt, dress, ...
    first = read_idx(FASHION_DIR / FASHION_FILES["train"][1])[:10]
    assert first.tolist() == [9, 0, 0, 3, 0, 2, 7, 2, 5, 5]


def test_fashion_mnist_found_in_debian_folder(isolated, monkeypatch):
    _require_fashion()
    monkeypatch.setitem(datasets._SYSTEM_DIRS, "fashion-mnist", (str(FASHION_DIR),))
    for split, (imgs, lbls, n) in FASHION_FILES.items():
        assert find_image_classification_files("fashion-mnist", split) == (
            FASHION_DIR / imgs,
            FASHION_DIR / lbls,
        )
        x, y = load_image_classification("fashion-mnist", split)
        assert x.shape == (n, 784) and x.dtype == np.float32
        assert y.shape == (n,) and y.dtype == np.int64
        assert 0.0 <= x.min() and x.max() == 1.0
        raw = read_idx(FASHION_DIR / imgs)
        np.testing.assert_array_equal(x[:5], raw[:5].reshape(5, -1) / np.float32(255))
    # no silent fallback: the MNIST lookup never reads the Fashion-MNIST folder
    with pytest.raises(FileNotFoundError):
        load_image_classification("mnist", "train")


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize(
    "dtype,shape",
    [
        (np.uint8, (5, 4, 3)),
        (np.uint8, (7,)),
        (np.int8, (3, 2)),
        (np.int16, (4, 3)),
        (np.int32, (2, 2, 2, 2)),
        (np.float32, (6,)),
        (np.float64, (3, 5)),
    ],
)
def test_read_idx_round_trip(tmp_path, gz, dtype, shape):
    rng = np.random.default_rng(0)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        arr = rng.integers(info.min, info.max, size=shape, endpoint=True).astype(dtype)
    else:
        arr = rng.normal(size=shape).astype(dtype)
    path = _write_idx(tmp_path / ("a.idx.gz" if gz else "a.idx"), arr)
    out = read_idx(path)
    assert out.dtype == np.dtype(dtype) and out.dtype.isnative
    assert out.shape == shape
    np.testing.assert_array_equal(out, arr)


def test_read_idx_detects_gzip_by_content(tmp_path):
    arr = np.arange(12, dtype=np.uint8).reshape(3, 4)
    path = _write_idx(tmp_path / "no-suffix", arr, gz=True)
    np.testing.assert_array_equal(read_idx(path), arr)


def test_read_idx_rejects_malformed_files(tmp_path):
    good = _idx_bytes(np.arange(6, dtype=np.uint8).reshape(2, 3))

    def check(data: bytes, match: str) -> None:
        p = tmp_path / "bad"
        p.write_bytes(data)
        with pytest.raises(ValueError, match=match):
            read_idx(p)

    check(b"\x01\x00" + good[2:], "bad IDX magic number 0x01000802")
    check(b"\x00\x00\x07\x02" + good[4:], "unknown IDX type code 0x07")
    check(good[:3], "too short")
    check(good[:9], "truncated IDX header")
    check(good[:-1], "truncated IDX data")
    check(good + b"\x00", "trailing bytes")
    check(gzip.compress(good)[:-6], "corrupt gzip")
    with pytest.raises(FileNotFoundError):
        read_idx(tmp_path / "does-not-exist")


# ----------------------------------------------------------------------------- dataset lookup


def test_load_from_data_dir_scales_and_caches(isolated, tmp_path):
    folder = tmp_path / "mine"
    imgs, lbls = _fake_split(folder, "train", 20, seed=1, gz=False)
    _fake_split(folder, "test", 8, seed=2, gz=True)
    x, y = load_image_classification("mnist", "train", data_dir=folder)
    assert x.shape == (20, 784) and x.dtype == np.float32
    assert y.dtype == np.int64
    np.testing.assert_array_equal(x, imgs.reshape(20, -1).astype(np.float32) / 255)
    np.testing.assert_array_equal(y, lbls)
    assert not x.flags.writeable and not y.flags.writeable
    assert load_image_classification("mnist", "train", data_dir=folder)[0] is x  # cached
    assert load_image_classification("mnist", "test", data_dir=str(folder))[0].shape == (8, 784)


@pytest.mark.parametrize("where", ["env_var", "home_cache", "torchvision"])
def test_lookup_order_locations(isolated, tmp_path, monkeypatch, where):
    if where == "env_var":
        folder = tmp_path / "viaenv"
        monkeypatch.setenv("TPO_MNIST_DIR", str(folder))
    elif where == "home_cache":
        folder = isolated / ".cache" / "tpo" / "mnist"
    else:
        folder = isolated / "data" / "MNIST" / "raw"
    _, labels = _fake_split(folder, "train", 6, seed=3)
    files = find_image_classification_files("mnist", "train")
    assert files[0].parent == folder
    np.testing.assert_array_equal(load_image_classification("mnist", "train")[1], labels)


def test_data_dir_searched_before_env_var(isolated, tmp_path, monkeypatch):
    _fake_split(tmp_path / "env", "train", 5, seed=4)
    monkeypatch.setenv("TPO_MNIST_DIR", str(tmp_path / "env"))
    _fake_split(tmp_path / "arg", "train", 7, seed=5)
    x, _ = load_image_classification("mnist", "train", data_dir=tmp_path / "arg")
    assert x.shape[0] == 7
    assert load_image_classification("mnist", "train")[0].shape[0] == 5


def test_keras_npz(isolated):
    folder = isolated / ".keras" / "datasets"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    xs = rng.integers(0, 256, (4, 28, 28), dtype=np.uint8)
    np.savez(
        folder / "mnist.npz",
        x_train=xs,
        y_train=np.arange(4, dtype=np.uint8),
        x_test=xs[:2],
        y_test=np.arange(2, dtype=np.uint8),
    )
    x, y = load_image_classification("mnist", "test")
    assert x.shape == (2, 784) and y.tolist() == [0, 1]


def test_fashion_lookup_ignores_mnist_locations(isolated, tmp_path, monkeypatch):
    """No fallback between datasets: MNIST files never satisfy a Fashion-MNIST request."""
    _fake_split(tmp_path / "m", "train", 5, seed=6)
    monkeypatch.setenv("TPO_MNIST_DIR", str(tmp_path / "m"))
    _fake_split(isolated / ".cache" / "tpo" / "mnist", "train", 5, seed=6)
    with pytest.raises(FileNotFoundError, match="fashion-mnist train split not found"):
        load_image_classification("fashion-mnist", "train")
    _fake_split(tmp_path / "f", "train", 3, seed=7)
    monkeypatch.setenv("TPO_FASHION_MNIST_DIR", str(tmp_path / "f"))
    assert load_image_classification("fashion-mnist", "train")[0].shape[0] == 3


@pytest.mark.parametrize("dataset", ["mnist", "fashion-mnist"])
def test_missing_data_error_names_every_place(isolated, tmp_path, dataset):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError) as exc:
        load_image_classification(dataset, "train")
    msg = str(exc.value)
    var = "TPO_MNIST_DIR" if dataset == "mnist" else "TPO_FASHION_MNIST_DIR"
    sub = "MNIST/raw" if dataset == "mnist" else "FashionMNIST/raw"
    home = str(isolated)
    for place in [
        f"{home}/.cache/tpo/{dataset}",
        f"{home}/.keras/datasets",
        f"{home}/data/{dataset}",
        f"{home}/data/{sub}",
        datasets._SYSTEM_DIRS[dataset][0],
        var,
        "train-images-idx3-ubyte",
        "train-labels-idx1-ubyte",
        "data_dir",
        "not set",
    ]:
        assert place in msg, (place, msg)
    assert "Nothing is downloaded" in msg
    if dataset == "fashion-mnist":
        assert "dataset-fashion-mnist" in msg
    # constructing the env gives the same error
    with pytest.raises(FileNotFoundError, match="Searched"):
        MNISTBanditEnv(dataset=dataset)
    # an explicit data_dir is the only place searched (tests/test_data_errors.py)
    with pytest.raises(FileNotFoundError) as exc:
        load_image_classification(dataset, "train", data_dir=empty)
    msg = str(exc.value)
    assert str(empty) in msg and str(empty / sub) in msg and f"{home}/.cache" not in msg
    with pytest.raises(FileNotFoundError, match="Searched"):
        MNISTBanditEnv(dataset=dataset, data_dir=empty)


def test_unknown_dataset_or_split():
    with pytest.raises(ValueError, match=r"'cifar10'.*\['mnist', 'fashion-mnist', 'digits'\]"):
        load_image_classification("cifar10", "train")
    with pytest.raises(ValueError, match=r"'validation'.*\['train', 'test'\]"):
        load_image_classification("digits", "validation")
    with pytest.raises(ValueError, match="'cifar10'"):
        MNISTBanditEnv(dataset="cifar10")
    with pytest.raises(ValueError, match="data_dir must be None"):
        load_image_classification("digits", "train", data_dir="/tmp")


def test_labels_out_of_range_and_count_mismatch(isolated, tmp_path):
    folder = tmp_path / "bad"
    folder.mkdir()
    _write_idx(folder / "train-images-idx3-ubyte", np.zeros((3, 28, 28), np.uint8))
    _write_idx(folder / "train-labels-idx1-ubyte", np.array([1, 2, 10], np.uint8))
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 9\]"):
        load_image_classification("mnist", "train", data_dir=folder)
    _write_idx(folder / "train-labels-idx1-ubyte", np.array([1, 2], np.uint8))
    with pytest.raises(ValueError, match="3 images but labels of shape"):
        load_image_classification("mnist", "train", data_dir=folder)


# ----------------------------------------------------------------------------- digits


def test_digits_splits():
    from sklearn.datasets import load_digits

    xtr, ytr = load_image_classification("digits", "train")
    xte, yte = load_image_classification("digits", "test")
    assert xtr.shape == (1438, 64) and xte.shape == (359, 64)
    assert xtr.dtype == np.float32 and ytr.dtype == np.int64
    assert 0.0 == min(xtr.min(), xte.min()) and max(xtr.max(), xte.max()) == 1.0
    assert set(ytr.tolist()) == set(range(10)) == set(yte.tolist())
    # the two splits partition the 1797 images
    full = load_digits()
    both = np.concatenate([xtr, xte]) * 16
    np.testing.assert_array_equal(np.sort(np.concatenate([ytr, yte])), np.sort(full.target))
    key = lambda a: np.lexsort(a.T[::-1])  # noqa: E731
    np.testing.assert_array_equal(both[key(both)], full.data[key(full.data)])
    # deterministic, also after the cache is cleared
    clear_cache()
    xtr2, ytr2 = load_image_classification("digits", "train")
    assert xtr2 is not xtr
    np.testing.assert_array_equal(xtr2, xtr)
    np.testing.assert_array_equal(ytr2, ytr)


# ----------------------------------------------------------------------------- single env


def _digits_env(**kw) -> MNISTBanditEnv:
    return MNISTBanditEnv(dataset="digits", **kw)


def test_spaces_and_dataset_arrays():
    env = _digits_env(split="test")
    assert env.observation_space == gym.spaces.Box(0.0, 1.0, (64,), np.float32)
    assert env.action_space == gym.spaces.Discrete(10)
    x, y = env.dataset_arrays()
    assert x.shape == (359, 64) and y.shape == (359,)
    assert x is load_image_classification("digits", "test")[0]


def test_gymnasium_check_env():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = gym.make("MNISTBandit-v0", dataset="digits", render_mode="rgb_array")
        gym_check_env(env.unwrapped)
        gym_check_env(gym.make("MNISTBandit-v0", dataset="digits", split="test").unwrapped)
        gym_check_env(_digits_env(), skip_render_check=True)
    assert not caught, [str(w.message) for w in caught]


def test_sb3_check_env():
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sb3_check_env(_digits_env(), warn=True)
    assert not caught, [str(w.message) for w in caught]


def test_reset_step_and_no_label_leak():
    env = _digits_env()
    x, y = env.dataset_arrays()
    obs, info = env.reset(seed=3)
    assert info == {}
    i = env.current_index
    np.testing.assert_array_equal(obs, x[i])  # the image and nothing else
    assert obs.dtype == np.float32 and obs.shape == (64,)
    obs2, reward, terminated, truncated, info = env.step(int(y[i]))
    assert (reward, terminated, truncated, info) == (1.0, True, False, {"correct": True})
    np.testing.assert_array_equal(obs2, x[i])
    obs[:] = 0.5  # returned observations are copies, never views of the dataset
    assert not np.array_equal(env.dataset_arrays()[0][i], obs)
    env.reset(options={"index": i})
    _, reward, _, _, info = env.step(np.int64((y[i] + 1) % 10))
    assert reward == 0.0 and info == {"correct": False}


def test_replay_index_and_determinism():
    env = _digits_env()
    x, _ = env.dataset_arrays()
    obs, _ = env.reset(options={"index": 17})
    np.testing.assert_array_equal(obs, x[17])
    assert env.current_index == 17
    a = [env.reset(seed=5)[0]] + [env.reset()[0] for _ in range(5)]
    b = [env.reset(seed=5)[0]] + [env.reset()[0] for _ in range(5)]
    np.testing.assert_array_equal(np.stack(a), np.stack(b))
    # a replayed index consumes no draw
    env.reset(seed=5)
    env.reset(options={"index": 0})
    np.testing.assert_array_equal(env.reset()[0], a[1])
    with pytest.raises(ValueError, match="1438"):
        env.reset(options={"index": 1438})
    with pytest.raises(ValueError, match="-1"):
        env.reset(options={"index": -1})
    with pytest.raises(ValueError, match="unknown reset option"):
        env.reset(options={"label": 3})


def test_draws_cover_the_split_uniformly():
    env = _digits_env(split="test")
    env.reset(seed=0)
    idx = [env.current_index] + [env.reset() and env.current_index for _ in range(35899)]
    counts = np.bincount(idx, minlength=359)
    assert counts.min() > 50 and counts.max() < 150  # expectation 100
    env.reset(seed=1)
    other = [env.current_index] + [env.reset() and env.current_index for _ in range(99)]
    assert other != idx[:100]


def test_errors():
    env = _digits_env()
    with pytest.raises(MNISTResetNeeded, match="reset"):
        env.step(0)
    with pytest.raises(gym.error.ResetNeeded):
        env.score_candidates([0, 1])
    env.reset(seed=0)
    for bad, match in [(10, "10"), (-1, "-1"), (1.0, "1.0"), (True, "True"), ("3", "'3'")]:
        with pytest.raises(ValueError, match=match):
            env.step(bad)
    with pytest.raises(ValueError, match="10"):
        env.score_candidates([0, 10])
    env.step(0)
    with pytest.raises(MNISTResetNeeded, match="terminated"):
        env.step(0)
    with pytest.raises(ValueError, match="render_mode"):
        _digits_env(render_mode="human")


def test_score_candidates_matches_step_and_changes_nothing():
    env, twin = _digits_env(), _digits_env()
    _, y = env.dataset_arrays()
    env.reset(seed=11)
    twin.reset(seed=11)
    for _ in range(20):
        i = env.current_index
        state = env.np_random.bit_generator.state
        scores = env.score_candidates(np.arange(10))
        assert scores.dtype == np.float64 and scores.shape == (10,)
        assert scores.tolist() == [float(a == y[i]) for a in range(10)]
        assert env.score_candidates([3, 3, 7]).tolist() == [scores[3], scores[3], scores[7]]
        assert env.np_random.bit_generator.state == state and env.current_index == i
        rewards = []
        for a in range(10):
            env.reset(options={"index": i})
            rewards.append(env.step(a)[1])
        assert rewards == scores.tolist()
        # the scoring env keeps drawing exactly the images of an env that never scored
        np.testing.assert_array_equal(env.reset()[0], twin.reset()[0])


def test_render_rgb_array():
    env = _digits_env(render_mode="rgb_array")
    env.reset(options={"index": 0})
    frame = env.render()
    assert frame.shape == (8, 8, 3) and frame.dtype == np.uint8
    x, _ = env.dataset_arrays()
    np.testing.assert_array_equal(frame[:, :, 0].ravel(), np.round(x[0] * 255).astype(np.uint8))


# ----------------------------------------------------------------------------- vector env


def test_make_vec_uses_native_vector_env():
    venv = gym.make_vec("MNISTBandit-v0", num_envs=3, dataset="digits", split="test")
    assert isinstance(venv, MNISTBanditVectorEnv)
    assert venv.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    assert venv.observation_space == gym.spaces.Box(0.0, 1.0, (3, 64), np.float32)
    assert venv.action_space == gym.spaces.MultiDiscrete([10, 10, 10])
    assert venv.single_observation_space == gym.spaces.Box(0.0, 1.0, (64,), np.float32)
    assert venv.single_action_space == gym.spaces.Discrete(10)
    assert venv.dataset_arrays()[0].shape == (359, 64)
    assert venv.spec.id == "MNISTBandit-v0"


@pytest.mark.parametrize("seed", [0, 7])
def test_vector_env_equals_single_envs(seed):
    """Sub-env i of a vector env reset with seed s = a single env reset with seed s + i."""
    n = 5
    venv = MNISTBanditVectorEnv(num_envs=n, dataset="digits")
    singles = [_digits_env() for _ in range(n)]
    obs, info = venv.reset(seed=seed)
    assert info == {}
    single_obs = [e.reset(seed=seed + i)[0] for i, e in enumerate(singles)]
    np.testing.assert_array_equal(obs, np.stack(single_obs))
    rng = np.random.default_rng(0)
    for _ in range(10):
        actions = rng.integers(0, 10, size=n)
        obs, rewards, terms, truncs, info = venv.step(actions)
        for i, e in enumerate(singles):
            o, r, t, tr, inf = e.step(actions[i])
            np.testing.assert_array_equal(info["final_obs"][i], o)
            assert (rewards[i], terms[i], truncs[i]) == (r, t, tr)
            assert info["final_info"]["correct"][i] == inf["correct"]
            np.testing.assert_array_equal(obs[i], e.reset()[0])


def test_vector_env_matches_sync_vector_env():
    """Same observations, rewards and info layout as gymnasium's SyncVectorEnv (SAME_STEP)."""
    n = 4
    native = gym.make_vec("MNISTBandit-v0", num_envs=n, dataset="digits")
    sync = SyncVectorEnv(
        [lambda: _digits_env() for _ in range(n)], autoreset_mode=AutoresetMode.SAME_STEP
    )
    assert data_equivalence(native.reset(seed=42), sync.reset(seed=42), exact=True)
    rng = np.random.default_rng(1)
    for _ in range(6):
        actions = rng.integers(0, 10, size=n)
        a, b = native.step(actions), sync.step(actions)
        assert data_equivalence(a, b, exact=True), (a, b)
    # reset with a list of seeds, some None
    a = native.reset(seed=[3, None, 5, None])
    b = sync.reset(seed=[3, None, 5, None])
    assert data_equivalence(a, b, exact=True)


def test_vector_reset_index_and_score_candidates():
    n = 3
    venv = MNISTBanditVectorEnv(num_envs=n, dataset="digits")
    x, y = venv.dataset_arrays()
    idx = np.array([4, 0, 4])
    obs, _ = venv.reset(seed=0, options={"index": idx})
    np.testing.assert_array_equal(obs, x[idx])
    np.testing.assert_array_equal(venv.current_indices, idx)
    cands = np.tile(np.arange(10), (n, 1))
    scores = venv.score_candidates(cands)
    assert scores.shape == (n, 10) and scores.dtype == np.float64
    np.testing.assert_array_equal(scores, (cands == y[idx][:, None]).astype(np.float64))
    np.testing.assert_array_equal(venv.current_indices, idx)  # no state change
    for a in range(10):
        venv.reset(options={"index": idx})
        _, rewards, *_ = venv.step(np.full(n, a))
        np.testing.assert_array_equal(rewards, scores[:, a])
    # after a step the scores refer to the new (autoreset) images shown in obs
    obs, *_ = venv.step(np.zeros(n, dtype=np.int64))
    new = venv.current_indices
    np.testing.assert_array_equal(obs, x[new])
    np.testing.assert_array_equal(venv.score_candidates(cands), cands == y[new][:, None])
    venv.reset(options={"index": 9})
    np.testing.assert_array_equal(venv.current_indices, [9, 9, 9])


def test_vector_errors():
    venv = MNISTBanditVectorEnv(num_envs=2, dataset="digits")
    with pytest.raises(MNISTResetNeeded):
        venv.step(np.zeros(2, dtype=np.int64))
    with pytest.raises(MNISTResetNeeded):
        venv.score_candidates(np.zeros((2, 1), dtype=np.int64))
    venv.reset(seed=0)
    with pytest.raises(ValueError, match="10"):
        venv.step(np.array([0, 10]))
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        venv.step(np.array([0, 1, 2]))
    with pytest.raises(ValueError, match="integer dtype"):
        venv.step(np.array([0.0, 1.0]))
    with pytest.raises(ValueError, match="2"):
        venv.score_candidates(np.zeros((3, 4), dtype=np.int64))
    with pytest.raises(ValueError, match="1438"):
        venv.reset(options={"index": [0, 1438]})
    with pytest.raises(ValueError, match="list of 2 seeds"):
        venv.reset(seed=[1, 2, 3])
    with pytest.raises(ValueError, match="num_envs"):
        MNISTBanditVectorEnv(num_envs=0, dataset="digits")


def test_vector_reset_info_and_step_info_hold_no_label():
    venv = MNISTBanditVectorEnv(num_envs=2, dataset="digits", render_mode="rgb_array")
    _, info = venv.reset(seed=0)
    assert info == {}
    _, _, _, _, info = venv.step(np.array([1, 2]))
    assert set(info) == {"final_obs", "_final_obs", "final_info", "_final_info"}
    assert set(info["final_info"]) == {"correct", "_correct"}
    frames = venv.render()
    assert len(frames) == 2 and frames[0].shape == (8, 8, 3)


def test_tpo_gym_never_imports_torch():
    code = (
        "import sys, numpy as np, gymnasium as gym, tpo_gym, tpo_gym.mnist, tpo_gym.datasets\n"
        "env = gym.make('MNISTBandit-v0', dataset='digits'); env.reset(seed=0); env.step(0)\n"
        "v = gym.make_vec('MNISTBandit-v0', num_envs=2, dataset='digits'); v.reset(seed=0)\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
