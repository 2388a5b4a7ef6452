"""``python -m benchmarks.gym_defaults``: see :mod:`benchmarks.gym_defaults`."""

from benchmarks.gym_defaults.cli import run

if __name__ == "__main__":
    run()
