"""`lakewarden demo`: the main job on the embedded default, watched live.

A server on a fresh data directory (SQLite, a local warehouse, the `lake` REST catalog, one local Spark optimizer),
and a Spark writer streaming small commits and merge-on-read MERGE updates into a few tables; a terminal view shows
each table's files, status and query time while lakewarden compacts them. At the end every table is checked to
hold exactly the rows written. `--storage s3` puts the warehouse in a bucket of a moto S3 server the demo starts,
reached with vended credentials."""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table

from lakewarden.cli import render
from lakewarden.cli.render import human_bytes

TABLE_PROPERTIES = {
    "write.delete.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.merge.mode": "merge-on-read",
    "self-optimizing.minor.trigger.file-count": "8",
    "self-optimizing.min-plan-interval": "5000",
}


class DemoError(Exception):
    """The demo could not start (the server did not come up, …); the message says why."""


@dataclass
class DemoOptions:
    minutes: float = 3.0
    tables: int = 3
    rows: int = 200  # rows per commit
    merge_every: int = 4  # every n-th commit to a table is a MERGE updating some of its rows
    data_dir: Path | None = None  # default: a fresh temporary directory, removed afterwards
    port: int | None = None
    keep: bool = False
    storage: str = "local"  # or "s3": an S3 server of the demo's own (moto)


@dataclass
class TableStats:
    name: str
    commits: int = 0
    merges: int = 0
    rows: int = 0  # rows inserted (ids 0 .. rows-1)
    updated: set[int] = field(default_factory=set)  # ids some MERGE changed
    conflicts: int = 0  # commits retried after losing to a concurrent one (e.g. a compaction)
    peak_files: int = 0
    peak_deletes: int = 0
    first_query_ms: float | None = None
    last_query_ms: float | None = None
    status: str = "—"
    data_files: int = 0
    delete_files: int = 0
    size: int = 0
    optimized: int = 0


def _free_port(preferred: int) -> int:
    for port in (preferred, 0):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise RuntimeError("no free port")


STORAGES = ("local", "s3")
DEMO_BUCKET = "lakewarden-demo"
DEMO_REGION = "us-east-1"


@contextmanager
def demo_storage(storage: str, data_dir: Path, console: Console) -> Iterator[dict[str, str] | None]:
    """The warehouse of the demo's catalog `lake`: None for the local default; for `s3`, the properties of a
    bucket on an S3 server (with STS) the demo runs itself, moto's, on loopback, stopped afterwards."""
    if storage not in STORAGES:
        raise DemoError(f"--storage: {storage!r} is none of {', '.join(STORAGES)}")
    if storage == "local":
        yield None
        return
    try:
        import boto3
        import moto.server  # noqa: F401  (only checked for: it runs in a process of its own)
    except ImportError:
        raise DemoError("--storage s3 runs moto's S3 server: pip install 'moto[server]' boto3") from None
    port = _free_port(0)
    endpoint = f"http://127.0.0.1:{port}"
    log = (data_dir / "s3.log").open("ab")
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            if server.poll() is not None:
                raise DemoError(f"the S3 server exited; see {data_dir / 's3.log'}")
            try:
                httpx.get(f"{endpoint}/moto-api/", timeout=1)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise DemoError(f"the S3 server did not start; see {data_dir / 's3.log'}") from None
                time.sleep(0.2)
        keys = {"region_name": DEMO_REGION, "aws_access_key_id": "demo", "aws_secret_access_key": "demo"}
        boto3.client("s3", endpoint_url=endpoint, **keys).create_bucket(Bucket=DEMO_BUCKET)
        trust = '{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"AWS": "*"}, ' + (
            '"Action": "sts:AssumeRole"}]}'
        )
        role = boto3.client("iam", endpoint_url=endpoint, **keys).create_role(
            RoleName="tables", AssumeRolePolicyDocument=trust
        )
        console.print(f"S3 server (moto) at {endpoint}; the tables go to s3://{DEMO_BUCKET}/warehouse")
        yield {
            "warehouse": f"s3://{DEMO_BUCKET}/warehouse",
            "s3.endpoint": endpoint,
            "s3.region": DEMO_REGION,
            "s3.path-style-access": "true",
            "s3.access-key-id": "demo",
            "s3.secret-access-key": "demo",
            "credentials.role-arn": role["Role"]["Arn"],  # each table's own temporary credentials, from STS
            "credentials.sts-endpoint": endpoint,
        }
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


@contextmanager
def demo_server(
    data_dir: Path, port: int, console: Console, warehouse: dict[str, str] | None = None
) -> Iterator[tuple[str, str]]:
    """The server on the embedded default, in its own session (Ctrl-C is the demo's to handle); yields its
    URL and the admin token its first start wrote. `warehouse`: the catalog `lake`'s properties (S3)."""
    config = data_dir / "lakewarden.yaml"
    catalogs = ""
    if warehouse is not None:
        catalogs = yaml.safe_dump({"catalogs": [{"name": "lake", "type": "internal", "properties": warehouse}]})
    config.write_text(
        f"ams:\n  data-dir: {data_dir / 'lakewarden'}\n  http-server: {{bind-port: {port}}}\n"
        "  evaluator: {interval: 2s, recheck-interval: 10s}\n"
        "resource-groups:\n  - {name: default, container: local, properties: {instances: '1', memory: 1g}}\n" + catalogs
    )
    log = (data_dir / "server.log").open("ab")
    server = subprocess.Popen(
        [sys.executable, "-m", "lakewarden.cli.main", "server", "-c", str(config), "--log-level", "warning"],
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if server.poll() is not None:
                raise DemoError(f"the server exited; see {data_dir / 'server.log'}")
            try:
                if httpx.get(f"{url}/api/v1/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise DemoError(f"the server did not start; see {data_dir / 'server.log'}")
            time.sleep(0.3)
        yield url, (data_dir / "lakewarden" / "admin.token").read_text().strip()
    finally:
        console.print("[dim]stopping the server and its optimizer…[/dim]")
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


@dataclass
class _Flag:
    """Raised by a signal handler; polled by the main loop (no lock anywhere, so a handler cannot deadlock)."""

    raised: bool = False

    def wait(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self.raised and time.monotonic() < deadline:
            time.sleep(0.1)


class Writer(threading.Thread):
    """Streams small appends and merge-on-read MERGE updates round-robin into the tables."""

    def __init__(self, spark: Any, stats: list[TableStats], options: DemoOptions) -> None:
        super().__init__(name="demo-writer", daemon=True)
        self.spark = spark
        self.stats = stats
        self.options = options
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.random = random.Random(7)

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                for table in self.stats:
                    if self.stop.is_set():
                        return
                    self._commit(table)
        except BaseException as exc:  # shown by the view and the summary
            self.error = exc

    def _commit(self, table: TableStats) -> None:
        merge = table.commits % self.options.merge_every == self.options.merge_every - 1 and table.rows > 0
        if merge:
            ids = sorted(self.random.sample(range(table.rows), min(10, table.rows)))
            statement = (
                f"MERGE INTO {table.name} t USING (SELECT explode(array({', '.join(map(str, ids))})) AS id) s "
                f"ON t.id = s.id WHEN MATCHED THEN UPDATE SET t.v = 'updated {table.commits}'"
            )
        else:
            start, end = table.rows, table.rows + self.options.rows
            statement = (
                f"INSERT INTO {table.name} SELECT id, concat('key-', id % 97), 'v0', current_timestamp() "
                f"FROM range({start}, {end})"
            )
        for _ in range(20):  # a commit that lost to a concurrent one (a compaction) is tried again
            try:
                self.spark.sql(statement)
                break
            except Exception as exc:
                if "CommitFailed" not in str(exc) and "ValidationException" not in str(exc):
                    raise
                table.conflicts += 1
        else:
            raise RuntimeError(f"gave up on a commit to {table.name}")
        table.commits += 1
        if merge:
            table.merges += 1
            table.updated.update(ids)
        else:
            table.rows = end


def _query_ms(spark: Any, name: str) -> float:
    started = time.perf_counter()
    spark.sql(f"SELECT key, count(*), max(ts) FROM {name} GROUP BY key").collect()
    return (time.perf_counter() - started) * 1000


def _refresh(api: httpx.Client, stats: list[TableStats]) -> dict[str, Any]:
    tables = {t["identifier"]: t for t in api.get("/tables", params={"catalog": "lake"}).json()}
    processes = api.get("/processes", params={"action": "optimizing", "status": "success", "limit": 1000}).json()
    for table in stats:
        row = tables.get(table.name)
        if row is None:
            continue
        table.status, table.data_files, table.delete_files = row["status"], row["data_files"], row["delete_files"]
        table.size = row["files_size_bytes"]
        table.peak_files = max(table.peak_files, table.data_files)
        table.peak_deletes = max(table.peak_deletes, table.delete_files)
        table.optimized = sum(1 for p in processes if p["table"] == table.name)
    overview: dict[str, Any] = api.get("/overview").json()
    return overview


def _view(
    stats: list[TableStats], overview: dict[str, Any], url: str, elapsed: float, total: float, writer: Writer
) -> Group:
    grid = Table(title_justify="left", expand=False)
    for column in (
        "table",
        "commits",
        "rows",
        "data files",
        "avg file size",
        "delete files",
        "status",
        "optimized",
        "retries",
        "query",
    ):
        grid.add_column(column, justify="right" if column not in ("table", "status") else "left")
    for t in stats:
        average = human_bytes(t.size / t.data_files) if t.data_files else "—"
        query = f"{t.last_query_ms:.0f} ms" if t.last_query_ms is not None else "—"
        style = {"pending": "yellow", "idle": "green"}.get(t.status, "cyan")
        grid.add_row(
            t.name,
            str(t.commits),
            f"{t.rows:,}",
            str(t.data_files),
            average,
            str(t.delete_files),
            f"[{style}]{t.status}[/{style}]",
            str(t.optimized),
            str(t.conflicts),
            query,
        )
    workers = overview.get("optimizers", {})
    header = (
        f"[bold]lakewarden demo[/bold] · {elapsed:.0f}s of {total:.0f}s · dashboard {url} · optimizer threads "
        f"busy {workers.get('busy', 0)}/{workers.get('threads', 0)} · Ctrl-C stops"
    )
    lines: list[Any] = [Panel(header, expand=False), grid]
    if writer.error is not None:
        lines.append(f"[red]writer stopped: {writer.error}[/red]")
    return Group(*lines)


def _verify(spark: Any, table: TableStats) -> tuple[bool, str]:
    """Exactly the rows written: every id once, the MERGE-updated ones changed, the others not."""
    row = spark.sql(
        f"SELECT count(*), count(DISTINCT id), coalesce(sum(id), 0), count_if(v <> 'v0') FROM {table.name}"
    ).first()
    expected = (table.rows, table.rows, table.rows * (table.rows - 1) // 2, len(table.updated))
    actual = tuple(int(v) for v in row)
    if actual == expected:
        return True, f"{table.rows:,} rows, {len(table.updated)} updated, as written"
    return False, f"expected {expected}, found {actual}"


def run_demo(options: DemoOptions, console: Console | None = None) -> int:
    """Run the demo; returns the exit code (0 when every table holds exactly what was written)."""
    from lakewarden.domain.catalogs import CatalogSpec
    from lakewarden.spark.session import build_spark_session

    console = console or render.console  # full width when piped (logs, tests)
    own_dir = options.data_dir is None
    data_dir = options.data_dir or Path(tempfile.mkdtemp(prefix="lakewarden-demo-"))
    data_dir.mkdir(parents=True, exist_ok=True)
    port = options.port or _free_port(1630)
    total = options.minutes * 60
    interrupted = False
    verified: list[tuple[TableStats, bool, str]] = []
    console.print(f"[bold]lakewarden demo[/bold]: data in {data_dir}; starting the server (embedded default)…")
    # Ctrl-C only asks to stop: raised inside a py4j call, KeyboardInterrupt would break Spark's gateway. It
    # raises a plain flag: an Event's `set` in a handler can deadlock when a second Ctrl-C lands inside it.
    ctrl_c = _Flag()

    def ask_to_stop(_signum: int, _frame: Any) -> None:
        ctrl_c.raised = True

    signal.signal(signal.SIGINT, ask_to_stop)
    spark_log = data_dir / "spark.log"
    try:
        with (
            demo_storage(options.storage, data_dir, console) as warehouse,
            demo_server(data_dir, port, console, warehouse) as (url, token),
            _stderr_to(spark_log),
        ):
            api = httpx.Client(base_url=f"{url}/api/v1", timeout=30, headers={"Authorization": f"Bearer {token}"})
            console.print(f"server at {url} (dashboard); starting Spark for the writer…")
            spark = build_spark_session(
                [CatalogSpec("lake", "internal", {"uri": f"{url}/iceberg", "token": token})],
                app_name="lakewarden-demo-writer",
                driver_memory="1g",
            )
            signal.signal(signal.SIGINT, ask_to_stop)  # PySpark installed its own (cancel jobs, then raise)
            spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.demo")
            properties = ", ".join(f"'{k}'='{v}'" for k, v in TABLE_PROPERTIES.items())
            stats = []
            for i in range(options.tables):
                name = f"lake.demo.events_{i + 1}"
                spark.sql(
                    f"CREATE TABLE IF NOT EXISTS {name} (id BIGINT, key STRING, v STRING, ts TIMESTAMP) "
                    f"USING iceberg PARTITIONED BY (bucket(4, id)) TBLPROPERTIES ({properties})"
                )
                stats.append(TableStats(name))
            writer = Writer(spark, stats, options)
            if not ctrl_c.raised:  # stopped while starting up: straight to the clean-up
                writer.start()
            started = time.monotonic()
            next_query = 0
            overview: dict[str, Any] = {}
            with Live(console=console, refresh_per_second=2, transient=False) as live:
                while (elapsed := time.monotonic() - started) < total and writer.error is None and not ctrl_c.raised:
                    with suppress(httpx.HTTPError):
                        overview = _refresh(api, stats)
                    target = stats[next_query % len(stats)]
                    if target.rows:
                        target.last_query_ms = _query_ms(spark, target.name)
                        target.first_query_ms = target.first_query_ms or target.last_query_ms
                    next_query += 1
                    live.update(_view(stats, overview, url, elapsed, total, writer))
                    ctrl_c.wait(1.0)
            interrupted = ctrl_c.raised
            console.print("stopping the writer…" if not interrupted else "interrupted: stopping the writer…")
            writer.stop.set()
            if writer.is_alive():
                writer.join(120)
            console.print("letting lakewarden settle, then checking every table holds exactly what was written…")
            _settle(api, stats, seconds=30)
            for table in stats:
                spark.sql(f"REFRESH TABLE {table.name}")
                table.last_query_ms = _query_ms(spark, table.name)
                verified.append((table, *_verify(spark, table)))
            _refresh(api, stats)
            spark.stop()
            _summary(console, verified, writer)
            kept = (
                ""
                if options.keep or not own_dir
                else " (in the demo's temporary directory, removed now: --data-dir keeps it)"
            )
            console.print(f"Spark's and py4j's log: {spark_log}{kept}")
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if own_dir and not options.keep:
            shutil.rmtree(data_dir, ignore_errors=True)
    ok = all(good for _, good, _ in verified) and (bool(verified) or interrupted)
    return 0 if ok else 1


@contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """Standard error (file descriptor 2) written to `path` meanwhile: the Spark JVM started inside inherits
    it, so its log lines (a writer's commit retry is logged at ERROR) and py4j's never print over the
    live view. The view counts the retries instead."""
    sys.stderr.flush()
    saved = os.dup(2)
    with path.open("ab") as log:
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


def _settle(api: httpx.Client, stats: list[TableStats], seconds: float) -> None:
    """Give running processes a moment to finish, so the summary shows where things ended."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            running = api.get("/processes", params={"status": "running"}).json()
        except httpx.HTTPError:
            return
        if not running:
            return
        time.sleep(1)


def _summary(console: Console, verified: list[tuple[TableStats, bool, str]], writer: Writer) -> None:
    out = Table(title="summary", title_justify="left")
    for column in (
        "table",
        "commits",
        "merges",
        "data files peak → now",
        "delete files peak → now",
        "optimized",
        "query first → last",
        "data",
    ):
        out.add_column(column)
    for t, good, text in verified:
        first = f"{t.first_query_ms:.0f}" if t.first_query_ms is not None else "—"
        last = f"{t.last_query_ms:.0f}" if t.last_query_ms is not None else "—"
        out.add_row(
            t.name,
            str(t.commits),
            str(t.merges),
            f"{t.peak_files} → {t.data_files}",
            f"{t.peak_deletes} → {t.delete_files}",
            str(t.optimized),
            f"{first} → {last} ms",
            f"[green]verified: {text}[/green]" if good else f"[red]WRONG: {text}[/red]",
        )
    console.print(out)
    if writer.error is not None:
        console.print(f"[red]the writer stopped early: {writer.error}[/red]")
    conflicts = sum(t.conflicts for t, _, _ in verified)
    if conflicts:
        console.print(f"{conflicts} commit(s) lost to a concurrent compaction and were retried, as writers do.")
