"""Clear errors for bad data files and unavailable models (issue 13, items 8-9).

Every bad input here used to give a raw zlib / numpy / Unicode error, a silent fallback, or
a 25 s network retry loop; each must now raise at once, naming the file (or folder, or model
id) and saying what was expected.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import tpo_gym  # noqa: F401  (registers the ids)
from tpo_gym.datasets import (
    DIGITS_SOURCE,
    image_classification_source,
    load_image_classification,
    read_idx,
)
from tpo_gym.mnist import MNISTBanditEnv, MNISTBanditVectorEnv
from tpo_gym.prompts.gsm8k import GSM8KTask, load_gsm8k_records

REPO = Path(__file__).resolve().parents[1]


def _idx_bytes(arr: np.ndarray) -> bytes:
    arr = np.asarray(arr, dtype=np.uint8)
    return bytes([0, 0, 0x08, arr.ndim]) + np.asarray(arr.shape, ">u4").tobytes() + arr.tobytes()


def _split(folder: Path, n: int = 5, gz: bool = True, seed: int = 0) -> Path:
    """A small MNIST-format train split in ``folder``."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    suffix = ".gz" if gz else ""
    pack = gzip.compress if gz else bytes
    images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, n, dtype=np.uint8)
    (folder / f"train-images-idx3-ubyte{suffix}").write_bytes(pack(_idx_bytes(images)))
    (folder / f"train-labels-idx1-ubyte{suffix}").write_bytes(pack(_idx_bytes(labels)))
    return folder


# ----------------------------------------------------------------------------- MNIST files


def _corrupt_gzip_body(data: bytes) -> bytes:
    """Keep the gzip header (magic, flags) and flip every byte of the deflate body."""
    body = bytearray(data)
    for i in range(10, len(body) - 8):
        body[i] ^= 0x55
    return bytes(body)


def test_corrupt_gzip_body_names_the_file(isolated, tmp_path):
    folder = _split(tmp_path / "mnist", n=10)
    images = folder / "train-images-idx3-ubyte.gz"
    images.write_bytes(_corrupt_gzip_body(images.read_bytes()))
    for call in (
        lambda: read_idx(images),
        lambda: load_image_classification("mnist", "train", data_dir=folder),
        lambda: MNISTBanditEnv(data_dir=folder),
    ):
        with pytest.raises(ValueError) as exc:
            call()
        msg = str(exc.value)
        assert str(images) in msg and "corrupt gzip" in msg, msg
        assert "expected a gzip-compressed IDX file" in msg, msg


def test_idx_file_with_zero_images_names_the_file(isolated, tmp_path):
    folder = tmp_path / "zero"
    folder.mkdir()
    (folder / "train-images-idx3-ubyte").write_bytes(_idx_bytes(np.zeros((0, 28, 28))))
    (folder / "train-labels-idx1-ubyte").write_bytes(_idx_bytes(np.zeros(0)))
    for call in (
        lambda: load_image_classification("mnist", "train", data_dir=folder),
        lambda: MNISTBanditEnv(data_dir=folder),
        lambda: MNISTBanditVectorEnv(2, data_dir=folder),
    ):
        with pytest.raises(ValueError) as exc:
            call()
        msg = str(exc.value)
        assert str(folder / "train-images-idx3-ubyte") in msg, msg
        assert "0 images" in msg and "expected at least one image" in msg, msg


def _savez_then_damage(path: Path) -> None:
    x = np.random.default_rng(0).integers(0, 256, (50, 28, 28), dtype=np.uint8)
    y = np.zeros(50, np.uint8)
    np.savez_compressed(path, x_train=x, y_train=y, x_test=x, y_test=y)
    data = bytearray(path.read_bytes())
    for i in range(200, len(data) // 2):  # inside the first member's compressed data
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "kind, expect",
    [
        ("text", "not a readable .npz archive"),
        ("zip_magic", "not a readable .npz archive"),
        ("empty", "not a readable .npz archive"),
        ("npy", "holds a single .npy array"),
        ("damaged_member", "damaged array"),
        ("wrong_keys", "no array x_train"),
    ],
)
def test_garbage_npz_names_the_file(isolated, tmp_path, kind, expect):
    folder = tmp_path / "keras"
    folder.mkdir()
    npz = folder / "mnist.npz"
    if kind == "text":
        npz.write_bytes(b"this is not an npz archive\n" * 10)
    elif kind == "zip_magic":
        npz.write_bytes(b"PK\x03\x04" + bytes(range(256)))
    elif kind == "empty":
        npz.write_bytes(b"")
    elif kind == "npy":
        with npz.open("wb") as f:
            np.save(f, np.zeros(3))
    elif kind == "damaged_member":
        _savez_then_damage(npz)
    else:
        with npz.open("wb") as f:
            np.savez(f, images=np.zeros((2, 28, 28), np.uint8))
    with pytest.raises(ValueError) as exc:
        load_image_classification("mnist", "train", data_dir=folder)
    msg = str(exc.value)
    assert str(npz) in msg and expect in msg, msg
    assert "expected Keras' mnist.npz" in msg and "x_train" in msg and "y_train" in msg, msg


# ----------------------------------------------------------------------------- GSM8K files


def test_non_utf8_gsm8k_jsonl_names_the_file_and_line(tmp_path):
    path = tmp_path / "gsm8k.jsonl"
    good = json.dumps({"question": "1 + 1?", "answer": "2 #### 2"}).encode()
    path.write_bytes(good + b"\n" + b'{"question": "caf\xe9 au lait?", "answer": "#### 3"}\n')
    for call in (lambda: load_gsm8k_records(path), lambda: GSM8KTask(path)):
        with pytest.raises(ValueError) as exc:
            call()
        msg = str(exc.value)
        assert not isinstance(exc.value, UnicodeDecodeError)  # our message, not the codec's
        assert str(path) in msg and "line 2" in msg and "not UTF-8" in msg, msg
        assert "expected GSM8K as UTF-8 JSON lines" in msg, msg


def test_gsm8k_jsonl_with_a_utf8_byte_order_mark_loads(tmp_path):
    path = tmp_path / "bom.jsonl"
    record = {"question": "caf\u00e9?", "answer": "#### 4"}
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(record, ensure_ascii=False).encode() + b"\n")
    assert load_gsm8k_records(path) == [record]


def test_garbage_gsm8k_parquet_names_the_file(tmp_path):
    pytest.importorskip("pyarrow")
    path = tmp_path / "gsm8k.parquet"
    path.write_bytes(b"not parquet at all" * 8)
    with pytest.raises(ValueError, match="not a readable parquet file") as exc:
        load_gsm8k_records(path)
    assert str(path) in str(exc.value)


# ----------------------------------------------------------------------------- data_dir


def test_missing_data_dir_is_an_error_naming_it_even_with_the_env_var_set(
    isolated, tmp_path, monkeypatch
):
    monkeypatch.setenv("TPO_MNIST_DIR", str(_split(tmp_path / "env")))
    _split(isolated / ".cache" / "tpo" / "mnist")
    missing = tmp_path / "no-such-folder"
    for call in (
        lambda: load_image_classification("mnist", "train", data_dir=missing),
        lambda: MNISTBanditEnv(data_dir=missing),
        lambda: gym.make_vec("MNISTBandit-v0", num_envs=2, data_dir=str(missing)),
    ):
        with pytest.raises(FileNotFoundError) as exc:
            call()
        msg = str(exc.value)
        assert str(missing) in msg and "does not exist" in msg, msg
        assert "no fallback" in msg and "TPO_MNIST_DIR" in msg, msg


def test_data_dir_that_is_a_file_is_an_error_naming_it(isolated, tmp_path):
    a_file = tmp_path / "mnist.npz"
    a_file.write_bytes(b"")
    with pytest.raises(NotADirectoryError, match="is not a folder") as exc:
        load_image_classification("mnist", "train", data_dir=a_file)
    assert str(a_file) in str(exc.value)


def test_empty_data_dir_never_falls_back_to_the_env_var_or_usual_folders(
    isolated, tmp_path, monkeypatch
):
    monkeypatch.setenv("TPO_MNIST_DIR", str(_split(tmp_path / "env")))
    _split(isolated / ".cache" / "tpo" / "mnist")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError) as exc:
        load_image_classification("mnist", "train", data_dir=empty)
    msg = str(exc.value)
    searched = [line[4:] for line in msg.splitlines() if line.startswith("  - ")]
    assert searched == [str(empty), str(empty / "MNIST" / "raw")], msg
    assert "only the explicit data_dir" in msg and "data_dir=None" in msg, msg
    with pytest.raises(FileNotFoundError):
        MNISTBanditEnv(data_dir=empty)
    # without data_dir the env var is used
    assert load_image_classification("mnist", "train")[0].shape == (5, 784)


@pytest.mark.parametrize("where", ["data_dir", "torchvision_root", "env_var", "home_cache"])
def test_env_data_dir_reports_the_folder_really_used(isolated, tmp_path, monkeypatch, where):
    data_dir = None
    if where == "data_dir":
        folder = data_dir = tmp_path / "mine"
    elif where == "torchvision_root":
        data_dir = tmp_path / "root"
        folder = data_dir / "MNIST" / "raw"
    elif where == "env_var":
        folder = tmp_path / "viaenv"
        monkeypatch.setenv("TPO_MNIST_DIR", str(folder))
    else:
        folder = isolated / ".cache" / "tpo" / "mnist"
    _split(folder)
    expected = os.path.abspath(folder)
    assert image_classification_source("mnist", "train", data_dir) == expected
    assert MNISTBanditEnv(data_dir=data_dir).data_dir == expected
    assert MNISTBanditVectorEnv(3, data_dir=data_dir).data_dir == expected
    made = gym.make("MNISTBandit-v0", data_dir=data_dir)
    assert made.unwrapped.data_dir == expected
    vec = gym.make_vec("MNISTBandit-v0", num_envs=2, data_dir=data_dir)
    assert vec.unwrapped.data_dir == expected


def test_env_data_dir_reports_keras_npz_file(isolated):
    folder = isolated / ".keras" / "datasets"
    folder.mkdir(parents=True)
    x = np.zeros((3, 28, 28), np.uint8)
    y = np.arange(3, dtype=np.uint8)
    np.savez(folder / "mnist.npz", x_train=x, y_train=y, x_test=x, y_test=y)
    assert MNISTBanditEnv().data_dir == str(folder / "mnist.npz")
    assert MNISTBanditVectorEnv(2, split="test").data_dir == str(folder / "mnist.npz")


def test_env_data_dir_marks_the_bundled_digits():
    assert MNISTBanditEnv(dataset="digits").data_dir == DIGITS_SOURCE
    assert MNISTBanditVectorEnv(2, dataset="digits").data_dir == DIGITS_SOURCE
    assert "scikit-learn" in DIGITS_SOURCE
    assert image_classification_source("digits", "test") == DIGITS_SOURCE
    with pytest.raises(ValueError, match="data_dir must be None"):
        image_classification_source("digits", "train", "/tmp")


# ----------------------------------------------------------------------------- hub model ids

# HF_HUB_OFFLINE unset, an empty Hugging Face cache, and no network: every proxy points at a
# closed local port, so a request fails at once (and huggingface_hub would retry it ~25 s).
_NO_NETWORK = {
    "HTTP_PROXY": "http://127.0.0.1:9",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "http_proxy": "http://127.0.0.1:9",
    "https_proxy": "http://127.0.0.1:9",
    "NO_PROXY": "",
    "no_proxy": "",
}


# Prepended to every offline script: each network lookup is counted and refused, and the
# count is printed at exit. The slow path (~25 s) was the hub client retrying lookups.
_COUNT_LOOKUPS = """
import atexit, socket
LOOKUPS = []
def _refuse(host, *args, **kwargs):
    LOOKUPS.append(host)
    raise OSError("network lookups are refused in this test")
socket.getaddrinfo = _refuse
atexit.register(lambda: print("LOOKUPS", len(LOOKUPS)))
"""


def _lookups(proc: subprocess.CompletedProcess) -> int:
    return int(proc.stdout.split("LOOKUPS")[1].split()[0])


def _run_offline(code: str, hf_home: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    env.update(_NO_NETWORK, HF_HOME=str(hf_home), PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-c", _COUNT_LOOKUPS + textwrap.dedent(code)],
        env=env,
        cwd=hf_home.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_uncached_hub_id_fails_at_once_with_how_to_provide_it(tmp_path):
    pytest.importorskip("transformers")
    proc = _run_offline(
        """
        import os
        assert "HF_HUB_OFFLINE" not in os.environ
        import gymnasium as gym
        import tpo_gym
        from tpo_agents import TPO
        from tpo_agents.llm.loading import load_causal_lm, load_tokenizer

        env = gym.make("TinyArithmetic-v0", size=4, operations="+")
        for call in (
            lambda: load_causal_lm("gpt2"),
            lambda: load_tokenizer("gpt2", None, None),
            lambda: TPO("CausalLMPolicy", env, batch_size=2, n_candidates=2,
                        policy_kwargs={"model": "gpt2"}),
        ):
            try:
                call()
            except ValueError as err:
                print("MESSAGE", str(err).replace(chr(10), " "))
            else:
                raise SystemExit("no error")
        """,
        tmp_path / "hf",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    messages = [line for line in proc.stdout.splitlines() if line.startswith("MESSAGE")]
    assert len(messages) == 3, proc.stdout
    assert _lookups(proc) == 0  # fails from the local cache alone, no retried requests
    for msg in messages:
        assert "'gpt2' is not available locally" in msg, msg
        assert "local folder" in msg and "HF_HUB_OFFLINE" in msg and "never downloads" in msg, msg
        assert str(tmp_path / "hf") in msg, msg  # the cache folder looked in


def test_cached_hub_id_loads_from_the_local_cache_without_network(tmp_path):
    pytest.importorskip("transformers")
    from zoo.paper.llm.tiny import build_tiny_causal_lm

    # The Hugging Face cache layout: models--org--name/{refs/main, snapshots/<commit>/...}.
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hf" / "hub" / "models--tpo-tests--tiny-lm"
    build_tiny_causal_lm(repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    proc = _run_offline(
        """
        from tpo_agents.llm.loading import load_causal_lm, load_tokenizer

        model, source, base = load_causal_lm("tpo-tests/tiny-lm")
        tokenizer = load_tokenizer(None, source, model)
        print("LOADED", type(model).__name__, source, base, tokenizer.padding_side)
        """,
        tmp_path / "hf",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "LOADED LlamaForCausalLM tpo-tests/tiny-lm tpo-tests/tiny-lm left" in proc.stdout
    assert _lookups(proc) == 0  # read from the snapshot folder, no network request first


def test_missing_model_path_still_says_it_does_not_exist(tmp_path):
    pytest.importorskip("transformers")
    from tpo_agents.llm.loading import load_causal_lm

    with pytest.raises(ValueError, match="no_such_model.*does not exist"):
        load_causal_lm(str(tmp_path / "no_such_model"))
