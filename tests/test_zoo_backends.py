"""Sweep backends (zoo.jobs.backends, zoo.jobs.sweep): resume after a kill, Ray = local, bad input."""

from __future__ import annotations

import json
import operator
import socket
import sys

import numpy as np
import pytest

from zoo.jobs import backends
from zoo.paper import mnist as mnist_study
from zoo.paper.reproduce import main as reproduce_main
from zoo.paper.token import study as token_study

# terminal, H = 3, 2 methods x 2 seeds, 2 iterations: 4 jobs of about a second each.
TINY = ["terminal", "--lengths", "3", "--episodes", "2", "--methods", "dg", "tpo"]
JOBS = sorted(f"{m}__H3-paper__seed{s}" for m in ("dg", "tpo") for s in (0, 1))


def run(out, *argv: str) -> dict:
    return reproduce_main([*argv, "--out", str(out), "--quiet"])


def cache_mtimes(out, experiment: str = "terminal") -> dict[str, int]:
    folder = out / "cache" / experiment
    return {p.stem: p.stat().st_mtime_ns for p in folder.glob("*.json")}


class Counter:
    """Wraps a job function: records the jobs it runs, raises after ``fail_after`` of them
    (a sweep killed part way)."""

    def __init__(self, real, key=lambda job, *rest: job.name, fail_after: int | None = None):
        self.real, self.key, self.fail_after, self.calls = real, key, fail_after, []

    def __call__(self, *args):
        if self.fail_after is not None and len(self.calls) >= self.fail_after:
            raise RuntimeError("simulated kill")
        self.calls.append(self.key(*args))
        return self.real(*args)


TIMING_KEYS = {"seconds", "seconds_per_iteration", "wall_seconds"}
BACKEND_KEYS = {"backend", "workers", "ray_address", "ray_cluster_cpus", "cache"}
BACKEND_KEYS |= {"jobs_total", "jobs_cached", "jobs_run", "stale_cached_jobs", "code_version"}


def strip(value, drop=TIMING_KEYS | BACKEND_KEYS):
    """``value`` without wall times and where/how it ran (what may differ between backends)."""
    if isinstance(value, dict):
        return {k: strip(v, drop) for k, v in value.items() if k not in drop}
    if isinstance(value, list):
        return [strip(v, drop) for v in value]
    return value


# ----------------------------------------------------------------------------- resume


def test_token_sweep_resumes_after_a_kill_without_rerunning_finished_jobs(tmp_path, monkeypatch):
    killed = Counter(token_study.run_job, fail_after=2)
    monkeypatch.setattr(token_study, "run_job", killed)
    with pytest.raises(RuntimeError, match="simulated kill"):
        run(tmp_path, *TINY, "--seeds", "2", "--workers", "1")
    assert len(killed.calls) == 2
    finished = cache_mtimes(tmp_path)
    assert sorted(finished) == sorted(killed.calls)  # exactly the finished jobs were cached
    assert not (tmp_path / "terminal-paper.json").exists()

    resumed = Counter(killed.real)
    monkeypatch.setattr(token_study, "run_job", resumed)
    result = run(tmp_path, *TINY, "--seeds", "2", "--workers", "1")
    assert sorted(resumed.calls) == sorted(set(JOBS) - set(finished))
    after = cache_mtimes(tmp_path)
    assert sorted(after) == JOBS
    assert {k: after[k] for k in finished} == finished  # finished jobs were not rewritten
    cfg = result["config"]
    assert (cfg["jobs_total"], cfg["jobs_cached"], cfg["jobs_run"]) == (4, 2, 2)
    assert cfg["backend"] == "local"
    data = json.loads((tmp_path / "terminal-paper.json").read_text())
    assert data["methods"]["tpo"]["H=3"]["n_seeds"] == 2

    resumed.calls.clear()
    again = run(tmp_path, *TINY, "--seeds", "2", "--workers", "1")
    assert resumed.calls == [] and cache_mtimes(tmp_path) == after
    assert strip(again["methods"]) == strip(result["methods"])


def test_mnist_runs_are_cached_and_resume(tmp_path, monkeypatch):
    cfg = mnist_study.MnistConfig(dataset="digits", steps=6, eval_every=3)
    def key(method, seed, _cfg):
        return f"{method}__seed{seed}"

    killed = Counter(mnist_study.run_one, key, fail_after=3)
    monkeypatch.setattr(mnist_study, "run_one", killed)
    with pytest.raises(RuntimeError, match="simulated kill"):
        mnist_study.run_study(cfg, [0, 1], methods=("ce", "tpo"), progress=False, cache=tmp_path / "cache")
    finished = cache_mtimes(tmp_path, "mnist-digits")
    assert sorted(finished) == sorted(killed.calls) and len(finished) == 3

    resumed = Counter(killed.real, key)
    monkeypatch.setattr(mnist_study, "run_one", resumed)
    info: dict = {}
    runs = mnist_study.run_study(
        cfg, [0, 1], methods=("ce", "tpo"), progress=False, cache=tmp_path / "cache", info=info
    )
    assert resumed.calls == ["tpo__seed1"]
    assert (info["jobs_cached"], info["jobs_run"]) == (3, 1)
    after = cache_mtimes(tmp_path, "mnist-digits")
    assert {k: after[k] for k in finished} == finished
    assert runs["tpo"]["error"].shape == (2, 3)
    # A cached curve is the curve a fresh run gives (same seed, one torch thread).
    fresh = mnist_study.run_study(cfg, [0], methods=("ce",), progress=False)
    assert runs["ce"]["error"][0].tolist() == fresh["ce"]["error"][0].tolist()
    # Another config (steps) does not reuse the cache.
    resumed.calls.clear()
    other = mnist_study.MnistConfig(dataset="digits", steps=3, eval_every=3)
    mnist_study.run_study(other, [0], methods=("ce",), progress=False, cache=tmp_path / "cache")
    assert resumed.calls == ["ce__seed0"]


# ---------------------------------------------------------------------------- backends


def _boom(x: int) -> int:
    raise ValueError(f"bad {x}")


@pytest.mark.slow  # the pool's spawned workers import torch
def test_local_backend_runs_inline_or_in_a_pool_and_reraises_errors():
    with backends.make_backend("local", workers=1) as inline:
        assert inline.in_process
        handles = [inline.submit(operator.mul, i, 3) for i in range(4)]
        assert [inline.result(h) for h in inline.as_completed(handles)] == [0, 3, 6, 9]
        bad = inline.submit(_boom, 7)
        (done,) = list(inline.as_completed([bad]))
        with pytest.raises(ValueError, match="bad 7"):
            inline.result(done)
    with backends.make_backend("local", workers=2) as pool:
        assert not pool.in_process
        handles = [pool.submit(operator.mul, i, 3) for i in range(4)]
        assert sorted(pool.result(h) for h in pool.as_completed(handles, poll=0.1)) == [0, 3, 6, 9]


@pytest.fixture
def local_ray():
    """A local Ray instance started by the test (2 CPUs, no dashboard), shut down after."""
    ray = pytest.importorskip("ray", reason="the ray extra (pip install 'tpo[ray]') is not installed")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.mark.slow
def test_ray_backend_matches_local_and_resumes_a_local_sweep(tmp_path, local_ray):
    local = run(tmp_path / "local", *TINY, "--seeds", "2", "--workers", "1")
    assert local["config"]["backend"] == "local"
    on_ray = run(tmp_path / "ray", *TINY, "--seeds", "2", "--workers", "2", "--backend", "ray")
    assert on_ray["config"]["backend"] == "ray" and on_ray["config"]["jobs_run"] == 4
    assert on_ray["config"]["ray_cluster_cpus"] == 2
    assert local_ray.is_initialized()  # the test's instance was used and left running
    # Same JSON on disk, up to wall times and where it ran; same per-job cache records.
    json_local = json.loads((tmp_path / "local" / "terminal-paper.json").read_text())
    json_ray = json.loads((tmp_path / "ray" / "terminal-paper.json").read_text())
    assert strip(json_ray) == strip(json_local)
    for name in JOBS:
        rec = [
            json.loads((tmp_path / d / "cache" / "terminal" / f"{name}.json").read_text())
            for d in ("local", "ray")
        ]
        assert strip(rec[0]) == strip(rec[1])
        assert rec[0]["error"] == rec[1]["error"] and rec[0]["grad_norm"] == rec[1]["grad_norm"]

    # A sweep started on the local backend is resumed on Ray: only the new seed runs.
    before = cache_mtimes(tmp_path / "local")
    grown = run(tmp_path / "local", *TINY, "--seeds", "3", "--workers", "2", "--backend", "ray")
    after = cache_mtimes(tmp_path / "local")
    assert sorted(set(after) - set(before)) == ["dg__H3-paper__seed2", "tpo__H3-paper__seed2"]
    assert {k: after[k] for k in before} == before
    assert (grown["config"]["jobs_cached"], grown["config"]["jobs_run"]) == (4, 2)

    # MNIST runs on Ray too, with the same curves as in this process.
    cfg = mnist_study.MnistConfig(dataset="digits", steps=4, eval_every=2)
    here = mnist_study.run_study(cfg, [0], methods=("ce", "tpo"), progress=False)
    there = mnist_study.run_study(cfg, [0], methods=("ce", "tpo"), progress=False, backend="ray")
    for m in ("ce", "tpo"):
        assert np.array_equal(here[m]["error"], there[m]["error"])


# --------------------------------------------------------------------------- bad input


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_bad_backend_choices_are_clear_errors(tmp_path, capsys):
    cases = [
        (["--backend", "dask"], "invalid choice: 'dask'"),
        (["--ray-address", "auto"], "applies to --backend ray only"),
        (["--backend", "ray", "--ray-address", "not an address"], "HOST:PORT"),
        (["--backend", "ray", "--ray-address", "head:99999"], "1..65535"),
    ]
    for extra, message in cases:
        with pytest.raises(SystemExit) as exc:
            run(tmp_path, *TINY, "--seeds", "1", *extra)
        assert exc.value.code == 2
        assert message in capsys.readouterr().err, extra
    with pytest.raises(SystemExit):
        run(tmp_path, "tabular-single", "--seeds", "1", "--steps", "2", "--backend", "ray")
    assert "do not apply to it" in capsys.readouterr().err
    assert not (tmp_path / "cache").exists()  # nothing ran


def test_unreachable_ray_address_fails_fast_with_a_clear_error(tmp_path, capsys):
    pytest.importorskip("ray")
    import ray

    assert not ray.is_initialized()
    address = f"127.0.0.1:{_free_port()}"
    with pytest.raises(SystemExit):
        run(tmp_path, *TINY, "--seeds", "1", "--backend", "ray", "--ray-address", address)
    err = capsys.readouterr().err
    assert f"cannot reach a Ray cluster at '{address}'" in err and "ray start --head" in err
    with pytest.raises(backends.BackendError, match="cannot reach"):
        backends.check_reachable(f"ray://{address}", timeout=2)


def test_ray_not_installed_is_a_clear_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(SystemExit):
        run(tmp_path, *TINY, "--seeds", "1", "--backend", "ray")
    err = capsys.readouterr().err
    assert '--backend ray needs the "ray" extra' in err and 'pip install "tpo[ray]"' in err
    with pytest.raises(ModuleNotFoundError, match="tpo\\[ray\\]"):
        backends.make_backend("ray")


def test_backend_factory_and_address_parser_validate_their_arguments():
    with pytest.raises(ValueError, match="unknown backend 'dask'"):
        backends.make_backend("dask")
    with pytest.raises(ValueError, match="workers must be a positive integer; got 0"):
        backends.LocalBackend(workers=0)
    with pytest.raises(ValueError, match="context must be"):
        backends.LocalBackend(workers=2, context="fork")
    assert backends.parse_ray_address("auto") is None
    assert backends.parse_ray_address("10.0.0.1:6379") == ("10.0.0.1", 6379)
    assert backends.parse_ray_address("ray://head.example:10001") == ("head.example", 10001)
    for bad in ("", "head", "head:port", ":6379", "http://head:6379/x"):
        with pytest.raises(ValueError, match="Ray address"):
            backends.parse_ray_address(bad)
