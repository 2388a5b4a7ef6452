"""Sweeps under signals (zoo.jobs.sweep, zoo.jobs.backends; docs/sweeps.md, "Interrupting a sweep").

Real subprocesses and real signals on a tiny sweep (terminal, H = 3, 2 iterations, 8 jobs
of about a second on 2 pool workers): Ctrl-C to the process group, SIGINT to the driver
alone, SIGKILL of the driver; and a damaged cache file, which is recomputed with a warning.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from zoo.jobs import sweep
from zoo.paper.reproduce import main as reproduce_main
from zoo.paper.token import study as token_study

if not hasattr(os, "killpg") or sys.platform == "win32":
    pytest.skip("POSIX signals and process groups", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[1]
# tpo first: its jobs take about a second, so a job is running whenever one has finished.
ARGS = ["terminal", "--lengths", "3", "--episodes", "2", "--methods", "tpo", "dg", "--seeds", "4"]
JOBS = sorted(f"{m}__H3-paper__seed{s}" for m in ("tpo", "dg") for s in range(4))
MESSAGE = re.compile(
    r"interrupted: (\d+) of 8 jobs finished and cached in (\S+) ?(\(.*\))?; "
    r"rerun the same command to resume"
)
START_TIMEOUT = 120  # seconds until the first job is cached (the workers import torch)
EXIT_TIMEOUT = 30  # seconds for the driver to exit after a signal


def _default_sigint() -> None:  # in the child: a SIGINT ignored by our parent is not inherited
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@contextlib.contextmanager
def sweep_process(out: Path, *extra: str, quiet: bool = True):
    """The sweep as ``python -m zoo.reproduce`` in its own process group (stderr to
    ``out/stderr.txt``); the whole group is killed afterwards, whatever happened."""
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "zoo.paper.reproduce", *ARGS, "--workers", "2", "--out", str(out), *extra]
    if quiet:
        cmd.append("--quiet")
    with open(out / "stderr.txt", "w") as err:
        proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,  # its own process group: killpg reaches it and its workers only
            preexec_fn=_default_sigint,
        )
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)


def cache_files(out: Path) -> dict[str, int]:
    return {p.stem: p.stat().st_mtime_ns for p in (out / "cache" / "terminal").glob("*.json")}


def wait_for_cached_job(proc: subprocess.Popen, out: Path) -> dict[str, int]:
    """Poll the cache folder until a first job is cached (fails if the sweep ends first)."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        files = cache_files(out)
        if files:
            return files
        assert proc.poll() is None, f"the sweep exited ({proc.returncode}) before caching a job:\n" + (
            out / "stderr.txt"
        ).read_text()
        time.sleep(0.05)
    pytest.fail(f"no job was cached within {START_TIMEOUT} s")


def wait_exit(proc: subprocess.Popen, out: Path) -> tuple[int, list[str]]:
    try:
        rc = proc.wait(timeout=EXIT_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the sweep did not exit within {EXIT_TIMEOUT} s of the signal")
    return rc, [line for line in (out / "stderr.txt").read_text().splitlines() if line.strip()]


def interrupted_line(lines: list[str]) -> re.Match:
    text = "\n".join(lines)
    assert "Traceback" not in text, text
    assert sum("interrupted" in line for line in lines) == 1, text
    match = MESSAGE.fullmatch(lines[-1])
    assert match, text
    return match


def child_pids(pid: int) -> dict[int, str]:
    """``{pid: command line}`` of the living processes whose parent is ``pid``."""
    try:
        import psutil
    except ImportError:
        children = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError):
                fields = stat.read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == pid:
                    cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ")
                    children[int(stat.parent.name)] = cmdline.decode(errors="replace")
        return children
    with contextlib.suppress(psutil.Error):
        return {c.pid: " ".join(c.cmdline()) for c in psutil.Process(pid).children()}
    return {}


def alive(pid: int) -> bool:
    """Whether ``pid`` is a running (not zombie) process."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        if not Path("/proc").is_dir():  # no /proc: ask the kernel
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return False
            return True
        return False
    return state not in ("Z", "X")


# ----------------------------------------------------------------------------- signals


def test_ctrl_c_stops_promptly_keeps_finished_jobs_and_the_rerun_resumes(tmp_path, monkeypatch):
    out = tmp_path / "group"
    with sweep_process(out) as proc:
        before = wait_for_cached_job(proc, out)
        t0 = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        rc, lines = wait_exit(proc, out)
        elapsed = time.monotonic() - t0
    assert rc == 130
    assert elapsed < 15, f"took {elapsed:.1f} s to stop"
    match = interrupted_line(lines)
    after = cache_files(out)
    assert {k: after[k] for k in before} == before  # finished jobs' files kept untouched
    assert int(match.group(1)) == len(after) < len(JOBS)
    assert match.group(2) == str(out / "cache" / "terminal")
    for name in after:
        assert "error" in json.loads((out / "cache" / "terminal" / f"{name}.json").read_text())

    # Rerun (in this process, one worker): only the jobs that were not cached run.
    calls = []
    real = token_study.run_job

    def counted(job, progress=None):
        calls.append(job.name)
        return real(job, progress)

    monkeypatch.setattr(token_study, "run_job", counted)
    result = reproduce_main([*ARGS, "--workers", "1", "--out", str(out), "--quiet"])
    assert sorted(calls) == sorted(set(JOBS) - set(after))
    final = cache_files(out)
    assert sorted(final) == JOBS and {k: final[k] for k in after} == after
    assert (result["config"]["jobs_cached"], result["config"]["jobs_run"]) == (len(after), len(calls))


def test_sigint_to_the_driver_alone_lets_running_jobs_finish_and_caches_them(tmp_path):
    out = tmp_path / "driver"
    with sweep_process(out) as proc:
        before = wait_for_cached_job(proc, out)
        os.kill(proc.pid, signal.SIGINT)  # the driver only: the workers go on
        rc, lines = wait_exit(proc, out)
    assert rc == 130
    match = interrupted_line(lines)
    finished_first = re.search(r"(\d+) of them were running when interrupted and finished first", lines[-1])
    assert finished_first, lines[-1]  # a tpo job (about a second) was running: it was waited for
    after = cache_files(out)
    assert {k: after[k] for k in before} == before
    assert len(after) >= len(before) + int(finished_first.group(1)) >= len(before) + 1
    assert int(match.group(1)) == len(after) < len(JOBS)  # no new job was started


def test_workers_exit_when_the_driver_is_killed(tmp_path):
    out = tmp_path / "kill"
    with sweep_process(out) as proc:
        wait_for_cached_job(proc, out)
        children = child_pids(proc.pid)
        workers = [pid for pid, cmd in children.items() if "spawn_main" in cmd]
        assert len(workers) >= 2, children  # the two pool workers (and the resource tracker)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=EXIT_TIMEOUT)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(alive(pid) for pid in children):
            time.sleep(0.1)
        left = {pid: cmd for pid, cmd in children.items() if alive(pid)}
    assert not left, f"still running 10 s after the driver was killed: {left}"


# ----------------------------------------------------------------------- damaged cache


def test_a_damaged_cache_file_is_recomputed_with_a_warning_naming_it(tmp_path, monkeypatch):
    argv = ["terminal", "--lengths", "3", "--episodes", "2", "--methods", "dg", "--seeds", "3",
            "--workers", "1", "--out", str(tmp_path), "--quiet"]
    reproduce_main(argv)
    folder = tmp_path / "cache" / "terminal"
    missing = folder / "dg__H3-paper__seed0.json"
    record = json.loads(missing.read_text())
    del record["error"]
    missing.write_text(json.dumps(record))
    broken = folder / "dg__H3-paper__seed1.json"
    broken.write_text(broken.read_text()[:50])  # cut short
    kept = (folder / "dg__H3-paper__seed2.json").stat().st_mtime_ns

    calls = []
    real = token_study.run_job
    monkeypatch.setattr(token_study, "run_job", lambda job, progress=None: calls.append(job.name) or real(job, progress))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = reproduce_main(argv)
    messages = [str(w.message) for w in caught if issubclass(w.category, sweep.CacheWarning)]
    assert len(messages) == 2, messages
    assert any(str(missing) in m and "missing the field 'error'" in m for m in messages), messages
    assert any(str(broken) in m and "not valid JSON" in m for m in messages), messages
    assert sorted(calls) == ["dg__H3-paper__seed0", "dg__H3-paper__seed1"]
    assert "error" in json.loads(missing.read_text()) and "error" in json.loads(broken.read_text())
    assert (folder / "dg__H3-paper__seed2.json").stat().st_mtime_ns == kept
    assert result["methods"]["dg"]["H=3"]["n_seeds"] == 3


class _Job:
    name = "job"
    record_fields = ("spec", "value")

    def spec(self) -> dict:
        return {"seed": (0, 1)}

    def cache_path(self, cache: Path) -> Path:
        return Path(cache) / "x" / "job.json"


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ('{"spec": {"seed": [0, 1]}, "value": 1}', None),
        ('{"spec": {"seed": [0, 1]}}', "is missing the field 'value'"),
        ('{"value": 1}', "is missing the field 'spec'"),
        ("[1, 2]", "holds a JSON list, not an object"),
        ('{"spec": ', "is not valid JSON"),
        ('{"spec": {"seed": [0, 2]}}', None),  # another job's settings: rerun silently
    ],
)
def test_check_cached_says_what_is_wrong_with_a_cache_file(tmp_path, content, problem):
    job = _Job()
    assert sweep.check_cached(job, tmp_path) == (None, None)  # no file
    path = job.cache_path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(content)
    record, found = sweep.check_cached(job, tmp_path)
    if problem is None:
        assert found is None
        assert (record is not None) == ("value" in content)
    else:
        assert record is None and found.startswith(problem)
        assert sweep.load_cached(job, tmp_path) is None
