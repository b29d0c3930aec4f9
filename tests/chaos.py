"""Randomized faults, Jepsen-style: a seeded schedule of writers, lakewarden at work and faults, then checks.

One schedule (`run_schedule`) makes three tables in a namespace of its own and runs, at once:
- a Spark writer on `local.<ns>.mor` (Iceberg's SQL catalog): appends, and merge-on-read MERGE, UPDATE and
  DELETE (position deletes);
- a Spark writer on `local.<ns>.cdc`: upserts as Flink writes them (one RowDelta: an equality-delete file of
  the keys and a data file of their new versions, tests/cdc.py's recipe) and appends;
- a pyiceberg writer on `lake.<ns>.stream` (lakewarden's own REST catalog, so server faults hit its commits):
  appends and copy-on-write deletes (pyiceberg writes no delete files);
- lakewarden: its evaluator, self-optimizing on its local container's optimizer (a process with its own Spark
  JVM), expiry of snapshots and cleanup of dangling deletes;
- faults at random moments: SIGKILL of the server (restarted after a pause), SIGSTOP of the server, a clean
  restart, SIGKILL or SIGSTOP of the optimizer (with its JVM) or of its Spark JVM alone, and a table's
  storage failing every write for a moment (`chattr +i`: not even root writes there).

The writers keep a model of each table (its rows by id). An operation that raised is resolved by reading the
table: it applied entirely or not at all, else that is a failure. Then the schedule settles (faults undone,
writers done, optimizing and expiry turned off on its tables) and is checked:
1. every process and task of its tables reached a terminal state within two timeouts of the settle;
2. no live file was deleted: every file every retained snapshot names exists;
3. each table's rows equal the model, row for row (an append or upsert applied twice, a row lost or
   resurrected by a rewrite, shows here);
4. lakewarden's orphan cleanup, run with no minimum age once nothing writes, leaves no file under the table
   that no retained snapshot or metadata file names (files of killed rewrites and failed commits included).

bench/chaos.py runs many seeds; tests/test_chaos.py a few. A failing seed replays: the schedule is a function
of the seed (the timing of the processes it races is not, so a replay may need a few runs).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import CommitFailedException

from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.services.containers import descendants
from lakewarden.spark.session import configure_catalogs
from tests.servers import ServerProcess, cli

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

HEART_BEAT_TIMEOUT = 10.0  # a loaded machine (two JVMs, the writers) delays heartbeats by seconds
TASK_EXECUTE_TIMEOUT = 60.0
TIMEOUT = HEART_BEAT_TIMEOUT + TASK_EXECUTE_TIMEOUT  # the longest a lost task may hold a process
# the server of a chaos run: quick evaluation and timeouts; expiry and dangling deletes looked at often
SERVER_SETTINGS = (
    "  evaluator: {interval: 1s, recheck-interval: 1s}\n"
    f"  optimizer: {{heart-beat-timeout: {HEART_BEAT_TIMEOUT:.0f}s, task-ack-timeout: 10s, "
    f"task-execute-timeout: {TASK_EXECUTE_TIMEOUT:.0f}s}}\n"
)
MAINTENANCE = (
    "  expire-snapshots: {interval: 5s}\n"
    "  clean-orphan-files: {interval: 1d}\n"
    "  clean-dangling-delete-files: {interval: 5s}\n"
    "  data-expiration: {enabled: false}\n"
    "  auto-create-tags: {enabled: false}\n"
    "  rewrite-manifests: {enabled: false}\n"
)
TABLE_PROPERTIES = {
    "format-version": "2",
    "self-optimizing.minor.trigger.file-count": "3",
    "self-optimizing.min-plan-interval": "0",
    "write.delete.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.merge.mode": "merge-on-read",
    "snapshot.keep.duration": "0min",  # expiry keeps only the current snapshot (and what optimizing holds)
    "table-expire.interval": "5s",
    "clean-dangling-delete-files.interval": "5s",
}
FAULTS = (
    "kill-server",
    "stop-server",
    "restart-server",
    "kill-optimizer",
    "stop-optimizer",
    "kill-optimizer-jvm",
    "storage-fails",
)
Rows = dict[int, str]


@dataclass
class Outcome:
    seed: int
    faults: list[str] = field(default_factory=list)
    ops: dict[str, int] = field(default_factory=lambda: {"applied": 0, "not applied": 0, "raised": 0})
    processes: dict[str, int] = field(default_factory=dict)  # "action status" -> count, of the schedule's tables
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return not self.problems


class Lake:
    """What lives across schedules: the server (restarted by faults), the writers' Spark, the REST catalog."""

    def __init__(self, server: ServerProcess, spark: SparkSession) -> None:
        self.server = server
        self.spark = spark
        self.api = server.api()
        catalogs = {c["name"]: c for c in self.api.get("/catalogs").json()}
        self.local_properties = dict(catalogs["local"]["properties"])
        lake = CatalogSpec("lake", "internal", {**catalogs["lake"]["properties"], "token": server.token})
        configure_catalogs(spark, [CatalogSpec("local", "sql", self.local_properties), lake])
        for name in ("local", "lake"):  # every statement reads the table's newest metadata
            spark.conf.set(f"spark.sql.catalog.{name}.cache-enabled", "false")
        spark._jsparkSession.sessionState().catalogManager().reset()
        self.rest = RestCatalog("lake", uri=f"{server.url}/iceberg", warehouse="lake", token=server.token)
        self._server_lock = threading.Lock()  # one fault at a time restarts the server
        self.orphaned: set[int] = set()  # optimizers of a server that was stopped: they must leave by themselves
        cli(server, "group", "scale", "default", "--instances", "1")

    def server_up(self) -> None:
        """Starts the server if a fault left it down (or stopped: it is continued first)."""
        with self._server_lock:
            proc = self.server.proc
            if proc is not None and proc.poll() is None:
                _signal(proc.pid, signal.SIGCONT)
                return
            self.server.start()

    def stop_server(self, sig: int) -> str:
        """Stops the server with `sig` (SIGKILL after TIMEOUT); says how it went."""
        with self._server_lock:
            proc = self.server.proc
            if proc is None or proc.poll() is not None:
                return ": the server was down"
            self.orphaned.update(self.optimizers())
            proc.send_signal(sig)
            try:
                proc.wait(timeout=TIMEOUT)
                return ""
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                return f": no clean stop in {TIMEOUT:.0f}s, killed"

    def optimizers(self) -> list[int]:
        """The pids of the optimizers (their Python) the server's local container runs."""
        proc = self.server.proc
        if proc is None or proc.poll() is not None:
            return []
        return [pid for pid, _ in descendants(proc.pid) if _optimizer(pid, proc.pid)]


def _optimizer(pid: int, parent: int) -> bool:
    """Whether `pid` is a `lakewarden optimizer` started by `parent`."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return int(stat[stat.rindex(")") + 2 :].split()[1]) == parent and b"optimizer" in command


def _alive(pid: int) -> bool:
    """Whether the process runs (a zombie no longer does)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _immutable(path: Path, on: bool) -> None:
    subprocess.run(["chattr", "-R", "+i" if on else "-i", str(path)], capture_output=True, check=False)


class Schedule:
    def __init__(self, lake: Lake, seed: int, ops: int, faults: int) -> None:
        self.lake = lake
        self.seed = seed
        self.rng = random.Random(seed)
        self.ops = ops
        self.fault_count = faults
        self.ns = f"chaos{seed}"
        self.outcome = Outcome(seed)
        self.models: dict[str, Rows] = {}
        self.locations: dict[str, Path] = {}
        self._stopped: list[tuple[int, bool]] = []  # (pid, whole group) SIGSTOPped and not yet continued
        self._immutable: list[Path] = []
        self._lock = threading.Lock()
        self._writing = threading.Event()

    # ---- tables
    def create(self) -> None:
        spark, props = self.lake.spark, TABLE_PROPERTIES
        text = ", ".join(f"'{k}'='{v}'" for k, v in props.items())
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS local.{self.ns}")
        for name in ("mor", "cdc"):
            table = f"local.{self.ns}.{name}"
            spark.sql(f"CREATE TABLE {table} (id BIGINT NOT NULL, v STRING) USING iceberg TBLPROPERTIES ({text})")
            location = spark.sql(f"DESCRIBE TABLE EXTENDED {table}").where("col_name = 'Location'").first()
            assert location is not None
            self.locations[table] = Path(_local(str(location[1])))
            self.models[table] = {}
        self.lake.rest.create_namespace(self.ns)
        stream = self.lake.rest.create_table(
            f"{self.ns}.stream", _ARROW_SCHEMA, properties={**props, "write.delete.mode": "copy-on-write"}
        )
        self.locations[f"lake.{self.ns}.stream"] = Path(_local(stream.location()))
        self.models[f"lake.{self.ns}.stream"] = {}

    # ---- the run
    def run(self) -> Outcome:
        started = time.monotonic()
        self.create()
        self.lake.api.post("/catalogs/local/refresh")
        writers = [
            threading.Thread(target=self._write, args=(name, plan), name=f"chaos-{name}")
            for name, plan in (
                ("mor", self._mor_op),
                ("cdc", self._cdc_op),
                ("stream", self._stream_op),
            )
        ]
        self._writing.set()
        for writer in writers:
            writer.start()
        faults = threading.Thread(target=self._faults, name="chaos-faults")
        faults.start()
        for writer in writers:
            writer.join()
        self._writing.clear()
        faults.join()
        try:
            self.settle()
            self.check()
        except Exception as exc:  # a check that could not even run (a table that cannot be loaded, …)
            self.problem(f"the checks broke off: {type(exc).__name__}: {str(exc)[:400]}")
        self.outcome.seconds = time.monotonic() - started
        return self.outcome

    def _write(self, name: str, op: Callable[[random.Random, int], None]) -> None:
        rng = random.Random(f"{self.seed}-{name}")
        for number in range(self.ops):
            try:
                op(rng, number)
            except Exception as exc:  # a writer that cannot even resolve its operation: the schedule fails
                self.problem(f"{name} op {number}: {type(exc).__name__}: {str(exc)[:300]}")
                return
            time.sleep(rng.uniform(0.0, 1.0))

    def problem(self, text: str) -> None:
        with self._lock:
            self.outcome.problems.append(text)

    def _count(self, key: str) -> None:
        with self._lock:
            self.outcome.ops[key] += 1

    def _apply(self, table: str, after: Rows, attempt: Callable[[], object], read: Callable[[], Rows]) -> None:
        """Runs one operation whose effect on the model is `after`: if it raised, the table tells whether it
        applied (all of it) or not (none of it); anything else is a problem."""
        before = self.models[table]
        try:
            attempt()
        except Exception as exc:
            self._count("raised")
            found = self._read_until_answered(read)
            if found == after:
                self.models[table] = after
                self._count("applied")
            elif found == before:
                self._count("not applied")
            else:
                self.problem(
                    f"{table}: an operation that raised ({type(exc).__name__}) half applied: {_diff(after, found)}"
                )
                self.models[table] = found  # go on from what is there
            return
        self.models[table] = after
        self._count("applied")

    def _read_until_answered(self, read: Callable[[], Rows]) -> Rows:
        deadline = time.monotonic() + 3 * TIMEOUT
        while True:
            try:
                return read()
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1.0)

    # ---- the writers' operations
    def _spark_rows(self, table: str) -> Rows:
        return {int(r[0]): str(r[1]) for r in self.lake.spark.sql(f"SELECT id, v FROM {table}").collect()}

    def _mor_op(self, rng: random.Random, number: int) -> None:
        table = f"local.{self.ns}.mor"
        rows, tag = self.models[table], f"m{number}"
        kind = "append" if number < 2 or not rows else rng.choice(["append", "append", "update", "delete", "merge"])
        after = dict(rows)
        if kind == "append":
            start = number * 1000
            count = rng.randint(50, 400)
            after.update(dict.fromkeys(range(start, start + count), tag))
            sql = f"INSERT INTO {table} SELECT id, '{tag}' FROM range({start}, {start + count})"
        elif kind == "update":
            modulus, rest = rng.randint(2, 7), rng.randint(0, 1)
            after.update({k: tag for k in rows if k % modulus == rest})
            sql = f"UPDATE {table} SET v = '{tag}' WHERE id % {modulus} = {rest}"
        elif kind == "delete":
            modulus, rest = rng.randint(5, 11), rng.randint(0, 4)
            after = {k: v for k, v in rows.items() if k % modulus != rest}
            sql = f"DELETE FROM {table} WHERE id % {modulus} = {rest}"
        else:  # some of the ids exist (updated), some are new (inserted)
            # ids stay >= 0: SQL's % keeps the sign of a negative id, Python's does not (the model uses Python's)
            start = max(0, rng.choice(sorted(rows)) - rng.randint(0, 50))
            count = rng.randint(20, 200)
            after.update(dict.fromkeys(range(start, start + count), tag))
            sql = (
                f"MERGE INTO {table} t USING (SELECT id, '{tag}' AS v FROM range({start}, {start + count})) s "
                "ON t.id = s.id WHEN MATCHED THEN UPDATE SET t.v = s.v WHEN NOT MATCHED THEN INSERT *"
            )
        self._apply(table, after, lambda: self.lake.spark.sql(sql).collect(), lambda: self._spark_rows(table))

    def _cdc_op(self, rng: random.Random, number: int) -> None:
        table = f"local.{self.ns}.cdc"
        rows, tag = self.models[table], f"c{number}"
        after = dict(rows)
        if number < 2 or not rows or rng.random() < 0.3:
            start, count = number * 1000, rng.randint(50, 400)
            after.update(dict.fromkeys(range(start, start + count), tag))
            sql = f"INSERT INTO {table} SELECT id, '{tag}' FROM range({start}, {start + count})"
            self._apply(table, after, lambda: self.lake.spark.sql(sql).collect(), lambda: self._spark_rows(table))
            return
        existing = rng.sample(sorted(rows), min(len(rows), rng.randint(5, 60)))
        fresh = [number * 1000 + 500 + i for i in range(rng.randint(0, 20))]
        keys = sorted(set(existing) | set(fresh))
        after.update(dict.fromkeys(keys, tag))
        self._apply(table, after, lambda: self._upsert(table, keys, tag), lambda: self._spark_rows(table))

    def _upsert(self, table: str, keys: list[int], tag: str) -> None:
        """As a Flink upsert sink commits: one RowDelta adding an equality delete of the keys and a data file of
        their new versions (same sequence number, so the delete does not hide them)."""
        spark = self.lake.spark
        jvm: Any = spark._jvm
        java = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table)
        data_dir = self.locations[table] / "data"
        ids = pa.array(keys, pa.int64())
        key_field = pa.field("id", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": b"1"})
        value_field = pa.field("v", pa.string(), metadata={b"PARQUET:field_id": b"2"})
        deletes = data_dir / f"eq-{uuid.uuid4().hex}.parquet"
        pq.write_table(pa.table([ids], pa.schema([key_field])), deletes)
        data = data_dir / f"up-{uuid.uuid4().hex}.parquet"
        pq.write_table(pa.table([ids, pa.array([tag] * len(keys))], pa.schema([key_field, value_field])), data)
        io, spec = java.io(), java.spec()
        gateway: Any = spark.sparkContext._gateway
        field_ids = gateway.new_array(jvm.int, 1)
        field_ids[0] = 1
        delete_file = (
            jvm.org.apache.iceberg.FileMetadata.deleteFileBuilder(spec)
            .ofEqualityDeletes(field_ids)
            .withPath(str(deletes))
            .withFormat(jvm.org.apache.iceberg.FileFormat.PARQUET)
            .withFileSizeInBytes(deletes.stat().st_size)
            .withRecordCount(len(keys))
            .build()
        )
        metrics = jvm.org.apache.iceberg.parquet.ParquetUtil.fileMetrics(
            io.newInputFile(str(data)), jvm.org.apache.iceberg.MetricsConfig.forTable(java)
        )
        data_file = (
            jvm.org.apache.iceberg.DataFiles.builder(spec)
            .withPath(str(data))
            .withFormat(jvm.org.apache.iceberg.FileFormat.PARQUET)
            .withFileSizeInBytes(data.stat().st_size)
            .withMetrics(metrics)
            .build()
        )
        java.newRowDelta().addRows(data_file).addDeletes(delete_file).commit()

    def _stream_rows(self) -> Rows:
        table = self.lake.rest.load_table(f"{self.ns}.stream")
        read = table.scan().to_arrow()
        return dict(zip(read["id"].to_pylist(), read["v"].to_pylist(), strict=True))

    def _stream_op(self, rng: random.Random, number: int) -> None:
        table_name = f"lake.{self.ns}.stream"
        rows, tag = self.models[table_name], f"s{number}"
        after = dict(rows)
        if number < 2 or not rows or rng.random() < 0.75:
            start, count = number * 1000, rng.randint(10, 300)
            after.update(dict.fromkeys(range(start, start + count), tag))
            batch = pa.table(
                {"id": pa.array(range(start, start + count), pa.int64()), "v": pa.array([tag] * count)},
                _ARROW_SCHEMA,
            )

            def attempt() -> None:
                self.lake.rest.load_table(f"{self.ns}.stream").append(batch)

        else:  # copy-on-write: the files holding the range are rewritten without it
            low = rng.choice(sorted(rows))
            high = low + rng.randint(10, 200)
            after = {k: v for k, v in rows.items() if not low <= k < high}

            def attempt() -> None:
                table = self.lake.rest.load_table(f"{self.ns}.stream")
                table.delete(f"id >= {low} and id < {high}")

        self._apply(table_name, after, attempt, self._stream_rows)  # a 409 (lost race) resolves as not applied

    # ---- faults
    def _faults(self) -> None:
        lake, rng = self.lake, self.rng
        for _ in range(self.fault_count):
            time.sleep(rng.uniform(0.5, 6.0))
            if not self._writing.is_set():
                return
            fault = rng.choice(FAULTS)
            pause = rng.uniform(0.5, 6.0)
            self.outcome.faults.append(f"{fault} ({pause:.1f}s)")
            proc = lake.server.proc
            if fault == "kill-server":
                self.outcome.faults[-1] += lake.stop_server(signal.SIGKILL)
                time.sleep(pause)
                lake.server_up()
            elif fault == "stop-server" and proc is not None:
                self._pause(proc.pid, False, pause)
            elif fault == "restart-server":
                self.outcome.faults[-1] += lake.stop_server(signal.SIGTERM)
                lake.server_up()
            elif fault.endswith("optimizer") or fault == "kill-optimizer-jvm":
                pid = next(iter(lake.optimizers()), None)
                if pid is None:
                    self.outcome.faults[-1] += ": no optimizer running"
                    continue
                if fault == "kill-optimizer":
                    _signal_group(pid, signal.SIGKILL)
                elif fault == "stop-optimizer":
                    self._pause(pid, True, pause)
                else:
                    jvms = [p for p, name in descendants(pid) if name == "java"]
                    for jvm in jvms:
                        _signal(jvm, signal.SIGKILL)
            elif fault == "storage-fails":
                location = rng.choice(sorted(self.locations.values()))
                with self._lock:
                    self._immutable.append(location)
                _immutable(location, True)
                time.sleep(pause)
                _immutable(location, False)
                with self._lock:
                    self._immutable.remove(location)

    def _pause(self, pid: int, group: bool, seconds: float) -> None:
        (_signal_group if group else _signal)(pid, signal.SIGSTOP)
        with self._lock:
            self._stopped.append((pid, group))
        time.sleep(seconds)
        (_signal_group if group else _signal)(pid, signal.SIGCONT)
        with self._lock:
            self._stopped.remove((pid, group))

    # ---- settling and checking
    def undo_faults(self) -> None:
        with self._lock:
            for pid, group in self._stopped:
                (_signal_group if group else _signal)(pid, signal.SIGCONT)
            for location in self._immutable:
                _immutable(location, False)
        self.lake.server_up()

    def _processes(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        for table in self.models:
            catalog, _, name = table.partition(".")
            response = self.lake.api.get("/processes", params={"table": f"{catalog}.{name}", "limit": 10000})
            if response.status_code == 404:  # not yet known to lakewarden
                continue
            response.raise_for_status()
            found.extend(response.json())
        return found

    def _api_until_answered(self, call: Callable[[], Any]) -> Any:
        deadline = time.monotonic() + TIMEOUT
        while True:
            try:
                return call()
            except (httpx.HTTPError, OSError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(1.0)

    def settle(self) -> None:
        """Faults undone, then every process of the schedule's tables must end within two timeouts; then
        optimizing and expiry are turned off on them, so nothing changes them but the checks' own cleanup."""
        self.undo_faults()
        settled_by = time.monotonic() + 2 * TIMEOUT
        off = {
            "self-optimizing.enabled": "false",
            "table-expire.enabled": "false",
            "clean-dangling-delete-files.enabled": "false",
            "clean-orphan-file.min-existing-time-minutes": "0",
        }
        for table in self.models:
            if table.startswith("local."):
                text = ", ".join(f"'{k}'='{v}'" for k, v in off.items())
                self.lake.spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ({text})")
            else:
                for _ in range(10):  # lost a race with an optimizer's commit: again on the new metadata
                    try:
                        stream = self.lake.rest.load_table(table.removeprefix("lake."))
                        with stream.transaction() as tx:
                            tx.set_properties(off)
                        break
                    except CommitFailedException:
                        time.sleep(0.5)
        self.lake.api.post("/catalogs/local/refresh")
        while True:
            running = [p for p in self._api_until_answered(self._processes) if p["status"] == "running"]
            if not running:
                break
            if time.monotonic() > settled_by:
                for process in running:
                    tasks = ", ".join(f"{t['task_id']}:{t['status']}" for t in process["tasks"])
                    self.problem(
                        f"process {process['process_id']} ({process['action']} of {process['table']}) still running "
                        f"{2 * TIMEOUT:.0f}s after the faults ended; tasks {tasks}"
                    )
                return
            time.sleep(1.0)
        for pid in sorted(self.lake.orphaned):  # an optimizer whose server went away leaves by itself, in time
            while _alive(pid) and time.monotonic() < settled_by:
                time.sleep(1.0)
            if _alive(pid):
                self.problem(
                    f"optimizer {pid} of a stopped server still runs {2 * TIMEOUT:.0f}s after the faults ended"
                )
                _signal_group(pid, signal.SIGKILL)
            self.lake.orphaned.discard(pid)

    def check(self) -> None:
        processes = self._processes()
        for process in processes:
            status = process["status"]
            kind = f"{process['action']} {status}"
            self.outcome.processes[kind] = self.outcome.processes.get(kind, 0) + 1
            for task in process["tasks"]:
                if status != "running" and task["status"] not in ("success", "failed", "canceled"):
                    self.problem(
                        f"process {process['process_id']} ended {status} with task {task['task_id']} {task['status']}"
                    )
        for table, model in self.models.items():
            try:
                found = self._stream_rows() if table.startswith("lake.") else self._spark_rows(table)
            except Exception as exc:  # a file a snapshot names is gone, most likely
                self.problem(f"{table} cannot be read: {type(exc).__name__}: {str(exc)[:300]}")
                continue
            if found != model:
                self.problem(f"{table}: rows differ from the model: {_diff(model, found)}")
            try:
                self._check_files(table)
            except Exception as exc:  # e.g. its metadata file is gone: the table cannot be loaded
                self.problem(f"{table}: the file checks broke off: {type(exc).__name__}: {str(exc)[:400]}")

    def _check_files(self, table: str) -> None:
        """Live files all exist; after lakewarden's orphan cleanup (no minimum age), nothing else is there."""
        before = self._named_files(table)
        missing = sorted(p for p in before if not Path(p).exists())
        if missing:
            self.problem(f"{table}: {len(missing)} live file(s) deleted, e.g. {missing[0]}")
        catalog, _, name = table.partition(".")
        if catalog == "local":
            self.lake.api.post("/catalogs/local/refresh")
        created = self.lake.api.post(f"/tables/{catalog}/{name.replace('.', '/')}/actions/clean-orphan-files")
        if created.status_code != 201:
            self.problem(f"{table}: orphan cleanup could not start: {created.status_code} {created.text[:200]}")
            return
        process_id = created.json()["process_id"]
        deadline = time.monotonic() + TIMEOUT
        while (process := self.lake.api.get(f"/processes/{process_id}").json())["status"] == "running":
            if time.monotonic() > deadline:
                self.problem(f"{table}: orphan cleanup {process_id} did not end in {TIMEOUT:.0f}s")
                return
            time.sleep(0.5)
        if process["status"] != "success":
            self.problem(f"{table}: orphan cleanup {process_id} ended {process['status']}: {str(process)[:400]}")
            return
        after = self._named_files(table)
        if after != before:
            self.problem(f"{table}: orphan cleanup changed the table's metadata")
        # Hadoop's local file system keeps a `.<name>.crc` beside what it writes and hides it from listings, as
        # Iceberg's orphan cleanup lists: those are not counted
        on_disk = {str(p) for p in self.locations[table].rglob("*") if p.is_file() and not p.name.endswith(".crc")}
        left = sorted(on_disk - after)
        if left:
            self.problem(f"{table}: {len(left)} orphan(s) left after cleanup, e.g. {left[0]}")

    def _named_files(self, table: str) -> set[str]:
        """Every file the table's metadata names: its metadata files (current and logged), and each retained
        snapshot's manifest list, manifests, data and delete files."""
        if table.startswith("lake."):
            loaded = self.lake.rest.load_table(table.removeprefix("lake."))
            metadata, io, current = loaded.metadata, loaded.io, loaded.metadata_location
        else:
            from pyiceberg.catalog.sql import SqlCatalog

            sql = SqlCatalog("local", **self.lake.local_properties)
            loaded = sql.load_table(table.removeprefix("local."))
            metadata, io, current = loaded.metadata, loaded.io, loaded.metadata_location
        named = {current, *(entry.metadata_file for entry in metadata.metadata_log)}
        for snapshot in metadata.snapshots:
            named.add(snapshot.manifest_list)
            for manifest in snapshot.manifests(io):
                named.add(manifest.manifest_path)
                for entry in manifest.fetch_manifest_entry(io, discard_deleted=True):
                    named.add(entry.data_file.file_path)
        return {_local(path) for path in named}


def _local(location: str) -> str:
    """A path of the local file system from a location (`file:/…`, `file:///…` or a plain path)."""
    return "/" + location.removeprefix("file:").lstrip("/")


_ARROW_SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])


def _diff(expected: Rows, found: Rows) -> str:
    missing = sorted(set(expected) - set(found))
    extra = sorted(set(found) - set(expected))
    changed = sorted(k for k in set(expected) & set(found) if expected[k] != found[k])
    parts = [
        f"{len(missing)} missing (e.g. {missing[:3]})" if missing else "",
        f"{len(extra)} unexpected (e.g. {extra[:3]})" if extra else "",
        f"{len(changed)} with another value (e.g. {[(k, expected[k], found[k]) for k in changed[:3]]})"
        if changed
        else "",
    ]
    return "; ".join(p for p in parts if p) or "the same ids and values"


def run_schedule(lake: Lake, seed: int, ops: int = 8, faults: int = 3) -> Outcome:
    schedule = Schedule(lake, seed, ops, faults)
    try:
        return schedule.run()
    finally:
        schedule.undo_faults()


@contextlib.contextmanager
def chaos_lake(tmp_path: Path, spark: SparkSession) -> Iterator[Lake]:
    """A server for chaos runs, with one optimizer of its local container, and the writers' Spark on it."""
    server = ServerProcess(tmp_path, extra=SERVER_SETTINGS, maintenance=MAINTENANCE, log_level="warning")
    server.start()
    try:
        yield Lake(server, spark)
    finally:
        for name in ("local", "lake"):
            spark.conf.unset(f"spark.sql.catalog.{name}.cache-enabled")
        if server.proc is not None and server.proc.poll() is None:
            server.proc.send_signal(signal.SIGCONT)
            server.stop()
