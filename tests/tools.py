"""Tools the tests drive besides Python's (Chromium and chromedriver, promtool, PostgreSQL): bin/test installs each
with apt where it can; a test that finds one missing says so."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def tool_missing(tool: str) -> NoReturn:
    """`tool` is missing here: the test is skipped on a developer's machine, and fails in CI, where .ci/run sets
    LAKEWARDEN_TEST_TOOLS=required."""
    if os.environ.get("LAKEWARDEN_TEST_TOOLS") == "required" or os.environ.get("CI"):
        pytest.fail(f"{tool} is missing, and CI requires it (bin/test installs it as root with apt)")
    pytest.skip(f"{tool} is missing (bin/test installs it as root with apt)")
