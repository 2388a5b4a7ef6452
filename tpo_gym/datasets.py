"""Image-classification data for the MNIST contextual bandit (numpy only, never downloads).

Three datasets, all with 10 classes:

- ``"mnist"``: the four standard IDX files (``train-images-idx3-ubyte``,
  ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte``, ``t10k-labels-idx1-ubyte``, each
  optionally gzipped as ``.gz``), or Keras' ``mnist.npz``, found in a local folder.
- ``"fashion-mnist"``: the same IDX file names, in Fashion-MNIST's own folders (Debian's
  ``dataset-fashion-mnist`` package installs them in ``/usr/share/datasets/fashion-mnist``).
- ``"digits"``: scikit-learn's bundled 8x8 digits (1797 images), split 80/20 by a fixed
  permutation (seed 0). Needs no files.

Nothing is ever downloaded; a missing dataset raises :class:`FileNotFoundError` listing every
folder searched and how to provide the files. There is no fallback from one dataset to another,
nor from an explicit ``data_dir`` to the environment variables or the usual folders. Malformed
files (a corrupt gzip stream, an empty split, a damaged ``.npz``) raise :class:`ValueError`
naming the file and what was expected. :func:`image_classification_source` says where a split
is read from.
Loaded arrays are cached per (dataset, split, files) within the process and returned
read-only, so many environments share one copy.
"""

from __future__ import annotations

import gzip
import os
import pickle
import zipfile
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

__all__ = [
    "DATASETS",
    "SPLITS",
    "NUM_CLASSES",
    "read_idx",
    "DIGITS_SOURCE",
    "find_image_classification_files",
    "image_classification_source",
    "load_image_classification",
    "clear_cache",
]

DATASETS: tuple[str, ...] = ("mnist", "fashion-mnist", "digits")
SPLITS: tuple[str, ...] = ("train", "test")
NUM_CLASSES = 10

# IDX type codes (third byte of the magic number) -> big-endian numpy dtype.
_IDX_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}

_GZIP_MAGIC = b"\x1f\x8b"

# Split name -> file prefix of the standard IDX files.
_IDX_PREFIX = {"train": "train", "test": "t10k"}

# Per dataset: environment variable, folders under $HOME, system folders, torchvision subfolder.
# Module-level so tests (and unusual installs) can adjust them.
_ENV_VARS = {"mnist": "TPO_MNIST_DIR", "fashion-mnist": "TPO_FASHION_MNIST_DIR"}
_HOME_DIRS = {
    "mnist": (".cache/tpo/mnist", ".keras/datasets", "data/mnist"),
    "fashion-mnist": (
        ".cache/tpo/fashion-mnist",
        ".keras/datasets/fashion-mnist",
        "data/fashion-mnist",
    ),
}
# Searched only through the torchvision subfolder (``~/data/MNIST/raw``), never directly:
# a bare ``~/data`` could hold the other dataset's identically named files.
_HOME_TORCHVISION_ROOTS = ("data",)
_SYSTEM_DIRS = {
    "mnist": ("/usr/share/datasets/mnist",),
    "fashion-mnist": ("/usr/share/datasets/fashion-mnist",),
}
_TORCHVISION_SUBDIR = {"mnist": "MNIST/raw", "fashion-mnist": "FashionMNIST/raw"}
_KERAS_NPZ = {"mnist": "mnist.npz"}

DIGITS_SOURCE = "sklearn.datasets.load_digits (bundled with scikit-learn)"
"""What :func:`image_classification_source` (and ``MNISTBanditEnv.data_dir``) report for
``"digits"``, which is read from scikit-learn rather than from files."""

_DIGITS_SEED = 0
_DIGITS_TRAIN_FRACTION = 0.8

_CACHE: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}


def clear_cache() -> None:
    """Forget every array loaded so far in this process."""
    _CACHE.clear()


# --------------------------------------------------------------------------- IDX reading


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read one IDX file (the MNIST format), gzipped or not.

    The header is two zero bytes, a type code (0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32,
    0x0D float32, 0x0E float64), the number of dimensions, then one big-endian uint32 size per
    dimension; the big-endian data follows. Gzip is detected from the file's first bytes, so
    the ``.gz`` suffix is not required.

    Args:
        path: the file to read.

    Returns:
        An array of the declared shape, in native byte order.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: the file is not a well-formed IDX file (bad magic number, unknown type
            code, truncated header or data, trailing bytes, corrupt gzip stream).
    """
    path = Path(path)
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == _GZIP_MAGIC:
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as e:  # BadGzipFile is an OSError
            raise ValueError(
                f"{path}: corrupt gzip stream ({e}); expected a gzip-compressed IDX file "
                "(the file starts with the gzip magic bytes 1f 8b but does not decompress)"
            ) from e
    if len(raw) < 4:
        raise ValueError(f"{path}: too short for an IDX header ({len(raw)} bytes, need >= 4)")
    if raw[0] != 0 or raw[1] != 0:
        raise ValueError(
            f"{path}: bad IDX magic number 0x{raw[:4].hex()}: the first two bytes must be zero "
            "(expected e.g. 0x00000803 for images or 0x00000801 for labels)"
        )
    code, ndim = raw[2], raw[3]
    if code not in _IDX_DTYPES:
        valid = ", ".join(f"0x{c:02X}" for c in _IDX_DTYPES)
        raise ValueError(
            f"{path}: unknown IDX type code 0x{code:02X} in magic 0x{raw[:4].hex()}; "
            f"valid codes: {valid}"
        )
    if ndim == 0:
        raise ValueError(f"{path}: IDX file declares 0 dimensions (magic 0x{raw[:4].hex()})")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(
            f"{path}: truncated IDX header: {ndim} dimensions need {header} bytes, "
            f"file has {len(raw)}"
        )
    shape = tuple(int(s) for s in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    dtype = _IDX_DTYPES[code]
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    actual = len(raw) - header
    if actual != expected:
        kind = "truncated" if actual < expected else "trailing bytes in"
        raise ValueError(
            f"{path}: {kind} IDX data: shape {shape} of {dtype.name} needs {expected} bytes "
            f"after the {header}-byte header, found {actual}"
        )
    data = np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape)
    return data.astype(dtype.newbyteorder("="), copy=True)


# --------------------------------------------------------------------------- locating files


def _check_dataset_split(dataset: str, split: str) -> None:
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; valid options: {list(DATASETS)}")
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; valid options: {list(SPLITS)}")


def _explicit_dir(dataset: str, data_dir: str | os.PathLike) -> Path:
    """``data_dir`` as a folder that exists, else a :class:`FileNotFoundError` naming it."""
    folder = Path(data_dir).expanduser()
    note = (
        f"an explicit data_dir is the only place searched for {dataset} (no fallback to "
        f"${_ENV_VARS[dataset]} or the usual folders); pass data_dir=None to search those"
    )
    if not folder.exists():
        raise FileNotFoundError(
            f"data_dir {str(data_dir)!r} does not exist: expected a folder holding the "
            f"{dataset} files; {note}"
        )
    if not folder.is_dir():
        raise NotADirectoryError(
            f"data_dir {str(data_dir)!r} is not a folder: expected a folder holding the "
            f"{dataset} files; {note}"
        )
    return folder


def _candidate_dirs(dataset: str, data_dir: str | os.PathLike | None) -> list[Path]:
    """Every folder searched for ``dataset``, in order, without duplicates.

    An explicit ``data_dir`` is the only place searched (with its torchvision subfolder).
    """
    sub = _TORCHVISION_SUBDIR[dataset]
    if data_dir is not None:
        base = _explicit_dir(dataset, data_dir)
        return [base, base / sub]
    bases: list[Path] = []
    env_value = os.environ.get(_ENV_VARS[dataset])
    if env_value:
        bases.append(Path(env_value).expanduser())
    home = Path.home()
    bases.extend(home / rel for rel in _HOME_DIRS[dataset])
    folders: list[Path] = []
    for base in bases:
        folders += [base, base / sub]
    folders += [home / rel / sub for rel in _HOME_TORCHVISION_ROOTS]
    for base in _SYSTEM_DIRS[dataset]:
        folders += [Path(base), Path(base) / sub]
    out: list[Path] = []
    for folder in folders:
        if folder not in out:
            out.append(folder)
    return out


def _idx_names(split: str, kind: str) -> list[str]:
    """Accepted file names for one IDX file (``kind`` is "images" or "labels")."""
    prefix = _IDX_PREFIX[split]
    rank = 3 if kind == "images" else 1
    names = []
    for sep in ("-", "."):  # "train-images.idx3-ubyte" is how some unzip tools name it
        stem = f"{prefix}-{kind}{sep}idx{rank}-ubyte"
        names += [stem, stem + ".gz"]
    return names


def _find_in(folder: Path, names: Sequence[str]) -> Path | None:
    for name in names:
        p = folder / name
        if p.is_file():
            return p
    return None


def find_image_classification_files(
    dataset: str, split: str, data_dir: str | os.PathLike | None = None
) -> tuple[Path, ...]:
    """Locate the files holding ``dataset``'s ``split`` (not for ``"digits"``, which is bundled).

    With an explicit ``data_dir``, only that folder (and its torchvision layout
    ``<data_dir>/MNIST/raw``, ``FashionMNIST/raw`` for Fashion-MNIST) is searched: it must
    exist, and there is no fallback to the environment variable or the usual folders.
    With ``data_dir=None``, folders are searched in this order, and in each also the
    torchvision layout:

    - ``mnist``: ``$TPO_MNIST_DIR``, ``~/.cache/tpo/mnist``,
      ``~/.keras/datasets`` (also Keras' ``mnist.npz``), ``~/data/mnist``,
      ``~/data/MNIST/raw``, ``/usr/share/datasets/mnist``;
    - ``fashion-mnist``: ``$TPO_FASHION_MNIST_DIR``,
      ``~/.cache/tpo/fashion-mnist``, ``~/.keras/datasets/fashion-mnist``,
      ``~/data/fashion-mnist``, ``~/data/FashionMNIST/raw``,
      ``/usr/share/datasets/fashion-mnist``.

    Returns:
        ``(images_file, labels_file)`` for IDX files, or ``(npz_file,)`` for Keras' archive.

    Raises:
        ValueError: unknown dataset or split, or ``dataset == "digits"``.
        FileNotFoundError: ``data_dir`` does not exist, or no folder searched holds both
            files; the message lists every folder searched and how to provide the files.
        NotADirectoryError: ``data_dir`` is a file.
    """
    _check_dataset_split(dataset, split)
    if dataset == "digits":
        raise ValueError("dataset 'digits' is bundled with scikit-learn and has no files")
    image_names = _idx_names(split, "images")
    label_names = _idx_names(split, "labels")
    folders = _candidate_dirs(dataset, data_dir)
    for folder in folders:
        images = _find_in(folder, image_names)
        labels = _find_in(folder, label_names)
        if images is not None and labels is not None:
            return images, labels
        npz = _KERAS_NPZ.get(dataset)
        if npz is not None and (folder / npz).is_file():
            return (folder / npz,)
    searched = "\n".join(f"  - {f}" for f in folders)
    var = _ENV_VARS[dataset]
    if data_dir is not None:
        env_note = f"only the explicit data_dir; ${var} and the usual folders are not searched"
    elif os.environ.get(var):
        env_note = f"${var}={os.environ[var]!r}"
    else:
        env_note = f"${var} is not set"
    wanted = f"{image_names[0]} and {label_names[0]} (optionally gzipped, .gz)"
    if dataset in _KERAS_NPZ:
        wanted += f", or Keras' {_KERAS_NPZ[dataset]}"
    if data_dir is not None:
        hint = (
            f"Put them in data_dir (or its {_TORCHVISION_SUBDIR[dataset]} subfolder), or pass "
            f"data_dir=None to search ${var} and the usual folders. "
            "Nothing is downloaded automatically."
        )
    else:
        hint = (
            f"Put them in one of these folders, pass data_dir=..., or set the environment "
            f"variable {var} to their folder. Nothing is downloaded automatically."
        )
    if dataset == "fashion-mnist":
        hint += (
            " On Debian/Ubuntu, `apt-get install dataset-fashion-mnist` installs them in "
            "/usr/share/datasets/fashion-mnist."
        )
    else:
        hint += (
            " The files are distributed at http://yann.lecun.com/exdb/mnist/ (and mirrors); "
            "an existing torchvision download (<root>/MNIST/raw) also works. "
            "For a dataset that needs no files, use dataset='digits'."
        )
    raise FileNotFoundError(
        f"{dataset} {split} split not found: need {wanted}. Searched ({env_note}):\n"
        f"{searched}\n{hint}"
    )


# --------------------------------------------------------------------------- loading


def _validate(images: np.ndarray, labels: np.ndarray, source: str) -> None:
    if images.ndim < 2 or images.dtype != np.uint8:
        raise ValueError(
            f"{source}: expected uint8 images of shape [n, h, w], got {images.dtype} {images.shape}"
        )
    if images.shape[0] == 0:
        raise ValueError(
            f"{source}: holds 0 images (shape {images.shape}); expected at least one image, "
            "uint8 of shape [n, h, w] with n >= 1"
        )
    if 0 in images.shape[1:]:
        raise ValueError(
            f"{source}: images of shape {images.shape} have no pixels; expected uint8 images "
            "of shape [n, h, w] with h, w >= 1"
        )
    if labels.ndim != 1 or labels.shape[0] != images.shape[0]:
        raise ValueError(f"{source}: {images.shape[0]} images but labels of shape {labels.shape}")
    if labels.size and (labels.min() < 0 or labels.max() >= NUM_CLASSES):
        raise ValueError(
            f"{source}: labels must lie in [0, {NUM_CLASSES - 1}], "
            f"found range [{labels.min()}, {labels.max()}]"
        )


def _to_float(images: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = images.reshape(images.shape[0], -1).astype(np.float32)
    x /= np.float32(255.0)
    y = labels.astype(np.int64)
    x.setflags(write=False)
    y.setflags(write=False)
    return x, y


# What np.load and NpzFile raise on a damaged file: not a zip / pickle, truncated, bad member.
_NPZ_ERRORS = (
    ValueError,
    OSError,
    EOFError,
    zipfile.BadZipFile,
    pickle.UnpicklingError,
    zlib.error,
)


def _read_npz(path: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """The images and labels of one split of Keras' ``mnist.npz``."""
    key = "train" if split == "train" else "test"
    expected = (
        f"expected Keras' mnist.npz, a NumPy .npz (zip) archive holding arrays x_{key} "
        f"(uint8 [n, 28, 28]) and y_{key} (uint8 [n])"
    )
    try:
        z = np.load(path, allow_pickle=False)
    except _NPZ_ERRORS as e:
        raise ValueError(f"{path}: not a readable .npz archive ({e}); {expected}") from e
    if not isinstance(z, np.lib.npyio.NpzFile):
        raise ValueError(f"{path}: holds a single .npy array, not an .npz archive; {expected}")
    with z:
        missing = [name for name in (f"x_{key}", f"y_{key}") if name not in z.files]
        if missing:
            raise ValueError(f"{path}: no array {missing[0]} (found {z.files}); {expected}")
        try:
            return z[f"x_{key}"], z[f"y_{key}"]
        except _NPZ_ERRORS as e:
            raise ValueError(f"{path}: damaged array in the .npz archive ({e}); {expected}") from e


def _load_files(files: tuple[Path, ...], split: str) -> tuple[np.ndarray, np.ndarray]:
    if len(files) == 1:  # Keras' mnist.npz
        images, labels = _read_npz(files[0], split)
        source = str(files[0])
    else:
        images, labels = read_idx(files[0]), read_idx(files[1])
        source = f"{files[0]} / {files[1]}"
        if images.ndim >= 2 and images.shape[0] == 0:
            source = str(files[0])  # the empty file itself
    _validate(images, labels, source)
    return _to_float(images, labels)


def _load_digits(split: str) -> tuple[np.ndarray, np.ndarray]:
    try:
        from sklearn.datasets import load_digits
    except ImportError as e:  # pragma: no cover - scikit-learn is a declared dependency
        raise ImportError("dataset 'digits' needs scikit-learn (`pip install scikit-learn`)") from e
    bunch = load_digits()
    x = np.asarray(bunch.data, dtype=np.float32) / np.float32(16.0)
    y = np.asarray(bunch.target, dtype=np.int64)
    perm = np.random.default_rng(_DIGITS_SEED).permutation(len(y))
    n_train = int(round(_DIGITS_TRAIN_FRACTION * len(y)))
    idx = perm[:n_train] if split == "train" else perm[n_train:]
    idx = np.sort(idx)
    x, y = np.ascontiguousarray(x[idx]), y[idx]
    x.setflags(write=False)
    y.setflags(write=False)
    return x, y


def image_classification_source(
    dataset: str, split: str, data_dir: str | os.PathLike | None = None
) -> str:
    """Where :func:`load_image_classification` reads ``dataset``'s ``split`` from.

    Returns:
        The absolute folder holding the two IDX files, the absolute path of Keras'
        ``mnist.npz``, or :data:`DIGITS_SOURCE` for ``"digits"``.

    Raises:
        The errors of :func:`find_image_classification_files` (a missing dataset,
        a ``data_dir`` that does not exist) and ``ValueError`` for a ``data_dir`` given
        with ``"digits"``.
    """
    _check_dataset_split(dataset, split)
    if dataset == "digits":
        _check_digits_dir(data_dir)
        return DIGITS_SOURCE
    files = find_image_classification_files(dataset, split, data_dir)
    return os.path.abspath(files[0] if len(files) == 1 else files[0].parent)


def _check_digits_dir(data_dir: str | os.PathLike | None) -> None:
    if data_dir is not None:
        raise ValueError(
            f"dataset 'digits' is bundled with scikit-learn; data_dir must be None, "
            f"got {data_dir!r}"
        )


def load_image_classification(
    dataset: str, split: str, data_dir: str | os.PathLike | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Load one split of an image-classification dataset.

    Args:
        dataset: ``"mnist"``, ``"fashion-mnist"`` or ``"digits"``.
        split: ``"train"`` or ``"test"``. For digits: 1438 train / 359 test images from a
            fixed permutation (seed 0) of scikit-learn's 1797.
        data_dir: the folder holding the files, the only place then searched (it must
            exist); ``None`` searches the environment variable and the usual folders (see
            :func:`find_image_classification_files`). Must be ``None`` for ``"digits"``.

    Returns:
        ``(images, labels)``: read-only float32 ``[n, d]`` in [0, 1] (d = 784 for the 28x28
        datasets, 64 for digits) and read-only int64 ``[n]`` in 0..9. The arrays are cached
        and shared: copy them before modifying.

    Raises:
        ValueError: unknown dataset or split (the message lists the valid options), a
            ``data_dir`` given for ``"digits"``, or malformed files (a corrupt gzip stream,
            a split with no images, a damaged ``.npz``); the message names the file.
        FileNotFoundError: ``data_dir`` does not exist, or the files are not in any searched
            folder (never downloaded).
    """
    _check_dataset_split(dataset, split)
    if dataset == "digits":
        _check_digits_dir(data_dir)
        key: tuple = (dataset, split, None)
        if key not in _CACHE:
            _CACHE[key] = _load_digits(split)
        return _CACHE[key]
    files = find_image_classification_files(dataset, split, data_dir)
    key = (dataset, split, tuple(str(f.resolve()) for f in files))
    if key not in _CACHE:
        _CACHE[key] = _load_files(files, split)
    return _CACHE[key]
