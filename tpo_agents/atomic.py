"""Crash-safe writes: a checkpoint is either the old one or the new one, never half of each.

Files are written to a temporary name in the destination folder, flushed to disk
(``fsync``) and moved over the destination with ``os.replace`` (atomic on POSIX and
Windows); folders (a language model's ``save_pretrained`` output) are written beside the
destination and swapped in with two renames. The one way the project writes a file that
must never be seen half-written: checkpoints, result JSON, per-job cache records.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_path", "atomic_folder", "fsync_tree", "write_json_atomic", "write_text_atomic"]


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # e.g. Windows cannot open folders; the rename is still atomic there
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _fsync_file(path: Path) -> None:
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def fsync_tree(folder: Path) -> None:
    """Flush every file under ``folder`` and the folders themselves to disk."""
    for root, _dirs, files in os.walk(folder):
        for name in files:
            _fsync_file(Path(root) / name)
        _fsync_dir(Path(root))


def _temporary_name(final: Path) -> Path:
    # A dot-name ending in ".tmp" (SB3 appends ".zip" only to names without a suffix).
    return final.with_name(f".{final.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")


@contextlib.contextmanager
def atomic_path(final: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path to write; on success it replaces ``final`` atomically.

    On an exception the temporary file is removed and ``final`` is left untouched."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary_name(final)
    try:
        yield tmp
        _fsync_file(tmp)
        os.replace(tmp, final)
        _fsync_dir(final.parent)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` atomically (:func:`atomic_path`)."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json_atomic(path: str | os.PathLike, data, indent: int = 2) -> None:
    """Write ``data`` as JSON to ``path`` atomically (:func:`atomic_path`)."""
    write_text_atomic(path, json.dumps(data, indent=indent))


@contextlib.contextmanager
def atomic_folder(final: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary folder to fill; on success it takes the place of ``final``.

    The old folder is renamed aside, the new one renamed in, then the old one deleted;
    on an exception the temporary folder is deleted and ``final`` is left untouched."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary_name(final)
    old = final.with_name(tmp.name + ".old")
    try:
        tmp.mkdir()
        yield tmp
        fsync_tree(tmp)
        if final.exists():
            os.replace(final, old)
        os.replace(tmp, final)
        _fsync_dir(final.parent)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
