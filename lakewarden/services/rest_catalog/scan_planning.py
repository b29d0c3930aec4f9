"""The REST catalog's server-side scan planning (`…/plan`, `…/plan/{plan-id}`, `…/tasks`).

A scan is planned in a worker thread from the table's cached manifests (metadata/scan_planning.py). Within
`sync_seconds` the answer is `completed`, the first plan task inline and the others to fetch; otherwise it is
`submitted` and polled by plan id. Plan tasks are cut by bytes from the table's split settings, the first small so
a reader starts at once. A plan's state lives in memory until fetched, cancelled or left alone for `ttl_seconds`."""

from __future__ import annotations

import functools
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError
from pyiceberg.catalog.rest.scan_planning import PlanTableScanRequest
from pyiceberg.expressions import AlwaysFalse, AlwaysTrue, BooleanExpression
from pyiceberg.table.metadata import TableMetadata

from lakewarden.domain.affinity import MAX_HOSTS, MAX_REPLICAS, HashRing
from lakewarden.domain.errors import InvalidField, LakewardenError, NoSuchPlan, NoSuchPlanTask
from lakewarden.domain.lru import SizedLRU
from lakewarden.domain.reads import ReadReport, ReportSource, scan_report
from lakewarden.metadata.content_files import content_file_json
from lakewarden.metadata.files import identity_fields
from lakewarden.metadata.manifest_cache import ManifestCache
from lakewarden.metadata.scan_planning import (
    Plan,
    PlannedFile,
    ScanRequest,
    delete_key,
    plan_scan,
)
from lakewarden.services.rest_catalog.loads import Delegation, TableLoads
from lakewarden.services.rest_catalog.warehouses import Warehouses

DEFAULT_SPLIT_SIZE = 128 * 1024 * 1024  # Iceberg's read.split.target-size default
DEFAULT_OPEN_COST = 4 * 1024 * 1024  # read.split.open-file-cost
PLAN_TASK_SPLITS = 8  # splits' worth of files in a plan task after the first
PLAN_TASK_MAX_FILES = 2000
RESULTS_KEPT_TASKS = 200_000  # file scan tasks kept in all by the cache of planning results
AFFINITY = "lakewarden-affinity"  # the request's extension: the reader's hosts
PREFERRED_HOSTS = "lakewarden-preferred-hosts"  # each file scan task's: its hosts, most preferred first


@dataclass
class _PlanState:
    table: tuple[str, str, str]
    future: Future[list[dict[str, Any]]]
    touched: float
    chunks: list[dict[str, Any]] | None = None  # each a ScanTasks body (file-scan-tasks, delete-files)
    fetched: set[int] = field(default_factory=set)


class ScanPlanning:
    def __init__(
        self,
        warehouses: Warehouses,
        loads: TableLoads,
        cache: ManifestCache | None = None,
        sync_seconds: float = 30.0,
        ttl_seconds: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
        on_plan: Callable[[tuple[str, str, str], ReadReport], None] | None = None,
    ) -> None:
        self.warehouses = warehouses
        self.on_plan = on_plan  # told of every plan made (services/tables/reads.py keeps them)
        self.loads = loads
        self.cache = cache if cache is not None else ManifestCache()
        self.sync_seconds = sync_seconds
        self.ttl_seconds = ttl_seconds
        self._clock = clock
        self._plans: dict[str, _PlanState] = {}
        self._lock = threading.Lock()
        # planning results by (table, snapshot, request): repeated dashboard and BI scans are not planned again
        # weighed by their file scan tasks
        self.results: SizedLRU[tuple[Any, ...], list[dict[str, Any]]] = SizedLRU(RESULTS_KEPT_TASKS)
        self._workers = ThreadPoolExecutor(max_workers=2, thread_name_prefix="lakewarden-scan-planning")

    # ---- the endpoints

    def submit(
        self,
        catalog: str,
        namespace: str,
        name: str,
        request: PlanTableScanRequest,
        asked: Delegation | None,
        affinity: HashRing | None = None,
        filter_json: Any = None,
        principal: str | None = None,
    ) -> dict[str, Any]:
        """planTableScan: `completed` with tasks, or `submitted` with a plan id. `filter_json` (the request's
        filter as sent) and `principal` (who asked) go into the record of the scan."""
        self._expire()
        loaded = self.loads.load_table(catalog, namespace, name)
        scan = _scan_request(request)
        stats = _stats_field_ids(loaded.metadata, request)
        _check_select(loaded.metadata, request)
        io = self.warehouses.io_of(self.warehouses.catalog(catalog))
        metadata = loaded.metadata
        key = (*_result_key(metadata, request, scan, stats), affinity and (affinity.hosts, affinity.replicas))

        def work() -> list[dict[str, Any]]:
            started = time.perf_counter()
            chunks, manifests = self.results.get(key), 0
            if chunks is None:
                planned = plan_scan(metadata, io, self.cache, scan)
                chunks = _chunks(metadata, planned, stats, affinity, unfiltered=scan.filter == AlwaysTrue())
                self.results.put(key, chunks, sum(len(c["file-scan-tasks"]) for c in chunks))
                manifests = planned.manifests_read
            if self.on_plan is not None:
                took = (time.perf_counter() - started) * 1000
                report = _plan_report(metadata, request, filter_json, chunks, manifests, took, principal)
                self.on_plan((catalog, namespace, name), report)
            return chunks

        plan_id = uuid.uuid4().hex
        state = _PlanState((catalog, namespace, name), self._workers.submit(work), self._clock())
        with self._lock:
            self._plans[plan_id] = state
        if self.sync_seconds <= 0:  # every plan asynchronous
            return {"status": "submitted", "plan-id": plan_id}
        try:
            state.future.result(timeout=self.sync_seconds)
        except TimeoutError:
            return {"status": "submitted", "plan-id": plan_id}
        except LakewardenError:
            self._forget(plan_id)
            raise  # a bad request: the spec's 400 naming the field, not a failed plan
        return self._completed(plan_id, state, catalog, namespace, name, metadata, asked)

    def result(self, catalog: str, namespace: str, name: str, plan_id: str, asked: Delegation | None) -> dict[str, Any]:
        """fetchPlanningResult."""
        state = self._state(catalog, namespace, name, plan_id)
        if not state.future.done():
            return {"status": "submitted"}
        try:
            state.future.result()
        except LakewardenError as exc:
            self._forget(plan_id)
            return {"status": "failed", "error": {"message": str(exc), "type": "BadRequestException", "code": 400}}
        metadata = self.loads.load_table(catalog, namespace, name).metadata
        return self._completed(plan_id, state, catalog, namespace, name, metadata, asked)

    def tasks(self, catalog: str, namespace: str, name: str, plan_task: str) -> dict[str, Any]:
        """fetchScanTasks: one plan task's file scan tasks."""
        plan_id, _, number = plan_task.rpartition("-")
        with self._lock:
            state = self._plans.get(plan_id)
        if state is None or state.table != (catalog, namespace, name) or not number.isdigit():
            raise NoSuchPlanTask(f"plan task {plan_task!r} does not exist (or its plan was cancelled or expired)")
        chunks = state.chunks or []
        index = int(number)
        if not 0 < index < len(chunks):
            raise NoSuchPlanTask(f"plan task {plan_task!r} does not exist")
        state.touched = self._clock()
        with self._lock:
            state.fetched.add(index)
            if len(state.fetched) == len(chunks) - 1:
                self._plans.pop(plan_id, None)  # every plan task fetched: nothing left to keep
        return chunks[index]

    def cancel(self, catalog: str, namespace: str, name: str, plan_id: str) -> None:
        """cancelPlanning: the plan's state is freed (planning that runs is abandoned)."""
        state = self._state(catalog, namespace, name, plan_id)
        state.future.cancel()
        self._forget(plan_id)

    def close(self) -> None:
        self._workers.shutdown(wait=False, cancel_futures=True)

    # ---- state

    def _completed(
        self,
        plan_id: str,
        state: _PlanState,
        catalog: str,
        namespace: str,
        name: str,
        metadata: TableMetadata,
        asked: Delegation | None,
    ) -> dict[str, Any]:
        chunks = state.chunks = state.future.result()
        body: dict[str, Any] = {"status": "completed", **chunks[0]}
        if len(chunks) > 1:
            body["plan-id"] = plan_id
            body["plan-tasks"] = [f"{plan_id}-{i}" for i in range(1, len(chunks))]
            state.touched = self._clock()
        else:
            self._forget(plan_id)
        credentials = self.loads.table_access(catalog, namespace, name, metadata, asked).storage_credentials
        if credentials:
            body["storage-credentials"] = credentials
        return body

    def _state(self, catalog: str, namespace: str, name: str, plan_id: str) -> _PlanState:
        self._expire()
        with self._lock:
            state = self._plans.get(plan_id)
        if state is None or state.table != (catalog, namespace, name):
            raise NoSuchPlan(f"plan {plan_id!r} does not exist (or was cancelled, fetched whole or expired)")
        state.touched = self._clock()
        return state

    def _forget(self, plan_id: str) -> None:
        with self._lock:
            self._plans.pop(plan_id, None)

    def _expire(self) -> None:
        deadline = self._clock() - self.ttl_seconds
        with self._lock:
            for plan_id in [p for p, s in self._plans.items() if s.touched < deadline and s.future.done()]:
                del self._plans[plan_id]

    @property
    def open_plans(self) -> int:
        with self._lock:
            return len(self._plans)


def parse_plan_request(body: dict[str, Any]) -> PlanTableScanRequest:
    """A planTableScan body, checked: InvalidField names the field at fault (pyiceberg's expression parser
    raises TypeError on some malformed expressions; they are the client's errors, not the server's)."""
    without_filter = {k: v for k, v in body.items() if k != "filter"}
    try:
        request = PlanTableScanRequest.model_validate(without_filter)
    except ValidationError as exc:
        raise InvalidField.of_validation(exc, "request") from None
    expression = body.get("filter")
    if expression is None or expression is True:
        return request
    if expression is False:
        return request.model_copy(update={"filter": AlwaysFalse()})
    try:
        parsed = PlanTableScanRequest.model_validate({"filter": expression}).filter
    except (ValidationError, TypeError, ValueError, KeyError, AttributeError, RecursionError) as exc:
        problem = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
        raise InvalidField("filter", f"is not an Iceberg expression: {problem}") from None
    return request.model_copy(update={"filter": parsed})


class _AffinityRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    hosts: list[Annotated[str, StringConstraints(min_length=1, max_length=255)]] = Field(
        min_length=1, max_length=MAX_HOSTS
    )
    replicas: int = Field(1, ge=1, le=MAX_REPLICAS)


def parse_affinity(body: dict[str, Any]) -> HashRing | None:
    """lakewarden's extension of planTableScan, `"lakewarden-affinity": {"hosts": [...], "replicas": 2}`: the
    reader's hosts, for a stable preference of hosts per file (domain/affinity.py), answered in each file
    scan task as `lakewarden-preferred-hosts`. Clients that do not ask get no hint; those that do not know
    the field ignore it."""
    given = body.get(AFFINITY)
    if given is None:
        return None
    try:
        asked = _AffinityRequest.model_validate(given)
    except ValidationError as exc:
        raise InvalidField.of_validation(exc, AFFINITY, nested=True) from None
    return _ring(tuple(sorted(set(asked.hosts))), asked.replicas)


@functools.lru_cache(maxsize=16)
def _ring(hosts: tuple[str, ...], replicas: int) -> HashRing:
    return HashRing(hosts, replicas)


def _result_key(
    metadata: TableMetadata, request: PlanTableScanRequest, scan: ScanRequest, stats: set[int]
) -> tuple[Any, ...]:
    """What decides a planning result: the table's snapshot (a snapshot never changes), its specs, schema
    and split settings, and the request."""
    snapshot = scan.snapshot_id if scan.snapshot_id is not None else metadata.current_snapshot_id
    properties = metadata.properties
    return (
        str(metadata.table_uuid),
        snapshot,
        metadata.current_schema_id,
        metadata.last_partition_id,
        properties.get("read.split.target-size"),
        properties.get("read.split.open-file-cost"),
        scan.filter.model_dump_json() if hasattr(scan.filter, "model_dump_json") else repr(scan.filter),
        scan.case_sensitive,
        scan.use_snapshot_schema,
        scan.start_snapshot_id,
        scan.end_snapshot_id,
        tuple(sorted(stats)),
    )


def _scan_request(request: PlanTableScanRequest) -> ScanRequest:
    row_filter: BooleanExpression = request.filter if request.filter is not None else AlwaysTrue()
    return ScanRequest(
        filter=row_filter,
        case_sensitive=request.case_sensitive,
        snapshot_id=request.snapshot_id,
        use_snapshot_schema=request.use_snapshot_schema,
        start_snapshot_id=request.start_snapshot_id,
        end_snapshot_id=request.end_snapshot_id,
    )


def _field_id(metadata: TableMetadata, name: str, case_sensitive: bool, what: str) -> int:
    try:
        return metadata.schema().find_field(name, case_sensitive).field_id
    except ValueError:
        raise InvalidField(what, f"{name!r} is not a field of the table's schema") from None


def _stats_field_ids(metadata: TableMetadata, request: PlanTableScanRequest) -> set[int]:
    return {_field_id(metadata, n, request.case_sensitive, "stats-fields") for n in request.stats_fields or []}


def _check_select(metadata: TableMetadata, request: PlanTableScanRequest) -> None:
    for name in request.select or []:
        _field_id(metadata, name, request.case_sensitive, "select")


def _chunks(
    metadata: TableMetadata, plan: Plan, stats: set[int], affinity: HashRing | None, unfiltered: bool = False
) -> list[dict[str, Any]]:
    """The plan's file scan tasks cut into plan tasks by bytes (the first small), each with its own
    delete files listed once. `unfiltered`: the scan has no filter, so no task carries a residual (what a
    client applies in its absence, the scan's filter, is `true` too; a client parses a residual per task)."""
    properties = metadata.properties
    split = _size(properties.get("read.split.target-size"), DEFAULT_SPLIT_SIZE)
    open_cost = _size(properties.get("read.split.open-file-cost"), DEFAULT_OPEN_COST)
    groups: list[list[PlannedFile]] = [[]]
    weight = 0
    for planned in plan.files:
        limit = split if len(groups) == 1 else split * PLAN_TASK_SPLITS
        if groups[-1] and (weight >= limit or len(groups[-1]) >= PLAN_TASK_MAX_FILES):
            groups.append([])
            weight = 0
        groups[-1].append(planned)
        weight += max(planned.data_file.file_size_in_bytes, open_cost)
    specs = metadata.specs()
    schema = plan.schema
    return [_scan_tasks(group, specs, schema, stats, affinity, unfiltered) for group in groups]


def _scan_tasks(
    group: list[PlannedFile], specs: Any, schema: Any, stats: set[int], affinity: HashRing | None, unfiltered: bool
) -> dict[str, Any]:
    deletes: list[dict[str, Any]] = []
    index: dict[tuple[str, int | None], int] = {}
    residuals: dict[int, Any] = {}  # one residual per partition: written as JSON once
    tasks = []
    for planned in group:
        references = []
        for f in planned.deletes:
            key = delete_key(f)
            if key not in index:
                index[key] = len(deletes)
                deletes.append(content_file_json(f, specs[f.spec_id], schema))
            references.append(index[key])
        task: dict[str, Any] = {
            "data-file": content_file_json(planned.data_file, specs[planned.data_file.spec_id], schema, stats)
        }
        if references:
            task["delete-file-references"] = references
        # given whenever the scan has a filter (`true` too): a client that gets none falls back to the whole filter
        if not unfiltered:
            residual = residuals.get(id(planned.residual))
            if residual is None:
                residual = residuals[id(planned.residual)] = planned.residual.model_dump(mode="json", by_alias=True)
            task["residual-filter"] = residual
        if affinity is not None:
            task[PREFERRED_HOSTS] = affinity.preferred(planned.data_file.file_path)
        tasks.append(task)
    body: dict[str, Any] = {"file-scan-tasks": tasks}
    if deletes:
        body["delete-files"] = deletes
    return body


def _plan_report(
    metadata: TableMetadata,
    request: PlanTableScanRequest,
    filter_json: Any,
    chunks: list[dict[str, Any]],
    manifests: int,
    planning_ms: float,
    principal: str | None,
) -> ReadReport:
    """A plan as the record of a scan, in the metrics a client's ScanReport carries."""
    tasks = [t["data-file"] for c in chunks for t in c["file-scan-tasks"]]
    deletes = [d for c in chunks for d in c.get("delete-files", [])]
    metrics = {
        "result-data-files": {"value": len(tasks)},
        "result-delete-files": {"value": len(deletes)},
        "total-file-size-in-bytes": {"value": sum(int(f.get("file-size-in-bytes", 0)) for f in tasks)},
        "total-delete-file-size-in-bytes": {"value": sum(int(f.get("file-size-in-bytes", 0)) for f in deletes)},
        "scanned-data-manifests": {"value": manifests},
        "total-planning-duration": {"time-unit": "milliseconds", "total-duration": planning_ms},
    }
    fields = identity_fields(metadata.spec(), metadata.schema())
    snapshot = request.snapshot_id if request.snapshot_id is not None else metadata.current_snapshot_id
    return scan_report(metrics, snapshot, filter_json, {}, principal, fields, ReportSource.SERVER)


def _size(value: str | None, default: int) -> int:
    try:
        return max(1, int(value)) if value else default
    except ValueError:
        return default
