"""Hudi tables as lakewarden sees them: their timeline, their file groups, and what Hudi's own table services
would do next (pure rules; metadata/hudi.py reads the table).

The timeline is read from the instant files' names, as Hudi's `HoodieInstant` does, for both timeline layouts.
The rules are Hudi's own service triggers with their defaults (compaction after delta commits, clustering of small
base files, cleaning of unreadable slices, archiving), each need naming the Spark procedure that does the work.
docs/formats.md lists them."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from lakewarden.domain.durations import format_duration

REQUESTED, INFLIGHT, COMPLETED = "requested", "inflight", "completed"
# actions whose completed instant is a write of data (a compaction completes as a commit)
WRITES = frozenset({"commit", "deltacommit", "replacecommit"})
ACTIONS = frozenset(
    {
        "commit",
        "deltacommit",
        "replacecommit",
        "compaction",
        "logcompaction",
        "clustering",
        "clean",
        "rollback",
        "savepoint",
        "restore",
        "indexing",
    }
)
# layout 1 names a commit's inflight state `<instant>.inflight`, without the action
_INSTANT = re.compile(r"^(\d{14,17})(?:_(\d{14,17}))?\.([a-z]+)(?:\.(requested|inflight))?$")
_BASE_FILE = re.compile(r"^(?P<id>.+)_(?P<token>\d+-\d+-\d+)_(?P<instant>\d{14,17})\.(?P<ext>parquet|orc|hfile|lance)$")
_LOG_FILE = re.compile(r"^\.(?P<id>.+)_(?P<instant>\d{14,17})\.log\.(?P<version>\d+)(?:_(?P<token>\d+-\d+-\d+))?$")

MAX_DELTA_COMMITS = ("hoodie.compact.inline.max.delta.commits", 5)
CLUSTERING_SMALL_FILE_LIMIT = ("hoodie.clustering.plan.strategy.small.file.limit", 314_572_800)
CLUSTERING_MAX_COMMITS = ("hoodie.clustering.inline.max.commits", 4)
COMMITS_RETAINED = ("hoodie.cleaner.commits.retained", 10)
KEEP_MAX_COMMITS = ("hoodie.keep.max.commits", 30)
SMALL_FILES_FOR_CLUSTERING = 2  # the fewest small files clustering can merge into fewer


@dataclass(frozen=True, order=True)
class Instant:
    """One instant of the active timeline, in its newest state."""

    timestamp: str
    action: str
    state: str
    completed_at: str | None = None  # layout 2 names when it completed

    @property
    def time(self) -> datetime | None:
        return instant_time(self.timestamp)


def instant_time(timestamp: str) -> datetime | None:
    """An instant time (yyyyMMddHHmmss[SSS], in UTC as lakewarden reads it) as a datetime."""
    try:
        moment = datetime.strptime(timestamp[:14], "%Y%m%d%H%M%S").replace(tzinfo=UTC)
    except ValueError:
        return None
    millis = timestamp[14:17]
    return moment.replace(microsecond=int(millis) * 1000) if millis.isdigit() else moment


def parse_instant(file_name: str) -> Instant | None:
    """The instant an instant file names; None for any other file of `.hoodie`."""
    if file_name.endswith(".inflight") and file_name.count(".") == 1:  # layout 1's commit inflight
        file_name = file_name.replace(".inflight", ".commit.inflight")
    match = _INSTANT.match(file_name)
    if match is None or match.group(3) not in ACTIONS:
        return None
    timestamp, completion, action, state = match.groups()
    return Instant(timestamp, action, state or COMPLETED, completion)


def timeline_of(file_names: Sequence[str]) -> list[Instant]:
    """Each instant once, in its newest state (completed over inflight over requested), oldest first. A
    compaction or clustering that completed is shown once, as its completed commit."""
    rank = {REQUESTED: 0, INFLIGHT: 1, COMPLETED: 2}
    newest: dict[str, Instant] = {}
    for name in file_names:
        found = parse_instant(name)
        if found is None:
            continue
        known = newest.get(found.timestamp)
        if known is None or rank[found.state] > rank[known.state]:
            newest[found.timestamp] = found
    return sorted(newest.values())


@dataclass(frozen=True)
class FileSlice:
    """A file group's slice: the base file written at `base_instant` (None for a slice of log files only) and
    the log files written on it since."""

    partition: str
    file_id: str
    base_instant: str
    base_file: str | None
    base_size: int
    log_files: tuple[tuple[str, int], ...] = ()

    @property
    def size(self) -> int:
        return self.base_size + sum(size for _, size in self.log_files)


def slices_of(partition: str, files: Sequence[tuple[str, int]]) -> list[FileSlice]:
    """A partition's file slices from its files (name, size), as Hudi's file-system view groups them: by file id
    and the instant of the base file a log file was written on. Files not of Hudi's names are left out."""
    bases: dict[tuple[str, str], tuple[str, int]] = {}
    logs: dict[tuple[str, str], list[tuple[int, str, int]]] = {}
    for name, size in files:
        if (base := _BASE_FILE.match(name)) is not None:
            bases[(base["id"], base["instant"])] = (name, size)
        elif (log := _LOG_FILE.match(name)) is not None:
            logs.setdefault((log["id"], log["instant"]), []).append((int(log["version"]), name, size))
    slices = []
    for key in sorted(set(bases) | set(logs)):
        base_file, base_size = bases.get(key, (None, 0))
        ordered = tuple((name, size) for _, name, size in sorted(logs.get(key, [])))
        slices.append(FileSlice(partition, key[0], key[1], base_file, base_size, ordered))
    return slices


@dataclass(frozen=True)
class HudiTableState:
    """What was read of a Hudi table."""

    name: str
    table_type: str  # COPY_ON_WRITE or MERGE_ON_READ
    properties: Mapping[str, str]
    timeline: list[Instant]
    slices: list[FileSlice]  # every slice on storage, of every partition
    partitions: list[str]

    @property
    def mor(self) -> bool:
        return self.table_type == "MERGE_ON_READ"

    def completed(self, actions: frozenset[str] = WRITES) -> list[Instant]:
        return [i for i in self.timeline if i.state == COMPLETED and i.action in actions]

    def pending(self, action: str) -> list[Instant]:
        return [i for i in self.timeline if i.state != COMPLETED and i.action == action]

    def latest_slices(self) -> list[FileSlice]:
        """Each file group's newest slice whose base instant is completed (or a slice of logs only)."""
        done = {i.timestamp for i in self.completed(WRITES | {"compaction"})}
        pending = {i.timestamp for i in self.pending("compaction")}
        latest: dict[tuple[str, str], FileSlice] = {}
        for s in sorted(self.slices, key=lambda s: s.base_instant):
            if s.base_file is None or s.base_instant in done or s.base_instant in pending:
                latest[(s.partition, s.file_id)] = s
        return sorted(latest.values(), key=lambda s: (s.partition, s.file_id))


def _setting(properties: Mapping[str, str], key: tuple[str, int]) -> int:
    value = properties.get(key[0])
    return int(value) if value is not None and value.isdigit() else key[1]


@dataclass(frozen=True)
class Need:
    """Work one of Hudi's table services would do, and why."""

    service: str  # compaction, clustering, clean, archive
    reason: str
    partition: str | None = None
    procedure: str = ""  # the Spark SQL call that runs it, with Hudi's Spark bundle


@dataclass(frozen=True)
class HudiVerdict:
    needs: list[Need] = field(default_factory=list)

    @property
    def reasons(self) -> list[str]:
        return [f"{n.service}: {n.reason}" for n in self.needs] or ["nothing for Hudi's table services to do"]


def procedure(service: str, table: str) -> str:
    calls = {
        "compaction": f"CALL run_compaction(op => 'scheduleAndExecute', table => '{table}')",
        "clustering": f"CALL run_clustering(table => '{table}')",
        "clean": f"CALL run_clean(table => '{table}')",
        "archive": f"CALL archive_commits(table => '{table}')",
    }
    return calls[service]


def judge(state: HudiTableState, table: str, now: datetime) -> HudiVerdict:
    """What Hudi's table services would do to the table now (the module's rules), per partition where the
    work is a partition's."""
    p = state.properties
    needs: list[Need] = []

    def need(service: str, reason: str, partition: str | None = None) -> None:
        needs.append(Need(service, reason, partition, procedure(service, table)))

    latest = state.latest_slices()
    if state.mor:
        limit = _setting(p, MAX_DELTA_COMMITS)
        for s in latest:
            if len(s.log_files) >= limit:
                need(
                    "compaction",
                    f"file group {s.file_id} has {len(s.log_files)} log files >= {MAX_DELTA_COMMITS[0]} {limit}",
                    s.partition,
                )
        for waiting in state.pending("compaction"):
            age = "" if waiting.time is None else f", {format_duration(now - waiting.time)} ago"
            need("compaction", f"compaction {waiting.timestamp} is {waiting.state}{age} and has not run")
    small = _setting(p, CLUSTERING_SMALL_FILE_LIMIT)
    clustered = state.completed(frozenset({"replacecommit"}))
    since = clustered[-1].timestamp if clustered else ""
    commits_since = sum(1 for i in state.completed() if i.timestamp > since)
    if commits_since >= _setting(p, CLUSTERING_MAX_COMMITS):
        per_partition: dict[str, int] = {}
        for s in latest:
            if s.base_file is not None and s.base_size < small:
                per_partition[s.partition] = per_partition.get(s.partition, 0) + 1
        for partition, count in sorted(per_partition.items()):
            if count >= SMALL_FILES_FOR_CLUSTERING:
                need(
                    "clustering",
                    f"{count} base files under {CLUSTERING_SMALL_FILE_LIMIT[0]} {_mib(small)}, "
                    f"{commits_since} commits since the last clustering",
                    partition,
                )
    retained = _setting(p, COMMITS_RETAINED)
    writes = state.completed()
    if len(writes) > retained:
        earliest = writes[-retained].timestamp  # the oldest commit retained: queries may read the table as of it
        kept = {(s.partition, s.file_id, s.base_instant) for s in latest}
        per_partition = {}
        for s in state.slices:
            if (s.partition, s.file_id, s.base_instant) in kept:
                continue
            newer = [
                o.base_instant
                for o in state.slices
                if (o.partition, o.file_id) == (s.partition, s.file_id) and o.base_instant > s.base_instant
            ]
            # Hudi's cleaner keeps the last version before the oldest retained commit (a query as of that commit
            # reads it): a slice goes once a newer one was written before that commit
            if newer and min(newer) < earliest:
                per_partition[s.partition] = per_partition.get(s.partition, 0) + 1
        for partition, count in sorted(per_partition.items()):
            need(
                "clean",
                f"{count} file slice(s) superseded before the {retained} commits {COMMITS_RETAINED[0]} keeps",
                partition,
            )
    # Hudi's archiver counts the commits timeline (writes, compactions, clusterings), not cleans and rollbacks
    active = len(state.completed())
    keep_max = _setting(p, KEEP_MAX_COMMITS)
    if active > keep_max:
        need("archive", f"{active} completed commits on the active timeline > {KEEP_MAX_COMMITS[0]} {keep_max}")
    return HudiVerdict(needs)


# who runs the table's services (a lakewarden table property): `writer` (Hudi's default: the writers run them
# inline, and lakewarden runs only the plans they scheduled and left), or `lakewarden` (the writers run none:
# lakewarden schedules and runs each service as the table's properties say)
OWNER = ("hudi.table-services.owner", "writer")
OWNERS = ("writer", "lakewarden")
LOCK_PROVIDER = "hoodie.write.lock.provider"
# whether a writer runs a service inline, with the default a Spark writer has (a batch write to a merge-on-read
# table compacts inline; clean and archive follow every commit)
INLINE = {
    "compaction": ("hoodie.compact.inline", True),
    "clustering": ("hoodie.clustering.inline", False),
    "clean": ("hoodie.clean.automatic", True),
    "archive": ("hoodie.archive.automatic", True),
}
# the services that leave a plan (a requested instant) on the timeline for any process to execute
PLANNED_SERVICES = {"compaction": "compaction", "clustering": "clustering"}
# the order one process runs them in: what compaction and clustering replace, clean deletes; archive goes last
SERVICE_ORDER = ("compaction", "clustering", "clean", "archive")


# the table's Hudi settings a service is run with (Hudi's write configuration of the services, their strategies
# and the lock): the table's own layout (`hoodie.table.*` and the like) is Hudi's to read from the table itself
WRITE_OPTION_PREFIXES = (
    "hoodie.compact.",
    "hoodie.compaction.",
    "hoodie.clustering.",
    "hoodie.clean.",
    "hoodie.cleaner.",
    "hoodie.keep.",
    "hoodie.archive.",
    "hoodie.write.lock.",
    "hoodie.write.concurrency.",
    "hoodie.parquet.",
    "hoodie.metadata.",
)
# the layout's own settings under those prefixes, which hoodie.properties holds
TABLE_SETTINGS = frozenset({"hoodie.compaction.payload.class", "hoodie.compaction.record.merger.strategy"})


def write_options(properties: Mapping[str, str]) -> dict[str, str]:
    """The settings of the table's services among its properties (WRITE_OPTION_PREFIXES). The metadata table stays
    as the table has it: Hudi's services enable it by default, and would build one on a table whose writers keep
    none (which those writers then delete again)."""
    options = {
        k: v for k, v in sorted(properties.items()) if k.startswith(WRITE_OPTION_PREFIXES) and k not in TABLE_SETTINGS
    }
    if "hoodie.metadata.enable" not in options:
        has_metadata = bool(properties.get("hoodie.table.metadata.partitions", "").strip())
        options["hoodie.metadata.enable"] = "true" if has_metadata else "false"
    return options


@dataclass(frozen=True)
class ServiceRun:
    """One of Hudi's table services for lakewarden to run: a plan a writer scheduled (`instant`), or the
    service scheduled and run at once (`instant` None)."""

    service: str
    instant: str | None
    reason: str


@dataclass(frozen=True)
class ServicePlan:
    """What lakewarden runs of the table's needs, and why it leaves the others to the writers."""

    runs: list[ServiceRun] = field(default_factory=list)
    left: list[str] = field(default_factory=list)


def _flag(properties: Mapping[str, str], key: tuple[str, bool]) -> bool:
    value = properties.get(key[0])
    return key[1] if value is None else value.strip().lower() == "true"


def owner(properties: Mapping[str, str]) -> str:
    value = properties.get(OWNER[0], OWNER[1]).strip().lower()
    return value if value in OWNERS else OWNER[1]


# the table's last successful processes whose idle services count: each service can have been run by one of them
LAST_RUNS = 4


@dataclass(frozen=True)
class LastRun:
    """What lakewarden's last run of the table's services found: the services Hudi found nothing to do for, and
    the newest instant of the timeline then."""

    idle_services: frozenset[str] = frozenset()
    timeline_tail: str = ""

    @staticmethod
    def of(summaries: Sequence[Mapping[str, Any] | None]) -> LastRun:
        """From the summaries of the table's last processes, newest first (each its tasks' HudiServiceResults
        merged): the services found idle by any of them on the timeline the newest one left."""
        known = [s for s in summaries if s and s.get("timeline_tail")]
        if not known:
            return LastRun()
        tail = str(known[0]["timeline_tail"])
        idle = {service for s in known if s["timeline_tail"] == tail for service in s.get("idle_services") or ()}
        return LastRun(frozenset(idle), tail)

    def idle(self, state: HudiTableState) -> frozenset[str]:
        """The services not to schedule again: Hudi found no work for them and the timeline has not moved since
        (its rules and lakewarden's can disagree; Hudi's decide)."""
        newest = max((i.timestamp for i in state.timeline), default="")
        return self.idle_services if self.timeline_tail and newest == self.timeline_tail else frozenset()


def plan_services(state: HudiTableState, verdict: HudiVerdict, last: LastRun | None = None) -> ServicePlan:
    """Of the verdict's needs, what lakewarden may run under Hudi's concurrency model:
    - a compaction or clustering plan a writer requested and then went on writing without running (Hudi's async
      pattern: a writer running it inline would have run it before its next commit) is executed;
    - a service is scheduled by lakewarden only where the table allows another process to: lakewarden owns the
      table's services (`hudi.table-services.owner`), or the table names a lock provider and its writers do not
      run that service inline;
    - a plan in flight is left alone (another process runs it), as is anything a writer runs inline;
    - a service Hudi found nothing to do for on lakewarden's last run is not scheduled again until the timeline
      moves (`last`).
    Each service is run once per process, in SERVICE_ORDER."""
    p = state.properties
    idle = last.idle(state) if last is not None else frozenset()
    owned = owner(p) == "lakewarden"
    locked = bool(p.get(LOCK_PROVIDER))
    writes = state.completed()
    last_write = writes[-1].timestamp if writes else ""
    runs: dict[str, ServiceRun] = {}
    left: list[str] = []
    for service, action in PLANNED_SERVICES.items():
        for waiting in state.pending(action):
            if service in runs:
                break
            if waiting.state == INFLIGHT:
                left.append(f"{service} {waiting.timestamp} is inflight: the process running it finishes it")
            elif owned or waiting.timestamp < last_write or not _flag(p, INLINE[service]):
                runs[service] = ServiceRun(service, waiting.timestamp, f"{service} {waiting.timestamp} was requested")
            else:
                left.append(f"{service} {waiting.timestamp} was requested just now: its writer may run it inline")
    for need in verdict.needs:
        service = need.service
        if service in runs or any(r.startswith(f"{service} ") for r in left):
            continue
        if service in PLANNED_SERVICES and state.pending(PLANNED_SERVICES[service]):
            continue  # the plans above are the work
        if service in idle:
            left.append(f"{service}: Hudi found nothing to do when lakewarden last ran it, and no instant came since")
            continue
        inline = INLINE[service]
        # owning the services, lakewarden runs any the table does not say its writers run inline; beside writers
        # that hold a lock, any they do not run inline by Hudi's defaults
        said_inline = p.get(inline[0], "").strip().lower() == "true"
        if (owned and not said_inline) or (locked and not _flag(p, inline)):
            runs[service] = ServiceRun(service, None, need.reason)
        elif owned or locked:
            left.append(f"{service}: the writers run it inline ({inline[0]})")
        else:
            left.append(
                f"{service}: the writers own the table's services; lakewarden runs it when {OWNER[0]} is "
                f"lakewarden or the table names a {LOCK_PROVIDER} and {inline[0]} is false"
            )
    ordered = [runs[s] for s in SERVICE_ORDER if s in runs]
    return ServicePlan(ordered, list(dict.fromkeys(left)))


def _mib(n: int) -> str:
    return f"{n / 1048576:.0f} MiB"
