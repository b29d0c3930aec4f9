"""Readable output for people (Rich tables) and exact output for scripts (--json)."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

# In a terminal Rich fits its width; piped (scripts, tests) nothing is cut off at 80 columns.
console = Console(width=None if sys.stdout.isatty() else 250)


def emit_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True))


def human_bytes(n: int | float | None) -> str:
    value = float(n or 0)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return str(n)


def table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    out = Table(title=title, title_justify="left")
    for column in columns:
        out.add_column(column)
    for row in rows:
        out.add_row(*("" if v is None else str(v) for v in row))
    console.print(out)


def key_values(title: str, pairs: Sequence[tuple[str, Any]]) -> None:
    out = Table(title=title, title_justify="left", show_header=False)
    out.add_column("key", style="bold")
    out.add_column("value")
    for key, value in pairs:
        out.add_row(key, "" if value is None else str(value))
    console.print(out)
