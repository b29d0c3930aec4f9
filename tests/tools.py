"""Tools the tests drive besides Python's (Chromium and chromedriver, promtool, PostgreSQL): bin/test installs each
with apt where it can; a test that finds one missing says so."""

from __future__ import annotations

import os
from pathlib import Path
from typing import NoReturn

import pytest


def tool_missing(tool: str) -> NoReturn:
    """`tool` is missing here: the test is skipped on a developer's machine, and fails in CI, where .ci/run sets
    LAKEWARDEN_TEST_TOOLS=required."""
    if os.environ.get("LAKEWARDEN_TEST_TOOLS") == "required" or os.environ.get("CI"):
        pytest.fail(f"{tool} is missing, and CI requires it (bin/test installs it as root with apt)")
    pytest.skip(f"{tool} is missing (bin/test installs it as root with apt)")


def writer_python(venv: Path, what: str) -> Path:
    """The interpreter of a writer's environment of its own that bin/test makes (it marks one it finished with a
    `.lock-hash`); `what` is missing when it is not there."""
    python = venv / "bin" / "python"
    if not (venv / ".lock-hash").exists() or not python.exists():
        tool_missing(f"{what} in {venv} (bin/test makes it)")
    return python
