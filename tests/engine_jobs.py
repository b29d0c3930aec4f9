"""The tests' writer of Hudi and Paimon tables (tests/engine_writer.py) as a context manager: started once per
module, told to write and read over its stdin and stdout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from tests.engine_writer import ANSWER

ROOT = Path(__file__).resolve().parent.parent


class EngineWriter:
    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process

    def _ask(self, command: dict[str, Any]) -> dict[str, Any]:
        stdin: IO[str] | None = self.process.stdin
        stdout: IO[str] | None = self.process.stdout
        assert stdin is not None and stdout is not None
        stdin.write(json.dumps(command) + "\n")
        stdin.flush()
        answer: dict[str, Any] = json.loads(_answer(stdout, self.process))
        if not answer.get("ok"):
            raise RuntimeError(f"the engine writer failed: {answer.get('error')}")
        return answer

    def write(self, path: Path, name: str, rows: list[tuple[int, str, int, str]], options: dict[str, str]) -> None:
        self._ask({"op": "write", "path": str(path), "name": name, "rows": rows, "options": options})

    def read(self, path: Path) -> list[list[Any]]:
        rows: list[list[Any]] = self._ask({"op": "read", "path": str(path)})["rows"]
        return rows

    def sql(self, *statements: str, catalogs: dict[str, Path] | None = None) -> list[list[Any]]:
        """Spark SQL statements, with Paimon catalogs by those names over those warehouses: the last one's rows."""
        where = {name: str(path) for name, path in (catalogs or {}).items()}
        rows: list[list[Any]] = self._ask({"op": "sql", "catalogs": where, "statements": list(statements)})["rows"]
        return rows


def _answer(stdout: IO[str], process: subprocess.Popen[str]) -> str:
    """The writer's next answer: its next line marked as one (the JVM's own lines on the same stdout skipped)."""
    while line := stdout.readline():
        if line.startswith(ANSWER):
            return line[len(ANSWER) :]
    raise RuntimeError(f"the engine writer ended (exit {process.poll()})")


@contextmanager
def engine_writer(log: Path) -> Iterator[EngineWriter]:
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYTHONPATH": str(ROOT)}
    with log.open("w") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.engine_writer"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            cwd=ROOT,
            env=env,
        )
    try:
        assert process.stdout is not None
        try:
            _answer(process.stdout, process)
        except RuntimeError:
            raise RuntimeError(f"the engine writer did not start:\n{log.read_text()[-4000:]}") from None
        yield EngineWriter(process)
    finally:
        if process.poll() is None:
            try:
                assert process.stdin is not None
                process.stdin.write(json.dumps({"op": "stop"}) + "\n")
                process.stdin.flush()
                process.wait(30)
            except (OSError, subprocess.TimeoutExpired):
                process.kill()
                process.wait(10)
