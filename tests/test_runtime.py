"""The process-level allocator setting."""

from __future__ import annotations

import subprocess
import sys

import pytest

from zoo.jobs.runtime import keep_freed_memory


def test_keep_freed_memory_applies_on_linux_and_rejects_bad_thresholds():
    # Run in a child: the setting is process-wide and must not leak into the test session.
    code = "from zoo.jobs.runtime import keep_freed_memory; print(keep_freed_memory())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    expected = "True" if sys.platform.startswith("linux") else "False"
    assert out.stdout.strip() == expected
    with pytest.raises(ValueError, match="threshold_bytes"):
        keep_freed_memory(0)
