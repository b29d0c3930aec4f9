"""Prometheus metrics at `/metrics`.

Table, process, group and maintenance numbers are read from the system database at scrape time
(a custom collector), so they are right after a restart and never drift from what the API shows.
What this node's services hold in memory (caches, lines, waiting polls) is in api/node_metrics.py.
API latency is a histogram per method, route template and status, observed by a small ASGI
middleware.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from lakewarden.domain.processes import Action
from lakewarden.domain.tables import TableStatus
from lakewarden.protocol.results import MAINTENANCE_TOTALS
from lakewarden.store import processes as processes_store
from lakewarden.store import reads, stats
from lakewarden.store.database import Database, utcnow

TABLE = ["catalog", "database", "table"]
FAILURES_LOOKED_AT = 20  # failures in a row are counted over a table's newest processes of each action
OPTIMIZING_RESULTS = {"files_in": "files", "files_out": "files", "bytes_in": "bytes", "bytes_out": "bytes"}


class DatabaseCollector(Collector):
    def __init__(self, db: Database) -> None:
        self.db = db

    def collect(self) -> Iterator[Metric]:
        with self.db.read() as session:
            tables = stats.table_gauges(session)
            totals = stats.process_totals(session)
            load = stats.group_load(session)
            catalogs = stats.catalog_health(session)
            group_usage = stats.group_usage(session)
            failing = processes_store.failure_streaks(session, [a.value for a in Action], depth=FAILURES_LOOKED_AT)
            scans = reads.scan_gauges(session, utcnow() - timedelta(hours=1))
        yield from self._tables(tables)
        yield from self._reads(scans)
        yield from self._alerting(tables, failing)
        yield from self._processes(totals)
        yield from self._groups(load, tables)
        group_cost = CounterMetricFamily(
            "lakewarden_group_cost", "What the group's ended processes cost (the server's currency)", labels=["group"]
        )
        group_cpu = CounterMetricFamily(
            "lakewarden_group_spark_cpu_seconds", "Spark executor CPU time of the group's processes", labels=["group"]
        )
        for group, usage in sorted(group_usage.items()):
            group_cost.add_metric([group], float(usage["cost"]))
            group_cpu.add_metric([group], usage["spark_cpu_ms"] / 1000.0)
        yield from (group_cost, group_cpu)
        health = GaugeMetricFamily(
            "lakewarden_catalog_healthy", "1 when the catalog's last listing worked", labels=["catalog"]
        )
        for name, state in catalogs:
            health.add_metric([name], 0.0 if state == "unhealthy" else 1.0)
        yield health

    @staticmethod
    def _alerting(tables: list[stats.TableGauge], failing: dict[tuple[int, str], tuple[int, Any]]) -> Iterator[Metric]:
        """What a human should look at (deploy/prometheus/alerts.yml): how long each table has been in its status
        (pending for hours: no thread got to it), and actions failing in a row on a table."""
        now = time.time()
        since = GaugeMetricFamily(
            "lakewarden_table_status_seconds",
            "Seconds the table has been in its current status",
            labels=[*TABLE, "status", "group"],
        )
        for t in tables:
            since.add_metric(
                [t.catalog, t.database, t.table, TableStatus(t.status_code).label, t.group],
                max(0.0, now - t.status_since.timestamp()),
            )
        streaks = GaugeMetricFamily(
            "lakewarden_table_failures_in_a_row",
            f"Newest processes of the action that failed in a row (up to {FAILURES_LOOKED_AT}); tables whose "
            "newest process of the action failed only",
            labels=[*TABLE, "action"],
        )
        names = {t.table_id: [t.catalog, t.database, t.table] for t in tables}
        for (table_id, action), (count, _) in sorted(failing.items()):
            if table_id in names:
                streaks.add_metric([*names[table_id], action], float(count))
        yield from (since, streaks)

    @staticmethod
    def _reads(scans: list[reads.ScanGauge]) -> Iterator[Metric]:
        """How each table was read over the last hour (services/tables/reads.py): tables nobody scanned have none."""
        count = GaugeMetricFamily(
            "lakewarden_table_scans_last_hour", "Scans of the table in the last hour", labels=TABLE
        )
        files = GaugeMetricFamily(
            "lakewarden_table_files_per_scan",
            "Data and delete files a scan of the table planned, on average over the last hour",
            labels=TABLE,
        )
        deletes = GaugeMetricFamily(
            "lakewarden_table_delete_files_per_scan",
            "Delete files a scan of the table planned, on average over the last hour",
            labels=TABLE,
        )
        for g in scans:
            labels = [g.catalog, g.namespace, g.table]
            count.add_metric(labels, float(g.scans))
            files.add_metric(labels, g.files)
            deletes.add_metric(labels, g.delete_files)
        yield from (count, files, deletes)

    @staticmethod
    def _tables(tables: list[stats.TableGauge]) -> Iterator[Metric]:
        status = GaugeMetricFamily(
            "lakewarden_table_status", "1 for the status the table is in", labels=[*TABLE, "status"]
        )
        files = GaugeMetricFamily(
            "lakewarden_table_files", "Live files of the current snapshot", labels=[*TABLE, "content"]
        )
        size = GaugeMetricFamily("lakewarden_table_size_bytes", "Bytes of the current snapshot's files", labels=TABLE)
        for t in tables:
            catalog, database, table, summary = t.catalog, t.database, t.table, t.summary
            status.add_metric([catalog, database, table, TableStatus(t.status_code).label], 1.0)
            files.add_metric([catalog, database, table, "data"], float(summary.get("data-files", 0)))
            files.add_metric([catalog, database, table, "delete"], float(summary.get("delete-files", 0)))
            size.add_metric([catalog, database, table], float(summary.get("files-size-bytes", 0)))
        yield from (status, files, size)

    @staticmethod
    def _processes(totals: list[stats.ProcessTotals]) -> Iterator[Metric]:
        processes = CounterMetricFamily(
            "lakewarden_processes",
            "Processes by table, action, type and status",
            labels=[*TABLE, "action", "type", "status"],
        )
        seconds = CounterMetricFamily(
            "lakewarden_optimizing_seconds", "Time ended optimizing processes took", labels=[*TABLE, "type"]
        )
        moved = {
            key: CounterMetricFamily(
                f"lakewarden_optimizing_{key}",
                f"{unit.capitalize()} {key.split('_')[1]} of successful optimizing processes",
                labels=TABLE,
            )
            for key, unit in OPTIMIZING_RESULTS.items()
        }
        maintenance = {
            key: CounterMetricFamily(
                f"lakewarden_maintenance_{key}",
                f"{key.replace('_', ' ').capitalize()} by successful maintenance processes",
                labels=["action"],
            )
            for key in MAINTENANCE_TOTALS
        }
        yields = CounterMetricFamily(
            "lakewarden_optimizing_yields",
            "Times work of a table's optimizing processes was undone for a writer (docs/rest-catalog.md)",
            labels=TABLE,
        )
        yielded_cpu = CounterMetricFamily(
            "lakewarden_optimizing_yielded_cpu_seconds",
            "CPU the optimizing work later undone for writers had cost",
            labels=TABLE,
        )
        undone: dict[tuple[str, ...], tuple[float, float]] = {}
        per_action: dict[tuple[str, str], float] = {}
        per_table: dict[tuple[str, ...], float] = {}
        for row in totals:
            labels = [row.catalog, row.database, row.table]
            processes.add_metric([*labels, row.action, row.type, row.status], float(row.count))
            if row.action == Action.OPTIMIZING and row.status != "running":
                key = (*labels, row.type)
                per_table[key] = per_table.get(key, 0) + row.sums["duration_ms"]
            if row.status != "success":
                continue
            if row.action == Action.OPTIMIZING:
                for field in moved:
                    per_table[(*labels, field)] = per_table.get((*labels, field), 0) + row.sums[field]
                count, cpu_ms = undone.get(tuple(labels), (0.0, 0.0))
                undone[tuple(labels)] = (count + row.sums["yields"], cpu_ms + row.sums["yielded_cpu_ms"])
            else:
                for field in MAINTENANCE_TOTALS:
                    per_action[(row.action, field)] = per_action.get((row.action, field), 0) + row.sums[field]
        for key, value in per_table.items():
            if key[3] in moved:
                moved[key[3]].add_metric(list(key[:3]), float(value))
            else:
                seconds.add_metric(list(key), value / 1000.0)
        for (action, field), value in per_action.items():
            maintenance[field].add_metric([action], float(value))
        for table, (count, cpu_ms) in undone.items():
            yields.add_metric(list(table), count)
            yielded_cpu.add_metric(list(table), cpu_ms / 1000.0)
        yield from (processes, seconds, *moved.values(), *maintenance.values(), yields, yielded_cpu)
        yield from DatabaseCollector._usage(totals)

    @staticmethod
    def _usage(totals: list[stats.ProcessTotals]) -> Iterator[Metric]:
        """What Spark measured of every ended process (whatever its status: a failed one ran too), and its cost."""
        labels = [*TABLE, "action"]
        families = {
            field: CounterMetricFamily(f"lakewarden_{name}", text, labels=labels)
            for field, name, text in (
                ("spark_cpu_ms", "spark_cpu_seconds", "Spark executor CPU time of processes"),
                ("spark_whole_cpu_ms", "process_cpu_seconds", "All the CPU of processes: optimizer and executors"),
                ("spark_run_ms", "spark_core_seconds", "Spark executor run time (a core held) of processes"),
                ("spark_read_bytes", "spark_read_bytes", "Bytes Spark read for processes"),
                ("spark_written_bytes", "spark_written_bytes", "Bytes Spark wrote for processes"),
                ("spark_tasks", "spark_tasks", "Spark tasks run for processes"),
                ("cost", "process_cost", "What processes cost at their group's price (the server's currency)"),
            )
        }
        per_key: dict[tuple[str, ...], float] = {}
        for row in totals:
            for field in families:
                key = (row.catalog, row.database, row.table, row.action, field)
                per_key[key] = per_key.get(key, 0) + row.sums.get(field, 0)
        for summed, value in per_key.items():
            scale = 1000.0 if summed[-1].endswith("_ms") else 1.0
            families[summed[-1]].add_metric(list(summed[:-1]), value / scale)
        yield from families.values()

    @staticmethod
    def _groups(load: dict[str, stats.GroupGauge], tables: list[stats.TableGauge]) -> Iterator[Metric]:
        threads = GaugeMetricFamily("lakewarden_group_threads", "Optimizer threads of the group", labels=["group"])
        busy = GaugeMetricFamily("lakewarden_group_threads_busy", "Threads running a task", labels=["group"])
        queued = GaugeMetricFamily(
            "lakewarden_group_queued_tasks", "Planned tasks waiting for a thread", labels=["group"]
        )
        pending = GaugeMetricFamily("lakewarden_group_pending_tables", "Tables waiting to be planned", labels=["group"])
        optimizers = GaugeMetricFamily("lakewarden_group_optimizers", "Live optimizers of the group", labels=["group"])
        managed = GaugeMetricFamily("lakewarden_group_tables", "Tables the group optimizes", labels=["group"])
        waiting: dict[str, int] = {}
        counted: dict[str, int] = {}
        for t in tables:
            counted[t.group] = counted.get(t.group, 0) + 1
            if t.status_code == TableStatus.PENDING:
                waiting[t.group] = waiting.get(t.group, 0) + 1
        for group in sorted(set(load) | set(counted)):
            g = load.get(group, stats.GroupGauge(0, 0, 0, 0))
            threads.add_metric([group], float(g.threads))
            busy.add_metric([group], float(g.busy))
            queued.add_metric([group], float(g.queued))
            pending.add_metric([group], float(waiting.get(group, 0)))
            optimizers.add_metric([group], float(g.optimizers))
            managed.add_metric([group], float(counted.get(group, 0)))
        yield from (threads, busy, queued, pending, optimizers, managed)


def api_latency(registry: CollectorRegistry) -> Histogram:
    return Histogram(
        "lakewarden_http_request_duration_seconds",
        "API latency by method, route and status",
        ["method", "route", "status"],
        registry=registry,
        buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
    )


UNMATCHED = "unmatched"  # the route of a request answered before routing, or that no route takes


class LatencyMiddleware:
    """Observes every HTTP request's duration under its route template (never the raw path)."""

    def __init__(self, app: Any, histogram: Histogram) -> None:
        self.app = app
        self.histogram = histogram
        # the histogram's child of each (method, route, status), kept: prometheus-client looks it up under a
        # lock with its labels checked on every call, half the middleware's time
        self._children: dict[tuple[str, str, int], Any] = {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        sending = StatusOf(send)
        try:
            await self.app(scope, receive, sending)
        finally:
            self.observe(scope["method"], _template(scope), sending.status, time.perf_counter() - started)

    def observe(self, method: str, template: str, status: int, seconds: float) -> None:
        key = (method, template, status)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self.histogram.labels(method, template, str(status))
        child.observe(seconds)


class StatusOf:
    """An ASGI `send` that remembers the response's status (500 until one is sent)."""

    def __init__(self, send: Any) -> None:
        self.send = send
        self.status = 500

    async def __call__(self, message: Any) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
        await self.send(message)


def _template(scope: Any) -> str:
    """The matched route's path template (`/api/v1/tables/{catalog}/…`), or "unmatched"."""
    context = (scope.get("fastapi") or {}).get("effective_route_context")
    template = getattr(context, "path_format", None)
    if template:
        return str(template)
    if scope.get("route") is None:
        return UNMATCHED
    by_value = {str(v): k for k, v in (scope.get("path_params") or {}).items()}
    return "/".join(f"{{{by_value[part]}}}" if part in by_value else part for part in scope["path"].split("/"))
