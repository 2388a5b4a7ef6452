"""Where sweep jobs run: processes on this machine (``local``) or a Ray cluster (``ray``).

A backend runs independent tasks ``fn(*args)`` and hands their results back as they
finish. Every backend has the same small interface::

    with make_backend("ray", workers=4, address="auto") as backend:
        handles = [backend.submit(fn, job) for job in jobs]
        for handle in backend.as_completed(handles):
            record = backend.result(handle)  # re-raises the task's error

* :class:`LocalBackend` with ``workers == 1`` runs the tasks here, one after the other
  (so a test can monkeypatch the task function); with ``workers > 1`` it uses a
  ``ProcessPoolExecutor``.
* :class:`RayBackend` submits one Ray task (``num_cpus=1``) per job, to the cluster at
  ``address`` (``ray.init(address=...)``: ``auto``, ``HOST:PORT`` or ``ray://HOST:PORT``)
  or, when none is given, to a local Ray instance with ``num_cpus=workers``. If Ray is
  already initialised in this process, that instance is used (and left running).

Every backend runs a task with one torch thread, so results do not depend on the
backend or the number of workers. Ray is an optional extra (``pip install tpo[ray]``).

Interrupts (what :func:`zoo.jobs.sweep.run_sweep` builds on; docs/sweeps.md):

* :meth:`Backend.cancel_pending` drops the tasks that have not started and returns the
  handles of those still to report (running ones); :meth:`Backend.terminate` stops
  running tasks at once; :meth:`Backend.is_interruption` tells a task that was
  interrupted (:class:`JobInterrupted`) from one that failed.
* A pool worker of :class:`LocalBackend` handles SIGINT itself: a Ctrl-C in a terminal
  reaches the whole process group, and the worker then stops its task at once
  (:class:`JobInterrupted`, no traceback) and starts no other; a SIGINT to the driver
  alone does not reach it, so its task runs to the end.
* Pool workers and the progress manager exit within about a second when the process
  that started them dies, even by SIGKILL (a watchdog thread that checks
  ``os.getppid()``), so a killed sweep leaves no processes behind.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import socket
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, MutableMapping, Sequence
from concurrent.futures import FIRST_COMPLETED, BrokenExecutor, Future, ProcessPoolExecutor, wait
from typing import Any

BACKENDS: tuple[str, ...] = ("local", "ray")
"""Backend names accepted by :func:`make_backend` and ``--backend``."""

CONNECT_TIMEOUT = 5.0
"""Seconds to wait for a TCP connection to a Ray address before giving up."""


WATCHDOG_INTERVAL = 0.5
"""Seconds between a worker's checks that the process that started it is still alive."""


class BackendError(RuntimeError):
    """A backend cannot be used: Ray is not installed, or its cluster cannot be reached."""


class JobInterrupted(RuntimeError):
    """A task stopped by an interrupt (SIGINT in its worker, or the sweep was stopping).

    ``started``: False when the task was refused before it began (the sweep had been
    interrupted while it waited in the pool's queue).
    """

    def __init__(self, message: str = "interrupted", started: bool = True) -> None:
        super().__init__(message, started)
        self.started = started

    def __str__(self) -> str:
        return str(self.args[0])


# --------------------------------------------------------------------- worker processes

_worker_stop: Any = None  # the pool's shared multiprocessing Event (set: start no task)
_worker_interrupted = False  # this worker received SIGINT
_in_task = False  # this worker is running a task (SIGINT stops it)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stop_processes(pids: Sequence[int], grace: float) -> None:
    """SIGTERM each process, then SIGKILL the ones still alive after ``grace`` seconds.

    Our own children (spawned workers) are handled through their ``multiprocessing``
    objects, which also reap them; others (a fork server's children) by pid."""
    children = {p.pid: p for p in multiprocessing.active_children()}
    for pid in pids:
        with contextlib.suppress(Exception):
            children[pid].terminate() if pid in children else os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for pid in pids:
        with contextlib.suppress(Exception):
            if pid in children:
                children[pid].join(max(0.0, deadline - time.monotonic()))
                if children[pid].is_alive():
                    children[pid].kill()
                continue
            while _pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if _pid_alive(pid):
                os.kill(pid, signal.SIGKILL)


def watch_parent(driver_pid: int, direct: bool, interval: float = WATCHDOG_INTERVAL) -> None:
    """Exit this process (``os._exit(1)``) as soon as the driver that started it is gone.

    ``direct``: the driver is this process's parent (spawn); otherwise (forkserver) the
    parent is the fork server, which exits when the driver does. Checked once now and
    then every ``interval`` seconds by a daemon thread: the parent pid changes when the
    parent dies (the orphan is re-parented), whatever killed it, SIGKILL included.
    """
    parent = driver_pid if direct else os.getppid()

    def gone() -> bool:
        return os.getppid() != parent or not _pid_alive(driver_pid)

    if gone():
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(interval)
            if gone():
                os._exit(1)

    threading.Thread(target=watch, name="zoo-parent-watchdog", daemon=True).start()


def _on_worker_sigint(signum, frame) -> None:
    """A pool worker's SIGINT handler: stop the running task, start no other one."""
    global _worker_interrupted
    _worker_interrupted = True
    if _in_task:
        raise KeyboardInterrupt


def _init_pool_worker(driver_pid: int, direct: bool, stop: Any, pids: Any) -> None:
    """Initializer of a :class:`LocalBackend` pool worker (see the module docstring).

    It reports its pid on ``pids`` (a queue) so the driver can terminate its workers with
    public APIs only (the executor does not list them publicly before Python 3.14)."""
    global _worker_stop
    _worker_stop = stop
    pids.put(os.getpid())
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not ignored
        signal.signal(signal.SIGINT, _on_worker_sigint)
    watch_parent(driver_pid, direct)


def _init_helper_process(driver_pid: int, direct: bool) -> None:
    """Initializer of the progress manager: survives a Ctrl-C, dies with the driver."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    watch_parent(driver_pid, direct)


@contextlib.contextmanager
def single_torch_thread() -> Iterator[None]:
    """Run the body with one torch thread and one BLAS/OpenMP thread (restored afterwards).

    (Ray workers get ``OMP_NUM_THREADS=1``; a spawned pool worker would otherwise let
    numpy's BLAS use every core, oversubscribing the CPUs the other workers use.)
    """
    import torch

    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # scikit-learn's dependency; without it only torch is limited
        limits = contextlib.nullcontext()
    else:
        limits = threadpool_limits(limits=1)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with limits:
            yield
    finally:
        torch.set_num_threads(threads)


def call_single_threaded(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` with one torch thread: the entry point of worker processes and Ray tasks.

    Sweep processes also keep freed activation memory in the heap
    (:func:`zoo.jobs.runtime.keep_freed_memory`: no page faults per training step).
    In a :class:`LocalBackend` pool worker, a SIGINT during the task raises
    :class:`JobInterrupted` instead (and tells the other workers to start no task); after
    one, or once the driver has stopped the sweep, a task is refused unstarted.
    """
    global _in_task
    if _worker_stop is not None and (_worker_interrupted or _worker_stop.is_set()):
        raise JobInterrupted("not started: the sweep was interrupted", started=False)
    from zoo.jobs.runtime import keep_freed_memory

    keep_freed_memory()
    try:
        try:
            _in_task = _worker_stop is not None
            with single_torch_thread():
                return fn(*args)
        finally:
            _in_task = False
    except KeyboardInterrupt:
        if _worker_stop is None:  # not a pool worker of ours (Ray, a plain call)
            raise
        with contextlib.suppress(Exception):
            _worker_stop.set()
        raise JobInterrupted("stopped by SIGINT") from None


class Backend(ABC):
    """Runs independent tasks and reports them as they finish (see the module docstring)."""

    name: str = ""
    in_process: bool = False
    """True when tasks run in this process, one after the other (progress sinks may be
    plain Python objects)."""

    def __init__(self, workers: int = 1) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be a positive integer; got {workers!r}")
        self.workers = workers

    def __enter__(self) -> Backend:
        self.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(cancel=exc_type is not None)

    def start(self) -> None:  # noqa: B027  (optional hook)
        """Acquire resources (processes, a Ray connection)."""

    def close(self, cancel: bool = False) -> None:  # noqa: B027  (optional hook)
        """Release resources; ``cancel``: drop tasks that have not finished."""

    @abstractmethod
    def submit(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Schedule ``fn(*args)``; returns a handle for :meth:`wait` and :meth:`result`."""

    @abstractmethod
    def wait(self, handles: Sequence[Any], timeout: float) -> tuple[list[Any], list[Any]]:
        """``(done, pending)`` after at most ``timeout`` seconds (at least one done if any)."""

    @abstractmethod
    def result(self, handle: Any) -> Any:
        """The value of a finished task (re-raises the task's exception)."""

    def progress_mapping(self) -> MutableMapping | None:
        """A mapping tasks may write live progress to (read by the caller), or None."""
        return None

    def cancel_pending(self, handles: Sequence[Any]) -> list[Any]:
        """Drop the tasks of ``handles`` that have not started (the sweep was interrupted);
        the handles still to wait for (running tasks; each finishes or reports
        :class:`JobInterrupted`)."""
        return list(handles)

    def terminate(self) -> None:
        """Stop every task now (running ones too) and release the resources."""
        self.close(cancel=True)

    def is_interruption(self, exc: BaseException) -> bool:
        """Whether a task's error, seen while the sweep stops after an interrupt, means it
        was interrupted (not cached, no error) rather than that it failed (re-raised)."""
        return isinstance(exc, JobInterrupted)

    def describe(self) -> dict:
        """What to record in a result's config."""
        return {"backend": self.name, "workers": self.workers}

    def as_completed(
        self,
        handles: Iterable[Any],
        poll: float = 1.0,
        on_poll: Callable[[], None] | None = None,
    ) -> Iterator[Any]:
        """Yield each handle once its task has finished, in completion order.

        ``on_poll`` is called every ``poll`` seconds or so while tasks are running (to
        refresh a progress display).
        """
        pending = list(handles)
        while pending:
            done, pending = self.wait(pending, poll)
            yield from done
            if on_poll is not None and pending:
                on_poll()


# ------------------------------------------------------------------------------ local


class _InlineTask:
    """A task of the in-process backend: run when first waited for."""

    def __init__(self, fn: Callable[..., Any], args: tuple) -> None:
        self.fn, self.args = fn, args
        self.done = False
        self.value: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with single_torch_thread():
                self.value = self.fn(*self.args)
        except Exception as exc:  # reported by result(), like a future
            self.error = exc
        self.done = True


class LocalBackend(Backend):
    """Processes on this machine: in this process (``workers == 1``) or a process pool.

    ``context``: the multiprocessing start method of the pool (``"spawn"`` or
    ``"forkserver"``; never ``"fork"``, since the parent may hold torch threads);
    ``preload``: modules the fork server imports once (forkserver only).
    """

    name = "local"

    def __init__(self, workers: int = 1, context: str = "spawn", preload: Sequence[str] = ()):
        super().__init__(workers)
        if context not in ("spawn", "forkserver"):
            raise ValueError(f"context must be 'spawn' or 'forkserver'; got {context!r}")
        self.context = context
        self.preload = tuple(preload)
        self.in_process = workers <= 1
        self._pool: ProcessPoolExecutor | None = None
        self._manager = None
        self._stop = None
        self._pids = None  # a queue the pool's workers put their pids on
        self._worker_pids: set[int] = set()

    def _mp_context(self) -> multiprocessing.context.BaseContext:
        if self.context == "forkserver" and "forkserver" in multiprocessing.get_all_start_methods():
            ctx = multiprocessing.get_context("forkserver")
            if self.preload:
                ctx.set_forkserver_preload(list(self.preload))
            return ctx
        return multiprocessing.get_context("spawn")

    def _helper_args(self, ctx: multiprocessing.context.BaseContext) -> tuple[int, bool]:
        """(driver pid, whether helpers are its direct children) for :func:`watch_parent`."""
        return os.getpid(), ctx.get_start_method() != "forkserver"

    def start(self) -> None:
        if not self.in_process and self._pool is None:
            ctx = self._mp_context()
            self._stop = ctx.Event()
            self._pids = ctx.SimpleQueue()
            self._worker_pids = set()
            self._pool = ProcessPoolExecutor(
                max_workers=self.workers,
                mp_context=ctx,
                initializer=_init_pool_worker,
                initargs=(*self._helper_args(ctx), self._stop, self._pids),
            )

    def close(self, cancel: bool = False) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=cancel)
            self._pool = None
        if self._manager is not None:
            self._manager.shutdown()
            self._manager = None

    def cancel_pending(self, handles: Sequence[Any]) -> list[Any]:
        """Tell the workers to start no task: each queued task then reports
        :class:`JobInterrupted` (``started=False``) at once, and the running ones finish.
        (The futures are not cancelled: Python 3.11's pool fails on a cancelled future
        if a worker is then terminated.)"""
        if self.in_process:
            return []  # nothing runs between two waits
        if self._stop is not None:
            self._stop.set()
        return list(handles)

    def terminate(self) -> None:
        """Kill the pool's workers (SIGTERM, then SIGKILL after 2 s) and shut it down."""
        pool, self._pool = self._pool, None
        if pool is not None:
            if self._stop is not None:
                with contextlib.suppress(Exception):
                    self._stop.set()
            _stop_processes(self._started_workers(), grace=2.0)
            pool.shutdown(wait=True)  # the dead workers' futures fail (BrokenProcessPool)
        self.close(cancel=True)

    def _started_workers(self) -> list[int]:
        """The pids of the pool workers started so far (each reported itself on start)."""
        while self._pids is not None and not self._pids.empty():
            self._worker_pids.add(self._pids.get())
        return sorted(self._worker_pids)

    def is_interruption(self, exc: BaseException) -> bool:
        # A worker that died meanwhile (BrokenProcessPool): a Ctrl-C may have killed it.
        return isinstance(exc, (JobInterrupted, BrokenExecutor))

    def submit(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self.in_process:
            return _InlineTask(fn, args)
        if self._pool is None:
            raise RuntimeError("LocalBackend.submit called outside its 'with' block")
        return self._pool.submit(call_single_threaded, fn, *args)

    def wait(self, handles: Sequence[Any], timeout: float) -> tuple[list[Any], list[Any]]:
        if self.in_process:
            done = [h for h in handles if h.done]
            pending = [h for h in handles if not h.done]
            if not done and pending:
                pending[0].run()
                done, pending = [pending[0]], pending[1:]
            return done, pending
        done, pending = wait(handles, timeout=timeout, return_when=FIRST_COMPLETED)
        order = {id(h): i for i, h in enumerate(handles)}
        return sorted(done, key=lambda h: order[id(h)]), sorted(pending, key=lambda h: order[id(h)])

    def result(self, handle: Any) -> Any:
        if isinstance(handle, Future):
            return handle.result()
        if not handle.done:
            handle.run()
        if handle.error is not None:
            raise handle.error
        return handle.value

    def progress_mapping(self) -> MutableMapping | None:
        """A ``Manager().dict()`` shared with the pool's workers (None in process)."""
        if self.in_process:
            return None
        if self._manager is None:
            from multiprocessing.managers import SyncManager

            ctx = self._mp_context()
            manager = SyncManager(ctx=ctx)
            manager.start(_init_helper_process, self._helper_args(ctx))
            self._manager = manager
        return self._manager.dict()


# -------------------------------------------------------------------------------- ray


def import_ray():
    """The ``ray`` module, or a :class:`~tpo_gym.extras.MissingExtraError` (an ImportError)
    that says how to install it."""
    from tpo_gym.extras import needs_extra

    with needs_extra("ray", "--backend ray"):
        import ray
    return ray


def parse_ray_address(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of a Ray address, or None for ``"auto"``.

    Accepted forms: ``auto``, ``HOST:PORT`` (the GCS address printed by ``ray start
    --head``) and ``ray://HOST:PORT`` (Ray Client). Anything else is a ValueError.
    """
    if not isinstance(address, str) or not address.strip():
        raise ValueError(f"a Ray address must be 'auto', HOST:PORT or ray://HOST:PORT; got {address!r}")
    text = address.strip()
    if text == "auto":
        return None
    rest = text.removeprefix("ray://")
    host, sep, port_text = rest.rpartition(":")
    host = host.strip("[]")  # [IPv6]:port
    if not sep or not host or "/" in rest or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(
            f"a Ray address must be 'auto', HOST:PORT or ray://HOST:PORT with a port in "
            f"1..65535; got {address!r}"
        )
    return host, int(port_text)


def check_reachable(address: str, timeout: float = CONNECT_TIMEOUT) -> None:
    """Raise :class:`BackendError` unless a TCP connection to ``address`` opens in time.

    (``ray.init`` itself would wait about two minutes and then exit the process.)
    """
    hostport = parse_ray_address(address)
    if hostport is None:
        return
    try:
        with socket.create_connection(hostport, timeout=timeout):
            pass
    except OSError as exc:
        raise BackendError(
            f"cannot reach a Ray cluster at {address!r} ({exc}); start one with "
            "`ray start --head` and pass the address it prints (or 'auto' on a cluster node), "
            "or omit --ray-address to start a local Ray instance"
        ) from None


class RayBackend(Backend):
    """One Ray task (one CPU, one torch thread) per job.

    ``address``: the cluster to join (``ray.init(address=address)``); None starts a local
    Ray instance with ``num_cpus=workers`` (or joins ``$RAY_ADDRESS`` when that is set).
    """

    name = "ray"

    def __init__(self, workers: int = 1, address: str | None = None) -> None:
        super().__init__(workers)
        if address is not None:
            parse_ray_address(address)
        self.address = address
        self._ray = None
        self._remote = None
        self._owned = False
        self._pending: set = set()

    def start(self) -> None:
        ray = import_ray()
        self._ray = ray
        if not ray.is_initialized():
            address = self.address or os.environ.get("RAY_ADDRESS") or None
            if address is not None:
                check_reachable(address)
                try:
                    ray.init(address=address)
                except (ConnectionError, RuntimeError, ValueError) as exc:
                    raise BackendError(f"could not join the Ray cluster at {address!r}: {exc}") from None
            else:
                ray.init(num_cpus=self.workers, include_dashboard=False)
            self._owned = True
        self._remote = ray.remote(num_cpus=1)(call_single_threaded)

    def close(self, cancel: bool = False) -> None:
        self._remote = None
        if cancel and self._ray is not None and self._ray.is_initialized():
            for ref in self._pending:  # on a shared cluster, do not leave them running
                with contextlib.suppress(Exception):
                    self._ray.cancel(ref)
        self._pending.clear()
        if self._ray is not None and self._owned:
            self._ray.shutdown()
            self._owned = False

    def submit(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self._remote is None:
            raise RuntimeError("RayBackend.submit called outside its 'with' block")
        ref = self._remote.remote(fn, *args)
        self._pending.add(ref)
        return ref

    def wait(self, handles: Sequence[Any], timeout: float) -> tuple[list[Any], list[Any]]:
        ray = self._ray
        handles = list(handles)
        done, _ = ray.wait(handles, num_returns=1, timeout=timeout)
        if done:  # collect every other finished task too
            done, _ = ray.wait(handles, num_returns=len(handles), timeout=0)
        finished = {h for h in done}
        return [h for h in handles if h in finished], [h for h in handles if h not in finished]

    def result(self, handle: Any) -> Any:
        value = self._ray.get(handle)
        self._pending.discard(handle)
        return value

    def cancel_pending(self, handles: Sequence[Any]) -> list[Any]:
        """Cancel every unfinished task (Ray cannot tell queued from running ones: a
        running task gets a KeyboardInterrupt); their handles then report
        ``TaskCancelledError``, or a result that came first."""
        for ref in handles:
            with contextlib.suppress(Exception):
                self._ray.cancel(ref)
        return list(handles)

    def terminate(self) -> None:
        if self._ray is not None and self._ray.is_initialized():
            for ref in self._pending:
                with contextlib.suppress(Exception):
                    self._ray.cancel(ref, force=True)
        self.close(cancel=True)

    def is_interruption(self, exc: BaseException) -> bool:
        # While the sweep stops, any Ray error (a cancelled task, a worker a Ctrl-C killed)
        errors = getattr(getattr(self._ray, "exceptions", None), "RayError", ())
        return isinstance(exc, JobInterrupted) or (bool(errors) and isinstance(exc, errors))

    def describe(self) -> dict:
        info = super().describe()
        info["ray_address"] = self.address
        if self._ray is not None and self._ray.is_initialized():
            info["ray_cluster_cpus"] = self._ray.cluster_resources().get("CPU")
        return info


# ---------------------------------------------------------------------------- factory


def check_backend_args(name: str, address: str | None = None) -> None:
    """Validate a backend choice without connecting to anything.

    Raises ValueError for an unknown backend name, an address given with ``local`` or a
    malformed address, and :class:`~tpo_gym.extras.MissingExtraError` when ``ray`` is chosen but not
    installed.
    """
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; expected one of {BACKENDS}")
    if name == "local" and address is not None:
        raise ValueError(f"--ray-address ({address!r}) applies to --backend ray only")
    if name == "ray":
        if address is not None:
            parse_ray_address(address)
        import_ray()


def make_backend(
    name: str = "local",
    workers: int = 1,
    address: str | None = None,
    context: str = "spawn",
    preload: Sequence[str] = (),
) -> Backend:
    """A :class:`LocalBackend` or :class:`RayBackend` (not started: use it in a ``with``).

    ``context`` and ``preload`` configure the local process pool; ``address`` the Ray
    cluster. See :func:`check_backend_args` for the errors.
    """
    check_backend_args(name, address)
    if name == "local":
        return LocalBackend(workers, context=context, preload=preload)
    return RayBackend(workers, address=address)
