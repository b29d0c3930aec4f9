"""Durations as people write them in the server config and in table properties: 500ms, 30s, 3min, 12h,
30d, or a plain number of milliseconds (Amoro's properties are in milliseconds)."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

UNITS = {"ms": 0.001, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hour": 3600, "d": 86400, "day": 86400}


def parse_duration(value: Any) -> timedelta:
    """A timedelta as it is, a number as milliseconds, or a text like '720min'; raises ValueError."""
    if isinstance(value, timedelta):
        return value
    try:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return timedelta(milliseconds=value)
        if isinstance(value, str):
            match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*", value.lower())
            if match and match.group(2) in ("", *UNITS):
                number, unit = float(match.group(1)), match.group(2)
                return timedelta(milliseconds=number) if unit == "" else timedelta(seconds=number * UNITS[unit])
    except (OverflowError, ValueError) as exc:  # longer than a timedelta holds (about 2.7 million years), or NaN
        raise ValueError(f"{value!r} is too long a duration") from exc
    raise ValueError(f"{value!r} is not a duration such as 500ms, 30s, 720min, 12h, 30d or milliseconds")


def format_duration(span: timedelta) -> str:
    """A duration as people read it: 45s, 12min, 3.5h."""
    seconds = span.total_seconds()
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}min"
    return f"{seconds / 3600:.1f}h"
