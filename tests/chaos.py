"""Randomized faults, Jepsen-style: a seeded schedule of writers, lakewarden at work and faults, then checks.

One schedule (`run_schedule`) makes three tables in a namespace of its own and runs, at once:
- three writers (tests/chaos_writers.py): Spark's merge-on-read appends, MERGE, UPDATE and DELETE on
  `local.<ns>.mor`, Flink-style upserts with equality deletes on `local.<ns>.cdc`, pyiceberg's appends and
  copy-on-write deletes on `lake.<ns>.stream` (lakewarden's own REST catalog, so server faults hit its commits);
- lakewarden: its evaluator, self-optimizing on its local container's optimizer (a process with its own Spark
  JVM), expiry of snapshots and cleanup of dangling deletes;
- faults at random moments: SIGKILL of the server (restarted after a pause), SIGSTOP of the server, a clean
  restart, SIGKILL or SIGSTOP of the optimizer (with its JVM) or of its Spark JVM alone, and a table's
  storage failing for a moment (tests/chaos_storage.py: on the local disk, every write refused; on S3, every
  request on the table's objects refused with a 503 or 500, or slowed).

The tables live on the local disk, or with `storage="s3"` on an S3 server (moto) reached through a proxy.

The writers keep a model of each table (its rows by id); an operation that raised must have applied entirely
or not at all. Then the schedule settles (faults undone, writers done, optimizing and expiry turned off on its
tables) and is checked:
1. every process and task of its tables reached a terminal state within two timeouts of the settle;
2. no live file was deleted: every file every retained snapshot names exists;
3. each table's rows equal the model, row for row (an append or upsert applied twice, a row lost or
   resurrected by a rewrite, shows here);
4. lakewarden's orphan cleanup, run with no minimum age once nothing writes, leaves no file under the table
   that no retained snapshot or metadata file names (files of killed rewrites and failed commits included).
   Files are listed from the storage itself (the bucket, past the proxy).

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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import CommitFailedException

from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.services.resources.containers import descendants
from lakewarden.spark.session import configure_catalogs
from tests.chaos_storage import LocalStorage, Storage, object_storage
from tests.chaos_writers import Writers, diff
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
PROCESS_FAULTS = (
    "kill-server",
    "stop-server",
    "restart-server",
    "kill-optimizer",
    "stop-optimizer",
    "kill-optimizer-jvm",
)


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
    """What lives across schedules: the server (restarted by faults), the writers' Spark, the REST catalog, the
    storage of the tables."""

    def __init__(self, server: ServerProcess, spark: SparkSession, storage: Storage) -> None:
        self.server = server
        self.spark = spark
        self.storage = storage
        self.api = server.api()
        catalogs = {c["name"]: c for c in self.api.get("/catalogs").json()}
        self.local_properties = {**catalogs["local"]["properties"], **storage.secrets.get("local", {})}
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


class Schedule:
    def __init__(self, lake: Lake, seed: int, ops: int, faults: int) -> None:
        self.lake = lake
        self.seed = seed
        self.rng = random.Random(seed)
        self.fault_count = faults
        self.ns = f"chaos{seed}"
        self.outcome = Outcome(seed)
        self.writers = Writers(lake.spark, lake.rest, self.ns, seed, ops, self.problem, self._count, 3 * TIMEOUT)
        self._stopped: list[tuple[int, bool]] = []  # (pid, whole group) SIGSTOPped and not yet continued
        self._failing: list[tuple[str, str]] = []  # (fault, table location) of storage failing now
        self._lock = threading.Lock()
        self._writing = threading.Event()

    # ---- the run
    def run(self) -> Outcome:
        started = time.monotonic()
        self.writers.create(TABLE_PROPERTIES)
        self.lake.api.post("/catalogs/local/refresh")
        writers = self.writers.threads()
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

    def problem(self, text: str) -> None:
        with self._lock:
            self.outcome.problems.append(text)

    def _count(self, key: str) -> None:
        with self._lock:
            self.outcome.ops[key] += 1

    # ---- faults
    def _faults(self) -> None:
        lake, rng = self.lake, self.rng
        for _ in range(self.fault_count):
            time.sleep(rng.uniform(0.5, 6.0))
            if not self._writing.is_set():
                return
            fault = rng.choice(PROCESS_FAULTS + lake.storage.faults)
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
            elif fault in lake.storage.faults:
                location = rng.choice(sorted(self.writers.locations.values()))
                with self._lock:
                    self._failing.append((fault, location))
                self.outcome.faults[-1] += lake.storage.begin(fault, location, rng)
                time.sleep(pause)
                lake.storage.end(fault, location)
                with self._lock:
                    self._failing.remove((fault, location))

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
            for fault, location in self._failing:
                self.lake.storage.end(fault, location)
        self.lake.server_up()

    def _processes(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        for table in self.writers.models:
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
        for table in self.writers.models:
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
        for table, model in self.writers.models.items():
            try:
                found = self.writers.rows(table)
            except Exception as exc:  # a file a snapshot names is gone, most likely
                self.problem(f"{table} cannot be read: {type(exc).__name__}: {str(exc)[:300]}")
                continue
            if found != model:
                self.problem(f"{table}: rows differ from the model: {diff(model, found)}")
            try:
                self._check_files(table)
            except Exception as exc:  # e.g. its metadata file is gone: the table cannot be loaded
                self.problem(f"{table}: the file checks broke off: {type(exc).__name__}: {str(exc)[:400]}")

    def _check_files(self, table: str) -> None:
        """Live files all exist; after lakewarden's orphan cleanup (no minimum age), nothing else is there."""
        storage = self.lake.storage
        before = self._named_files(table)
        missing = sorted(before - storage.files(self.writers.locations[table]))
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
        left = sorted(storage.files(self.writers.locations[table]) - after)
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
        return {self.lake.storage.key(path) for path in named}


def run_schedule(lake: Lake, seed: int, ops: int = 8, faults: int = 3) -> Outcome:
    schedule = Schedule(lake, seed, ops, faults)
    try:
        return schedule.run()
    finally:
        schedule.undo_faults()


@contextlib.contextmanager
def chaos_lake(tmp_path: Path, spark: SparkSession, storage: str = "local") -> Iterator[Lake]:
    """A server for chaos runs, with one optimizer of its local container, and the writers' Spark on it; its
    tables on the local disk or (`s3`) on an S3 server."""
    with contextlib.ExitStack() as stack:
        store: Storage = LocalStorage()
        if storage == "s3":
            store = stack.enter_context(object_storage(tmp_path / "data"))
        yield stack.enter_context(_lake(tmp_path, spark, store))


@contextlib.contextmanager
def _lake(tmp_path: Path, spark: SparkSession, storage: Storage) -> Iterator[Lake]:
    server = ServerProcess(
        tmp_path, extra=SERVER_SETTINGS, maintenance=MAINTENANCE, log_level="warning", catalogs=storage.catalogs
    )
    server.start()
    try:
        yield Lake(server, spark, storage)
    finally:
        for name in ("local", "lake"):
            spark.conf.unset(f"spark.sql.catalog.{name}.cache-enabled")
        if server.proc is not None and server.proc.poll() is None:
            server.proc.send_signal(signal.SIGCONT)
            server.stop()
