"""Cached sweeps: run many independent jobs on a backend, one cache file per finished job.

A job is any object with a ``name`` (unique within its sweep), a ``spec()`` (a JSON-able
dict of everything that determines its result) and a ``cache_path(out)``. The job
function ``fn(job, progress)`` returns a JSON-able record holding ``"spec": job.spec()``;
:func:`run_sweep` writes each record to ``job.cache_path(out)`` atomically, in this
process, as soon as it arrives from the backend (a remote Ray worker needs no shared
file system). A rerun loads every job whose cache file holds the same spec and runs
only the others, so a sweep interrupted on one backend resumes on either.

Records also carry :func:`code_version`; jobs cached with other ``tpo_agents``/``tpo_gym``
sources are still reused but reported (a warning) so that mixed sweeps are visible.
"""

from __future__ import annotations

import functools
import hashlib
import json
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from tqdm import tqdm

from zoo.backends import make_backend
from zoo.results import write_json_atomic


class SweepJob(Protocol):
    """What :func:`run_sweep` needs of a job."""

    @property
    def name(self) -> str: ...

    def spec(self) -> dict: ...

    def cache_path(self, out: Path) -> Path: ...


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """A short hash of the ``tpo_agents`` and ``tpo_gym`` sources.

    Stored in every cache record; a cached job made with other sources is still reused
    (the cache is keyed by the job spec only) but reported as stale, so a sweep that
    spans a code change says so instead of silently mixing versions.
    """
    import tpo_agents
    import tpo_gym

    digest = hashlib.sha256()
    for package in (tpo_agents, tpo_gym):
        root = Path(package.__file__).parent
        for path in sorted(root.rglob("*.py")):
            digest.update(str(path.relative_to(root.parent)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def load_cached(job: SweepJob, out: Path) -> dict | None:
    """The cached record of ``job`` if it exists and was made with the same spec."""
    try:
        record = json.loads(job.cache_path(Path(out)).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("spec") != _jsonable(job.spec()):
        return None
    return record


def _jsonable(value: Any) -> Any:
    """``value`` as it reads back from JSON (tuples become lists)."""
    return json.loads(json.dumps(value))


class _BarProgress:
    """In-process progress sink: shows ``job: iteration/total`` as the bar's postfix."""

    def __init__(self, bar: tqdm, totals: Mapping[str, Any]):
        self.bar, self.totals = bar, totals

    def __setitem__(self, name: str, iteration: int) -> None:
        self.bar.set_postfix_str(f"{name} {iteration}/{self.totals.get(name, '?')}", refresh=True)


def run_sweep(
    jobs: Sequence[SweepJob],
    fn: Callable[[Any, Any], dict],
    out: Path | None,
    backend: str = "local",
    workers: int = 1,
    ray_address: str | None = None,
    progress: bool = True,
    desc: str = "",
    describe: Callable[[Any], str] | None = None,
    context: str = "spawn",
    preload: Sequence[str] = (),
    info: dict | None = None,
) -> dict[str, dict]:
    """Run (or load from ``out``'s cache) every job; ``{job.name: record}``.

    ``fn(job, progress)`` is the job function (a module-level function, so worker
    processes and Ray can import it); ``progress`` is None or a mapping it may set
    ``progress[job.name] = iteration`` in. ``out=None`` disables the cache.
    ``backend``/``workers``/``ray_address``: see :func:`zoo.backends.make_backend`
    (``context``/``preload``: the local process pool's). The backend is started only
    when some job is not cached. ``info``, when given, receives the backend's
    :meth:`~zoo.backends.Backend.describe` (for the result's config).
    """
    names = [job.name for job in jobs]
    if len(set(names)) != len(names):
        raise ValueError(f"job names must be unique within a sweep; got {len(names)} names")
    describe = describe or (lambda job: job.name)
    records: dict[str, dict] = {}
    todo = []
    stale = []
    for job in jobs:
        cached = None if out is None else load_cached(job, out)
        if cached is None:
            todo.append(job)
        else:
            records[job.name] = cached
            if cached.get("code_version") != code_version():
                stale.append(job.name)
    if stale:
        warnings.warn(
            f"{len(stale)} cached job(s) in {Path(out) / 'cache'} were made with other "
            f"tpo_agents/tpo_gym sources than the current ones ({code_version()}), e.g. "
            f"{stale[0]}; delete their cache files to recompute them",
            stacklevel=2,
        )
    if info is not None:
        info.update({"backend": backend, "workers": workers})
        if backend == "ray":
            info["ray_address"] = ray_address
        info.update(jobs_total=len(jobs), jobs_cached=len(records), jobs_run=len(todo))
    if not todo:
        return records
    totals = {job.name: getattr(job, "episodes", "?") for job in todo}
    n_workers = workers if backend == "ray" else min(workers, len(todo))
    bar = tqdm(total=len(jobs), initial=len(records), desc=desc, disable=not progress, unit="job")
    try:
        with make_backend(backend, n_workers, ray_address, context, preload) as runner:
            if info is not None:
                info.update(runner.describe(), workers=workers)
            shared = None
            if progress:
                shared = _BarProgress(bar, totals) if runner.in_process else runner.progress_mapping()
            handles = {}
            for job in todo:
                handles[runner.submit(fn, job, shared)] = job
            if runner.in_process and todo:
                bar.set_description(f"{desc}: {describe(todo[0])}")

            def refresh() -> None:
                if shared is None or runner.in_process:
                    return
                running = dict(shared)
                if running:
                    bar.set_postfix_str(
                        " | ".join(f"{n} {i}/{totals.get(n, '?')}" for n, i in sorted(running.items())),
                        refresh=True,
                    )

            for handle in runner.as_completed(list(handles), on_poll=refresh):
                job = handles[handle]
                record = runner.result(handle)  # re-raises the job's error
                if out is not None:
                    write_json_atomic(job.cache_path(Path(out)), record)
                records[job.name] = record
                bar.set_description(f"{desc}: done {describe(job)}")
                bar.update()
                if shared is not None and not runner.in_process:
                    shared.pop(job.name, None)
    finally:
        bar.close()
    return records
