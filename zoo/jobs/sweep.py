"""Cached sweeps: run many independent jobs on a backend, one cache file per finished job.

A job is any object with a ``name`` (unique within its sweep), a ``spec()`` (a JSON-able
dict of everything that determines its result) and a ``cache_path(cache)`` (its file under the cache root ``cache``). The job
function ``fn(job, progress)`` returns a JSON-able record holding ``"spec": job.spec()``;
:func:`run_sweep` writes each record to ``job.cache_path(cache)`` atomically, in this
process, as soon as it arrives from the backend (a remote Ray worker needs no shared
file system). A rerun loads every job whose cache file holds the same spec and runs
only the others, so a sweep interrupted on one backend resumes on either.

Records also carry :func:`code_version`; jobs cached with other ``tpo_agents``/``tpo_gym``
sources are still reused but reported (a warning) so that mixed sweeps are visible. A cache
file that cannot be used (not valid JSON, not an object, or missing a field of
``job.record_fields``) is reported by a :class:`CacheWarning` naming it and its job is
run again, overwriting it.

Interrupts (docs/sweeps.md, "Interrupting a sweep"): a first SIGINT (Ctrl-C) makes the
driver start no more jobs and wait for the running ones, caching each that finishes; a
Ctrl-C in a terminal also reaches the pool's workers, which stop their jobs at once, so
the sweep ends promptly. :func:`run_sweep` then raises :class:`SweepInterrupted`, whose
message is one line (``zoo.paper.reproduce`` prints it and exits with status 130). A second
SIGINT stops the running jobs at once. With ``workers == 1`` the job runs in this process
and the first SIGINT stops it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from tqdm import tqdm

from tpo_agents.atomic import write_json_atomic
from zoo.jobs.backends import JobInterrupted, make_backend

DEFAULT_RECORD_FIELDS: tuple[str, ...] = ("spec", "error", "seconds")
"""The fields a cached record must have when its job declares no ``record_fields`` (what
every job function of this project records)."""

POLL_SECONDS = 0.25
"""How often the driver checks for an interrupt while jobs run (and at most how long it
takes to notice one)."""

DRAIN_NOTICE_SECONDS = 2.0
"""After an interrupt, how long the driver waits for running jobs before saying so."""


class CacheWarning(UserWarning):
    """A sweep cache file could not be used; its job is run again (the file is overwritten)."""


class SweepInterrupted(KeyboardInterrupt):
    """A sweep stopped by SIGINT after caching what finished; ``str()`` is a one-line
    message saying how many jobs are cached where. ``finished``/``total``: jobs cached
    (before and during this run) and jobs in the sweep."""

    def __init__(self, message: str, finished: int = 0, total: int = 0) -> None:
        super().__init__(message)
        self.finished, self.total = finished, total

    def __str__(self) -> str:
        return str(self.args[0])


class SweepJob(Protocol):
    """What :func:`run_sweep` needs of a job (and, optionally, ``record_fields``: the
    fields its cached record must have; default :data:`DEFAULT_RECORD_FIELDS`)."""

    @property
    def name(self) -> str: ...

    def spec(self) -> dict: ...

    def cache_path(self, cache: Path) -> Path: ...


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


def cache_root(args) -> Path:
    """The cache root of a command line: ``--cache`` when given, else ``OUT/cache``.

    Results (JSON, PNG, MD) go to ``--out``; per-job records to the cache root, so the
    committed records (``data/cache``) are written only when a command names them.
    """
    cache = getattr(args, "cache", None)
    return Path(cache) if cache is not None else Path(args.out) / "cache"


def check_cached(job: SweepJob, cache: Path) -> tuple[dict | None, str | None]:
    """``(record, problem)`` for ``job``'s cache file under the cache root ``cache``.

    ``record`` is the cached record when the file exists, holds the same spec and has
    every field of ``job.record_fields``; otherwise None, with ``problem`` saying what is
    wrong with the file (None when there is no file, or when it holds another spec: a
    changed setting is another job, run anew as before).
    """
    path = job.cache_path(Path(cache))
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"cannot be read ({exc})"
    try:
        record = json.loads(text)
    except ValueError as exc:
        return None, f"is not valid JSON ({exc})"
    if not isinstance(record, dict):
        return None, f"holds a JSON {type(record).__name__}, not an object"
    if "spec" not in record:
        return None, "is missing the field 'spec'"
    if record["spec"] != _jsonable(job.spec()):
        return None, None
    fields = getattr(job, "record_fields", DEFAULT_RECORD_FIELDS)
    missing = [f for f in fields if f not in record]
    if missing:
        listed = ", ".join(repr(f) for f in missing)
        return None, f"is missing the field{'s' if len(missing) > 1 else ''} {listed}"
    return record, None


def load_cached(job: SweepJob, cache: Path) -> dict | None:
    """The cached record of ``job`` if it exists, was made with the same spec and is
    complete (:func:`check_cached`; no warning)."""
    return check_cached(job, cache)[0]


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
    cache: Path | None,
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
    """Run (or load from the cache root ``cache``) every job; ``{job.name: record}``.

    ``fn(job, progress)`` is the job function (a module-level function, so worker
    processes and Ray can import it); ``progress`` is None or a mapping it may set
    ``progress[job.name] = iteration`` in. ``cache=None`` disables the cache.
    ``backend``/``workers``/``ray_address``: see :func:`zoo.jobs.backends.make_backend`
    (``context``/``preload``: the local process pool's). The backend is started only
    when some job is not cached. ``info``, when given, receives the backend's
    :meth:`~zoo.jobs.backends.Backend.describe` (for the result's config).
    """
    names = [job.name for job in jobs]
    if len(set(names)) != len(names):
        raise ValueError(f"job names must be unique within a sweep; got {len(names)} names")
    describe = describe or (lambda job: job.name)
    records: dict[str, dict] = {}
    todo = []
    stale = []
    for job in jobs:
        cached, problem = (None, None) if cache is None else check_cached(job, cache)
        if problem is not None:
            warnings.warn(
                f"cache file {job.cache_path(Path(cache))} {problem}; running job {job.name} "
                "again (the file will be overwritten)",
                CacheWarning,
                stacklevel=2,
            )
        if cached is None:
            todo.append(job)
        else:
            records[job.name] = cached
            if cached.get("code_version") != code_version():
                stale.append(job.name)
    if stale:
        warnings.warn(
            f"{len(stale)} cached job(s) in {cache} were made with other "
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
    n_workers = workers if backend == "ray" else min(workers, len(todo))
    runner = make_backend(backend, n_workers, ray_address, context, preload)
    bar = tqdm(total=len(jobs), initial=len(records), desc=desc, disable=not progress, unit="job")
    sweep = _Sweep(runner, fn, cache, records, bar, desc, describe, progress)
    try:
        with sweep.guard:
            runner.start()
            try:
                if info is not None:
                    info.update(runner.describe(), workers=workers)
                sweep.run(todo)
            except KeyboardInterrupt:  # a second Ctrl-C, or the first one with workers == 1
                sweep.forced = True
                runner.terminate()
            except BaseException:
                runner.close(cancel=True)
                raise
            if sweep.interrupted:  # every job has reported: idle workers need no clean exit
                runner.terminate()
            else:
                runner.close()
    except KeyboardInterrupt:  # a second Ctrl-C while the pool shuts down
        sweep.forced = True
        runner.terminate()
    finally:
        bar.close()
    if sweep.forced or sweep.interrupted or sweep.guard.count:  # (even if all jobs were done)
        raise SweepInterrupted(sweep.message(len(jobs), todo), len(records), len(jobs)) from None
    return records


class _SigintGuard:
    """While active (in the main thread, when SIGINT has Python's default handler):
    counts SIGINTs; the first raises KeyboardInterrupt only when ``first_raises`` (jobs
    run in this process), the second always does."""

    def __init__(self, first_raises: bool) -> None:
        self.first_raises = first_raises
        self.count = 0
        self._previous: Any = None
        self._installed = False

    def _handle(self, signum, frame) -> None:
        self.count += 1
        if self.first_raises or self.count > 1:
            raise KeyboardInterrupt

    def __enter__(self) -> _SigintGuard:
        if (
            threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler
        ):
            self._previous = signal.signal(signal.SIGINT, self._handle)
            self._installed = True
        return self

    def __exit__(self, *exc) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)
            self._installed = False


class _Sweep:
    """The jobs of one :func:`run_sweep` call on a started backend: submits them, caches
    each result as it arrives and, after an interrupt, drains the running jobs."""

    def __init__(self, runner, fn, cache, records, bar, desc, describe, progress) -> None:
        self.runner, self.fn, self.cache, self.records = runner, fn, cache, records
        self.bar, self.desc, self.describe, self.progress = bar, desc, describe, progress
        self.guard = _SigintGuard(first_raises=runner.in_process)
        self.interrupted = False  # a SIGINT (or a worker's JobInterrupted) stopped the sweep
        self.forced = False  # running jobs were stopped (second Ctrl-C, or in process)
        self.finished_after = 0  # jobs cached after the interrupt (they were running)
        self.stopped = 0  # running jobs stopped by a SIGINT in their worker

    def run(self, todo: Sequence[SweepJob]) -> None:
        runner, bar = self.runner, self.bar
        totals = {job.name: getattr(job, "episodes", "?") for job in todo}
        shared = None
        if self.progress:
            shared = _BarProgress(bar, totals) if runner.in_process else runner.progress_mapping()
        handles = {}
        for job in todo:
            handles[runner.submit(self.fn, job, shared)] = job
        if runner.in_process and todo:
            bar.set_description(f"{self.desc}: {self.describe(todo[0])}")

        def refresh() -> None:
            if shared is None or runner.in_process:
                return
            try:
                running = dict(shared)
            except Exception:  # progress display only
                return
            if running:
                bar.set_postfix_str(
                    " | ".join(f"{n} {i}/{totals.get(n, '?')}" for n, i in sorted(running.items())),
                    refresh=True,
                )

        pending = list(handles)
        last_refresh = time.monotonic()
        draining_since: float | None = None
        noticed = False
        while pending:
            if draining_since is None and (self.guard.count or self.interrupted):
                self.interrupted = True
                draining_since = time.monotonic()
                pending = runner.cancel_pending(pending)
                if not pending:
                    break
            done, pending = runner.wait(pending, POLL_SECONDS)
            for handle in done:
                job = handles[handle]
                try:
                    record = runner.result(handle)
                except Exception as exc:
                    stopping = draining_since is not None or isinstance(exc, JobInterrupted)
                    if not (stopping and runner.is_interruption(exc)):
                        raise  # the job's own error
                    self.interrupted = True
                    self.stopped += bool(getattr(exc, "started", True))
                    continue
                if self.cache is not None:
                    write_json_atomic(job.cache_path(Path(self.cache)), record)
                self.records[job.name] = record
                self.finished_after += draining_since is not None
                bar.set_description(f"{self.desc}: done {self.describe(job)}")
                bar.update()
                if shared is not None and not runner.in_process:
                    with contextlib.suppress(Exception):
                        shared.pop(job.name, None)
            now = time.monotonic()
            if pending and now - last_refresh >= 1.0:
                last_refresh = now
                refresh()
            if draining_since is not None and pending and not noticed and now - draining_since >= DRAIN_NOTICE_SECONDS:
                noticed = True
                n = len(pending) if runner.name == "ray" else min(len(pending), runner.workers)
                tqdm.write(
                    f"interrupt: waiting for {n} running job{'s' if n > 1 else ''} to finish and "
                    "be cached; press Ctrl-C again to stop now",
                    file=sys.stderr,
                )

    def message(self, total: int, todo: Sequence[SweepJob]) -> str:
        """The one-line report of an interrupted sweep."""
        finished = len(self.records)
        folder = None
        if self.cache is not None:
            folders = {str(job.cache_path(Path(self.cache)).parent) for job in todo}
            folder = folders.pop() if len(folders) == 1 else str(self.cache)
        notes = []
        if self.finished_after:
            notes.append(f"{self.finished_after} of them were running when interrupted and finished first")
        if self.stopped:
            notes.append(f"{self.stopped} job{'s' if self.stopped > 1 else ''} stopped before finishing")
        if self.forced:
            notes.append("the running job was stopped" if self.runner.in_process else "running jobs were stopped")
        text = f"interrupted: {finished} of {total} jobs finished"
        text += f" and cached in {folder}" if folder else " (no cache: cache=None)"
        if notes:
            text += " (" + "; ".join(notes) + ")"
        return text + ("; rerun the same command to resume" if folder else "")
